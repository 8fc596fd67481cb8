"""The full GRPO objective's knobs: length normalisation, the KL penalty, mu > 1
updates with the clipped ratio, and the defaults that reproduce the demo loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
import pytrio as trio

from grpo_helpers import advantages, training
from grpo_helpers.config import GRPOConfig
from grpo_helpers.datum import RolloutSample, build_grpo_datum
from grpo_helpers.engines import connect

# ------------------------------------------------------------------ pure functions


def test_length_scales_by_hand():
    lengths = [2, 4, 10]
    assert advantages.length_scales(lengths, "token_sum") == [1.0, 1.0, 1.0]
    assert advantages.length_scales(lengths, "sequence_mean") == [0.5, 0.25, 0.1]
    assert advantages.length_scales(lengths, "token_mean") == [1 / 16] * 3
    assert advantages.length_scales(lengths, "constant", max_tokens=64) == [1 / 64] * 3
    with pytest.raises(ValueError, match="max_tokens"):
        advantages.length_scales(lengths, "constant")
    with pytest.raises(ValueError, match="Unknown normalization 'mean'"):
        advantages.length_scales(lengths, "mean")
    with pytest.raises(ValueError, match=">= 1"):
        advantages.length_scales([3, 0], "sequence_mean")


def test_what_each_normalisation_does_to_long_and_short_completions():
    """Token-sum weighs a 10-token completion 10 times a 1-token one; sequence
    mean makes both weigh the same in total; token mean and constant weigh every
    token the same (here: the per-completion totals are 1:10 again)."""
    lengths = [1, 10]
    totals = {
        mode: [
            n * s
            for n, s in zip(
                lengths, advantages.length_scales(lengths, mode, 16), strict=True
            )
        ]
        for mode in advantages.NORMALIZATIONS
    }
    assert totals["token_sum"] == [1, 10]
    assert totals["sequence_mean"] == [1, 1]
    assert totals["token_mean"] == pytest.approx([1 / 11, 10 / 11])
    assert totals["constant"] == pytest.approx([1 / 16, 10 / 16])


def test_kl_penalty_by_hand():
    sampled = [[-1.0, -2.0], [-3.0]]
    reference = [[-1.5, -1.0], [-3.5]]
    # d = sampled - reference = [0.5, -1.0], [0.5]; mean d = 0
    changes, metrics = advantages.kl_penalty(sampled, reference, 0.1)
    assert changes[0] == pytest.approx([-0.05, 0.1])
    assert changes[1] == pytest.approx([-0.05])
    assert metrics["kl_k1"] == pytest.approx(0.0)
    k3 = (math.exp(-0.5) + 0.5 - 1) * 2 + (math.exp(1.0) - 1.0 - 1)
    assert metrics["kl_k3"] == pytest.approx(k3 / 3)
    # The changes always sum to zero over the batch, and vanish with kl_coef 0.
    assert sum(sum(c) for c in changes) == pytest.approx(0.0)
    zero, _ = advantages.kl_penalty(sampled, reference, 0.0)
    assert zero == [[0.0, 0.0], [0.0]]
    with pytest.raises(ValueError, match="completion 1"):
        advantages.kl_penalty(sampled, [[-1.0, -1.0], [-1.0, -2.0]], 0.1)


def _group(prompt, lengths, rewards):
    samples = [
        RolloutSample(
            list(range(10, 10 + n)), [-0.5] * n, "", r, r - float(np.mean(rewards))
        )
        for n, r in zip(lengths, rewards, strict=True)
    ]
    return training.PromptGroup(0, prompt, "1", samples)


def test_defaults_build_exactly_the_demo_datums():
    groups = [
        _group([1, 2, 3], [2, 5], [1.0, 0.0]),
        _group([4, 5], [3, 3], [0.5, 0.5]),  # degenerate: skipped
    ]
    config = GRPOConfig()
    assert (config.loss_fn, config.updates_per_batch, config.kl_coef) == (
        "importance_sampling",
        1,
        0.0,
    )
    assert config.normalization == "token_sum" and config.loss_fn_config is None
    got = training.build_step_datums(groups, config.normalization, config.max_tokens)
    want = [build_grpo_datum([1, 2, 3], s) for s in groups[0].samples]
    assert [d.model_dump() for d in got] == [d.model_dump() for d in want]


def test_normalisation_and_kl_change_the_datum_advantages():
    group = _group([1, 2, 3], [2, 4], [1.0, 0.0])  # advantages +0.5, -0.5
    datums = training.build_step_datums([group], "sequence_mean", 64)
    adv = [d.loss_fn_inputs["advantages"].tolist() for d in datums]
    assert adv[0] == [0.0, 0.0, 0.25, 0.25]
    assert adv[1] == pytest.approx([0.0, 0.0] + [-0.125] * 4)
    changes = [[0.1, -0.1], [0.0, 0.0, 0.2, -0.2]]
    datums = training.build_step_datums([group], "token_sum", 64, changes)
    adv = [d.loss_fn_inputs["advantages"].tolist() for d in datums]
    assert adv[0] == pytest.approx([0.0, 0.0, 0.6, 0.4])
    assert adv[1] == pytest.approx([0.0, 0.0, -0.5, -0.5, -0.3, -0.7])
    with pytest.raises(ValueError, match="KL changes"):
        training.build_step_datums([group], "token_sum", 64, changes[:1])


class _Output:
    def __init__(self, logprobs):
        self.loss_fn_outputs = [
            {"logprobs": trio.types.TensorData(data=lp, dtype="float32")}
            for lp in logprobs
        ]


def test_ratio_metrics_count_the_tokens_the_clip_stops():
    prompt = [1, 2]
    up = RolloutSample([7, 8], [-1.0, -1.0], "", 1.0, 1.0)
    down = RolloutSample([9], [-1.0], "", 0.0, -1.0)
    datums = [build_grpo_datum(prompt, s) for s in (up, down)]
    # learner logprobs at positions 1.. : ratios exp(0.5) = 1.65 (clipped for A>0),
    # exp(0) = 1, and exp(-0.5) = 0.61 for A<0 (clipped)
    out = _Output([[0.0, -0.5, -1.0], [0.0, -1.5]])
    m = training.ratio_metrics([out], datums, 0.8, 1.2)
    assert m["clip_frac"] == pytest.approx(2 / 3)
    assert m["ratio_mean"] == pytest.approx((math.exp(0.5) + 1.0 + math.exp(-0.5)) / 3)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("loss_fn", "dro", "unknown loss_fn 'dro'"),
        ("updates_per_batch", 0, "updates_per_batch must be >= 1"),
        ("clip_low", 1.5, "clip bounds"),
        ("kl_coef", -0.1, "kl_coef must be >= 0"),
        ("normalization", "mean", "unknown normalization 'mean'"),
    ],
)
def test_bad_objective_settings_are_clear_errors(field, value, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**{field: value})


# ------------------------------------------------------------------ on the engine

TINY = dict(
    base_model="tiny-random",
    dataset="arithmetic",
    backend="local",
    steps=2,
    batch_size=2,
    group_size=4,
    max_tokens=6,
    lora_rank=4,
    reward="shaped",
    save_every=0,
)


def test_defaults_report_ratio_one_and_no_kl(tmp_path):
    config = GRPOConfig(**TINY, run_dir=str(tmp_path / "run"))
    metrics = training.train_sync(config, progress=False).metrics
    updated = metrics[metrics["updated"]]
    assert len(updated) > 0
    assert np.allclose(updated["ratio_mean"], 1.0, atol=1e-3)
    assert (updated["clip_frac"] == 0).all() and (updated["updates"] == 1).all()
    assert metrics["kl_k1"].isna().all()
    assert (metrics["entropy"] > 0).all()


def test_ppo_with_two_updates_clips_ratios_pushed_out_of_bounds(tmp_path):
    config = GRPOConfig(
        **TINY,
        loss_fn="ppo",
        updates_per_batch=2,
        learning_rate=5e-2,
        clip_low=0.9,
        clip_high=1.1,
        run_dir=str(tmp_path / "run"),
    )
    assert config.loss_fn_config == {
        "clip_low_threshold": 0.9,
        "clip_high_threshold": 1.1,
    }
    metrics = training.train_sync(config, progress=False).metrics
    updated = metrics[metrics["updated"]]
    assert (updated["updates"] == 2).all()
    # The first update is on-policy (ratio 1); the second sees the moved policy.
    assert (updated["clip_frac"] > 0).any()
    assert (np.abs(updated["ratio_mean"] - 1) > 1e-3).any()


def test_kl_to_the_base_model_starts_at_zero_and_then_grows(tmp_path):
    service = connect("local", run_dir=tmp_path / "engine")
    config = GRPOConfig(
        **{**TINY, "steps": 3},
        kl_coef=0.1,
        learning_rate=3e-2,
        run_dir=str(tmp_path / "run"),
    )
    assert config.needs_reference
    metrics = training.train_sync(config, service, progress=False).metrics
    kl = metrics.dropna(subset=["kl_k1"])
    assert len(kl) >= 2
    # Step 0 samples from the untrained policy, which is the base model.
    first = kl.iloc[0]
    if first["step"] == 0:
        assert abs(first["kl_k1"]) < 1e-3 and first["kl_k3"] < 1e-6
    assert (kl["kl_k3"] >= 0).all()
    assert kl["kl_k3"].iloc[-1] > 1e-4  # the policy moved away from the base
