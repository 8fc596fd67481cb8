"""Run a recorded run's first steps again, and print where it parts from its record.

Trains the record's settings for ``--steps`` steps on this machine, with the
record's torch thread count unless ``--threads`` says otherwise, and prints step by
step the recorded and the rerun reward and gradient norm, then the first step at
which they differ (``grpo_helpers.results.replay``). Same commit, same thread count,
same CPU kernels: no difference is expected; ``docs/results.md`` says what differed
between the two runs of one configuration that parted.

Run::

    python bench/rerun_record.py data/reference_runs/ablation/baseline-seed24.json
    python bench/rerun_record.py RECORD --steps 8 --threads 2
    python bench/rerun_record.py RECORD --change temperature=0.61  # a change
    python bench/rerun_record.py --quick     # tiny-random: record 3 steps, rerun them
"""

from __future__ import annotations

import ast
import tempfile
from pathlib import Path

import common
import pandas as pd

from grpo_helpers import provenance
from grpo_helpers.results import replay


def _value(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def main(argv: list[str] | None = None) -> dict:
    p = common.parser(__doc__, model=False, quick="tiny-random, 3 steps")
    p.add_argument("record", nargs="?", help="an ablation record or a run directory")
    p.add_argument("--steps", type=int, default=None, help="default: all, or 3")
    p.add_argument("--threads", type=int, default=None, help="default: the record's")
    p.add_argument(
        "--rtol",
        type=float,
        default=replay.RECORD_RTOL,
        help="relative tolerance (records keep 10 significant digits)",
    )
    p.add_argument(
        "--change",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="rerun with this setting changed (repeatable)",
    )
    p.add_argument("--out", type=Path, default=None, help="where the rerun goes")
    args = p.parse_args(argv)
    if not args.quick and not args.record:
        p.error("give a record, or --quick")
    import torch

    with tempfile.TemporaryDirectory() as scratch:
        folder = args.out or Path(scratch)
        record = (
            replay.record_run(folder) if args.quick else replay.load_record(args.record)
        )
        threads = args.threads or replay.record_threads(record)
        if threads:
            torch.set_num_threads(threads)
        steps = args.steps or (3 if args.quick else int(record["settings"]["steps"]))
        changes = dict(item.split("=", 1) for item in args.change)
        changes = {k: _value(v) for k, v in changes.items()}
        print(
            f"rerunning {steps} steps with {torch.get_num_threads()} torch threads"
            + (f", changed: {changes}" if changes else "")
        )
        recorded = pd.DataFrame(record["metrics"])
        rerun = replay.replay(record, steps, folder / "rerun", **changes)
    table = replay.compare_steps(recorded, rerun, rtol=args.rtol)
    with pd.option_context("display.width", 120, "display.max_columns", 20):
        print(table.to_string(index=False))
    first = replay.first_difference(recorded, rerun, rtol=args.rtol)
    if first is None:
        print(f"no difference in {len(table)} steps")
    else:
        print(
            f"first difference: step {first['step']}, {first['column']}: recorded "
            f"{first['recorded']!r}, rerun {first['rerun']!r}"
        )
    source = record.get("provenance", {})
    here = provenance.record()
    for key in ("commit",):
        print(f"{key}: recorded {source.get(key, 'not recorded')}, here {here[key]}")
    print(f"numeric path here: {here['numeric']}")
    if "numeric" in source:
        print(f"numeric path of the record: {source['numeric']}")
    return common.write_json(args, {"first_difference": first, "steps": len(table)})


if __name__ == "__main__":
    main()
