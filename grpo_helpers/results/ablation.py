"""What the knobs do: GRPO runs that differ in one setting, judged across seeds.

The knobs notebook compares the series' baseline, notebook 05's defaults exactly
(:data:`grpo_helpers.presets.NOTEBOOK`), with variants of the full GRPO objective:
std-scaled advantages, a KL penalty to the base model, PPO's clipped ratio with two
updates per batch, two length normalisations, and another reward. Each run trains
SmolLM2 for 30 steps of the sync loop on the arithmetic problems and is scored on
100 problems of the final test split before and after training.
``bench/ablations.py`` runs every variant for every seed and records the results
under ``data/reference_runs/ablation/``, one small JSON file per run.

Between two trained configurations the unit is the seed: two runs of the *same*
configuration can end 20 points apart on the same questions (:data:`NOISE_PAIR`),
so a per-question test between two trained models measures training noise as much
as the knob. :func:`seed_level` pairs each variant with the baseline seed by seed
and gives the mean difference with an interval over seeds; :func:`verdicts` words
it, claiming a direction only where that interval excludes zero.

A run is resumable at two levels: a finished (variant, seed) is never run again,
and an interrupted one continues from its last checkpoint (the run directory).

The module stays whole (about 640 lines): recording a variant, reading the records
and judging them across seeds are one path, and each reading names the record
fields the recording writes.

Introduced in: 09_what_the_knobs_do.ipynb
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from grpo_helpers import data, presets, provenance, training
from grpo_helpers.config import GRPOConfig
from grpo_helpers.results import answers, evaluation, recorded_runs, stats
from grpo_helpers.rewards import canonical_reward
from grpo_helpers.settings import SETTINGS, SMOLLM2

#: Where the recorded ablation lives.
ABLATION_DIR = recorded_runs.REFERENCE_DIR / "ablation"

#: The recorded ablation's seeds: five per variant, the last two chosen where no
#: other run had been (``python bench/ablations.py`` records them all).
SEEDS = (0, 1, 2, 24, 25)

#: The KL variant's weight: large enough that its KL to the base model stays
#: visibly below the baseline's (notebook 09 plots both).
KL_BETA = 0.2
#: The reward the reward variant trains on instead of the baseline's.
OTHER_REWARD = "binary" if presets.NOTEBOOK["reward"] != "binary" else "shaped"

#: GSPO's clip range on the sequence ratio (arXiv 2507.18071, section 5.1: 3e-4 and
#: 4e-4 either side of 1).
GSPO_CLIP = (1 - 3e-4, 1 + 4e-4)

#: A step with the bfloat16 sampler over one with the float32 sampler, in seconds
#: (``python bench/step_time.py`` on SmolLM2, 2 threads, medians of 3: sampling
#: 6.84 s against 8.37 s, training 8.49 s both): (6.84 + 8.49) / (8.37 + 8.49).
BF16_STEP_TIME = (6.84 + 8.49) / (8.37 + 8.49)
#: The steps the bfloat16 sampler makes in the baseline's 30 steps' time.
BF16_EQUAL_TIME_STEPS = round(30 / BF16_STEP_TIME)

#: Each variant changes the baseline in one place (GRPOConfig fields).
VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "std-scaled advantages": {"advantage_scale": "group"},
    f"KL beta={KL_BETA:g}": {"kl_coef": KL_BETA},
    "ppo, mu=2": {"loss_fn": "ppo", "updates_per_batch": 2},
    "sequence-mean": {"normalization": "sequence_mean"},
    "constant (Dr. GRPO)": {"normalization": "constant"},
    f"{OTHER_REWARD.replace('_', '-')} reward": {"reward": OTHER_REWARD},
    "tempered loss (TRL)": {"train_temperature": "sampling"},
    "dynamic sampling (DAPO)": {"dynamic_sampling": 3},
    # When the sampler is not the trainer (notebook 11): the ratio divides by the
    # behaviour policy's logprobs (pi_T at T = 0.6, what drew each token), and
    # GSPO's sequence ratio with its paper's clip range over two updates a batch.
    "behaviour logprobs": {"sampler_logprobs": "behaviour"},
    "GSPO": {
        "loss_fn": "ppo",
        "updates_per_batch": 2,
        "ratio_level": "sequence",
        "normalization": "sequence_mean",
        "clip_low": GSPO_CLIP[0],
        "clip_high": GSPO_CLIP[1],
    },
    # CISPO (MiniMax-M1): the ratio clipped and held as a weight (stop-gradient),
    # so a clipped token still teaches; over two updates a batch, where the ratio
    # leaves 1, beside notebook 09's "ppo, mu=2" whose clip drops those tokens.
    "CISPO, mu=2": {"loss_fn": "cispo", "updates_per_batch": 2},
    # A faster sampler that is another policy: bfloat16 products, without and with
    # a truncated importance weight (TIS, C = 3) for its gap.
    "bfloat16 sampler": {"sampler_precision": "bfloat16"},
    "bfloat16 sampler + TIS": {
        "sampler_precision": "bfloat16",
        "is_correction": "token_truncate",
    },
    # The bfloat16 sampler at the baseline's wall time: its steps take
    # BF16_STEP_TIME of the float32 sampler's (bench/step_time.py), so the
    # baseline's 30 steps buy it BF16_EQUAL_TIME_STEPS.
    "bfloat16 sampler, equal time": {
        "sampler_precision": "bfloat16",
        "steps": BF16_EQUAL_TIME_STEPS,
    },
}

#: The variants of notebook 11 (when the sampler is not the trainer); notebook 09
#: judges the others.
SAMPLER_VARIANTS = (
    "behaviour logprobs",
    "GSPO",
    "bfloat16 sampler",
    "bfloat16 sampler + TIS",
    "CISPO, mu=2",
    "bfloat16 sampler, equal time",
)

#: Variants of earlier ablations left out, and why.
DROPPED = {
    "token-mean (DAPO)": (
        "not in the list of variants this ablation was asked for, and three more "
        "30-step runs; within a group it weighs every token alike, as the token sum "
        "and constant (Dr. GRPO) do, and differs from constant only by weighting "
        "each group by max_tokens / (its total tokens): notebook 09's section 2 "
        "shows those weights"
    ),
}

#: The baseline: notebook 05's defaults exactly, with the KL to the base model
#: measured (it changes no update) and a checkpoint every step (resumable).
BASELINE = GRPOConfig(
    base_model=SMOLLM2,
    backend="local",
    **presets.NOTEBOOK,
    measure_kl=True,
    save_every=1,
)
#: Held-out problems scored before and after training (greedy), from the final
#: test split, as notebook 07 scores a run.
EVAL_SPLIT = presets.NOTEBOOK_EVAL["split"]
EVAL_QUESTIONS = presets.NOTEBOOK_EVAL["eval_questions"]
EVAL_MAX_TOKENS = presets.NOTEBOOK_EVAL["eval_max_tokens"]


def slug(variant: str) -> str:
    """A file-name-safe form of a variant's name."""
    return "".join(c if c.isalnum() else "-" for c in variant.lower()).strip("-")


