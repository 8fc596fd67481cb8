"""Solutions to the exercises of 07_base_vs_grpo_eval.ipynb.

tests/test_notebooks_05_07.py checks these functions against
``grpo_helpers.evaluation``.
"""

from __future__ import annotations

import math

import pandas as pd


def wilson_by_hand(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Exercise 1: the Wilson score interval of ``successes`` out of ``n``.

    ``centre = (p + z^2 / 2n) / (1 + z^2 / n)`` and
    ``half = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2)``; the interval is
    clipped to [0, 1] (at 0 or n successes the formula touches the bound itself).
    With ``z = 1.96`` it matches ``evaluation.wilson_interval`` (whose z is
    1.95996...) to about 1e-5.
    """
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def flips_and_p(
    base_records: pd.DataFrame, trained_records: pd.DataFrame
) -> tuple[int, int, float]:
    """Exercise 2: flips between two evaluations and the exact McNemar p-value.

    The records are matched by question ``index`` (the rows may come in any order).
    ``b`` counts wrong -> right, ``c`` right -> wrong; under "equally good" each
    flip goes either way with probability 1/2, so the two-sided p-value is
    ``min(1, 2 * P(Binomial(b + c, 1/2) <= min(b, c)))``.
    """
    merged = base_records[["index", "exact"]].merge(
        trained_records[["index", "exact"]], on="index", suffixes=("_base", "_trained")
    )
    base_ok = merged["exact_base"].astype(bool)
    trained_ok = merged["exact_trained"].astype(bool)
    b = int((~base_ok & trained_ok).sum())
    c = int((base_ok & ~trained_ok).sum())
    flips = b + c
    if flips == 0:
        return b, c, 1.0
    tail = sum(math.comb(flips, i) for i in range(min(b, c) + 1))
    return b, c, min(1.0, 2 * tail / 2**flips)


def questions_needed(accuracy: float, half_width: float, z: float = 1.96) -> int:
    """Exercise 3: the smallest n whose Wilson interval is within ``half_width``.

    The half-width of the interval is not strictly monotone in n (the number of
    correct answers, ``round(accuracy * n)``, moves in whole steps), so the search
    goes up one question at a time and stops at the first n that is narrow enough.

    At 80% accuracy: +/- 8 points needs 95 questions, +/- 5 points 245, +/- 3
    points 681 and +/- 1 point about 6,100.
    """
    n = 1
    while True:
        low, high = wilson_by_hand(round(accuracy * n), n, z)
        if (high - low) / 2 <= half_width:
            return n
        n += 1
