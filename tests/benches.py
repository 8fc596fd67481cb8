"""Import a script of ``bench/`` in a test (the folder is not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py``, freshly imported (its module-level state is new)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
