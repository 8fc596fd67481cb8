"""GSM8K's calculator: the text between ``<<`` and ``=`` evaluated, without ``eval``.

GSM8K's worked answers carry calculator annotations: ``48/2 = <<48/2=24>>24``. In
the dataset's paper (Cobbe et al. 2021, "Training Verifiers to Solve Math Word
Problems", section 2 and appendix C) the model samples with a calculator: when it
writes ``=`` inside ``<<``, sampling stops, the calculator evaluates the text
between ``<<`` and ``=``, writes the result and ``>>``, and the model goes on. This
module is that calculator; :mod:`grpo_helpers.tool_rollout` runs the calls.

* :func:`calculate`: what a call writes back: the result as GSM8K writes it, or
  :data:`ERROR` (never an exception, never an unbounded computation);
* :func:`evaluate`: the exact value (a ``Fraction``), or :class:`CalculatorError`
  saying why not;
* :func:`format_number`: a value as GSM8K writes it (``24``, ``0.2``, ``-7``);
* :func:`find_annotations` and :func:`annotation_kind`: the annotations of a text, and
  how the calculator's answer compares with the one written there.

The grammar is the arithmetic of GSM8K's annotations and nothing more::

    expression := term (("+" | "-") term)*
    term       := factor (("*" | "/") factor)*
    factor     := ["+" | "-"] (number | "(" expression ")")
    number     := digits ["." digits] | "." digits

Spaces are skipped. Any other character (letters, ``**``, ``^``, ``%``, ``,``,
``e``-notation) is not arithmetic, and the answer is :data:`ERROR`. The parser is
its own (a loop over characters and a recursive descent): no Python code is ever
evaluated. Arithmetic is exact (fractions), so ``0.1+0.2`` is ``0.3``.

Every call is bounded before any arithmetic: at most :data:`MAX_CHARS` characters,
numbers of at most :data:`MAX_DIGITS` digits, :data:`MAX_DEPTH` nested
parentheses, and a result below :data:`MAX_RESULT` in size. Within those, the
largest product (about 90 digits) takes microseconds.

Introduced in: 12 (GRPO with a tool; the notebook is still to be written)

Example:
    >>> calculate("48/2"), calculate("0.2*50"), calculate("10/4"), calculate("-21/3")
    ('24', '10', '2.5', '-7')
    >>> calculate("1/0"), calculate("2**10"), calculate("__import__('os')")
    ('ERROR', 'ERROR', 'ERROR')
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = [
    "ERROR",
    "MAX_CHARS",
    "MAX_DECIMALS",
    "MAX_DEPTH",
    "MAX_DIGITS",
    "MAX_RESULT",
    "CalculatorError",
    "annotation_kind",
    "find_annotations",
    "calculate",
    "evaluate",
    "format_number",
]

#: What a call writes back when the text is not arithmetic it can evaluate: the
#: model sees ``<<1/0=ERROR>>`` and goes on.
ERROR = "ERROR"
#: Longest expression evaluated (GSM8K's longest annotation has 30 characters).
MAX_CHARS = 100
#: Most digits in one number (GSM8K's longest has 10).
MAX_DIGITS = 15
#: Deepest nesting of parentheses (GSM8K's annotations nest at most 1 deep).
MAX_DEPTH = 8
#: A result must be smaller than this in size (GSM8K's largest is 2,920,000,000).
MAX_RESULT = 10**15
#: Decimals written at most; a longer result is rounded, half away from zero
#: (GSM8K's results have at most 3 decimals, and every one of them terminates).
MAX_DECIMALS = 6

_ANNOTATION = re.compile(r"<<([^<>=]*)=([^<>=]*)>>")
_SPACES = " \t"
_OPERATORS = "+-*/()"


class CalculatorError(ValueError):
    """The text is not arithmetic the calculator evaluates; the message says why."""


def _tokens(expression: str) -> list[str | Fraction]:
    """The expression's numbers (as fractions) and operators, spaces skipped."""
    if len(expression) > MAX_CHARS:
        raise CalculatorError(f"longer than {MAX_CHARS} characters")
    found: list[str | Fraction] = []
    i = 0
    while i < len(expression):
        char = expression[i]
        if char in _SPACES:
            i += 1
        elif char in _OPERATORS:
            found.append(char)
            i += 1
        elif char.isascii() and (char.isdigit() or char == "."):
            end = i
            while end < len(expression) and (
                expression[end].isascii()
                and (expression[end].isdigit() or expression[end] == ".")
            ):
                end += 1
            found.append(_number(expression[i:end]))
            i = end
        else:
            raise CalculatorError(f"not arithmetic: {char!r}")
    return found


def _number(text: str) -> Fraction:
    """``12``, ``1.5`` or ``.5`` as an exact fraction."""
    whole, dot, decimals = text.partition(".")
    if (dot and not decimals) or "." in decimals or not (whole or decimals):
        raise CalculatorError(f"not a number: {text!r}")
    if len(whole) + len(decimals) > MAX_DIGITS:
        raise CalculatorError(f"a number of more than {MAX_DIGITS} digits")
    return Fraction(int(whole or "0") * 10 ** len(decimals) + int(decimals or "0"),
                    10 ** len(decimals))  # fmt: skip


