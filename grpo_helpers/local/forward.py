"""The training client's forward and backward passes over Datums.

``LocalTrainingClient.forward`` and ``forward_backward`` validate their Datums at
the call (:func:`prepare`, PyTRIO's own planner) and queue :func:`run_forward` on
the engine's compute thread (:mod:`grpo_helpers.local.worker`). It computes each
Datum's target logprobs and the per-token loss (:mod:`grpo_helpers.local.losses`),
and backpropagates the loss into the adapter's gradients when asked:

* Datums that share a prefix (a GRPO group: one prompt, many completions) run that
  prefix once and their suffixes on top of its keys and values
  (:func:`_forward_shared`; the plan is :mod:`grpo_helpers.local.batch_plan`'s);
* the rest run in right-padded micro-batches of at most ``tokens_per_batch``
  padded tokens (:func:`_forward_plain`), their gradients added up.

Both paths give the same numbers (``tests/local/test_forward.py`` compares them,
and :mod:`grpo_helpers.local.counters` says which ran). Every tensor a device
touches is created on the model's device.

Introduced in: 05_sync_training_loop.ipynb (the engine's speed, not the maths)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from pytrio.errors.base import ValidationError
from pytrio.types import Datum, ForwardBackwardOutput, TensorData

from grpo_helpers.local import batch_plan, counters, losses
from grpo_helpers.local.host import ModelHost
from grpo_helpers.local.prompt_cache import pad_rows

__all__ = ["ForwardJob", "micro_batches", "prepare", "run_forward"]


@dataclass
class ForwardJob:
    """A validated ``forward`` / ``forward_backward`` call, ready for the worker."""

    loss: str
    samples: list[Any]  # pytrio's validated CrossEntropy/PolicyTrainingSample
    token_count: int
    auto_shift: bool
    config: dict[str, object] | None
    temperature: float = 1.0  # the logits are divided by it (loss_fn_config)


@dataclass
class _Row:
    """One sample as tensors: input ids [n], targets [n] (-100: none) and the
    loss values [3, n] (cross-entropy weights, sampler logprobs, advantages)."""

    ids: torch.Tensor
    targets: torch.Tensor
    values: torch.Tensor


def _pad(t: torch.Tensor, width: int, value: float) -> torch.Tensor:
    """Right-pad the last dimension of ``t`` to ``width`` with ``value``."""
    return F.pad(t, (0, width - t.shape[-1]), value=value)


def _target_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """``log p(targets)`` at each position ([B, W]) under ``softmax(logits / T)``;
    -100 targets read token 0."""
    size, width, vocab = logits.shape
    scores = logits.float() if temperature == 1.0 else logits.float() / temperature
    return -F.cross_entropy(
        scores.reshape(-1, vocab),
        targets.clamp(min=0).reshape(-1),
        reduction="none",
    ).reshape(size, width)


def _new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def prepare(
    host: ModelHost,
    data: list[Datum],
    loss_fn: str,
    loss_fn_config: dict[str, object] | None,
    auto_shift: bool,
) -> ForwardJob:
    """Validate a ``forward`` / ``forward_backward`` call as PyTRIO does (its own
    planner), then check that the local engine can run it.

    Raises:
        ValidationError: as PyTRIO, plus a loss or an input the engine lacks.
    """
    from pytrio.client.training_batch import plan_training_batch
    from pytrio.model.limits import TrainingLimits

    if not data:
        raise ValidationError(
            "training data cannot be empty", code="validation.empty_training_data"
        )
    plan = plan_training_batch(
        data,
        loss_fn=loss_fn,
        auto_shift=auto_shift,
        limits=TrainingLimits(None, None, host.max_seq_len),
        tokenizer_vocab_size=host.vocab_size,
    )
    name = plan.chunks[0].loss_fn
    if name not in losses.IMPLEMENTED:
        raise ValidationError(
            f"The local engine does not implement the {name!r} loss "
            f"(it has {', '.join(losses.IMPLEMENTED)}); "
            "use backend='pytrio' for it.",
            code="validation.unsupported_loss_fn",
        )
    temperature = _temperature(loss_fn_config)
    samples = [s for chunk in plan.chunks for s in chunk.samples]
    if any(s.model_input.has_images for s in samples):
        raise ValidationError(
            "The local engine trains on text only; this Datum has image chunks.",
            code="validation.image_input_unsupported",
        )
    return ForwardJob(
        name,
        samples,
        plan.totals.total_active_tokens,
        auto_shift,
        loss_fn_config,
        temperature,
    )


def _temperature(loss_fn_config: dict[str, object] | None) -> float:
    """``loss_fn_config["temperature"]`` (default 1): the local engine's one
    addition to PyTRIO's loss settings, so that the loss can train the tempered
    policy the completions were sampled from (``GRPOConfig.train_temperature``).

    Raises:
        ValidationError: not a finite number above 0.
    """
    value = (loss_fn_config or {}).get("temperature", 1.0)
    try:
        temperature = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        temperature = float("nan")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValidationError(
            f"loss_fn_config temperature must be a finite number > 0, got {value!r}",
            code="validation.invalid_loss_fn_config",
        )
    return temperature


def micro_batches(lengths: dict[int, int], budget: int) -> list[list[int]]:
    """Group Datum indices (``{index: length}``) into right-padded batches of at
    most ``budget`` padded tokens (a longer Datum gets a batch of its own), each
    sorted by length: :func:`grpo_helpers.local.batch_plan.plan_chunks`, the packer the
    suffixes of a shared prefix use too."""
    indices = list(lengths)
    chunks = batch_plan.plan_chunks([lengths[i] for i in indices], budget)
    return [[indices[k] for k in chunk] for chunk in chunks]


def _rows(job: ForwardJob) -> list[_Row]:
    """Each sample's input ids, targets (-100: none) and loss values, shifted
    when ``auto_shift`` so that position t predicts ``targets[t]``.

    Staged on the host (``device="cpu"``, said explicitly): each micro-batch
    sends what it needs to the model's device."""
    policy = job.loss != "cross_entropy"
    host = torch.device("cpu")
    rows = []
    for s in job.samples:
        n = s.input_length
        ids = torch.tensor(s.model_input.to_ints(), dtype=torch.long, device=host)
        targets = torch.full((n,), -100, dtype=torch.long, device=host)
        values = torch.zeros((3, n), dtype=torch.float32, device=host)
        tgt = torch.tensor(s.target_tokens, dtype=torch.long, device=host)
        vals = torch.tensor(
            [s.logprobs, s.advantages] if policy else [s.weights],
            dtype=torch.float32,
            device=host,
        )
        if job.auto_shift:  # position t predicts target t + 1
            tgt, vals = tgt[1:], vals[:, 1:]
        targets[: len(tgt)] = tgt
        if policy:
            values[1:, : vals.shape[1]] = vals
        else:
            values[0, : vals.shape[1]] = vals[0]
        rows.append(_Row(ids, targets, values))
    return rows


