"""The async loop one step off-policy (``GRPOConfig.max_steps_off_policy = 1``):
step k+1 is sampled while step k trains, from the weights before step k's update.

The gap the update's ratio sees is then two gaps, measured apart: the sampler's
numerics (``mismatch_*``, scored by a training client at the sampler's weights) and
the staleness (``stale_*``, the trainer now against then). The run draws the same
questions with the same seeds as the on-policy run; the sync loop refuses it.
"""

from __future__ import annotations

from unittest.mock import patch

import pytest

from grpo_helpers import run_files, training
from grpo_helpers.step_math import STALENESS_METRICS


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One async run on-policy and one a step off-policy, same settings (4 steps,
    a learning rate large enough that an update moves the logprobs)."""
    from tiny import tiny

    from grpo_helpers.config import GRPOConfig

    out = {}
    real = training._Run.batch
    for lag in (0, 1):
        folder = tmp_path_factory.mktemp(f"lag{lag}")
        config = GRPOConfig(
            **tiny(steps=4, learning_rate=1e-2, max_steps_off_policy=lag),
            run_dir=str(folder / "run"),
        )
        drawn: dict[int, list[int]] = {}

        def batch(self, step, round_=0, ahead=0, drawn=drawn):
            rows = real(self, step, round_, ahead)
            drawn[step] = [index for index, *_ in rows]
            return rows

        with patch.object(training._Run, "batch", batch):
            result = training.train(config, mode="async", progress=False)
        out[lag] = (result.metrics, run_files.load_samples(folder / "run"), drawn)
    return out


def test_every_step_records_its_staleness_and_on_policy_it_is_zero(runs):
    metrics = runs[0][0]
    assert set(STALENESS_METRICS) <= set(metrics.columns)
    updated = metrics[metrics["updated"]]
    assert (updated["staleness"] == 0).all()
    assert (updated["stale_max"] == 0).all()


def test_off_policy_the_gap_is_staleness_not_the_samplers_numerics(runs):
    """After an update, a step sampled one update behind: the trainer moved
    (``stale_max`` well above float32's reach, the ratio away from 1) while the
    sampler and a trainer at its weights still agree (``mismatch_max`` tiny)."""
    metrics = runs[1][0]
    assert metrics["staleness"].tolist()[1:] == [1.0] * 3
    after_update = metrics[metrics["updated"].shift(1, fill_value=False)]
    behind = after_update[after_update["updated"]]
    assert len(behind), "no step after an update made an update"
    assert (behind["stale_max"] > 1e-3).all()
    assert (behind["stale_kl"] > 0).all()
    assert (behind["mismatch_max"] < 1e-4).all()
    assert ((behind["ratio_mean"] - 1).abs() > 1e-5).all()


def test_off_policy_draws_the_same_questions_with_the_same_seeds(runs):
    """Step k+1, drawn while step k trains, asks the questions the on-policy run
    asks there; the first step, sampled on-policy in both runs, is the same
    completions."""
    assert runs[1][2] == runs[0][2]
    assert len(set(map(tuple, runs[0][2].values()))) == 4  # a new batch each step
    on, off = (runs[lag][1] for lag in (0, 1))
    assert (
        on[on["step"] == 0]["text"].tolist() == off[off["step"] == 0]["text"].tolist()
    )


def test_the_sync_loop_refuses_to_run_off_policy(tiny_config):
    with pytest.raises(ValueError, match="async loop"):
        training.train_sync(tiny_config(max_steps_off_policy=1), progress=False)
