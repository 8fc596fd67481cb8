"""The shared grading run: nbgrader grades notebook 03 handed in by eighteen
students (``grading_students.py``), each kernel in its sandbox, once per test
session.

:func:`grade_everyone` builds the student edition, writes each student's
submission, grades them all (the CLI, with ``--feedback``, two at a time) and
records what the run left besides the grades: the hashes of the course directory,
the submissions and the project's notebooks before and after, what a listener at
127.0.0.1 heard, whether a process of the teacher's survived, and the processes
left. ``tests/classroom/conftest.py``'s ``graded`` fixture runs it once for the
session's xdist workers (a file lock: the first worker that needs it grades, the
others wait and read its record) and hands the tests a :class:`Graded`.

The tests: ``tests/classroom/test_grading.py`` (each student's rows);
``test_sandbox.py`` and ``test_hidden_tests.py`` use the submissions, the listener
and the notebook's light imports too.
"""

from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pandas as pd
import psutil
from grading_students import (
    AST_TRANSFORMER,
    CALLER,
    CANCELS,
    CHEATS,
    CUSTOM_EXC,
    FLOOD,
    FORK_HOG,
    FRESH_COPY,
    HUNT,
    IN_A_PROCESS_POOL,
    INPUT_TRANSFORMER,
    LEFTOVER,
    LINGERER,
    MEMORY_HOG,
    ON_A_NEW_THREAD,
    PACKAGE_CALL,
    REBUILT,
    REIMPORT,
    SIGNALLER,
    SNOOPER_1,
    SNOOPER_2,
    STUB_2,
    SWALLOWS,
    VANDAL,
)

from grpo_helpers import cli
from grpo_helpers.classroom import course

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "03_group_advantages"  # two pure-numpy exercises: quick to grade
FUNCTION_SECONDS = 2  # the graded function's limit in the shared grading run
SLOW_CELL_SECONDS = 4  # fay's slow cell: longer than the function limit
#: What a lean submission imports (it may delete the notebook's other cells).
LIGHT_IMPORTS = """import math

import numpy as np

from grpo_helpers import advantages, datum, rewards
from grpo_helpers.classroom import self_checks
from grpo_helpers.results import evaluation
"""


#: Processes the grading run's kernels start may use at once (the fork hog's
#: limit; an honest kernel runs a few).
MAX_PROCESSES = 64
#: In the command line of every process the attacks leave (to look for survivors).
MARKER = f"grpo-attack-{uuid.uuid4().hex}"
#: The grading run's outputs in the course directory: what changes legitimately.
OUTPUTS = ("grades.csv", "autograded", "feedback", "results")


def tagged(nb, tag):
    """The cells of ``nb`` tagged ``tag``."""
    return [c for c in nb.cells if tag in c.metadata.get("tags", [])]


def practically_endless(seconds):
    """A busy loop that gives up after ``seconds`` (so that a broken limit fails
    the test instead of hanging it), swallowing exceptions as it goes."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            pass
        except Exception:  # noqa: BLE001 - a loop that swallows exceptions
            continue
    return 2


def submission(notebooks: Path, answers: list[str], lean: bool = True, slow=""):
    """The student edition of notebook 03 with its exercise cells replaced by
    ``answers``. ``lean``: only light imports, the exercises and their graded
    cells (a student may delete cells; the graded ones are restored anyway).
    ``slow``: code run before the imports, in the same cell (the imports, which
    everything after needs, finish only after it)."""
    nb = nbformat.read(notebooks / f"{NOTEBOOK}.ipynb", as_version=4)
    for cell, answer in zip(tagged(nb, "exercise"), answers, strict=True):
        cell.source = answer
    if lean:
        kept = [
            c
            for c in nb.cells
            if "exercise" in c.metadata.get("tags", [])
            or c.metadata.get("nbgrader", {}).get("grade")
        ]
        imports = nbformat.v4.new_code_cell(slow + LIGHT_IMPORTS)
        nb.cells = [imports, *kept]
    return nb


def solution(name):
    """The teacher's solution of exercise ``name`` of notebook 03, as a cell."""
    return course._solution_block(NOTEBOOK, name)


