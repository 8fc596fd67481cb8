"""One base model in memory, many LoRA adapters on it, and a batching sampler queue.

Everything the local engine runs on one base model goes through a :class:`ModelHost`:

* the frozen base weights, loaded once per process and device;
* one peft LoRA adapter per training client (its trainable policy);
* one *sampler slot* adapter per LoRA shape, into which a sampler's frozen snapshot
  is copied before it samples (a snapshot is a few MB: copying it costs
  milliseconds, a second base model would cost hundreds of MB);
* a lock, because only one adapter can be active at a time;
* a :class:`SamplingScheduler`: a thread that merges ``sample`` requests
  arriving close together into one batched generation, which the engine's compute
  thread decodes (:mod:`grpo_helpers.local.worker`).

Introduced in: 06_async_training_loop.ipynb
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from grpo_helpers.local import worker
from grpo_helpers.local.adapters import AdapterSnapshot, LoraSpec, linear_groups
from grpo_helpers.local.decoder import (
    Decoder,
    HFDecoder,
    MergedLlamaDecoder,
    choose_sampler,
)
from grpo_helpers.local.models import load_model
from grpo_helpers.local.sampling import GenerationRequest, generate


class ModelHost:
    """A base model shared by every client of one ``(base_model, device, dtype)``.

    Args:
        base_model: see :func:`grpo_helpers.local.models.resolve_model`.
        device: torch device string.
        dtype: torch dtype or None for the device default.
        max_sampling_rows: most completions decoded together in one batch.
        batch_window_s: how long the sampler waits for more requests to batch.
    """

    def __init__(
        self,
        base_model: str,
        device: str,
        dtype: Any = None,
        max_sampling_rows: int = 64,
        batch_window_s: float = 0.005,
    ) -> None:
        self.base_model = base_model
        # on the compute thread, like every other torch job (see local.worker)
        self.model, self.tokenizer = worker.run(load_model, base_model, device, dtype)
        self.device = next(self.model.parameters()).device
        #: ``"merged"`` or ``"plain"``: the sampler a merged_sampler=True service
        #: gets on this host (``decoder.choose_sampler``: plain below float32).
        self.sampler_kind = choose_sampler(
            self.device,
            next(self.model.parameters()).dtype,
            getattr(self.model.config, "model_type", None),
        )
        self.linear_groups = linear_groups(self.model)
        self.lock = threading.RLock()
        self.peft: Any = None
        self._params: dict[str, dict[str, torch.nn.Parameter]] = {}
        self._slots: dict[LoraSpec, str] = {}
        self._slot_holds: dict[str, str] = {}
        self._specs: dict[str, LoraSpec] = {}
        self._retired: list[str] = []
        self._merged: MergedLlamaDecoder | None = None
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        self.eos_token_ids: set[int] = {int(i) for i in eos_ids}
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else 0)
        self.vocab_size = len(self.tokenizer)
        self.max_seq_len: int | None = getattr(
            self.model.config, "max_position_embeddings", None
        )
        self.scheduler = SamplingScheduler(self, max_sampling_rows, batch_window_s)

    # ---------------------------------------------------------------- adapters

    def add_adapter(self, name: str, spec: LoraSpec, seed: int | None) -> None:
        """Create a fresh LoRA adapter: A random (seeded), B zero, so it starts as
        the base model exactly. Does not touch the caller's global RNG."""
        from peft import get_peft_model

        config = spec.peft_config(self.linear_groups)
        with self.lock, torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(seed if seed is not None else torch.seed())
            if self.peft is None:
                self.peft = get_peft_model(self.model, config, adapter_name=name)
            else:
                self.peft.add_adapter(name, config)
            marker = f".{name}."
            self._params[name] = {
                qualified.replace(marker, "."): p
                for qualified, p in self.model.named_parameters()
                if marker in qualified
            }
            for p in self._params[name].values():
                p.requires_grad_(False)
            self._specs[name] = spec

    def delete_adapter(self, name: str) -> None:
        """Remove adapter ``name`` and its parameters from the model."""
        with self.lock, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self.peft is not None and name in self._params:
                self.peft.delete_adapter(name)
                del self._params[name]
                self._specs.pop(name, None)

    def retire(self, name: str) -> None:
        """Mark adapter ``name`` for deletion (a training client was garbage
        collected). Safe from any thread: the deletion happens at the next
        :meth:`activate` or :meth:`using`, under the lock."""
        self._retired.append(name)

    def _reap(self) -> None:
        """Delete the adapters of retired training clients (lock held)."""
        while self._retired:
            self.delete_adapter(self._retired.pop())

    def parameters(self, name: str) -> dict[str, torch.nn.Parameter]:
        """The adapter's LoRA parameters by adapter-independent name."""
        return self._params[name]

    def activate(self, name: str | None, trainable: bool = False) -> None:
        """Route the forward pass through adapter ``name`` (None: the base model).

        Call with :attr:`lock` held. Only the active adapter's parameters get
        ``requires_grad``, and only when ``trainable``.
        """
        self._reap()
        if self.peft is None:
            if name is not None:
                raise KeyError(name)
            return
        lora_model = self.peft.base_model
        if name is None:
            lora_model.disable_adapter_layers()
            return
        lora_model.enable_adapter_layers()
        if self.peft.active_adapter != name:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.peft.set_adapter(name)
        for p in self._params[name].values():
            p.requires_grad_(trainable)

    def snapshot(self, name: str, label: str = "") -> AdapterSnapshot:
        """Copy adapter ``name``'s current weights (later steps do not change it)."""
        with self.lock:
            tensors = {k: p.detach().clone() for k, p in self._params[name].items()}
        return AdapterSnapshot(self._specs[name], tensors, self.base_model, label)

    def load_tensors(self, name: str, tensors: dict[str, torch.Tensor]) -> None:
        """Copy ``tensors`` into adapter ``name`` (shapes must match)."""
        params = self._params[name]
        missing = set(params) - set(tensors)
        if missing:
            raise ValueError(
                f"checkpoint lacks {len(missing)} LoRA tensors, e.g. {min(missing)}"
            )
        with self.lock, torch.no_grad():
            for key, p in params.items():
                p.copy_(tensors[key].to(device=p.device, dtype=p.dtype))

    @contextlib.contextmanager
    def using(
        self,
        snapshot: AdapterSnapshot | None,
        merged: bool = True,
        precision: str = "float32",
    ) -> Iterator[Decoder]:
        """Hold the lock and yield a decoder that samples from ``snapshot``'s
        weights (None: the base model).

        ``merged=True`` where :attr:`sampler_kind` is ``"merged"`` (a Llama-style
        model in float32 on a CPU or CUDA device): the one
        :class:`~grpo_helpers.local.decoder.MergedLlamaDecoder` of this host, with
        the snapshot merged into its weight buffers unless they already hold it.
        Otherwise (bfloat16 weights included: a merge would round the delta away)
        the snapshot is copied into a peft *sampler slot* adapter of the same shape
        and the ``transformers`` model runs with it (the plain path).
        ``precision="bfloat16"``: the merged decoder's products in bfloat16
        (``MergedLlamaDecoder.load``); the plain path refuses it.
        """
        with self.lock:
            self._reap()
            if merged and self._merged_decoder() is not None:
                decoder = self._merged_decoder()
                assert decoder is not None  # under the lock, still built
                decoder.load(snapshot, precision)
                yield decoder
                return
            if precision != "float32":
                raise ValueError(
                    f"a {precision} sampler needs the merged decoder (a Llama-style "
                    f"model in float32 with merged_sampler=True); this host samples "
                    f"with {self.sampler_kind!r}: use sampler_precision 'float32'"
                )
            if snapshot is None:
                self.activate(None)
            else:
                slot = self._slots.get(snapshot.spec)
                if slot is None:
                    slot = f"sampler-{len(self._slots)}"
                    self.add_adapter(slot, snapshot.spec, seed=0)
                    self._slots[snapshot.spec] = slot
                if self._slot_holds.get(slot) != snapshot.id:
                    self.load_tensors(slot, snapshot.tensors)
                    self._slot_holds[slot] = snapshot.id
                self.activate(slot)
            yield HFDecoder(self.model)

    def _merged_decoder(self) -> MergedLlamaDecoder | None:
        """The merged-weights decoder, built on first use (None: the plain path
        runs, see :attr:`sampler_kind`)."""
        if self.sampler_kind != "merged" or not MergedLlamaDecoder.supports(self.model):
            return None
        if self._merged is None:
            self._merged = MergedLlamaDecoder(self.model)
        return self._merged


