"""Unit tests of grpo_helpers.arithmetic (notebook 01): easy word problems in
GSM8K's format, their answers, and their three disjoint splits."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest
from datasets import Dataset

from grpo_helpers import arithmetic
from grpo_helpers.arithmetic import (
    ARITHMETIC_ROWS,
    arithmetic_split,
    make_arithmetic_problems,
    make_arithmetic_splits,
)
from grpo_helpers.data import (
    extract_gsm8k_answer,
    load_gsm8k,
)

# --- load_gsm8k: bundled ------------------------------------------------------


@pytest.fixture(scope="module")
def train() -> Dataset:
    return load_gsm8k("train")


# --- make_arithmetic_problems -------------------------------------------------

_ANNOTATION = re.compile(r"<<(\d+)([-+*/])(\d+)=(\d+)>>")


_OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: Fraction(a, b),
}


def _check_problem(question: str, answer: str) -> list[tuple[int, str, int, int]]:
    """Evaluate every annotation; return them. Asserts the worked solution is right."""
    lines = answer.splitlines()
    assert lines[-1].startswith("#### ")
    gold = int(extract_gsm8k_answer(answer))
    steps = [
        (int(a), op, int(b), int(c))
        for a, op, b, c in _ANNOTATION.findall(answer)
    ]  # fmt: skip
    assert steps, answer
    question_numbers = {int(x) for x in re.findall(r"\d+", question)}
    results: set[int] = set()
    for a, op, b, c in steps:
        assert _OPS[op](a, b) == c, (a, op, b, c)
        assert c >= 0
        # operands come from the question or from an earlier step
        assert a in question_numbers | results and b in question_numbers | results
        results.add(c)
    assert steps[-1][3] == gold
    assert gold >= 0
    return steps


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_arithmetic_answers_are_correct(difficulty: int) -> None:
    rows = make_arithmetic_problems(300, seed=3, difficulty=difficulty)
    assert rows.column_names == ["question", "answer"]
    for question, answer in zip(rows["question"], rows["answer"], strict=True):
        steps = _check_problem(question, answer)
        ops = [op for _, op, _, _ in steps]
        if difficulty == 1:
            assert len(steps) == 1 and ops[0] in "+-"
            a, _, b, _ = steps[0]
            assert 2 <= a <= 21 and 2 <= b <= 21
        elif difficulty == 2:
            assert len(steps) == 1
            a, op, b, _ = steps[0]
            if op in "*":
                assert 2 <= a <= 12 and 2 <= b <= 12
        else:
            assert len(steps) == 2


def test_arithmetic_problems_are_deterministic_and_distinct() -> None:
    first = make_arithmetic_problems(50, seed=7)
    again = make_arithmetic_problems(50, seed=7)
    other = make_arithmetic_problems(50, seed=8)
    assert first.to_dict() == again.to_dict()
    assert first["question"] != other["question"]
    assert make_arithmetic_problems(50, seed=7, difficulty=2)[0] != first[0]


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_thousand_distinct_problems(difficulty: int) -> None:
    rows = make_arithmetic_problems(1000, seed=0, difficulty=difficulty)
    assert len(set(rows["question"])) == 1000


def test_arithmetic_splits_are_disjoint_and_reproducible() -> None:
    train, held_out = make_arithmetic_splits(1000, 200, seed=0, difficulty=1)
    assert (len(train), len(held_out)) == (1000, 200)
    assert set(train["question"]).isdisjoint(held_out["question"])
    # the same seed gives the same split
    again, again_held_out = make_arithmetic_splits(1000, 200, seed=0, difficulty=1)
    assert list(again["question"]) == list(train["question"])
    assert list(again_held_out["question"]) == list(held_out["question"])


def test_arithmetic_rows_load_like_gsm8k(tmp_path: Path) -> None:
    rows = make_arithmetic_problems(20, seed=1, difficulty=3)
    rows.to_json(tmp_path / "test.jsonl")
    loaded = load_gsm8k("test", data_dir=tmp_path, verify=False)
    assert loaded.to_dict() == rows.to_dict()


def test_arithmetic_zero_and_validation() -> None:
    empty = make_arithmetic_problems(0)
    assert len(empty) == 0
    with pytest.raises(ValueError, match="difficulty"):
        make_arithmetic_problems(5, difficulty=4)
    with pytest.raises(ValueError, match="n must be"):
        make_arithmetic_problems(-1)
    with pytest.raises(ValueError, match="n_test"):
        make_arithmetic_splits(5, -1)


def test_arithmetic_space_exhaustion_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        arithmetic, "_make_problem", lambda rng, difficulty: ("same?", ["x"], 1)
    )
    with pytest.raises(ValueError, match="Could only make 1 distinct problems"):
        make_arithmetic_problems(3)


def test_arithmetic_validation_and_test_splits_are_apart() -> None:
    # validation is the held-out block every earlier pilot scored (the 500 rows
    # after the 2,000 training rows); test is the next 500, scored by no pilot
    train, old_held_out = make_arithmetic_splits(2000, 500, seed=3)
    validation = arithmetic_split("validation", seed=3)
    test = arithmetic_split("test", seed=3)
    assert list(arithmetic_split("train", seed=3)["question"]) == list(
        train["question"]
    )
    assert list(validation["question"]) == list(old_held_out["question"])
    assert len(test) == ARITHMETIC_ROWS["test"]
    seen = set(train["question"]) | set(validation["question"])
    assert seen.isdisjoint(test["question"])
    with pytest.raises(ValueError, match="choose one of train, validation, test"):
        arithmetic_split("holdout")


def test_load_split_refuses_a_gsm8k_validation_split() -> None:
    from grpo_helpers.config import GRPOConfig
    from grpo_helpers.data import load_split

    config = GRPOConfig(dataset="gsm8k", backend="local")
    with pytest.raises(ValueError, match="GSM8K has no validation split"):
        load_split(config, "validation")
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        load_split(config, "dev")
    arithmetic = GRPOConfig(dataset="arithmetic", backend="local", seed=5)
    assert list(load_split(arithmetic, "test")["question"]) == list(
        arithmetic_split("test", seed=5)["question"]
    )
