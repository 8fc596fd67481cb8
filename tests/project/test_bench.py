"""The benches stay out of the test suite, but must not rot: each runs once in its
smoke mode on tiny-random, in a process of its own, as ``python bench/<name>.py``
(a few seconds each). Their numbers are not checked here: timing claims come from
the benches themselves, run on a quiet machine. What the README's tables are
built from is the package's (``results.facts``), tested directly."""

from __future__ import annotations

import math

from benches import bench_json, run_bench


def test_step_time_quick_runs_and_prints_its_result_line(tmp_path):
    result, out = bench_json("step_time", tmp_path, "--quick")
    last = out.strip().splitlines()[-1]
    assert last.startswith("RESULT training ") and "floor-decoding" in last
    assert "bf16-sampling" in last
    keys = ("ratio_training", "ratio_sampling", "ratio_step", "floor_training")
    for key in (*keys, "ratio_bf16_sampling"):
        assert math.isfinite(result[key]) and result[key] > 0


def test_group_shape_time_quick_runs_both_shapes_and_prints_its_result_line(
    tmp_path,
):
    result, out = bench_json("group_shape_time", tmp_path, "--quick")
    last = out.strip().splitlines()[-1]
    assert last.startswith("RESULT step-sampling ") and "decoding-step" in last
    for key in ("ratio_step", "ratio_decoding_step"):
        assert math.isfinite(result[key]) and result[key] > 0


def test_sampling_paths_quick_compares_both_ways(tmp_path):
    result, out = bench_json("sampling_paths", tmp_path, "--quick")
    last = out.strip().splitlines()[-1]
    assert last.startswith("RESULT without ") and " same " in last
    assert math.isfinite(result["ratio"]) and result["ratio"] > 0
    # every completion the same both ways, as the README says of the full run
    assert result["same"] == result["total"] == 16


def test_eval_speed_runs_both_paths_and_compares_them(tmp_path):
    rows, out = bench_json(
        "eval_speed",
        tmp_path,
        *["--model", "tiny-random", "--n", "6", "--max-tokens", "4"],
        *["--concurrency", "2", "6"],
    )
    # both paths really ran: prompts sharing the few-shot start prefilled it once
    for row in rows:
        if row["share_prefix"]:
            assert row["shared_prefills"] > 0, row
        else:
            assert row["shared_prefills"] == 0 and row["plain_prefills"] > 0, row
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


def test_eval_speed_says_how_many_questions_the_split_has():
    done = run_bench(
        "eval_speed", "--model", "tiny-random", "--n", "10000000", check=False
    )
    assert done.returncode == 2
    assert "--n 10000000" in done.stderr and "held-out split has" in done.stderr


def test_loop_retrace_quick_runs_the_solutions_loop(tmp_path):
    """Fast mode has nothing to retrace: the bench says which settings differ."""
    result, out = bench_json("loop_retrace", tmp_path, "--quick")
    assert result["steps"] == 2
    assert result["retrace"].startswith("no retrace to check")
