"""Every notebook opens on the project's kernel, the one ``make lab`` registers
(so VS Code or a JupyterLab started elsewhere offers it), and its first code cell
says what to do when that kernel is not the one running it.

The suite's own runs choose ``python3`` (``classroom/notebooks.py``) and grading
its sandboxed kernel (``classroom/grading.py``): neither reads this name.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
(KERNEL,) = re.findall(r"^KERNEL := (\S+)$", (ROOT / "Makefile").read_text(), re.M)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_the_notebook_names_the_projects_kernel(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.kernelspec.name == KERNEL == "grpo-notebooks"
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert first.source.startswith("try:\n    import grpo_helpers")
    assert "run `make lab`" in first.source


def test_the_first_cell_names_make_lab_where_grpo_helpers_is_missing(tmp_path):
    """Run the first cell where ``grpo_helpers`` cannot be imported."""
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code").source
    guard = first.split("\n\n")[0]
    scope = {"__builtins__": __builtins__}
    import sys

    saved = sys.modules.get("grpo_helpers")
    sys.modules["grpo_helpers"] = None  # import now raises ImportError
    try:
        with pytest.raises(ImportError, match="run `make lab`") as raised:
            exec(compile(guard, "first cell", "exec"), scope)
    finally:
        sys.modules["grpo_helpers"] = saved
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
