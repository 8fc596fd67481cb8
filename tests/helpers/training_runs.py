"""Training runs in a process of their own, and what two runs are compared by.

``subprocess_env()`` is the environment of a Python subprocess that runs this
checkout's package on one thread; ``closed_port()`` a local port where nothing
listens (a server that never answers). A resumed run is compared with an
uninterrupted one by its metrics without their timings (:data:`TIMING`) and by its
final LoRA tensors (:func:`final_lora`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from grpo_helpers.local import checkpoints

ROOT = Path(__file__).resolve().parents[2]


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a Python subprocess that runs this checkout's package
    (an editable install may point elsewhere when the subprocess starts in another
    folder), on one thread."""
    path = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
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
