"""Unit and property tests of grpo_helpers.datum (notebook 04)."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
import pytrio as trio
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_helpers import datum as datum_module
from grpo_helpers.datum import RolloutSample, alignment_table, build_grpo_datum


def sample_of(
    tokens: list[int], advantage: float = 0.5, **overrides: object
) -> RolloutSample:
    fields = {
        "tokens": tokens,
        "logprobs": [-0.1 * (i + 1) for i in range(len(tokens))],
        "text": "completion",
        "reward": 1.0,
        "advantage": advantage,
    }
    fields.update(overrides)
    return RolloutSample(**fields)


def fields(datum: trio.Datum) -> dict[str, list]:
    return {
        "model_input": datum.model_input.to_ints(),
        **{key: value.tolist() for key, value in datum.loss_fn_inputs.items()},
    }


def test_doctests_pass() -> None:
    result = doctest.testmod(datum_module)
    assert result.failed == 0 and result.attempted > 0


def test_rollout_sample_fields() -> None:
    sample = RolloutSample(tokens=[1], logprobs=[-0.5], text="x", reward=1, advantage=0)
    assert (sample.tokens, sample.logprobs, sample.text) == ([1], [-0.5], "x")


def test_demo_alignment() -> None:
    prompt = [10, 11, 12, 13]
    sample = sample_of([20, 21, 22], advantage=-0.25)
    datum = build_grpo_datum(prompt, sample)
    got = fields(datum)
    # model_input = prompt + completion[:-1]
    assert got["model_input"] == [10, 11, 12, 13, 20, 21]
    # len(prompt) - 1 = 3 padded positions, then the completion
    assert got["target_tokens"] == [0, 0, 0, 20, 21, 22]
    assert got["logprobs"] == pytest.approx([0.0, 0.0, 0.0, -0.1, -0.2, -0.3])
    assert got["advantages"] == [0.0, 0.0, 0.0, -0.25, -0.25, -0.25]


def test_dtypes_and_shapes() -> None:
    datum = build_grpo_datum([1, 2, 3], sample_of([4, 5]))
    inputs = datum.loss_fn_inputs
    assert set(inputs) == {"target_tokens", "logprobs", "advantages"}
    assert inputs["target_tokens"].dtype == "int64"
    assert inputs["logprobs"].dtype == "float32"
    assert inputs["advantages"].dtype == "float32"
    for value in inputs.values():
        assert value.shape == [datum.model_input.length]
    assert inputs["target_tokens"].to_numpy().dtype == np.int64


def test_single_token_prompt_and_completion() -> None:
    datum = build_grpo_datum([5], sample_of([6]))
    got = fields(datum)
    assert got["model_input"] == [5]
    assert got["target_tokens"] == [6]
    assert got["advantages"] == [0.5]


def test_accepts_numpy_token_ids() -> None:
    datum = build_grpo_datum(np.array([1, 2], dtype=np.int32), sample_of([3]))
    assert fields(datum)["model_input"] == [1, 2]


@pytest.mark.parametrize(
    ("prompt", "sample", "message"),
    [
        ([], sample_of([1]), "empty prompt"),
        ([1], sample_of([]), "empty completion"),
        ([1], sample_of([1, 2], logprobs=[-0.1]), "2 tokens but 1 logprobs"),
        ([1], sample_of([1], logprobs=[math.nan]), "Logprob 0"),
        ([1], sample_of([1], logprobs=[-math.inf]), "finite"),
        ([1], sample_of([1], advantage=math.inf), "advantage"),
        ([1], sample_of([1], reward=math.nan), "reward"),
        ([-1], sample_of([1]), ">= 0"),
    ],
)
def test_clear_errors(prompt: list[int], sample: RolloutSample, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_grpo_datum(prompt, sample)


def test_non_integer_token_is_rejected() -> None:
    with pytest.raises(TypeError):
        build_grpo_datum([1.5], sample_of([1]))  # type: ignore[list-item]


TOKENS = st.lists(st.integers(min_value=0, max_value=50_000), min_size=1, max_size=40)


FINITE = st.floats(min_value=-20.0, max_value=20.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(TOKENS, TOKENS, FINITE, st.data())
def test_datum_fields_align(
    prompt: list[int], completion: list[int], advantage: float, data: st.DataObject
) -> None:
    logprobs = data.draw(
        st.lists(
            st.floats(min_value=-30.0, max_value=0.0),
            min_size=len(completion),
            max_size=len(completion),
        )
    )
    sample = RolloutSample(completion, logprobs, "t", 0.0, advantage)
    got = fields(build_grpo_datum(prompt, sample))
    length = len(prompt) + len(completion) - 1
    assert {len(value) for value in got.values()} == {length}
    n_pad = len(prompt) - 1
    # prompt positions carry zero target, logprob and advantage
    assert got["target_tokens"][:n_pad] == [0] * n_pad
    assert got["logprobs"][:n_pad] == [0.0] * n_pad
    assert got["advantages"][:n_pad] == [0.0] * n_pad
    # completion positions: target i is the token the model reads at i + 1
    assert got["target_tokens"][n_pad:] == completion
    full = prompt + completion
    assert got["model_input"] == full[:-1]
    assert got["target_tokens"][n_pad:] == full[n_pad + 1 :]
    assert got["logprobs"][n_pad:] == pytest.approx(logprobs, abs=1e-5)
    advantage32 = float(np.float32(advantage))
    assert got["advantages"][n_pad:] == [advantage32] * len(completion)


def test_alignment_table_without_tokenizer() -> None:
    prompt = [10, 11, 12]
    sample = sample_of([20, 21], advantage=1.5)
    table = alignment_table(prompt, sample)
    assert list(table.columns) == [
        "position",
        "input_token",
        "input_text",
        "target_token",
        "target_text",
        "old_logprob",
        "advantage",
        "trained",
    ]
    assert table["position"].tolist() == [0, 1, 2, 3]
    assert table["input_token"].tolist() == [10, 11, 12, 20]
    assert table["target_token"].tolist() == [0, 0, 20, 21]
    assert table["trained"].tolist() == [False, False, True, True]
    assert table["advantage"].tolist() == [0.0, 0.0, 1.5, 1.5]
    assert table["old_logprob"].tolist() == pytest.approx([0.0, 0.0, -0.1, -0.2])
    assert table["input_text"].isna().all() and table["target_text"].isna().all()


class FakeTokenizer:
    def decode(self, tokens: list[int]) -> str:
        return "".join(f"<{token}>" for token in tokens)


def test_alignment_table_with_tokenizer() -> None:
    table = alignment_table([1, 2], sample_of([3, 4]), tokenizer=FakeTokenizer())
    assert table["input_text"].tolist() == ["<1>", "<2>", "<3>"]
    assert table["target_text"].tolist() == ["", "<3>", "<4>"]


@settings(max_examples=100, deadline=None)
@given(TOKENS, TOKENS)
def test_alignment_table_agrees_with_datum(
    prompt: list[int], completion: list[int]
) -> None:
    sample = sample_of(completion)
    got = fields(build_grpo_datum(prompt, sample))
    table = alignment_table(prompt, sample)
    assert len(table) == len(got["model_input"])
    assert table["input_token"].tolist() == got["model_input"]
    assert table["target_token"].tolist() == got["target_tokens"]
    assert table["advantage"].tolist() == pytest.approx(got["advantages"])
    trained = table["trained"].tolist()
    assert trained == [i >= len(prompt) - 1 for i in range(len(table))]
    # untrained positions carry exactly zero advantage
    assert (table.loc[~table["trained"], "advantage"] == 0.0).all()
