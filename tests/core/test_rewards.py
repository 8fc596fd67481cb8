"""Unit and property tests of grpo_helpers.rewards (notebook 02)."""

from __future__ import annotations

import doctest
import json
import re
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import boxy_strategy, boxy_texts

from grpo_helpers import rewards
from grpo_helpers.data import normalize_answer
from grpo_helpers.rewards import (
    DEMO_BOXED_REGEX,
    REWARD_FUNCTIONS,
    UNBOXED_RIGHT_CREDIT,
    answers_match,
    extract_boxed,
    extract_boxed_demo,
    extract_last_number,
    get_reward_fn,
    grade_answer,
    parse_number,
    right_answer_reward,
    shaped_reward,
    shown_work_reward,
    worked_reward,
)

#: A megabyte of adversarial text takes well under a second in linear time; a
#: regression to quadratic time (10^12 steps) would run for hours. This limit
#: makes it fail instead, with room for two busy cores.
ADVERSARIAL_SECONDS = 60


def test_doctests_pass() -> None:
    result = doctest.testmod(rewards)
    assert result.failed == 0 and result.attempted > 0


# --- extract_boxed -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\boxed{72}", "72"),
        (r"so the answer is \boxed{ 72 } dollars", "72"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{1} then \boxed{2}", "2"),
        (r"\boxed{\boxed{5}}", "5"),
        (r"\boxed{a {b {c}} d}", "a {b {c}} d"),
        (r"\boxed{3} then \boxed{4", "3"),  # trailing unclosed box is skipped
        (r"\boxed{3} then \boxed{}", "3"),  # empty box is skipped
        (r"\boxed{3} then \boxed{   }", "3"),
        (r"} stray { braces } \boxed{7} }", "7"),
        (r"{ \boxed{8} }", "8"),
        (r"\boxed{\text{18 dollars}}", r"\text{18 dollars}"),
        ("\\boxed{1,000}", "1,000"),
        ("\\boxed{multi\nline}", "multi\nline"),
    ],
)
def test_extract_boxed_examples(text: str, expected: str) -> None:
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no box at all, 42",
        r"\boxed{}",
        r"\boxed{   }",
        r"\boxed{72",
        r"\boxed{\frac{1}{2}",
        r"\boxed 72",
        r"\boxed{",
        "}}}}{{{{",
    ],
)
def test_extract_boxed_none(text: str) -> None:
    assert extract_boxed(text) is None


def test_demo_regex_breaks_on_nested_braces() -> None:
    text = r"half is \boxed{\frac{1}{2}}"
    assert DEMO_BOXED_REGEX.pattern == r"\\boxed\{([^}]+)\}"
    assert extract_boxed_demo(text) == r"\frac{1"
    assert extract_boxed(text) == r"\frac{1}{2}"
    assert extract_boxed_demo("nothing") is None
    assert extract_boxed_demo(r"\boxed{ 5 } and \boxed{6}") == "6"


@pytest.mark.timeout(ADVERSARIAL_SECONDS)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{" * 150_000, None),  # ~1 MB of unclosed boxes
        ("\\boxed{" + "{" * 1_000_000, None),  # one box, a million unclosed braces
        ("\\boxed{" * 70_000 + "x" + "}" * 70_000, "x"),  # deep nesting that closes
        ("}" * 500_000 + "\\boxed{" * 70_000, None),
        ("\\boxed{1}" + "a" * 1_000_000 + "\\boxed{" * 10, "1"),
    ],
    ids=["unclosed-boxes", "unclosed-braces", "deep-nesting", "stray-close", "long"],
)
def test_extract_boxed_on_adversarial_megabyte(text: str, expected: str | None) -> None:
    # how long this takes is measured by bench/timing_limits.py, not here
    assert extract_boxed(text) == expected


@pytest.mark.timeout(ADVERSARIAL_SECONDS)
def test_extract_boxed_deep_nesting_result() -> None:
    text = "\\boxed{" * 1000 + "x" + "}" * 1000
    assert extract_boxed(text) == "x"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_extract_boxed_never_raises_on_any_text(text: str) -> None:
    result = extract_boxed(text)
    assert result is None or (isinstance(result, str) and result == result.strip())
    assert result != ""