def variant_config(
    variant: str,
    seed: int,
    base: GRPOConfig = BASELINE,
    run_root: Path | None = None,
) -> GRPOConfig:
    """The configuration of one (variant, seed) run.

    Args:
        run_root: where its run directory goes (default ``runs/ablation``).

    Raises:
        KeyError: unknown variant; the message lists the known ones.
    """
    if variant not in VARIANTS:
        raise KeyError(
            f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}"
        )
    name = f"ablation-{slug(variant)}-seed{seed}"
    return replace(
        base,
        **VARIANTS[variant],
        seed=seed,
        weights_name=name,
        run_dir=str((run_root or SETTINGS.runs_dir / "ablation") / name),
    )


def _evaluate(
    service: Any,
    config: GRPOConfig,
    weights: str | None,
    base_cache: dict[tuple[Any, ...], pd.DataFrame] | None = None,
    questions: int = EVAL_QUESTIONS,
    max_tokens: int = EVAL_MAX_TOKENS,
    reuse: evaluation.RecordedAnswers | None = None,
) -> pd.DataFrame:
    """Greedy records on the held-out questions. The base model's (``weights``
    None) are kept in ``base_cache``: every variant of a seed is scored on the same
    questions, so the base model answers them once per seed. ``reuse``: the base
    model's recorded answers, read when they fit (``evaluation.evaluate``)."""
    key = (config.model_name, config.seed, config.difficulty, questions, max_tokens)
    if weights is None and base_cache is not None and key in base_cache:
        return base_cache[key]
    held_out = data.load_split(config, EVAL_SPLIT).select(range(questions))
    sampler = service.create_sampling_client(
        base_model=config.model_name, model_path=weights
    )
    result = evaluation.evaluate(
        sampler,
        sampler.get_tokenizer(),
        held_out,
        temperature=0.0,
        max_tokens=max_tokens,
        concurrency=64,
        progress=False,
        name="base" if weights is None else "trained",
        reuse=reuse,
    )
    if weights is None and base_cache is not None:
        base_cache[key] = result.records
    return result.records


