"""The answer classes of notebook 08 (grpo_helpers.results.answers): every class and
every tie of the precedence on hand-written completions, and the classes against the
grades they must agree with on real records."""

from __future__ import annotations

import pandas as pd
import pytest

from grpo_helpers import arithmetic, data, prompts
from grpo_helpers.results import answers, evaluation, recorded_runs
from grpo_helpers.results.answers import (
    COPIED,
    CUT_OFF,
    NO_NUMBER,
    RIGHT_BOXED,
    RIGHT_OPERATION,
    RIGHT_UNBOXED,
    WRONG_OPERATION,
    WRONG_OTHER,
)

COPY = "Let's spell the word out and number all the letters: 1) s 2) t 3) r"

# (completion, gold, hit_max_tokens, operation, expected class, what it pins)
CASES = [
    ("Ava has 3 + 4 = 7 apples. \\boxed{7}", "7", False, "+", RIGHT_BOXED, "plain"),
    ("Ava has 3 + 4 = 7 apples.", "7", False, "+", RIGHT_UNBOXED, "no box"),
    (f"{COPY}. \\boxed{{9}}", "7", False, "+", COPIED, "copy, wrong box"),
    # precedence: a right boxed answer is right, even inside a copy of the example
    (f"{COPY} so 3 + 4 = 7. \\boxed{{7}}", "7", False, "+", RIGHT_BOXED, "copy+right"),
    # the example's opening words, then an answer computed from the problem: the
    # trained model's habit in the recorded run; its wrong number is judged as one
    (f"{COPY[:45]}: 17 + 10 = 17. \\boxed{{17}}", "27", False, "+",
     RIGHT_OPERATION, "example's words, then computed"),
    (f"{COPY}: 7 + 6 = 13. \\boxed{{13}}", "1", False, "-", WRONG_OPERATION,
     "copy, then computed with another operation"),
    # ... and a copy that ran out of tokens is a copy first
    (f"{COPY} 4) a 5) w 6) b", "70", True, "+", COPIED, "copy beats cut off"),
    ("Ava has 3 + 4 = 7 apples, and then she", "9", True, "+", CUT_OFF, "cut off"),
    # cut off inside \boxed{: no complete box; the last number decides
    ("Ava has 3 + 4 = 7. \\boxed{7", "7", True, "+", RIGHT_UNBOXED, "box cut, right"),
    ("Ava has 3 + 4 = 8. \\boxed{8", "7", True, "+", CUT_OFF, "box cut, wrong"),
    ("Cut off before any number", "7", True, "+", CUT_OFF, "cut, no number"),
    ("I do not know how many apples.", "7", False, "+", NO_NUMBER, "no number"),
    ("Ava has 3 - 4 = 1 apple. \\boxed{1}", "7", False, "+", WRONG_OPERATION, "op"),
    ("Ava has 3 + 4 = 8 apples. \\boxed{8}", "7", False, "+", RIGHT_OPERATION, "sum"),
    ("19 books - 2 books = 18 books. \\boxed{18}", "17", False, "-", RIGHT_OPERATION,
     "units between the numbers"),
    ("Ava has 8 apples. \\boxed{8}", "7", False, "+", WRONG_OTHER, "no expression"),
    # GSM8K: several operations, so no operation to compare with
    ("3 + 4 = 8. \\boxed{8}", "7", False, None, WRONG_OTHER, "operation unknown"),
    # the deciding expression is the one that produced the answer, not the last
    ("3 + 4 = 8, and 8 - 1 = 7 more. \\boxed{8}", "7", False, "+", RIGHT_OPERATION,
     "expression of the answer"),
    ("6 × 3 = 17. \\boxed{17}", "18", False, "*", RIGHT_OPERATION, "the × sign"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("completion", "gold", "hit", "operation", "expected", "what"),
    CASES,
    ids=[case[-1] for case in CASES],
)
def test_every_class_and_tie(completion, gold, hit, operation, expected, what):
    got = answers.classify(completion, gold, hit_max_tokens=hit, operation=operation)
    assert got == expected, what


def test_every_class_is_covered_by_a_case():
    assert {case[4] for case in CASES} == set(answers.CLASSES)


def test_the_copy_is_of_the_prompts_own_example():
    arithmetic = prompts.ARITHMETIC_EXAMPLE
    copy = "Mia has 12 + 5 = 17 stickers now. \\boxed{17}"
    assert answers.copies_example(copy, arithmetic)
    assert not answers.copies_example(copy)  # not the strawberry example
    assert not answers.copies_example(COPY, [])  # zero-shot: nothing to copy
    assert answers.classify(copy, "9", hit_max_tokens=False, fewshot=arithmetic) == (
        COPIED
    )


@pytest.mark.parametrize("difficulty", [1, 2])
def test_generated_problems_have_one_known_operation(difficulty):
    rows = arithmetic.make_arithmetic_problems(200, seed=1, difficulty=difficulty)
    operations = [answers.solution_operation(a) for a in rows["answer"]]
    assert set(operations) <= set("+-*/")
    if difficulty == 1:
        assert set(operations) == {"+", "-"}


def test_multi_step_problems_have_no_single_operation():
    rows = arithmetic.make_arithmetic_problems(50, seed=1, difficulty=3)
    assert {answers.solution_operation(a) for a in rows["answer"]} == {None}
    gsm8k = data.load_gsm8k("test", limit=20)
    assert sum(answers.solution_operation(a) is None for a in gsm8k["answer"]) >= 15


@pytest.fixture(scope="module")
def recorded():
    """The recorded run's three evaluations, with each question's operation."""
    run = recorded_runs.load_run()
    settings = run.meta["settings"]
    split = arithmetic.arithmetic_split(
        settings.get("split", "validation"), seed=settings["seed"]
    )
    operation = {
        q: answers.solution_operation(a)
        for q, a in zip(split["question"], split["answer"], strict=True)
    }
    return {
        name: records.assign(operation=records["question"].map(operation))
        for name, records in (
            ("base", run.base),
            ("early", run.early),
            ("trained", run.trained),
        )
    }


def test_classes_agree_with_the_grades(recorded):
    """right, boxed counts exactly the exact grade; the two right classes the
    lenient grade, graded afresh from the completions."""
    for records in recorded.values():
        classes = answers.classify_records(records)
        graded = pd.DataFrame(
            [
                evaluation._grade_text(text, gold)
                for text, gold in zip(
                    records["completion"], records["gold"], strict=True
                )
            ]
        )
        assert ((classes == RIGHT_BOXED) == graded["exact"]).all()
        right = classes.isin([RIGHT_BOXED, RIGHT_UNBOXED])
        assert (right == graded["lenient"]).all()
        assert (classes == RIGHT_BOXED).sum() == records["exact"].sum()


def test_class_counts_and_gain_sources_add_up(recorded):
    counts = answers.class_counts(recorded)
    assert list(counts.index) == list(answers.CLASSES)
    assert (counts.sum() == len(recorded["base"])).all()
    flips = answers.flip_breakdown(recorded["base"], recorded["trained"])
    gained = (flips["flip"] == "wrong -> right").sum()
    lost = (flips["flip"] == "right -> wrong").sum()
    net = recorded["trained"]["exact"].sum() - recorded["base"]["exact"].sum()
    assert gained - lost == net
    assert answers.gain_sources(flips).sum() == net
    assert set(flips.loc[flips["flip"] == "wrong -> right", "after"]) == {RIGHT_BOXED}


def test_flip_breakdown_needs_the_same_questions(recorded):
    with pytest.raises(ValueError, match="same questions"):
        answers.flip_breakdown(recorded["base"], recorded["trained"].head(10))
