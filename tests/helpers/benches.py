"""Run a script of ``bench/`` as its users do, in a process of its own.

Tests never import a bench: what a test needs from one lives in the package, and a
bench's smoke run is checked through what it prints and what ``--json`` writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def run_bench(
    name: str, *argv: str, timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess:
    """``python bench/<name>.py argv...`` from the project's root; its output.

    Args:
        name: the script's name, without ``.py``.
        argv: its flags.
        timeout: seconds before the run is killed (a guard against a hang).
        check: fail with the script's output when it exits with an error.
    """
    done = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def bench_json(name: str, tmp_path: Path, *argv: str, **kwargs: Any) -> Any:
    """Run a bench with ``--json`` and return what it wrote, and its output."""
    out = tmp_path / f"{name}.json"
    done = run_bench(name, *argv, "--json", str(out), **kwargs)
    return json.loads(out.read_text()), done.stdout