class SamplingScheduler:
    """Merges ``sample`` requests that arrive together into one batched generation.

    A daemon thread waits for a request, then ``batch_window_s`` more for others
    (``asyncio.gather`` of one ``sample_async`` per prompt submits them all within
    microseconds), and decodes every pending request that samples from the same
    weights, up to ``max_rows`` completions, in one loop. Requests for other weights
    wait for the next batch. This is why the async rollout is faster than the sync
    one on this engine too: four groups of eight share every forward pass.
    """

    def __init__(self, host: ModelHost, max_rows: int, batch_window_s: float) -> None:
        self.host = host
        self.max_rows = max(1, int(max_rows))
        self.window = max(0.0, float(batch_window_s))
        self._cv = threading.Condition()
        self._pending: list[GenerationRequest] = []
        self._thread: threading.Thread | None = None
        self._held = 0
        self.batches = 0  # number of generate() calls, for tests and benchmarks

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Queue requests without starting a batch until the block ends.

        Requests submitted inside ``with scheduler.hold():`` are then batched
        together (up to ``max_rows``) whatever the timing: what tests use instead
        of the batching window.
        """
        with self._cv:
            self._held += 1
        try:
            yield
        finally:
            with self._cv:
                self._held -= 1
                self._cv.notify_all()

    def submit(self, request: GenerationRequest) -> None:
        if worker.on_compute_thread():  # it would wait for itself: decode it now
            if request.future.set_running_or_notify_cancel():
                self._finish([request])
            return
        with self._cv:
            self._pending.append(request)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="grpo-local-sampler", daemon=True
                )
                self._thread.start()
            self._cv.notify()

    def _take_batch(self) -> list[GenerationRequest]:
        with self._cv:
            while not self._pending or self._held:
                self._cv.wait()
            deadline = time.monotonic() + self.window
            while (left := deadline - time.monotonic()) > 0:
                self._cv.wait(left)
            head = self._pending[0]
            batch: list[GenerationRequest] = []
            rest: list[GenerationRequest] = []
            rows = 0
            for req in self._pending:
                fits = not batch or rows + req.rows <= self.max_rows
                same = req.weights_key is head.weights_key and (
                    req.merged,
                    req.prompt_only,
                    req.precision,
                ) == (head.merged, head.prompt_only, head.precision)
                if same and fits:
                    batch.append(req)
                    rows += req.rows
                else:
                    rest.append(req)
            self._pending = rest
        return [r for r in batch if r.future.set_running_or_notify_cancel()]

    def _run(self) -> None:
        while True:
            batch = self._take_batch()
            if not batch:
                continue
            worker.run(self._finish, batch)

    def _finish(self, batch: list[GenerationRequest]) -> None:
        """Decode ``batch`` (on the compute thread) and settle its futures."""
        try:
            responses = self._generate(batch)
            self.batches += 1
        except BaseException as exc:  # noqa: BLE001 - hand every failure to callers
            for req in batch:
                req.future.set_exception(exc)
            return
        for req, resp in zip(batch, responses, strict=True):
            req.future.set_result(resp)

    def _generate(self, batch: list[GenerationRequest]) -> list[Any]:
        """One batch, decoded on the compute thread."""
        head = batch[0]
        with self.host.using(head.weights_key, head.merged, head.precision) as decoder:
            return generate(
                decoder,
                self.host.tokenizer,
                batch,
                self.host.eos_token_ids,
                self.host.pad_token_id,
            )


_hosts: dict[tuple[str, str, str], ModelHost] = {}
_hosts_lock = threading.Lock()


def get_host(
    base_model: str, device: str, dtype: Any = None, **scheduler_options: Any
) -> ModelHost:
    """The process-wide :class:`ModelHost` for a base model (loaded on first use).

    Every client of every local ServiceClient in this process shares it, so a
    notebook that connects twice does not hold two copies of the weights.
    """
    from grpo_helpers.local.models import canonical_name, default_dtype

    name = canonical_name(base_model)
    dtype = dtype or default_dtype(device)
    key = (name, str(device), str(dtype))
    with _hosts_lock:
        host = _hosts.get(key)
        if host is None:
            host = ModelHost(name, device, dtype, **scheduler_options)
            _hosts[key] = host
        else:
            if "max_sampling_rows" in scheduler_options:
                host.scheduler.max_rows = int(scheduler_options["max_sampling_rows"])
            if "batch_window_s" in scheduler_options:
                host.scheduler.window = float(scheduler_options["batch_window_s"])
        return host
