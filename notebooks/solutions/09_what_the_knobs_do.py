"""Solutions to the exercises of 09_what_the_knobs_do.ipynb.

tests/notebooks/test_05_09.py checks these functions against
``grpo_helpers.advantages``.
"""

from __future__ import annotations

import math


def token_weights(lengths: list[int], mode: str, max_tokens: int) -> list[float]:
    """Exercise 1: the weight of one token of each completion.

    token_sum: 1; sequence_mean: 1 / |o_i|; token_mean: 1 / sum_j |o_j| (the
    group's tokens); constant: 1 / max_tokens.
    """
    if mode == "token_sum":
        return [1.0] * len(lengths)
    if mode == "sequence_mean":
        return [1.0 / n for n in lengths]
    if mode == "token_mean":
        return [1.0 / sum(lengths)] * len(lengths)
    if mode == "constant":
        return [1.0 / max_tokens] * len(lengths)
    raise ValueError(f"unknown normalization {mode!r}")


def k3_estimate(sampled: list[list[float]], reference: list[list[float]]) -> float:
    """Exercise 2: mean over every token of exp(-d) + d - 1, d = sampled - ref.

    k3 is never negative (exp(-d) >= 1 - d), and 0 exactly when the two models
    agree on every sampled token.
    """
    diffs = [
        s - r
        for row_s, row_r in zip(sampled, reference, strict=True)
        for s, r in zip(row_s, row_r, strict=True)
    ]
    return sum(math.exp(-d) + d - 1.0 for d in diffs) / len(diffs)


#: The grader's hidden tests: other inputs than the notebook's visible checks.
#: ``grpo_helpers.classroom.course`` computes the expected values with the functions
#: above when it builds the student edition and writes them into the graded cells
#: as literals (nbgrader keeps them out of the student edition). ``forbid``: the
#: package functions the exercise says not to use; the hidden test makes them raise
#: while it calls the learner's function. This file never ships to students.
HIDDEN_CASES = {
    "token_weights": {
        "cases": [
            ([3, 9, 12], "sequence_mean", 16),
            ([2, 2], "token_mean", 4),
            ([10], "constant", 32),
            ([4, 1], "token_sum", 8),
            ([6, 2, 8], "token_mean", 16),
            ([5, 20], "constant", 40),
            ([1, 50], "sequence_mean", 64),
        ],
        "tol": 1e-12,
        "forbid": ["grpo_helpers.advantages.length_scales"],
    },
    "k3_estimate": {
        "cases": [
            ([[-0.5, -1.0]], [[-0.7, -0.9]]),
            ([[-2.0], [-0.1, -0.3, -0.2]], [[-1.5], [-0.2, -0.2, -0.4]]),
            ([[-1.0, -1.0]], [[-1.0, -1.0]]),
            ([[-0.05, -3.0, -0.6, -1.1]], [[-0.9, -0.2, -0.6, -2.5]]),
        ],
        "tol": 1e-9,
        "forbid": ["grpo_helpers.advantages.kl_penalty"],
    },
}
