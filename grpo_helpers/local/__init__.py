"""The local engine: PyTRIO's client API on PyTorch + LoRA, offline by default.

``grpo_helpers.engines.connect("local")`` returns a :class:`LocalServiceClient`; the
training and rollout code then calls the same methods it would call on PyTRIO.

Modules:
    models: find and load base models and tokenizers (SmolLM2 GGUF, tiny-random).
    engine: ``LocalServiceClient`` / ``LocalTrainingClient`` / ``LocalSamplingClient``.
    sampling: the KV-cached, batched decoding loop and its logprobs.
    losses: cross_entropy, importance_sampling, ppo, cispo, per token.
    host: one base model, many LoRA adapters, the batching sampler queue.
    checkpoints: ``local://`` URIs, safetensors adapters, optimizer state.
    prefix: which Datums share a prefix, and how suffixes are cut into chunks.
    counters: how often each path (shared prefix or plain) ran, for tests.

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

from typing import Any

from grpo_helpers.local.models import load_model, load_tokenizer, resolve_model

_ENGINE_NAMES = ("LocalSamplingClient", "LocalServiceClient", "LocalTrainingClient")


def __getattr__(name: str) -> Any:
    """The engine classes, imported on first use (they pull in torch)."""
    if name in _ENGINE_NAMES:
        from grpo_helpers.local import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [*_ENGINE_NAMES, "load_model", "load_tokenizer", "resolve_model"]
