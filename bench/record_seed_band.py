"""Write the band of notebook 05's recorded final-split seeds, for its live plot.

Notebook 05 draws the learner's run over the range of the recorded runs of its own
settings on the final test split (seed 0, the recorded run, and seeds 18-23), so a
learner sees at a glance whether their run is typical. The runs' per-step metrics
live in ``bench/results/worked-v2/notebook-seed<k>/metrics.jsonl``; this script
keeps the columns the live plot draws, one row per (seed, step), in
``data/reference_runs/notebook-seeds.csv`` (small enough to ship with the data the
notebooks read), and prints what it wrote.

Run::

    python bench/record_seed_band.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from grpo_helpers import plotting, run_files
from grpo_helpers.results import recorded_runs

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "bench" / "results" / "worked-v2"
#: The final-split seeds of notebook 05's defaults (the README's seed table).
SEEDS = (0, 18, 19, 20, 21, 22, 23)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", type=Path, default=SOURCE)
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--out", type=Path, default=recorded_runs.SEED_BAND)
    args = p.parse_args(argv)
    columns = ["step", *(column for column, *_ in plotting.RUN_PANELS)]
    frames = []
    for seed in args.seeds:
        metrics = run_files.load_metrics(args.source / f"notebook-seed{seed}")
        frames.append(metrics[columns].assign(seed=seed))
    band = pd.concat(frames, ignore_index=True)[["seed", *columns]]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    band.to_csv(args.out, index=False, float_format="%.6g")
    print(f"{len(args.seeds)} seeds x {band['step'].nunique()} steps -> {args.out}")
    return band


if __name__ == "__main__":
    main()
