"""Notebook 09's ablation (grpo_helpers.results.ablation, bench/ablations.py): its
baseline is notebook 05's run, each variant changes what its name says and nothing
else, the smoke run writes what notebook 09 reads, and the pooled paired statistics."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from benches import run_bench

from grpo_helpers import presets, rewards
from grpo_helpers.config import GRPOConfig, default_of, knobs
from grpo_helpers.results import ablation, recorded_runs, stats
from grpo_helpers.settings import SETTINGS, SMOLLM2

#: What a variant's name promises it changes, by a word of the name.
PROMISES = {
    "std-scaled": {"advantage_scale"},
    "KL": {"kl_coef"},
    "ppo": {"loss_fn", "updates_per_batch"},
    "sequence-mean": {"normalization"},
    "constant": {"normalization"},
    "reward": {"reward"},
    "tempered": {"train_temperature"},
    "dynamic sampling": {"dynamic_sampling"},
    "behaviour": {"sampler_logprobs"},
    "GSPO": {
        "loss_fn",
        "updates_per_batch",
        "ratio_level",
        "normalization",
        "clip_low",
        "clip_high",
    },
    "bfloat16": {"sampler_precision"},
    "TIS": {"is_correction"},
    "CISPO": {"loss_fn", "updates_per_batch"},
    "equal time": {"steps"},
}


def test_the_baseline_is_notebook_05s_run():
    for field, value in presets.NOTEBOOK.items():
        assert getattr(ablation.BASELINE, field) == value, field
    assert ablation.BASELINE.base_model == SMOLLM2
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


def _final(variant, seed, exact):
    """A recorded run whose final held-out exact accuracy is ``exact``."""
    n = 100
    right = round(exact * n)
    grades = [True] * right + [False] * (n - right)
    record = _record(variant, seed, [False] * n, grades)
    for point in record["held_out"]:
        for grade in ("exact", "lenient"):
            by_question = point[f"{grade}_by_question"]
            point[grade] = sum(by_question) / len(by_question)
    return record


def _ablation(baseline, **variants):
    """Records of a baseline and variants over seeds 0..n-1 (final exact
    accuracies, one per seed)."""
    runs = [_final("baseline", seed, acc) for seed, acc in enumerate(baseline)]
    for variant, accuracies in variants.items():
        runs += [_final(variant, seed, acc) for seed, acc in enumerate(accuracies)]
    return runs


def test_seed_level_interval_matches_a_hand_computation_and_scipy():
    """The mean of the per-seed differences and its 95% t-interval over seeds,
    against the formula by hand and against scipy's t-interval."""
    from scipy import stats as scipy_stats

    baseline = [0.38, 0.47, 0.50, 0.40, 0.45]
    kl = [0.19, 0.16, 0.26, 0.22, 0.25]
    table = ablation.seed_level(_ablation(baseline, **{"KL beta=0.2": kl}))
    row = table.set_index("variant").loc["KL beta=0.2"]
    diffs = [k - b for k, b in zip(kl, baseline, strict=True)]
    assert row["differences"] == pytest.approx(diffs)
    mean = sum(diffs) / 5
    sd = (sum((d - mean) ** 2 for d in diffs) / 4) ** 0.5
    half = 2.7764451051977987 * sd / 5**0.5  # t(0.975, 4 degrees of freedom)
    assert row["mean"] == pytest.approx(mean)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((mean - half, mean + half))
    low, high = scipy_stats.t.interval(0.95, 4, loc=mean, scale=scipy_stats.sem(diffs))
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high))
    assert (row["up"], row["down"], row["tied"], row["seeds"]) == (0, 5, 0, 5)
    assert row["sign_p"] == pytest.approx(2 / 32)  # all five down: 2 of 32 patterns


def test_sign_flip_p_counts_the_sign_patterns():
    assert stats.sign_flip_p([0.1, 0.2, 0.3]) == pytest.approx(2 / 8)
    # +0.3 and -0.1, -0.1: patterns with |mean| >= 0.1/3 are all but (+,-,-)...
    values = [0.3, -0.1, -0.1]
    import itertools

    observed = abs(sum(values) / 3)
    hits = sum(
        abs(sum(s * abs(v) for s, v in zip(signs, values, strict=True)) / 3)
        >= observed - 1e-12
        for signs in itertools.product((1, -1), repeat=3)
    )
    assert stats.sign_flip_p(values) == pytest.approx(hits / 8)


