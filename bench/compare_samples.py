"""Which completions two runs sampled differently, step by step.

Reads two run directories' ``samples.jsonl`` (every completion of every step) and
prints, for each completion that differs, its step, question and sample index, both
rewards and the text around the first character where the two part.

Run::

    python bench/compare_samples.py RUN_A RUN_B
"""

from __future__ import annotations

import argparse
from pathlib import Path

from grpo_helpers import run_files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    args = p.parse_args(argv)
    a, b = (run_files.load_samples(path) for path in (args.a, args.b))
    keys = ["step", "question_index", "sample_index"]
    merged = a.merge(b, on=keys, suffixes=("_a", "_b"))
    differ = 0
    for row in merged.to_dict("records"):
        if row["text_a"] == row["text_b"]:
            continue
        differ += 1
        x, y = row["text_a"], row["text_b"]
        at = next(
            (i for i, (c, d) in enumerate(zip(x, y, strict=False)) if c != d),
            min(len(x), len(y)),
        )
        print(
            f"step {row['step']}, question {row['question_index']}, sample "
            f"{row['sample_index']}: rewards {row['reward_a']} and {row['reward_b']}, "
            f"parting at character {at}"
        )
        print(f"  a: {x[max(0, at - 40) : at + 40]!r}")
        print(f"  b: {y[max(0, at - 40) : at + 40]!r}")
    steps = ", ".join(
        f"step {step}: {count}" for step, count in merged.groupby("step").size().items()
    )
    print(f"{differ} of {len(merged)} completions differ (compared: {steps})")
    return differ


if __name__ == "__main__":
    main()
