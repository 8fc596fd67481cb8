"""Settings read once from the environment, shared by notebooks, tests and the CLI.

``GRPO_FAST=1`` turns on the fast mode: every notebook runs the same code path with
smaller numbers (fewer rows, steps, samples and tokens), so the test suite can execute
the whole series in minutes. ``GRPO_BACKEND`` picks the engine (``local`` or
``pytrio``) when code does not name one. ``GRPO_CACHE_DIR`` is where converted model
weights and tokenizers are cached (default ``~/.cache/grpo-notebooks``).

Introduced in: 01_gsm8k_dataset.ipynb
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Settings:
    """The environment, read once at import time."""

    fast: bool
    backend: str
    cache_dir: Path
    project_root: Path


def _read_settings() -> Settings:
    root = Path(__file__).resolve().parent.parent
    default_cache = Path.home() / ".cache" / "grpo-notebooks"
    cache = os.environ.get("GRPO_CACHE_DIR") or str(default_cache)
    return Settings(
        fast=os.environ.get("GRPO_FAST", "").strip().lower() in _TRUE,
        backend=os.environ.get("GRPO_BACKEND", "local").strip().lower() or "local",
        cache_dir=Path(cache).expanduser(),
        project_root=root,
    )


SETTINGS = _read_settings()
FAST = SETTINGS.fast


def pick(full, fast):  # noqa: ANN001, ANN201 - any value type
    """Return ``fast`` in fast mode (``GRPO_FAST=1``) and ``full`` otherwise.

    Notebooks use it in their ``parameters`` cell so that the fast mode changes
    numbers only, never which cells run::

        >>> pick(100, 4) in (100, 4)
        True
    """
    return fast if FAST else full
