"""The grader's fixtures, shared by the test files of ``tests/classroom/``.

* ``edition``: the student edition and its course directory, built once for the
  session (``test_course_edition.py`` reads it, ``test_sandbox.py`` grades a
  submission in it);
* ``graded``: nbgrader's one grading run of notebook 03 handed in by eighteen
  students (``tests/helpers/grading_runs.py``), shared by the session's xdist
  workers under a file lock: the first worker that needs it grades, the others
  wait and read its record. ``test_grading.py`` asserts each student's rows.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import pandas as pd
import pytest

from grpo_helpers.classroom import course


@pytest.fixture(scope="session")
def edition(tmp_path_factory):
    """``(the edition's folder, its notebooks folder, the course directory)``."""
    base = tmp_path_factory.mktemp("edition")
    out, course_dir = base / "student", base / "course"
    notebooks = course.build_student(out, course_dir)
    return out, notebooks, course_dir


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """One grading run (the CLI, with --feedback) of eighteen students, shared by
    the session's xdist workers: the first to need it grades, the other waits."""
    from filelock import FileLock
    from grading_runs import Graded, grade_everyone

    if not sys.platform.startswith("linux"):
        pytest.skip("grade runs each kernel in a sandbox, which is Linux's")
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # one folder for every worker of this session
    shared = base / "graded-notebook-03"
    record = shared / "seen.json"
    with FileLock(str(base / "graded-notebook-03.lock")):
        if not record.is_file():
            shutil.rmtree(shared, ignore_errors=True)
            shared.mkdir()
            record.write_text(json.dumps(grade_everyone(shared)))
    seen = json.loads(record.read_text())
    assert seen["code"] == 0
    course_dir = shared / "course"
    grades = pd.read_csv(course_dir / "grades.csv", keep_default_na=False)
    return Graded(grades, course_dir, seen)