BOXY_MAX_PIECES = 24


_BOXY = boxy_strategy(BOXY_MAX_PIECES)


def test_boxy_texts_reach_the_boxed_branch() -> None:
    # the property test below only checks something when a box is found
    texts = boxy_texts(500, BOXY_MAX_PIECES)
    results = [extract_boxed(text) for text in texts]
    found = [result for result in results if result is not None]
    assert len(found) >= 0.3 * len(texts)
    # ...and nested braces inside the answer are common enough to test balance
    assert sum("{" in result for result in found) >= 0.05 * len(texts)


@settings(max_examples=300, deadline=None)
@given(_BOXY)
def test_extract_boxed_result_is_balanced_and_in_text(text: str) -> None:
    result = extract_boxed(text)
    if result is not None:
        # the answer is the whole (stripped) content of one box of the text
        box = re.escape("\\boxed{") + r"\s*" + re.escape(result) + r"\s*\}"
        assert re.search(box, text) is not None
        depth = 0
        for char in result:
            depth += {"{": 1, "}": -1}.get(char, 0)
            assert depth >= 0
        assert depth == 0


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.characters(exclude_characters="{}"), max_size=50),
    st.text(alphabet=st.characters(exclude_characters="{}\\"), min_size=1, max_size=20),
)
def test_extract_boxed_finds_appended_box(prefix: str, content: str) -> None:
    expected = content.strip() or None
    assert extract_boxed(prefix + "\\boxed{" + content + "}") == expected


# --- normalize_answer / parse_number -----------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("72", "72"),
        (" 1,000 ", "1000"),
        ("$18.", "18"),
        ("\\$5", "5"),
        ("1{,}000", "1000"),
        ("  ", ""),
        ("18 dollars", "18 dollars"),  # units are kept: conservative
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("72", Fraction(72)),
        ("1,000", Fraction(1000)),
        ("18.00", Fraction(18)),
        ("18.", Fraction(18)),
        ("$18", Fraction(18)),
        ("-5", Fraction(-5)),
        ("+5", Fraction(5)),
        (".5", Fraction(1, 2)),
        ("0.25", Fraction(1, 4)),
        (r"\frac{1}{2}", Fraction(1, 2)),
        (r"\dfrac{3}{4}", Fraction(3, 4)),
        (r"-\frac{1}{2}", Fraction(-1, 2)),
        (r"\frac{-1}{2}", Fraction(-1, 2)),
        ("1/2", Fraction(1, 2)),
        ("-3 / 4", Fraction(-3, 4)),
        ("25%", Fraction(25)),
        ("25\\%", Fraction(25)),
        ("1e3", Fraction(1000)),
    ],
)
def test_parse_number(text: str, expected: Fraction) -> None:
    assert parse_number(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "2+3",
        "__import__('os')",
        "1/0",
        r"\frac{1}{0}",
        "1e999999999",
        "9" * 500,
        "nan",
        "inf",
        "18 dollars",
        "1.2.3",
    ],
)
def test_parse_number_rejects(text: str) -> None:
    assert parse_number(text) is None


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_parse_number_round_trips_integers(value: int) -> None:
    assert parse_number(str(value)) == value
    assert parse_number(f"{value:,}") == value


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120))
def test_parse_number_never_raises(text: str) -> None:
    result = parse_number(text)
    assert result is None or isinstance(result, Fraction)


