"""A training client's policy as plain PyTorch: its model and its LoRA tensors.

PyTRIO's clients never show a model: ``forward_backward`` takes Datums and returns
numbers. To write one GRPO step in plain PyTorch and hold it against the engine's
(notebook 04, exercise 4:
:func:`grpo_helpers.classroom.against_engine.plain_step_check`), a learner needs what a
local training client runs: the ``torch.nn.Module`` (the base model with the client's
LoRA adapter active) and the LoRA tensors it trains. This module hands them out; nothing
in the engine calls it, and PyTRIO has no such call (so it is not a method of the
client, whose public methods are PyTRIO's).

Example::

    with torch_policy(training_client) as (model, lora_params):
        logits = model(input_ids=tokens, attention_mask=attention_mask).logits
        ...  # a loss in torch, loss.backward(), an optimiser step on lora_params

Introduced in: 04_datum_alignment.ipynb (exercise 4)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch

__all__ = ["load_lora", "lora_parameters", "torch_policy"]


def lora_parameters(client: Any) -> dict[str, torch.nn.Parameter]:
    """The client's LoRA tensors by name, live: their ``.grad`` is what
    ``forward_backward`` left and ``optim_step`` will use.

    Raises:
        TypeError: ``client`` is not a local training client (PyTRIO's keeps its
            weights on its servers).
    """
    host, adapter = _parts(client)
    return dict(host.parameters(adapter))


def load_lora(client: Any, tensors: Mapping[str, torch.Tensor]) -> None:
    """Copy ``tensors`` (one per name of :func:`lora_parameters`) into the
    client's adapter, after the calls already queued on it."""
    host, adapter = _parts(client)
    client._submit(host.load_tensors, adapter, dict(tensors)).result()


@contextlib.contextmanager
def torch_policy(
    client: Any,
) -> Iterator[tuple[torch.nn.Module, list[torch.nn.Parameter]]]:
    """``(model, lora_params)``: the client's policy as a module and the tensors
    an optimiser may step, for the length of the ``with`` block.

    ``model(input_ids=..., attention_mask=...).logits`` runs the base model through
    the client's adapter; only ``lora_params`` require a gradient. The block holds
    the model's lock (one adapter is active at a time, and the engine's threads
    wait), so call no engine method inside it.
    """
    host, adapter = _parts(client)
    params = list(host.parameters(adapter).values())
    with host.lock:
        host.activate(adapter, trainable=True)
        try:
            yield host.model, params
        finally:
            for p in params:
                p.requires_grad_(False)


def _parts(client: Any) -> tuple[Any, str]:
    host = getattr(client, "_host", None)
    adapter = getattr(client, "_adapter", None)
    if host is None or adapter is None:
        raise TypeError(
            f"{type(client).__name__} is not a training client of the local engine: "
            "only the local engine's model runs in this process"
        )
    return host, adapter
