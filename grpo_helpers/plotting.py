"""Every figure of the series, in one style: ``ax=None`` in, the axes out.

Plots read data (a metrics DataFrame, ``metrics.jsonl`` through
:mod:`grpo_helpers.run_files`, evaluation summaries), never the training objects, so
a finished run directory can be plotted again later.

The module is longer than most (about 700 lines) and stays whole on purpose: the
series has one plotting module (the style guide's rule), so every figure has one
style, one colour table and one place a learner looks for it; each function is one
figure and shares nothing else with the others.

Introduced in: 01_gsm8k_dataset.ipynb (histograms), used by every notebook.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

if not matplotlib.get_backend().lower().startswith(("module://", "qt", "tk", "mac")):
    matplotlib.use("Agg")  # headless (CI, scripts); notebooks keep the inline backend

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

FIGSIZE = (6.0, 3.5)
COLORS = {
    "reward": "#1f77b4",
    "accuracy": "#2ca02c",
    "degenerate": "#d62728",
    "length": "#9467bd",
    "base": "#7f7f7f",
    "trained": "#ff7f0e",
}


def _axes(ax: plt.Axes | None, figsize: tuple[float, float] = FIGSIZE) -> plt.Axes:
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def _integer_steps(ax: plt.Axes) -> None:
    """Steps are whole numbers: no tick at step 0.5."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _metrics(metrics: pd.DataFrame | str | Path) -> pd.DataFrame:
    if isinstance(metrics, (str, Path)):
        from grpo_helpers.run_files import load_metrics

        path = Path(metrics)
        return load_metrics(path.parent if path.suffix == ".jsonl" else path)
    return metrics


def plot_histogram(
    values: Iterable[float],
    *,
    bins: int | Sequence[float] = 30,
    title: str = "",
    xlabel: str = "",
    ax: plt.Axes | None = None,
    color: str = COLORS["reward"],
    percentiles: Sequence[float] = (),
) -> plt.Axes:
    """A histogram, with optional vertical lines at the given percentiles."""
    ax = _axes(ax)
    data = np.asarray(list(values), dtype=float)
    ax.hist(data, bins=bins, color=color, alpha=0.8)
    for q in percentiles:
        x = float(np.percentile(data, q))
        ax.axvline(x, color="black", linestyle="--", linewidth=1)
        ax.annotate(f"p{q:g}={x:.0f}", (x, ax.get_ylim()[1] * 0.9), fontsize=8)
    ax.set(title=title, xlabel=xlabel, ylabel="count")
    return ax


def plot_training_curves(
    metrics: pd.DataFrame | str | Path, ax: plt.Axes | None = None
) -> plt.Axes:
    """Reward, exact accuracy and the fraction of degenerate groups per step.

    Args:
        metrics: a metrics DataFrame (one row per step), a run directory, or its
            ``metrics.jsonl``.
        ax: where to draw; a new figure when None.
    """
    df = _metrics(metrics)
    ax = _axes(ax)
    if len(df):
        ax.plot(
            df["step"],
            df["reward_mean"],
            "o-",
            label="reward (mean)",
            color=COLORS["reward"],
        )
        ax.plot(
            df["step"],
            df["accuracy"],
            "s-",
            label="exact accuracy",
            color=COLORS["accuracy"],
        )
        ax.plot(
            df["step"],
            df["frac_degenerate"],
            "^--",
            label="degenerate groups",
            color=COLORS["degenerate"],
            alpha=0.7,
        )
    ax.set(
        xlabel="step",
        ylabel="value",
        ylim=(-0.05, 1.05),
        title="GRPO training: reward and accuracy per step",
    )
    _integer_steps(ax)
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def plot_completion_lengths(
    metrics: pd.DataFrame | str | Path, ax: plt.Axes | None = None
) -> plt.Axes:
    """Mean and max completion tokens per step, and how many hit ``max_tokens``."""
    df = _metrics(metrics)
    ax = _axes(ax)
    if len(df):
        ax.plot(
            df["step"],
            df["completion_tokens_mean"],
            "o-",
            label="mean tokens",
            color=COLORS["length"],
        )
        ax.plot(
            df["step"],
            df["completion_tokens_max"],
            ":",
            label="max tokens",
            color=COLORS["length"],
        )
        twin = ax.twinx()
        twin.bar(
            df["step"],
            df["hit_max_frac"],
            alpha=0.25,
            color=COLORS["degenerate"],
            label="hit max_tokens (fraction)",
        )
        # headroom above the data for the two legends
        twin.set(ylabel="fraction hit max_tokens", ylim=(0, 1.3))
        twin.set_yticks([0, 0.25, 0.5, 0.75, 1])
        twin.legend(loc="upper right", fontsize=8)
        ax.set_ylim(0, 1.3 * float(df["completion_tokens_max"].max()))
    ax.set(
        xlabel="step", ylabel="completion tokens", title="Completion length per step"
    )
    _integer_steps(ax)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def plot_step_times(
    metrics: pd.DataFrame | str | Path, ax: plt.Axes | None = None
) -> plt.Axes:
    """Seconds per step spent sampling vs training (stacked bars)."""
    df = _metrics(metrics)
    ax = _axes(ax)
    if len(df):
        ax.bar(
            df["step"], df["seconds_sampling"], label="sampling", color=COLORS["reward"]
        )
        ax.bar(
            df["step"],
            df["seconds_training"],
            bottom=df["seconds_sampling"],
            label="training",
            color=COLORS["trained"],
        )
    ax.set(xlabel="step", ylabel="seconds", title="Where a step's time goes")
    _integer_steps(ax)
    ax.legend(fontsize=8)
    return ax


