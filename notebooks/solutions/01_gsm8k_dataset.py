"""Solutions to the exercises of 01_gsm8k_dataset.ipynb.

tests/test_notebooks_01_04.py runs the notebook's self-check cells on these.
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
