"""The grader's fixtures, shared by the test files of ``tests/classroom/``.

* ``edition``: the student edition and its course directory, built once for the
  session (``test_course_edition.py`` reads it, ``test_sandbox.py`` grades a
  submission in it);
* ``needs_sandbox``: skips a test where no sandbox starts (not Linux, user
  namespaces blocked as on Ubuntu 24.04 or in Docker), with the reason and the
  fix; ``GRPO_REQUIRE_SANDBOX=1`` (``.ci/run`` sets it) makes that a failure;
* ``graded``: nbgrader's one grading run of notebook 03 handed in by eighteen
  students (``tests/helpers/grading_runs.py``), shared by the session's xdist
  workers under a file lock: the first worker that needs it grades, the others
  wait and read its record. ``test_grading.py`` asserts each student's rows.
"""

from __future__ import annotations

import json
import os
import shutil
from functools import cache

import pandas as pd
import pytest

from grpo_helpers.classroom import course, sandbox

#: Set to 1 where grading must work (CI): no sandbox is then a failure, not a skip.
REQUIRE = "GRPO_REQUIRE_SANDBOX"


@cache
def _sandbox_check() -> sandbox.Check:
    return sandbox.check()


def skip_without_sandbox() -> None:
    """Skip (or, with ``GRPO_REQUIRE_SANDBOX=1``, fail) where no sandbox starts."""
    found = _sandbox_check()
    if found.works:
        return
    why = f"no sandbox works here: {found.why}. {sandbox.HOW_TO_FIX}"
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{REQUIRE}=1 and {why}")
    pytest.skip(why)


@pytest.fixture
def needs_sandbox():
    """Skip the test where no sandbox starts (see :func:`skip_without_sandbox`)."""
    skip_without_sandbox()


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

    skip_without_sandbox()
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
