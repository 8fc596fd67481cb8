"""Draw the README's figure: notebook 05's recorded run over the band of its
recorded final-split seeds, as notebook 05's live plot draws a learner's run.

Run::

    python bench/readme_figure.py      # writes docs/images/notebook05-seeds.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt

from grpo_helpers import plotting
from grpo_helpers.results import recorded_runs

OUT = (
    Path(__file__).resolve().parent.parent / "docs" / "images" / "notebook05-seeds.png"
)


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    recorded = recorded_runs.load_run()
    band = recorded_runs.load_band()
    axes = plotting.plot_run_curves(
        {"recorded run (seed 0)": recorded.metrics},
        band=("recorded seeds", band),
    )
    seeds = ", ".join(map(str, sorted(band["seed"].unique())))
    plotting.add_caption(
        axes[0].figure,
        f"notebook 05's defaults on SmolLM2 (2 CPU cores); grey: the range of seeds "
        f"{seeds}; python bench/readme_figure.py",
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    axes[0].figure.savefig(args.out, dpi=80)
    plt.close(axes[0].figure)
    print(f"wrote {args.out}")
    return args.out


if __name__ == "__main__":
    main()
