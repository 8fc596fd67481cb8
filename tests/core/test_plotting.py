"""grpo_helpers.plotting: the figures read recorded data and label what they show.

Every figure is also drawn by the notebooks that use it, executed once per session
(``tests/notebooks/test_executed.py``) and shown on the course site
(``tests/classroom/test_course.py``).
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from grpo_helpers import plotting
from grpo_helpers.results import recorded_runs


def test_the_run_curves_plot_both_runs_with_their_labels():
    run = recorded_runs.load_run()
    axes = plotting.plot_run_curves(
        {"your run": run.metrics.head(3), run.label: run.metrics}
    )
    labels = axes[0].get_legend_handles_labels()[1]
    assert labels == ["your run", "recorded run"] == ["your run", run.label]
    assert run.caption.startswith("python bench/cpu_grpo_demo.py")
    plt.close("all")


def test_plot_mismatch_draws_the_runs_that_logged_the_gap():
    """One line per run with ``mismatch_mean``; an older run without it, and steps
    that trained nothing (NaN), draw no point."""
    import math

    import pandas as pd

    from grpo_helpers import plotting

    logged = pd.DataFrame({"step": [0, 1, 2], "mismatch_mean": [math.nan, 1e-6, 0.3]})
    older = pd.DataFrame({"step": [0, 1], "reward_mean": [0.1, 0.2]})
    ax = plotting.plot_mismatch({"new": logged, "older": older})
    (line,) = ax.get_lines()
    assert line.get_label() == "new" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["new"]


def test_the_live_plot_draws_the_gap_and_the_staleness_when_asked():
    """``LivePlot(mismatch=True)`` adds the sampler/trainer panel; an off-policy
    run's staleness gap is a second line there, an on-policy run's (all 0) none."""
    import pandas as pd

    from grpo_helpers import plotting

    metrics = pd.DataFrame(
        {
            "step": [0, 1, 2],
            "reward_mean": [0.1, 0.2, 0.3],
            "accuracy": [0.0, 0.1, 0.2],
            "frac_degenerate": [0.5, 0.5, 0.0],
            "mismatch_mean": [1e-7, 2e-7, 1e-7],
            "stale_mean": [0.0, 3e-3, 4e-3],
        }
    )
    fig = plotting.LivePlot(mismatch=True).figure(metrics)
    panel = fig.axes[-1]
    assert len(fig.axes) == 2 and panel.get_title().startswith("sampler vs trainer")
    labels = [line.get_label() for line in panel.get_lines()]
    assert labels == ["your run", "your run: staleness"]
    on_policy = metrics.assign(stale_mean=0.0)
    panel = plotting.LivePlot(mismatch=True).figure(on_policy).axes[-1]
    assert [line.get_label() for line in panel.get_lines()] == ["your run"]
    plt.close("all")
