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

For quick experiments with a tiny model, :mod:`grpo_helpers.arithmetic` generates
*easy* word problems in the same format (the arithmetic track of the notebooks).

Introduced in: 01_gsm8k_dataset.ipynb
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from grpo_helpers.arithmetic import arithmetic_split
from grpo_helpers.knobs import check
from grpo_helpers.settings import SETTINGS

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = [
    "BUNDLED_DIR",
    "DATASETS",
    "GSM8KIntegrityError",
    "HUB_DATASET",
    "RUN_SPLITS",
    "SOURCES",
    "SPLITS",
    "extract_gsm8k_answer",
    "normalize_answer",
    "get_num_steps",
    "load_gsm8k",
    "load_split",
]

#: Where the bundled copy lives: ``<project root>/data/gsm8k``.
BUNDLED_DIR = SETTINGS.project_root / "data" / "gsm8k"
#: The Hugging Face dataset and config the bundled copy was taken from.
HUB_DATASET = ("openai/gsm8k", "main")
SPLITS = ("train", "test")
#: The datasets a run can train on: GSM8K, or the arithmetic word problems in its
#: format (:mod:`grpo_helpers.arithmetic`).
DATASETS = ("gsm8k", "arithmetic")
#: The splits a run can load: train on ``train``; choose settings on ``validation``
#: (the arithmetic track only: GSM8K has no validation split); report on ``test``.
RUN_SPLITS = ("train", "validation", "test")
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
    questions: list[Any] = []  # unchecked until _check_rows
    answers: list[Any] = []
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
    from datasets import Dataset

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
    from datasets import Dataset, load_dataset

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
    check("split", split, "str", choices=SPLITS)
    check("source", source, "str", choices=SOURCES)
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


def normalize_answer(text: str) -> str:
    r"""Light clean-up of an answer string before comparing it as text.

    Strips surrounding whitespace, drops thousands separators (``,`` and LaTeX
    ``{,}``), dollar signs (``$`` and ``\$``) and a trailing full stop. Units and words
    are left alone on purpose: a conservative normaliser never turns a wrong answer
    into a right one.

    Args:
        text: an answer, e.g. the content of a box or the text after ``####``.

    Returns:
        The cleaned string (possibly empty).

    Introduced in: 01_gsm8k_dataset.ipynb

    Example:
        >>> normalize_answer(" $1,000. ")
        '1000'
    """
    cleaned = text.replace("{,}", "").replace(",", "")
    cleaned = cleaned.replace("\\$", "").replace("$", "")
    cleaned = cleaned.strip().rstrip(".").strip()
    return cleaned


_GSM8K_FINAL = re.compile(r"####\s*(.+)")


def extract_gsm8k_answer(answer_text: str) -> str:
    """The gold answer of a GSM8K row: the text after ``####``, normalised.

    Args:
        answer_text: a row's ``answer`` (worked solution ending in ``#### N``).

    Returns:
        The final answer as :func:`normalize_answer` cleans it
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
        >>> from datasets import Dataset
        >>> rows = Dataset.from_dict({"question": list("abcdefghij")})
        >>> get_num_steps(rows, 100, 4, all_data=True)
        3
        >>> get_num_steps(rows, 7, 4, all_data=False)
        7
    """
    check("batch_size", batch_size, at_least=1)
    if all_data:
        return (len(dataset) + batch_size - 1) // batch_size
    return check("steps", steps, at_least=0)


def batch_indices(size: int, step: int, batch_size: int, all_data: bool) -> list[int]:
    """The row indices of step ``step``'s batch of ``batch_size`` among ``size``
    rows: from ``step * batch_size`` on, wrapping around the end (with
    ``all_data``, one pass: no wrap-around, the last batch may be short).

    Example:
        >>> batch_indices(5, 2, 2, all_data=False), batch_indices(5, 2, 2, True)
        ([4, 0], [4])
    """
    check("step", step, at_least=0)
    check("batch_size", batch_size, at_least=1)
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
# The rows of a run
# ---------------------------------------------------------------------------


class RowSource(Protocol):
    """What :func:`load_split` reads of a run's settings (a ``GRPOConfig`` has it)."""

    dataset: str
    seed: int
    difficulty: int
    limit: int | None


def load_split(config: RowSource, split: str) -> Dataset:
    """The rows a run trains on (``split="train"``), is tuned on (``"validation"``)
    or is reported on (``"test"``).

    Args:
        config: the run's settings (a ``GRPOConfig``): its dataset, seed, difficulty
            and train-row limit.
        split: ``"train"``, ``"validation"`` or ``"test"`` (:data:`RUN_SPLITS`).

    GSM8K comes from the bundled copy; ``dataset="arithmetic"`` generates GSM8K-format
    word problems with disjoint train, validation and test questions
    (``arithmetic.arithmetic_split``: same seed, same rows). ``limit`` keeps the
    first rows of the train split, as train.py's ``--limit``.

    Raises:
        ValueError: an unknown split, or ``"validation"`` on GSM8K.
    """
    if split not in RUN_SPLITS:
        raise ValueError(
            f"unknown split {split!r}; choose one of {', '.join(RUN_SPLITS)}"
        )
    if config.dataset == "arithmetic":
        rows = arithmetic_split(split, seed=config.seed, difficulty=config.difficulty)
    elif split == "validation":
        raise ValueError(
            "GSM8K has no validation split (only train and test); choose settings "
            "on the arithmetic track's validation split (dataset='arithmetic')"
        )
    else:
        rows = load_gsm8k(split)
    if split == "train" and config.limit is not None:
        rows = rows.select(range(min(config.limit, len(rows))))
    return rows
