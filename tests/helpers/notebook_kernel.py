"""The kernel a notebook of the series opens on, and the guard its first code cell
starts with.

``make lab`` registers the project's kernel (``KERNEL``, shown as
``DISPLAY_NAME``); every notebook's kernelspec names it. A notebook opened on
another kernel (VS Code's default, a JupyterLab of another environment) may have no
``grpo_helpers``: its first code cell then stops at once with one sentence that
names ``make lab`` (``GUARD``, the same text in every notebook), before any other
import can fail with a less helpful error.

Nothing that executes notebooks reads this name: the series, the course site and
the tests run ``python3`` of their own environment (``classroom/notebooks.py``),
grading its own kernel (``classroom/grading.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_MAKEFILE = (ROOT / "Makefile").read_text()
#: The kernel's name and display name, as ``make lab`` registers them.
(KERNEL,) = re.findall(r"^KERNEL\s*:?= *(\S+)$", _MAKEFILE, re.M)
(DISPLAY_NAME,) = re.findall(r'--display-name "([^"]+)"', _MAKEFILE)

#: The opening of every notebook's first code cell.
GUARD = f"""\
try:
    import grpo_helpers  # noqa: F401
except ModuleNotFoundError:
    raise ModuleNotFoundError(
        "This kernel has no grpo_helpers: run `make lab` from the repository (it "
        "installs the project's kernel) or pick the kernel '{DISPLAY_NAME}'."
    ) from None
"""


def without_guard(source: str) -> str:
    """A first code cell's source after the guard (what the house style's line
    limit counts)."""
    return source.removeprefix(GUARD).lstrip("\n")
