"""The local engine: PyTRIO's client API on PyTorch + LoRA, offline by default.

``grpo_helpers.engines.connect("local")`` returns a :class:`LocalServiceClient`; the
training and rollout code then calls the same methods it would call on PyTRIO.

Modules:
    models: find and load base models and tokenizers (SmolLM2 GGUF, tiny-random).
    engine: the ServiceClient / TrainingClient / SamplingClient classes.

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

from grpo_helpers.local.models import load_model, load_tokenizer, resolve_model

__all__ = ["load_model", "load_tokenizer", "resolve_model"]
