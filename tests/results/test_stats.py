"""grpo_helpers.results.stats against hand computations, scipy and exact formulas.

Reference values were checked independently with scipy 1.17
(``binomtest(k, n).proportion_ci(method="wilson")`` and ``binomtest(b, b + c).pvalue``)
and, for pass@k, with ``1 - comb(n - c, k) / comb(n, k)``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from grpo_helpers.results import stats
from grpo_helpers.results.stats import (
    maj_at_k,
    majority_answer,
    mcnemar_exact_p,
    paired_bootstrap_ci,
    pass_at_k,
    wilson_interval,
)

# --------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("successes", "n", "confidence", "low", "high"),
    [
        # scipy.stats.binomtest(k, n).proportion_ci(confidence, method="wilson")
        (79, 100, 0.95, 0.7002003116591013, 0.858343459380847),
        (95, 100, 0.95, 0.8882495307680809, 0.978456320845632),
        (0, 100, 0.95, 0.0, 0.03699349820698568),
        (100, 100, 0.95, 0.9630065017930143, 1.0),
        (5, 100, 0.95, 0.021543679154367973, 0.11175046923191914),
        (3, 10, 0.95, 0.10779126740630102, 0.6032218525388546),
        (79, 100, 0.90, 0.7158127511828283, 0.8489084707629306),
    ],
)
def test_wilson_interval_known_values(
    successes: int, n: int, confidence: float, low: float, high: float
) -> None:
    got = wilson_interval(successes, n, confidence)
    assert got == pytest.approx((low, high), abs=1e-9)


def test_wilson_interval_is_inside_unit_interval_and_contains_estimate() -> None:
    for n in (1, 2, 7, 100):
        for k in range(n + 1):
            low, high = wilson_interval(k, n)
            assert 0.0 <= low <= k / n <= high <= 1.0


@pytest.mark.parametrize(
    ("successes", "n", "confidence"),
    [(0, 0, 0.95), (1, 0, 0.95), (-1, 10, 0.95), (11, 10, 0.95), (5, 10, 1.0)],
)
def test_wilson_interval_rejects_bad_input(
    successes: int, n: int, confidence: float
) -> None:
    with pytest.raises(ValueError):
        wilson_interval(successes, n, confidence)


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        # scipy.stats.binomtest(b, b + c, 0.5).pvalue
        (10, 2, 0.03857421875),
        (2, 10, 0.03857421875),
        (5, 5, 1.0),
        (0, 0, 1.0),
        (1, 0, 1.0),
        (3, 1, 0.625),
        (16, 0, 3.0517578125e-05),
        (17, 1, 0.00014495849609375),
    ],
)
def test_mcnemar_exact_known_values(b: int, c: int, p: float) -> None:
    assert mcnemar_exact_p(b, c) == pytest.approx(p, rel=1e-12)


def test_mcnemar_matches_exact_fraction_formula() -> None:
    for b in range(12):
        for c in range(12):
            n = b + c
            tail = sum(Fraction(math.comb(n, i), 2**n) for i in range(min(b, c) + 1))
            expected = 1.0 if n == 0 else float(min(Fraction(1), 2 * tail))
            assert mcnemar_exact_p(b, c) == pytest.approx(expected, rel=1e-12)
            assert mcnemar_exact_p(b, c) == mcnemar_exact_p(c, b)
    assert 0.0 < mcnemar_exact_p(2000, 1000) < 1e-20  # big counts: no overflow


def test_mcnemar_rejects_negative_counts() -> None:
    with pytest.raises(ValueError):
        mcnemar_exact_p(-1, 3)


def test_pass_at_k_known_values() -> None:
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - 21 / 45)
    assert pass_at_k(8, 3, 3) == pytest.approx(1 - 10 / 56)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # only 2 wrong samples: any 3 hold a right one
    assert pass_at_k(4, 4, 4) == 1.0
    for n in range(1, 16):
        for c in range(n + 1):
            for k in range(1, n + 1):
                expected = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)
    assert 0.0 < pass_at_k(2000, 1, 10) < 0.01  # stable where C(n, k) is huge


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (5, 6, 1), (5, -1, 1), (5, 2, 6)])
def test_pass_at_k_rejects_bad_input(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_majority_vote() -> None:
    assert maj_at_k(["18", "17", "18", None], "18")
    assert not maj_at_k(["17", "18"], "18")  # tie: the first answer wins
    assert maj_at_k(["18", "17"], "18")
    assert maj_at_k([None, None, "18"], "18")  # None does not vote
    assert not maj_at_k([None, None], "18")
    assert not maj_at_k([], "18")
    assert maj_at_k(["18.00", "17", "$18"], "18")  # one value, two spellings
    assert majority_answer(["5", "6", "6", "5", "7"]) == "5"
    assert majority_answer(["abc", "x", "abc"]) == "abc"


def test_paired_bootstrap_is_seeded_and_sensible() -> None:
    base = [1] * 79 + [0] * 21
    trained = [1] * 79 + [1] * 16 + [0] * 5
    first = paired_bootstrap_ci(base, trained, seed=3)
    assert first == paired_bootstrap_ci(base, trained, seed=3)
    low, high = first
    assert 0.0 < low < 0.16 < high < 0.3
    assert paired_bootstrap_ci(base, base) == (0.0, 0.0)
    with pytest.raises(ValueError):
        paired_bootstrap_ci([1, 0], [1])


@pytest.mark.parametrize("confidence", [0.95, 0.8])
def test_the_paired_bootstrap_interval_has_its_coverage_on_both_sides(confidence):
    """A ``confidence`` interval leaves ``(1 - confidence) / 2`` out on each side:
    on 400 questions its half-width is the normal quantile of ``1 - alpha / 2``
    times the paired differences' standard error (1.96 of them at 95%, where
    ``alpha`` on each side would give 1.64), to the resampling's noise."""
    import numpy as np
    from scipy.stats import norm

    rng = np.random.default_rng(1)
    base, trained = rng.random(400) < 0.3, rng.random(400) < 0.5
    differences = trained.astype(float) - base.astype(float)
    error = differences.std() / math.sqrt(len(differences))  # the plug-in's
    low, high = paired_bootstrap_ci(
        base, trained, n_bootstrap=10_000, confidence=confidence, seed=0
    )
    quantile = norm.ppf(1 - (1 - confidence) / 2)
    assert (high - low) / 2 / error == pytest.approx(quantile, rel=0.04)
    assert (low + high) / 2 == pytest.approx(differences.mean(), abs=0.2 * error)