def _held_out_point(step: int, records: pd.DataFrame) -> dict[str, Any]:
    return {
        "step": step,
        "exact": float(records["exact"].mean()),
        "lenient": float(records["lenient"].mean()),
        "exact_by_question": [bool(x) for x in records["exact"]],
        "lenient_by_question": [bool(x) for x in records["lenient"]],
        "classes": answers.classify_records(records).tolist(),
    }


def _budget_point(
    config: GRPOConfig,
    base: GRPOConfig,
    service: Any,
    on_step: Callable[[pd.DataFrame], None] | None,
    scoring: dict[str, Any],
) -> dict[str, Any]:
    """Train a run that samples more per step (dynamic sampling) one step at a
    time (a resume per step: ``steps`` may change on resume) until it has sampled
    as many completions as the baseline's whole run, and score it there: the
    variant at the baseline's sampling budget, which on this CPU is most of its
    time (notebook 05: sampling is most of a step)."""
    budget = base.steps * base.batch_size * base.group_size
    for steps in range(1, config.steps + 1):
        result = training.train_sync(
            replace(config, steps=steps),
            service,
            resume=True,
            overwrite=True,
            progress=False,
            on_step=on_step,
        )
        if len(result.metrics) != steps:
            raise ValueError(
                f"{config.run_dir} already holds {len(result.metrics)} steps: the "
                "budget point is scored on the way, step by step; remove the run "
                "directory and run this variant again"
            )
        sampled = int(result.metrics["groups_sampled"].sum()) * config.group_size
        if sampled >= budget:
            break
    records = _evaluate(service, config, result.weights_path, **scoring)
    return {**_held_out_point(steps, records), "samples": sampled, "budget": budget}


