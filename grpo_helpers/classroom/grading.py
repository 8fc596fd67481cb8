"""Autograding handed-in notebooks with nbgrader and the hidden tests.

``python -m grpo_helpers grade <submissions>`` grades
``<submissions>/<student>/<notebook>.ipynb`` with the teacher's course directory
that ``make student`` wrote (:func:`grpo_helpers.classroom.course.build_student`):
nbgrader's ``autograde`` restores each graded cell with its hidden tests
(:mod:`grpo_helpers.classroom.hidden_tests`) and runs the notebook in fast mode
(``GRPO_FAST=1``) with strict checks (``GRPO_STRICT_CHECKS=1``). A graded cell
that runs without an error earns its point.

**Where a submission runs.** Each student is graded in two fresh folders directly in
the system's temporary directory, made just before and removed just after: the
student's own (the kernel's working folder and home) and the grading process's
(nbgrader's folders with the submitted and the graded notebooks, the gradebook, the
kernel's connection file). The kernel imports the package from a folder that holds
only the package and the data (``PYTHONPATH``: in the sandbox, in its own ``/tmp``;
without it, a copy in the student's folder), so every path the package computes
(``SETTINGS.project_root``, ``course.SOLUTIONS``) points there, where
``notebooks/solutions/`` does not exist. A submission that opens the solutions
through the package's paths, or calls the teacher's loader
(``course._load_solutions``, which the hidden tests also make raise), fails.

**The sandbox.** On Linux each kernel runs in a sandbox of its own
(:mod:`grpo_helpers.classroom.sandbox`, bubblewrap): it sees the student's folder
(writable), the package, the data, the Python environment and the model (read-only)
and a private ``/tmp``; not the course directory (the source notebooks, the
solutions, the key, the gradebook), not the submissions, not the other students'
folders, not the teacher's home. It has no network (it talks to the grading process
over Unix sockets), its own PIDs (it can neither see nor signal the grader or
another submission, and all it started dies with it) and limits: each process's
memory (``memory_mb``), the number of processes (``max_processes``; the watchdog
counts them too), the size of a file and what a notebook prints. What crosses the
boundary is the notebook in and the executed notebook out; the grading process,
outside, keeps the key, reads only what the kernel printed and writes the grades.
Where no sandbox works (not Linux, no user namespaces), :func:`grade` stops and says
why and what to do; ``sandbox=False`` (``--no-sandbox``) grades without one, as the
teacher's user, with a warning on every run: only where the submissions can reach
nothing else.

**Where the answers are.** Nowhere the learner's code runs. A graded cell's hidden
tests hold the cases, not the expected values: they print what the learner's
function returned, and the grading process compares that with the key
(``<course>/hidden_key.json``) after the cell ran
(:func:`grpo_helpers.classroom.hidden_tests.judge`). The gradebook, which holds the
graded cells' code, lies outside the student's folder, and a graded cell whose code is
not the teacher's scores nothing. :mod:`grpo_helpers.classroom.grading_guard` holds what
surrounds the kernel: a startup file that makes graded cells immune to the
notebook's IPython hooks (input and AST transformers, custom exception handlers),
the verdict, the watchdog and the killing of leftovers.

What the sandbox does not hold is in :mod:`grpo_helpers.classroom.sandbox` (the
kernel still runs the teacher's Python and Linux kernel: an exploit of them is out
of its reach) and ``docs/teaching.md``.

**Time limits** (``GradeConfig``; ``docs/teaching.md`` says why each). The grader
limits *the graded function*, not the cells: the learner's code gets
``function_seconds`` (``GRPO_CHECK_SECONDS`` in the kernel) in each check and each
call of a hidden test, enough for any right answer on a loaded machine, while an
endless loop is stopped and reported as such. A loop that swallows or cancels the
alarm is killed from outside :data:`grading_guard.GRACE` seconds after the deadline
the hidden test told the grading process. Cells have ``cell_seconds``, a notebook
``notebook_seconds`` and a student ``total_seconds``; past any, the notebook gets
no more points, the reason goes to the grades file, and nothing the kernel started
outlives it (the grading process adopts orphans and kills them).

The module is longer than most and stays whole: the grading process runs this very
file as a script (copied beside ``grading_guard.py``, ``hidden_tests.py`` and
``sandbox.py``, and importing no other part of the package), so what that process
does lives here beside what starts it and reads what it wrote.

Introduced in: docs/teaching.md (for teachers)
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

COLUMNS = ["student", "notebook", "exercise", "points", "max_points", "passed", "error"]
#: The exercise column of each student's summary row.
TOTAL = "TOTAL"
#: This folder (its three driver modules are copied), and the package it belongs to.
HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
#: The grading process's command; None: this file, run as a script (its spec comes
#: on stdin). As a script it imports no part of grpo_helpers, only nbgrader.
DRIVER: list[str] | None = None
#: The modules the grading process imports, copied beside it (stdlib, psutil,
#: nbgrader).
DRIVER_MODULES = ("grading", "grading_guard", "hidden_tests", "sandbox")
#: The kernel that runs a submission in its sandbox (a kernelspec the grading
#: process writes for each student).
KERNEL_NAME = "grpo-sandbox"
#: The kernel that runs a submission without the sandbox: ``python3``, which
#: Jupyter starts with the grading process's own Python. Grading names its kernel
#: either way: a notebook's kernelspec names the project's kernel (``make lab``
#: registers it), which a grading machine need not have.
PLAIN_KERNEL = "python3"
#: The sandboxed kernel's IPython folder: in its own ``/tmp``, the guard mounted in.
IPYTHON_DIR = "/tmp/ipython"
#: Where a sandboxed kernel finds the package, the data and the model cache
#: (mounted read-only): in its own ``/tmp``, fresh for each kernel.
PROJECT_DIR = "/tmp/grpo"
#: The teacher's environment variables a sandboxed kernel keeps (threads, locale,
#: time zone); it gets no other (no token, no path into the teacher's files).
KEPT_ENV = (
    "LANG",
    "LC_ALL",
    "TZ",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "PYTHONDONTWRITEBYTECODE",
)
#: What ``grade(sandbox=False)`` warns on every run.
NO_SANDBOX = (
    "grading WITHOUT a sandbox (--no-sandbox): each submission runs as your user "
    "and can read, write and reach whatever you can (the solutions, the key, other "
    "students' folders, the network, your processes). Do this only where the "
    "submissions can reach nothing else: a container or a machine of their own."
)


class SandboxUnavailable(RuntimeError):
    """``grade`` was asked for a sandbox (the default), and none works here."""


def grade(
    submissions: Path,
    course_dir: Path | None = None,
    settings: Any = None,
    **changes: Any,
) -> Any:
    """Grade handed-in notebooks; write and return the grades.

    Args:
        submissions: ``<submissions>/<student>/<notebook>.ipynb`` as handed in
            (notebooks of the series; other files are ignored).
        course_dir: the teacher's course directory of
            :func:`grpo_helpers.classroom.course.build_student` (default
            ``build/grading``; built first when missing, with the student edition in its
            default place).
        settings: a :class:`~grpo_helpers.classroom.grade_settings.GradeConfig`
            (default: its defaults): the time limits (``function_seconds`` per call
            of a learner's function by a check or a hidden test, ``cell_seconds``,
            ``notebook_seconds``, ``total_seconds`` per student), ``feedback``
            (each student's HTML feedback in ``course_dir/feedback/<student>/``),
            ``workers`` (students at once), ``sandbox`` (False only where the
            submissions cannot reach anything: it warns), and the kernel's
            ``memory_mb`` and ``max_processes``.
        **changes: fields of ``settings`` to change, by name
            (``function_seconds=5``), each checked.

    Returns:
        A DataFrame with ``student, notebook, exercise, points, max_points, passed,
        error``: one row per student per exercise of every notebook that anyone
        handed in (no notebook: 0 points, "not submitted"), then one row per
        student with exercise ``TOTAL`` and the sums. ``error`` says why a graded
        cell earned nothing (its error, with an earlier error of the notebook when
        there was one, or why the notebook was not graded). Also written to
        ``course_dir/grades.csv``; the graded notebooks go to
        ``course_dir/autograded/<student>/``.

    Raises:
        SandboxUnavailable: ``settings.sandbox`` is True and a sandbox does not work
            (the message says why and what to do).
    """
    from dataclasses import replace

    import pandas as pd

    from grpo_helpers.classroom import course
    from grpo_helpers.classroom import sandbox as box
    from grpo_helpers.classroom.grade_settings import GradeConfig

    config = replace(settings or GradeConfig(), **changes)
    submissions = Path(submissions)
    course_dir = Path(course.COURSE if course_dir is None else course_dir)
    limits = box.Limits(memory_mb=config.memory_mb, processes=config.max_processes)
    isolation = _isolation(config.sandbox, [course.ROOT, course_dir, submissions])
    built = [course_dir / "gradebook.db", course_dir / course.KEY]
    if not all(path.is_file() for path in built):
        course.build_student(course=course_dir)
    sources = course_dir / "source" / course.ASSIGNMENT
    known = sorted(p.stem for p in sources.glob("*.ipynb"))
    students = sorted(p.name for p in submissions.iterdir() if p.is_dir())
    handed_in = {
        student: sorted(
            p.stem for p in (submissions / student).glob("*.ipynb") if p.stem in known
        )
        for student in students
    }
    notebooks = sorted({stem for stems in handed_in.values() for stem in stems})
    for name in ("autograded", "feedback", "results"):
        shutil.rmtree(course_dir / name, ignore_errors=True)
    results = course_dir / "results"
    results.mkdir(parents=True)
    spec = {
        "students": [s for s in students if handed_in[s]],
        "submissions": str(submissions.resolve()),
        "course": str(course_dir.resolve()),
        "package": str(PACKAGE),  # copied next to each submission
        "data": str(course.ROOT / "data"),
        "assignment": course.ASSIGNMENT,
        "course_id": course.COURSE_ID,
        "key": str((course_dir / course.KEY).resolve()),
        "cell_seconds": int(config.cell_seconds),
        "function_seconds": float(config.function_seconds),
        "notebook_seconds": float(config.notebook_seconds),
        "feedback": bool(config.feedback),
        "sandbox": isolation,
        "limits": box.as_dict(limits),
        "kernel_env": {
            "GRPO_FAST": "1",
            "GRPO_STRICT_CHECKS": "1",
            "GRPO_CHECK_SECONDS": f"{float(config.function_seconds):g}",
            "MPLBACKEND": "Agg",
        },
    }
    _run_drivers(spec, results, config.total_seconds, config.workers)
    rows = []
    for student in students:
        outcome = _read_json(results / f"{student}.json")
        for stem in notebooks:
            source = sources / f"{stem}.ipynb"
            rows += _notebook_rows(source, student, handed_in[student], outcome)
    shutil.rmtree(results, ignore_errors=True)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame = pd.concat([frame, _totals(frame, students)], ignore_index=True)
    frame.to_csv(course_dir / "grades.csv", index=False)
    return frame


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _notebook_rows(
    source: Path, student: str, handed_in: list[str], outcome: dict[str, Any]
) -> list[dict[str, Any]]:
    """The rows of one student's notebook (``source``: its teacher's version)."""
    stem = source.stem
    graded = outcome.get("notebooks", {}).get(stem, {})
    if stem not in handed_in:
        reason = "not submitted"
    else:
        reason = (
            outcome.get("stopped")
            or graded.get("stopped")
            or outcome.get("failed")
            or graded.get("first_error")
            or outcome.get("failure")
            or ("not graded" if not graded else "no points and no error recorded")
        )
    rows = []
    for grade_id, maximum in _grade_ids(source):
        score = graded.get("grades", {}).get(grade_id)
        points = (
            float(score[0] or 0) if score is not None and stem in handed_in else 0.0
        )
        passed = points == maximum
        error = "" if passed else graded.get("errors", {}).get(grade_id) or reason
        rows.append(
            {
                "student": student,
                "notebook": stem,
                "exercise": grade_id,
                "points": points,
                "max_points": maximum,
                "passed": passed,
                "error": error,
            }
        )
    return rows


def _totals(frame: Any, students: list[str]) -> Any:
    import pandas as pd

    rows = []
    for student in students:
        mine = frame[frame["student"] == student]
        failed = int((~mine["passed"].astype(bool)).sum())
        rows.append(
            {
                "student": student,
                "notebook": "",
                "exercise": TOTAL,
                "points": float(mine["points"].sum()),
                "max_points": float(mine["max_points"].sum()),
                "passed": failed == 0 and len(mine) > 0,
                "error": f"{failed} of {len(mine)} exercises not passed"
                if failed
                else "",
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def _grade_ids(path: Path) -> list[tuple[str, float]]:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return [
        (c.metadata["nbgrader"]["grade_id"], float(c.metadata["nbgrader"]["points"]))
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade")
    ]


# ----------------------------------------------------------------------------------
# The grading processes: restarted past a student that stopped one
# ----------------------------------------------------------------------------------


def _isolation(sandbox: bool, protected: list[Path]) -> dict[str, Any] | None:
    """What the grading process needs to sandbox each kernel (None: no sandbox,
    with its warning); :class:`SandboxUnavailable` when none works here."""
    from grpo_helpers.classroom import sandbox as box
    from grpo_helpers.settings import SETTINGS

    if not sandbox:
        print(f"warning: {NO_SANDBOX}", file=sys.stderr)
        return None
    found = box.check([p.resolve() for p in protected])
    if not found.works:
        raise SandboxUnavailable(
            "grade runs each submission in a sandbox, and no sandbox works "
            f"here.\n{found.report()}"
        )
    return {
        "bwrap": found.bwrap,
        "sized_tmp": box.supports(found.bwrap, "--size"),
        "protected": [str(p.resolve()) for p in protected],
        "model_cache": str(Path(SETTINGS.cache_dir).expanduser() / "models"),
    }


def _run_drivers(
    spec: dict[str, Any], results: Path, total_seconds: float, workers: int = 1
) -> None:
    """Grade ``spec["students"]`` in ``workers`` separate processes
    (:func:`_drive`), each taking the next student nobody has taken yet.

    A student whose grading runs past ``total_seconds``, or during which the
    process dies (a submission can kill its parent), is recorded as stopped; a new
    process grades the students left.
    """
    work = Path(tempfile.mkdtemp(prefix="grpo-grading-"))
    try:
        (work / "driver").mkdir()
        for name in DRIVER_MODULES:
            shutil.copy(HERE / f"{name}.py", work / "driver" / f"{name}.py")
        with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
            jobs = [
                pool.submit(_worker, number, spec, results, total_seconds, work)
                for number in range(max(1, workers))
            ]
            for job in jobs:
                job.result()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _worker(
    number: int, spec: dict[str, Any], results: Path, total_seconds: float, work: Path
) -> None:
    scripts = str(Path(sys.executable).parent)  # nbgrader runs alembic by name
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        "PATH": scripts + os.pathsep + os.environ.get("PATH", ""),
        "GRPO_GRADING_WORK": str(work),
    }
    command = DRIVER or [sys.executable, str(work / "driver" / "grading.py")]
    log = work / f"driver-{number}.log"
    while True:
        waiting = [s for s in spec["students"] if not _marker(results, s).exists()]
        if not waiting:
            return
        with open(log, "w") as out:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=work,
                env=env,
                start_new_session=True,
            )
            assert process.stdin is not None
            process.stdin.write(json.dumps({**spec, "students": waiting}).encode())
            process.stdin.close()
            stopped = _watch(process, waiting, results, total_seconds)
        mine = [s for s in waiting if _taken_by(results, s) == str(process.pid)]
        for student in mine:
            if not (results / f"{student}.json").is_file():
                reason = stopped or (
                    f"the grading process ended (exit code {process.returncode}) "
                    "while grading this student"
                )
                (results / f"{student}.json").write_text(
                    json.dumps({"stopped": reason})
                )
        if not mine:  # it graded nobody: it failed to start; say why, once
            tail = log.read_text()[-3000:]
            for student in waiting:
                if _take(results, student, "failed"):
                    failure = {"failed": f"grading did not start: {tail}"}
                    (results / f"{student}.json").write_text(json.dumps(failure))
            return


def _marker(results: Path, student: str) -> Path:
    return results / f"{student}.started"


def _take(results: Path, student: str, owner: str) -> bool:
    """Mark ``student`` as taken by ``owner``; False when someone was first."""
    try:
        descriptor = os.open(
            _marker(results, student), os.O_CREAT | os.O_EXCL | os.O_WRONLY
        )
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "w") as marker:
        marker.write(owner)
    return True


def _taken_by(results: Path, student: str) -> str:
    try:
        return _marker(results, student).read_text()
    except OSError:
        return ""


def _pycache(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "__pycache__"]


def _watch(
    process: subprocess.Popen, students: list[str], results: Path, total_seconds: float
) -> str:
    """Wait for the process; stop it when one of its students' grading passes
    ``total_seconds``. Returns the reason it was stopped, or ``""``."""
    owner = str(process.pid)
    while process.poll() is None:
        for student in students:
            marker = _marker(results, student)
            running = (
                _taken_by(results, student) == owner
                and not (results / f"{student}.json").is_file()
            )
            if running and time.time() - marker.stat().st_mtime > total_seconds:
                _kill(process)
                return (
                    f"stopped: grading this student took longer than "
                    f"{total_seconds:g} s in total"
                )
        time.sleep(0.2)
    return ""


def _kill(process: subprocess.Popen) -> None:
    """Kill the grading process, its kernels and what they started (the grading
    process adopted their orphans: they are all below it)."""
    _sibling("grading_guard").kill_descendants(process.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _sibling(name: str) -> Any:
    """A module of the package: ``grpo_helpers.<name>`` here, the copy beside this
    file in the grading process (a script, which imports no part of the package)."""
    import importlib

    return importlib.import_module(f"{__package__}.{name}" if __package__ else name)


# ----------------------------------------------------------------------------------
# Inside the grading process
# ----------------------------------------------------------------------------------


def _drive(spec: dict[str, Any]) -> None:
    """Grade each student of ``spec`` in a folder of its own (see the module)."""
    from nbgrader.converters import Autograde, GenerateFeedback

    guard, hidden_tests = _sibling("grading_guard"), _sibling("hidden_tests")
    guard.become_subreaper()  # what a kernel leaves behind stays below this process
    course_dir, results = Path(spec["course"]), Path(spec["course"]) / "results"
    key = json.loads(Path(spec["key"]).read_text())
    sources = _teacher_sources(course_dir / "source" / spec["assignment"])
    budgets = {
        "graded": spec["function_seconds"],
        "cell": spec["cell_seconds"],
        "notebook": spec["notebook_seconds"],
        "margin": 60,
        "output_bytes": spec["limits"]["output_mb"] * 2**20,
    }
    work = Path(os.environ.pop("GRPO_GRADING_WORK", "") or tempfile.gettempdir())
    for name in ("OLDPWD", "_"):  # the teacher's shell: paths into the project
        os.environ.pop(name, None)
    teacher_env = dict(os.environ)
    for student in spec["students"]:
        if not _take(results, student, str(os.getpid())):
            continue  # another grading process has it
        root = Path(tempfile.mkdtemp(prefix="grpo-submission-"))  # the kernel's
        private = Path(tempfile.mkdtemp(prefix="grpo-grader-"))  # not the kernel's
        kernel = private / "kernel"  # the kernel's sockets and its watch file
        kernel.mkdir()
        watchdog = guard.Watchdog(
            kernel / "watch", max_processes=spec["limits"]["processes"]
        )
        outcome: dict[str, Any] = {}
        log: io.StringIO | None = None
        try:
            _prepare_root(root, private, spec, student)
            guard.write_kernel_guard(private / "ipython")
            config = _config(spec, student, root, private)
            config.Autograde.autograde_preprocessors = guard.preprocessors(
                key,
                sources,
                watchdog,
                budgets,
                hidden_tests.judge,
                cwd=root,
                log=private / "kernel.log",
                fresh=kernel,
            )
            os.environ.clear()
            os.environ.update(teacher_env)
            kernel_env = {
                **spec["kernel_env"],
                "PYTHONPATH": str(root),  # the kernel imports the copy
                "PWD": str(root),
                "IPYTHONDIR": str(private / "ipython"),  # the guard
                "GRPO_GRADING_WATCH": str(kernel / "watch"),
            }
            if spec["sandbox"]:
                _sandboxed_kernel(spec, root, private, kernel, kernel_env)
            else:
                os.environ.update(kernel_env)
            os.chdir(root)
            app = Autograde(coursedir=_coursedir(config), config=config)
            app.force = True
            log = _capture_errors(app)
            failure = ""
            try:
                app.start()
            except Exception as error:  # noqa: BLE001 - a notebook nbgrader gave up on
                failure = _summary(log.getvalue()) or str(error)
                failure += _kernel_said(private / "kernel.log")
            guard.kill_descendants()  # nothing of the submission outlives it
            if spec["feedback"]:
                feedback = GenerateFeedback(coursedir=_coursedir(config), config=config)
                feedback.force = True
                feedback.start()
            outcome = _collect(private, student, course_dir, spec["assignment"])
            for stem, reason in watchdog.stopped.items():
                outcome["notebooks"].setdefault(stem, {})["stopped"] = reason
            if failure:
                outcome["failed" if not outcome["notebooks"] else "failure"] = (
                    f"grading failed: {failure}"
                )
        except Exception as error:  # noqa: BLE001 - record it for this student, go on
            said = _summary(log.getvalue()) if log is not None else ""
            outcome = {"failed": f"grading failed: {said or error}"}
        finally:
            watchdog.close()
            guard.kill_descendants()
            guard.reap()
            os.chdir(work)
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(private, ignore_errors=True)
        (results / f"{student}.json").write_text(json.dumps(outcome))


def _sandboxed_kernel(
    spec: dict[str, Any],
    root: Path,
    private: Path,
    kernel: Path,
    kernel_env: dict[str, str],
) -> None:
    """Write the kernelspec that starts one student's kernel in its sandbox
    (:mod:`sandbox`), and point Jupyter at it and at ``kernel`` for the
    connection file and the sockets.

    Inside: ``root`` writable (the kernel's working folder, home and runs),
    ``kernel`` writable, and in the kernel's own ``/tmp`` (:data:`PROJECT_DIR`)
    the package, the data and the model cache's entries read-only (new cache
    entries land beside them), and the IPython guard. Nothing in ``root`` is a
    mount point, so nothing a notebook leaves there can redirect one. nbgrader's
    folders, the gradebook and the key stay in ``private`` and the course
    directory, which it does not see.
    """
    box = _sibling("sandbox")
    isolation = spec["sandbox"]
    project = Path(PROJECT_DIR)
    read_only: list[Any] = [(Path(spec["package"]), project / "grpo_helpers")]
    if Path(spec["data"]).is_dir():
        read_only.append((Path(spec["data"]), project / "data"))
    # IPython wants its folder writable: a fresh one in the kernel's own /tmp,
    # with the guard's startup file mounted read-only in it
    startup = "profile_default/startup/00-grpo-kernel-guard.py"
    read_only.append((private / "ipython" / startup, Path(IPYTHON_DIR) / startup))
    cache = Path(isolation["model_cache"])
    if cache.is_dir():
        for entry in sorted(cache.iterdir()):
            if entry.is_dir():
                read_only.append((entry, project / "cache" / "models" / entry.name))
    scripts = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{scripts}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(root),
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "HF_HUB_OFFLINE": "1",
        **{k: os.environ[k] for k in KEPT_ENV if k in os.environ},
        **kernel_env,
        "PYTHONPATH": str(project),  # the kernel imports the package there
        "GRPO_CACHE_DIR": str(project / "cache"),
        "GRPO_RUNS_ROOT": str(root / "runs"),
        "IPYTHONDIR": IPYTHON_DIR,
    }
    argv = box.command(
        isolation["bwrap"],
        [
            sys.executable,
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            "--HistoryManager.hist_file=:memory:",
        ],
        writable=[root, kernel],
        read_only=read_only,
        chdir=root,
        env=env,
        limits=box.Limits(**spec["limits"]),
        protected=[Path(p) for p in isolation["protected"]],
        sized_tmp=isolation["sized_tmp"],
    )
    kernelspec = private / "jupyter" / "kernels" / KERNEL_NAME
    kernelspec.mkdir(parents=True)
    (kernelspec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": argv,
                "display_name": "Python (grading sandbox)",
                "language": "python",
                "interrupt_mode": "message",  # a signal would reach bwrap
            }
        )
    )
    os.environ["JUPYTER_PATH"] = str(private / "jupyter")
    os.environ["JUPYTER_RUNTIME_DIR"] = str(kernel)


def _config(spec: dict[str, Any], student: str, root: Path, private: Path) -> Any:
    """nbgrader's settings for one student (its folders and the gradebook in
    ``private``; in the sandbox, the kernel of :func:`_sandboxed_kernel`)."""
    from traitlets.config import Config

    config = Config()
    config.CourseDirectory.root = str(private / "nbgrader")
    config.CourseDirectory.course_id = spec["course_id"]
    config.CourseDirectory.assignment_id = spec["assignment"]
    config.CourseDirectory.student_id = student
    config.CourseDirectory.db_url = f"sqlite:///{private / 'gradebook.db'}"
    config.Execute.timeout = spec["cell_seconds"]
    config.Execute.interrupt_on_timeout = True
    config.Execute.error_on_timeout = {
        "ename": "CellTimeoutError",
        "evalue": f"the cell ran past {spec['cell_seconds']} s and was stopped",
        "traceback": [],
    }
    # On a busy machine the kernel's last output of a cell can come more than
    # nbclient's 4 s after its reply; nbgrader then fails the whole notebook. Wait
    # longer, and go on with a warning.
    config.Execute.iopub_timeout = 15
    config.Execute.raise_on_iopub_timeout = False
    # not the notebook's kernelspec (nbgrader would restore the teacher's)
    config.Execute.kernel_name = KERNEL_NAME if spec["sandbox"] else PLAIN_KERNEL
    if spec["sandbox"]:
        # no network in the sandbox: ZeroMQ over Unix sockets in the kernel's folder
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = str(private / "kernel" / "ipc")
        config.KernelManager.connection_file = str(private / "kernel" / "kernel.json")
    config.Autograde.create_student = True
    config.Application.log_level = "WARN"
    return config


def _coursedir(config: Any) -> Any:
    from nbgrader.coursedir import CourseDirectory

    return CourseDirectory(config=config)


def _teacher_sources(folder: Path) -> dict[str, dict[str, str]]:
    """``{notebook: {grade_id: source}}`` of the teacher's graded cells."""
    import nbformat

    sources = {}
    for path in sorted(folder.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        sources[path.stem] = {
            c.metadata["nbgrader"]["grade_id"]: c.source
            for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade")
        }
    return sources


def _summary(log: str) -> str:
    """nbgrader's error log without its tracebacks (their frames and source)."""
    lines = [
        line
        for line in log.splitlines()
        if line.strip() and not line.startswith((" ", "Traceback", "---"))
    ]
    return " | ".join(lines)[:1500]


#: What ipykernel prints at every start, on its stderr (not worth repeating).
KERNEL_BANNER = (
    "NOTE: When using the",
    "To exit, you will have to",
    '"quit" from a client',
    "To read more about this",
    "To connect another client",
    "--existing",
)


def _kernel_said(path: Path) -> str:
    """The last lines a kernel wrote to its stdout and stderr, ipykernel's
    banner left out (where it failed to start, bubblewrap says why there)."""
    try:
        with open(path, "rb") as stream:
            stream.seek(max(0, path.stat().st_size - 4096))
            lines = stream.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    said = " | ".join(
        line.strip()
        for line in lines
        if line.strip() and not line.strip().startswith(KERNEL_BANNER)
    )
    return f" | the kernel said: {said[-500:]}" if said else ""


def _capture_errors(app: Any) -> io.StringIO:
    """Keep what ``app`` logs at error level (nbgrader says there why a notebook
    could not be graded)."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setLevel(logging.ERROR)
    app.log.addHandler(handler)
    return buffer


def _prepare_root(
    root: Path, private: Path, spec: dict[str, Any], student: str
) -> None:
    """The student's folder (``root``) and the grader's (``private``): the
    submitted notebooks and the gradebook go to ``private``. Without the
    sandbox, ``root`` gets a copy of the package and the data; in it, they are
    mounted read-only in the kernel's own ``/tmp`` (:func:`_sandboxed_kernel`)."""
    if not spec["sandbox"]:
        shutil.copytree(spec["package"], root / "grpo_helpers", ignore=_pycache)
        data = Path(spec["data"])
        if data.is_dir():
            shutil.copytree(data, root / "data", copy_function=_link_or_copy)
    shutil.copy(Path(spec["course"]) / "gradebook.db", private / "gradebook.db")
    target = private / "nbgrader" / "submitted" / student / spec["assignment"]
    target.mkdir(parents=True)
    for notebook in sorted((Path(spec["submissions"]) / student).glob("*.ipynb")):
        shutil.copy(notebook, target / notebook.name)


def _link_or_copy(source: str, target: str) -> None:
    """A hard link (no copy, and no path back to the project); a copy across
    file systems."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _collect(
    private: Path, student: str, course_dir: Path, assignment: str
) -> dict[str, Any]:
    """Scores and errors of one student's graded notebooks; keep the notebooks
    and the feedback in the course directory."""
    from nbgrader.api import Gradebook, MissingEntry

    autograded = private / "nbgrader" / "autograded" / student / assignment
    keep = course_dir / "autograded" / student
    keep.mkdir(parents=True, exist_ok=True)
    notebooks: dict[str, Any] = {}
    with Gradebook(f"sqlite:///{private / 'gradebook.db'}") as gradebook:
        for path in sorted(autograded.glob("*.ipynb")):
            try:
                record = gradebook.find_submission_notebook(
                    path.stem, assignment, student
                )
                grades = {g.name: [g.score, g.max_score] for g in record.grades}
            except MissingEntry:
                grades = {}
            errors, first_error = _cell_errors(path)
            notebooks[path.stem] = {
                "grades": grades,
                "errors": errors,
                "first_error": first_error,
            }
            shutil.copy(path, keep / path.name)
    html = private / "nbgrader" / "feedback" / student / assignment
    if html.is_dir():
        shutil.copytree(html, course_dir / "feedback" / student, dirs_exist_ok=True)
    return {"notebooks": notebooks}


def _cell_errors(path: Path) -> tuple[dict[str, str], str]:
    """``({grade_id: error}, first error of the notebook)`` of a graded notebook.

    A graded cell's error is ``"Type: message"``, followed by the first error of
    an earlier cell when there was one (a broken answer cell shows up in its
    check as a NameError; this says where it started).
    """
    import nbformat

    nb = nbformat.read(path, as_version=4)
    errors: dict[str, str] = {}
    first = earlier = ""
    for index, cell in enumerate(nb.cells):
        error = next(
            (
                f"{o['ename']}: {o['evalue']}"
                for o in cell.get("outputs", [])
                if o.get("output_type") == "error"
            ),
            None,
        )
        if error is None:
            continue
        where = f"cell {index}: {error}"[:300]
        first = first or where
        grader = cell.metadata.get("nbgrader", {})
        if grader.get("grade"):
            text = error[:400]
            if earlier:
                text += f" (after an earlier error, {earlier})"
            errors[grader["grade_id"]] = text
        else:
            earlier = earlier or where
    return errors, first


def main() -> int:
    """The grading process: the spec comes on stdin (no paths on its command
    line, which a submission could read)."""
    # jsonschema (under nbformat) compiles 38 grammars of rfc3987_syntax when it
    # is imported, for an "iri" format that no notebook schema uses: 2 s of every
    # grading process. Without it, jsonschema skips that format.
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
    _drive(json.loads(sys.stdin.read()))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["COLUMNS", "NO_SANDBOX", "TOTAL", "SandboxUnavailable", "grade"]
