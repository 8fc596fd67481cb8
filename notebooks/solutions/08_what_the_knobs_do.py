"""Solutions to the exercises of 08_what_the_knobs_do.ipynb.

tests/test_notebooks_05_07.py checks these functions against
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