# --- answers_match / extract_last_number ---------------------------------------


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ("18", "18", True),
        ("18.00", "18", True),
        ("$18", "18", True),
        ("1,000", "1000", True),
        ("0.5", r"\frac{1}{2}", True),
        ("0.3333333", "1/3", True),
        ("17", "18", False),
        ("0.34", "1/3", False),
        (None, "18", False),
        ("", "", False),
        ("abc", "abc", True),
        ("abc", "abd", False),
    ],
)
def test_answers_match(pred: str | None, gold: str, expected: bool) -> None:
    assert answers_match(pred, gold) is expected


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        # relative to the gold (scale max(|gold|, 1)): 1e-6 * 72 = 7.2e-5
        ("72.00005", "72", True),
        ("72.00007", "72", True),
        ("72.0001", "72", False),  # 1e-4 away: within 1e-4 * 72, not 1e-6 * 72
        ("-72.0001", "-72", False),
        ("71.9999", "72", False),
        # below 1 in size, an absolute 1e-6
        ("0.5000009", "0.5", True),
        ("0.500002", "0.5", False),
    ],
)
def test_match_tolerance_at_both_sides(pred: str, gold: str, expected: bool) -> None:
    """Issue 38: cases on each side of ``MATCH_TOLERANCE`` (1e-6), between it and
    1e-4, so a tolerance raised to 1e-4 fails."""
    assert answers_match(pred, gold) is expected
    assert grade_answer(rf"so \boxed{{{pred}}}", gold) == float(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("She has 3 apples, then 1,250 more.", "1,250"),
        ("The answer is 18.", "18"),
        ("costs 2.50 each", "2.50"),
        ("it dropped to -5 degrees", "-5"),
        ("(-7)", "-7"),
        ("10-5", "5"),
        ("x-3", "3"),
        ("(2)-3", "3"),
        ("3, 4", "4"),
        ("no numbers", None),
        ("", None),
    ],
)
def test_extract_last_number(text: str, expected: str | None) -> None:
    assert extract_last_number(text) == expected


# --- reward functions ---------------------------------------------------------


def test_grade_answer() -> None:
    assert grade_answer(r"48 + 24 = 72 so \boxed{72}", "72") == 1.0
    assert grade_answer(r"\boxed{72.00}", "72") == 1.0
    assert grade_answer(r"\boxed{1,000}", "1000") == 1.0
    assert grade_answer(r"\boxed{71}", "72") == 0.0
    assert grade_answer("the answer is 72", "72") == 0.0  # unboxed earns nothing
    assert grade_answer(r"\boxed{72} no wait \boxed{71}", "72") == 0.0  # last box


def test_shaped_reward_branches() -> None:
    # exact: boxed 1.0, unboxed (last number) 0.85
    assert shaped_reward(r"\boxed{72}", "72") == 1.0
    assert shaped_reward("so it is 72.", "72") == 0.85
    # near miss: 0.45 * (1 - rel_error), + 0.10 when boxed
    assert shaped_reward(r"\boxed{36}", "72") == pytest.approx(0.45 * 0.5 + 0.10)
    assert shaped_reward("it is 36", "72") == pytest.approx(0.45 * 0.5)
    # rel_error is capped at 1: a far answer earns only the format bonus
    assert shaped_reward(r"\boxed{1000}", "72") == pytest.approx(0.10)
    assert shaped_reward("1000", "72") == 0.0
    # small gold: the scale is max(|gold|, 1)
    assert shaped_reward(r"\boxed{0.5}", "0") == pytest.approx(0.45 * 0.5 + 0.10)
    # boxed but not a number, or nothing at all
    assert shaped_reward(r"\boxed{many}", "72") == pytest.approx(0.10)
    assert shaped_reward("I don't know", "72") == 0.0
    # non-numeric gold: exact string match still pays
    assert shaped_reward(r"\boxed{yes}", "yes") == 1.0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.integers(min_value=-1000, max_value=1000))
def test_shaped_reward_in_unit_interval(response: str, gold: int) -> None:
    reward = shaped_reward(response, str(gold))
    assert 0.0 <= reward <= 1.0
    assert grade_answer(response, str(gold)) in (0.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=-1000, max_value=1000),
    st.integers(min_value=-1000, max_value=1000),
)
def test_near_miss_never_beats_unboxed_correct(pred: int, gold: int) -> None:
    reward = shaped_reward(rf"\boxed{{{pred}}}", str(gold))
    if pred == gold:
        assert reward == 1.0
    else:
        assert reward <= 0.55 < 0.85


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=-1000, max_value=1000),
    st.integers(min_value=-1000, max_value=1000),
    st.booleans(),
    st.sampled_from(["{}", r"so \boxed{{{}}}", "{} apples", r"\boxed{{}} {}"]),
)
def test_right_answer_pays_only_right_answers(
    pred: int, gold: int, right: bool, template: str
) -> None:
    if right:  # half the draws are right answers: both branches are exercised
        gold = pred
    text = template.format(pred)
    reward = right_answer_reward(text, str(gold))
    boxed = extract_boxed(text) is not None
    if pred != gold:
        assert reward == 0.0
    else:
        assert reward == (1.0 if boxed else UNBOXED_RIGHT_CREDIT)