def _token_loss_sum(
    job: ForwardJob, logprobs: torch.Tensor, row_data: list[_Row], cut: Callable
) -> torch.Tensor:
    """Sum of the per-token losses at the positions of ``logprobs`` ([B, W]).

    ``cut(row)`` gives the ``[W]``-padded (targets, values) of each row for
    these positions; padding has target -100 and counts for nothing.
    """
    pieces = [cut(r) for r in row_data]
    targets = torch.stack([t for t, _ in pieces])
    values = torch.stack([v for _, v in pieces])
    targets = targets.to(logprobs.device)
    values = values.to(logprobs.device).transpose(0, 1)  # [3, B, W]
    policy = job.loss != "cross_entropy"
    return losses.loss_sum(
        job.loss,
        logprobs,
        old=values[1] if policy else None,
        advantages=values[2] if policy else None,
        weights=None if policy else values[0],
        config=job.config,
        mask=targets != -100,
    )


def run_forward(
    host: ModelHost,
    adapter: str,
    job: ForwardJob,
    backward: bool,
    *,
    shared_prefix: bool,
    tokens_per_batch: int,
) -> ForwardBackwardOutput:
    """Compute target logprobs and the loss with adapter ``adapter`` of ``host``;
    backpropagate it when asked.

    Datums that share a prefix (a GRPO group: one prompt, many completions)
    compute it once (:func:`_forward_shared`, when ``shared_prefix``); the rest run
    in padded micro-batches of at most ``tokens_per_batch`` padded tokens
    (:func:`_forward_plain`). Both give the same numbers.
    Gradients add up in the adapter's ``.grad`` across micro-batches and across
    ``forward_backward`` calls until ``optim_step`` uses and clears them.
    """
    rows = _rows(job)
    lp: list[torch.Tensor | None] = [None] * len(rows)
    if shared_prefix:
        plan = batch_plan.plan_shared_prefixes([r.ids.tolist() for r in rows])
    else:
        plan = [batch_plan.PrefixGroup(0, [i]) for i in range(len(rows))]
    loss_sum = 0.0
    for group in plan:
        if group.shared:
            loss_sum += _forward_shared(
                host, adapter, job, rows, group, backward, lp, tokens_per_batch
            )
    plain = {i: len(rows[i].ids) for g in plan if not g.shared for i in g.members}
    for batch in micro_batches(plain, tokens_per_batch):
        loss_sum += _forward_plain(host, adapter, job, rows, batch, backward, lp)
    outputs = []
    for values in lp:
        assert values is not None
        if job.auto_shift:
            values = torch.cat([values.new_zeros(1), values[:-1]])
        outputs.append({"logprobs": TensorData.from_torch(values.contiguous())})
    count = job.token_count
    return ForwardBackwardOutput(
        loss_fn_outputs=outputs,
        metrics={
            "loss_sum": loss_sum,
            "loss_mean": loss_sum / count if count > 0 else 0.0,
            "token_count": float(count),
        },
        debug={},
    )


