"""Execute a notebook of the series: the one runner of ``series``, the course site
and the test suite.

Example::

    nb = nbformat.read("notebooks/03_group_advantages.ipynb", as_version=4)
    run = notebooks.execute(nb, cwd=Path("notebooks"), fast=True)
    run.ok, run.seconds  # and nb now holds the outputs
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["KERNEL", "Execution", "execute"]

#: The kernel every notebook runs in: ``python3``, which Jupyter starts with this
#: process's own Python. Not the notebook's kernelspec, which names the project's
#: kernel (``make lab`` registers it): a fresh clone or CI has none.
KERNEL = "python3"


@dataclass(frozen=True)
class Execution:
    """How one execution went: its seconds, and the error ("" when none)."""

    seconds: float
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


def execute(
    nb: Any,
    *,
    cwd: Path,
    timeout: int = 1800,
    fast: bool | None = None,
    env: Mapping[str, str] | None = None,
) -> Execution:
    """Run every cell of ``nb`` (an ``nbformat`` notebook) in a fresh kernel
    (:data:`KERNEL`, whatever ``nb``'s kernelspec names), in place: the outputs
    land in ``nb``.

    Args:
        nb: the notebook, as ``nbformat.read`` returns it.
        cwd: the kernel's working folder (the notebooks' own, for their paths).
        timeout: seconds a cell may run.
        fast: True or False sets ``GRPO_FAST`` for the kernel; None keeps this
            process's.
        env: more environment variables for the kernel (the rest is this
            process's).

    Returns:
        The seconds it took and the error, if a cell failed (its last 6000
        characters).
    """
    from nbclient import NotebookClient

    kernel_env = {**os.environ, **(env or {})}
    if fast is not None:
        kernel_env["GRPO_FAST"] = "1" if fast else ""
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=KERNEL,
        resources={"metadata": {"path": str(cwd)}},
    )
    started = time.perf_counter()
    error = ""
    try:
        client.execute(env=kernel_env)
    except Exception as exc:  # noqa: BLE001 - a failed cell is reported, not raised
        error = f"{type(exc).__name__}: {exc}"[-6000:]
    return Execution(round(time.perf_counter() - started, 1), error)
