"""Solutions to the exercises of 08_what_grpo_learned.ipynb.

tests/notebooks/test_05_09.py checks these functions against
``grpo_helpers.results.answers``.
"""

from __future__ import annotations

#: Where a flip's credit goes, by the class of the answer on its wrong side
#: (section 1's table): the right number without the box lacked the box; a copy of
#: the example, an answer cut off or one with no number lacked an answer in time;
#: a wrong number lacked the arithmetic.
_WHAT_IT_LACKED = {
    "right, unboxed": "the box",
    "copied the example": "answering, in time",
    "cut off": "answering, in time",
    "no number": "answering, in time",
    "wrong operation": "arithmetic",
    "right operation, wrong result": "arithmetic",
    "wrong number, other": "arithmetic",
}


def gain_by_source(flips) -> dict[str, int]:
    """Exercise 1: the net exact gain, in questions, split by what the wrong side
    of each flip lacked.

    A wrong -> right flip counts +1 for what its *before* answer lacked; a
    right -> wrong flip counts -1 for what its *after* answer lacks. The three
    parts add up to the net gain.
    """
    totals = {"the box": 0, "answering, in time": 0, "arithmetic": 0}
    for flip, before, after in zip(
        flips["flip"], flips["before"], flips["after"], strict=True
    ):
        if flip == "wrong -> right":
            totals[_WHAT_IT_LACKED[before]] += 1
        else:
            totals[_WHAT_IT_LACKED[after]] -= 1
    return totals


#: The grader's hidden tests (see solutions/07_evaluating_a_trained_model.py):
#: each case is a flip table as (flips, before classes, after classes).
HIDDEN_CASES = {
    "gain_by_source": {
        "cases": [
            (
                ("wrong -> right", "wrong -> right", "right -> wrong"),
                ("cut off", "right, unboxed", "right, boxed"),
                ("right, boxed", "right, boxed", "wrong operation"),
            ),
            (
                ("right -> wrong", "right -> wrong", "wrong -> right"),
                ("right, boxed", "right, boxed", "no number"),
                ("copied the example", "right, unboxed", "right, boxed"),
            ),
            (
                ("wrong -> right",) * 4,
                (
                    "right operation, wrong result",
                    "wrong number, other",
                    "copied the example",
                    "right operation, wrong result",
                ),
                ("right, boxed",) * 4,
            ),
            ((), (), ()),
        ],
        "forbid": ["grpo_helpers.results.answers.gain_sources"],
        "setup": """
def prepare(case):
    import pandas as pd

    flip, before, after = case
    return (pd.DataFrame({"flip": flip, "before": before, "after": after}),)
""",
    },
}
