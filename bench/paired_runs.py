"""Two sets of runs on the same held-out questions, compared question by question.

Each run directory holds the trained model's graded answers (``eval_trained.jsonl``,
as ``bench/cpu_grpo_demo.py`` copies them). Runs are paired in the order given (for
example the same seed under two rewards); a pair must have scored the same
questions. For each pair and pooled over all, it prints how many questions only A
got right, how many only B, and McNemar's exact p-value, for the exact and the
lenient grade::

    python bench/paired_runs.py \\
        --a bench/results/worked-final/notebook-seed{12,13} \\
        --b bench/results/notebook-final/notebook-seed{12,13}

The last line is for a script to read (pooled, exact grade)::

    RESULT exact a-only <n> b-only <n> p <p>
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import common

from grpo_helpers.results import recorded_runs


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = common.parser(__doc__, model=False)
    p.add_argument("--a", nargs="+", type=Path, required=True, help="run dirs")
    p.add_argument("--b", nargs="+", type=Path, required=True, help="run dirs")
    args = p.parse_args(argv)
    flips = recorded_runs.paired_flips(args.a, args.b)
    for pair in flips["pairs"]:
        parts = [
            f"{grade} {c.trained_acc:.0%} vs {c.base_acc:.0%} ({c.wrong_to_right} "
            f"a-only, {c.right_to_wrong} b-only, p = {c.p_value:.2g})"
            for grade, c in ((g, pair[g]) for g in ("exact", "lenient"))
        ]
        print(f"{pair['a'].name} | {pair['b'].name}: " + "; ".join(parts))
    pooled = {grade: flips[grade] for grade in ("exact", "lenient")}
    for grade, f in pooled.items():
        counts = f"{f['a_only']} a-only, {f['b_only']} b-only"
        print(f"pooled {grade}: {counts}, p = {f['p']:.2g}")
    e = pooled["exact"]
    print(f"RESULT exact a-only {e['a_only']} b-only {e['b_only']} p {e['p']:.3g}")
    return common.write_json(args, pooled)


if __name__ == "__main__":
    main()
