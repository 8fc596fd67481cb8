r"""What kind of answer is this? One class per graded answer, read from its text.

Exact and lenient accuracy say *how many* answers were right. To say *what* a GRPO
run learned, notebook 08 sorts every graded answer into one class, from the
completion alone (plus the problem's operation, where it is known):

=====================================  =============================================
class                                  the answer ...
=====================================  =============================================
``right, boxed``                       has the right number in ``\boxed{}`` (exact)
``right, unboxed``                     has the right number last, outside a box
``copied the example``                 copies the prompt's worked example
``cut off``                            hit ``max_tokens`` before a right answer
``no number``                          ended without any number to read
``wrong operation``                    computes with another operation than the
                                       problem's (subtracts in an addition problem)
``right operation, wrong result``      uses the problem's operation, gets it wrong
``wrong number, other``                has a wrong number and no expression to
                                       judge (or a problem of several operations)
=====================================  =============================================

**Precedence**, first match wins: a right answer is right whatever else it does
(``right, boxed`` counts exactly the exact grade, and ``right, boxed`` plus
``right, unboxed`` exactly the lenient one); then copying the example (a copy
often runs into ``max_tokens`` too: copying is the cause), unless the answer read
is the result of an expression the completion writes: a model that keeps the
example's opening words ("Let's spell the word out: 17 + 10 = 17") and then
computes has answered, and its wrong number is judged as one; then ``cut off``; then
``no number``; the wrong-number classes last. An answer cut off inside
``\boxed{`` has no complete box: it is ``right, unboxed`` when its last number is
right, else ``cut off``.

The three wrong-number classes need the problem's operation: the generated
arithmetic problems have exactly one (their solution's single ``<<a+b=c>>``
annotation). The *deciding expression* of a completion is the written
``a op b = c`` whose result is the answer read; without one, its last such
expression. GSM8K's problems take several operations, so their wrong numbers
stay ``wrong number, other``.

Introduced in: 08_what_grpo_learned.ipynb
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import pandas as pd

from grpo_helpers import prompts, rewards

__all__ = [
    "CLASSES",
    "FORMAT_CLASSES",
    "WRONG_NUMBER_CLASSES",
    "class_counts",
    "classify",
    "classify_records",
    "copies_example",
    "deciding_operation",
    "flip_breakdown",
    "gain_sources",
    "solution_operation",
]

RIGHT_BOXED = "right, boxed"
RIGHT_UNBOXED = "right, unboxed"
COPIED = "copied the example"
CUT_OFF = "cut off"
NO_NUMBER = "no number"
WRONG_OPERATION = "wrong operation"
RIGHT_OPERATION = "right operation, wrong result"
WRONG_OTHER = "wrong number, other"

#: Every class, in the order of precedence (and of the stacked bars).
CLASSES = (
    RIGHT_BOXED,
    RIGHT_UNBOXED,
    COPIED,
    CUT_OFF,
    NO_NUMBER,
    WRONG_OPERATION,
    RIGHT_OPERATION,
    WRONG_OTHER,
)
#: Wrong answers whose fault is the form, not the arithmetic: no number read, or
#: not in time, or the example copied instead of the question answered.
FORMAT_CLASSES = (COPIED, CUT_OFF, NO_NUMBER)
#: Wrong answers that wrote a number: the arithmetic (or the reading) was wrong.
WRONG_NUMBER_CLASSES = (WRONG_OPERATION, RIGHT_OPERATION, WRONG_OTHER)

#: Consecutive words shared with the worked example that count as a copy.
COPY_WORDS = 5

_WORD = re.compile(r"[a-z0-9']+|[+\-*/=]")
_ANNOTATION = re.compile(r"<<\s*[\d.,]+\s*([+\-*/])\s*[\d.,]+\s*=\s*[\d.,-]+\s*>>")
_OPERATORS = {"×": "*", "÷": "/"}


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def copies_example(
    completion: str,
    fewshot: Sequence[Mapping[str, str]] = prompts.FEWSHOT_PREFIX,
    min_words: int = COPY_WORDS,
) -> bool:
    """Whether ``completion`` repeats ``min_words`` consecutive words of the worked
    example in ``fewshot`` (case and punctuation ignored). No example: False.

    Example:
        >>> copies_example("Let's spell the word out and number all the letters")
        True
        >>> copies_example("Ava has 3 + 4 = 7 apples. \\boxed{7}")
        False
    """
    example = _words(prompts.example_answer(fewshot))
    if len(example) < min_words:
        return False
    shingles = {
        tuple(example[i : i + min_words]) for i in range(len(example) - min_words + 1)
    }
    words = _words(completion)
    return any(
        tuple(words[i : i + min_words]) in shingles
        for i in range(len(words) - min_words + 1)
    )


def solution_operation(answer_text: str | None) -> str | None:
    """The operation of a one-step solution: the operator of its single
    ``<<a op b=c>>`` annotation (``+ - * /``); None for zero or several steps.

    Example:
        >>> solution_operation("Ava has 3 + 4 = <<3+4=7>>7 apples.\\n#### 7")
        '+'
        >>> solution_operation("<<2*3=6>> then <<6-1=5>>\\n#### 5") is None
        True
    """
    if not answer_text:
        return None
    operations = _ANNOTATION.findall(answer_text)
    return operations[0] if len(operations) == 1 else None


def deciding_operation(completion: str, answer: str | None) -> str | None:
    """The operator of the expression that produced ``answer``: the last written
    ``a op b = c`` whose ``c`` is the answer, else the last one; None when the
    completion writes no such expression.

    Example:
        >>> deciding_operation("18 - 17 = 1, so 18 + 17 = 35. \\boxed{35}", "35")
        '+'
        >>> deciding_operation("Noah has 2 cookies.", "2") is None
        True
    """
    found = rewards.EXPRESSION.findall(completion)
    if not found:
        return None
    chosen = found[-1]
    if answer is not None:
        matching = [e for e in found if rewards.answers_match(e[3], answer)]
        if matching:
            chosen = matching[-1]
    return _OPERATORS.get(chosen[1], chosen[1])


def classify(
    completion: str,
    gold: str,
    *,
    hit_max_tokens: bool,
    operation: str | None = None,
    fewshot: Sequence[Mapping[str, str]] = prompts.FEWSHOT_PREFIX,
) -> str:
    r"""The class of one graded answer (see the module docstring for the order).

    Args:
        completion: the model's answer text.
        gold: the gold answer.
        hit_max_tokens: the completion stopped at ``max_tokens``.
        operation: the problem's one operation (``solution_operation``), or None.
        fewshot: the prompt's worked example (``prompts.FEWSHOT_PREFIX`` unless the
            answer came from another prompt); ``[]`` for a zero-shot prompt.

    Returns:
        One of :data:`CLASSES`.

    Example:
        >>> classify("3 + 4 = 7. \\boxed{7}", "7", hit_max_tokens=False)
        'right, boxed'
        >>> classify("3 - 4 = 1. \\boxed{1}", "7", hit_max_tokens=False,
        ...          operation="+")
        'wrong operation'
    """
    answer, boxed = rewards.read_answer(completion)
    if rewards.answers_match(answer, gold):
        return RIGHT_BOXED if boxed else RIGHT_UNBOXED
    if copies_example(completion, fewshot) and not rewards.computes(
        completion, answer, fewshot
    ):
        return COPIED
    if hit_max_tokens:
        return CUT_OFF
    if answer is None:
        return NO_NUMBER
    written = deciding_operation(completion, answer)
    if operation is None or written is None:
        return WRONG_OTHER
    return RIGHT_OPERATION if written == operation else WRONG_OPERATION


def classify_records(
    records: pd.DataFrame,
    fewshot: Sequence[Mapping[str, str]] = prompts.FEWSHOT_PREFIX,
) -> pd.Series:
    """The class of every record of an evaluation (``evaluation.evaluate``'s
    ``records``), in order. Records without an ``operation`` column (GSM8K, or
    runs recorded before it existed) get no operation split."""
    operations = (
        records["operation"] if "operation" in records else [None] * len(records)
    )
    return pd.Series(
        [
            classify(
                str(completion),
                str(gold),
                hit_max_tokens=bool(hit),
                operation=None if pd.isna(op) else str(op),
                fewshot=fewshot,
            )
            for completion, gold, hit, op in zip(
                records["completion"],
                records["gold"],
                records["hit_max_tokens"],
                operations,
                strict=True,
            )
        ],
        index=records.index,
        name="class",
    )


def class_counts(
    results: Mapping[str, pd.DataFrame | pd.Series],
    fewshots: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
) -> pd.DataFrame:
    """Answers per class (rows, in :data:`CLASSES` order) for each model
    (columns): records are classified, a Series of classes is counted as given.

    Args:
        results: model name -> evaluation records or their classes.
        fewshots: model name -> the worked example its prompt carried (default
            the series' strawberry example).
    """
    columns = {}
    for name, value in results.items():
        classes = (
            value
            if isinstance(value, pd.Series)
            else classify_records(
                value, (fewshots or {}).get(name, prompts.FEWSHOT_PREFIX)
            )
        )
        columns[name] = classes.value_counts().reindex(CLASSES, fill_value=0)
    return pd.DataFrame(columns)


def flip_breakdown(
    before: pd.DataFrame,
    after: pd.DataFrame,
    before_classes: pd.Series | None = None,
    after_classes: pd.Series | None = None,
) -> pd.DataFrame:
    """The exact grade's flips, each with its class before and after.

    Args:
        before, after: records of the same questions (matched on ``index``).
        before_classes, after_classes: their classes (default: classified here
            with the strawberry example).

    Returns:
        One row per question whose exact grade changed: ``index``, ``flip``
        (``"wrong -> right"`` or ``"right -> wrong"``), ``before`` and ``after``
        (classes), ``question``, ``gold`` and both completions.
    """
    if before_classes is None:
        before_classes = classify_records(before)
    if after_classes is None:
        after_classes = classify_records(after)
    left = before.assign(cls=before_classes.values)
    right = after.assign(cls=after_classes.values)
    merged = left.merge(right, on="index", suffixes=("_before", "_after"))
    if len(merged) != len(before) or len(merged) != len(after):
        raise ValueError("before and after must grade the same questions (index)")
    changed = merged[merged["exact_before"] != merged["exact_after"]]
    return pd.DataFrame(
        {
            "index": changed["index"],
            "flip": [
                "wrong -> right" if gained else "right -> wrong"
                for gained in changed["exact_after"]
            ],
            "before": changed["cls_before"],
            "after": changed["cls_after"],
            "question": changed["question_before"],
            "gold": changed["gold_before"],
            "completion_before": changed["completion_before"],
            "completion_after": changed["completion_after"],
        }
    ).reset_index(drop=True)


#: Where a flip's credit goes, by the class of the answer that was wrong.
SOURCES = {
    RIGHT_UNBOXED: "the box",
    COPIED: "answering, in time",
    CUT_OFF: "answering, in time",
    NO_NUMBER: "answering, in time",
    WRONG_OPERATION: "arithmetic",
    RIGHT_OPERATION: "arithmetic",
    WRONG_OTHER: "arithmetic",
}


def gain_sources(flips: pd.DataFrame) -> pd.Series:
    """The exact gain, in questions, split by what the wrong side lacked.

    A wrong -> right flip counts +1 for what its *before* answer lacked; a
    right -> wrong flip counts -1 for what its *after* answer lacks: ``the box``
    (the right number, unboxed), ``answering, in time`` (a copy of the example,
    cut off, or no number: the form of an answer, not its arithmetic) or
    ``arithmetic`` (a wrong number). The three add up to the net exact gain
    (wrong -> right minus right -> wrong).

    Example:
        >>> flips = pd.DataFrame({"flip": ["wrong -> right", "wrong -> right",
        ...     "right -> wrong"], "before": ["right, unboxed", "wrong operation",
        ...     "right, boxed"], "after": ["right, boxed", "right, boxed", "cut off"]})
        >>> gain_sources(flips).to_dict()
        {'the box': 1, 'answering, in time': -1, 'arithmetic': 1}
    """
    totals = dict.fromkeys(("the box", "answering, in time", "arithmetic"), 0)
    for flip, before, after in zip(
        flips["flip"], flips["before"], flips["after"], strict=True
    ):
        gained = flip == "wrong -> right"
        wrong_side = before if gained else after
        totals[SOURCES[wrong_side]] += 1 if gained else -1
    return pd.Series(totals, name="questions")
