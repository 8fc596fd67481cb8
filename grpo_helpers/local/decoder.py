"""Decoders: the forward passes the sampler runs, behind one small interface.

The sampling loop (``grpo_helpers.local.sampling.generate``) needs three things from
a model: encode the prompts once (*prefill*), run one new token per row (*step*), and
drop or repeat rows of its key/value cache (*select*). Two decoders provide them:

:class:`HFDecoder`
    Any ``transformers`` causal LM as it stands, LoRA adapters included: peft adds
    two small matrix products to every adapted layer at every token. Works for any
    architecture; the engine's reference path.
:class:`MergedLlamaDecoder`
    Llama-style models (SmolLM2, ``tiny-random``) with the adapter *merged* into a
    copy of the weights (``W + (alpha / r) B A``), so a sampler costs what the base
    model costs. It also fuses q/k/v and gate/up into one matrix product each, writes
    keys and values into preallocated buffers, and computes single-token attention
    as two small batched products: a decoding step runs about 2x fewer operations
    than the ``transformers`` forward. The merged copy lives in one set of buffers per
    model (about the size of the model: 540 MB for SmolLM2 in float32); a sampler
    for other weights merges again into the same buffers (a fraction of a second).
    Packed products (below) keep one more copy of that size while a batch size is
    packed.

Both compute the same function; the tests check that sampled logprobs match a
teacher-forced forward pass of the unmerged adapter to 1e-4.

Two more shortcuts of the merged decoder, both checked against the plain loop (by
``tests/local/test_decoder.py`` and ``tests/local/test_prompt_cache.py``) and timed
by ``bench/sampling_paths.py``:

* **packed products** (:meth:`MergedLlamaDecoder.prepare`): on a CPU with MKL, a
  batch of 2-16 rows that may decode 16 steps or more has every weight re-laid
  out once for that row count, which made a SmolLM2 decoding step of 8 rows 1.29x
  faster with the same logits (``bench/packed_linear.py``);
* **a prompt memory** (:meth:`~MergedLlamaDecoder.recall`): the keys and values of
  the last prompt, for the weights loaded, so that a prompt starting alike (the
  sync loop's second prompt of a step) runs only its own tokens.

Which one a host uses is :func:`choose_sampler`'s answer: the merged decoder only
for a Llama-style model whose weights are float32 (or float64), on a CPU or a CUDA
GPU. A LoRA delta merged into bfloat16 weights would mostly round away, so the
sampler would sample from a policy other than the one being trained; there the
adapter stays unmerged (see :func:`choose_sampler` for why not a float32 copy).
Every mask, position id and index tensor these decoders build is created on the
model's device: a CPU mask applied to GPU scores raises.

The two decoders stay together, under 800 lines: they are two answers to
one interface, and the tests hold one against the other.

Introduced in: 06_async_training_loop.ipynb (the engine's speed, not the maths)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from transformers.cache_utils import DynamicLayer

from grpo_helpers.local.adapters import LORA_ALPHA, AdapterSnapshot
from grpo_helpers.local.batch_plan import common_prefix_len


class Decoder(Protocol):
    """What :func:`grpo_helpers.local.sampling.generate` calls."""

    device: torch.device

    def prefill(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        positions: torch.Tensor,
        capacity: int,
        all_logits: bool,
    ) -> tuple[torch.Tensor, Any]:
        """Run left-padded prompts ``[R, P]``; return logits (``[R, P, V]`` or
        ``[R, 1, V]``) and a cache with room for ``capacity`` positions."""
        ...

    def step(
        self,
        tokens: torch.Tensor,
        attention_mask: torch.Tensor,
        positions: torch.Tensor,
        cache: Any,
    ) -> torch.Tensor:
        """One token per row (``[B]``); return next-token logits ``[B, V]``."""
        ...

    def select(self, cache: Any, rows: torch.Tensor) -> None:
        """Keep (or repeat) cache rows ``rows``, in that order."""
        ...

    def copy_rows(self, cache: Any, rows: torch.Tensor) -> Any:
        """A new cache holding rows ``rows`` of ``cache`` (which stays as it is)."""
        ...

    def extend(
        self,
        tokens: torch.Tensor,
        attention_mask: torch.Tensor,
        positions: torch.Tensor,
        cache: Any,
        last_only: bool = False,
    ) -> torch.Tensor:
        """Run ``[B, S]`` more tokens on top of a cache; return their logits
        ``[B, S, V]`` (``[B, 1, V]``, the last column's, with ``last_only``).
        ``attention_mask`` covers cache and new tokens; padding may sit anywhere."""
        ...

    def prepare(self, rows: int, steps: int) -> bool:
        """Get ready for up to ``steps`` decoding steps of ``rows`` rows; True when
        those steps run faster while the batch keeps exactly ``rows`` rows (the
        sampler then leaves finished rows in the batch instead of dropping them)."""
        ...

    def recall(self, tokens: list[int], capacity: int) -> tuple[int, Any] | None:
        """``(n, cache)``: the first ``n`` tokens of ``tokens`` are those of the one
        prompt remembered for the current weights, and ``cache`` (one row, room for
        ``max(capacity, len(tokens))`` positions) holds their keys and values. None
        when nothing is remembered for these weights or no token matches."""
        ...

    def remember(self, tokens: list[int], cache: Any) -> None:
        """Keep the keys and values of ``tokens`` (row 0 of ``cache``, which holds
        them from position 0) for :meth:`recall` with the same weights."""
        ...


# ------------------------------------------------------------------ transformers


class HFDecoder:
    """A ``transformers`` causal LM, with whatever adapter the host activated."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.device = next(model.parameters()).device

    def prefill(self, input_ids, attention_mask, positions, capacity, all_logits):  # noqa: ANN001, ANN201
        cache = _kv_cache(self.model, capacity)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=0 if all_logits else 1,
        )
        return out.logits, cache

    def step(self, tokens, attention_mask, positions, cache):  # noqa: ANN001, ANN201
        out = self.model(
            input_ids=tokens[:, None],
            attention_mask=attention_mask,
            position_ids=positions[:, None],
            cache=cache,
            use_cache=True,
        )
        return out.logits[:, -1, :]

    def select(self, cache, rows):  # noqa: ANN001, ANN201
        cache.batch_select_indices(rows)

    def copy_rows(self, cache, rows):  # noqa: ANN001, ANN201
        import copy

        copied = copy.copy(cache)
        copied.layers = [copy.copy(layer) for layer in cache.layers]
        copied.batch_select_indices(rows)  # index_select: new tensors
        return copied

    def extend(self, tokens, attention_mask, positions, cache, last_only=False):  # noqa: ANN001, ANN201
        out = self.model(
            input_ids=tokens,
            attention_mask=attention_mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1 if last_only else 0,
        )
        return out.logits

    def prepare(self, rows: int, steps: int) -> bool:
        return False  # rows leave the batch as they finish

    def recall(self, tokens: list[int], capacity: int) -> tuple[int, Any] | None:
        return None  # which adapter is active is the host's business, not ours

    def remember(self, tokens: list[int], cache: Any) -> None:
        pass


