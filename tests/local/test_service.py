"""grpo_helpers.local.service: the local engine has PyTRIO's client methods, with
the same parameters, and its ``ServiceClient`` refuses what PyTRIO refuses.

For every public method of ``pytrio.ServiceClient``, ``TrainingClient`` and
``SamplingClient`` (minus a short, explained list), the local class must have it, as a
coroutine exactly when PyTRIO's is one, with the same parameter names, order, kinds
and defaults. When PyTRIO moves, this test names the drift.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect

import pytest
import pytrio as trio
from local_engine import MODEL
from pytrio.errors.base import ValidationError

from grpo_helpers.local.sampling_client import LocalSamplingClient
from grpo_helpers.local.service import LocalServiceClient
from grpo_helpers.local.training_client import LocalTrainingClient


def test_capabilities(svc):
    names = svc.get_supported_models()
    assert MODEL in names
    caps = svc.get_server_capabilities()
    assert {m.model_name for m in caps.supported_models} == set(names)
    assert asyncio.run(svc.get_server_capabilities_async()) == caps


@pytest.mark.parametrize("rank", [0, 3, 65, 128])
def test_lora_rank_outside_4_to_64(svc, rank):
    with pytest.raises(ValidationError, match=r"rank must be in \[4, 64\]") as e:
        svc.create_lora_training_client(MODEL, rank=rank)
    assert e.value.code == "validation.invalid_lora_rank"


def test_lora_rank_async(svc):
    with pytest.raises(ValidationError):
        asyncio.run(svc.create_lora_training_client_async(MODEL, rank=2))


def test_lora_needs_one_layer_group(svc):
    with pytest.raises(ValidationError, match="at least one of"):
        svc.create_lora_training_client(
            MODEL, rank=4, train_mlp=False, train_attn=False, train_unembed=False
        )


NOT_PROVIDED = {
    # REST metadata (training runs, checkpoints on PyTRIO's servers): no local twin.
    "create_rest_client",
}

PAIRS = [
    (trio.ServiceClient, LocalServiceClient),
    (trio.TrainingClient, LocalTrainingClient),
    (trio.SamplingClient, LocalSamplingClient),
]


def public_methods(cls: type) -> dict[str, object]:
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def comparable(sig: inspect.Signature) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


CASES = [
    pytest.param(theirs, ours, name, id=f"{theirs.__name__}.{name}")
    for theirs, ours in PAIRS
    for name in sorted(public_methods(theirs))
    if name not in NOT_PROVIDED
]


def test_pytrio_version_is_the_one_mirrored():
    assert importlib.metadata.version("pytrio") == "0.2.9"


def test_the_brief_methods_are_covered():
    names = {c.values[2] for c in CASES}
    for name in [
        "create_lora_training_client",
        "create_sampling_client",
        "get_server_capabilities",
        "get_supported_models",
        "forward_backward",
        "forward",
        "optim_step",
        "save_weights_for_sampler",
        "save_state",
        "load_state",
        "load_state_with_optimizer",
        "save_weights_and_get_sampling_client",
        "get_tokenizer",
        "sample",
        "sample_async",
        "compute_logprobs",
    ]:
        assert name in names


@pytest.mark.parametrize(("theirs", "ours", "name"), CASES)
def test_method_matches_pytrio(theirs, ours, name):
    reference = getattr(theirs, name)
    assert hasattr(ours, name), f"{ours.__name__} lacks {name}"
    local = getattr(ours, name)
    assert inspect.iscoroutinefunction(local) == inspect.iscoroutinefunction(
        reference
    ), f"{name}: async-ness differs"
    assert comparable(inspect.signature(local)) == comparable(
        inspect.signature(reference)
    )


def test_default_sampling_params_are_pytrios():
    ours = inspect.signature(LocalSamplingClient.sample).parameters["sampling_params"]
    theirs = inspect.signature(trio.SamplingClient.sample).parameters["sampling_params"]
    assert ours.default == theirs.default
    assert ours.default.max_tokens is None


def test_local_has_nothing_pytrio_lacks():
    """Extra public methods would let notebooks depend on the local engine."""
    for theirs, ours in PAIRS:
        extra = set(public_methods(ours)) - set(public_methods(theirs))
        assert not extra, f"{ours.__name__} adds {sorted(extra)}"
