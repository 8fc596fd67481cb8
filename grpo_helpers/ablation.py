"""What the knobs do: short GRPO runs that differ in one setting, over several seeds.

Notebook 08 compares the series' baseline loop with variants of the full GRPO
objective: std-scaled advantages, a KL penalty to the base model, PPO's clipped
ratio with two updates per batch, two length normalisations, and the shaped reward.
Each variant trains SmolLM2 for a few minutes on the arithmetic problems and is
scored on held-out problems halfway and at the end. ``bench/ablations.py`` runs
every variant for three seeds and records the results under
``data/reference_runs/ablation/``, one small JSON file per run; notebook 08 plots
them and can rerun any one variant.

A run is resumable at two levels: a finished (variant, seed) is never run again,
and an interrupted one continues from its last checkpoint (the run directory).

Introduced in: 08_what_the_knobs_do.ipynb
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_helpers import evaluation, reference, training
from grpo_helpers.config import SETTINGS, GRPOConfig

#: Where the recorded ablation lives.
ABLATION_DIR = reference.REFERENCE_DIR / "ablation"

#: Each variant changes the baseline in one place (GRPOConfig fields).
VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "std-scaled advantages": {"advantage_scale": "group"},
    "KL beta=0.05": {"kl_coef": 0.05},
    "ppo, mu=2": {"loss_fn": "ppo", "updates_per_batch": 2},
    "sequence-mean": {"normalization": "sequence_mean"},
    "token-mean (DAPO)": {"normalization": "token_mean"},
    "binary reward": {"reward": "binary"},
}

#: The baseline: notebook 05's earlier settings (32 tokens, temperature 0.8, the
#: article's shaped reward) for 8 steps; notebook 05 now trains on the right-answer
#: reward with 48 tokens at temperature 0.6. About 4 minutes on 2 CPU cores with
#: the async loop and the KL measurement (``bench/ablations.py`` prints each run's
#: time).
BASELINE = GRPOConfig(
    base_model="HuggingFaceTB/SmolLM2-135M-Instruct",
    backend="local",
    dataset="arithmetic",
    difficulty=1,
    steps=8,
    batch_size=2,
    group_size=8,
    max_tokens=32,
    temperature=0.8,
    learning_rate=2e-4,
    lora_rank=16,
    reward="shaped",
    measure_kl=True,  # every variant logs its KL to the base model
    save_every=1,
)
#: Held-out problems scored after half the steps and at the end (greedy).
EVAL_QUESTIONS = 50
EVAL_MAX_TOKENS = 48


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
        run_dir=str((run_root or SETTINGS.project_root / "runs" / "ablation") / name),
    )


async def _evaluate(
    service: Any,
    config: GRPOConfig,
    weights: str | None,
    base_cache: dict[tuple[str, int, int], pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """Greedy records on the held-out questions. The base model's (``weights``
    None) are kept in ``base_cache``: every variant of a seed is scored on the same
    questions, so the base model answers them once per seed."""
    key = (config.model_name, config.seed, config.difficulty)
    if weights is None and base_cache is not None and key in base_cache:
        return base_cache[key]
    held_out = training.load_split(config, "test").select(range(EVAL_QUESTIONS))
    sampler = service.create_sampling_client(
        base_model=config.model_name, model_path=weights
    )
    result = await evaluation.evaluate_async(
        sampler,
        sampler.get_tokenizer(),
        held_out,
        temperature=0.0,
        max_tokens=EVAL_MAX_TOKENS,
        concurrency=16,
        progress=False,
    )
    if weights is None and base_cache is not None:
        base_cache[key] = result.records
    return result.records


def run_variant(variant: str, seed: int, **kwargs: Any) -> dict[str, Any]:
    """:func:`run_variant_async` from plain code (a script, or a notebook cell that
    does not ``await``)."""
    return evaluation.run_coroutine(run_variant_async(variant, seed, **kwargs))


async def run_variant_async(
    variant: str,
    seed: int,
    *,
    base: GRPOConfig = BASELINE,
    out_dir: Path | None = None,
    run_root: Path | None = None,
    service: Any = None,
    on_step: Callable[[pd.DataFrame], None] | None = None,
    base_cache: dict[tuple[str, int, int], pd.DataFrame] | None = None,
) -> dict[str, Any]:
    """Train one variant for one seed, score it halfway and at the end.

    The async loop (``training.train_async``) samples a step's prompts together. In
    a notebook: ``record = await ablation.run_variant_async(...)``.

    Args:
        variant: a key of :data:`VARIANTS`.
        seed: seeds the LoRA initialisation, the sampling and the data split.
        base: the baseline configuration (notebook 08 shrinks it in fast mode).
        out_dir: where to write ``<variant>-seed<k>.json``; None writes nothing.
        run_root: where the run directory goes (default ``runs/ablation``).
        service: a ServiceClient (default: the local engine, checkpoints in the
            run directory).
        on_step: called with the metrics after each step (live plots).
        base_cache: the base model's records per seed, shared between the runs
            of one ablation (the bench passes one dict to every run).

    Returns:
        The run's record: settings, per-step metrics, and the held-out exact and
        lenient accuracy (with per-question grades) at step 0, halfway and the end.
    """
    config = variant_config(variant, seed, base, run_root)
    if service is None:
        from grpo_helpers.engines import connect

        service = connect(config.backend, run_dir=Path(config.run_dir) / "checkpoints")
    started = time.time()
    points = [(0, await _evaluate(service, config, None, base_cache))]
    half = max(1, config.steps // 2)
    result = None
    for steps in sorted({half, config.steps}):
        result = await training.train_async(
            replace(config, steps=steps),
            service,
            resume=True,
            overwrite=True,
            progress=False,
            on_step=on_step,
        )
        points.append((steps, await _evaluate(service, config, result.weights_path)))
    assert result is not None
    record = {
        "variant": variant,
        "seed": seed,
        "changes": VARIANTS[variant],
        "settings": reference.relative_paths(config.to_dict()),
        "eval": {"questions": EVAL_QUESTIONS, "max_tokens": EVAL_MAX_TOKENS},
        "metrics": json.loads(result.metrics.to_json(orient="records")),
        "held_out": [
            {
                "step": step,
                "exact": float(records["exact"].mean()),
                "lenient": float(records["lenient"].mean()),
                "exact_by_question": [bool(x) for x in records["exact"]],
            }
            for step, records in points
        ],
        "seconds": round(time.time() - started, 1),
        "hardware": reference.hardware(),
        "versions": reference.versions(),
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


def metrics_frame(results: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """All runs' per-step metrics in one frame, with ``variant`` and ``seed``."""
    frames = [
        pd.DataFrame(r["metrics"]).assign(variant=r["variant"], seed=r["seed"])
        for r in results
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def held_out_frame(results: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Held-out accuracy at each scored step, one row per (variant, seed, step)."""
    rows = [
        {"variant": r["variant"], "seed": r["seed"], **{k: p[k] for k in p}}
        for r in results
        for p in r["held_out"]
    ]
    return pd.DataFrame(rows)


def final_table(results: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per variant: final held-out exact accuracy per seed, its mean, and a
    McNemar p-value against the baseline of the same seed (same questions)."""
    by_key = {(r["variant"], r["seed"]): r for r in results}
    rows = []
    for variant in VARIANTS:
        seeds = sorted(s for v, s in by_key if v == variant)
        if not seeds:
            continue
        finals, pvalues = [], []
        for seed in seeds:
            final = by_key[(variant, seed)]["held_out"][-1]
            finals.append(final["exact"])
            other = by_key.get(("baseline", seed))
            if other is None or variant == "baseline":
                pvalues.append(math.nan)
                continue
            mine = final["exact_by_question"]
            theirs = other["held_out"][-1]["exact_by_question"]
            b = sum(m and not t for m, t in zip(mine, theirs, strict=True))
            c = sum(t and not m for m, t in zip(mine, theirs, strict=True))
            pvalues.append(evaluation.mcnemar_exact_p(b, c))
        rows.append(
            {
                "variant": variant,
                "seeds": len(seeds),
                "final exact, per seed": ", ".join(f"{x:.0%}" for x in finals),
                "mean": sum(finals) / len(finals),
                "p vs baseline, per seed": ", ".join(
                    "-" if math.isnan(p) else f"{p:.2g}" for p in pvalues
                ),
            }
        )
    return pd.DataFrame(rows)


__all__ = [
    "ABLATION_DIR",
    "BASELINE",
    "EVAL_MAX_TOKENS",
    "EVAL_QUESTIONS",
    "VARIANTS",
    "final_table",
    "held_out_frame",
    "load_results",
    "metrics_frame",
    "run_variant",
    "run_variant_async",
    "slug",
    "variant_config",
]
