"""GSM8K data: load it, read its gold answers, cut it into batches.

GSM8K (Cobbe et al., 2021; MIT licence) has 7,473 training and 1,319 test grade-school
maths word problems. Each row has a ``question`` and an ``answer``: a worked solution
with calculator annotations such as ``<<48/2=24>>``, whose last line holds the final
answer after ``####``::

    {"question": "Natalia sold clips to 48 of her friends in April, ...",
     "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\\n...\\n#### 72"}

The course ships a copy in ``data/gsm8k/`` so that everything runs offline and the
same on every machine; :func:`load_gsm8k` checks its row count and SHA-256 before
using it. ``source="hub"`` loads the original ``openai/gsm8k`` instead.

For quick experiments with a tiny model there is also a generator of *easy* word
problems in the same format (:func:`make_arithmetic_problems`).

Introduced in: 01_gsm8k_dataset.ipynb
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import random
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset

from grpo_helpers.config import SETTINGS
from grpo_helpers.rewards import normalize_answer

__all__ = [
    "BUNDLED_DIR",
    "GSM8KIntegrityError",
    "HUB_DATASET",
    "SOURCES",
    "SPLITS",
    "extract_gsm8k_answer",
    "get_num_steps",
    "load_gsm8k",
    "make_arithmetic_problems",
    "ARITHMETIC_ROWS",
    "arithmetic_split",
    "make_arithmetic_splits",
    "pick_batch",
]

#: Where the bundled copy lives: ``<project root>/data/gsm8k``.
BUNDLED_DIR = SETTINGS.project_root / "data" / "gsm8k"
#: The Hugging Face dataset and config the bundled copy was taken from.
HUB_DATASET = ("openai/gsm8k", "main")
SPLITS = ("train", "test")
SOURCES = ("bundled", "hub")
#: Seconds to wait for the Hub to answer before giving up (fail fast offline).
HUB_PROBE_TIMEOUT_S = 4.0


@dataclass(frozen=True)
class _BundledFile:
    name: str
    rows: int
    sha256: str


_BUNDLED_FILES = {
    "train": _BundledFile(
        "train.jsonl",
        7473,
        "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
    ),
    "test": _BundledFile(
        "test.jsonl",
        1319,
        "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
    ),
}


class GSM8KIntegrityError(ValueError):
    """The bundled GSM8K file is not the one the course ships (truncated or edited)."""


def _check_choice(name: str, value: object, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(
            f"Unknown {name} {value!r}; valid: " + ", ".join(repr(v) for v in valid)
        )


def _check_rows(questions: list[str], answers: list[str], origin: str) -> None:
    """ValueError quoting the first row that is not a GSM8K row."""
    for index, (question, answer) in enumerate(zip(questions, answers, strict=True)):
        row = {"question": question, "answer": answer}
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"{origin}: row {index} has no question: {row!r}")
        if not isinstance(answer, str) or "####" not in answer:
            raise ValueError(
                f"{origin}: row {index} has no '####' final answer: {row!r}"
            )


def _read_bundled(path: Path, expected: _BundledFile, verify: bool) -> Dataset:
    if not path.is_file():
        raise FileNotFoundError(
            f"Bundled GSM8K file {path} is missing. Restore it with "
            f"`git checkout -- data/gsm8k/{expected.name}`, or load the original "
            "with load_gsm8k(split, source='hub') when online."
        )
    raw = path.read_bytes()
    lines = [line for line in raw.splitlines() if line.strip()]
    if verify:
        found_sha = hashlib.sha256(raw).hexdigest()
        if len(lines) != expected.rows or found_sha != expected.sha256:
            raise GSM8KIntegrityError(
                f"Bundled GSM8K file {path} is not the shipped copy: expected "
                f"{expected.rows:,} rows with sha256 {expected.sha256}, found "
                f"{len(lines):,} rows with sha256 {found_sha}. It was truncated or "
                f"changed. Restore it with `git checkout -- data/gsm8k/{expected.name}`"
                ", or load the original with load_gsm8k(split, source='hub') when "
                "online."
            )
    questions: list[str] = []
    answers: list[str] = []
    for index, line in enumerate(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{path}: row {index} is not valid JSON ({exc}): {line[:200]!r}"
            ) from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}: row {index} is not a JSON object: {row!r}")
        questions.append(row.get("question"))
        answers.append(row.get("answer"))
    _check_rows(questions, answers, str(path))
    return Dataset.from_dict({"question": questions, "answer": answers})


def _hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def _hub_offline() -> bool:
    flags = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    return any(
        os.environ.get(f, "").strip().lower() in {"1", "true", "yes", "on"}
        for f in flags
    )


def _probe_hub(endpoint: str, timeout: float) -> str | None:
    """None when ``endpoint`` answers within ``timeout`` seconds, else the reason.

    The probe runs in a daemon thread so that a slow DNS lookup (which ignores
    socket timeouts) cannot hold the caller longer than ``timeout``.
    """
    outcome: dict[str, str | None] = {}

    def probe() -> None:
        request = urllib.request.Request(endpoint, method="HEAD")
        try:
            urllib.request.urlopen(request, timeout=timeout).close()
            outcome["error"] = None
        except urllib.error.HTTPError:
            outcome["error"] = None  # the server answered: it is reachable
        except Exception as exc:  # any failure means unreachable
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=probe, name="gsm8k-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    if thread.is_alive() or "error" not in outcome:
        return f"no answer within {timeout:g} s"
    return outcome["error"]


def _load_from_hub(split: str) -> Dataset:
    endpoint = _hub_endpoint()
    if not _hub_offline():
        reason = _probe_hub(endpoint, HUB_PROBE_TIMEOUT_S)
        if reason is not None:
            raise ConnectionError(
                f"Cannot reach the Hugging Face Hub at {endpoint} ({reason}), so "
                f"{HUB_DATASET[0]!r} cannot be downloaded. Use the copy bundled with "
                f"the course instead: load_gsm8k({split!r}, source='bundled') "
                "(the default)."
            )
    from datasets import load_dataset  # imported here: only the hub path needs it

    dataset = load_dataset(*HUB_DATASET, split=split)
    if not isinstance(dataset, Dataset):
        raise TypeError(f"Expected a datasets.Dataset, got {type(dataset)!r}")
    dataset = dataset.select_columns(["question", "answer"])
    _check_rows(dataset["question"], dataset["answer"], f"{HUB_DATASET[0]}:{split}")
    return dataset


def load_gsm8k(
    split: str = "train",
    source: str = "bundled",
    limit: int | None = None,
    *,
    data_dir: str | Path | None = None,
    verify: bool = True,
) -> Dataset:
    """Load a GSM8K split as a ``datasets.Dataset`` with columns question, answer.

    Args:
        split: ``"train"`` (7,473 rows) or ``"test"`` (1,319 rows).
        source: ``"bundled"`` (default; offline, deterministic, checked) reads
            ``data/gsm8k/<split>.jsonl``; ``"hub"`` downloads ``openai/gsm8k``
            (config ``main``) with ``datasets.load_dataset``, failing within a few
            seconds when the Hub cannot be reached.
        limit: keep only the first ``limit`` rows (None keeps all).
        data_dir: folder holding ``train.jsonl``/``test.jsonl`` instead of the
            bundled one (bundled source only).
        verify: check the row count and SHA-256 of the file (bundled source only).
            Every row is checked for a ``####`` answer either way.

    Returns:
        The rows, in file order.

    Raises:
        ValueError: unknown split or source, bad ``limit``, or a row without a
            question or a ``####`` answer (the message quotes it and its index).
        GSM8KIntegrityError: (a ValueError) the file's row count or SHA-256 differ
            from the shipped copy's.
        FileNotFoundError: the bundled file is missing.
        ConnectionError: ``source="hub"`` and the Hub cannot be reached.

    Introduced in: 01_gsm8k_dataset.ipynb

    Example:
        >>> rows = load_gsm8k("train", limit=2)
        >>> len(rows), rows.column_names
        (2, ['question', 'answer'])
        >>> extract_gsm8k_answer(rows[0]["answer"])
        '72'
    """
    _check_choice("split", split, SPLITS)
    _check_choice("source", source, SOURCES)
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
    ):
        raise ValueError(f"limit must be None or an integer >= 0, got {limit!r}")
    if source == "bundled":
        folder = BUNDLED_DIR if data_dir is None else Path(data_dir)
        expected = _BUNDLED_FILES[split]
        dataset = _read_bundled(folder / expected.name, expected, verify)
    else:
        if data_dir is not None:
            raise ValueError("data_dir applies to source='bundled' only")
        dataset = _load_from_hub(split)
    if limit is not None and limit < len(dataset):
        dataset = dataset.select(range(limit))
    return dataset


_GSM8K_FINAL = re.compile(r"####\s*(.+)")


def extract_gsm8k_answer(answer_text: str) -> str:
    """The gold answer of a GSM8K row: the text after ``####``, normalised.

    Args:
        answer_text: a row's ``answer`` (worked solution ending in ``#### N``).

    Returns:
        The final answer as :func:`grpo_helpers.rewards.normalize_answer` cleans it
        (``"#### 1,000"`` gives ``"1000"``).

    Raises:
        ValueError: no ``####`` or nothing after it; the message quotes the text.

    Introduced in: 01_gsm8k_dataset.ipynb

    Example:
        >>> extract_gsm8k_answer("48 + 24 = <<48+24=72>>72\\n#### 72")
        '72'
    """
    match = _GSM8K_FINAL.search(answer_text)
    answer = normalize_answer(match.group(1)) if match else ""
    if not answer:
        raise ValueError(f"No GSM8K final answer ('#### N') found in {answer_text!r}")
    return answer


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def get_num_steps(dataset: Dataset, steps: int, batch_size: int, all_data: bool) -> int:
    """How many training steps to run.

    Args:
        dataset: the training rows.
        steps: the requested number of steps (ignored when ``all_data``).
        batch_size: prompts per step, >= 1.
        all_data: one pass over the data: ``ceil(len(dataset) / batch_size)`` steps.

    Returns:
        The number of steps.

    Introduced in: 01_gsm8k_dataset.ipynb

    Example:
        >>> rows = Dataset.from_dict({"question": list("abcdefghij")})
        >>> get_num_steps(rows, 100, 4, all_data=True)
        3
        >>> get_num_steps(rows, 7, 4, all_data=False)
        7
    """
    _check_int("batch_size", batch_size, 1)
    if all_data:
        return (len(dataset) + batch_size - 1) // batch_size
    return _check_int("steps", steps, 0)


def pick_batch(dataset: Dataset, step: int, batch_size: int, all_data: bool) -> Dataset:
    """The rows of one training step.

    Step ``s`` takes rows ``s*batch_size`` onwards. Normally the indices wrap around
    the end of the dataset, so any number of steps works and every batch is full.
    With ``all_data`` there is no wrap-around: each row is used at most once and the
    last batch may be short.

    Args:
        dataset: the training rows (at least one).
        step: the step number, >= 0.
        batch_size: prompts per step, >= 1.
        all_data: one pass over the data (see :func:`get_num_steps`).

    Returns:
        A ``Dataset`` of ``batch_size`` rows (fewer on the last one-pass step).

    Raises:
        ValueError: bad ``step``/``batch_size``, an empty dataset, or (with
            ``all_data``) a step past the end of the pass.

    Introduced in: 01_gsm8k_dataset.ipynb

    Example:
        >>> rows = Dataset.from_dict({"question": list("abcde")})
        >>> list(pick_batch(rows, 2, 2, all_data=False)["question"])
        ['e', 'a']
        >>> list(pick_batch(rows, 2, 2, all_data=True)["question"])
        ['e']
    """
    return dataset.select(batch_indices(len(dataset), step, batch_size, all_data))


def batch_indices(size: int, step: int, batch_size: int, all_data: bool) -> list[int]:
    """The row indices :func:`pick_batch` takes at ``step`` from ``size`` rows.

    Example:
        >>> batch_indices(5, 2, 2, all_data=False), batch_indices(5, 2, 2, True)
        ([4, 0], [4])
    """
    _check_int("step", step, 0)
    _check_int("batch_size", batch_size, 1)
    if size == 0:
        raise ValueError("Cannot pick a batch from an empty dataset")
    start = step * batch_size
    if all_data:
        if start >= size:
            n_steps = (size + batch_size - 1) // batch_size
            raise ValueError(
                f"step {step} is past one pass over {size} rows with batch_size "
                f"{batch_size} (steps 0..{n_steps - 1})"
            )
        indices = list(range(start, min(start + batch_size, size)))
    else:
        indices = [(start + offset) % size for offset in range(batch_size)]
    return indices


# ---------------------------------------------------------------------------
# Easy synthetic word problems in GSM8K format
# ---------------------------------------------------------------------------

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
    _check_int("n", n, 0)
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
    _check_int("n_train", n_train, 0)
    _check_int("n_test", n_test, 0)
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
    _check_choice("split", split, tuple(ARITHMETIC_ROWS))
    start = 0
    for name, size in ARITHMETIC_ROWS.items():
        if name == split:
            break
        start += size
    rows = make_arithmetic_problems(
        start + ARITHMETIC_ROWS[split], seed=seed, difficulty=difficulty
    )
    return rows.select(range(start, start + ARITHMETIC_ROWS[split]))
