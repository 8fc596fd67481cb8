"""Dynamic sampling (DAPO, arXiv 2503.14476, section 3.2): a step whose groups do
not teach draws further batches of questions, within a bound.

On the tiny model: a step short of groups that teach draws the next questions of
the split, in the run's order, up to ``dynamic_sampling`` extra batches, and trains
on the first ``batch_size`` groups that teach, each group sampled with a seed of
its own; what it drew and discarded is in its metrics and in ``samples.jsonl``; the
next step starts after the questions it drew; the async loop draws the same
questions; a run killed during an extra batch resumes to the uninterrupted run; bad
values are refused by name. With the bound 0 the loop sends the demo scripts'
Datums: notebook 10's check holds ``train_sync`` against an independent loop
(``tests/classroom/test_self_checks.py``, ``train_loop``).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
import torch
from spies import EngineSpy
from training_runs import TIMING, final_lora, subprocess_env

from grpo_helpers import data, run_files, training
from grpo_helpers.classroom.loop_check import CHECK_RUN
from grpo_helpers.config import GRPOConfig
from grpo_helpers.engines import connect
from grpo_helpers.trl import mapping

#: Notebook 10's check run with a seed whose steps 0, 1 and 2 each have a
#: degenerate group among their first batch.
DYNAMIC = CHECK_RUN | {"seed": 6, "steps": 3, "dynamic_sampling": 2, "save_every": 1}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dynamic") / "run"
    training.train(GRPOConfig(**DYNAMIC, run_dir=str(folder)), progress=False)
    return folder


def test_a_step_short_of_teaching_groups_draws_the_next_questions(run):
    config = GRPOConfig(**DYNAMIC, run_dir=str(run))
    metrics, samples = run_files.load_metrics(run), run_files.load_samples(run)
    size, batch = len(data.load_split(config, "train")), config.batch_size
    assert (metrics["batches_drawn"] > 1).any(), "no step drew an extra batch"
    assert (metrics["batches_drawn"] <= 1 + config.dynamic_sampling).all()
    position = 0
    for _, row in metrics.iterrows():
        drawn = int(row["batches_drawn"])
        want = [(position * batch + k) % size for k in range(drawn * batch)]
        step = samples[samples["step"] == row["step"]]
        assert step["question_index"].drop_duplicates().tolist() == want
        assert row["groups_sampled"] == drawn * batch
        teaching = step.groupby("question_index")["reward"].agg(
            lambda r: r.max() != r.min()
        )
        trained = min(int(teaching.sum()), batch)
        assert row["datums"] == trained * config.group_size
        assert row["groups_discarded"] == drawn * batch - trained
        assert row["refill_samples"] == (drawn - 1) * batch * config.group_size
        # an extra batch only where the ones before it left the step short
        first_rounds = teaching.iloc[: (drawn - 1) * batch]
        assert first_rounds.sum() < batch
        kept = step.loc[~step["discarded"], "question_index"].unique()
        assert len(kept) == trained and teaching[kept].all()
        position += drawn


def test_the_async_loop_draws_the_same_questions(run, tmp_path):
    config = GRPOConfig(**DYNAMIC, run_dir=str(tmp_path / "async"))
    training.train(config, "async", progress=False)
    sync, other = (
        run_files.load_metrics(run),
        run_files.load_metrics(tmp_path / "async"),
    )
    assert other["batches_drawn"].tolist() == sync["batches_drawn"].tolist()
    for name in (run, tmp_path / "async"):
        assert "discarded" in run_files.load_samples(name)
    key = ["step", "question_index"]
    assert (
        run_files.load_samples(tmp_path / "async")[key]
        .drop_duplicates()
        .values.tolist()
        == run_files.load_samples(run)[key].drop_duplicates().values.tolist()
    )


class _SeedsSeen:
    """A sampler that writes down the seed of every ``sample`` call it gets."""

    def __init__(self, inner, seen: list[int]):
        self._inner, self._seen = inner, seen

    def sample(self, *args, **kwargs):
        self._seen.append(kwargs["sampling_params"].seed)
        return self._inner.sample(*args, **kwargs)

    async def sample_async(self, *args, **kwargs):
        self._seen.append(kwargs["sampling_params"].seed)
        return await self._inner.sample_async(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_extra_batch_samples_with_seeds_of_its_own(tmp_path, mode):
    """Step 0 draws an extra batch: each of its groups, first batch and extra
    one, is sampled with a seed no other group of the step had, so a refilled
    group does not repeat the draws of the group it replaces."""
    samplers: list[list[int]] = []

    def wrap(sampler):
        samplers.append([])
        return _SeedsSeen(sampler, samplers[-1])

    spy = EngineSpy(connect("local", run_dir=tmp_path / "engine"), wrap)
    config = GRPOConfig(**(DYNAMIC | {"steps": 1}), run_dir=str(tmp_path / "run"))
    if mode == "sync":
        training.train_sync(config, spy, progress=False)
    else:
        asyncio.run(training.train_async(config, spy, progress=False))
    drawn = run_files.load_metrics(tmp_path / "run")["groups_sampled"].iloc[0]
    assert drawn > config.batch_size, "step 0 drew no extra batch"
    seeds = [seed for seen in samplers for seed in seen]
    assert len(seeds) == drawn and len(set(seeds)) == drawn, seeds


#: Kill the run (SIGKILL) while it samples the first extra batch of step ``at``.
KILL_IN_REFILL = textwrap.dedent(
    """
    import json, os, signal, sys
    from grpo_helpers import training
    from grpo_helpers.config import GRPOConfig

    config = GRPOConfig(**json.loads(sys.argv[1]))
    at = int(sys.argv[2])
    real = training._sample_groups

    def sample_groups(loop, sampler, step, round_=0):
        if step == at and round_ == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(loop, sampler, step, round_)

    training._sample_groups = sample_groups
    training.train(config, "sync", progress=False)
    """
)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_killed_during_an_extra_batch_resumes_to_the_same_run(run, tmp_path):
    metrics = run_files.load_metrics(run)
    at = int(metrics.loc[metrics["batches_drawn"] > 1, "step"].iloc[-1])
    assert at > 0, "the kill must come after a step whose questions it must skip"
    killed = tmp_path / "killed"
    config = GRPOConfig(**DYNAMIC, run_dir=str(killed))
    done = subprocess.run(
        [sys.executable, "-c", KILL_IN_REFILL, json.dumps(config.to_dict()), str(at)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    training.train(config, "sync", resume=True, progress=False)
    want = run_files.load_metrics(run).drop(columns=list(TIMING))
    got = run_files.load_metrics(killed).drop(columns=list(TIMING))
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-5, atol=1e-6)
    pd.testing.assert_frame_equal(
        run_files.load_samples(killed), run_files.load_samples(run)
    )
    a, b = final_lora(run), final_lora(killed)
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=1e-5, atol=1e-6, msg=key)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dynamic_sampling": -1}, r"dynamic_sampling must be in \[0, 100\]"),
        ({"dynamic_sampling": 1.5}, "dynamic_sampling must be an integer"),
        ({"dynamic_sampling": 2, "all_data": True}, "choose one of the two"),
    ],
)
def test_bad_values_are_refused_by_name(changes, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**(CHECK_RUN | changes))


def test_the_trl_export_refuses_it_and_pytrio_runs_it():
    on = GRPOConfig(**(CHECK_RUN | {"dynamic_sampling": 2}))
    assert [name for name, _ in mapping.refusals(on)] == ["dynamic_sampling"]
    # client-side: a PyTRIO run takes it as it is
    GRPOConfig(**(CHECK_RUN | {"dynamic_sampling": 2, "backend": "pytrio"}))
