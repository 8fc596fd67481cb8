"""The local engine's ``TrainingClient``: one LoRA policy and its AdamW state.

A :class:`LocalTrainingClient` holds one LoRA adapter on its base model's
:class:`~grpo_helpers.local.host.ModelHost`, and its AdamW state. Its calls are
queued on the engine's compute thread (:mod:`grpo_helpers.local.worker`) and run in
submission order, exactly as PyTRIO orders the events of one training run, so
``forward_backward`` and ``optim_step`` can be submitted back to back and awaited
later. When the client is garbage collected, its adapter is retired:

=========================================== ==========================================
``tc.forward_backward(...)``                returns ``APIFuture``; ``.result()`` waits
``await tc.forward_backward_async(...)``    returns ``APIFuture`` (submitted); await it
``tc.save_weights_and_get_sampling_client`` a sampler frozen at the current weights
=========================================== ==========================================

Inputs are validated as PyTRIO validates them (the same checks, error classes and
messages: empty data, unknown losses, missing loss inputs, shapes, vocabulary
bounds, finite values) before anything is queued, so a bad call fails at the call,
not inside a future. The forward and backward passes themselves are
:mod:`grpo_helpers.local.forward`'s; checkpoints are
:mod:`grpo_helpers.local.checkpoints`'.

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from pytrio.errors.base import ValidationError
from pytrio.types import (
    AdamParams,
    APIFuture,
    Datum,
    ForwardBackwardOutput,
    OptimStepResponse,
    SaveWeightsForSamplerResponse,
    SaveWeightsResponse,
    TensorData,
)

from grpo_helpers.local import checkpoints, forward, worker
from grpo_helpers.local.adapters import AdapterSnapshot, LoraSpec
from grpo_helpers.local.host import ModelHost
from grpo_helpers.local.models import canonical_name
from grpo_helpers.local.sampling_client import LocalSamplingClient

__all__ = ["LocalTrainingClient"]

_TEMP_SAMPLING_PREFIX = "temp-sampling-"


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


class LocalTrainingClient:
    """A LoRA policy being trained: PyTRIO's ``TrainingClient``, run locally.

    Attributes:
        training_run_cuid: ``local-run-<hex>``.
        model_id, model_alias: the base model name.
        lora: pytrio's ``LoraRunSpec`` (rank, seed, train_* flags).
        step: optimiser steps taken (restored by ``load_state_with_optimizer``).
        logprobs_of: what the samplers it makes report for each drawn token:
            ``"model"`` (temperature 1, unfiltered; this engine's default)
            or ``"behaviour"`` (the distribution the token was drawn from); set by
            ``engines.report_sampler_logprobs``, read when a sampler is made.
    """

    def __init__(
        self,
        service: Any,  # the LocalServiceClient that made it (its options)
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
        worker.run(host.add_adapter, self._adapter, spec, seed)  # torch work
        weakref.finalize(self, host.retire, self._adapter)
        self._params = list(host.parameters(self._adapter).values())
        self._optimizer = torch.optim.AdamW(self._params, lr=1e-4)
        self._started = False
        self.step = 0
        self.logprobs_of = "model"
        self.precision = "float32"

    def __repr__(self) -> str:
        return (
            f"LocalTrainingClient(model={self.model_id!r}, rank={self._spec.rank}, "
            f"step={self.step})"
        )

    def _submit(self, fn: Callable[..., Any], *args: Any) -> APIFuture:
        self._started = True
        return APIFuture(worker.submit(fn, *args))

    # ---------------------------------------------------------------- forward passes

    def _prepare(
        self,
        data: list[Datum],
        loss_fn: str,
        loss_fn_config: dict[str, object] | None,
        auto_shift: bool,
    ) -> forward.ForwardJob:
        """Validate as PyTRIO does (its own planner), then check what we can run."""
        return forward.prepare(self._host, data, loss_fn, loss_fn_config, auto_shift)

    def _micro_batches(self, lengths: dict[int, int]) -> list[list[int]]:
        """Group Datum indices (shortest first, ``{index: length}``) into batches
        of at most ``train_tokens_per_batch`` padded tokens."""
        return forward.micro_batches(lengths, self._service.train_tokens_per_batch)

    def _run_forward(
        self, job: forward.ForwardJob, backward: bool
    ) -> ForwardBackwardOutput:
        """:func:`grpo_helpers.local.forward.run_forward` with this client's
        adapter and its service's options (runs on the engine's compute thread)."""
        return forward.run_forward(
            self._host,
            self._adapter,
            job,
            backward,
            shared_prefix=self._service.shared_prefix,
            tokens_per_batch=self._service.train_tokens_per_batch,
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
        output = self._submit(self._run_forward, job, False).result()
        return self._submit_custom_backward(data, output, loss_fn, loss_fn_config)

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
        output = await self._submit(self._run_forward, job, False)
        return self._submit_custom_backward(data, output, loss_fn, loss_fn_config)

    def _submit_custom_backward(
        self,
        data: list[Datum],
        forward_output: ForwardBackwardOutput,
        loss_fn: Callable[..., Any],
        loss_fn_config: dict[str, object] | None,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Run ``loss_fn`` on the forward logprobs here; queue the linear backward."""
        from pytrio.client.training import _invoke_custom_loss

        logprobs = [
            torch.tensor(out["logprobs"].data, dtype=torch.float32).requires_grad_(True)
            for out in forward_output.loss_fn_outputs
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
        if adam.grad_clip_norm > 0:
            # clip_grad_norm_ returns the global norm it measured, before clipping
            norm = torch.nn.utils.clip_grad_norm_(self._params, adam.grad_clip_norm)
        else:
            grads = [p.grad for p in self._params if p.grad is not None]
            norm = torch.nn.utils.get_total_norm(grads)
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
                "grad_norm": float(norm),
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
                ("base_model", self.model_id, canonical_name(meta["base_model"])),
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
        snapshot = checkpoints.load_snapshot(
            model_path, self._host.base_model, self._host.device
        )
        return self._service._sampling_client(
            self._host, snapshot, model_path, self.logprobs_of, self.precision
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
        return self._service._sampling_client(
            self._host, snapshot, None, self.logprobs_of, self.precision
        )

    async def save_weights_and_get_sampling_client_async(self) -> LocalSamplingClient:
        """Async twin of :meth:`save_weights_and_get_sampling_client`."""
        snapshot = await self._submit(self._snapshot_job)
        return self._service._sampling_client(
            self._host, snapshot, None, self.logprobs_of, self.precision
        )