def test_right_answer_gives_a_boxed_guess_nothing() -> None:
    # notebook 02's gaming: a boxed near miss earns about 0.54 under the shaped reward
    assert shaped_reward(r"\boxed{70}", "72") > 0.5
    assert right_answer_reward(r"\boxed{70}", "72") == 0.0
    assert right_answer_reward(r"\boxed{0}", "72") == 0.0
    assert right_answer_reward("48 + 24 = 72", "72") == 0.5
    assert right_answer_reward(r"48 + 24 = 72, so \boxed{72}", "72") == 1.0
    # a wrong box is the answer, even when the right number is written before it
    assert right_answer_reward(r"72, so \boxed{7}", "72") == 0.0


def test_reward_registry() -> None:
    """The series teaches three rewards; the earlier runs' names still resolve."""
    assert dict(REWARD_FUNCTIONS) == {
        "binary": grade_answer,
        "shaped": shaped_reward,
        "shown_work": shown_work_reward,
    }
    assert dict(rewards.EARLIER_REWARDS) == {
        "right_answer": right_answer_reward,
        "worked": worked_reward,
        "worked_v2": shown_work_reward,
    }
    for name, fn in {**REWARD_FUNCTIONS, **rewards.EARLIER_REWARDS}.items():
        assert get_reward_fn(name) is fn
    assert rewards.canonical_reward("worked_v2") == "shown_work"
    for name in ("binary", "shaped", "shown_work", "worked", "right_answer"):
        assert rewards.canonical_reward(name) == name
    with pytest.raises(ValueError, match="'binary', 'shaped', 'shown_work'"):
        get_reward_fn("nope")


@pytest.mark.timeout(ADVERSARIAL_SECONDS)
@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{" * 150_000,
        "1," * 500_000,
        "-" * 500_000 + "1",
        "1.1." * 250_000,
        "9" * 1_000_000,
    ],
    ids=["unclosed-boxes", "commas", "minus-run", "dots", "digits"],
)
def test_rewards_on_adversarial_megabyte(text: str) -> None:
    # how long this takes is measured by bench/timing_limits.py, not here
    for reward_fn in REWARD_FUNCTIONS.values():
        assert 0.0 <= reward_fn(text, "72") <= 1.0
    assert grade_answer(text, "72") == 0.0  # nothing is boxed and closed
    # every text but the unclosed boxes holds a number
    assert (extract_last_number(text) is None) == text.startswith("\\boxed{")


@pytest.mark.timeout(ADVERSARIAL_SECONDS)
def test_last_number_of_adversarial_megabytes() -> None:
    assert extract_last_number("9" * 1_000_000) == "9" * 1_000_000
    assert extract_last_number("-" * 500_000 + "1") == "-1"
    assert extract_last_number("1," * 500_000) == "1"  # ",1" is not a thousands group


@settings(max_examples=300, deadline=None)
@given(_BOXY, st.integers(-50, 500))
def test_rewards_and_lenient_grade_read_the_answer_alike(text: str, gold: int) -> None:
    """read_answer is the one reading of an answer: the box, else the last number;
    the right-answer reward and the evaluation's grade follow it."""
    from grpo_helpers.results.evaluation import _grade_text

    answer, boxed = rewards.read_answer(text)
    assert boxed == (extract_boxed(text) is not None)
    assert answer == (extract_boxed(text) if boxed else extract_last_number(text))
    right = bool(rewards.answers_match(answer, str(gold)))
    expected = (1.0 if boxed else rewards.UNBOXED_RIGHT_CREDIT) if right else 0.0
    assert rewards.right_answer_reward(text, str(gold)) == expected
    grade = _grade_text(text, str(gold))
    assert (grade["answer_lenient"], grade["boxed"]) == (answer, boxed)
    assert grade["lenient"] == right and grade["exact"] == (right and boxed)


