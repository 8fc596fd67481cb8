"""The benches stay out of the test suite, but must not rot: each runs once in its
smoke mode on tiny-random (seconds). Their numbers are not checked here: timing
claims come from the benches themselves, run on a quiet machine."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_bench(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_step_time_quick_runs_and_prints_its_result_line(capsys):
    result = load_bench("step_time").main(["--quick"])
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert last.startswith("RESULT training ") and "floor-decoding" in last
    for key in ("ratio_training", "ratio_sampling", "ratio_step", "floor_training"):
        assert math.isfinite(result[key]) and result[key] > 0
