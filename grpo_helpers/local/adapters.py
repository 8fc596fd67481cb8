"""LoRA adapters as data: their shape, their scale, and frozen copies of their weights.

A LoRA adapter adds ``(alpha / rank) * B @ A`` to a frozen weight. This module holds
what the rest of the engine says about one, without a model in sight:

* :data:`LORA_ALPHA`, the scale's numerator (32, as on PyTRIO's trainer);
* :class:`LoraSpec`, its shape: the rank and which layer groups it adapts, and the
  ``peft.LoraConfig`` that builds it;
* :func:`linear_groups`, which of a model's linear layers are attention, MLP and
  unembedding;
* :class:`AdapterSnapshot`, a frozen copy of its tensors: what a sampler samples
  from and what a checkpoint holds.

The model host (:mod:`grpo_helpers.local.host`), the merged decoder
(:mod:`grpo_helpers.local.decoder`), checkpoints and the TRL export all read these;
this module imports none of them.

Introduced in: 06_async_training_loop.ipynb (the engine, not the maths)
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import torch

LORA_ALPHA = 32
"""LoRA scale numerator: the update is ``(alpha / rank) * B @ A``, as on PyTRIO's
trainer (alpha 32 for every rank), so a larger rank does not mean larger steps."""

_ATTN_PARENTS = ("self_attn", "attn", "attention", "self_attention")
_MLP_PARENTS = ("mlp", "feed_forward", "ffn")


@dataclass(frozen=True)
class LoraSpec:
    """The shape of a LoRA adapter: rank and which layer groups it adapts.

    Attributes:
        rank: the LoRA rank r (PyTRIO allows 4 to 64).
        train_mlp: adapt the MLP projections (gate, up, down).
        train_attn: adapt the attention projections (q, k, v, o).
        train_unembed: adapt the output layer (``lm_head``).
    """

    rank: int
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True

    def target_modules(self, groups: dict[str, set[str]]) -> list[str]:
        """Leaf names of the layers this spec adapts, from :func:`linear_groups`."""
        names: set[str] = set()
        if self.train_attn:
            names |= groups["attn"]
        if self.train_mlp:
            names |= groups["mlp"]
        if self.train_unembed:
            names |= groups["unembed"]
        return sorted(names)

    def peft_config(self, groups: dict[str, set[str]]) -> Any:
        """The ``peft.LoraConfig`` for this spec (no dropout, alpha 32)."""
        from peft import LoraConfig

        return LoraConfig(
            r=self.rank,
            lora_alpha=LORA_ALPHA,
            lora_dropout=0.0,
            target_modules=self.target_modules(groups),
            bias="none",
            task_type="CAUSAL_LM",
        )


def linear_groups(model: Any) -> dict[str, set[str]]:
    """Leaf names of the model's ``nn.Linear`` layers: attention, MLP, unembedding.

    For Llama-style models (SmolLM2): ``{q,k,v,o}_proj``, ``{gate,up,down}_proj`` and
    ``lm_head``. Call it on the plain model, before peft wraps any layer.
    """
    groups: dict[str, set[str]] = {"attn": set(), "mlp": set(), "unembed": set()}
    head = model.get_output_embeddings()
    for qualified, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        parts = qualified.split(".")
        if module is head:
            groups["unembed"].add(parts[-1])
        elif any(p in _ATTN_PARENTS for p in parts[:-1]):
            groups["attn"].add(parts[-1])
        elif any(p in _MLP_PARENTS for p in parts[:-1]):
            groups["mlp"].add(parts[-1])
    return groups


@dataclass(eq=False)
class AdapterSnapshot:
    """A frozen copy of LoRA weights: what a sampling client samples from.

    Attributes:
        spec: the adapter's shape.
        tensors: LoRA A/B matrices by adapter-independent parameter name
            (``model.layers.0.self_attn.q_proj.lora_A.weight``), on the host device.
        base_model: the base model name the adapter belongs to.
        name: the checkpoint name, or ``temp-sampling-<hex>`` for an unsaved one.
    """

    spec: LoraSpec
    tensors: dict[str, torch.Tensor]
    base_model: str
    name: str = ""
    id: str = field(default_factory=lambda: uuid.uuid4().hex)


__all__ = ["LORA_ALPHA", "AdapterSnapshot", "LoraSpec", "linear_groups"]
