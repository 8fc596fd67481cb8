"""Solutions to the exercises of 01_gsm8k_dataset.ipynb.

tests/notebooks/test_01_04.py runs the notebook's self-check cells on these.
"""

import numpy as np


def fraction_cut_off(token_counts, max_tokens):
    """Fraction (0..1) of token_counts that are larger than max_tokens.

    A completion of exactly ``max_tokens`` tokens fits, so the comparison is strict.

    >>> fraction_cut_off([10, 64, 65, 200], 64)
    0.5
    """
    counts = np.asarray(token_counts)
    return float(np.mean(counts > max_tokens))


def smallest_budget(token_counts, coverage):
    """Smallest max_tokens in 64, 128, ..., 8192 that fits coverage of the counts.

    Returns None when even 8192 tokens leave more than ``1 - coverage`` cut off.

    >>> smallest_budget([50, 100, 300], 2 / 3)
    128
    """
    counts = np.asarray(token_counts)
    for budget in (64, 128, 256, 512, 1024, 2048, 4096, 8192):
        if np.mean(counts <= budget) >= coverage:
            return budget
    return None


#: The grader's hidden tests: other inputs than the notebook's visible checks.
#: ``grpo_helpers.classroom.course`` computes the expected values with the functions
#: above when it builds the student edition and writes them into the graded cells
#: as literals (nbgrader keeps them out of the student edition). This file never
#: ships to students.
HIDDEN_CASES = {
    "fraction_cut_off": {
        "cases": [
            ([3, 100, 100, 101, 250, 7, 99], 100),
            ([50], 49),
            ([50], 50),
            ([1, 2, 3, 4], 0),
            ([1000, 2000, 3000], 2500),
            ([128, 128, 128, 129], 128),
            ([5, 500, 5000, 50000, 12], 4096),
        ],
        "tol": 1e-9,
    },
    "smallest_budget": {
        "cases": [
            ([100, 200, 300, 400], 0.75),
            ([8192, 8193], 0.5),
            ([8193], 0.1),
            ([10, 20, 30], 1.0),
            ([63, 64, 65, 129], 0.5),
            ([65] * 10 + [300], 0.9),
            ([700, 800, 900, 1000, 3000], 0.8),
            ([129, 130, 4000], 0.6),
        ],
    },
}