class _Parser:
    """A recursive descent over the tokens of one expression (the module's grammar)."""

    def __init__(self, tokens: list[str | Fraction]) -> None:
        self.tokens = tokens
        self.at = 0

    def peek(self) -> str | Fraction | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> str | Fraction | None:
        token = self.peek()
        self.at += 1
        return token

    def expression(self, depth: int) -> Fraction:
        value = self.term(depth)
        while self.peek() in ("+", "-"):
            if self.take() == "+":
                value += self.term(depth)
            else:
                value -= self.term(depth)
        return value

    def term(self, depth: int) -> Fraction:
        value = self.factor(depth)
        while self.peek() in ("*", "/"):
            operator = self.take()
            right = self.factor(depth)
            if operator == "*":
                value *= right
            elif right == 0:
                raise CalculatorError("division by zero")
            else:
                value /= right
        return value

    def factor(self, depth: int) -> Fraction:
        sign = -1 if self.peek() == "-" else 1
        if self.peek() in ("+", "-"):  # one sign: ``71+-3``, ``+30+46`` (GSM8K)
            self.take()
        token = self.take()
        if isinstance(token, Fraction):
            return sign * token
        if token == "(":
            if depth >= MAX_DEPTH:
                raise CalculatorError(f"nested deeper than {MAX_DEPTH} parentheses")
            value = self.expression(depth + 1)
            if self.take() != ")":
                raise CalculatorError("a parenthesis is not closed")
            return sign * value
        where = "the end" if token is None else repr(token)
        raise CalculatorError(f"a number was expected, not {where}")


def evaluate(expression: str) -> Fraction:
    """The exact value of an arithmetic expression (the module's grammar).

    Args:
        expression: the text between ``<<`` and ``=``, e.g. ``"48/2"``.

    Returns:
        Its value as a ``Fraction``.

    Raises:
        CalculatorError: not arithmetic, empty, over a bound (length, digits,
            depth, result size), or a division by zero.

    Example:
        >>> evaluate("(1.5+2)*4"), evaluate("-18/-2"), evaluate("1/3")
        (Fraction(14, 1), Fraction(9, 1), Fraction(1, 3))
    """
    parser = _Parser(_tokens(expression))
    value = parser.expression(0)
    if parser.peek() is not None:
        raise CalculatorError(f"unexpected {parser.peek()!r}")
    if abs(value) >= MAX_RESULT:
        raise CalculatorError(f"a result of {MAX_RESULT:.0e} or more")
    return value


def format_number(value: Fraction) -> str:
    """A value as GSM8K writes it: an integer without ``.0``, decimals without
    trailing zeros, at most :data:`MAX_DECIMALS` of them (rounded half away from
    zero), a leading ``0`` before the point.

    Example:
        >>> [format_number(Fraction(x)) for x in ("24", "0.2", "-2.50", "1/3")]
        ['24', '0.2', '-2.5', '0.333333']
    """
    scale = 10**MAX_DECIMALS
    units = math.floor(abs(value) * scale + Fraction(1, 2))
    if units == 0:
        return "0"
    whole, decimals = divmod(units, scale)
    text = str(whole)
    if decimals:
        text += "." + f"{decimals:0{MAX_DECIMALS}d}".rstrip("0")
    return ("-" if value < 0 else "") + text


def calculate(expression: str) -> str:
    """What the calculator writes after ``<<expression=``: the result, or
    :data:`ERROR` (the model sees it and goes on; no exception).

    Example:
        >>> calculate("12/60"), calculate("63000-9400-9100"), calculate("1/3")
        ('0.2', '44500', '0.333333')
        >>> calculate("1" * 1000), calculate("(" * 9 + "1" + ")" * 9)
        ('ERROR', 'ERROR')
    """
    try:
        return format_number(evaluate(expression))
    except CalculatorError:
        return ERROR


def find_annotations(text: str) -> list[tuple[str, str]]:
    """``(expression, written result)`` of each ``<<expression=result>>`` in a text.

    Example:
        >>> find_annotations("48/2 = <<48/2=24>>24 clips, 48+24 = <<48+24=72>>72.")
        [('48/2', '24'), ('48+24', '72')]
    """
    return _ANNOTATION.findall(text)


def annotation_kind(expression: str, written: str) -> str:
    """How the calculator's answer compares with an annotation's written result.

    Returns:
        ``"same"`` (the same text); for the same value written otherwise,
        ``"no leading zero"`` (``.5``), ``"trailing zeros"`` (``9.00``),
        ``"fraction"`` (``3/4``) or ``"other spelling"``; ``"rounded"`` (the
        written result is the value rounded to fewer decimals); ``"different"``
        (another value); ``"error"`` (the calculator answers :data:`ERROR`).

    Example:
        >>> annotation_kind("48/2", "24"), annotation_kind("20/5000", ".004")
        ('same', 'no leading zero')
        >>> annotation_kind("100/3", "33.33"), annotation_kind("2+2", "5")
        ('rounded', 'different')
    """
    answer = calculate(expression)
    if answer == ERROR:
        return "error"
    if answer == written:
        return "same"
    value = evaluate(expression)
    try:
        wanted = evaluate(written)
    except CalculatorError:
        return "different"
    if wanted == value:
        if "/" in written:
            return "fraction"
        if written.lstrip("-").startswith("."):
            return "no leading zero"
        if "." in written and written.endswith("0"):
            return "trailing zeros"
        return "other spelling"
    decimals = len(written.partition(".")[2])
    if "/" not in written and abs(value - wanted) <= Fraction(1, 2 * 10**decimals):
        return "rounded"
    return "different"
