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

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from grpo_helpers.results import report, stats  # noqa: E402


def graded(run_dir: Path) -> pd.DataFrame:
    """The trained model's graded answers of one run, in question order."""
    path = Path(run_dir) / "eval_trained.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: is {run_dir} a recorded run?")
    return pd.DataFrame(
        [json.loads(line) for line in path.read_text().splitlines() if line]
    )


def compare(a_dirs: list[Path], b_dirs: list[Path]) -> dict[str, dict[str, float]]:
    """Question-by-question flips between paired runs, per grade, pooled.

    The flips and McNemar's p of each pair are ``report.compare``'s, with B as its
    "base" and A as its "trained" side (``wrong_to_right``: right only under A).
    ``report.compare`` pairs answers by question index; the question texts are
    checked here first, since two seeds' held-out questions share their indices.
    """
    if len(a_dirs) != len(b_dirs) or not a_dirs:
        raise ValueError(
            f"give as many --a runs as --b runs (got {len(a_dirs)} and {len(b_dirs)})"
        )
    pooled = {g: [0, 0] for g in ("exact", "lenient")}
    for a_dir, b_dir in zip(a_dirs, b_dirs, strict=True):
        a, b = graded(a_dir), graded(b_dir)
        if a["question"].tolist() != b["question"].tolist():
            raise ValueError(f"{a_dir} and {b_dir} did not score the same questions")
        parts = []
        for grade, counts in pooled.items():
            pair = report.compare(b, a, grade, n_bootstrap=0)
            counts[0] += pair.wrong_to_right
            counts[1] += pair.right_to_wrong
            parts.append(
                f"{grade} {pair.trained_acc:.0%} vs {pair.base_acc:.0%} "
                f"({pair.wrong_to_right} a-only, {pair.right_to_wrong} b-only, "
                f"p = {pair.p_value:.2g})"
            )
        print(f"{Path(a_dir).name} | {Path(b_dir).name}: " + "; ".join(parts))
    result = {}
    for grade, (a_only, b_only) in pooled.items():
        p = stats.mcnemar_exact_p(a_only, b_only)
        result[grade] = {"a_only": a_only, "b_only": b_only, "p": p}
        print(f"pooled {grade}: {a_only} a-only, {b_only} b-only, p = {p:.2g}")
    e = result["exact"]
    print(f"RESULT exact a-only {e['a_only']} b-only {e['b_only']} p {e['p']:.3g}")
    return result


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", nargs="+", type=Path, required=True, help="run dirs")
    p.add_argument("--b", nargs="+", type=Path, required=True, help="run dirs")
    args = p.parse_args(argv)
    return compare(args.a, args.b)


if __name__ == "__main__":
    main()
