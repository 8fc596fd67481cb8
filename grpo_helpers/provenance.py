"""What a run was made with, beyond its settings: the commit, the machine, the
packages, the floating-point path and the model file.

Two runs with the same settings and seed give the same numbers only where all of
this agrees (``docs/results.md``, "What reproduces"); every record the series
writes carries it (:func:`record`), so that a reader can tell.

Introduced in: docs/results.md (what reproduces)
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

from grpo_helpers.settings import (
    DEFAULT_BASE_MODELS,
    REPORTED_PACKAGES,
    SETTINGS,
    SMOLLM2_GGUF_NOTE,
    installed_version,
)

__all__ = [
    "commit",
    "file_sha256",
    "hardware",
    "model_file",
    "model_label",
    "model_words",
    "numeric_path",
    "record",
    "versions",
]


def hardware() -> str:
    """A short description of this machine: CPU cores (or the GPU) and memory."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cores = os.cpu_count() or 1
    try:
        import torch

        if torch.cuda.is_available():
            return f"GPU {torch.cuda.get_device_name(0)}"
        threads = torch.get_num_threads()
    except ImportError:
        threads = cores
    memory = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        memory = f", {pages / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        pass
    return f"{cores} CPU cores ({threads} torch threads){memory}"


def versions() -> dict[str, str]:
    """Python and the versions of the packages that shape the numbers."""
    out = {"python": platform.python_version()}
    return out | {name: installed_version(name) for name in REPORTED_PACKAGES}


def commit() -> dict[str, Any]:
    """The project's git commit and whether tracked files differ from it.

    ``{"commit": "unknown", "dirty": None}`` outside a git checkout.
    """
    root = SETTINGS.project_root

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "dirty": None}
    return {"commit": head, "dirty": dirty}


@functools.lru_cache(maxsize=8)
def file_sha256(path: str) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks (cached per path)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _cpu() -> dict[str, str]:
    """The CPU's name and, on Linux, its family, model and stepping (a virtual
    machine's name says little: "AMD EPYC" covers several generations)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        return {"cpu": platform.processor()}
    out = {"cpu": fields.get("model name", platform.processor())}
    if "cpu family" in fields:
        out["cpu_id"] = (
            f"{fields.get('vendor_id', '?')} family {fields['cpu family']} model "
            f"{fields.get('model', '?')} stepping {fields.get('stepping', '?')}"
        )
    return out


def numeric_path() -> dict[str, Any]:
    """What decides the floating-point path of a run on this machine, as far as
    torch reports it: the CPU, torch's vector kernels and BLAS, the thread count,
    and the local engine's fast paths (MKL packed products, the prompt memory).

    Two runs with the same settings and seed give the same numbers only where
    these agree (``docs/results.md``, "Why one configuration gave two results").
    """
    out: dict[str, Any] = {"machine": platform.machine()}
    out.update(_cpu())
    try:
        import torch
    except ImportError:
        return out
    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    out.update(
        {
            "torch_threads": torch.get_num_threads(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "blas": blas.group(1) if blas else "unknown",
            "mkl": torch.backends.mkl.is_available(),
            "mkldnn": torch.backends.mkldnn.is_available(),
        }
    )
    try:
        from grpo_helpers.local import decoder, prompt_cache
    except ImportError:
        return out
    packing = decoder.packing_available(torch.device("cpu"), torch.float32)
    out["packed_products"] = list(decoder.PACKED_ROWS) if packing else False
    out["packed_min_steps"] = decoder.MIN_PACKED_STEPS
    out["shared_prefix_min_tokens"] = prompt_cache.MIN_SHARED_PREFIX
    return out


def model_file(base_model: str) -> dict[str, Any]:
    """Which file a base model name loads on the local engine, and its SHA-256.

    ``{"model": name, "kind": "gguf", "file": "SmolLM2-...gguf", "sha256": ...}``;
    a model with no single file (tiny-random, a hub id) has no hash.
    """
    try:
        from grpo_helpers.local.models import resolve_model

        source = resolve_model(base_model)
    except (ImportError, OSError, ValueError) as err:
        return {"model": base_model, "kind": "unresolved", "error": str(err)}
    out: dict[str, Any] = {"model": source.name, "kind": source.kind}
    location = Path(source.location)
    if source.kind == "gguf" and location.is_file():
        out["file"] = location.name
        out["sha256"] = file_sha256(str(location))
    return out


def record(base_model: str | None = None) -> dict[str, Any]:
    """What a reproduction needs beyond the settings: the commit, the numeric path
    (:func:`numeric_path`) and, given a base model, its file and hash."""
    out = {**commit(), "numeric": numeric_path()}
    if base_model is not None:
        out["model_file"] = model_file(base_model)
    return out


def _is_default_smollm2(base_model: str | None) -> bool:
    name = str(base_model or DEFAULT_BASE_MODELS["local"]).strip().lower()
    return name in {
        DEFAULT_BASE_MODELS["local"].lower(),
        "smollm2-135m-instruct",
        "smollm2",
    }


def model_words(base_model: str | None) -> str:
    """What ``base_model`` is on the local engine, in a sentence (``None``: the
    engine's default). SmolLM2's name is the dequantised 4-bit GGUF
    (``settings.SMOLLM2_GGUF_NOTE``); ``hub:<id>`` the hub's original weights.

    Example::

        >>> "4-bit (Q4_1) GGUF" in model_words(None)
        True
    """
    if _is_default_smollm2(base_model):
        return f"{DEFAULT_BASE_MODELS['local']}: {SMOLLM2_GGUF_NOTE}."
    if str(base_model).startswith("hub:"):
        return f"{str(base_model)[4:]}: the original weights from the Hugging Face hub"
    return str(base_model)


def model_label(base_model: str | None) -> str:
    """A few words for a caption: ``"SmolLM2-135M-Instruct (4-bit GGUF,
    dequantised)"``, ``"<id> (hub weights)"`` or the name.

    Example::

        >>> model_label("HuggingFaceTB/SmolLM2-135M-Instruct")
        'SmolLM2-135M-Instruct (4-bit GGUF, dequantised)'
    """
    if _is_default_smollm2(base_model):
        return "SmolLM2-135M-Instruct (4-bit GGUF, dequantised)"
    if str(base_model).startswith("hub:"):
        return f"{str(base_model)[4:]} (hub weights)"
    return str(base_model)
