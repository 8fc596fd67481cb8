"""Notebook 08's ablation (grpo_helpers.ablation, bench/ablations.py): its baseline is
notebook 05's run, each variant changes what its name says and nothing else, the
smoke run writes what notebook 08 reads, and the pooled paired statistics."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from benches import load_bench

from grpo_helpers import ablation, presets, stats
from grpo_helpers.config import SETTINGS, GRPOConfig

#: What a variant's name promises it changes, by a word of the name.
PROMISES = {
    "std-scaled": {"advantage_scale"},
    "KL": {"kl_coef"},
    "ppo": {"loss_fn", "updates_per_batch"},
    "sequence-mean": {"normalization"},
    "constant": {"normalization"},
    "reward": {"reward"},
}


def _bench():
    return load_bench("ablations")


def test_the_baseline_is_notebook_05s_run():
    for field, value in presets.NOTEBOOK.items():
        assert getattr(ablation.BASELINE, field) == value, field
    assert ablation.BASELINE.base_model == presets.SMOLLM2
    # measuring the KL and checkpointing each step change no update
    defaults = GRPOConfig(backend="local", **presets.NOTEBOOK)
    for field in dataclasses.fields(GRPOConfig):
        if field.name in ("base_model", "measure_kl", "save_every"):
            continue
        assert getattr(ablation.BASELINE, field.name) == getattr(
            defaults, field.name
        ), field.name
    assert ablation.EVAL_SPLIT == "test"


@pytest.mark.parametrize("variant", [v for v in ablation.VARIANTS if v != "baseline"])
def test_each_variant_changes_what_its_name_says(variant):
    config = ablation.variant_config(variant, seed=1)
    base = dataclasses.replace(
        ablation.BASELINE,
        seed=1,
        weights_name=config.weights_name,
        run_dir=config.run_dir,
    )
    changed = {
        f.name
        for f in dataclasses.fields(GRPOConfig)
        if getattr(config, f.name) != getattr(base, f.name)
    }
    promised = set().union(*(v for k, v in PROMISES.items() if k in variant))
    assert changed == promised, (variant, changed)


def test_the_ablation_covers_the_issues_list():
    names = " ".join(ablation.VARIANTS)
    for word in ("std-scaled", "KL", "ppo, mu=2", "sequence-mean", "constant"):
        assert word in names
    assert any("reward" in v for v in ablation.VARIANTS)
    assert set(ablation.DROPPED).isdisjoint(ablation.VARIANTS)


def _record(variant, seed, base_exact, mine_exact):
    """A recorded run whose final exact grades are ``mine_exact``."""
    return {
        "variant": variant,
        "seed": seed,
        "metrics": [],
        "held_out": [
            {
                "step": 0,
                "exact_by_question": base_exact,
                "lenient_by_question": base_exact,
            },
            {
                "step": 30,
                "exact_by_question": mine_exact,
                "lenient_by_question": mine_exact,
            },
        ],
    }


def test_paired_outcomes_pool_the_flips_of_every_seed():
    start = [False] * 10
    results = [
        _record("baseline", 0, start, [True] * 5 + [False] * 5),
        _record("baseline", 1, start, [True] * 2 + [False] * 8),
        _record("ppo, mu=2", 0, start, [True] * 7 + [False] * 3),
        _record("ppo, mu=2", 1, start, [False] * 2 + [True] * 2 + [False] * 6),
    ]
    table = ablation.paired_outcomes(results).set_index("variant")
    row = table.loc["ppo, mu=2"]
    # seed 0: 2 flips to the variant; seed 1: 2 each way
    assert (row["b"], row["c"], row["pairs"], row["seeds"]) == (4, 2, 20, 2)
    assert row["p_value"] == pytest.approx(stats.mcnemar_exact_p(4, 2))
    assert row["difference"] == pytest.approx((9 - 7) / 20)
    assert row["ci_low"] <= row["difference"] <= row["ci_high"]
    (line,) = ablation.verdicts(ablation.paired_outcomes(results))
    assert line.startswith("ppo, mu=2: +10 points")
    assert "on 20 pairs (2 seeds), 4 up and 2 down" in line
    assert line.endswith("cannot tell it from the baseline")
    learning = ablation.baseline_learning(results)
    assert list(learning["exact after"]) == [0.5, 0.2]
    assert learning["exact p"].iloc[0] == pytest.approx(stats.mcnemar_exact_p(5, 0))


def test_only_seeds_whose_baseline_learned_are_read():
    """A seed enters the pooled comparisons only where the baseline learned there
    (both grades up, p < 0.01): seed 1's baseline moves to 3 of 30 (p = 0.25), so
    its runs of every variant are left out; seed 2's baseline got worse."""
    start = [False] * 30
    learned = [True] * 15 + [False] * 15
    results = [
        _record("baseline", 0, start, learned),
        _record("baseline", 1, start, [True] * 3 + [False] * 27),
        _record("baseline", 2, [True] * 15 + [False] * 15, start),
        _record("ppo, mu=2", 0, start, learned),
        _record("ppo, mu=2", 1, start, learned),
    ]
    assert ablation.learned_seeds(results) == [0]
    kept = ablation.on_learned_seeds(results)
    assert [(r["variant"], r["seed"]) for r in kept] == [
        ("baseline", 0),
        ("ppo, mu=2", 0),
    ]
    # a looser bar lets in the seed that moved a little; never the one that fell
    assert ablation.learned_seeds(results, alpha=0.5) == [0, 1]
    assert ablation.learned_seeds([]) == []


@pytest.mark.slow
def test_quick_ablation_writes_what_notebook_08_reads(tmp_path):
    out = tmp_path / "ablation"
    variants = ["baseline", "ppo, mu=2"]
    _bench().main(
        ["--quick", "--seeds", "0", "--variants", *variants, "--out", str(out)]
    )
    results = ablation.load_results(out)
    assert sorted(r["variant"] for r in results) == sorted(variants)
    for record in results:
        assert [p["step"] for p in record["held_out"]] == [0, 2]
        point = record["held_out"][-1]
        n = len(point["exact_by_question"])
        assert n == len(point["lenient_by_question"]) == len(point["classes"]) == 4
        assert record["eval"]["split"] == "test"
        assert json.dumps(record)  # plain JSON, no absolute path
        assert str(SETTINGS.project_root) not in json.dumps(record["settings"])
    # everything notebook 08 draws from the records
    metrics = ablation.metrics_frame(results)
    for column, _ in ablation.MECHANISMS.values():
        assert column in metrics
    assert not ablation.mechanism_table(results).empty
    assert len(ablation.paired_outcomes(results)) == 1
    assert not ablation.held_out_frame(results).empty
    # the clipped variant logs its clip fraction on the steps that updated
    ppo = next(r for r in results if r["variant"] == "ppo, mu=2")
    updated = [m for m in ppo["metrics"] if m["updated"]]
    assert updated and all(np.isfinite(m["clip_frac"]) for m in updated)