def plot_mismatch(
    runs: Mapping[str, pd.DataFrame | str | Path], ax: plt.Axes | None = None
) -> plt.Axes:
    """How far each run's sampler was from its trainer, per step: the mean
    ``|log pi_sampler - log pi_trainer|`` on the sampled tokens (``mismatch_mean``,
    notebook 11), on a log scale; and, for a run one step off-policy (the async
    loop's ``max_steps_off_policy``), the gap from staleness beside it
    (``stale_mean``, dashed). A run recorded before they were logged, or a step
    that trained nothing, has no point.

    Args:
        runs: ``{label: metrics}`` (a DataFrame, run directory or
            ``metrics.jsonl``).
    """
    ax = _axes(ax)
    for label, metrics in runs.items():
        df = _metrics(metrics)
        for column, style, what in (
            ("mismatch_mean", "o-", "numerics"),
            ("stale_mean", "s--", "staleness"),
        ):
            values = df.get(column)
            if values is None or not (values > 0).any():
                continue  # not logged, or none (on-policy: staleness is 0)
            name = label if column == "mismatch_mean" else f"{label}: {what}"
            ax.plot(df["step"], values.where(values > 0), style, ms=3, label=name)
    ax.set(
        yscale="log",
        xlabel="step",
        ylabel="mean |log ratio|",
        title="sampler vs trainer, at the sampler's weights",
    )
    _integer_steps(ax)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return ax


#: The four panels of :func:`plot_run_curves`: (column, title, y label, y range).
RUN_PANELS = (
    ("reward_mean", "reward (mean of the step's completions)", "reward", (0, 1)),
    ("accuracy", "training accuracy (exact)", "fraction", (0, 1)),
    ("boxed_frac", "answers in a box", "fraction", (0, 1)),
    ("frac_degenerate", "degenerate groups (no learning signal)", "fraction", (0, 1)),
    ("completion_tokens_mean", "completion length", "tokens", None),
    ("hit_max_frac", "cut off at max_tokens", "fraction", (0, 1)),
)


def rolling_mean(values: Sequence[float] | pd.Series, window: int = 5) -> pd.Series:
    """The mean of the last ``window`` values at each step (fewer at the start).

    Example::

        >>> rolling_mean([1.0, 3.0, 5.0, 7.0], window=2).tolist()
        [1.0, 2.0, 4.0, 6.0]
    """
    return pd.Series(values, dtype=float).rolling(window, min_periods=1).mean()


