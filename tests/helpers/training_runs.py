"""Training runs in a process of their own, and what two runs are compared by.

``subprocess_env()`` is the environment of a Python subprocess that runs this
checkout's package at this process's torch thread count; ``closed_port()`` a local
port where nothing listens (a server that never answers). A resumed run is compared
with an uninterrupted one by its metrics without their timings (:data:`TIMING`) and
by its final LoRA tensors (:func:`final_lora`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from grpo_helpers.local import checkpoints, models

ROOT = Path(__file__).resolve().parents[2]


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a Python subprocess that runs this checkout's package
    (an editable install may point elsewhere when the subprocess starts in another
    folder), with the torch thread count this process's engine uses
    (``models.thread_count()``: ``OMP_NUM_THREADS``, else the CPUs it may use).

    The same count, not one thread: a run killed in a subprocess and resumed in
    this process is compared with a run made here, and another thread count adds
    the same numbers in another order. On the tiny run 1 and 2 threads give the
    same samples and metrics within 1e-7, but ``lm_head.lora_B`` 1e-5 apart, past
    the resume tests' tolerance; at one count the runs are equal bit for bit.
    ``make test`` sets ``OMP_NUM_THREADS=1``, so there both sides use one."""
    path = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "OMP_NUM_THREADS": str(models.thread_count()),
        "PYTHONPATH": os.pathsep.join(filter(None, path)),
        **extra,
    }


def closed_port() -> int:
    """A port on this machine where nothing listens (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The metrics columns that are timings: they differ between two equal runs.
TIMING = ("seconds_sampling", "seconds_training", "seconds_total", "seconds_refill")


def final_lora(run_dir: Path) -> dict:
    """The LoRA tensors of a run's final weights (``weights.json``)."""
    weights = json.loads((run_dir / "weights.json").read_text())["path"]
    return checkpoints.load_checkpoint(weights)[1]
