"""grpo_helpers.calculator: GSM8K's calculator, its bounds, and every annotation of
the bundled GSM8K."""

from __future__ import annotations

import ast
import doctest
import inspect
import time
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_helpers import calculator
from grpo_helpers.calculator import ERROR, annotation_kind, calculate, evaluate

#: Seconds any one call may take: the bounds are checked before any arithmetic,
#: so each bad input is answered in microseconds; a generous limit on 2 busy cores.
TIME_LIMIT = 0.5


def timed(expression: str) -> tuple[str, float]:
    start = time.perf_counter()
    answer = calculate(expression)
    return answer, time.perf_counter() - start


def test_doctests_pass() -> None:
    result = doctest.testmod(calculator)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize(
    ("expression", "written"),
    [
        ("48/2", "24"),
        ("0.2*50", "10"),  # an integer without .0
        ("12/60", "0.2"),
        ("10/4", "2.5"),  # decimals trimmed
        ("1/8", "0.125"),
        (".5+.25", "0.75"),
        ("0.1+0.2", "0.3"),  # exact: no float error
        ("(1.5+2)*4", "14"),
        ("5 * (3 - 1)", "10"),  # spaces skipped
        ("2-3*4", "-10"),  # * before -
        ("8/4/2", "1"),  # left to right
        ("10-2-3", "5"),
        ("71+-3", "68"),  # a sign after an operator (GSM8K writes it)
        ("-18/-2", "9"),
        ("+30+46", "76"),
        ("(-17)+43", "26"),
        ("-(2+3)", "-5"),
        ("1-1", "0"),
        ("1/3", "0.333333"),  # rounded to MAX_DECIMALS
        ("2/3", "0.666667"),  # half away from zero
        ("-2/3", "-0.666667"),
        ("-0.0000001", "0"),  # no "-0"
        ("(" * 8 + "1" + ")" * 8, "1"),  # MAX_DEPTH = 8 nested: still fine
        ("99999999*9999999", "999999890000001"),  # just below MAX_RESULT
    ],
)
def test_arithmetic_is_written_as_gsm8k_writes_it(expression: str, written: str):
    assert calculate(expression) == written


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param("1/0", id="division-by-zero"),
        pytest.param("5/(2-2)", id="division-by-a-zero-expression"),
        pytest.param("2**1000000000", id="python-power"),
        pytest.param("9^9^9^9", id="caret-power"),
        pytest.param("__import__('os').system('ls')", id="python-code"),
        pytest.param("abs(-3)", id="a-function"),
        pytest.param("x+1", id="a-letter"),
        pytest.param("1e308*10", id="e-notation"),
        pytest.param("nan", id="nan"),
        pytest.param("inf", id="inf"),
        pytest.param("3 % 2", id="percent"),
        pytest.param("1,000+1", id="thousands-comma"),
        pytest.param("560//10", id="floor-division"),
        pytest.param("2(3)", id="implicit-product"),
        pytest.param("--5", id="two-signs"),
        pytest.param("1+", id="dangling-operator"),
        pytest.param("", id="empty"),
        pytest.param("()", id="empty-parentheses"),
        pytest.param("(1+2", id="unclosed"),
        pytest.param("1+2)", id="unopened"),
        pytest.param("1..2", id="two-points"),
        pytest.param("1.", id="a-point-without-decimals"),
        pytest.param("\u0663+1", id="a-non-ascii-digit"),
        pytest.param("9" * 1000, id="a-thousand-digit-number"),
        pytest.param("1234567890123456", id="a-16-digit-number"),
        pytest.param("0.0000000000000001", id="16-digits-after-the-point"),
        pytest.param("(" * 9 + "1" + ")" * 9, id="nested-9-deep"),
        pytest.param("(" * 100_000 + "1" + ")" * 100_000, id="nested-100000-deep"),
        pytest.param("1+" * 500_000 + "1", id="a-megabyte"),
        pytest.param("999999999999999*999999999999999", id="a-result-too-large"),
        pytest.param("1/0.000000000000001", id="a-quotient-too-large"),
    ],
)
def test_bad_input_is_answered_error_in_bounded_time(expression: str):
    answer, seconds = timed(expression)
    assert answer == ERROR
    assert seconds < TIME_LIMIT
    with pytest.raises(calculator.CalculatorError):
        evaluate(expression)


