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


def test_eval_speed_runs_both_paths_and_compares_them(capsys):
    rows = load_bench("eval_speed").main(
        ["--model", "tiny-random", "--n", "6", "--max-tokens", "4"]
        + ["--concurrency", "2", "6"]
    )
    out = capsys.readouterr().out
    assert "share_prefix" in out and "speed-up" in out
    assert [(r["concurrency"], r["share_prefix"]) for r in rows] == [
        (2, False),
        (2, True),
        (6, False),
        (6, True),
    ]
    # Greedy answers do not depend on the path (tiny-random: no near ties).
    assert all(r["differ_from_plain"] == 0 for r in rows)
    assert rows[0]["speedup"] == 1.0