def visible_success_advantages():
    """``{(group_size, num_successes, scale): value}`` of the visible cases."""
    success_advantage = course._load_solutions(NOTEBOOK).success_advantage
    cases = [
        (g, k, s) for g in (2, 4, 8, 16) for k in range(1, g) for s in ("none", "group")
    ]
    return {case: success_advantage(*case) for case in cases}


class Listener:
    """A TCP server at 127.0.0.1 that records every connection it gets."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.heard: list[str] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._done.is_set():
            try:
                line, _ = self.server.accept()
            except OSError:
                continue
            with line:
                line.settimeout(2)
                try:
                    self.heard.append(line.recv(100).decode(errors="replace"))
                except OSError:
                    self.heard.append("(a connection)")

    def close(self) -> list[str]:
        self._done.set()
        self._thread.join()
        self.server.close()
        return self.heard


def hashes(*folders: Path) -> dict[str, str]:
    """``{path: sha256}`` of every file under ``folders``, the grading run's
    outputs in a course directory left out."""
    found = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.relative_to(folder).parts[0] in OUTPUTS or not path.is_file():
                continue
            found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(
        p for p in before.keys() | after.keys() if before.get(p) != after.get(p)
    )


def alive(pid: int) -> str:
    """The status of process ``pid`` ("running", "sleeping", "stopped"...)."""
    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return "gone"


def survivors() -> list[str]:
    """Command lines of the processes whose command line holds :data:`MARKER`."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if MARKER in line:
            found.append(line[-200:])
    return found


def students(notebooks: Path, course_dir: Path, port: int, bystander: int):
    """``{student: notebook}``: the honest students, the cheats of issue 22, the
    attacks of issue 38 and those of issue 47."""
    solutions = [solution("smallest_group_size"), solution("success_advantage")]
    visible = visible_success_advantages()
    cheats = dict(CHEATS)
    cheats["dora"] = [
        CHEATS["dora"][0],
        f"VISIBLE = {visible!r}\n\n\n"
        "def success_advantage(group_size, num_successes, scale='none'):\n"
        "    return VISIBLE.get((group_size, num_successes, scale))\n",
    ]
    endless = (
        "def smallest_group_size(pass_rate, max_degenerate):\n"
        "    while True:\n"
        "        pass\n"
    )
    slow = textwrap.dedent(f"""
        import json
        import os
        import time

        import grpo_helpers
        from grpo_helpers.settings import SETTINGS

        time.sleep({SLOW_CELL_SECONDS})  # a slow import on a loaded machine
        seen = {{
            "package": grpo_helpers.__file__,
            "project_root": str(SETTINGS.project_root),
            "solutions_exist": (SETTINGS.project_root / "notebooks/solutions").exists(),
            "cwd": os.getcwd(),
        }}
        print("fay saw:", json.dumps(seen))

    """)
    leftover = LEFTOVER.format(course=str(course_dir), notebook=NOTEBOOK, marker=MARKER)
    key = course_dir / course.KEY
    ada = course_dir.parent / "submissions" / "ada" / f"{NOTEBOOK}.ipynb"
    sources = sorted((course_dir / "source" / course.ASSIGNMENT).glob("*.ipynb"))
    solutions_file = course.SOLUTIONS / f"{NOTEBOOK}.py"
    gradebook = course_dir / "gradebook.db"

    def given(**constants):
        return "".join(f"{k} = {v!r}\n" for k, v in constants.items()) + "\n\n"

    snooped = [str(key), str(solutions_file), str(ada), str(gradebook)]
    vandalised = [str(p) for p in (gradebook, key, ada, *sources)]
    new_files = [
        str(ROOT / "notebooks" / "vandal-was-here.txt"),
        str(course_dir / "vandal-was-here.txt"),
    ]
    lingered = [
        str(course_dir / "lingerer-was-here.txt"),
        str(course_dir / "grades.csv"),
    ]
    attacks = {
        "gus": [FRESH_COPY, REBUILT],
        "hal": [REIMPORT, HUNT.format(visible=visible)],
        "ivy": [INPUT_TRANSFORMER, AST_TRANSFORMER],
        "kit": [CUSTOM_EXC + leftover, STUB_2],
        "kim": [SWALLOWS, solutions[1]],
        "lee": [CANCELS, solutions[1]],
        # issue 47
        "sam": [given(TARGETS=snooped, VISIBLE=visible) + SNOOPER_1, SNOOPER_2],
        "val": [given(TARGETS=vandalised, NEW_FILES=new_files) + VANDAL, STUB_2],
        "cal": [given(PORT=port) + CALLER, FLOOD],
        "sid": [given(BYSTANDER=bystander) + SIGNALLER, STUB_2],
        "lin": [given(TARGETS=lingered, MARKER=MARKER) + LINGERER, STUB_2],
        "tom": [ON_A_NEW_THREAD, IN_A_PROCESS_POOL],
        "ezra": [MEMORY_HOG, FORK_HOG],
    }
    return {
        "ada": submission(notebooks, solutions, lean=False),
        **{name: submission(notebooks, answers) for name, answers in cheats.items()},
        "eve": submission(notebooks, [endless, PACKAGE_CALL]),
        "fay": submission(notebooks, solutions, slow=slow),
        **{name: submission(notebooks, answers) for name, answers in attacks.items()},
    }


