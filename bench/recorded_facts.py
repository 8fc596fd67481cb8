"""Print every number that the prose of the notebooks, the README and ``docs/``
cites from the recorded runs, recomputed from their records
(``grpo_helpers.results.facts``; ``tests/project/test_claims.py`` holds each cited
sentence to them).

Usage::

    python bench/recorded_facts.py          # every fact, one per line
    python bench/recorded_facts.py ablation # one family: run, shaped, ablation,
                                            # "noise pair"
"""

from __future__ import annotations

import sys

from grpo_helpers.results import facts


def main(argv: list[str] | None = None) -> None:
    wanted = set(sys.argv[1:] if argv is None else argv)
    for family, values in facts.all_facts().items():
        if wanted and family not in wanted:
            continue
        print(f"# {family}")
        for key, value in values.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