def _kv_cache(model: Any, capacity: int) -> Any:
    """A ``DynamicCache`` whose layers write into preallocated buffers.

    The stock ``DynamicLayer`` grows by ``torch.cat`` at every step, copying the
    whole cache each time (about 6% of the step time at 400 tokens on a CPU).
    """
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    if cache.layers and all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [PreallocatedLayer(capacity) for _ in cache.layers]
    return cache


class PreallocatedLayer(DynamicLayer):
    """One layer's keys and values in ``[B, H, capacity, D]`` buffers, filled in place.

    ``keys`` / ``values`` are views of the filled part, as ``DynamicLayer`` exposes.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # transformers is read as Any here (pyproject: its types cost mypy 30 s)
        if not self.is_initialized:  # type: ignore[has-type]
            self.device = key_states.device
            b, h, n, d = key_states.shape
            size = max(self.capacity, n)
            self._k = key_states.new_empty((b, h, size, d))
            self._v = value_states.new_empty((b, h, size, value_states.shape[-1]))
            self.is_initialized = True
        end = self.length + key_states.shape[-2]
        if end > self._k.shape[2]:  # only when the capacity was too small
            self._k = _grow(self._k, end)
            self._v = _grow(self._v, end)
        self._k[:, :, self.length : end] = key_states
        self._v[:, :, self.length : end] = value_states
        self.length = end
        self.keys = self._k[:, :, :end]
        self.values = self._v[:, :, :end]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._k = self._k.index_select(0, indices)
            self._v = self._v.index_select(0, indices)
            self.keys = self._k[:, :, : self.length]
            self.values = self._v[:, :, : self.length]


def _grow(buffer: torch.Tensor, needed: int) -> torch.Tensor:
    """``buffer`` ([B, H, N, D]) with room for at least ``needed`` positions."""
    b, h, n, d = buffer.shape
    extra = buffer.new_empty((b, h, max(needed, 2 * n) - n, d))
    return torch.cat([buffer, extra], 2)


# ------------------------------------------------------------------ merged Llama

_LAYER_MODULE = re.compile(
    r"^model\.layers\.(\d+)\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)$"
)
#: Model types :class:`MergedLlamaDecoder` can run (``config.model_type``).
MERGED_MODEL_TYPES = ("llama",)
#: The precisions of the merged decoder's products: float32 (the trained policy's),
#: or bfloat16 copies of the merged weights, a faster sampler of another policy.
SAMPLER_PRECISIONS = ("float32", "bfloat16")
#: Weight dtypes a LoRA delta may be merged into: at least float32's precision.
MERGE_DTYPES = (torch.float32, torch.float64)
#: Device types the merged decoder is checked on: the CPU by the test suite, CUDA by
#: ``bench/gpu_check.py``. Elsewhere (mps, xpu...) the plain path runs.
MERGED_DEVICE_TYPES = ("cpu", "cuda")

#: MKL's packed products (:meth:`MergedLlamaDecoder.prepare`): a weight is re-laid out
#: once for a fixed number of rows, and every product with that many rows then skips
#: the re-layout BLAS does at each call. ``bench/packed_linear.py`` measured a
#: SmolLM2 decoding step 1.43x faster at 2 rows, 1.29x at 8 and 1.12x at 16, with the
#: same logits bit for bit, for about 250-300 ms of packing
#: (``bench/results/packed_linear*-2026-12-03.txt``). Packed between these many rows:
#: below 2 a product is a matrix-vector one; above 16 a step costs more with each row
#: (32 rows: 1.4x the plain step of 16), so keeping finished rows in the batch would
#: cost more than packing saves, and at 32 the logits no longer match bit for bit ...
PACKED_ROWS = (2, 16)
#: ... and only for a batch that may decode at least this many steps, so that the
#: packing pays for itself (about ten steps of 8 rows do).
MIN_PACKED_STEPS = 16


def packing_available(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether MKL's packed products can run here: a CPU, float32, torch with MKL.

    Elsewhere (an ARM Mac, a GPU, float64) the plain products run.

    Example:
        >>> packing_available(torch.device("cuda"), torch.float32)
        False
    """
    return (
        device.type == "cpu"
        and dtype == torch.float32
        and torch.backends.mkl.is_available()
        and hasattr(torch.ops.mkl, "_mkl_linear")
    )


