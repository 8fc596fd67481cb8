r"""Text strategies for the property tests: built from meaningful pieces.

Texts drawn one character at a time almost never spell ``\boxed{`` (0 boxes in 300
draws), so the checks that need a box never ran. These texts are made of box
openings (nested too), braces alone and in runs, near misses of ``\boxed{``,
numbers, LaTeX and noise. The tests that use them also check, with
:func:`boxy_texts`, that the interesting branch is reached often enough.

``bench/timing_limits.py`` times ``extract_boxed`` on the same texts.
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

BOXY_PIECES = (
    "\\boxed{",
    "\\boxed{",
    "\\boxed{\\boxed{",
    "\\boxed{ }",
    "\\boxed{}",
    "\\boxed{12}",
    "\\boxed",
    "\\",
    "}",
    "}",
    "}}}}",
    "{",
    "{{{{",
    "12",
    "-3",
    "3.5",
    "\\frac{1}{2}",
    " ",
    "ab",
)


def boxy_strategy(max_pieces: int) -> st.SearchStrategy[str]:
    """Hypothesis texts of up to ``max_pieces`` pieces."""
    return st.lists(st.sampled_from(BOXY_PIECES), max_size=max_pieces).map("".join)


def boxy_texts(n: int, max_pieces: int, seed: int = 0) -> list[str]:
    """``n`` texts made like :func:`boxy_strategy`'s (uniform piece count),
    reproducibly: to count how often a branch is reached."""
    rng = random.Random(seed)
    return [
        "".join(rng.choices(BOXY_PIECES, k=rng.randint(0, max_pieces)))
        for _ in range(n)
    ]
