"""The local engine rejects what PyTRIO rejects, with PyTRIO's errors and messages."""

from __future__ import annotations

import asyncio

import pytest
import pytrio as trio
from pytrio.errors.base import ValidationError

from grpo_helpers.engines import connect

MODEL = "tiny-random"


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    return connect("local", run_dir=tmp_path_factory.mktemp("validation-run"))


@pytest.fixture(scope="module")
def tc(svc):
    return svc.create_lora_training_client(MODEL, rank=4, seed=0)


@pytest.fixture(scope="module")
def sc(svc):
    return svc.create_sampling_client(MODEL)


def datum(n=4, **inputs) -> trio.Datum:
    inputs.setdefault("target_tokens", list(range(1, n + 1)))
    return trio.Datum(
        model_input=trio.ModelInput.from_ints(list(range(10, 10 + n))),
        loss_fn_inputs=inputs,
    )


def policy_datum(n=4, **overrides) -> trio.Datum:
    inputs = {"logprobs": [-1.0] * n, "advantages": [1.0] * n, **overrides}
    return datum(n, **inputs)


@pytest.mark.parametrize("rank", [0, 3, 65, 128])
def test_lora_rank_outside_4_to_64(svc, rank):
    with pytest.raises(ValidationError, match=r"rank must be in \[4, 64\]") as e:
        svc.create_lora_training_client(MODEL, rank=rank)
    assert e.value.code == "validation.invalid_lora_rank"


def test_lora_rank_async(svc):
    with pytest.raises(ValidationError):
        asyncio.run(svc.create_lora_training_client_async(MODEL, rank=2))


@pytest.mark.parametrize("max_tokens", [None, 0, -3])
def test_max_tokens_required_and_positive(sc, max_tokens):
    prompt = trio.ModelInput.from_ints([1, 2, 3])
    with pytest.raises(ValidationError, match="max_tokens must be greater than 0"):
        sc.sample(prompt, 1, trio.SamplingParams(max_tokens=max_tokens))


def test_default_sampling_params_fail_like_pytrio(sc):
    with pytest.raises(ValidationError, match="max_tokens must be greater than 0"):
        sc.sample(trio.ModelInput.from_ints([1, 2]))


def test_empty_prompt(sc):
    with pytest.raises(ValidationError, match="prompt cannot be empty") as e:
        sc.sample(trio.ModelInput.from_ints([]), 1, trio.SamplingParams(max_tokens=2))
    assert e.value.code == "validation.empty_prompt"
    with pytest.raises(ValidationError, match="prompt cannot be empty"):
        sc.compute_logprobs(trio.ModelInput.from_ints([]))


def test_num_samples_at_least_one(sc):
    with pytest.raises(ValidationError, match="invalid sampling request"):
        sc.sample(
            trio.ModelInput.from_ints([1, 2]), 0, trio.SamplingParams(max_tokens=2)
        )


def test_sample_async_validates_too(sc):
    with pytest.raises(ValidationError):
        asyncio.run(
            sc.sample_async(trio.ModelInput.from_ints([1]), 1, trio.SamplingParams())
        )


def test_prompt_token_outside_vocabulary(sc):
    vocab = len(sc.get_tokenizer())
    with pytest.raises(ValidationError, match="outside the tokenizer vocabulary"):
        sc.sample(
            trio.ModelInput.from_ints([1, vocab]), 1, trio.SamplingParams(max_tokens=1)
        )


def test_unknown_loss(tc):
    with pytest.raises(ValueError, match="Unsupported loss function type: hinge"):
        tc.forward_backward([datum()], "hinge")


def test_loss_names_are_stripped_and_lowercased(tc):
    out = tc.forward([datum()], "  Cross_Entropy ").result()
    assert out.metrics["token_count"] == 4


def test_dro_is_pytrio_only(tc):
    with pytest.raises(ValidationError, match="does not implement the 'dro' loss"):
        tc.forward_backward([policy_datum()], "dro")


@pytest.mark.parametrize(
    ("loss", "missing"),
    [
        ("cross_entropy", "target_tokens"),
        ("importance_sampling", "logprobs"),
        ("importance_sampling", "advantages"),
        ("ppo", "advantages"),
    ],
)
def test_missing_loss_input(tc, loss, missing):
    d = policy_datum()
    inputs = {k: v for k, v in d.loss_fn_inputs.items() if k != missing}
    with pytest.raises(ValueError, match=f"^{missing} is required$"):
        tc.forward_backward(
            [trio.Datum(model_input=d.model_input, loss_fn_inputs=inputs)], loss
        )


@pytest.mark.parametrize("field", ["target_tokens", "logprobs", "advantages"])
def test_field_length_must_equal_input_length(tc, field):
    bad = [1, 2, 3] if field == "target_tokens" else [0.5, 0.5, 0.5]
    with pytest.raises(ValueError, match=rf"{field} must have shape \[4\]"):
        tc.forward_backward([policy_datum(**{field: bad})], "importance_sampling")


def test_weights_length(tc):
    with pytest.raises(ValueError, match=r"weights must have shape \[4\]"):
        tc.forward_backward([datum(weights=[1.0, 1.0])])


def test_target_tokens_must_be_int64(tc):
    with pytest.raises(ValueError, match="target_tokens must have dtype int64"):
        tc.forward_backward([datum(target_tokens=[1.0, 2.0, 3.0, 4.0])])


def test_token_ids_inside_vocabulary(tc):
    vocab = len(tc.get_tokenizer())
    with pytest.raises(ValidationError, match="target token ID is outside"):
        tc.forward_backward([datum(target_tokens=[1, 2, 3, vocab])])
    bad_input = trio.Datum(
        model_input=trio.ModelInput.from_ints([1, 2, vocab + 5]),
        loss_fn_inputs={"target_tokens": [1, 2, 3]},
    )
    with pytest.raises(ValidationError, match="input token ID is outside"):
        tc.forward_backward([bad_input])


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_values_must_be_finite(tc, value):
    with pytest.raises(ValueError, match=r"advantages\[2\] must be finite"):
        tc.forward_backward(
            [policy_datum(advantages=[0.0, 0.0, value, 0.0])], "importance_sampling"
        )
    with pytest.raises(ValueError, match=r"weights\[0\] must be finite"):
        tc.forward_backward([datum(weights=[value, 1.0, 1.0, 1.0])])


def test_empty_batch(tc):
    with pytest.raises(ValidationError, match="training data cannot be empty"):
        tc.forward_backward([])


@pytest.mark.parametrize("name", ["-starts-with-dash", "ends.", "bad/slash", ""])
def test_checkpoint_names(tc, name):
    with pytest.raises(ValidationError, match="checkpoint name must match"):
        tc.save_weights_for_sampler(name)


def test_checkpoint_name_spaces_become_dashes(tc):
    assert (
        tc.save_weights_for_sampler("with space").result().path.endswith("with-space")
    )


def test_lora_needs_one_layer_group(svc):
    with pytest.raises(ValidationError, match="at least one of"):
        svc.create_lora_training_client(
            MODEL, rank=4, train_mlp=False, train_attn=False, train_unembed=False
        )


def test_validation_failures_queue_nothing(tc):
    """A rejected call raises at the call, before anything reaches the worker."""
    with pytest.raises(ValueError):
        tc.forward_backward([datum()], "nope")
    assert tc.forward([datum()]).result().metrics["token_count"] == 4