def choose_sampler(
    device: str | torch.device,
    dtype: torch.dtype,
    model_type: str | None,
    merged: bool = True,
) -> str:
    """Which sampler a host uses: ``"merged"`` or ``"plain"`` (LoRA unmerged).

    The merged decoder adds ``(alpha / r) B A`` into a copy of the weights. In
    bfloat16 half an ulp of a weight near 0.02 is about 6e-5, while one optimiser
    step moves a LoRA delta by 1e-5 to 1e-4: merged there, most of the delta
    rounds away and the sampler samples from a policy other than the one being
    trained. So weights below float32 are never merged (``MergedLlamaDecoder``
    refuses them too), and the sampler keeps LoRA *unmerged*: peft computes
    ``x A^T B^T`` beside the frozen base layer, so the delta is never rounded
    into a weight. We keep it unmerged rather than merge into a float32 copy
    because (1) the trainer runs exactly this peft forward, so sampler and
    trainer compute the same function in the same precision (a float32 copy
    would sample from a more precise policy than the bfloat16 one being
    trained: closer, still not the same), and (2) a float32 copy costs twice
    the bfloat16 model's memory on the GPU, beside the model itself.

    Args:
        device: the host's device (``"cpu"``, ``"cuda:0"``, a ``torch.device``).
        dtype: the dtype of the model's weights.
        model_type: ``model.config.model_type`` (``"llama"`` for SmolLM2 and
            tiny-random, ``"qwen2"``...).
        merged: the service asked for the merged sampler (``merged_sampler=``);
            False always gives ``"plain"``.

    Returns:
        ``"merged"`` for a Llama-style model in float32 or float64 on a CPU or a
        CUDA device, else ``"plain"``.

    Introduced in: 06_async_training_loop.ipynb (the engine's speed, not the maths)

    Example:
        >>> choose_sampler("cpu", torch.float32, "llama")
        'merged'
        >>> choose_sampler("cuda:0", torch.bfloat16, "llama")
        'plain'
    """
    device_type = torch.device(device).type
    if not merged or model_type not in MERGED_MODEL_TYPES:
        return "plain"
    if dtype not in MERGE_DTYPES or device_type not in MERGED_DEVICE_TYPES:
        return "plain"
    return "merged"


