"""Record notebook 09's ablation: every variant of the GRPO objective, five seeds.

Each (variant, seed) is notebook 05's run (``grpo_helpers.results.ablation.BASELINE``:
30 sync steps of SmolLM2 on the arithmetic problems) with one change, scored on 100
problems of the final test split before and after training, and written to
``data/reference_runs/ablation/<variant>-seed<k>.json``. The script is resumable: a
(variant, seed) whose file exists is skipped, and an interrupted one continues from
its last checkpoint (its run directory under ``runs/ablation/``). Notebook 09 plots
the files and tests each variant against the baseline.

Run::

    python bench/ablations.py                      # all variants, seeds 0 1 2 24 25
    python bench/ablations.py --variants baseline "ppo, mu=2" --seeds 0
    python bench/ablations.py --quick              # tiny-random smoke run (seconds)

Two processes with disjoint ``--variants`` (or ``--seeds``) can share the work on
two cores (``OMP_NUM_THREADS=1`` each). It prints one line per run, the total time,
whether the baseline learned on every seed, and each variant against the baseline.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import common

from grpo_helpers import presets
from grpo_helpers.results import ablation


def main(argv: list[str] | None = None) -> list[dict]:
    p = common.parser(
        __doc__, model=False, quick="tiny-random, 2 steps (fast mode's run)"
    )
    p.add_argument("--variants", nargs="+", default=list(ablation.VARIANTS))
    p.add_argument("--seeds", type=int, nargs="+", default=list(ablation.SEEDS))
    p.add_argument(
        "--out",
        default=None,
        help="where the JSON files go (default data/reference_runs/ablation, or "
        "runs/ablation-quick with --quick); run directories go beside them",
    )
    args = p.parse_args(argv)
    unknown = [v for v in args.variants if v not in ablation.VARIANTS]
    if unknown:
        p.error(
            f"unknown variant(s) {', '.join(map(repr, unknown))}; choose from "
            + ", ".join(map(repr, ablation.VARIANTS))
        )
    base = ablation.BASELINE
    out = Path(args.out) if args.out else ablation.ABLATION_DIR
    run_root = None if not args.out else out / "runs"  # default: runs/ablation
    scoring = {}
    if args.quick:
        # A smoke run keeps its files apart: the full ablation never resumes from
        # a tiny-random checkpoint (it would refuse: the configs differ).
        base = replace(base, **presets.FAST_NOTEBOOK)
        if not args.out:
            out = run_root = common.ROOT / "runs" / "ablation-quick"
        scoring = {
            key: presets.FAST_EVAL[key] for key in ("eval_questions", "eval_max_tokens")
        }
    started = time.time()
    base_cache: dict = {}  # the base model answers each seed's questions once
    for variant in args.variants:
        for seed in args.seeds:
            path = out / f"{ablation.slug(variant)}-seed{seed}.json"
            if path.exists():
                print(f"{variant} seed {seed}: recorded already ({path.name})")
                continue
            record = ablation.run_variant(
                variant,
                seed,
                base=base,
                out_dir=out,
                run_root=run_root,
                base_cache=base_cache,
                **scoring,
            )
            points = ", ".join(
                f"step {h['step']} {h['exact']:.0%}" for h in record["held_out"]
            )
            print(
                f"{variant} seed {seed}: held-out exact {points}; "
                f"{record['seconds'] / 60:.1f} min",
                flush=True,
            )
    print(f"total {(time.time() - started) / 60:.1f} min (this process)")
    results = ablation.load_results(out)
    runs = sum(r["seconds"] for r in results) / 60
    print(f"{len(results)} runs recorded, {runs:.0f} min of runs in all")
    print(ablation.baseline_learning(results).round(3).to_string(index=False))
    for grade in ("exact", "lenient"):
        print(f"each variant against the baseline, {grade}, across seeds:")
        table = ablation.seed_level(results, grade)
        print(table.round(3).to_string(index=False))
    budget = ablation.budget_level(results)
    if len(budget):
        print(
            "at the baseline's sampling budget (the step where a variant had "
            "sampled the baseline's completions), exact, across seeds:"
        )
        print(budget.round(3).to_string(index=False))
    return common.write_json(args, results)


if __name__ == "__main__":
    main()
