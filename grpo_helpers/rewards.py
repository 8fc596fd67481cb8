r"""Rewards: read the model's final answer and compare it with the gold answer.

GRPO needs a number for every completion. On GSM8K that number comes from a
*verifiable* check: the prompt asks the model to write its final answer inside
``\boxed{...}``; we take the last boxed answer, parse it as a number and compare it
with the gold answer that follows ``####`` in the dataset.

The series teaches three rewards (:data:`REWARD_FUNCTIONS`):

* :func:`grade_answer` (``"binary"``): 1.0 when the boxed answer equals the gold
  answer, else 0.0. This is the demo scripts' reward, with a sturdier parser.
* :func:`shaped_reward` (``"shaped"``): the article's train.py reward, which also pays
  a little for an unboxed correct answer, for a near miss and for using the box:
  the one a run can game (notebook 02).
* :func:`shown_work_reward` (``"shown_work"``, notebook 05's default): 1.0 only for
  a boxed right answer that is the written result of a calculation shown in the
  completion (``3 + 4 = 7 ... \boxed{7}``, or ``5 (Monday) + 7 (Tuesday) = 12``),
  so a lucky bare guess (``\boxed{7}`` alone) earns 0 (:func:`computes`).

Earlier recorded runs used three more names (:data:`EARLIER_REWARDS`), still
accepted so that those runs can be read and run again: ``"worked_v2"`` is
``"shown_work"`` under its old name, ``"worked"`` its first version (no labels in
brackets) and ``"right_answer"`` pays 1.0 boxed and 0.5 unboxed. ``docs/results.md``
says what each run used.

Nothing here ever evaluates model text: numbers are parsed with a small grammar and
``fractions.Fraction``, and every scan is linear in the length of the text.

Introduced in: 02_reward_design.ipynb
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

from grpo_helpers import prompts
from grpo_helpers.data import normalize_answer

__all__ = [
    "DEMO_BOXED_REGEX",
    "EXPRESSION",
    "LABELLED_EXPRESSION",
    "EARLIER_REWARDS",
    "REWARD_FUNCTIONS",
    "UNBOXED_RIGHT_CREDIT",
    "answers_match",
    "canonical_reward",
    "computes",
    "extract_boxed",
    "extract_boxed_demo",
    "extract_last_number",
    "get_reward_fn",
    "grade_answer",
    "parse_number",
    "read_answer",
    "right_answer_reward",
    "shaped_reward",
    "shown_work_reward",
    "worked_reward",
]

RewardFn = Callable[[str, str], float]

#: The demo scripts' pattern: the first ``}`` ends the match, so nested braces break.
DEMO_BOXED_REGEX = re.compile(r"\\boxed\{([^}]+)\}")

_BOX_OPEN = "\\boxed{"
# Literal alternatives only: the regex engine never backtracks over the text.
_BOX_TOKENS = re.compile(r"\\boxed\{|[{}]")
_NON_SPACE = re.compile(r"\S")

# Numbers longer than this are not answers; refusing them keeps parsing cheap
# (a Fraction of a million-digit string, or 1e999999999, would take ages).
_MAX_NUMBER_CHARS = 100
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,2})?")
_SLASH_FRACTION = re.compile(r"([+-]?)(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)")
_LATEX_FRACTION = re.compile(
    r"([+-]?)\\[dt]?frac\s*\{\s*([+-]?\d+(?:\.\d+)?)\s*\}\s*\{\s*(\d+(?:\.\d+)?)\s*\}"
)
# A "-" right after a digit, letter or ")" is a minus sign between terms, not a sign.
_LAST_NUMBER = re.compile(r"(?:(?<![\w)])-)?(?:\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)")

#: Relative tolerance of :func:`answers_match` (exact for integers and fractions).
MATCH_TOLERANCE = 1e-6

_OPERAND = r"(\d[\d,]*(?:\.\d+)?)"
_UNIT = r"(?:\s+[A-Za-z']+)?"
#: A written calculation "a op b = c" (groups: a, op, b, c), with at most one word (a
#: unit) after each operand: "19 books - 2 books = 17". Only the written result is
#: read: whether a op b equals c is not checked. The first operand starts after
#: neither a digit nor a comma, so a run of digits and commas is scanned from its
#: first character only, and the scan stays linear in the text.
EXPRESSION = re.compile(
    r"(?<![\d,])"
    + _OPERAND
    + _UNIT
    + r"\s*([+\-*/×÷])\s*"
    + _OPERAND
    + _UNIT
    + r"\s*=\s*"
    + _OPERAND
)

# After an operand: at most one word, then at most one label in brackets without
# digits, of at most 30 characters ("16 marbles (Monday)", "10 (crayons)").
_LABELLED_UNIT = _UNIT + r"(?:\s*\([^()\d\n]{1,30}\))?"
#: :data:`EXPRESSION`, also reading a label in brackets after each of the first two
#: operands: "5 (Monday) + 7 (Tuesday) = 12". A bracket holding a digit is not a
#: label ("(5 + 3)"). Same groups (a, op, b, c).
LABELLED_EXPRESSION = re.compile(
    r"(?<![\d,])"
    + _OPERAND
    + _LABELLED_UNIT
    + r"\s*([+\-*/×÷])\s*"
    + _OPERAND
    + _LABELLED_UNIT
    + r"\s*=\s*"
    + _OPERAND
)


def extract_boxed_demo(text: str) -> str | None:
    r"""The demo scripts' extractor: last match of ``\\boxed\{([^}]+)\}``, stripped.

    Kept so that notebook 02 can show where it goes wrong: it stops at the first
    closing brace, so a nested answer is cut short.

    Args:
        text: a model completion.

    Returns:
        The stripped content of the last regex match, or None when nothing matches.

    Introduced in: 02_reward_design.ipynb

    Example:
        >>> extract_boxed_demo(r"so \boxed{\frac{1}{2}}")
        '\\frac{1'
    """
    matches = DEMO_BOXED_REGEX.findall(text)
    if not matches:
        return None
    return matches[-1].strip()


def extract_boxed(text: str) -> str | None:
    r"""The content of the last complete ``\boxed{...}`` in ``text``, braces balanced.

    One left-to-right scan over the braces keeps a stack of open braces, marking
    those that opened a ``\boxed{``. When a box closes we remember where it started;
    the answer is the closed box that *started* last (so ``\boxed{\boxed{5}}`` gives
    ``5``). Boxes that never close (a completion cut off by ``max_tokens``) and boxes
    with only whitespace inside are skipped. The work is linear in ``len(text)``: no
    backtracking regex, no rescans, and the answer is sliced out once at the end.

    Args:
        text: a model completion (any length; a 1 MB string takes a fraction of a
            second even when it holds thousands of unclosed boxes).

    Returns:
        The stripped content of that box, or None when no box is complete and
        non-empty.

    Introduced in: 02_reward_design.ipynb

    Example:
        >>> extract_boxed(r"half is \boxed{\frac{1}{2}}")
        '\\frac{1}{2}'
        >>> extract_boxed(r"\boxed{3} then \boxed{4")
        '3'
        >>> extract_boxed("no box here") is None
        True
    """
    if _BOX_OPEN not in text:
        return None
    # stack[i] is where the content of an open box starts, or -1 for a plain "{".
    stack: list[int] = []
    best_start = -1
    best_end = -1
    for match in _BOX_TOKENS.finditer(text):
        position = match.start()
        char = text[position]
        if char == "}":
            if not stack:
                continue  # a stray "}" outside every brace: nothing to close
            start = stack.pop()
            if start > best_start and _NON_SPACE.search(text, start, position):
                best_start, best_end = start, position
        elif char == "{":
            stack.append(-1)
        else:  # "\boxed{"
            stack.append(match.end())
    if best_start < 0:
        return None
    return text[best_start:best_end].strip()


def parse_number(text: str) -> Fraction | None:
    r"""Parse an answer as an exact number, or return None if it is not one.

    Accepted forms (after :func:`normalize_answer`): integers and decimals with an
    optional sign (``-5``, ``18.00``, ``18.``, ``.5``), thousands separators
    (``1,000``), a dollar sign (``$18``), a trailing percent sign (``25%`` or
    ``25\%``, read as 25 because GSM8K's gold answer to "what percent" is 25),
    ``a/b`` and ``\frac{a}{b}`` (also ``\dfrac``, ``\tfrac``). Anything else,
    including expressions such as ``2+3``, gives None: model text is never evaluated.

    Args:
        text: an answer string.

    Returns:
        A ``fractions.Fraction`` (exact, so ``18.00 == 18``; use ``float(x)`` for a
        float), or None.

    Introduced in: 02_reward_design.ipynb

    Example:
        >>> parse_number("$1,000.00")
        Fraction(1000, 1)
        >>> parse_number(r"\frac{1}{2}")
        Fraction(1, 2)
        >>> parse_number("2+3") is None
        True
    """
    cleaned = normalize_answer(text)
    if cleaned.endswith("\\%"):
        cleaned = cleaned[:-2].rstrip()
    elif cleaned.endswith("%"):
        cleaned = cleaned[:-1].rstrip()
    if not cleaned or len(cleaned) > _MAX_NUMBER_CHARS:
        return None
    if _DECIMAL.fullmatch(cleaned):
        try:
            return Fraction(cleaned)
        except (ValueError, ZeroDivisionError):
            return None
    fraction = _SLASH_FRACTION.fullmatch(cleaned) or _LATEX_FRACTION.fullmatch(cleaned)
    if fraction is None:
        return None
    sign, numerator, denominator = fraction.groups()
    try:
        value = Fraction(numerator) / Fraction(denominator)
    except (ValueError, ZeroDivisionError):
        return None
    return -value if sign == "-" else value


def answers_match(pred: str | None, gold: str) -> bool:
    """Whether a predicted answer equals the gold answer.

    When both parse as numbers (:func:`parse_number`) they are compared as numbers,
    within a relative tolerance of ``MATCH_TOLERANCE`` (1e-6) of the gold value, so
    ``18.00`` matches ``18`` and ``0.5`` matches ``1/2``. Otherwise the two normalised
    strings must be equal and non-empty.

    Args:
        pred: the model's answer (None when it gave none).
        gold: the gold answer, e.g. the text after ``####``.

    Returns:
        True when they match.

    Introduced in: 02_reward_design.ipynb

    Example:
        >>> answers_match("18.00", "18"), answers_match("17", "18")
        (True, False)
    """
    if pred is None:
        return False
    pred_value = parse_number(pred)
    gold_value = parse_number(gold)
    if pred_value is not None and gold_value is not None:
        if pred_value == gold_value:
            return True
        scale = max(abs(gold_value), Fraction(1))
        return abs(pred_value - gold_value) <= MATCH_TOLERANCE * scale
    pred_text = normalize_answer(pred)
    return bool(pred_text) and pred_text == normalize_answer(gold)


def extract_last_number(text: str) -> str | None:
    """The last number written in ``text``: the fallback answer when nothing is boxed.

    A number is an optional ``-``, digits with optional ``,``-grouped thousands and
    an optional decimal part (``1,000.5``). A full stop that ends a sentence is not
    part of it, nor is the minus of ``10-5`` (read as ``5``).

    Args:
        text: a model completion.

    Returns:
        The number as written (commas kept; :func:`parse_number` reads it), or None.

    Introduced in: 02_reward_design.ipynb

    Example:
        >>> extract_last_number("She has 3 apples, then 1,250 more.")
        '1,250'
    """
    last = deque(_LAST_NUMBER.finditer(text), maxlen=1)  # keeps only the last match
    return last[0].group() if last else None


def read_answer(text: str) -> tuple[str | None, bool]:
    r"""The answer as lenient grading reads it, and whether it was boxed.

    The last ``\boxed{}`` answer when there is one, else the last number in the
    text (None when there is neither). The shaped and right-answer rewards and the
    lenient grade of :mod:`grpo_helpers.results.evaluation` all read the answer this
    way.

    Example:
        >>> read_answer(r"3 + 4 = 7, so \boxed{7}"), read_answer("3 + 4 = 7")
        (('7', True), ('7', False))
        >>> read_answer("no number here")
        (None, False)
    """
    boxed_answer = extract_boxed(text)
    if boxed_answer is not None:
        return boxed_answer, True
    return extract_last_number(text), False


def grade_answer(response: str, ground_truth: str) -> float:
    r"""Binary reward: 1.0 when the last boxed answer equals the gold answer, else 0.0.

    Args:
        response: a model completion.
        ground_truth: the gold answer (text after ``####``, e.g. ``"72"``).

    Returns:
        1.0 or 0.0. A completion with no complete ``\boxed{}`` gets 0.0.

    Introduced in: 02_reward_design.ipynb

    Example:
        >>> grade_answer(r"48 + 24 = 72, so \boxed{72}", "72")
        1.0
        >>> grade_answer("48 + 24 = 72", "72")
        0.0
    """
    answer = extract_boxed(response)
    return 1.0 if answers_match(answer, ground_truth) else 0.0


def shaped_reward(response: str, ground_truth: str) -> float:
    r"""The article's shaped reward: correctness first, then closeness, then format.

    The prediction is the last boxed answer, or the last number when nothing is
    boxed. Then, in this order:

    * correct (:func:`answers_match`): 1.0 if boxed, 0.85 if not;
    * wrong but both numbers: ``max(0, 0.45 * (1 - min(rel_error, 1)))`` with
      ``rel_error = |pred - gold| / max(|gold|, 1)``, plus 0.10 if boxed;
    * otherwise: 0.10 if boxed, else 0.0.

    So a boxed near miss earns at most 0.55, always less than an unboxed correct
    answer.

    Args:
        response: a model completion.
        ground_truth: the gold answer (text after ``####``).

    Returns:
        A reward in [0, 1].

    Introduced in: 02_reward_design.ipynb

    Example:
        >>> shaped_reward(r"\boxed{72}", "72"), shaped_reward("it is 72", "72")
        (1.0, 0.85)
        >>> round(shaped_reward(r"\boxed{36}", "72"), 3)
        0.325
    """
    pred, boxed = read_answer(response)
    if answers_match(pred, ground_truth):
        return 1.0 if boxed else 0.85
    pred_value = None if pred is None else parse_number(pred)
    gold_value = parse_number(ground_truth)
    if pred_value is not None and gold_value is not None:
        scale = max(abs(float(gold_value)), 1.0)
        rel_error = abs(float(pred_value - gold_value)) / scale
        reward = max(0.0, 0.45 * (1.0 - min(rel_error, 1.0)))
        if boxed:
            reward += 0.10
        return reward
    return 0.10 if boxed else 0.0


#: What :func:`right_answer_reward` pays for a right answer outside ``\boxed{}``.
UNBOXED_RIGHT_CREDIT = 0.5


def right_answer_reward(response: str, ground_truth: str) -> float:
    r"""Pay only for a right answer: 1.0 in a box, 0.5 without one, else 0 (an
    earlier recorded run's ``"right_answer"``).

    The answer is read as lenient grading reads it: the last boxed answer, or the
    last number when nothing is boxed. There is no credit for a near miss and none
    for a box around a wrong answer.

    Example:
        >>> right_answer_reward(r"so \boxed{72}", "72"), right_answer_reward("72", "72")
        (1.0, 0.5)
        >>> right_answer_reward(r"\boxed{70}", "72")
        0.0
        >>> right_answer_reward(r"72, so \boxed{7}", "72")  # the box is the answer
        0.0
    """
    answer, boxed = read_answer(response)
    if not answers_match(answer, ground_truth):
        return 0.0
    return 1.0 if boxed else UNBOXED_RIGHT_CREDIT


def computes(
    completion: str,
    answer: str | None,
    fewshot: Sequence[Mapping[str, str]] = prompts.FEWSHOT_PREFIX,
    pattern: re.Pattern[str] = EXPRESSION,
) -> bool:
    """Whether ``answer`` is the written result of a calculation in the completion.

    True when some ``a op b = c`` of the completion (``pattern``, by default
    :data:`EXPRESSION`) has ``c``
    equal to ``answer`` (:func:`answers_match`) and is not a calculation of the
    prompt's worked example (``fewshot``), which a model could copy. Only the
    written ``c`` is read: ``11 - 15 = 4`` gives 4, though its arithmetic is wrong.
    Calculations in another form are not read, such as a unit in brackets after a
    number: ``5 (Monday) + 7 (Tuesday) = 12``, unless ``pattern`` is
    :data:`LABELLED_EXPRESSION`, which reads it. Matches do not overlap, so in a
    chain ``2 + 3 = 5 + 2 = 7`` the second calculation is not read.

    Example:
        >>> computes("3 + 4 = 7 apples. So 7", "7")
        True
        >>> computes("She has 7 apples.", "7"), computes("3 + 4 = 8", "7")
        (False, False)
    """
    if answer is None:
        return False
    copied = set(pattern.findall(prompts.example_answer(fewshot)))
    return any(
        answers_match(found[3], answer) and found not in copied
        for found in pattern.findall(completion)
    )


def worked_reward(response: str, ground_truth: str) -> float:
    r"""The first version of :func:`shown_work_reward` (an earlier recorded run's
    ``"worked"``): it reads a calculation only as ``a op b = c`` with at most one
    word after a number, so a labelled one (``5 (Monday) + 7 (Tuesday) = 12``)
    goes unpaid.

    Example:
        >>> worked_reward(r"3 + 4 = 7 apples. \boxed{7}", "7")
        1.0
        >>> worked_reward(r"5 (Monday) + 7 (Tuesday) = 12. \boxed{12}", "12")
        0.0
    """
    answer = extract_boxed(response)
    if not answers_match(answer, ground_truth):
        return 0.0
    return 1.0 if computes(response, answer) else 0.0


def shown_work_reward(response: str, ground_truth: str) -> float:
    r"""Pay only a right answer whose calculation is shown: 1.0 for a boxed right
    answer that is the written result of a calculation in the completion, else 0.0.

    The binary reward pays a bare ``\boxed{7}`` as much as a worked answer when 7
    happens to be right; in a group where nothing else is right, that lucky guess
    gets the largest advantage, and a run can learn to box guesses (notebook 02,
    section 6). Here a right answer pays only when :func:`computes` finds a
    calculation ``a op b = c`` whose written result ``c`` it is, reading also a
    label in brackets after a number (``5 (Monday) + 7 (Tuesday) = 12``,
    :data:`LABELLED_EXPRESSION`). The arithmetic of the calculation is not checked,
    and the calculations of the prompt's worked example never count. Matches do
    not overlap, so the second link of a chain (``5 (a) + 3 = 3 (b) + 4 = 7``) is
    not read.

    Args:
        response: a model completion.
        ground_truth: the gold answer (text after ``####``).

    Returns:
        1.0 or 0.0.

    Introduced in: 02_reward_design.ipynb

    Example:
        >>> shown_work_reward(r"3 + 4 = 7 apples. \boxed{7}", "7")
        1.0
        >>> shown_work_reward(r"5 (Monday) + 7 (Tuesday) = 12. \boxed{12}", "12")
        1.0
        >>> shown_work_reward(r"\boxed{12}", "12")  # a right guess, with no working
        0.0
        >>> shown_work_reward(r"3 + 4 = 7. \boxed{8}", "7")
        0.0
    """
    answer = extract_boxed(response)
    if not answers_match(answer, ground_truth):
        return 0.0
    # either reading: a labelled match can swallow the start of a plain one
    shown = computes(response, answer) or computes(
        response, answer, pattern=LABELLED_EXPRESSION
    )
    return 1.0 if shown else 0.0


#: The rewards the series teaches, by name, as a run configuration names them.
REWARD_FUNCTIONS: dict[str, RewardFn] = {
    "binary": grade_answer,
    "shaped": shaped_reward,
    "shown_work": shown_work_reward,
}
#: Names that earlier recorded runs used (``docs/results.md``), still accepted so
#: that those runs can be read and run again. ``"worked_v2"`` is ``"shown_work"``.
EARLIER_REWARDS: dict[str, RewardFn] = {
    "right_answer": right_answer_reward,
    "worked": worked_reward,
    "worked_v2": shown_work_reward,
}


def canonical_reward(name: str) -> str:
    """The taught name of a reward: an earlier name of the same function becomes
    its taught name (``"worked_v2"`` gives ``"shown_work"``); others are unchanged.

    Example:
        >>> canonical_reward("worked_v2"), canonical_reward("worked")
        ('shown_work', 'worked')
    """
    fn = EARLIER_REWARDS.get(name)
    for taught, other in REWARD_FUNCTIONS.items():
        if other is fn:
            return taught
    return name


def get_reward_fn(name: str) -> RewardFn:
    """Look up a reward function by name.

    Args:
        name: a key of :data:`REWARD_FUNCTIONS` (``"binary"``, ``"shaped"`` or
            ``"shown_work"``) or of :data:`EARLIER_REWARDS`.

    Returns:
        ``reward_fn(response, ground_truth) -> float``.

    Raises:
        ValueError: for an unknown name; the message lists the valid ones.

    Introduced in: 02_reward_design.ipynb

    Example:
        >>> get_reward_fn("binary") is grade_answer
        True
    """
    found = REWARD_FUNCTIONS.get(name) if isinstance(name, str) else None
    found = found or (EARLIER_REWARDS.get(name) if isinstance(name, str) else None)
    if found is None:
        valid = ", ".join(repr(key) for key in REWARD_FUNCTIONS)
        earlier = ", ".join(repr(key) for key in EARLIER_REWARDS)
        raise ValueError(
            f"Unknown reward function {name!r}; valid names: {valid} (and, for "
            f"earlier recorded runs, {earlier})"
        )
    return found
