"""What an evaluation's records say: accuracies with intervals, base vs trained.

:func:`grpo_helpers.results.evaluation.evaluate` leaves one record per question, graded
exact and lenient. This module reads those records:

* :func:`summarize`: accuracies with 95% Wilson intervals, the boxed share, the
  token counts (and pass@k / maj@k when each question was sampled ``k`` times);
* :func:`compare`: two models on the *same* questions (base vs trained): the
  difference, the questions that flipped either way, McNemar's exact test on those
  flips and a paired bootstrap interval (:class:`Comparison`);
* :func:`format_results_table` and :func:`accuracy_rows`: the results table the CLI
  prints, and the numbers behind it, ready to plot.

The statistics themselves are :mod:`grpo_helpers.results.stats`'. Every function takes
an ``EvalResult`` or its records (or its summary) alike, so a recorded run's records
read from disk compare as well as a fresh evaluation.

Introduced in: 07_evaluating_a_trained_model.ipynb
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd

from grpo_helpers.results.stats import (
    mcnemar_exact_p,
    paired_bootstrap_ci,
    wilson_interval,
)

__all__ = [
    "Comparison",
    "accuracy_rows",
    "compare",
    "format_results_table",
    "summarize",
    "summary_row",
]


class Evaluated(Protocol):
    """What :func:`grpo_helpers.results.evaluation.evaluate` returns (an
    ``EvalResult``): per-question records, their summary and a name. Every function
    here also takes the records DataFrame or the summary dict alone."""

    records: pd.DataFrame
    summary: dict[str, Any]
    name: str


def _records_of(result: Evaluated | pd.DataFrame) -> pd.DataFrame:
    return result if isinstance(result, pd.DataFrame) else result.records


def _name_of(result: Evaluated | pd.DataFrame, default: str) -> str:
    return default if isinstance(result, pd.DataFrame) else result.name


def _named_summaries(
    results: Mapping[str, Evaluated | Mapping[str, Any]] | Sequence[Evaluated],
) -> list[tuple[str, Mapping[str, Any]]]:
    """``(name, summary)`` of ``{name: result or summary}`` or of a list of
    results (named by their ``name``)."""
    if isinstance(results, Mapping):
        items = list(results.items())
    else:
        items = [(result.name, result) for result in results]
    return [
        (name, result if isinstance(result, Mapping) else result.summary)
        for name, result in items
    ]


def summarize(
    records: pd.DataFrame, *, confidence: float = 0.95, seconds: float | None = None
) -> dict[str, Any]:
    """Accuracies, intervals and token counts of a records DataFrame.

    Args:
        records: per-question records as made by ``evaluation.evaluate`` (one row per
            question; needs at least ``exact``, ``lenient`` and ``boxed``).
        confidence: coverage of the Wilson intervals.
        seconds: wall-clock time of the evaluation, stored as is.

    Returns:
        A dict with ``n``, ``exact_acc``, ``exact_ci`` (low, high), ``lenient_acc``,
        ``lenient_ci``, ``boxed_frac``, ``hit_max_tokens_frac``, ``prompt_tokens``,
        ``sampled_tokens``, ``total_tokens``, ``seconds`` and, when the records hold
        ``k > 1`` samples per question, ``k``, ``pass@1`` (mean fraction of correct
        samples), ``pass@k`` and ``maj@k``.

    Raises:
        ValueError: empty records.
    """
    n = len(records)
    if n == 0:
        raise ValueError("no records to summarize")
    n_exact = int(records["exact"].sum())
    n_lenient = int(records["lenient"].sum())
    prompt_tokens = (
        int(records["prompt_tokens"].sum()) if "prompt_tokens" in records else 0
    )
    if "sampled_tokens" in records:
        sampled_tokens = int(records["sampled_tokens"].sum())
    elif "completion_tokens" in records:
        sampled_tokens = int(records["completion_tokens"].sum())
    else:
        sampled_tokens = 0
    summary: dict[str, Any] = {
        "n": n,
        "exact_acc": n_exact / n,
        "exact_ci": wilson_interval(n_exact, n, confidence),
        "lenient_acc": n_lenient / n,
        "lenient_ci": wilson_interval(n_lenient, n, confidence),
        "boxed_frac": float(records["boxed"].mean()),
        "hit_max_tokens_frac": (
            float(records["hit_max_tokens"].mean())
            if "hit_max_tokens" in records
            else 0.0
        ),
        "prompt_tokens": prompt_tokens,
        "sampled_tokens": sampled_tokens,
        "total_tokens": prompt_tokens + sampled_tokens,
        "seconds": seconds,
        "confidence": confidence,
    }
    if "pass_at_k" in records:
        k = records.attrs.get("k")  # set by evaluate; lost if the frame was rebuilt
        summary["k"] = k
        summary["pass@k"] = float(records["pass_at_k"].mean())
        summary["maj@k"] = float(records["maj_at_k"].mean())
        if k:
            summary["pass@1"] = float((records["n_correct"] / k).mean())
    return summary


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _acc_ci(acc: float, ci: tuple[float, float]) -> str:
    return f"{_pct(acc)} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def summary_row(name: str, summary: Mapping[str, Any]) -> dict[str, Any]:
    """One row of the results table: the model, its accuracies with intervals..."""
    level = round(100 * summary.get("confidence", 0.95))
    row = {
        "model": name,
        f"exact [{level}% CI]": _acc_ci(summary["exact_acc"], summary["exact_ci"]),
        f"lenient [{level}% CI]": _acc_ci(
            summary["lenient_acc"], summary["lenient_ci"]
        ),
        "boxed": _pct(summary["boxed_frac"]),
        "n": summary["n"],
    }
    if "pass@k" in summary:
        k = summary.get("k") or "k"
        row[f"pass@{k}"] = _pct(summary["pass@k"])
        row[f"maj@{k}"] = _pct(summary["maj@k"])
    return row


@dataclass
class Comparison:
    """Two models on the same questions: accuracies, difference, flips, p-value.

    Attributes:
        names: the two model labels, ``(base, trained)``.
        metric: ``"exact"`` or ``"lenient"``: the grader the difference is about.
        n: number of (shared) questions.
        base_acc, trained_acc: accuracies under ``metric``.
        difference: ``trained_acc - base_acc`` (a proportion; x100 for points).
        wrong_to_right: ``b``, questions the trained model fixed.
        right_to_wrong: ``c``, questions the trained model broke.
        p_value: two-sided exact McNemar p-value of ``b`` vs ``c``.
        difference_ci: paired bootstrap interval of ``difference``, or ``None``.
        improved: the ``b`` questions (wrong -> right) with both completions.
        regressed: the ``c`` questions (right -> wrong) with both completions.
        base_summary, trained_summary: :func:`summarize` of each side.
    """

    names: tuple[str, str]
    metric: str
    n: int
    base_acc: float
    trained_acc: float
    difference: float
    wrong_to_right: int
    right_to_wrong: int
    p_value: float
    difference_ci: tuple[float, float] | None
    improved: pd.DataFrame
    regressed: pd.DataFrame
    base_summary: dict[str, Any]
    trained_summary: dict[str, Any]
    confidence: float = 0.95

    def table(self) -> pd.DataFrame:
        """One row per model: exact and lenient accuracy with CI, difference, p."""
        rows = [
            summary_row(self.names[0], self.base_summary),
            summary_row(self.names[1], self.trained_summary),
        ]
        rows[0][f"difference ({self.metric})"] = ""
        rows[0]["p (McNemar)"] = ""
        rows[1][f"difference ({self.metric})"] = _points(self.difference)
        rows[1]["p (McNemar)"] = _p_text(self.p_value)
        return pd.DataFrame(rows).set_index("model")

    def accuracy_rows(self) -> pd.DataFrame:
        """Both models' accuracies and interval bounds (see :func:`accuracy_rows`)."""
        return accuracy_rows(
            {self.names[0]: self.base_summary, self.names[1]: self.trained_summary}
        )

    def summary_line(self) -> str:
        """One sentence: the difference, its interval, the flips and the p-value."""
        text = f"difference ({self.names[1]} - {self.names[0]}, {self.metric}): "
        text += _points(self.difference)
        if self.difference_ci is not None:
            low, high = self.difference_ci
            level = round(100 * self.confidence)
            text += f" [{level}% CI {100 * low:+.1f}, {100 * high:+.1f}]"
        text += (
            f"; flips: {self.wrong_to_right} wrong->right,"
            f" {self.right_to_wrong} right->wrong;"
            f" McNemar exact p = {_p_text(self.p_value)}"
        )
        return text

    def __repr__(self) -> str:
        return format_results_table(
            {self.names[0]: self.base_summary, self.names[1]: self.trained_summary},
            comparison=self,
        )

    def _repr_html_(self) -> str:  # Jupyter shows this instead of __repr__
        return self.table().to_html() + f"<p>{self.summary_line()}</p>"


