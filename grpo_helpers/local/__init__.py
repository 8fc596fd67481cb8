"""The local engine: PyTRIO's client API on PyTorch + LoRA, offline by default.

``grpo_helpers.engines.connect("local")`` returns a :class:`LocalServiceClient`; the
training and rollout code then calls the same methods it would call on PyTRIO.

Modules, from the clients down:
    service: ``LocalServiceClient``, which makes the two other clients.
    training_client: ``LocalTrainingClient``: one LoRA policy, AdamW, checkpoints.
    sampling_client: ``LocalSamplingClient``: samples and scores from frozen weights.
    forward: the training client's forward and backward passes over Datums.
    prefix: which Datums share a prefix, and how items are cut into padded batches.
    losses: cross_entropy, importance_sampling, ppo, cispo, per token.
    host: one base model, many LoRA adapters, the batching sampler queue.
    sampling: the KV-cached, batched decoding loop and its logprobs.
    decoder: the forward passes the sampler runs (plain, or the adapter merged).
    checkpoints: ``local://`` URIs, safetensors adapters, optimizer state.
    adapters: a LoRA adapter's shape, its alpha, frozen copies of its weights.
    models: find and load base models and tokenizers (SmolLM2's 4-bit GGUF,
        dequantised; ``hub:<id>``; tiny-random).
    counters: how often each path (shared prefix or plain) ran, for tests.

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

from typing import Any

from grpo_helpers.local.models import load_model, load_tokenizer, resolve_model


def __getattr__(name: str) -> Any:
    """The client classes, imported on first use (they pull in torch)."""
    if name == "LocalSamplingClient":
        from grpo_helpers.local.sampling_client import LocalSamplingClient

        return LocalSamplingClient
    if name == "LocalServiceClient":
        from grpo_helpers.local.service import LocalServiceClient

        return LocalServiceClient
    if name == "LocalTrainingClient":
        from grpo_helpers.local.training_client import LocalTrainingClient

        return LocalTrainingClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "LocalSamplingClient",
    "LocalServiceClient",
    "LocalTrainingClient",
    "load_model",
    "load_tokenizer",
    "resolve_model",
]