def key_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """The additive mask over the keys of one decoding step, on the mask's device.

    Args:
        attention_mask: ``[B, L]``, 1 for a key the row sees, 0 for left padding.
        dtype: the dtype of the attention scores it is added to.

    Returns:
        ``[B, 1, 1, L]``: 0 where a key is seen, ``-inf`` on padding; None when no
        row has padding (nothing to add).

    Example:
        >>> key_mask(torch.tensor([[0, 1, 1]]), torch.float32).flatten().tolist()
        [-inf, 0.0, 0.0]
    """
    if bool(attention_mask.all()):
        return None
    mask = torch.zeros(attention_mask.shape, dtype=dtype, device=attention_mask.device)
    mask.masked_fill_(attention_mask == 0, float("-inf"))
    return mask[:, None, None, :]


def _base_weight(module: Any) -> torch.Tensor:
    """The frozen base weight of a linear layer, peft-wrapped or not."""
    return getattr(module, "base_layer", module).weight


@dataclass
class _Layer:
    norm1: torch.Tensor
    norm2: torch.Tensor
    qkv: torch.Tensor  # [(H + 2 KV) * D, hidden]
    o: torch.Tensor  # [hidden, H * D]
    gate_up: torch.Tensor  # [2 I, hidden]
    down: torch.Tensor  # [hidden, I]


@dataclass
class _Memo:
    """The keys and values of one prompt, for the weights they were computed with."""

    weights: tuple[str | None, str]  # (the weights' id, the precision)
    tokens: list[int]
    keys: list[torch.Tensor]  # [1, KV, len(tokens), D] per layer
    values: list[torch.Tensor]