def _points(difference: float) -> str:
    return f"{100 * difference:+.1f} pts"


def _p_text(p: float) -> str:
    return f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}"


def _flips(merged: pd.DataFrame, mask: pd.Series, answer: str) -> pd.DataFrame:
    columns = {
        "index": "index",
        "question": "question",
        "gold": "gold",
        f"{answer}_base": "base_answer",
        f"{answer}_trained": "trained_answer",
        "completion_base": "base_completion",
        "completion_trained": "trained_completion",
    }
    return (
        merged.loc[mask, list(columns)].rename(columns=columns).reset_index(drop=True)
    )


def compare(
    base_records: Evaluated | pd.DataFrame,
    trained_records: Evaluated | pd.DataFrame,
    metric: str = "exact",
    *,
    n_bootstrap: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    names: tuple[str, str] | None = None,
) -> Comparison:
    """Compare two evaluations of the same questions (base vs trained).

    Questions are matched on their ``index``. Because both models answer the same
    questions, the test that fits is McNemar's: it looks only at the questions that
    *flipped* (``b`` wrong -> right, ``c`` right -> wrong), which is far more
    sensitive than comparing two independent intervals.

    Args:
        base_records, trained_records: ``EvalResult`` objects or their
            ``records`` DataFrames.
        metric: ``"exact"`` or ``"lenient"``.
        n_bootstrap: resamples for the paired bootstrap interval of the difference;
            0 skips it.
        seed: seed of the bootstrap.
        confidence: coverage of the intervals.
        names: labels of the two models (default: the results' names, else
            ``("base", "trained")``).

    Returns:
        A :class:`Comparison`; ``print`` it or call ``.table()``.

    Raises:
        ValueError: an unknown metric, duplicate indices, or question sets that
            differ (the comparison would not be paired).
    """
    if metric not in ("exact", "lenient"):
        raise ValueError(f"metric must be 'exact' or 'lenient', got {metric!r}")
    base = _records_of(base_records)
    trained = _records_of(trained_records)
    for label, frame in (("base", base), ("trained", trained)):
        if frame["index"].duplicated().any():
            raise ValueError(f"{label} records have duplicate question indices")
    base_ids, trained_ids = set(base["index"]), set(trained["index"])
    if base_ids != trained_ids:
        only_base = sorted(base_ids - trained_ids)[:5]
        only_trained = sorted(trained_ids - base_ids)[:5]
        raise ValueError(
            "the two evaluations cover different questions "
            f"(only in base, first 5: {only_base}; "
            f"only in trained, first 5: {only_trained})"
        )
    if names is None:
        names = (_name_of(base_records, "base"), _name_of(trained_records, "trained"))
        if names[0] == names[1]:
            names = ("base", "trained")
    merged = base.merge(
        trained.drop(columns=["question", "gold"], errors="ignore"),
        on="index",
        suffixes=("_base", "_trained"),
    ).sort_values("index", ignore_index=True)
    base_ok = merged[f"{metric}_base"].astype(bool)
    trained_ok = merged[f"{metric}_trained"].astype(bool)
    b = int((~base_ok & trained_ok).sum())
    c = int((base_ok & ~trained_ok).sum())
    n = len(merged)
    difference_ci = None
    if n_bootstrap > 0:
        difference_ci = paired_bootstrap_ci(
            base_ok.to_numpy(),
            trained_ok.to_numpy(),
            n_bootstrap=n_bootstrap,
            confidence=confidence,
            seed=seed,
        )
    answer = "extracted" if metric == "exact" else "answer_lenient"
    return Comparison(
        names=(names[0], names[1]),
        metric=metric,
        n=n,
        base_acc=float(base_ok.mean()),
        trained_acc=float(trained_ok.mean()),
        difference=float(trained_ok.mean() - base_ok.mean()),
        wrong_to_right=b,
        right_to_wrong=c,
        p_value=mcnemar_exact_p(b, c),
        difference_ci=difference_ci,
        improved=_flips(merged, ~base_ok & trained_ok, answer),
        regressed=_flips(merged, base_ok & ~trained_ok, answer),
        base_summary=summarize(base, confidence=confidence),
        trained_summary=summarize(trained, confidence=confidence),
        confidence=confidence,
    )