def test_detectable_difference_agrees_with_the_normal_approximation():
    """Many seeds: the exact t-based answer approaches (z_0.975 + z_0.8) sd / sqrt(n);
    few seeds: it is larger (the t distribution's heavier tails)."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8)
    assert stats.detectable_difference(0.1, 200) == pytest.approx(
        z * 0.1 / 200**0.5, rel=0.01
    )
    assert stats.detectable_difference(0.1, 5) > z * 0.1 / 5**0.5
    assert stats.detectable_difference(0.1, 3) > stats.detectable_difference(0.1, 5)
    with pytest.raises(ValueError, match="n >= 2"):
        stats.detectable_difference(0.1, 1)


@pytest.mark.parametrize(
    ("name", "variant", "reading"),
    [
        ("clearly better", [0.55, 0.60, 0.62, 0.58, 0.61], "higher than the baseline"),
        ("clearly worse", [0.20, 0.22, 0.25, 0.18, 0.21], "lower than the baseline"),
        (
            "inside the noise",
            [0.42, 0.44, 0.50, 0.38, 0.47],
            "not distinguishable from the baseline with 5 seeds",
        ),
        (
            "large on one seed only",
            [0.40, 0.45, 0.05, 0.42, 0.44],
            "not distinguishable from the baseline with 5 seeds",
        ),
    ],
)
def test_verdicts_claim_a_direction_only_where_the_seed_interval_excludes_zero(
    name, variant, reading
):
    baseline = [0.40, 0.45, 0.48, 0.41, 0.44]
    results = _ablation(baseline, **{"ppo, mu=2": variant})
    table = ablation.seed_level(results)
    (row,) = table.to_dict("records")
    assert ablation.verdict(row) == reading, name
    (line,) = ablation.verdicts(table)
    assert line.startswith("ppo, mu=2: ") and line.endswith(reading)
    assert f"over 5 seeds ({row['up']} up, {row['down']} down" in line
    excludes_zero = row["ci_low"] > 0 or row["ci_high"] < 0
    assert excludes_zero == ("distinguishable" not in reading)


def test_one_seed_gives_no_interval_and_no_direction():
    results = _ablation([0.40], **{"ppo, mu=2": [0.05]})
    (row,) = ablation.seed_level(results).to_dict("records")
    assert row["seeds"] == 1 and np.isnan(row["ci_low"])
    assert ablation.verdict(row) == "not distinguishable from the baseline with 1 seed"


def test_a_variant_seed_without_its_baseline_is_not_paired():
    results = _ablation([0.40, 0.45], **{"ppo, mu=2": [0.30, 0.35, 0.99]})
    diffs = ablation.seed_differences(results)
    assert list(diffs["seed"]) == [0, 1]  # seed 2 has no baseline


def test_baseline_learning_is_a_per_question_test_of_each_run():
    start = [False] * 10
    results = [
        _record("baseline", 0, start, [True] * 5 + [False] * 5),
        _record("baseline", 1, start, [True] * 2 + [False] * 8),
    ]
    learning = ablation.baseline_learning(results)
    assert list(learning["exact after"]) == [0.5, 0.2]
    assert learning["exact p"].iloc[0] == pytest.approx(stats.mcnemar_exact_p(5, 0))


def test_the_noise_pair_is_one_configuration():
    """The knobs notebook's lesson: two recorded runs with the same settings and
    seed (the reward recorded under two names of the binary reward: none)."""
    first, second = ablation.load_noise_pair()
    assert ablation.same_settings(first, second) == []
    assert first["seed"] == second["seed"] == 1
    assert first["settings"]["reward"] == second["settings"]["reward"] == "binary"


@pytest.mark.slow
def test_quick_ablation_writes_what_the_knobs_notebook_reads(tmp_path):
    out = tmp_path / "ablation"
    variants = ["baseline", "ppo, mu=2", "dynamic sampling (DAPO)"]
    run_bench(
        "ablations",
        "--quick",
        "--seeds",
        "0",
        "--variants",
        *variants,
        "--out",
        str(out),
    )
    results = ablation.load_results(out)
    assert sorted(r["variant"] for r in results) == sorted(variants)
    for record in results:
        steps = [p["step"] for p in record["held_out"]]
        if record["variant"].startswith("dynamic"):  # also at the baseline's budget
            assert steps[0] == 0 and steps[-1] == 2 and len(steps) == 3
            budget = record["held_out"][1]
            assert budget["samples"] >= budget["budget"] == 2 * 2 * 4
        else:
            assert steps == [0, 2]
        point = record["held_out"][-1]
        n = len(point["exact_by_question"])
        assert n == len(point["lenient_by_question"]) == len(point["classes"])
        assert n == presets.FAST_EVAL["eval_questions"]
        assert record["eval"]["split"] == "test"
        # what a reproduction needs: the commit, the numeric path, the model file
        provenance = record["provenance"]
        assert len(provenance["commit"]) == 40 and provenance["dirty"] in (True, False)
        for key in ("torch_threads", "cpu_capability", "blas", "packed_products"):
            assert key in provenance["numeric"], key
        assert provenance["model_file"]["model"] == "tiny-random"
        assert json.dumps(record)  # plain JSON, no absolute path
        assert str(SETTINGS.project_root) not in json.dumps(record["settings"])
    # everything notebook 09 draws from the records
    metrics = ablation.metrics_frame(results)
    for column, _ in ablation.MECHANISMS.values():
        assert column in metrics
    assert not ablation.mechanism_table(results).empty
    assert len(ablation.seed_level(results)) == 2
    budget = ablation.budget_level(results)  # the dynamic variant at equal samples
    assert list(budget["variant"]) == ["dynamic sampling (DAPO)"]
    assert budget["samples_ratio"].iloc[0] >= 1.0
    # every run scored its held-out questions on the way
    assert all(r["held_out"] for r in results)
    # the clipped variant logs its clip fraction on the steps that updated
    ppo = next(r for r in results if r["variant"] == "ppo, mu=2")
    updated = [m for m in ppo["metrics"] if m["updated"]]
    assert updated and all(np.isfinite(m["clip_frac"]) for m in updated)


def test_the_recorded_ablation_is_todays_baseline_with_one_change_per_run():
    """Every recorded (variant, seed) run is today's baseline with its variant's
    change, scored on the same questions as the baseline of its seed; notebook 09
    reads whatever is recorded, and says how many seeds each variant has."""
    results = ablation.load_results()
    seen = {(r["variant"], r["seed"]) for r in results}
    assert seen, "no recorded ablation: run python bench/ablations.py"
    assert {v for v, _ in seen} <= set(ablation.VARIANTS)
    for _, seed in seen:  # a variant is only read against the baseline of its seed
        assert ("baseline", seed) in seen, seed
    # the bench's default seeds are the recorded ones: its command reproduces them
    assert {seed for _, seed in seen} == set(ablation.SEEDS)
    skip = {"run_dir", "weights_name"}
    for record in results:
        expected = recorded_runs.relative_paths(
            ablation.variant_config(record["variant"], record["seed"]).to_dict()
        )
        settings = dict(record["settings"])  # an earlier name of the same reward
        settings["reward"] = rewards.canonical_reward(settings["reward"])
        # a knob added after a run was recorded: that run had its default
        settings = {
            f.name: default_of(f) for f in knobs() if f.name not in settings
        } | settings
        differ = {k for k in expected.keys() - skip if settings.get(k) != expected[k]}
        assert not differ, (record["variant"], record["seed"], differ)
        assert record["changes"] == ablation.VARIANTS[record["variant"]]
        assert [p["step"] for p in record["held_out"]][0] == 0
        assert len(record["held_out"][-1]["exact_by_question"]) == (
            ablation.EVAL_QUESTIONS
        )
        assert record["eval"]["split"] == ablation.EVAL_SPLIT
        assert record["metrics"] and "kl_k3" in record["metrics"][0]
        steps = ablation.variant_config(record["variant"], record["seed"]).steps
        assert [m["step"] for m in record["metrics"]] == list(range(steps))
        assert record["held_out"][-1]["step"] == steps
        for point in record["held_out"]:
            for grade in ("exact", "lenient"):
                by_question = point[f"{grade}_by_question"]
                assert point[grade] == pytest.approx(
                    sum(by_question) / len(by_question)
                )
        # the same base model on the same questions: step 0 is one record per seed
        base = next(
            r
            for r in results
            if r["variant"] == "baseline" and r["seed"] == record["seed"]
        )
        assert record["held_out"][0]["classes"] == base["held_out"][0]["classes"]
    table = ablation.seed_level(results)
    assert list(table["variant"]) == [
        v for v in ablation.VARIANTS if v in table["variant"].values and v != "baseline"
    ]
    # small enough to ship: about 42 kB per run (its per-step metrics and the
    # per-question grades; a dynamic-sampling run has a third scored point); the
    # 15 variants x 5 seeds are about 3.3 MB
    size = sum(p.stat().st_size for p in ablation.ABLATION_DIR.iterdir())
    assert size / len(results) < 45_000 and size < 3_600_000
