"""grpo_helpers.classroom.own_run: a learner's loop's metrics as a frame (its steps
numbered when it returns none), the panels they draw, and whether the run retraced
the recorded run of the same settings."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from grpo_helpers import plotting
from grpo_helpers.classroom import own_run
from grpo_helpers.results import recorded_runs


def test_a_history_without_step_is_numbered_and_one_with_it_kept():
    rows = [{"reward_mean": 0.1, "datums": 3}, {"reward_mean": 0.2, "datums": 0}]
    frame = own_run.history_frame(rows)
    assert frame["step"].tolist() == [0, 1]
    assert frame["reward_mean"].tolist() == [0.1, 0.2]
    kept = own_run.history_frame([{"step": 5, "reward_mean": 0.3}])
    assert kept["step"].tolist() == [5]
    assert own_run.history_frame(frame).equals(frame)


def test_the_panels_are_those_the_loop_returns_and_the_others_are_named(capsys):
    frame = own_run.history_frame([{"reward_mean": 0.1, "accuracy": 0.0}])
    assert own_run.panels(frame) == ["reward_mean", "accuracy"]
    said = capsys.readouterr().out
    assert said.startswith("2 of 6 panels drawn")
    assert "hit_max_frac" in said and "reward_mean" not in said
    full = pd.DataFrame({c: [0.0] for c, *_ in plotting.RUN_PANELS})
    assert len(own_run.panels(full)) == 6
    assert capsys.readouterr().out == ""


def test_plot_run_curves_draws_only_the_panels_asked_for():
    frame = own_run.history_frame([{"reward_mean": r} for r in (0.1, 0.2, 0.4)])
    axes = plotting.plot_run_curves({"yours": frame}, columns=["reward_mean"])
    assert len(axes) == 1 and axes[0].get_title().startswith("reward")
    plt.close("all")
    with pytest.raises(ValueError, match="none of the columns"):
        plotting.plot_run_curves({"yours": frame}, columns=["loss"])


def test_a_retrace_says_how_many_steps_equal_the_recorded_run():
    recorded = recorded_runs.load_run()
    config = own_run._recorded_config(recorded)
    same = recorded.metrics[["step", "reward_mean", "datums"]]
    assert "retraced the recorded run (seed 0) on all 30 steps" in own_run.retrace(
        same, config, recorded
    )
    parted = same.copy()
    parted.loc[7, "datums"] += 1
    said = own_run.retrace(parted, config, recorded)
    assert "on 7 of 30 steps, then parted from it at step 7" in said
    other = dataclasses.replace(config, seed=1, temperature=0.7)
    said = own_run.retrace(same, other, recorded)
    assert said.startswith("no retrace to check") and "temperature, seed" in said


def test_the_notebooks_settings_are_the_recorded_runs(monkeypatch):
    """Notebook 10's full-mode parameters and settings cells make a run whose
    settings are the recorded run's (the reward under its taught name,
    ``shown_work``, is the recorded ``worked_v2``): its retrace is checked."""
    import nbformat

    from grpo_helpers import settings
    from grpo_helpers.classroom import course

    monkeypatch.setattr(settings, "FAST", False)
    notebook = nbformat.read(course.NOTEBOOKS / "10_grpo_whole.ipynb", as_version=4)
    cells = [c.source for c in notebook.cells if c.cell_type == "code"]
    parameters = next(c for c in cells if "run_name =" in c)
    run_settings = next(c for c in cells if "run_settings = {" in c)
    namespace: dict = {}
    exec("from grpo_helpers import config, presets, settings\n" + parameters, namespace)
    exec(run_settings.split("run_config =")[0], namespace)
    config = own_run._recorded_config(recorded_runs.load_run())
    config = dataclasses.replace(config, **namespace["run_settings"])
    said = own_run.retrace([], config, recorded_runs.load_run())
    assert not said.startswith("no retrace"), said
    assert namespace["reward"] == "shown_work" and namespace["seed"] == 0


def test_notebook_10_trains_a_passing_loop_that_returns_no_step(tmp_path, capsys):
    """Notebook 10's code cells in fast mode, with a right loop that returns no
    ``step`` in place of the exercise and its check passed: the training cell
    runs to its end, draws the panels the loop returns and says which it cannot."""
    import nbformat
    from wrong_loops import loop

    from grpo_helpers import settings
    from grpo_helpers.classroom import course

    if not settings.FAST:
        pytest.skip("runs notebook 10's cells in fast mode (GRPO_FAST=1)")
    notebook = nbformat.read(course.NOTEBOOKS / "10_grpo_whole.ipynb", as_version=4)
    namespace: dict = {}
    for cell in notebook.cells:
        tags = cell.metadata.get("tags", [])
        if cell.cell_type != "code" or "train_loop_check" in cell.source:
            continue
        if "exercise" in tags:
            namespace |= {"train_loop": loop(with_step=False), "loop_ok": True}
            continue
        source = cell.source.replace(
            'run_name = "nb10-loop"', f'run_name = "{tmp_path / "nb10"}"'
        )
        exec(source, namespace)
    plt.close("all")
    said = capsys.readouterr().out
    assert "rolling mean reward stayed inside" in said
    assert "3 of 6 panels drawn: your loop returns no answers in a box" in said
    assert "no retrace to check" in said  # fast mode: the tiny random model
