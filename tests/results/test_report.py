"""grpo_helpers.results.report: base against trained, from the records: flips,
McNemar's p, the lenient metric, the results table and the rows the plot reads."""

from __future__ import annotations

import pandas as pd
import pytest

from grpo_helpers.results.report import (
    compare,
    format_results_table,
    summarize,
)

# --------------------------------------------------------------------------------------
# compare
# --------------------------------------------------------------------------------------


def _records(exact: list[bool], lenient: list[bool] | None = None, start: int = 0):  # noqa: ANN202
    n = len(exact)
    lenient = exact if lenient is None else lenient
    return pd.DataFrame(
        {
            "index": list(range(start, start + n)),
            "question": [f"question {i}" for i in range(start, start + n)],
            "gold": ["1"] * n,
            "completion": [f"completion {i}" for i in range(n)],
            "extracted": ["1" if ok else "2" for ok in exact],
            "boxed": [True] * n,
            "answer_lenient": ["1" if ok else "2" for ok in lenient],
            "exact": exact,
            "lenient": lenient,
            "completion_tokens": [10] * n,
            "hit_max_tokens": [False] * n,
            "prompt_tokens": [20] * n,
        }
    )


def _base_and_trained():  # noqa: ANN202
    # 100 questions: 70 right for both, 10 fixed (b), 2 broken (c), 18 wrong for both.
    base = [True] * 70 + [False] * 10 + [True] * 2 + [False] * 18
    trained = [True] * 70 + [True] * 10 + [False] * 2 + [False] * 18
    return _records(base), _records(trained)


def test_compare_counts_flips_and_mcnemar() -> None:
    base, trained = _base_and_trained()
    comparison = compare(base, trained.sample(frac=1.0, random_state=0), seed=1)
    assert comparison.n == 100
    assert comparison.wrong_to_right == 10
    assert comparison.right_to_wrong == 2
    assert comparison.base_acc == pytest.approx(0.72)
    assert comparison.trained_acc == pytest.approx(0.80)
    assert comparison.difference == pytest.approx(0.08)
    assert comparison.p_value == pytest.approx(0.03857421875)
    assert comparison.improved["index"].tolist() == list(range(70, 80))
    assert comparison.regressed["index"].tolist() == [80, 81]
    assert set(comparison.improved.columns) >= {
        "question",
        "gold",
        "base_completion",
        "trained_completion",
        "base_answer",
        "trained_answer",
    }
    low, high = comparison.difference_ci
    assert low < 0.08 < high
    again = compare(base, trained, seed=1)
    assert again.difference_ci == comparison.difference_ci
    assert compare(base, trained, n_bootstrap=0).difference_ci is None


def test_compare_no_flips_gives_p_one() -> None:
    base, _ = _base_and_trained()
    comparison = compare(base, base.copy(), n_bootstrap=0)
    assert comparison.p_value == 1.0
    assert comparison.difference == 0.0
    assert comparison.improved.empty and comparison.regressed.empty


def test_compare_lenient_metric() -> None:
    base = _records([False, False, True], lenient=[True, False, True])
    trained = _records([True, True, True])
    assert compare(base, trained, "exact", n_bootstrap=0).wrong_to_right == 2
    assert compare(base, trained, "lenient", n_bootstrap=0).wrong_to_right == 1
    with pytest.raises(ValueError):
        compare(base, trained, "boxed")


def test_compare_rejects_different_question_sets() -> None:
    base, trained = _base_and_trained()
    with pytest.raises(ValueError, match="different questions"):
        compare(base, trained.iloc[:-1])
    with pytest.raises(ValueError, match="different questions"):
        compare(_records([True, False]), _records([True, False], start=5))
    duplicated = pd.concat([base, base.iloc[:1]], ignore_index=True)
    with pytest.raises(ValueError, match="duplicate"):
        compare(duplicated, trained)


def test_comparison_table_and_cli_text() -> None:
    base, trained = _base_and_trained()
    comparison = compare(base, trained, names=("base", "grpo"))
    table = comparison.table()
    assert list(table.index) == ["base", "grpo"]
    assert table.loc["grpo", "difference (exact)"] == "+8.0 pts"
    assert table.loc["grpo", "p (McNemar)"] == "0.0386"
    assert table.loc["base", "exact [95% CI]"].startswith("72.0% [")
    assert table.loc["grpo", "n"] == 100

    text = format_results_table(
        {"base": summarize(base), "grpo": summarize(trained)}, comparison=comparison
    )
    lines = text.splitlines()
    assert lines[0].split(" | ")[:3] == [
        "model",
        "exact [95% CI]    ",
        "lenient [95% CI]  ",
    ]
    assert lines[1].startswith("base ") and lines[2].startswith("grpo ")
    assert "+8.0 pts [95% CI " in lines[3] and "p = 0.0386" in lines[3]
    assert "10 wrong->right" in lines[3] and "2 right->wrong" in lines[3]
    assert repr(comparison) == text
    assert "<table" in comparison._repr_html_()


def test_accuracy_rows_feed_the_plot() -> None:
    import matplotlib  # a dependency of grpo_helpers: never skipped

    matplotlib.use("Agg")
    from grpo_helpers import plotting

    base, trained = _base_and_trained()
    comparison = compare(base, trained, n_bootstrap=0)
    ax = plotting.plot_accuracy_comparison(comparison.accuracy_rows())
    assert len(ax.patches) == 4  # 2 models x (exact, lenient)
    matplotlib.pyplot.close(ax.figure)
