"""Solutions to the exercises of 07_evaluating_a_trained_model.ipynb.

tests/notebooks/test_05_09.py checks these functions against
``grpo_helpers.results.evaluation``.
"""

from __future__ import annotations

import math

import pandas as pd


def wilson_by_hand(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Exercise 1: the Wilson score interval of ``successes`` out of ``n``.

    ``centre = (p + z^2 / 2n) / (1 + z^2 / n)`` and
    ``half = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2)``; the interval is
    clipped to [0, 1] (at 0 or n successes the formula touches the bound itself).
    With ``z = 1.96`` it matches ``stats.wilson_interval`` (whose z is
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


def _flip_case(base: str, trained: str, seed: int) -> tuple:
    """Exact grades as strings of 0/1, and a shuffled order of the trained rows."""
    import random

    order = list(range(len(base)))
    random.Random(seed).shuffle(order)
    return ([c == "1" for c in base], [c == "1" for c in trained], order)


#: The grader's hidden tests: other inputs than the notebook's visible checks.
#: ``grpo_helpers.classroom.course`` computes the expected values with the functions
#: above when it builds the student edition and writes them into the graded cells
#: as literals (nbgrader keeps them out of the student edition). ``forbid``: the
#: package functions the exercise says not to use; the hidden test makes them raise
#: while it calls the learner's function. This file never ships to students.
HIDDEN_CASES = {
    "wilson_by_hand": {
        "cases": [(3, 7), (42, 50), (0, 4), (12, 12), (250, 300), (1, 1000), (17, 40)],
        # the package's z is 1.95996..., the exercise's 1.96: both pass
        "tol": 1e-4,
        "forbid": ["grpo_helpers.results.stats.wilson_interval"],
    },
    # Each case: exact grades of the base and trained model by question index,
    # and the order in which the trained records come (any order must work).
    "flips_and_p": {
        "cases": [
            _flip_case("1011000110", "1110101101", 1),
            _flip_case(
                "000011110000111100001111000011", "111111110011111101001111110111", 2
            ),
            _flip_case("110", "110", 3),
            _flip_case("0000011", "1111111", 4),
            _flip_case("1" * 12, "0" * 3 + "1" * 9, 5),
        ],
        "tol": 1e-9,
        "forbid": [
            "grpo_helpers.results.stats.mcnemar_exact_p",
            "grpo_helpers.results.report.compare",
        ],
        "setup": """
def prepare(case):
    import pandas as pd

    base, trained, order = case
    base_records = pd.DataFrame({"index": range(len(base)), "exact": base})
    trained_records = pd.DataFrame(
        {"index": order, "exact": [trained[i] for i in order]}
    )
    return base_records, trained_records
""",
    },
    "questions_needed": {
        "cases": [(0.7, 0.06), (0.9, 0.04), (0.6, 0.08), (0.85, 0.05), (0.5, 0.2)],
    },
}
