"""Rerunning a recorded run: the replay reproduces an unchanged run step for step,
and names the first step of a changed one (grpo_helpers.results.replay)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from grpo_helpers.results import replay


def _frame(rewards, grads):
    return pd.DataFrame(
        {"step": range(len(rewards)), "reward_mean": rewards, "grad_norm": grads}
    )


def test_first_difference_names_the_first_step_and_metric():
    recorded = _frame([0.0, 0.5, 0.25], [math.nan, 2.0, 3.0])
    assert replay.first_difference(recorded, recorded.copy()) is None
    later = recorded.assign(reward_mean=[0.0, 0.5, 0.3])
    assert replay.first_difference(recorded, later) == {
        "step": 2,
        "column": "reward_mean",
        "recorded": 0.25,
        "rerun": 0.3,
    }
    grad = recorded.assign(grad_norm=[math.nan, 2.0 * (1 + 1e-6), 3.0])
    assert replay.first_difference(recorded, grad)["column"] == "grad_norm"
    # a step that made no update has no gradient norm: it agrees only with another
    updated = recorded.assign(grad_norm=[1.0, 2.0, 3.0])
    assert replay.first_difference(recorded, updated)["step"] == 0
    # the records' 10 significant digits are not a difference
    rounded = recorded.assign(grad_norm=[math.nan, 2.0 + 1e-11, 3.0])
    assert replay.first_difference(recorded, rounded) is None


def test_record_threads_reads_the_provenance_or_the_hardware_line():
    assert replay.record_threads({"hardware": "2 CPU cores (1 torch threads)"}) == 1
    numeric = {"provenance": {"numeric": {"torch_threads": 2}}, "hardware": ""}
    assert replay.record_threads(numeric) == 2
    assert replay.record_threads({"hardware": "GPU H200"}) is None


@pytest.fixture(scope="module")
def tiny_record(tmp_path_factory):
    """Three steps of the tiny model, recorded as the ablation bench records."""
    record = replay.record_run(tmp_path_factory.mktemp("record"), steps=3)
    # a step with a gradient to compare
    assert any(step["updated"] for step in record["metrics"])
    return record


@pytest.mark.slow
def test_a_replay_of_an_unchanged_run_finds_no_difference(tiny_record, tmp_path):
    rerun = replay.replay(tiny_record, 3, tmp_path / "rerun")
    recorded = pd.DataFrame(tiny_record["metrics"])
    assert replay.first_difference(recorded, rerun) is None
    # ... and a record changed at one step is found at that step
    changed = recorded.copy()
    changed.loc[2, "reward_mean"] += 1e-3
    assert replay.first_difference(changed, rerun)["step"] == 2


@pytest.mark.slow
def test_a_replay_with_a_setting_changed_finds_where_it_parts(tiny_record, tmp_path):
    rerun = replay.replay(tiny_record, 3, tmp_path / "rerun", temperature=0.9)
    first = replay.first_difference(pd.DataFrame(tiny_record["metrics"]), rerun)
    assert first is not None and first["step"] == 0


def test_replay_refuses_more_steps_than_recorded(tiny_record, tmp_path):
    with pytest.raises(ValueError, match="between 1 and the record's 3"):
        replay.replay(tiny_record, 4, tmp_path / "rerun")


def test_load_record_reads_a_run_directory(tiny_record):
    record = replay.load_record(tiny_record["settings"]["run_dir"])
    assert record["settings"]["steps"] == 3
    assert len(record["metrics"]) == 3
    with pytest.raises(FileNotFoundError, match="No recorded run"):
        replay.load_record("/nonexistent/run")