def _forward_plain(
    host: ModelHost,
    adapter: str,
    job: ForwardJob,
    rows: list[_Row],
    batch: list[int],
    backward: bool,
    lp: list[torch.Tensor | None],
) -> float:
    """One right-padded micro-batch of whole Datums."""
    counters.add("training_plain_batches")
    device = host.device
    width = max(len(rows[i].ids) for i in batch)
    ids, attn = pad_rows(
        [rows[i].ids.tolist() for i in batch],
        width,
        host.pad_token_id,
        device,
        "right",
    )
    selected = [rows[i] for i in batch]
    targets = torch.stack([_pad(r.targets, width, -100) for r in selected])
    with host.lock:
        host.activate(adapter, trainable=backward)
        with torch.set_grad_enabled(backward):
            logits = host.model(input_ids=ids, attention_mask=attn).logits
            logprobs = _target_logprobs(logits, targets.to(device), job.temperature)
            del logits
            loss = _token_loss_sum(
                job,
                logprobs,
                selected,
                lambda r: (_pad(r.targets, width, -100), _pad(r.values, width, 0)),
            )
            if backward:
                loss.backward()
    values = logprobs.detach().float().cpu()
    for b, i in enumerate(batch):
        n = len(rows[i].ids)
        lp[i] = torch.where(rows[i].targets != -100, values[b, :n], 0.0)
    return float(loss.detach())


