"""The one notebook runner (``classroom/notebooks.py``: ``grpo series``, the course
site and the tests' executions) runs a notebook in ``python3`` of its own
environment, whatever kernel the notebook names: the notebooks name the project's
kernel (``tests/notebooks/test_kernel.py``), which only ``make lab`` installs.
"""

from __future__ import annotations

import sys

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from notebook_kernel import DISPLAY_NAME, KERNEL

from grpo_helpers.classroom import notebooks


def test_a_notebook_runs_where_the_kernel_it_names_is_not_installed(
    tmp_path, monkeypatch
):
    # where `make lab` installed the project's kernel (--user), hide it
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "no-user-kernels"))
    monkeypatch.delenv("JUPYTER_PATH", raising=False)
    assert KERNEL not in KernelSpecManager().find_kernel_specs()
    nb = nbformat.v4.new_notebook()
    nb.metadata.kernelspec = {
        "name": KERNEL,
        "display_name": DISPLAY_NAME,
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell("import sys\nprint(sys.executable)")]
    run = notebooks.execute(nb, cwd=tmp_path, timeout=60)
    assert run.ok, run.error
    # the kernel is this environment's Python
    assert nb.cells[0].outputs[0]["text"].strip() == sys.executable
