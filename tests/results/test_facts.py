"""grpo_helpers.results.facts: the seed tables the README and the results page are
built from, and what they refuse to read."""

from __future__ import annotations

import json

import pytest
from benches import run_bench

from grpo_helpers.results import facts


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


def test_the_gradient_norm_ratio_is_each_variants_over_the_baselines():
    """The recorded ablation's "gradient norm / baseline's" of every variant: the
    range of its step's gradient norm divided by the baseline's of the same seed
    and step, recomputed here from the records' metrics."""
    import pandas as pd

    from grpo_helpers.results import ablation

    recorded = ablation.knob_results()
    printed = facts.ablation_facts()
    norms = pd.concat(
        pd.DataFrame(r["metrics"])[["step", "grad_norm"]].assign(
            variant=r["variant"], seed=r["seed"]
        )
        for r in recorded
    ).rename(columns={"grad_norm": "norm"})
    base = norms[norms["variant"] == "baseline"].drop(columns="variant")
    paired = norms[norms["variant"] != "baseline"].merge(
        base, on=["seed", "step"], suffixes=("", "_baseline")
    )
    paired["ratio"] = paired["norm"] / paired["norm_baseline"]
    checked = 0
    for variant, rows in paired.groupby("variant"):
        said = printed[f"{variant}: gradient norm / baseline's"]
        assert said == f"{rows['ratio'].min():.4f} to {rows['ratio'].max():.4f}"
        checked += 1
    assert checked == len(set(norms["variant"])) - 1 > 0


def test_sampler_facts_judge_notebook_11s_variants_apart_from_the_knobs(tmp_path):
    """Notebook 11's variants are judged against the baseline of the same seed,
    as the knobs are, and stay out of notebook 09's facts (and it of theirs)."""
    import json

    from grpo_helpers.results import ablation, facts

    def record(variant, seed, exact):
        return {"variant": variant, "seed": seed, "held_out": [{"exact": exact}]}

    runs = [record("baseline", s, 0.4) for s in (0, 1)]
    runs += [record("GSPO", 0, 0.5), record("GSPO", 1, 0.3)]
    runs += [record("KL beta=0.2", s, 0.2) for s in (0, 1)]
    for r in runs:
        name = f"{ablation.slug(r['variant'])}-seed{r['seed']}.json"
        (tmp_path / name).write_text(json.dumps(r))
    assert facts.sampler_facts(tmp_path / "none") == {}
    assert {r["variant"] for r in ablation.sampler_results(tmp_path)} == {
        "baseline",
        "GSPO",
    }
    assert "GSPO" not in {r["variant"] for r in ablation.knob_results(tmp_path)}
    table = ablation.seed_level(ablation.sampler_results(tmp_path), "exact")
    assert table["variant"].tolist() == ["GSPO"]
    assert table.iloc[0]["differences"] == pytest.approx([0.1, -0.1])