def _prefix_pass(
    host: ModelHost, job: ForwardJob, members: list[_Row], p: int
) -> tuple[torch.Tensor, torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """Step 1 of :func:`_forward_shared`: the shared prefix, once, with a KV cache.

    Returns every member's logprobs at positions ``0 .. p-1`` (``[members, p]``),
    the prefix positions' summed loss, and each layer's ``(keys, values)``.
    """
    device = host.device
    cache = _new_cache(host.model)
    out = host.model(
        input_ids=members[0].ids[:p][None].to(device),
        cache=cache,
        use_cache=True,
    )
    prefix_kv = [(layer.keys, layer.values) for layer in cache.layers]
    logits = out.logits[0].float()
    del out, cache
    # A position whose advantage (or weight) is 0 sends no gradient back: when
    # that holds for the whole prefix (GRPO's prompt), the backward skips its
    # output layer and log-softmax.
    column = 2 if job.loss != "cross_entropy" else 0
    if not any(bool(r.values[column, :p].any()) for r in members):
        logits = logits.detach()
    if job.temperature != 1.0:
        logits = logits / job.temperature
    logp = torch.log_softmax(logits, dim=-1)  # [p, V]
    del logits
    tgt = torch.stack([r.targets[:p] for r in members]).to(device)
    prefix_lp = logp[torch.arange(p, device=device)[None], tgt.clamp(0)]
    prefix_loss = _token_loss_sum(
        job, prefix_lp, members, lambda r: (r.targets[:p], r.values[:, :p])
    )
    return prefix_lp, prefix_loss, prefix_kv


def _backward_through_prefix(
    prefix_loss: torch.Tensor,
    prefix_kv: list[tuple[torch.Tensor, torch.Tensor]],
    leaves: list[tuple[torch.Tensor, torch.Tensor]],
) -> None:
    """Step 3 of :func:`_forward_shared`: one backward through the prefix.

    The suffix chunks left their gradients on the detached key/value ``leaves``;
    they flow back through the prefix's own keys and values together with the
    prefix positions' loss, so the prefix's gradient is computed once.
    """
    outputs, grads = [], []
    if prefix_loss.requires_grad:
        outputs.append(prefix_loss)
        grads.append(torch.ones_like(prefix_loss))
    for (k, v), (k_leaf, v_leaf) in zip(prefix_kv, leaves, strict=True):
        for t, leaf in ((k, k_leaf), (v, v_leaf)):
            if leaf.grad is not None:
                outputs.append(t)
                grads.append(leaf.grad)
    if outputs:
        torch.autograd.backward(outputs, grads)


def _forward_shared(
    host: ModelHost,
    adapter: str,
    job: ForwardJob,
    rows: list[_Row],
    group: batch_plan.PrefixGroup,
    backward: bool,
    lp: list[torch.Tensor | None],
    tokens_per_batch: int,
) -> float:
    """Datums sharing their first ``p`` tokens: the prefix runs once.

    1. The prefix ``[1, p]`` runs with a KV cache; its logits give every
       member's logprobs at positions ``0 .. p-1`` (one log-softmax, one gather
       per member, since each member may target different tokens there).
    2. The members' suffixes run in right-padded chunks on top of the prefix's
       keys and values, *expanded* (not copied) to the chunk's batch size. For
       backward, those keys and values enter each chunk as detached leaves: a
       chunk's backward leaves their gradient in ``.grad`` and the adapter's.
    3. One backward through the prefix with the summed key/value gradients and
       the prefix positions' own loss: the prefix's gradient flows once.

    Mathematically this is the plain forward; the tests compare the two.
    """
    counters.add("training_shared_groups")
    p = group.prefix_len
    members = [rows[i] for i in group.members]
    total = 0.0
    with host.lock:
        host.activate(adapter, trainable=backward)
        with torch.set_grad_enabled(backward):
            prefix_lp, prefix_loss, prefix_kv = _prefix_pass(host, job, members, p)
            leaves = [
                (
                    k.detach().requires_grad_(backward),
                    v.detach().requires_grad_(backward),
                )
                for k, v in prefix_kv
            ]
            if not backward:
                del prefix_kv
            suffix_lp: dict[int, torch.Tensor] = {}
            chunks = batch_plan.plan_chunks(
                [len(r.ids) - p for r in members],
                tokens_per_batch,
            )
            counters.add("training_shared_chunks", len(chunks))
            for chunk in chunks:
                loss = _suffix_chunk(host, job, members, chunk, p, leaves, suffix_lp)
                if backward:
                    loss.backward()
                total += float(loss.detach())
            if backward:
                _backward_through_prefix(prefix_loss, prefix_kv, leaves)
            total += float(prefix_loss.detach())
    head = prefix_lp.detach().float().cpu()
    for m, i in enumerate(group.members):
        r = rows[i]
        values = torch.cat([head[m], suffix_lp[m]])
        lp[i] = torch.where(r.targets != -100, values, 0.0)
    return total


def _suffix_chunk(
    host: ModelHost,
    job: ForwardJob,
    members: list[_Row],
    chunk: list[int],
    p: int,
    leaves: list[tuple[torch.Tensor, torch.Tensor]],
    suffix_lp: dict[int, torch.Tensor],
) -> torch.Tensor:
    """The loss of one chunk of suffixes, run on the prefix's keys and values."""
    device = host.device
    size = len(chunk)
    width = max(len(members[m].ids) - p for m in chunk)
    ids, own = pad_rows(
        [members[m].ids[p:].tolist() for m in chunk],
        width,
        host.pad_token_id,
        device,
        "right",
    )
    attn = torch.cat([own.new_ones((size, p)), own], dim=1)
    positions = torch.arange(p, p + width, device=device)[None].expand(size, width)
    cache = _new_cache(host.model)
    for layer, (k, v) in zip(cache.layers, leaves, strict=True):
        layer.lazy_initialization(k, v)
        layer.keys = k.expand(size, -1, -1, -1)
        layer.values = v.expand(size, -1, -1, -1)
    logits = host.model(
        input_ids=ids,
        attention_mask=attn,
        position_ids=positions,
        cache=cache,
        use_cache=True,
    ).logits
    selected = [members[m] for m in chunk]
    targets = torch.stack([_pad(r.targets[p:], width, -100) for r in selected])
    logprobs = _target_logprobs(logits, targets.to(device), job.temperature)
    del logits
    values = logprobs.detach().float().cpu()
    for b, m in enumerate(chunk):
        suffix_lp[m] = values[b, : len(members[m].ids) - p]
    return _token_loss_sum(
        job,
        logprobs,
        selected,
        lambda r: (
            _pad(r.targets[p:], width, -100),
            _pad(r.values[:, p:], width, 0),
        ),
    )