# --- worked_reward: only a calculated right answer pays ------------------------


@pytest.mark.parametrize(
    ("text", "gold", "reward"),
    [
        (r"3 + 4 = 7 apples. \boxed{7}", "7", 1.0),
        (r"19 books - 2 books = 17 books left. \boxed{17}", "17", 1.0),
        (r"6 × 7 = 42, so \boxed{42}", "42", 1.0),
        (r"3 + 4 = 7, then 7 * 2 = 14. \boxed{14}", "14", 1.0),
        (r"1,200 + 34 = 1,234 \boxed{1234}", "1234", 1.0),
        (r"\boxed{7}", "7", 0.0),  # a lucky guess: right, with no working
        (r"There are 7 apples in total. \boxed{7}", "7", 0.0),  # no calculation
        (r"3 + 4 = 7 apples.", "7", 0.0),  # worked, but not boxed
        (r"3 + 4 = 8. \boxed{8}", "7", 0.0),  # worked, wrong
        (r"3 + 4 = 7. \boxed{8}", "7", 0.0),  # the box is the answer
        (r"3 + 4 = 7. \boxed{7", "7", 0.0),  # cut off inside the box
    ],
)
def test_worked_reward_pays_only_a_calculated_right_answer(
    text: str, gold: str, reward: float
) -> None:
    assert worked_reward(text, gold) == reward


def test_worked_reward_is_binary_minus_the_uncalculated_answers() -> None:
    right = [r"\boxed{72}", r"48 + 24 = 72. \boxed{72}", r"It is 72. \boxed{72}"]
    assert [grade_answer(t, "72") for t in right] == [1.0, 1.0, 1.0]
    assert [worked_reward(t, "72") for t in right] == [0.0, 1.0, 0.0]


def test_computes_ignores_the_worked_examples_own_calculations() -> None:
    from grpo_helpers.prompts import ARITHMETIC_EXAMPLE, example_answer

    copied = rewards.EXPRESSION.findall(example_answer(ARITHMETIC_EXAMPLE))
    assert copied, "the arithmetic example writes a calculation"
    a, op, b, c = copied[0]
    text = f"{a} {op} {b} = {c}"
    assert rewards.computes(text, c)  # the strawberry prompt holds no calculation
    assert not rewards.computes(text, c, ARITHMETIC_EXAMPLE)
    assert rewards.computes(text, c, [])


# EXPRESSION as first written (answers.py before the reward needed it): the plain
# path. Its first operand may start inside a run of digits, so a megabyte of digits
# took quadratic time (20,000 digits: 53 s); EXPRESSION starts a number only after
# neither a digit nor a comma.
_PLAIN_OPERAND = r"(\d[\d,]*(?:\.\d+)?)"


_PLAIN_UNIT = r"(?:\s+[A-Za-z']+)?"


PLAIN_EXPRESSION = re.compile(
    _PLAIN_OPERAND
    + _PLAIN_UNIT
    + r"\s*([+\-*/×÷])\s*"
    + _PLAIN_OPERAND
    + _PLAIN_UNIT
    + r"\s*=\s*"
    + _PLAIN_OPERAND
)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="0123456789+-*/×÷= ab\n", max_size=40))
def test_expression_finds_what_the_plain_pattern_finds(text: str) -> None:
    # without "," and "." the two agree on every text; EXPRESSION starts no number
    # right after a comma: "a,7 + 1 = 8" and "= 3.5,7 + 1 = 8" read no "7 + 1 = 8"
    assert rewards.EXPRESSION.findall(text) == PLAIN_EXPRESSION.findall(text)