def test_k_curves_by_hand():
    records = pd.DataFrame(
        {
            "gold": ["3", "5"],
            # question 0: answers 3, 3, 4 (2 of 3 right); question 1: 1, 5, 2
            "answers": [["3", "3", "4"], ["1", "5", "2"]],
            "correct": [[True, True, False], [False, True, False]],
        }
    )
    curves = stats.k_curves(records).set_index("k")
    # k = 1: one sample; pass@1 = maj@1 = mean fraction correct = (2/3 + 1/3) / 2
    assert curves.loc[1, "pass@k"] == pytest.approx(0.5)
    assert curves.loc[1, "maj@k"] == pytest.approx(0.5)
    # k = 3: pass@3 = any right (both questions); maj@3: question 0's majority is
    # 3 (right); question 1 has three different answers, a tie
    assert curves.loc[3, "pass@k"] == pytest.approx(1.0)
    tie = stats.maj_at_k(["1", "5", "2"], "5")
    assert curves.loc[3, "maj@k"] == pytest.approx((1.0 + float(tie)) / 2)
    # k = 2: pass@2 = 1 - C(n-c, 2)/C(3, 2): q0 -> 1, q1 -> 1 - 1/3
    assert curves.loc[2, "pass@k"] == pytest.approx((1 + 2 / 3) / 2)
    with pytest.raises(ValueError, match="num_samples > 1"):
        stats.k_curves(records.drop(columns="answers"))


def test_the_prediction_interval_is_for_one_new_seed():
    """mean +/- t * s * sqrt(1 + 1/n): sqrt(n + 1) times the t-interval's half
    width, and it holds a new draw about 95% of the time where the t-interval
    of the mean does not."""
    from scipy import stats as scipy_stats

    values = [0.30, 0.38, 0.44, 0.41, 0.35]
    mean, low, high = stats.prediction_interval(values)
    _, mean_low, _ = stats.t_interval(values)
    n, sd = len(values), float(np.std(values, ddof=1))
    half = scipy_stats.t.ppf(0.975, n - 1) * sd * math.sqrt(1 + 1 / n)
    assert (low, high) == pytest.approx((mean - half, mean + half))
    assert (mean - low) == pytest.approx((mean - mean_low) * math.sqrt(n + 1))
    rng = np.random.default_rng(0)
    draws = rng.normal(size=(4000, n + 1))
    held = [
        stats.prediction_interval(d[:n])[1]
        <= d[n]
        <= stats.prediction_interval(d[:n])[2]
        for d in draws
    ]
    assert 0.93 < np.mean(held) < 0.97
