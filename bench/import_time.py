"""How long does a fresh Python process take to import what the course's processes
import? One run, each import in a new process, median of ``--repeats``.

Every test worker, notebook kernel, CLI run, site build and nbgrader run is a new
process and pays its imports again, so a slow import costs the test suite many
times over. This script times, each in a fresh interpreter of this environment:
``nbformat`` (the test workers, the site build, nbgrader, ``grpo series``),
``torch``, ``transformers``, ``grpo_helpers`` and the pytest plugins that load by
entry point.

``jsonschema`` 4.25 added ``rfc3987-syntax`` to the extra that ``jupyter-events``
asks for, and that package builds a Lark grammar when it is imported; pyproject.toml
keeps ``jsonschema`` below 4.25. If ``rfc3987_syntax`` is importable here anyway,
the script also times ``nbformat`` with it blocked, the difference it makes.

Run::

    python bench/import_time.py
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import statistics
import subprocess
import sys

MODULES = (
    "nbformat",
    "torch",
    "transformers",
    "grpo_helpers",
    "nbmake.pytest_plugin",
    "_hypothesis_pytestplugin",
)
BLOCK = "import sys; sys.modules['rfc3987_syntax'] = None; "


def seconds(module: str, prefix: str = "") -> float:
    code = (
        f"{prefix}import time; t = time.perf_counter(); import {module}; "
        "print(time.perf_counter() - t)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    version = importlib.metadata.version("jsonschema")
    grammar = importlib.util.find_spec("rfc3987_syntax") is not None
    print(f"jsonschema {version}; rfc3987_syntax importable: {grammar}")
    for module in MODULES:
        if importlib.util.find_spec(module.split(".")[0]) is None:
            print(f"  {module:28s} not installed")
            continue
        runs = [seconds(module) for _ in range(args.repeats)]
        print(f"  {module:28s} {statistics.median(runs):6.2f} s")
    if grammar:
        runs = [seconds("nbformat", BLOCK) for _ in range(args.repeats)]
        print(f"  {'nbformat, rfc3987 blocked':28s} {statistics.median(runs):6.2f} s")


if __name__ == "__main__":
    main()
