"""TRL for the tests that use it as an oracle, or a failure where it should be.

The ``trl`` extra installs TRL 1.16 on Python >= 3.11 (``make setup`` installs it):
there a missing TRL fails the TRL tests instead of skipping them, which dropped
the only outside check of the loss without a word. On older Pythons, where the
extra installs nothing, they are skipped with that reason.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pytest

#: Where the ``trl`` extra installs TRL (pyproject.toml).
TRL_PYTHON = (3, 11)


def import_trl() -> ModuleType:
    """``trl``, imported; fails the calling test module when it should be there."""
    if sys.version_info < TRL_PYTHON:
        return pytest.importorskip("trl", reason="TRL 1.16 needs Python >= 3.11")
    try:
        return importlib.import_module("trl")
    except ImportError as error:
        pytest.fail(
            f"TRL is not installed ({error}), but on Python "
            f"{sys.version_info.major}.{sys.version_info.minor} the TRL tests must "
            "run: make setup-all installs it "
            "(pip install -e '.[trl]' -c constraints.txt).",
            pytrace=False,
        )
