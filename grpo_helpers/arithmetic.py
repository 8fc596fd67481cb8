"""The arithmetic track: easy word problems in GSM8K's format, and their three splits.

A 135M-parameter model solves almost no real GSM8K problem, so every group of a
GRPO step would be degenerate (all rewards 0) and the run would learn nothing. The
notebooks therefore train on generated problems a small model can sometimes solve:
one or two operations on small numbers, told as a story (people, things, buying,
sharing), with GSM8K's worked answer and its ``#### N`` last line, so the prompt,
the reward and the evaluation are the same as on GSM8K.

* :func:`make_arithmetic_problems`: ``n`` distinct problems of a difficulty, the
  same for the same seed;
* :func:`arithmetic_split`: the track's train, validation and test splits, disjoint,
  from one stream of problems (:data:`ARITHMETIC_ROWS`);
* :func:`make_arithmetic_splits`: a disjoint train and held-out pair of any size.

:func:`grpo_helpers.data.load_split` gives a run its rows from here or from GSM8K.
Its arguments are checked as a config's knobs are (:func:`grpo_helpers.knobs.check`),
as :mod:`grpo_helpers.data`'s are.

Introduced in: 01_gsm8k_dataset.ipynb
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grpo_helpers.knobs import check

__all__ = [
    "ARITHMETIC_ROWS",
    "DIFFICULTIES",
    "arithmetic_split",
    "make_arithmetic_problems",
    "make_arithmetic_splits",
]


_PEOPLE = (
    ("Ava", "she"), ("Ben", "he"), ("Chloe", "she"), ("Dan", "he"), ("Emma", "she"),
    ("Finn", "he"), ("Grace", "she"), ("Hugo", "he"), ("Isla", "she"), ("Jack", "he"),
    ("Kira", "she"), ("Leo", "he"), ("Maya", "she"), ("Noah", "he"), ("Olivia", "she"),
    ("Omar", "he"), ("Priya", "she"), ("Ravi", "he"), ("Sofia", "she"), ("Tom", "he"),
)  # fmt: skip
_ITEMS = (
    ("apple", "apples"), ("coin", "coins"), ("book", "books"), ("sticker", "stickers"),
    ("marble", "marbles"), ("pencil", "pencils"), ("cookie", "cookies"),
    ("card", "cards"), ("shell", "shells"), ("stamp", "stamps"), ("orange", "oranges"),
    ("balloon", "balloons"), ("crayon", "crayons"), ("toy car", "toy cars"),
)  # fmt: skip

if TYPE_CHECKING:
    from datasets import Dataset
_OPS: dict[str, Callable[[int, int], int]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.floordiv,
}


@dataclass(frozen=True)
class _Scene:
    """Who and what a problem is about."""

    name: str
    pronoun: str
    friend: str
    item: str
    items: str

    @property
    def cap_pronoun(self) -> str:
        return self.pronoun.capitalize()

    def count(self, n: int) -> str:
        """``"1 apple"``, ``"3 apples"``."""
        return f"{n} {self.item if n == 1 else self.items}"


def _step(a: int, op: str, b: int) -> tuple[str, int]:
    """``("a op b = <<a op b=c>>c", c)``: one GSM8K calculator annotation."""
    c = _OPS[op](a, b)
    return f"{a} {op} {b} = <<{a}{op}{b}={c}>>{c}", c


def _scene(rng: random.Random) -> _Scene:
    (name, pronoun), (friend, _) = rng.sample(_PEOPLE, 2)
    item, items = rng.choice(_ITEMS)
    return _Scene(name, pronoun, friend, item, items)


_Problem = tuple[str, list[str], int]  # question, solution lines, answer


def _one_step(rng: random.Random, s: _Scene, low: int, high: int) -> _Problem:
    """One addition or subtraction with operands in [low, high], result >= 0."""
    a, b = rng.randint(low, high), rng.randint(low, high)
    kind = rng.randrange(7)
    if kind == 0:
        text, c = _step(a, "+", b)
        q = (
            f"{s.name} has {s.count(a)}. {s.cap_pronoun} gets {b} more {s.items}. "
            f"How many {s.items} does {s.name} have now?"
        )
        return q, [f"{s.name} has {text} {s.items} now."], c
    if kind == 1:
        text, c = _step(a, "+", b)
        q = (
            f"{s.name} collected {s.count(a)} on Monday and {s.count(b)} on "
            f"Tuesday. How many {s.items} did {s.name} collect in total?"
        )
        return q, [f"{s.name} collected {text} {s.items} in total."], c
    if kind == 2:
        text, c = _step(a, "+", b)
        q = (
            f"A box holds {s.count(a)}. {s.name} puts {b} more {s.items} in it. "
            f"How many {s.items} are in the box now?"
        )
        return q, [f"The box holds {text} {s.items} now."], c
    a, b = max(a, b), min(a, b)
    if kind == 3:
        text, c = _step(a, "-", b)
        q = (
            f"{s.name} has {s.count(a)}. {s.cap_pronoun} gives {s.count(b)} to "
            f"{s.friend}. How many {s.items} does {s.name} have left?"
        )
        return q, [f"{s.name} has {text} {s.items} left."], c
    if kind == 4:
        text, c = _step(a, "-", b)
        q = (
            f"There are {s.count(a)} on the table. {s.name} takes {b} of them. "
            f"How many {s.items} are still on the table?"
        )
        return q, [f"There are {text} {s.items} still on the table."], c
    if a == b:
        a += 1  # "how many more" needs a real difference
    text, c = _step(a, "-", b)
    if kind == 5:
        q = (
            f"{s.name} has {s.count(a)} and {s.friend} has {s.count(b)}. How many "
            f"more {s.items} does {s.name} have than {s.friend}?"
        )
        return q, [f"{s.name} has {text} more {s.items} than {s.friend}."], c
    q = (
        f"{s.name} wants {s.count(a)} and already has {b}. How many more "
        f"{s.items} does {s.name} need?"
    )
    return q, [f"{s.name} needs {text} more {s.items}."], c


def _times_or_share(rng: random.Random, s: _Scene) -> _Problem:
    """One multiplication or exact division with small factors (2..12)."""
    a, b = rng.randint(2, 12), rng.randint(2, 12)
    if rng.random() < 0.5:
        text, c = _step(a, "*", b)
        q = (
            f"{s.name} buys {a} bags of {s.items}. Each bag has {s.count(b)}. "
            f"How many {s.items} does {s.name} buy?"
        )
        return q, [f"{s.name} buys {text} {s.items}."], c
    total = a * b
    text, c = _step(total, "/", b)
    q = (
        f"{s.name} shares {s.count(total)} equally among {b} friends. How many "
        f"{s.items} does each friend get?"
    )
    return q, [f"Each friend gets {text} {s.items}."], c


def _two_steps(rng: random.Random, s: _Scene) -> _Problem:
    """Two operations, every intermediate and final result >= 0."""
    kind = rng.randrange(4)
    if kind == 0:
        a, b = rng.randint(2, 30), rng.randint(2, 30)
        text1, total = _step(a, "+", b)
        c = rng.randint(1, total)
        text2, left = _step(total, "-", c)
        q = (
            f"{s.name} has {s.count(a)}. {s.cap_pronoun} buys {b} more and then gives "
            f"{c} to {s.friend}. How many {s.items} does {s.name} have now?"
        )
        lines = [
            f"After buying, {s.name} has {text1} {s.items}.",
            f"After giving some away, {s.name} has {text2} {s.items}.",
        ]
        return q, lines, left
    if kind == 1:
        a, b = rng.randint(2, 9), rng.randint(2, 12)
        text1, total = _step(a, "*", b)
        c = rng.randint(1, total)
        text2, left = _step(total, "-", c)
        q = (
            f"{s.name} buys {a} packs of {s.items} with {s.count(b)} in each pack. "
            f"{s.cap_pronoun} gives away {s.count(c)}. How many {s.items} does "
            f"{s.name} have left?"
        )
        lines = [
            f"{s.name} buys {text1} {s.items}.",
            f"{s.cap_pronoun} has {text2} {s.items} left.",
        ]
        return q, lines, left
    if kind == 2:
        k, share = rng.randint(2, 9), rng.randint(2, 9)
        total = k * share
        a = rng.randint(1, total - 2)
        b = total - a
        text1, total = _step(a, "+", b)
        text2, each = _step(total, "/", k)
        q = (
            f"{s.name} has {s.count(a)} and buys {b} more. {s.cap_pronoun} shares all "
            f"of them equally among {k} friends. How many {s.items} does each "
            "friend get?"
        )
        lines = [
            f"{s.name} has {text1} {s.items}.",
            f"Each friend gets {text2} {s.items}.",
        ]
        return q, lines, each
    a, b = rng.randint(2, 30), rng.randint(2, 30)
    text1, other = _step(a, "+", b)
    text2, together = _step(a, "+", other)
    q = (
        f"{s.name} has {s.count(a)}. {s.friend} has {b} more {s.items} than "
        f"{s.name}. How many {s.items} do they have together?"
    )
    lines = [
        f"{s.friend} has {text1} {s.items}.",
        f"Together they have {text2} {s.items}.",
    ]
    return q, lines, together


def _make_problem(rng: random.Random, difficulty: int) -> _Problem:
    scene = _scene(rng)
    if difficulty == 1:
        return _one_step(rng, scene, 2, 20)
    if difficulty == 2:
        if rng.random() < 0.5:
            return _one_step(rng, scene, 20, 500)
        return _times_or_share(rng, scene)
    return _two_steps(rng, scene)


DIFFICULTIES = (1, 2, 3)


def make_arithmetic_problems(n: int, seed: int = 0, difficulty: int = 1) -> Dataset:
    """``n`` distinct easy word problems in GSM8K format, for small-model experiments.

    A 135M-parameter model solves almost no real GSM8K problems, so every group
    would be degenerate (all rewards 0) and GRPO would learn nothing. These problems
    are easy enough to give a small model a pass rate between 0 and 1.

    Args:
        n: how many problems, >= 0.
        seed: the same seed (and difficulty) always gives the same problems.
        difficulty: 1 = one addition or subtraction with operands 2..20;
            2 = one addition/subtraction with operands 20..500, or a multiplication
            or exact division with factors 2..12; 3 = two operations.

    Returns:
        A ``Dataset`` with columns ``question`` and ``answer``; each answer is a short
        worked solution with ``<<a+b=c>>`` calculator annotations and a last line
        ``#### N``. No question appears twice, and every result is a whole number
        >= 0.

    Raises:
        ValueError: bad ``n`` or ``difficulty``, or more problems requested than the
            templates can make distinct.

    Introduced in: 01_gsm8k_dataset.ipynb

    Example:
        >>> rows = make_arithmetic_problems(3, seed=0)
        >>> len(rows), rows[0]["answer"].splitlines()[-1].startswith("#### ")
        (3, True)
    """
    check("n", n, at_least=0)
    if difficulty not in DIFFICULTIES:
        raise ValueError(
            f"Unknown difficulty {difficulty!r}; valid: "
            + ", ".join(str(d) for d in DIFFICULTIES)
        )
    rng = random.Random(f"arithmetic:{seed}:{difficulty}")
    questions: list[str] = []
    answers: list[str] = []
    seen: set[str] = set()
    attempts, max_attempts = 0, 50 * n + 1000
    while len(questions) < n:
        if attempts >= max_attempts:
            raise ValueError(
                f"Could only make {len(questions)} distinct problems at difficulty "
                f"{difficulty} (asked for {n})"
            )
        attempts += 1
        question, lines, answer = _make_problem(rng, difficulty)
        if question in seen:
            continue
        seen.add(question)
        questions.append(question)
        answers.append("\n".join([*lines, f"#### {answer}"]))
    from datasets import Dataset

    return Dataset.from_dict({"question": questions, "answer": answers})


def make_arithmetic_splits(
    n_train: int, n_test: int, seed: int = 0, difficulty: int = 1
) -> tuple[Dataset, Dataset]:
    """Disjoint train and held-out sets of easy word problems.

    The problems come from one call of :func:`make_arithmetic_problems`, whose
    questions are all distinct, so no question is in both sets.

    Args:
        n_train: problems to train on, >= 0.
        n_test: held-out problems to evaluate on, >= 0.
        seed: as in :func:`make_arithmetic_problems`.
        difficulty: as in :func:`make_arithmetic_problems`.

    Returns:
        ``(train, test)`` Datasets with ``n_train`` and ``n_test`` rows.

    Introduced in: 01_gsm8k_dataset.ipynb

    Example:
        >>> train, test = make_arithmetic_splits(20, 5, seed=1)
        >>> set(train["question"]).isdisjoint(test["question"])
        True
    """
    check("n_train", n_train, at_least=0)
    check("n_test", n_test, at_least=0)
    rows = make_arithmetic_problems(n_train + n_test, seed=seed, difficulty=difficulty)
    return rows.select(range(n_train)), rows.select(range(n_train, n_train + n_test))


#: Rows of each split of the arithmetic track, in the order they are generated: the
#: training problems, then the validation problems (every pilot and every earlier
#: "held-out" number scored these), then the final test problems, which only the
#: reported runs score. All three come from one stream of distinct questions, so
#: they never overlap, and a split is the same whatever the others' sizes.
ARITHMETIC_ROWS = {"train": 2000, "validation": 500, "test": 500}


def arithmetic_split(split: str, seed: int = 0, difficulty: int = 1) -> Dataset:
    """One split of the arithmetic track: ``"train"``, ``"validation"`` or ``"test"``.

    Settings are chosen on ``validation``; results are reported on ``test``, which
    no pilot has scored (see :data:`ARITHMETIC_ROWS`).

    Args:
        split: ``"train"``, ``"validation"`` or ``"test"``.
        seed: as in :func:`make_arithmetic_problems`; each seed has its own problems.
        difficulty: as in :func:`make_arithmetic_problems`.

    Returns:
        A ``Dataset`` with ``question`` and ``answer`` columns.

    Raises:
        ValueError: an unknown split; the message names the three.

    Introduced in: 01_gsm8k_dataset.ipynb

    Example:
        >>> val, test = (arithmetic_split(s, seed=3) for s in ("validation", "test"))
        >>> len(val), len(test), set(val["question"]).isdisjoint(test["question"])
        (500, 500, True)
    """
    check("split", split, "str", choices=tuple(ARITHMETIC_ROWS))
    start = 0
    for name, size in ARITHMETIC_ROWS.items():
        if name == split:
            break
        start += size
    rows = make_arithmetic_problems(
        start + ARITHMETIC_ROWS[split], seed=seed, difficulty=difficulty
    )
    return rows.select(range(start, start + ARITHMETIC_ROWS[split]))
