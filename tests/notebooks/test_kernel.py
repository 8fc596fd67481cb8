"""Every notebook opens on the project's kernel, the one ``make lab`` registers
(so a JupyterLab started elsewhere, or VS Code, offers it), and its first code cell
says what to do where the kernel running it has no ``grpo_helpers``
(``tests/helpers/notebook_kernel.py``).

That nothing executing the notebooks depends on that kernel being installed:
``tests/classroom/test_notebook_runner.py`` (the series, the course site and the
tests' runs) and ``tests/classroom/test_sandbox.py`` (grading).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from notebook_kernel import DISPLAY_NAME, GUARD, KERNEL

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _first_code_cell(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return next(c for c in nb.cells if c.cell_type == "code").source


def test_the_series_has_its_notebooks():
    assert len(NOTEBOOKS) == 11
    assert KERNEL == "grpo-notebooks"
    assert DISPLAY_NAME == "Python (grpo-notebooks)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_the_notebook_opens_on_the_projects_kernel(path):
    spec = nbformat.read(path, as_version=4).metadata.kernelspec
    assert dict(spec) == {
        "name": KERNEL,
        "display_name": DISPLAY_NAME,
        "language": "python",
    }


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_the_first_code_cell_starts_with_the_guard(path):
    assert _first_code_cell(path).startswith(GUARD + "\n")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_the_first_cell_names_make_lab_where_grpo_helpers_is_missing(tmp_path, path):
    """The whole first cell, run by a Python that has no ``grpo_helpers`` and no
    site-packages (``-I -S``: no PYTHONPATH, no editable install, no numpy):
    the guard stops it first, with its one sentence and no chained traceback."""
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _first_code_cell(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "ModuleNotFoundError: This kernel has no grpo_helpers: run `make lab` from "
        "the repository (it installs the project's kernel) or pick the kernel "
        f"'{DISPLAY_NAME}'."
    )
    assert "During handling" not in done.stderr  # `from None`: one error, not two


def test_the_guard_is_silent_where_grpo_helpers_is_there():
    scope: dict = {}
    exec(compile(GUARD, "guard", "exec"), scope)
    assert scope["grpo_helpers"].__name__ == "grpo_helpers"
