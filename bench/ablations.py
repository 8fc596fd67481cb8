"""Record notebook 08's ablation: every variant of the GRPO objective, three seeds.

Each (variant, seed) trains SmolLM2 on arithmetic problems for a few minutes
(``grpo_helpers.ablation.BASELINE``), scores it on held-out problems halfway and at
the end, and writes ``data/reference_runs/ablation/<variant>-seed<k>.json``. The
script is resumable: a (variant, seed) whose file exists is skipped, and an
interrupted one continues from its last checkpoint. Notebook 08 plots the files.

Run::

    python bench/ablations.py                      # all variants, seeds 0 1 2
    python bench/ablations.py --variants baseline "ppo, mu=2" --seeds 0
    python bench/ablations.py --quick              # tiny-random smoke run (seconds)

It prints one line per run and ends with the table notebook 08 shows.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grpo_helpers import ablation  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", nargs="+", default=list(ablation.VARIANTS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default=str(ablation.ABLATION_DIR))
    p.add_argument("--quick", action="store_true", help="tiny-random, 2 steps")
    args = p.parse_args(argv)
    base = ablation.BASELINE
    out = Path(args.out)
    run_root = None  # grpo_helpers' default: runs/ablation
    if args.quick:
        # A smoke run keeps its files apart: the full ablation never resumes from
        # a tiny-random checkpoint (it would refuse: the configs differ).
        base = replace(base, base_model="tiny-random", steps=2, max_tokens=8)
        out = run_root = ROOT / "runs" / "ablation-quick"
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
            )
            points = ", ".join(
                f"step {h['step']} {h['exact']:.0%}" for h in record["held_out"]
            )
            print(
                f"{variant} seed {seed}: held-out exact {points}; "
                f"{record['seconds'] / 60:.1f} min",
                flush=True,
            )
    print(f"total {(time.time() - started) / 60:.1f} min")
    print(ablation.final_table(ablation.load_results(out)).to_string(index=False))


if __name__ == "__main__":
    main()