def plot_run_curves(
    runs: Mapping[str, pd.DataFrame | str | Path],
    axes: Sequence[plt.Axes] | np.ndarray | None = None,
    window: int = 5,
    band: tuple[str, pd.DataFrame] | None = None,
    columns: Sequence[str] | None = None,
) -> np.ndarray:
    """Reward, training accuracy, boxed answers, degenerate groups, completion
    length and cut-off answers per step, for one or more runs on the same axes.

    Each step is a faint dot; the line is the rolling mean over ``window`` steps
    (one step of 2 prompts is noisy; the trend is what to read).

    Args:
        runs: ``{label: metrics}`` (a metrics DataFrame, run directory or
            ``metrics.jsonl``), e.g. ``{"your run": ..., recorded.label: ...}``.
        axes: one axes per panel to draw on (:data:`RUN_PANELS`); a new figure,
            three panels a row, when None. A run whose metrics lack a panel's
            column (recorded before it was logged) is left out of that panel.
        window: steps in the rolling mean.
        band: ``(label, frame)``: several recorded runs, one row per (``seed``,
            ``step``) (``recorded_runs.load_band()``), drawn as a grey range from
            their lowest to their highest rolling mean at each step.
        columns: the panels to draw, by column (``None``: all six), e.g. only
            those a learner's loop returns.

    Returns:
        The axes drawn on, flattened.
    """
    panels = [p for p in RUN_PANELS if columns is None or p[0] in columns]
    if not panels:
        raise ValueError(
            f"plot_run_curves: none of the columns {list(columns or [])} is a panel; "
            f"the panels are {[p[0] for p in RUN_PANELS]}"
        )
    if axes is None:
        rows = -(-len(panels) // 3)
        _, grid = plt.subplots(
            rows,
            min(len(panels), 3),
            figsize=(FIGSIZE[0] * 0.8 * min(len(panels), 3), FIGSIZE[1] * 0.9 * rows),
            layout="constrained",
            squeeze=False,
        )
        for ax in grid.ravel()[len(panels) :]:
            ax.set_visible(False)
        axes = grid.ravel()[: len(panels)]
    flat = np.asarray(axes).ravel()
    if band is not None:
        _draw_band(flat, *band, window=window, panels=panels)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"]
    for i, (label, metrics) in enumerate(runs.items()):
        df = _metrics(metrics)
        color = palette[i % len(palette)]
        for ax, (column, _, _, _) in zip(flat, panels, strict=True):
            if column not in df or not len(df):
                continue
            ax.plot(df["step"], df[column], "o", color=color, alpha=0.25, ms=3)
            ax.plot(
                df["step"],
                rolling_mean(df[column], window),
                "-",
                color=color,
                label=label,
                linewidth=2,
            )
    for ax, (_, title, ylabel, ylim) in zip(flat, panels, strict=True):
        ax.set(title=title, xlabel="step", ylabel=ylabel)
        if ylim is not None:
            ax.set_ylim(ylim[0] - 0.03, ylim[1] + 0.03)
        _integer_steps(ax)
        ax.grid(alpha=0.3)
    flat[0].legend(fontsize=7, loc="best")
    flat[0].figure.suptitle(
        f"dots: each step; lines: rolling mean over {window} steps", fontsize=9
    )
    return flat


def band_range(frame: pd.DataFrame, column: str, window: int = 5) -> pd.DataFrame:
    """Per step, the lowest and highest rolling mean of ``column`` over the runs of
    ``frame`` (one row per ``seed`` and ``step``), and how many runs reached it.

    Example:
        >>> frame = pd.DataFrame({"seed": [0, 0, 1, 1], "step": [0, 1, 0, 1],
        ...                       "reward_mean": [0.0, 0.5, 0.25, 1.0]})
        >>> band_range(frame, "reward_mean", window=1).to_dict("list")
        {'step': [0, 1], 'low': [0.0, 0.5], 'high': [0.25, 1.0], 'runs': [2, 2]}
    """
    smooth = frame.sort_values(["seed", "step"]).assign(
        value=lambda d: d.groupby("seed")[column].transform(
            lambda v: rolling_mean(v.to_numpy(), window).to_numpy()
        )
    )
    by_step = smooth.groupby("step")["value"]
    return pd.DataFrame(
        {
            "step": by_step.min().index.to_numpy(),
            "low": by_step.min().to_numpy(),
            "high": by_step.max().to_numpy(),
            "runs": by_step.count().to_numpy(),
        }
    )


def share_within_band(
    metrics: pd.DataFrame, band: pd.DataFrame, column: str, window: int = 5
) -> float:
    """The share of a run's steps whose rolling mean of ``column`` lies inside the
    band of the recorded seeds (:func:`band_range`) at the same step: what a
    learner reads off the grey range, as a number. Steps past the band's last
    step do not count.

    Example:
        >>> band = pd.DataFrame({"seed": [0, 0, 1, 1], "step": [0, 1, 0, 1],
        ...                      "reward_mean": [0.0, 0.5, 0.25, 1.0]})
        >>> run = pd.DataFrame({"step": [0, 1], "reward_mean": [0.1, 0.2]})
        >>> share_within_band(run, band, "reward_mean", window=1)
        0.5
    """
    limits = band_range(band, column, window).set_index("step")
    smooth = rolling_mean(metrics[column].to_numpy(), window).to_numpy()
    inside = [
        bool(limits.at[step, "low"] <= value <= limits.at[step, "high"])
        for step, value in zip(metrics["step"], smooth, strict=True)
        if step in limits.index
    ]
    return float(np.mean(inside)) if inside else math.nan


def _draw_band(
    flat: np.ndarray,
    label: str,
    frame: pd.DataFrame,
    window: int,
    panels: Sequence[tuple[str, str, str, Any]] = RUN_PANELS,
) -> None:
    runs = frame["seed"].nunique()
    for ax, (column, _, _, _) in zip(flat, panels, strict=True):
        if column not in frame:
            continue
        limits = band_range(frame, column, window)
        ax.fill_between(
            limits["step"],
            limits["low"],
            limits["high"],
            color="0.5",
            alpha=0.2,
            linewidth=0,
            label=f"{label} ({runs} seeds, range)",
        )


def add_caption(fig: plt.Figure, text: str, width: int = 150) -> None:
    """A small line of text under a figure (wrapped at ``width`` characters): where
    a recorded run's command, date and machine go instead of its legend entry."""
    fig.supxlabel(_wrap(text, width), fontsize=7, color="0.35")


class LivePlot:
    """Training curves that redraw in place after every step.

    Pass ``LivePlot()`` as ``on_step`` to ``train_sync`` / ``train_async``: in
    Jupyter the same output area is updated each step (no pile of figures); outside
    Jupyter it only keeps the last DataFrame.

    Args:
        reference: runs to draw beside this one, ``{label: metrics}`` (e.g. the
            recorded run of ``grpo_helpers.results.recorded_runs``); None draws this run
            alone (reward, accuracy and degenerate groups on one axes).
        label: this run's legend entry.
        lengths: with no reference, also draw completion lengths.
        mismatch: with no reference, also draw the sampler/trainer gap per step
            (:func:`plot_mismatch`: notebook 11's numerics, and the staleness of
            an off-policy run).
        window: steps in the rolling mean (with a reference).
        caption: a line under the figure (the recorded run's command, date and
            machine: ``RecordedRun.caption``), so the legend stays short.
        band: ``(label, frame)`` of several recorded runs
            (``recorded_runs.load_band()``), drawn as a grey range behind the curves
            (with a reference).
    """

    def __init__(
        self,
        *,
        reference: Mapping[str, pd.DataFrame] | None = None,
        label: str = "your run",
        lengths: bool = False,
        mismatch: bool = False,
        window: int = 5,
        caption: str | None = None,
        band: tuple[str, pd.DataFrame] | None = None,
    ) -> None:
        self.band = band
        self.mismatch = mismatch
        self.reference = dict(reference or {})
        self.caption = caption
        self.label = label
        self.lengths = lengths
        self.window = window
        self.handle: Any = None
        self.metrics: pd.DataFrame | None = None

    def figure(self, metrics: pd.DataFrame) -> plt.Figure:
        """The figure for these metrics (what each redraw shows)."""
        if self.reference:
            axes = plot_run_curves(
                {self.label: metrics, **self.reference},
                window=self.window,
                band=self.band,
            )
            if self.caption:
                add_caption(axes[0].figure, self.caption)
            return axes[0].figure
        ncols = 1 + self.lengths + self.mismatch
        fig, axes = plt.subplots(
            1,
            ncols,
            figsize=(FIGSIZE[0] * ncols, FIGSIZE[1]),
            layout="constrained",
            squeeze=False,
        )
        panels = iter(axes[0])
        plot_training_curves(metrics, ax=next(panels))
        if self.lengths:
            plot_completion_lengths(metrics, ax=next(panels))
        if self.mismatch:
            plot_mismatch({self.label: metrics}, ax=next(panels))
        return fig

    def __call__(self, metrics: pd.DataFrame) -> None:
        self.metrics = metrics
        fig = self.figure(metrics)
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:  # pragma: no cover - IPython ships with jupyter
            plt.close(fig)
            return
        if get_ipython() is None:
            plt.close(fig)
            return
        if self.handle is None:
            self.handle = display(fig, display_id=True)
        else:
            self.handle.update(fig)
        plt.close(fig)


def plot_degenerate_probability(
    group_sizes: Sequence[int] = (2, 4, 8, 16),
    ax: plt.Axes | None = None,
    simulated: Mapping[int, tuple[Sequence[float], Sequence[float]]] | None = None,
) -> plt.Axes:
    """P(all rewards in a group are equal) = p^G + (1-p)^G, against the pass rate p.

    ``simulated`` maps a group size to (pass rates, observed fractions) from a
    simulation, drawn as dots on the formula's curve.
    """
    ax = _axes(ax)
    p = np.linspace(0, 1, 201)
    for g in group_sizes:
        (line,) = ax.plot(p, p**g + (1 - p) ** g, label=f"G = {g}")
        if simulated and g in simulated:
            xs, ys = simulated[g]
            ax.plot(xs, ys, "o", color=line.get_color(), markersize=4)
    ax.set(
        xlabel="pass rate p of the prompt",
        ylabel="P(degenerate group)",
        title="Degenerate groups: formula (lines) and simulation (dots)",
        ylim=(0, 1.02),
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def plot_accuracy_comparison(
    rows: pd.DataFrame | Sequence[Mapping[str, Any]],
    ax: plt.Axes | None = None,
    metrics: Sequence[str] = ("exact", "lenient"),
) -> plt.Axes:
    """Grouped bars of accuracy per model with 95% interval whiskers.

    Args:
        rows: one row per model with ``model``, and for each metric ``m`` the
            columns ``m`` (accuracy), ``m_low`` and ``m_high`` (interval bounds).
        metrics: which accuracies to draw side by side.
    """
    df = pd.DataFrame(rows)
    ax = _axes(ax)
    x = np.arange(len(df))
    width = 0.8 / len(metrics)
    for j, m in enumerate(metrics):
        acc = df[m].to_numpy(dtype=float)
        err = np.vstack([acc - df[f"{m}_low"], df[f"{m}_high"] - acc])
        bars = ax.bar(x + j * width, acc, width, yerr=err, capsize=4, label=m)
        highs = df[f"{m}_high"].to_numpy(dtype=float)
        for bar, value, high in zip(bars, acc, highs, strict=True):
            ax.annotate(  # above the whisker, where the label cannot cross it
                f"{value:.0%}",
                (bar.get_x() + bar.get_width() / 2, high),
                ha="center",
                va="bottom",
                fontsize=8,
                xytext=(0, 2),
                textcoords="offset points",
            )
    ax.set_xticks(x + width * (len(metrics) - 1) / 2, df["model"])
    ax.set(
        ylabel="accuracy", ylim=(0, 1.05), title="Accuracy with 95% Wilson intervals"
    )
    ax.legend(fontsize=8)
    return ax


def plot_before_after(
    runs: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]],
    ax: plt.Axes | None = None,
    grade: str = "exact",
) -> plt.Axes:
    """Held-out accuracy before and after training, one pair of bars per run.

    Args:
        runs: ``{label: (base summary, trained summary)}``, summaries as made by
            ``report.summarize`` (``exact_acc``, ``exact_ci``...).
        grade: ``"exact"`` or ``"lenient"``.
    """
    ax = _axes(ax)
    labels = list(runs)
    x = np.arange(len(labels))
    width = 0.38
    for j, (which, color) in enumerate(
        (("before", COLORS["base"]), ("after", COLORS["trained"]))
    ):
        acc = np.array([runs[k][j][f"{grade}_acc"] for k in labels])
        lows = np.array([runs[k][j][f"{grade}_ci"][0] for k in labels])
        highs = np.array([runs[k][j][f"{grade}_ci"][1] for k in labels])
        bars = ax.bar(
            x + (j - 0.5) * width,
            acc,
            width,
            yerr=np.vstack([acc - lows, highs - acc]),
            capsize=4,
            color=color,
            label=f"{which} GRPO",
        )
        for bar, value, high in zip(bars, acc, highs, strict=True):
            ax.annotate(
                f"{value:.0%}",
                (bar.get_x() + bar.get_width() / 2, high),
                ha="center",
                va="bottom",
                fontsize=8,
                xytext=(0, 2),
                textcoords="offset points",
            )
    ax.set_xticks(x, [_wrap(label, 28) for label in labels], fontsize=8)
    ax.set(
        ylabel=f"{grade} accuracy",
        ylim=(0, 1.1),
        title=f"Held-out {grade} accuracy, 95% Wilson intervals",
    )
    ax.legend(fontsize=8)
    return ax


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def plot_seed_bands(
    frame: pd.DataFrame,
    column: str,
    ax: plt.Axes | None = None,
    window: int = 1,
    title: str = "",
) -> plt.Axes:
    """One line per variant (the mean over seeds) and a band from the lowest to the
    highest seed, per step.

    Args:
        frame: per-step metrics of several runs, with ``variant``, ``seed``,
            ``step`` and ``column`` (``ablation.metrics_frame``).
        column: the metric to draw.
        window: rolling mean over steps, per seed, before the band is taken.
    """
    ax = _axes(ax)
    for variant, runs in frame.groupby("variant", sort=False):
        smooth = runs.sort_values("step").assign(
            value=lambda d: d.groupby("seed")[column].transform(
                lambda v: rolling_mean(v.to_numpy(), window).to_numpy()
            )
        )
        by_step = smooth.groupby("step")["value"]
        mean, low, high = by_step.mean(), by_step.min(), by_step.max()
        (line,) = ax.plot(mean.index, mean.to_numpy(), label=str(variant))
        ax.fill_between(
            mean.index,
            low.to_numpy(),
            high.to_numpy(),
            alpha=0.15,
            color=line.get_color(),
        )
    ax.set(xlabel="step", ylabel=column, title=title or column)
    _integer_steps(ax)
    ax.grid(alpha=0.3)
    return ax