class KVCache:
    """Keys and values of every layer in ``[B, KV, capacity, D]`` buffers."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        self.keys = keys
        self.values = values
        self.length = 0


class MergedLlamaDecoder:
    """An inference-only Llama forward on merged, fused weights.

    Args:
        model: the host's ``LlamaForCausalLM`` (peft may have wrapped its linear
            layers; only their frozen base weights are read).

    Use :meth:`supports` first; :meth:`load` sets the weights a sampler uses.

    Raises:
        ValueError: the weights are below float32 (a merge would round the LoRA
            delta away; see :func:`choose_sampler`).
    """

    def __init__(self, model: Any) -> None:
        config = model.config
        self.model = model
        weight = next(model.parameters())
        if weight.dtype not in MERGE_DTYPES:
            raise ValueError(
                f"MergedLlamaDecoder refuses {weight.dtype} weights: merging a LoRA "
                "delta below float32 rounds most of it away (half an ulp of a bfloat16 "
                "weight near 0.02 is about 6e-5); sample with the adapter unmerged "
                "(merged_sampler=False, what choose_sampler picks)"
            )
        self.device = weight.device
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or (
            config.hidden_size // self.heads
        )
        self.intermediate = config.intermediate_size
        self.eps = config.rms_norm_eps
        self.scale = self.head_dim**-0.5
        self.rotary = model.model.rotary_emb
        self.embed = model.model.embed_tokens.weight
        self.final_norm = model.model.norm.weight
        self._base_head = _base_weight(model.lm_head)
        self.head = self._base_head
        self._head_buffer: torch.Tensor | None = None
        layers = model.model.layers
        self.layers = [
            _Layer(
                norm1=layer.input_layernorm.weight,
                norm2=layer.post_attention_layernorm.weight,
                qkv=_stacked(*(self._proj(i, n) for n in ("q", "k", "v"))),
                o=_stacked(self._proj(i, "o")),
                gate_up=_stacked(self._proj(i, "gate"), self._proj(i, "up")),
                down=_stacked(self._proj(i, "down")),
            )
            for i, layer in enumerate(layers)
        ]
        self.loaded: str | None = None  # id of the weights in the buffers
        #: Use MKL's packed products when :meth:`prepare` asks (tests turn it off
        #: to compare with the plain products).
        self.packing = packing_available(self.device, weight.dtype)
        self._packed: dict[int, torch.Tensor] = {}  # id(weight) -> packed copy
        self._packed_rows = 0
        #: Remember the last prompt's keys and values for :meth:`recall` (tests and
        #: benches turn it off to compare with prefilling every prompt).
        self.memory = True
        self._memo: _Memo | None = None
        #: The products' precision (:data:`SAMPLER_PRECISIONS`): float32, or
        #: bfloat16 copies of the merged weights (another policy than the trained
        #: one: faster, with logits a little off; notebook 11 measures the gap).
        self.precision = "float32"
        self._halves: dict[int, torch.Tensor] = {}  # id(weight) -> bfloat16 copy
        self._fill(None)

    @staticmethod
    def supports(model: Any) -> bool:
        """Whether ``model`` is a plain Llama-style decoder this class can run."""
        config = getattr(model, "config", None)
        if getattr(config, "model_type", None) not in MERGED_MODEL_TYPES:
            return False
        return (
            getattr(config, "hidden_act", "silu") == "silu"
            and not getattr(config, "attention_bias", False)
            and not getattr(config, "mlp_bias", False)
            and getattr(config, "pretraining_tp", 1) == 1
        )

    def weights(self) -> list[torch.Tensor]:
        """Every weight a decoding step multiplies by: four per layer and the head."""
        tensors = [t for layer in self.layers for t in (layer.qkv, layer.o)]
        tensors += [t for layer in self.layers for t in (layer.gate_up, layer.down)]
        return [*tensors, self.head]

    def nbytes(self) -> int:
        """Bytes of the merged copy this decoder holds (its packed copies aside)."""
        tensors = self.weights()[:-1]
        if self._head_buffer is not None:
            tensors.append(self._head_buffer)
        return sum(t.numel() * t.element_size() for t in tensors)

    def _proj(self, layer: int, name: str) -> torch.Tensor:
        block = self.model.model.layers[layer]
        parent = block.mlp if name in ("gate", "up", "down") else block.self_attn
        return _base_weight(getattr(parent, f"{name}_proj"))

    # -------------------------------------------------------------- weights

    def load(self, snapshot: Any | None, precision: str = "float32") -> None:
        """Make the buffers hold ``snapshot`` merged (None: the base model), its
        products at ``precision`` (``"bfloat16"``: a bfloat16 copy of each merged
        weight, made once per weights).

        Raises:
            ValueError: the snapshot adapts a layer this decoder does not know, or
                an unknown precision.
        """
        if precision not in SAMPLER_PRECISIONS:
            raise ValueError(
                f"precision must be one of {', '.join(SAMPLER_PRECISIONS)}, got "
                f"{precision!r}"
            )
        if self.loaded != ("base" if snapshot is None else snapshot.id):
            self._fill(snapshot)
        if precision == "bfloat16" and not self._halves:
            self._halves = {id(w): w.to(torch.bfloat16) for w in self.weights()}
        self.precision = precision

    @torch.no_grad()
    def _fill(self, snapshot: Any | None) -> None:
        # Forget the weights in the buffers first: a merge that fails half-way
        # leaves buffers that no id, packed copy or remembered prompt describes.
        self.loaded, self._memo = None, None
        self._packed, self._packed_rows = {}, 0
        self._halves = {}
        deltas = _deltas(snapshot) if snapshot is not None else {}
        unknown = [m for m in deltas if m != "lm_head" and not _LAYER_MODULE.match(m)]
        if unknown:
            raise ValueError(f"cannot merge LoRA weights of {unknown[0]!r}")
        hd, kvd = self.heads * self.head_dim, self.kv_heads * self.head_dim
        inter = self.intermediate
        for i, layer in enumerate(self.layers):
            parts = [
                (layer.qkv, 0, "q"),
                (layer.qkv, hd, "k"),
                (layer.qkv, hd + kvd, "v"),
                (layer.o, 0, "o"),
                (layer.gate_up, 0, "gate"),
                (layer.gate_up, inter, "up"),
                (layer.down, 0, "down"),
            ]
            for buffer, start, name in parts:
                base = self._proj(i, name)
                target = buffer[start : start + base.shape[0]]
                target.copy_(base)
                module = (
                    f"model.layers.{i}.mlp.{name}_proj"
                    if name in ("gate", "up", "down")
                    else f"model.layers.{i}.self_attn.{name}_proj"
                )
                if module in deltas:
                    a, b, scale = deltas[module]
                    target.addmm_(b.to(target.dtype), a.to(target.dtype), alpha=scale)
        if "lm_head" in deltas:
            if self._head_buffer is None:
                self._head_buffer = torch.empty_like(self._base_head)
            a, b, scale = deltas["lm_head"]
            head = self._head_buffer
            head.copy_(self._base_head)
            head.addmm_(b.to(head.dtype), a.to(head.dtype), alpha=scale)
            self.head = self._head_buffer
        else:
            self.head = self._base_head
        self.loaded = "base" if snapshot is None else snapshot.id

    def prepare(self, rows: int, steps: int) -> bool:
        """Pack the weights for decoding steps of ``rows`` rows, when that pays.

        Packing happens when :attr:`packing` is on, ``rows`` is in
        :data:`PACKED_ROWS` and ``steps >= MIN_PACKED_STEPS``; the packed copies
        (about the size of the weights) last until other weights are loaded or
        another row count is packed, so a second group of the same sampler and size
        packs nothing. Returns whether steps of ``rows`` rows now run packed.
        """
        if self.precision != "float32":  # bfloat16 products are not packed
            return False
        low, high = PACKED_ROWS
        if not (self.packing and low <= rows <= high and steps >= MIN_PACKED_STEPS):
            return self.packing and rows == self._packed_rows
        if rows != self._packed_rows:
            self._packed = {}  # free the old copies first
            reorder = torch.ops.mkl._mkl_reorder_linear_weight
            self._packed = {id(w): reorder(w, rows) for w in self.weights()}
            self._packed_rows = rows
        return True

    def recall(self, tokens: list[int], capacity: int) -> tuple[int, KVCache] | None:
        memo = self._memo
        here = (self.loaded, self.precision)
        if not self.memory or memo is None or memo.weights != here:
            return None
        n = common_prefix_len(memo.tokens, tokens)
        if n == 0:
            return None
        shape = (1, self.kv_heads, max(capacity, len(tokens)), self.head_dim)
        cache = KVCache(
            [k.new_empty(shape) for k in memo.keys],
            [v.new_empty(shape) for v in memo.values],
        )
        for target, source in zip(
            cache.keys + cache.values, memo.keys + memo.values, strict=True
        ):
            target[:, :, :n] = source[:, :, :n]
        cache.length = n
        return n, cache

    def remember(self, tokens: list[int], cache: KVCache) -> None:
        if not self.memory:
            return
        n = len(tokens)
        self._memo = _Memo(
            (self.loaded, self.precision),
            list(tokens),
            [k[:1, :, :n].clone() for k in cache.keys],
            [v[:1, :, :n].clone() for v in cache.values],
        )

    # -------------------------------------------------------------- forward

    def prefill(self, input_ids, attention_mask, positions, capacity, all_logits):  # noqa: ANN001, ANN201
        rows, length = input_ids.shape
        shape = (rows, self.kv_heads, max(capacity, length), self.head_dim)
        dtype = self.embed.dtype
        cache = KVCache(
            [torch.empty(shape, dtype=dtype, device=self.device) for _ in self.layers],
            [torch.empty(shape, dtype=dtype, device=self.device) for _ in self.layers],
        )
        valid = attention_mask.bool()
        causal = torch.ones(length, length, dtype=torch.bool, device=self.device).tril()
        eye = torch.eye(length, dtype=torch.bool, device=self.device)
        # Padding queries attend to themselves only: finite values nobody reads.
        mask = (causal & valid[:, None, None, :]) | eye
        hidden = self._forward(input_ids, positions, cache, mask)
        if not all_logits:
            hidden = hidden[:, -1:]
        return self._mm(self._norm(hidden, self.final_norm), self.head), cache

    def step(self, tokens, attention_mask, positions, cache):  # noqa: ANN001, ANN201
        # An additive mask over the keys (-inf on left padding), None without any;
        # built where the scores are (a CPU mask on CUDA scores raises).
        mask = key_mask(attention_mask.to(self.device), self.embed.dtype)
        hidden = self._forward(tokens[:, None], positions[:, None], cache, mask, True)
        return self._mm(self._norm(hidden[:, -1], self.final_norm), self.head, True)

    def select(self, cache: KVCache, rows: torch.Tensor) -> None:
        cache.keys = [k.index_select(0, rows) for k in cache.keys]
        cache.values = [v.index_select(0, rows) for v in cache.values]

    def copy_rows(self, cache: KVCache, rows: torch.Tensor) -> KVCache:
        copied = KVCache(
            [k.index_select(0, rows) for k in cache.keys],
            [v.index_select(0, rows) for v in cache.values],
        )
        copied.length = cache.length
        return copied

    def extend(self, tokens, attention_mask, positions, cache, last_only=False):  # noqa: ANN001, ANN201
        batch, seq = tokens.shape
        past = cache.length
        total = past + seq
        # Query i sees every cached key and the new keys up to itself; padded
        # queries see themselves at least (finite values nobody reads).
        causal = torch.ones(seq, total, dtype=torch.bool, device=self.device).tril(
            diagonal=past
        )
        mask = causal[None, None] & attention_mask.bool()[:, None, None, :]
        own = torch.arange(seq, device=self.device)
        mask[:, :, own, past + own] = True
        hidden = self._forward(tokens, positions, cache, mask)
        if last_only:
            hidden = hidden[:, -1:]
        return self._mm(self._norm(hidden, self.final_norm), self.head)

    def _mm(
        self, x: torch.Tensor, weight: torch.Tensor, step: bool = False
    ) -> torch.Tensor:
        """``x @ weight.T``: packed in a decoding ``step`` whose rows are the packed
        row count (and :attr:`packing` on), else :func:`_linear` (on SmolLM2's weights
        the two gave the same bits at 2-16 rows, ``bench/packed_linear.py``)."""
        if self.precision == "bfloat16":
            return F.linear(x.to(torch.bfloat16), self._halves[id(weight)]).float()
        flat = x.reshape(-1, x.shape[-1])
        rows = flat.shape[0]
        packed = None
        if step and self.packing and rows == self._packed_rows:
            packed = self._packed.get(id(weight))
        if packed is None:
            return _linear(x, weight)
        out = torch.ops.mkl._mkl_linear(flat.contiguous(), packed, weight, None, rows)
        return out.reshape(*x.shape[:-1], weight.shape[0])

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight, self.eps)

    def _forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        cache: KVCache,
        mask: torch.Tensor | None,
        step: bool = False,
    ) -> torch.Tensor:
        """Hidden states ``[B, S, hidden]`` before the final norm; fills the cache.
        ``step``: a decoding step (its products may run packed, see :meth:`prepare`).

        ``mask``: for a prompt (S > 1), which keys each query sees ([B, 1, S, S],
        boolean); for one new token, an additive mask over the keys ([B, 1, 1, L])
        or None when every row sees every key.
        """
        batch, seq = input_ids.shape
        h, kv, d = self.heads, self.kv_heads, self.head_dim
        hidden = F.embedding(input_ids, self.embed)
        cos, sin = self.rotary(hidden, positions)
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, S, D]
        start, end = cache.length, cache.length + seq
        for i, layer in enumerate(self.layers):
            x = self._norm(hidden, layer.norm1)
            qkv = self._mm(x, layer.qkv, step)
            q, k, v = qkv.split([h * d, kv * d, kv * d], dim=-1)
            q = _rope(q.reshape(batch, seq, h, d).transpose(1, 2), cos, sin)
            k = _rope(k.reshape(batch, seq, kv, d).transpose(1, 2), cos, sin)
            keys, values = cache.keys[i], cache.values[i]
            keys[:, :, start:end] = k
            values[:, :, start:end] = v.reshape(batch, seq, kv, d).transpose(1, 2)
            keys, values = keys[:, :, :end], values[:, :, :end]
            if seq == 1:
                # [B, KV, G, D] @ [B, KV, D, L]: query heads grouped by their KV head.
                scores = q.reshape(batch, kv, h // kv, d) @ keys.transpose(-1, -2)
                scores = (
                    scores * self.scale
                    if mask is None
                    else scores.mul_(self.scale).add_(mask)
                )
                attn = torch.softmax(scores, dim=-1) @ values
                attn = attn.reshape(batch, 1, h * d)
            else:
                attn = F.scaled_dot_product_attention(
                    q, keys, values, attn_mask=mask, scale=self.scale, enable_gqa=True
                )
                attn = attn.transpose(1, 2).reshape(batch, seq, h * d)
            hidden = hidden + self._mm(attn, layer.o, step)
            x = self._norm(hidden, layer.norm2)
            gate, up = self._mm(x, layer.gate_up, step).split(
                [self.intermediate, self.intermediate], dim=-1
            )
            hidden = hidden + self._mm(F.silu(gate) * up, layer.down, step)
        cache.length = end
        return hidden


def _stacked(*weights: torch.Tensor) -> torch.Tensor:
    """An empty buffer with the rows of ``weights`` stacked (filled by ``load``)."""
    rows = sum(w.shape[0] for w in weights)
    return weights[0].new_empty((rows, weights[0].shape[1]))


def _linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` computed as ``(weight @ x.T).T``.

    The same product; on a CPU with few rows (a decoding step) BLAS streams the
    weight about 1.5x faster in this orientation.
    """
    flat = x.reshape(-1, x.shape[-1])
    out = (weight @ flat.t()).t()
    return out.reshape(*x.shape[:-1], weight.shape[0])


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding, in Llama's half-split layout."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _deltas(
    snapshot: AdapterSnapshot,
) -> dict[str, tuple[torch.Tensor, torch.Tensor, float]]:
    """``{module: (A, B, alpha / r)}`` from a snapshot's LoRA tensors."""
    scale = LORA_ALPHA / snapshot.spec.rank
    out: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = {}
    for name, a in snapshot.tensors.items():
        if not name.endswith(".lora_A.weight"):
            continue
        module = name[: -len(".lora_A.weight")]
        b = snapshot.tensors[f"{module}.lora_B.weight"]
        out[module] = (a, b, scale)
    return out


__all__ = [
    "MERGED_DEVICE_TYPES",
    "MERGED_MODEL_TYPES",
    "MERGE_DTYPES",
    "MIN_PACKED_STEPS",
    "PACKED_ROWS",
    "Decoder",
    "HFDecoder",
    "KVCache",
    "MergedLlamaDecoder",
    "PreallocatedLayer",
    "choose_sampler",
    "key_mask",
    "packing_available",
]
