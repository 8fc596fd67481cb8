"""Each notebook of the series, executed once per test session, in fast mode.

A notebook costs seconds to minutes to run, so the suite runs each one once and
every test that needs its outputs reads the same executed copy:

* ``test_notebooks_executed``: it ran top to bottom without an error (what nbmake
  checked), its stubs made the self-checks print "not yet" with hints that never
  show the answer, and the solutions make them print "ok";
* ``test_book``: the course site is built from these executed copies.

How one notebook runs (:meth:`NotebookRuns.get`):

1. nbclient executes it in a kernel of its own, with ``GRPO_FAST=1`` and
   ``GRPO_RUNS_ROOT`` set to a folder of its own, so no notebook reads or deletes
   another's runs, whatever the order, under ``pytest-xdist`` too. Notebook 07
   evaluates a run that a fixture trained beforehand (:func:`make_source_run`),
   named by its ``source_run`` parameter: it never depends on notebook 05's run.
2. After its last cell, cells added for the test paste in the solutions
   (``notebooks/solutions/<stem>.py``) and run every self-check cell again (the
   exercises close each notebook, so the state they check is the notebook's final
   state). The plain run is the learner's (stubs, "not yet"); the added cells are
   the solution run, in the same kernel, for the price of a few cells.
3. The executed copy is saved without the added cells and labelled fast
   (``metadata.grpo``, as ``grpo series`` labels its copies), beside a JSON record
   of the outcome and the self-check lines.

The copies live in a folder shared by the session's xdist workers; a file lock per
notebook makes the first worker that needs a notebook execute it and the others
wait for it and read its record.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
STEMS = tuple(p.stem for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")))
ADDED_TAG = "pytest-solution-check"
#: Notebook 07's parameter override: the run it evaluates (see make_source_run).
SOURCE_RUN = "pytest-source-run"
PARAMETER_OVERRIDES = {"07_base_vs_grpo_eval": f'source_run = "{SOURCE_RUN}"'}
CELL_TIMEOUT = 600  # seconds per cell; pytest-timeout bounds each test as a whole


@dataclass
class Execution:
    """What one execution of a notebook left."""

    stem: str
    path: str  # the executed copy (without the added cells)
    ok: bool
    error: str
    seconds: float
    stub_checks: list[str]  # lines printed by the notebook's own self-check cells
    solution_checks: list[str]  # lines printed by the added cells (solutions in)
    runs_dir: str  # the GRPO_RUNS_ROOT its kernel saw

    def text(self) -> str:
        """Every stream output of the executed copy, in cell order."""
        import nbformat

        nb = nbformat.read(self.path, as_version=4)
        return "".join(
            output.get("text", "")
            for cell in nb.cells
            for output in cell.get("outputs", [])
        )


def _tags(cell) -> list[str]:  # noqa: ANN001
    return cell.get("metadata", {}).get("tags", [])


def _printed(cells) -> list[str]:  # noqa: ANN001
    """The lines the cells printed, in order."""
    return [
        line
        for cell in cells
        for output in cell.get("outputs", [])
        for line in output.get("text", "").splitlines()
    ]


def with_solution_checks(nb, stem: str):  # noqa: ANN001, ANN201
    """The notebook with the test's cells added at its end (and its parameter
    override, for notebook 07)."""
    import nbformat

    solutions = (NOTEBOOKS / "solutions" / f"{stem}.py").read_text()
    added = [nbformat.v4.new_code_cell(f"exec({solutions!r})")]
    added += [
        nbformat.v4.new_code_cell(cell.source)
        for cell in nb.cells
        if "self-check" in _tags(cell)
    ]
    for cell in added:
        cell.metadata["tags"] = [ADDED_TAG]
    override = PARAMETER_OVERRIDES.get(stem)
    if override:
        (parameters,) = [c for c in nb.cells if "parameters" in _tags(c)]
        parameters.source += f"\n{override}  # set by tests/notebook_runs.py"
    nb.cells += added
    return nb


def make_source_run(runs_root: Path) -> Path:
    """A fast-mode run of notebook 05's settings, for notebook 07 to evaluate.

    Trained in this process (tiny-random, 2 steps) under ``runs_root`` (the
    kernel's ``config.SETTINGS.runs_root``), in ``runs_root / SOURCE_RUN``.
    """
    from grpo_helpers import training
    from grpo_helpers.config import GRPOConfig
    from grpo_helpers.engines import connect

    run_dir = runs_root / SOURCE_RUN
    config = GRPOConfig(
        base_model="tiny-random",
        backend="local",
        dataset="arithmetic",
        difficulty=1,
        steps=2,
        batch_size=2,
        group_size=4,
        max_tokens=8,
        lora_rank=16,
        learning_rate=2e-4,
        reward="shaped",
        temperature=0.6,
        seed=0,
        weights_name=SOURCE_RUN,
        run_dir=str(run_dir),
        save_every=0,
    )
    service = connect("local", run_dir=run_dir / "checkpoints")
    training.train_sync(config, service, progress=False, overwrite=True)
    return run_dir


def execute(stem: str, out_dir: Path) -> Execution:
    """Execute one notebook as the module docstring says; write its executed copy
    and record under ``out_dir``."""
    import nbformat
    from nbclient import NotebookClient

    runs_dir = out_dir / "runs" / stem
    runs_dir.mkdir(parents=True, exist_ok=True)
    if stem in PARAMETER_OVERRIDES:
        make_source_run(runs_dir / "fast")  # the kernel runs in fast mode
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    nb = with_solution_checks(nb, stem)
    env = {
        **os.environ,
        "GRPO_FAST": "1",
        "GRPO_RUNS_ROOT": str(runs_dir),
        # this checkout's package, wherever an editable install points
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    env.pop("GRPO_STRICT_CHECKS", None)  # the stubs must print "not yet", not raise
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    started = time.perf_counter()
    error = ""
    try:
        client.execute(env=env)
    except Exception as exc:  # noqa: BLE001 - recorded, and the test shows it
        error = f"{type(exc).__name__}: {exc}"[-6000:]
    seconds = time.perf_counter() - started
    added = [c for c in nb.cells if ADDED_TAG in _tags(c)]
    nb.cells = [c for c in nb.cells if ADDED_TAG not in _tags(c)]
    own_checks = [c for c in nb.cells if "self-check" in _tags(c)]
    nb.metadata["grpo"] = {
        "fast": True,
        "seconds": round(seconds, 1),
        "status": "FAILED" if error else "ok",
        "executed_by": "tests/notebook_runs.py",
    }
    path = out_dir / f"{stem}.ipynb"
    nbformat.write(nb, path)
    return Execution(
        stem=stem,
        path=str(path),
        ok=not error,
        error=error,
        seconds=seconds,
        stub_checks=_printed(own_checks),
        solution_checks=_printed(added[1:]),
        runs_dir=str(runs_dir),
    )


class NotebookRuns:
    """The session's executed notebooks, each executed on first use."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)

    def get(self, stem: str) -> Execution:
        from filelock import FileLock

        if stem not in STEMS:
            raise KeyError(f"no notebook {stem!r}; one of {', '.join(STEMS)}")
        record = self.out_dir / f"{stem}.json"
        with FileLock(str(self.out_dir / f"{stem}.lock")):
            if record.is_file():
                return Execution(**json.loads(record.read_text()))
            print(f"\nexecuting {stem} (once for this session) ...", file=sys.stderr)
            run = execute(stem, self.out_dir)
            record.write_text(json.dumps(asdict(run), indent=2))
            return run

    def all(self) -> dict[str, Execution]:
        return {stem: self.get(stem) for stem in STEMS}