def plot_clipped_objective(
    clip_low: float = 0.8, clip_high: float = 1.2, ax: plt.Axes | None = None
) -> plt.Axes:
    """PPO's per-token objective ``min(rho A, clip(rho, lo, hi) A)`` against the
    ratio rho, for A = +1 and A = -1: where the line goes flat, the gradient is 0."""
    ax = _axes(ax)
    rho = np.linspace(0.5, 1.5, 401)
    for advantage, color in ((1.0, COLORS["accuracy"]), (-1.0, COLORS["degenerate"])):
        objective = np.minimum(
            rho * advantage, np.clip(rho, clip_low, clip_high) * advantage
        )
        ax.plot(rho, objective, color=color, label=f"A = {advantage:+.0f}")
    for bound in (clip_low, clip_high):
        ax.axvline(bound, color="black", linestyle=":", linewidth=1)
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.set(
        xlabel="ratio rho = pi_theta / pi_old",
        ylabel="objective per token (maximised)",
        title=f"The clipped ratio, bounds [{clip_low}, {clip_high}]",
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def plot_k_curves(
    curves: Mapping[str, pd.DataFrame], ax: plt.Axes | None = None
) -> plt.Axes:
    """pass@k (solid) and maj@k (dashed) against k, one colour per model.

    Args:
        curves: ``{model: stats.k_curves(...)}``.
    """
    ax = _axes(ax)
    palette = [COLORS["base"], COLORS["trained"], COLORS["reward"], COLORS["length"]]
    for i, (name, df) in enumerate(curves.items()):
        color = palette[i % len(palette)]
        ax.plot(df["k"], df["pass@k"], "o-", color=color, label=f"{name} pass@k")
        ax.plot(df["k"], df["maj@k"], "s--", color=color, label=f"{name} maj@k")
    ax.set(
        xlabel="k (samples per question)",
        ylabel="accuracy",
        ylim=(-0.02, 1.02),
        title="pass@k (any of k right) and maj@k (the majority of k right)",
    )
    _integer_steps(ax)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def plot_reward_distributions(
    rewards: Mapping[str, Sequence[float]], ax: plt.Axes | None = None
) -> plt.Axes:
    """Overlaid histograms of rewards, one per reward function."""
    ax = _axes(ax)
    bins = np.linspace(0, 1, 21)
    for name, values in rewards.items():
        # matplotlib types bins as a Sequence; an ndarray is what it takes
        ax.hist(values, bins=bins, alpha=0.5, label=name)  # type: ignore[arg-type]
    ax.set(xlabel="reward", ylabel="completions", title="Reward distributions")
    ax.legend(fontsize=8)
    return ax


#: One colour per answer class (``answers.CLASSES``): greens for right, greys for
#: the form of an answer, reds for a wrong number.
CLASS_COLORS = {
    "right, boxed": "#2ca02c",
    "right, unboxed": "#98df8a",
    "copied the example": "#8c564b",
    "cut off": "#7f7f7f",
    "no number": "#c7c7c7",
    "wrong operation": "#d62728",
    "right operation, wrong result": "#ff9896",
    "wrong number, other": "#f7b6d2",
}


def plot_answer_classes(
    counts: pd.DataFrame, ax: plt.Axes | None = None, title: str = ""
) -> plt.Axes:
    """Stacked bars: the share of each answer class (rows of ``counts``, as
    ``answers.class_counts`` returns them) for each model (columns).

    Introduced in: 08_what_grpo_learned.ipynb
    """
    ax = _axes(ax, figsize=(max(4.0, 1.3 * len(counts.columns) + 3.5), 3.8))
    shares = counts / counts.sum()
    bottom = np.zeros(len(shares.columns))
    x = np.arange(len(shares.columns))
    for name, row in shares.iterrows():
        values = row.to_numpy(dtype=float)
        ax.bar(
            x,
            values,
            bottom=bottom,
            color=CLASS_COLORS.get(str(name)),
            label=str(name),
            width=0.7,
        )
        for xi, (value, low) in enumerate(zip(values, bottom, strict=True)):
            if value >= 0.06:
                ax.text(
                    xi,
                    low + value / 2,
                    f"{value:.0%}",
                    ha="center",
                    va="center",
                    fontsize=8,
                )
        bottom += values
    ax.set_xticks(x, [_wrap(str(c), 14) for c in shares.columns])
    ax.set(ylim=(0, 1), ylabel="share of answers", title=title)
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return ax


def plot_seed_differences(
    table: pd.DataFrame, ax: plt.Axes | None = None, title: str = ""
) -> plt.Axes:
    """Each variant against the baseline, seed by seed (``ablation.seed_level``):
    one dot per seed (variant - baseline, same seed), the mean over seeds and its
    95% t-interval. An interval that crosses zero is a difference these seeds
    cannot tell from the run-to-run noise of training.

    Introduced in: 09_what_the_knobs_do.ipynb
    """
    ax = _axes(ax, figsize=(7.0, 0.5 * len(table) + 1.2))
    y = np.arange(len(table))[::-1]
    for yi, row in zip(y, table.to_dict("records"), strict=True):
        diffs = np.asarray(row["differences"], dtype=float)
        jitter = np.linspace(-0.12, 0.12, len(diffs)) if len(diffs) > 1 else [0.0]
        ax.plot(diffs, yi + np.asarray(jitter), "o", color="0.55", ms=4, zorder=1)
        mean, low, high = row["mean"], row["ci_low"], row["ci_high"]
        if np.isfinite(low):
            ax.errorbar(
                mean,
                yi,
                xerr=[[mean - low], [high - mean]],
                fmt="D",
                color=COLORS["trained"],
                capsize=4,
                zorder=2,
            )
        else:
            ax.plot(mean, yi, "D", color=COLORS["trained"], zorder=2)
        ax.annotate(
            f"{100 * mean:+.0f} pts, {row['seeds']} seeds",
            (mean, yi),
            xytext=(0, 8),
            textcoords="offset points",
            ha="center",
            fontsize=8,
        )
    ax.axvline(0.0, color="black", linewidth=1)
    ax.set_yticks(y, list(table["variant"]))
    ax.set_ylim(-0.7, len(table) - 0.3)
    ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.set(xlabel="variant - baseline of the same seed (held-out accuracy)")
    ax.set_title(
        (f"{title}: " if title else "")
        + "dots: seeds; diamond: mean, 95% t-interval over seeds",
        fontsize=9,
    )
    ax.grid(axis="x", alpha=0.3)
    return ax
