"""The benches stay out of the test suite, but must not rot: each runs once in its
smoke mode on tiny-random, in a process of its own, as ``python bench/<name>.py``
(a few seconds each). Their numbers are not checked here: timing claims come from
the benches themselves, run on a quiet machine. What the README's tables are
built from is the package's (``results.facts``), tested directly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from benches import bench_json, run_bench

from grpo_helpers.results import facts, recorded_runs

ROOT = Path(__file__).resolve().parent.parent


def test_step_time_quick_runs_and_prints_its_result_line(tmp_path):
    result, out = bench_json("step_time", tmp_path, "--quick")
    last = out.strip().splitlines()[-1]
    assert last.startswith("RESULT training ") and "floor-decoding" in last
    for key in ("ratio_training", "ratio_sampling", "ratio_step", "floor_training"):
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


def _seed_numbers(seed: int, exact: tuple, lenient: tuple, minutes: float) -> dict:
    def grade(before: float, after: float, p: float) -> dict:
        return {"before": before, "after": after, "p_value": p}

    def evaluation(exact_acc: float, lenient_acc: float) -> dict:
        return {
            "n": 200,
            "exact_acc": exact_acc,
            "exact_ci": [0.1, 0.2],
            "lenient_acc": lenient_acc,
            "lenient_ci": [0.1, 0.2],
            "boxed_frac": 0.5,
        }

    return {
        "seed": seed,
        "summary": {"exact": grade(*exact), "lenient": grade(*lenient)},
        "base": evaluation(exact[0], lenient[0]),
        "trained": evaluation(exact[1], lenient[1]),
        "train_seconds": minutes * 60 - 120,
        "total_seconds": minutes * 60,
    }


def test_the_seed_table_bolds_only_what_clears_the_bar(tmp_path):
    results = [
        _seed_numbers(0, (0.07, 0.50, 1e-20), (0.11, 0.50, 1e-16), 12.4),
        _seed_numbers(1, (0.08, 0.285, 1e-7), (0.135, 0.285, 4e-4), 16.0),
        _seed_numbers(2, (0.07, 0.415, 0.02), (0.11, 0.55, 1e-20), 14.5),
    ]
    saved = tmp_path / "results.json"
    saved.write_text(json.dumps(results))
    rows = facts.seed_table(facts.load_seed_results(saved)).strip().splitlines()
    seed0, seed1, seed2 = rows[2:5]
    assert seed0.count("**") == 8  # both accuracies and both p values
    assert "-> 28.5% " in seed1 and "(**p = 1e-07**; +20.5)" in seed1  # short of +30
    assert "-> **28.5%**" in seed1  # lenient +15 clears +10
    assert "(p = 0.02; +34.5)" in seed2 and "-> 41.5% " in seed2  # p too large
    # seeds 0 and 1 gain with p < 0.01 in both grades; only seed 0 clears both bars
    assert rows[-1].startswith("2 of 3 seeds gain in exact and lenient accuracy")
    assert "; 1 of 3 clear both bars" in rows[-1]
    assert "2 of 3 ran within 15 minutes" in rows[-1]


def test_cpu_grpo_demo_table_refuses_what_it_cannot_read(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps([{"concurrency": 16, "seconds": 1.0}]))
    not_json = tmp_path / "notes.md"
    not_json.write_text("# not JSON")
    saved = tmp_path / "seed0.json"  # one seed's file is a table of one row
    saved.write_text(
        json.dumps(_seed_numbers(0, (0.07, 0.5, 1e-20), (0.11, 0.5, 1e-16), 12.0))
    )
    with pytest.raises(FileNotFoundError):
        facts.load_seed_results(tmp_path / "missing.json")
    with pytest.raises(ValueError):
        facts.load_seed_results(not_json)
    with pytest.raises((ValueError, TypeError), match="a seed without seed, summary"):
        facts.load_seed_results(other)
    # the bench says so, and refuses other options beside --table
    done = run_bench("cpu_grpo_demo", "--table", str(other), check=False)
    assert done.returncode == 2 and "cannot read it as this bench's JSON" in done.stderr
    done = run_bench(
        "cpu_grpo_demo", "--table", str(saved), "--seeds", "1", check=False
    )
    assert done.returncode == 2 and "takes no other option" in done.stderr
    assert (
        "; 1 of 1 clear both bars"
        in run_bench("cpu_grpo_demo", f"--table={saved}").stdout
    )


def test_paired_runs_counts_flips_and_refuses_other_questions(tmp_path):
    worked = ROOT / "bench/results/worked-final"
    seed12 = worked / "notebook-seed12"
    same, out = bench_json(
        "paired_runs", tmp_path, "--a", str(seed12), "--b", str(seed12)
    )
    assert same["exact"] == {"a_only": 0, "b_only": 0, "p": 1.0}
    assert out.strip().splitlines()[-1].startswith("RESULT exact")
    with pytest.raises(ValueError, match="same questions"):  # seed 16's differ
        recorded_runs.paired_flips([seed12], [worked / "notebook-seed16"])
    with pytest.raises(ValueError, match="as many --a runs"):
        recorded_runs.paired_flips([seed12], [])
    # the trained model against the base model of the same run: the flips are the
    # run's own McNemar counts
    (tmp_path / "eval_trained.jsonl").write_text(
        (seed12 / "eval_base.jsonl").read_text()
    )
    flips = recorded_runs.paired_flips([seed12], [tmp_path])
    summary = json.loads((worked / "cpu_grpo_demo-notebook-seed12.json").read_text())
    for grade in ("exact", "lenient"):
        assert flips[grade]["a_only"] == summary["summary"][grade]["wrong_to_right"]
        assert flips[grade]["b_only"] == summary["summary"][grade]["right_to_wrong"]
        assert flips[grade]["p"] == pytest.approx(summary["summary"][grade]["p_value"])