def test_expression_finds_what_the_plain_pattern_finds_in_recorded_answers() -> None:
    texts = [
        json.loads(line)["text"]
        for path in sorted(RESULTS.glob("*/*/samples*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert len(texts) > 1000
    assert [rewards.EXPRESSION.findall(t) for t in texts] == [
        PLAIN_EXPRESSION.findall(t) for t in texts
    ]


RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def test_worked_reward_gives_the_rewards_its_pilot_runs_recorded() -> None:
    # the pilot runs (bench/cpu_grpo_demo.py --reward worked) recorded every kept
    # completion's reward;
    # the packaged reward gives each the same (the gold answer is not recorded, but
    # a boxed right answer is exactly an exact grade of 1)
    # (seeds 14-17 ran with this packaged reward: for them it is a regression check)
    paths = sorted(RESULTS.glob("pilot-worked-reward/*/samples.jsonl")) + sorted(
        RESULTS.glob("worked-final/*/samples*.jsonl")
    )
    rows = [json.loads(line) for p in paths for line in p.read_text().splitlines()]
    assert len(paths) >= 16 and len(rows) >= 3360
    recomputed = [
        float(
            row["exact"] == 1.0
            and rewards.computes(row["text"], extract_boxed(row["text"]))
        )
        for row in rows
    ]
    assert recomputed == [row["reward"] for row in rows]
    assert 0 < sum(recomputed) < len(rows)


@pytest.mark.timeout(ADVERSARIAL_SECONDS)
@pytest.mark.parametrize(
    "prefix",
    [
        "9" * 1_000_000,
        "1," * 500_000,
        "1,," * 333_333,
        "1 + " * 250_000,
        "1.1." * 250_000,
    ],
    ids=["digits", "commas", "double-commas", "sums", "dots"],
)
def test_worked_reward_on_adversarial_megabyte(prefix: str) -> None:
    # a right box at the end makes worked_reward scan the whole text
    assert worked_reward(prefix + r" \boxed{72}", "72") == 0.0
    assert worked_reward(prefix + r" 70 + 2 = 72 \boxed{72}", "72") == 1.0


# --- shown_work_reward: worked, reading a label in brackets after a number ----


@pytest.mark.parametrize(
    ("text", "gold", "worked", "v2"),
    [
        (r"5 (Monday) + 7 (Tuesday) = 12. \boxed{12}", "12", 0.0, 1.0),
        (r"16 marbles (Monday) + 11 marbles (Tuesday) = 27 \boxed{27}", "27", 0.0, 1.0),
        (r"There are 4 (apples) - 2 (r) = 2 apples left. \boxed{2}", "2", 0.0, 1.0),
        (r"10 (crayons) + 6 = 16 \boxed{16}", "16", 0.0, 1.0),
        (r"3 + 4 = 7 apples. \boxed{7}", "7", 1.0, 1.0),
        (r"\boxed{12}", "12", 0.0, 0.0),  # a lucky guess pays nothing under either
        (r"5 (Monday) + 7 (Tuesday) = 12. \boxed{13}", "12", 0.0, 0.0),  # wrong box
        (r"5 (day 1) + 7 (day 2) = 12. \boxed{12}", "12", 0.0, 0.0),  # digit: no label
        (r"5 (" + "a" * 31 + r") + 7 = 12. \boxed{12}", "12", 0.0, 0.0),  # too long
        (r"5 (Monday) + 7 (Tuesday) = 12. \boxed{12", "12", 0.0, 0.0),  # cut off
        # a labelled match swallows the start of the plain one; v2 reads both
        (r"5 (a) + 3 = 3 + 4 = 7 \boxed{7}", "7", 1.0, 1.0),
        (r"5 (" + "a" * 30 + r") + 7 = 12. \boxed{12}", "12", 0.0, 1.0),  # 30: a label
        # matches do not overlap: the second link of a chain is read by neither
        (r"5 (a) + 3 = 3 (b) + 4 = 7 \boxed{7}", "7", 0.0, 0.0),
        (r"2 + 3 = 5 + 2 = 7 \boxed{7}", "7", 0.0, 0.0),
    ],
)
def test_worked_v2_reads_bracketed_labels(
    text: str, gold: str, worked: float, v2: float
) -> None:
    assert (worked_reward(text, gold), shown_work_reward(text, gold)) == (worked, v2)


def test_worked_v2_changes_only_bracketed_answers_of_the_worked_runs() -> None:
    # every completion the worked runs recorded: v2 pays all that worked paid, and
    # the ones it adds are exactly the bracketed calculations that worked left
    # unpaid (bench/results/worked-v2/README.md quotes the count)
    paths = sorted(RESULTS.glob("pilot-worked-reward/*/samples.jsonl")) + sorted(
        RESULTS.glob("worked-final/*/samples-all.jsonl")
    )
    rows = [json.loads(line) for p in paths for line in p.read_text().splitlines()]
    assert len(paths) == 10 and len(rows) == 4 * 120 + 6 * 480
    changed = []
    for row in rows:
        # a boxed right answer is exactly an exact grade of 1: the box stands in
        # for the gold answer, which the samples do not record
        gold = extract_boxed(row["text"]) if row["exact"] == 1.0 else None
        v2 = shown_work_reward(row["text"], gold) if gold is not None else 0.0
        assert v2 >= row["reward"]  # v2 is shown_work_reward, not its parts
        if v2 != row["reward"]:
            changed.append(row["text"])
    assert len(changed) == 10
    assert all(re.search(r"\d+(?: [a-z]+)? \([A-Za-z ]+\) [+-]", t) for t in changed)


_LABELS = st.sampled_from(["", " apples", " (Monday)", " cars (red)", " (r)"])


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet="+-= ()ab\n", max_size=20),  # no digit: no number
    st.integers(0, 99),
    _LABELS,
    st.sampled_from("+-*"),
    st.integers(0, 99),
    _LABELS,
    st.integers(0, 99),
    st.booleans(),
)
def test_worked_v2_pays_whatever_worked_pays(
    noise: str, a: int, la: str, op: str, b: int, lb: str, c: int, right: bool
) -> None:
    # a calculation, labelled or not, after random text with no number in it; the
    # box holds c, which is the gold answer or one off it
    response = f"{noise} {a}{la} {op} {b}{lb} = {c}. \\boxed{{{c}}}"
    gold = str(c if right else c + 1)
    worked, v2 = worked_reward(response, gold), shown_work_reward(response, gold)
    assert v2 >= worked
    assert v2 == float(right)
    assert worked == float(right and "(" not in la + lb)


@pytest.mark.timeout(ADVERSARIAL_SECONDS)
@pytest.mark.parametrize(
    "prefix",
    [
        "9" * 1_000_000,
        "1 (a) " * 166_666,
        "1 (" * 333_333,
        "1 (" + "a" * 1_000_000,
        "1 " * 500_000,
        "1" + " " * 999_999,
        "1 a (b) + " * 100_000,
        " (" * 500_000,
    ],
    ids=[
        "digits",
        "labels",
        "open-brackets",
        "long-label",
        "spaces",
        "one-space-run",
        "labelled-sums",
        "space-brackets",
    ],
)
def test_shown_work_reward_on_adversarial_megabyte(prefix: str) -> None:
    assert shown_work_reward(prefix + r" \boxed{72}", "72") == 0.0
    assert shown_work_reward(prefix + r" 70 (a) + 2 = 72 \boxed{72}", "72") == 1.0


def test_worked_v2_gives_the_rewards_its_runs_recorded() -> None:
    # bench/results/worked-v2/: every completion of every run, rewards recomputed
    paths = sorted(RESULTS.glob("worked-v2/*/samples-all.jsonl"))
    rows = [json.loads(line) for p in paths for line in p.read_text().splitlines()]
    assert len(paths) == 9 and len(rows) == 480 * len(paths)  # seeds 0, 2, 9, 18-23
    recomputed = [
        shown_work_reward(row["text"], extract_boxed(row["text"]) or "")
        if row["exact"] == 1.0
        else 0.0
        for row in rows
    ]
    assert recomputed == [row["reward"] for row in rows]
    assert 0 < sum(recomputed) < len(rows)
    # validation seed 2 was paid at step 17 for a labelled answer worked missed
    label_only = {
        (row["step"], row["text"][:20])
        for row, paid in zip(rows, recomputed, strict=True)
        if paid and not worked_reward(row["text"], extract_boxed(row["text"]) or "")
    }
    assert (17, "11 (orange) + 11 (mo") in label_only
