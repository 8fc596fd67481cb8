"""The benches stay out of the test suite, but must not rot: each runs once in its
smoke mode on tiny-random (a few seconds each). Their numbers are not checked here:
timing claims come from the benches themselves, run on a quiet machine."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from benches import load_bench

ROOT = Path(__file__).resolve().parent.parent


def test_step_time_quick_runs_and_prints_its_result_line(capsys):
    result = load_bench("step_time").main(["--quick"])
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert last.startswith("RESULT training ") and "floor-decoding" in last
    for key in ("ratio_training", "ratio_sampling", "ratio_step", "floor_training"):
        assert math.isfinite(result[key]) and result[key] > 0


def test_group_shape_time_quick_runs_both_shapes_and_prints_its_result_line(capsys):
    result = load_bench("group_shape_time").main(["--quick"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("RESULT step-sampling ") and "decoding-step" in last
    for key in ("ratio_step", "ratio_decoding_step"):
        assert math.isfinite(result[key]) and result[key] > 0


def test_sampling_paths_quick_compares_both_ways(capsys):
    bench = load_bench("sampling_paths")
    result = bench.main(["--quick"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("RESULT without ") and " same " in last
    assert math.isfinite(result["ratio"]) and result["ratio"] > 0
    # every completion the same both ways, as the README says of the full run
    assert result["same"] == result["total"] == 16


def test_eval_speed_runs_both_paths_and_compares_them(capsys):
    from grpo_helpers.local import counters

    with counters.counting() as seen:
        rows = load_bench("eval_speed").main(
            ["--model", "tiny-random", "--n", "6", "--max-tokens", "4"]
            + ["--concurrency", "2", "6"]
        )
    # both paths really ran: prompts sharing the few-shot start prefilled it once
    assert seen["sampling_shared_prefills"] > 0 and seen["sampling_plain_prefills"] > 0
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


def test_eval_speed_says_how_many_questions_the_split_has(capsys):
    with pytest.raises(SystemExit):
        load_bench("eval_speed").main(["--model", "tiny-random", "--n", "10000000"])
    err = capsys.readouterr().err
    assert "--n 10000000" in err and "held-out split has" in err


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


def test_cpu_grpo_demo_table_bolds_only_what_clears_the_bar(tmp_path, capsys):
    results = [
        _seed_numbers(0, (0.07, 0.50, 1e-20), (0.11, 0.50, 1e-16), 12.4),
        _seed_numbers(1, (0.08, 0.285, 1e-7), (0.135, 0.285, 4e-4), 16.0),
        _seed_numbers(2, (0.07, 0.415, 0.02), (0.11, 0.55, 1e-20), 14.5),
    ]
    saved = tmp_path / "results.json"
    saved.write_text(json.dumps(results))
    load_bench("cpu_grpo_demo").main(["--table", str(saved)])
    rows = capsys.readouterr().out.strip().splitlines()
    seed0, seed1, seed2 = rows[2:5]
    assert seed0.count("**") == 8  # both accuracies and both p values
    assert "-> 28.5% " in seed1 and "(**p = 1e-07**; +20.5)" in seed1  # short of +30
    assert "-> **28.5%**" in seed1  # lenient +15 clears +10
    assert "(p = 0.02; +34.5)" in seed2 and "-> 41.5% " in seed2  # p too large
    # seeds 0 and 1 gain with p < 0.01 in both grades; only seed 0 clears both bars
    assert rows[-1].startswith("2 of 3 seeds gain in exact and lenient accuracy")
    assert "; 1 of 3 clear both bars" in rows[-1]
    assert "2 of 3 ran within 15 minutes" in rows[-1]


def test_cpu_grpo_demo_table_refuses_what_it_cannot_read(tmp_path, capsys):
    bench = load_bench("cpu_grpo_demo")
    other = tmp_path / "other.json"
    other.write_text(json.dumps([{"concurrency": 16, "seconds": 1.0}]))
    not_json = tmp_path / "notes.md"
    not_json.write_text("# not JSON")
    saved = tmp_path / "seed0.json"  # one seed's file is a table of one row
    saved.write_text(
        json.dumps(_seed_numbers(0, (0.07, 0.5, 1e-20), (0.11, 0.5, 1e-16), 12.0))
    )
    for argv, message in (
        (["--table", str(tmp_path / "missing.json")], "No such file"),
        (["--table", str(not_json)], "cannot read it as this bench's JSON"),
        (["--table", str(other)], "a seed without seed, summary"),
        (["--table", str(saved), "--seeds", "1"], "takes no other option"),
    ):
        with pytest.raises(SystemExit):
            bench.main(argv)
        assert message in capsys.readouterr().err, argv
    bench.main([f"--table={saved}"])
    assert "; 1 of 1 clear both bars" in capsys.readouterr().out


def test_paired_runs_counts_flips_and_refuses_other_questions(tmp_path, capsys):
    bench = load_bench("paired_runs")
    worked = ROOT / "bench/results/worked-final"
    seed12 = worked / "notebook-seed12"
    same = bench.main(["--a", str(seed12), "--b", str(seed12)])
    assert same["exact"] == {"a_only": 0, "b_only": 0, "p": 1.0}
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("RESULT exact")
    with pytest.raises(ValueError, match="same questions"):  # seed 16's differ
        bench.compare([seed12], [worked / "notebook-seed16"])
    with pytest.raises(ValueError, match="as many --a runs"):
        bench.compare([seed12], [])
    # the trained model against the base model of the same run: the flips are the
    # run's own McNemar counts
    (tmp_path / "eval_trained.jsonl").write_text(
        (seed12 / "eval_base.jsonl").read_text()
    )
    flips = bench.compare([seed12], [tmp_path])
    summary = json.loads((worked / "cpu_grpo_demo-notebook-seed12.json").read_text())
    for grade in ("exact", "lenient"):
        assert flips[grade]["a_only"] == summary["summary"][grade]["wrong_to_right"]
        assert flips[grade]["b_only"] == summary["summary"][grade]["right_to_wrong"]
        assert flips[grade]["p"] == pytest.approx(summary["summary"][grade]["p_value"])
