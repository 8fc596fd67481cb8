"""Where the test suite's time goes, per xdist worker, from one run's timeline.

Run the suite with ``GRPO_TEST_TIMELINE`` naming a file (``tests/conftest.py``
writes one JSON line per test: worker, test, start, end), then read it::

    GRPO_TEST_TIMELINE=/tmp/timeline.jsonl make test
    python bench/suite_timeline.py /tmp/timeline.jsonl

It prints, per worker, when its first test started and its last ended, the seconds
spent inside tests and the gaps between them (fixtures of a module's first test count
as the test's), how long it waited at the end for the other worker, and the slowest
tests.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("timeline", type=Path)
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args(argv)
    rows = [json.loads(line) for line in args.timeline.read_text().splitlines()]
    by_worker: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_worker[row["worker"]].append(row)
    t0 = min(r["start"] for r in rows)
    t1 = max(r["end"] for r in rows)
    print(f"{len(rows)} tests, {t1 - t0:.0f} s from the first start to the last end")
    for worker, items in sorted(by_worker.items()):
        items.sort(key=lambda r: r["start"])
        busy = sum(r["end"] - r["start"] for r in items)
        first, last = items[0]["start"] - t0, items[-1]["end"] - t0
        print(
            f"  {worker}: {len(items)} tests, first at {first:.0f} s, last ended at "
            f"{last:.0f} s; in tests {busy:.0f} s, between them "
            f"{last - first - busy:.0f} s; idle at the end {t1 - t0 - last:.0f} s"
        )
    print(f"slowest {args.top}:")
    for r in sorted(rows, key=lambda r: r["start"] - r["end"])[: args.top]:
        seconds, at = r["end"] - r["start"], r["start"] - t0
        print(f"  {seconds:6.1f} s  {r['worker']}  at {at:5.0f} s  {r['test']}")


if __name__ == "__main__":
    main()