def format_results_table(
    results: Mapping[str, Evaluated | Mapping[str, Any]] | Sequence[Evaluated],
    comparison: Comparison | None = None,
) -> str:
    """The plain-text results table the CLI prints.

    Args:
        results: ``{name: EvalResult or summary dict}``, or a list of EvalResults
            (labelled by their ``name``).
        comparison: if given, a last line with the difference and McNemar p-value.

    Returns:
        Lines like::

            model   | exact [95% CI]     | lenient [95% CI]   | boxed  | n
            base    | 79.0% [70.0, 85.8] | 81.0% [72.2, 87.5] | 96.0%  | 100
            trained | 95.0% [88.8, 97.8] | 95.0% [88.8, 97.8] | 100.0% | 100
            difference (trained - base, exact): +16.0 pts [...]; ... p = 0.0004
    """
    rows = [
        {key: str(value) for key, value in summary_row(name, summary).items()}
        for name, summary in _named_summaries(results)
    ]
    header = list(rows[0]) if rows else ["model"]
    for row in rows[1:]:
        header += [key for key in row if key not in header]
    widths = {
        key: max(len(key), *(len(row.get(key, "")) for row in rows)) for key in header
    }
    lines = [" | ".join(key.ljust(widths[key]) for key in header).rstrip()]
    for row in rows:
        cells = [row.get(key, "").ljust(widths[key]) for key in header]
        lines.append(" | ".join(cells).rstrip())
    if comparison is not None:
        lines.append(comparison.summary_line())
    return "\n".join(lines)


def accuracy_rows(
    results: Mapping[str, Evaluated | Mapping[str, Any]] | Sequence[Evaluated],
) -> pd.DataFrame:
    """Numbers behind the results table, one row per model, ready to plot.

    Args:
        results: ``{name: EvalResult or summary dict}``, or a list of EvalResults.

    Returns:
        Columns ``model, n, exact, exact_low, exact_high, lenient, lenient_low,
        lenient_high, boxed`` (proportions), the input of
        ``plotting.plot_accuracy_comparison``.
    """
    rows = [
        {
            "model": name,
            "n": summary["n"],
            "exact": summary["exact_acc"],
            "exact_low": summary["exact_ci"][0],
            "exact_high": summary["exact_ci"][1],
            "lenient": summary["lenient_acc"],
            "lenient_low": summary["lenient_ci"][0],
            "lenient_high": summary["lenient_ci"][1],
            "boxed": summary["boxed_frac"],
        }
        for name, summary in _named_summaries(results)
    ]
    return pd.DataFrame(rows)