def test_the_largest_computation_within_bounds_is_quick():
    # 100 characters of 15-digit numbers: products and quotients of ~90 digits.
    expression = "/".join(["999999999999997"] * 6)[: calculator.MAX_CHARS]
    assert len(expression) <= calculator.MAX_CHARS
    answer, seconds = timed(expression)
    assert answer == "0" and seconds < TIME_LIMIT
    nested = "(" * 8 + "-9.99999999999999" + ")" * 8
    assert calculate(nested) == "-10" and timed(nested)[1] < TIME_LIMIT


def test_the_parser_is_its_own_never_eval():
    """No Python code is evaluated: no eval, exec, compile or ast in the module."""
    tree = ast.parse(inspect.getsource(calculator))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert not names & {"eval", "exec", "compile", "__import__"}
    imported = {
        alias.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for alias in n.names
    } | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"ast", "operator", "numexpr", "sympy"}, imported


# --- a property: trees of arithmetic, their value computed by the tree ----------

NUMBERS = st.one_of(
    st.integers(min_value=0, max_value=10**6).map(str),
    st.tuples(
        st.integers(min_value=0, max_value=999), st.integers(min_value=0, max_value=99)
    ).map(lambda p: f"{p[0]}.{p[1]:02d}"),
)


def _value(tree: object) -> Fraction | None:
    """The exact value of a tree, None where it divides by zero."""
    if isinstance(tree, str):
        return Fraction(tree)
    op, left, right = tree  # type: ignore[misc]
    a, b = _value(left), _value(right)
    if a is None or b is None or (op == "/" and b == 0):
        return None
    return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else a}[op]


def _render(tree: object) -> str:
    if isinstance(tree, str):
        return tree
    op, left, right = tree  # type: ignore[misc]
    return f"({_render(left)}{op}{_render(right)})"


TREES = st.recursive(
    NUMBERS,
    lambda inner: st.tuples(st.sampled_from("+-*/"), inner, inner),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(TREES)
def test_the_calculator_agrees_with_the_tree_it_was_written_from(tree):
    text = _render(tree)
    value = _value(tree)
    too_long = len(text) > calculator.MAX_CHARS
    if too_long or value is None or abs(value) >= calculator.MAX_RESULT:
        assert calculate(text) == ERROR
    else:
        assert evaluate(text) == value
        assert Fraction(calculate(text)) == pytest.approx(value, abs=1e-6)


# --- every annotation of the bundled GSM8K --------------------------------------

#: How the calculator's answer compares with the result written in each of the
#: 27,998 annotations of the bundled GSM8K (train and test; the copy is checked by
#: checksum when loaded, so these counts are the data's).
GSM8K_KINDS = {
    "same": 27_173,  # 97.05%: the same text
    "trailing zeros": 727,  # <<8*18=144.00>>: the same value
    "no leading zero": 95,  # <<2/10=.2>>: the same value
    "fraction": 1,  # <<3/4=3/4>>: the same value
    "error": 2,  # <<560//10=56>>, <<180//3=60>>: Python's floor division
}


def test_every_gsm8k_annotation_gets_its_written_value():
    from grpo_helpers.data import load_gsm8k

    kinds: Counter[str] = Counter()
    errors = []
    for split in ("train", "test"):
        for answer in load_gsm8k(split)["answer"]:
            for expression, written in calculator.find_annotations(answer):
                kind = annotation_kind(expression, written)
                kinds[kind] += 1
                if kind == "error":
                    errors.append(expression)
    assert dict(kinds) == GSM8K_KINDS
    assert errors == ["560//10", "180//3"]
    same_value = sum(kinds.values()) - kinds["error"]
    assert same_value / sum(kinds.values()) > 0.9999


def test_every_arithmetic_track_annotation_is_the_same_text():
    from grpo_helpers.arithmetic import make_arithmetic_problems

    found = [
        annotation_kind(expression, written)
        for difficulty in (1, 2, 3)
        for answer in make_arithmetic_problems(200, seed=0, difficulty=difficulty)[
            "answer"
        ]
        for expression, written in calculator.find_annotations(answer)
    ]
    assert len(found) >= 600 and set(found) == {"same"}


@pytest.mark.parametrize(
    ("expression", "written", "kind"),
    [
        ("48/2", "24", "same"),
        ("8*18", "144.00", "trailing zeros"),
        ("2/10", ".2", "no leading zero"),
        ("3/4", "3/4", "fraction"),
        ("100/3", "33.33", "rounded"),
        ("100/3", "33.3", "rounded"),
        ("100/3", "33.4", "different"),
        ("2+2", "5", "different"),
        ("2+2", "four", "different"),
        ("560//10", "56", "error"),
        ("4", "04", "other spelling"),
    ],
)
def test_annotation_kinds(expression: str, written: str, kind: str):
    assert annotation_kind(expression, written) == kind
