"""Each notebook of the series, executed once per test session, in fast mode.

A notebook costs seconds to minutes to run, so the suite runs each one once and
every test that needs its outputs reads the same executed copy:

* ``tests/notebooks/test_executed.py``: it ran top to bottom without an error (what
  nbmake checked), its stubs made the self-checks print "not yet" with hints that never
  show the answer, and the solutions make them print "ok" and pass the hidden
  tests;
* ``tests/classroom/test_course.py``: the course site is built from these executed
  copies.

How one notebook runs (:meth:`NotebookRuns.get`):

1. nbclient executes it in a kernel of its own, with ``GRPO_FAST=1`` and
   ``GRPO_RUNS_ROOT`` set to a folder of its own, so no notebook reads or deletes
   another's runs, whatever the order, under ``pytest-xdist`` too. Notebook 07
   evaluates a run that a fixture trained beforehand (:func:`make_source_run`),
   named by its ``source_run`` parameter: it never depends on notebook 05's run.
2. After its last cell, cells added for the test run the teacher's version of each
   exercise and check cell (``course.source_notebook``: the solution after the
   stub, the grader's hidden tests after the learner's check). The exercises close
   each notebook, so the state they check is the notebook's final state. The plain
   run is the learner's (stubs, "not yet"); the added cells are the solution run,
   in the same kernel, for the price of a few cells: a failing hidden test is an
   error of the execution.
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
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
STEMS = tuple(p.stem for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")))
ADDED_TAG = "pytest-solution-check"
#: Notebooks 07 and 08's parameter override: the run they evaluate (see
#: make_source_run).
SOURCE_RUN = "pytest-source-run"
PARAMETER_OVERRIDES = {
    "07_evaluating_a_trained_model": f'source_run = "{SOURCE_RUN}"',
    "08_what_grpo_learned": f'source_run = "{SOURCE_RUN}"',
}
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
    wants: list[str]  # repr of each value a self_check compared with

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
    """The lines the cells printed, in order (not the hidden tests' results)."""
    from grpo_helpers.classroom.hidden_tests import RESULT

    return [
        line
        for cell in cells
        for output in cell.get("outputs", [])
        for line in output.get("text", "").splitlines()
        if not line.startswith(RESULT)
    ]


def _stdout(cell) -> str:  # noqa: ANN001
    return "".join(
        o.get("text", "")
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream" and o.get("name") == "stdout"
    )


def judge(printed: str, key: dict) -> str:
    from grpo_helpers.classroom.hidden_tests import judge

    return judge(printed, key)


def with_solution_checks(nb, stem: str):  # noqa: ANN001, ANN201
    """The notebook with the test's cells added at its end: the teacher's version
    of each exercise cell (the stub, then the solution) and of each check cell
    (the learner's check, then the grader's hidden tests), from
    ``course.source_notebook``; and notebook 07's parameter override."""
    import nbformat

    from grpo_helpers.classroom import course

    key = {}
    teacher = course.source_notebook(NOTEBOOKS / f"{stem}.ipynb", key)
    added = [
        nbformat.v4.new_code_cell(cell.source)
        for cell in teacher.cells
        if {"exercise", "self-check"} & set(_tags(cell))
    ]
    for cell, original in zip(
        added,
        [c for c in teacher.cells if {"exercise", "self-check"} & set(_tags(c))],
        strict=True,
    ):
        kind = "self-check" if "self-check" in _tags(original) else "exercise"
        cell.metadata["tags"] = [ADDED_TAG, kind]
        grade_id = original.metadata.get("nbgrader", {}).get("grade_id")
        if kind == "self-check":  # what the grader judges its printed results with
            cell.metadata["hidden_key"] = key[grade_id]
    override = PARAMETER_OVERRIDES.get(stem)
    if override:
        (parameters,) = [c for c in nb.cells if "parameters" in _tags(c)]
        parameters.source += f"\n{override}  # set by tests/helpers/notebook_runs.py"
    nb.cells += added
    return nb


#: An IPython startup file of the test's kernels: every ``self_checks.self_check``
#: writes the value it compares with (``want``) to ``GRPO_TEST_WANTS``, so that a
#: test can check that no hint shows one.
RECORD_WANTS = """
def _record_wants():
    import json, os
    from grpo_helpers.classroom import self_checks

    check = self_checks.self_check

    def self_check(exercise, compute, want, *args, **kwargs):
        with open(os.environ["GRPO_TEST_WANTS"], "a") as out:
            out.write(json.dumps({"exercise": exercise, "want": repr(want)}) + "\\n")
        return check(exercise, compute, want, *args, **kwargs)

    self_checks.self_check = self_check


_record_wants()
del _record_wants
"""


def _wants_recorder(out_dir: Path, stem: str) -> tuple[Path, Path]:
    """(IPYTHONDIR with :data:`RECORD_WANTS` as its startup file, the record)."""
    ipython = out_dir / "ipython" / stem
    startup = ipython / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-record-wants.py").write_text(RECORD_WANTS)
    record = out_dir / f"{stem}.wants.jsonl"
    record.unlink(missing_ok=True)
    return ipython, record


def make_source_run(runs_root: Path) -> Path:
    """A fast-mode run of notebook 05's settings, for notebook 07 to evaluate.

    Trained in this process (tiny-random, 2 steps) under ``runs_root`` (the
    kernel's ``settings.SETTINGS.runs_root``), in ``runs_root / SOURCE_RUN``.
    """
    from grpo_helpers import presets, training
    from grpo_helpers.config import GRPOConfig
    from grpo_helpers.engines import connect

    run_dir = runs_root / SOURCE_RUN
    config = GRPOConfig(
        **presets.notebook_run(fast=True),
        backend="local",
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

    from grpo_helpers.classroom import notebooks

    runs_dir = out_dir / "runs" / stem
    runs_dir.mkdir(parents=True, exist_ok=True)
    if stem in PARAMETER_OVERRIDES:
        make_source_run(runs_dir / "fast")  # the kernel runs in fast mode
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    nb = with_solution_checks(nb, stem)
    ipython, wants = _wants_recorder(out_dir, stem)
    env = {
        "GRPO_RUNS_ROOT": str(runs_dir),
        "IPYTHONDIR": str(ipython),
        "GRPO_TEST_WANTS": str(wants),
        # this checkout's package, wherever an editable install points
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    # the stubs must print "not yet", not raise
    env["GRPO_STRICT_CHECKS"] = ""
    run = notebooks.execute(nb, cwd=NOTEBOOKS, timeout=CELL_TIMEOUT, fast=True, env=env)
    error, seconds = run.error, run.seconds
    added_checks = [
        c for c in nb.cells if ADDED_TAG in _tags(c) and "self-check" in _tags(c)
    ]
    if not error:  # the hidden tests' results, judged as the grader does
        error = "\n".join(
            verdict
            for cell in added_checks
            if (verdict := judge(_stdout(cell), cell.metadata["hidden_key"]))
        )
    nb.cells = [c for c in nb.cells if ADDED_TAG not in _tags(c)]
    own_checks = [c for c in nb.cells if "self-check" in _tags(c)]
    nb.metadata["grpo"] = {
        "fast": True,
        "seconds": round(seconds, 1),
        "status": "FAILED" if error else "ok",
        "executed_by": "tests/helpers/notebook_runs.py",
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
        solution_checks=_printed(added_checks),
        runs_dir=str(runs_dir),
        wants=[
            json.loads(line)["want"]
            for line in (wants.read_text().splitlines() if wants.exists() else [])
        ],
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