def grade_everyone(shared: Path) -> dict:
    """Build the edition in ``shared``, grade every student there (the CLI, with
    --feedback, two at a time) and return what the run left besides the grades."""
    out, course_dir = shared / "student", shared / "course"
    notebooks = course.build_student(out, course_dir)
    folder = shared / "submissions"
    listener = Listener()
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        handed_in = students(notebooks, course_dir, listener.port, bystander.pid)
        for name, nb in handed_in.items():
            (folder / name).mkdir(parents=True)
            nbformat.write(nb, folder / name / f"{NOTEBOOK}.ipynb")
        project = ROOT / "notebooks"
        before = hashes(course_dir, folder, project)
        code = cli.main(
            [
                "grade",
                str(folder),
                "--course",
                str(course_dir),
                "--feedback",
                "--function-seconds",
                str(FUNCTION_SECONDS),
                "--max-processes",
                str(MAX_PROCESSES),
                "--workers",
                "2",
            ]
        )
        left = [
            " ".join(p.cmdline())[-200:]
            for p in psutil.Process().children(recursive=True)
            if p.pid != bystander.pid and living(p)
        ]
        seen = {
            "code": code,
            "changed": changed(before, hashes(course_dir, folder, project)),
            "heard": listener.close(),
            "bystander": alive(bystander.pid),
            "survivors": survivors(),
            "left": left,
        }
    finally:
        listener.close()
        bystander.kill()
        bystander.wait()
        (ROOT / "notebooks" / "vandal-was-here.txt").unlink(missing_ok=True)
    return seen


def living(process) -> bool:
    """Whether ``process`` still runs (a zombie does not)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@dataclass
class Graded:
    """One grading run of every student: the grades file, the course directory
    and what the run left (recorded by the worker that ran it)."""

    grades: pd.DataFrame
    course_dir: Path
    seen: dict

    def printed(self, student: str) -> str:
        """What ``student``'s graded notebook printed (its stream outputs)."""
        path = self.course_dir / "autograded" / student / f"{NOTEBOOK}.ipynb"
        nb = nbformat.read(path, as_version=4)
        return "".join(
            o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
        )


def student_rows(grades, student):
    """``student``'s rows of the grades file (its TOTAL apart), by exercise."""
    mine = grades[(grades["student"] == student) & (grades["exercise"] != "TOTAL")]
    return mine.set_index("exercise")