def run_variant(
    variant: str,
    seed: int,
    *,
    base: GRPOConfig = BASELINE,
    out_dir: Path | None = None,
    run_root: Path | None = None,
    service: Any = None,
    on_step: Callable[[pd.DataFrame], None] | None = None,
    base_cache: dict[tuple[Any, ...], pd.DataFrame] | None = None,
    eval_questions: int = EVAL_QUESTIONS,
    eval_max_tokens: int = EVAL_MAX_TOKENS,
    reuse_base: evaluation.RecordedAnswers | None = None,
) -> dict[str, Any]:
    """Train one variant for one seed with notebook 05's sync loop, and score it
    at step 0 (the base model) and at the end.

    Args:
        variant: a key of :data:`VARIANTS`.
        seed: seeds the LoRA initialisation, the sampling and the data split.
        base: the baseline configuration (notebook 09 shrinks it in fast mode).
        out_dir: where to write ``<variant>-seed<k>.json``; None writes nothing.
        run_root: where the run directory goes (default ``runs/ablation``).
        service: a ServiceClient (default: the local engine, checkpoints in the
            run directory).
        on_step: called with the metrics after each step (live plots).
        base_cache: the base model's records per seed, shared between the runs
            of one ablation (the bench passes one dict to every run).
        eval_questions, eval_max_tokens: the held-out questions scored and the
            tokens per answer (a smoke run scores fewer).
        reuse_base: the base model's recorded answers (``RecordedRun.answers``),
            read at step 0 instead of sampling when they answer the same prompts
            with the same settings (``evaluation.reuse_problem``).

    Returns:
        The run's record: settings, per-step metrics, and at each scored step the
        held-out exact and lenient accuracy, per-question grades and answer
        classes (``answers.classify_records``).
    """
    config = variant_config(variant, seed, base, run_root)
    assert config.run_dir is not None  # variant_config names every run's folder
    if service is None:
        from grpo_helpers.engines import connect

        service = connect(config.backend, run_dir=Path(config.run_dir) / "checkpoints")
    started = time.time()
    scoring: dict[str, Any] = {
        "questions": eval_questions,
        "max_tokens": eval_max_tokens,
    }
    points = [
        _held_out_point(
            0, _evaluate(service, config, None, base_cache, **scoring, reuse=reuse_base)
        )
    ]
    if config.dynamic_sampling > 0:  # also scored where it matched the budget
        points.append(_budget_point(config, base, service, on_step, scoring))
    result = training.train_sync(
        config, service, resume=True, overwrite=True, progress=False, on_step=on_step
    )
    records = _evaluate(service, config, result.weights_path, **scoring)
    points.append(_held_out_point(config.steps, records))
    record = {
        "variant": variant,
        "seed": seed,
        "changes": VARIANTS[variant],
        "settings": recorded_runs.relative_paths(config.to_dict()),
        "eval": {"split": EVAL_SPLIT, **scoring},
        "metrics": json.loads(result.metrics.to_json(orient="records")),
        "held_out": points,
        "seconds": round(time.time() - started, 1),
        "hardware": provenance.hardware(),
        "versions": provenance.versions(),
        "provenance": provenance.record(config.base_model),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{slug(variant)}-seed{seed}.json"
        path.write_text(json.dumps(record, indent=1) + "\n")
    return record


def load_results(directory: Path = ABLATION_DIR) -> list[dict[str, Any]]:
    """Every recorded (variant, seed) run in ``directory``."""
    return [
        json.loads(path.read_text()) for path in sorted(directory.glob("*-seed*.json"))
    ]


def knob_results(directory: Path = ABLATION_DIR) -> list[dict[str, Any]]:
    """The recorded runs notebook 09 judges: the baseline and the objective's knobs
    (every variant but notebook 11's :data:`SAMPLER_VARIANTS`)."""
    return [r for r in load_results(directory) if r["variant"] not in SAMPLER_VARIANTS]


def sampler_results(directory: Path = ABLATION_DIR) -> list[dict[str, Any]]:
    """The recorded runs notebook 11 judges: the baseline and
    :data:`SAMPLER_VARIANTS`."""
    wanted = ("baseline", *SAMPLER_VARIANTS)
    return [r for r in load_results(directory) if r["variant"] in wanted]


def metrics_frame(results: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """All runs' per-step metrics in one frame, with ``variant`` and ``seed``."""
    frames = [
        pd.DataFrame(r["metrics"]).assign(variant=r["variant"], seed=r["seed"])
        for r in results
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def seed_differences(
    results: Sequence[Mapping[str, Any]], grade: str = "exact"
) -> pd.DataFrame:
    """Per variant and seed: the final held-out accuracy of the variant, of the
    baseline of the same seed, and their difference.

    The seed pairs with itself: the same seed gives both runs the same held-out
    questions, the same LoRA initialisation and the same first samples, so the
    difference is the variant's effect on that seed plus the run-to-run noise of
    training. One row per (variant, seed) that has a baseline of the same seed.

    Example:
        >>> runs = [{"variant": v, "seed": 0, "held_out": [{"exact": a}]}
        ...         for v, a in (("baseline", 0.4), ("ppo, mu=2", 0.3))]
        >>> seed_differences(runs).round(2).to_dict("records")
        [{'variant': 'ppo, mu=2', 'seed': 0, 'baseline': 0.4, 'variant_acc': 0.3, \
'difference': -0.1}]
    """
    by_key = {(r["variant"], r["seed"]): r for r in results}
    rows = []
    for variant in VARIANTS:
        if variant == "baseline":
            continue
        for seed in sorted(s for v, s in by_key if v == variant):
            base = by_key.get(("baseline", seed))
            if base is None:
                continue
            mine = by_key[(variant, seed)]["held_out"][-1][grade]
            theirs = base["held_out"][-1][grade]
            rows.append(
                {
                    "variant": variant,
                    "seed": seed,
                    "baseline": float(theirs),
                    "variant_acc": float(mine),
                    "difference": float(mine) - float(theirs),
                }
            )
    columns = ["variant", "seed", "baseline", "variant_acc", "difference"]
    return pd.DataFrame(rows, columns=columns)


def seed_level(
    results: Sequence[Mapping[str, Any]],
    grade: str = "exact",
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Each variant against the baseline, judged across seeds.

    Per variant, from :func:`seed_differences`: the number of seeds, the mean
    difference with its t-interval over the seeds (:func:`stats.t_interval`), how
    many seeds went up, down or tied, the exact sign-flip p
    (:func:`stats.sign_flip_p`), and ``detectable``: the smallest true difference
    that this many seeds would detect 80% of the time at the 5% level
    (:func:`stats.detectable_difference`), given ``noise_sd``, the spread of the
    per-seed differences pooled over every variant (each around its own mean).

    A variant with a single seed has no interval (NaN): one run cannot tell a
    knob from the noise of training.
    """
    diffs = seed_differences(results, grade)
    groups = [g for _, g in diffs.groupby("variant", sort=False)]
    spread = [(len(g) - 1, g["difference"].var(ddof=1)) for g in groups if len(g) > 1]
    dof = sum(d for d, _ in spread)
    noise_sd = math.sqrt(sum(d * v for d, v in spread) / dof) if dof else math.nan
    rows = []
    for g in groups:
        values = g["difference"].to_numpy()
        n = len(values)
        mean, low, high = (
            stats.t_interval(values, confidence)
            if n > 1
            else (float(values[0]), math.nan, math.nan)
        )
        rows.append(
            {
                "variant": g["variant"].iloc[0],
                "seeds": n,
                "seed_list": [int(s) for s in g["seed"]],
                "differences": [float(x) for x in values],
                "mean": mean,
                "ci_low": low,
                "ci_high": high,
                "up": int((values > 0).sum()),
                "down": int((values < 0).sum()),
                "tied": int((values == 0).sum()),
                "sign_p": stats.sign_flip_p(values),
                "noise_sd": noise_sd,
                "detectable": (
                    stats.detectable_difference(noise_sd, n)
                    if n > 1 and noise_sd > 0
                    else math.nan
                ),
            }
        )
    return pd.DataFrame(rows)


def budget_level(
    results: Sequence[Mapping[str, Any]],
    grade: str = "exact",
    confidence: float = 0.95,
) -> pd.DataFrame:
    """The variants that sample more per step (dynamic sampling), judged at the
    baseline's cost: per seed, the variant's held-out accuracy at the step where it
    had sampled as many completions as the baseline's whole run (``run_variant``
    scores it there) minus the baseline's at its end, and how many completions the
    variant sampled over its whole run against the baseline's; the mean difference
    with its t-interval over the seeds, as :func:`seed_level` does.

    Sampling is most of a step's time on this CPU (notebook 05), so equal samples
    stand for equal time here; the runs' wall times, on a shared machine, do not
    compare across sessions.
    """
    by_key = {(r["variant"], r["seed"]): r for r in results}
    rows = []
    for (variant, seed), record in sorted(by_key.items()):
        points = [p for p in record["held_out"] if "budget" in p]
        base = by_key.get(("baseline", seed))
        if not points or base is None:
            continue
        point = points[0]
        sampled = (
            sum(m["groups_sampled"] for m in record["metrics"])
            * record["settings"]["group_size"]
        )
        rows.append(
            {
                "variant": variant,
                "seed": seed,
                "budget_step": point["step"],
                "difference": float(point[grade]) - float(base["held_out"][-1][grade]),
                "samples_ratio": sampled / point["budget"],
            }
        )
    frame = pd.DataFrame(rows)
    out = []
    for variant, group in frame.groupby("variant", sort=False) if len(frame) else []:
        values = group["difference"].to_numpy()
        mean, low, high = (
            stats.t_interval(values, confidence)
            if len(values) > 1
            else (float(values[0]), math.nan, math.nan)
        )
        out.append(
            {
                "variant": variant,
                "seeds": len(values),
                "budget_steps": [int(x) for x in group["budget_step"]],
                "differences": [float(x) for x in values],
                "mean": mean,
                "ci_low": low,
                "ci_high": high,
                "samples_ratio": float(group["samples_ratio"].mean()),
            }
        )
    return pd.DataFrame(out)


def verdict(row: Mapping[str, Any]) -> str:
    """What one row of :func:`seed_level` supports, in words.

    A direction ("higher" or "lower than the baseline") only where the interval
    over seeds excludes zero; otherwise "not distinguishable from the baseline
    with N seeds". The mechanism curves say *how* a knob acts either way.

    Example:
        >>> verdict({"seeds": 5, "ci_low": -0.31, "ci_high": -0.18})
        'lower than the baseline'
        >>> verdict({"seeds": 5, "ci_low": -0.6, "ci_high": 0.2})
        'not distinguishable from the baseline with 5 seeds'
    """
    n = int(row["seeds"])
    low, high = row["ci_low"], row["ci_high"]
    if n > 1 and low > 0:
        return "higher than the baseline"
    if n > 1 and high < 0:
        return "lower than the baseline"
    return f"not distinguishable from the baseline with {n} seed" + (
        "s" if n != 1 else ""
    )


def verdicts(table: pd.DataFrame) -> list[str]:
    """One sentence per variant of :func:`seed_level`: the mean difference in
    points with its interval over seeds, the seeds' signs, and :func:`verdict`.

    Example:
        >>> table = pd.DataFrame([{"variant": "v", "seeds": 5, "mean": -0.25,
        ...     "ci_low": -0.31, "ci_high": -0.18, "up": 0, "down": 5, "tied": 0}])
        >>> verdicts(table)[0]
        'v: -25 points [-31, -18] over 5 seeds (0 up, 5 down): lower than the baseline'
    """
    lines = []
    for row in table.to_dict("records"):
        interval = (
            f" [{100 * row['ci_low']:+.0f}, {100 * row['ci_high']:+.0f}]"
            if row["seeds"] > 1
            else ""
        )
        signs = f"{row['up']} up, {row['down']} down" + (
            f", {row['tied']} tied" if row["tied"] else ""
        )
        seeds = f"{row['seeds']} seed" + ("s" if row["seeds"] != 1 else "")
        lines.append(
            f"{row['variant']}: {100 * row['mean']:+.0f} points{interval} over "
            f"{seeds} ({signs}): {verdict(row)}"
        )
    return lines


def baseline_learning(
    results: Sequence[Mapping[str, Any]], variant: str = "baseline"
) -> pd.DataFrame:
    """Did a variant learn? Per seed, held-out accuracy at step 0 and at the end,
    with McNemar's exact p on the same questions, for both grades: a per-question
    test of *this* trained model against its own base model."""
    rows = []
    for r in sorted(
        (r for r in results if r["variant"] == variant), key=lambda r: r["seed"]
    ):
        first, last = r["held_out"][0], r["held_out"][-1]
        row: dict[str, Any] = {"variant": variant, "seed": r["seed"]}
        for grade in ("exact", "lenient"):
            before = np.asarray(first[f"{grade}_by_question"], dtype=bool)
            after = np.asarray(last[f"{grade}_by_question"], dtype=bool)
            row[f"{grade} before"] = float(before.mean())
            row[f"{grade} after"] = float(after.mean())
            row[f"{grade} p"] = stats.mcnemar_exact_p(
                int(np.sum(after & ~before)), int(np.sum(before & ~after))
            )
        rows.append(row)
    return pd.DataFrame(rows)


#: Two runs of one configuration (the binary reward at notebook 05's settings,
#: seed 1, KL measured), recorded by the ablation bench in two sessions. They are
#: the knobs notebook's lesson: seeds, not questions, are the unit between two
#: trained configurations (``docs/results.md`` says why they parted).
NOISE_PAIR = (
    SETTINGS.project_root / "bench/results/ablation-binary/baseline-seed1.json",
    ABLATION_DIR / "binary-reward-seed1.json",
)


def load_noise_pair() -> tuple[dict[str, Any], dict[str, Any]]:
    """The two records of :data:`NOISE_PAIR`."""
    first, second = (json.loads(Path(p).read_text()) for p in NOISE_PAIR)
    return first, second


def same_settings(first: Mapping[str, Any], second: Mapping[str, Any]) -> list[str]:
    """The settings two records differ in, leaving out where their files went
    (``run_dir``, ``weights_name``); an earlier name of a reward counts as its
    taught name."""
    a, b = dict(first["settings"]), dict(second["settings"])
    for s in (a, b):
        s["reward"] = canonical_reward(s["reward"])
    skip = {"run_dir", "weights_name"}
    return sorted(
        k for k in a.keys() | b.keys() if k not in skip and a.get(k) != b.get(k)
    )


#: What :func:`mechanism_table` summarises per run: the metric, how, and its name.
MECHANISMS = {
    "reward": ("reward_mean", "last"),
    "KL to base (k3)": ("kl_k3", "last"),
    "clip fraction": ("clip_frac", "mean"),
    "entropy": ("entropy", "last"),
    "completion tokens": ("completion_tokens_mean", "last"),
    "degenerate groups": ("frac_degenerate", "mean"),
    "boxed": ("boxed_frac", "last"),
}
#: Steps averaged for a "last" value (one step is noisy: 16 completions).
LAST_STEPS = 5


def mechanism_table(results: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per (variant, seed): each mechanism's value, the mean over the run
    or over its last :data:`LAST_STEPS` steps (:data:`MECHANISMS`)."""
    rows = []
    for r in results:
        metrics = pd.DataFrame(r["metrics"]).sort_values("step")
        row: dict[str, Any] = {"variant": r["variant"], "seed": r["seed"]}
        for name, (column, how) in MECHANISMS.items():
            values = metrics[column] if column in metrics else pd.Series(dtype=float)
            values = values.tail(LAST_STEPS) if how == "last" else values
            row[name] = float(values.mean()) if len(values) else float("nan")
        rows.append(row)
    order = {v: i for i, v in enumerate(VARIANTS)}
    frame = pd.DataFrame(rows)
    return frame.sort_values(
        ["variant", "seed"], key=lambda c: c.map(order) if c.name == "variant" else c
    ).reset_index(drop=True)


__all__ = [
    "ABLATION_DIR",
    "BASELINE",
    "DROPPED",
    "EVAL_MAX_TOKENS",
    "EVAL_QUESTIONS",
    "EVAL_SPLIT",
    "MECHANISMS",
    "NOISE_PAIR",
    "SEEDS",
    "VARIANTS",
    "baseline_learning",
    "load_noise_pair",
    "load_results",
    "mechanism_table",
    "metrics_frame",
    "run_variant",
    "same_settings",
    "seed_differences",
    "seed_level",
    "slug",
    "variant_config",
    "verdict",
    "verdicts",
]
