"""nbgrader grades notebook 03 handed in by eighteen students, each kernel in its
sandbox, and cannot be gamed (``grading.py``).

One grading run (the CLI, with ``--feedback``, two students at a time), shared by
the tests below and by the session's xdist workers (``conftest.py``'s ``graded``;
the students: ``tests/helpers/grading_students.py``, the run:
``tests/helpers/grading_runs.py``); each test asserts its own student's rows:

* the solutions get full marks; delegating to the solutions, reading the
  solution files, patching ``checks``, hard-coding the visible examples and
  calling the package's own function score zero; an endless loop is stopped and
  reported while the notebook goes on; a correct submission with a cell slower
  than the function limit (a slow import on a loaded machine) gets full marks;
  the submissions run where the solutions are not;
* each attack of issue 38 scores zero: a fresh copy, a rebuilt function, a
  re-import, a hunt for the expected values, IPython's hooks, a swallowed or
  cancelled alarm, a process left running;
* each attack of issue 47 scores zero and changes nothing (the snooper, the
  vandal, the caller, the signaller, the lingerer, the threader, the hog: the
  course directory's hashes, a listener at 127.0.0.1, a process of the teacher's
  and the processes left are recorded around the run); the vandal can write
  nothing that every kernel shares (the package, the data, the model cache, the
  Python installation);
* the grades file has a row per exercise and a total per student;
  ``--feedback`` writes each student's feedback;
* the per-student time budget stops a grading process that hangs (a stand-in
  process, no nbgrader), and the next student is graded.

The hidden tests in this process: ``test_hidden_tests.py``; the sandbox:
``test_sandbox.py``; the watchdog and the subreaper: ``test_grading_guard.py``.
"""

from __future__ import annotations

import ast
import json
import sys
import time
from pathlib import Path

import pytest
from grading_runs import (
    FUNCTION_SECONDS,
    MAX_PROCESSES,
    NOTEBOOK,
    ROOT,
    SLOW_CELL_SECONDS,
    student_rows,
)

from grpo_helpers.classroom import grading

# ----------------------------------------------------------------------------------
# The solutions, the cheats of issue 22 and the attacks of issue 38
# ----------------------------------------------------------------------------------


@pytest.mark.notebook
def test_the_solutions_get_full_marks(graded):
    grades = graded.grades
    ada = student_rows(grades, "ada")
    assert list(ada["points"]) == [1.0, 1.0]
    assert list(ada["error"]) == ["", ""]


@pytest.mark.notebook
def test_delegating_to_the_solutions_scores_zero(graded):
    carl = student_rows(graded.grades, "carl")
    assert carl.loc["exercise-1", "points"] == 0
    assert "FileNotFoundError: No solutions" in carl.loc["exercise-1", "error"]


@pytest.mark.notebook
def test_reading_the_solution_files_scores_zero(graded):
    carl = student_rows(graded.grades, "carl")
    assert carl.loc["exercise-2", "points"] == 0
    error = carl.loc["exercise-2", "error"]
    assert "NameError: name 'success_advantage' is not defined" in error
    assert "FileNotFoundError" in error  # the earlier error: the file is not there


@pytest.mark.notebook
def test_patching_checks_scores_zero(graded):
    dora = student_rows(graded.grades, "dora")
    assert dora.loc["exercise-1", "points"] == 0
    assert "hidden test of smallest_group_size" in dora.loc["exercise-1", "error"]
    assert "still the stub" in dora.loc["exercise-1", "error"]


@pytest.mark.notebook
def test_hard_coding_the_visible_examples_scores_zero(graded):
    dora = student_rows(graded.grades, "dora")
    assert dora.loc["exercise-2", "points"] == 0
    assert "hidden test of success_advantage" in dora.loc["exercise-2", "error"]


@pytest.mark.notebook
def test_calling_the_package_function_the_exercise_rules_out_scores_zero(graded):
    eve = student_rows(graded.grades, "eve")
    assert eve.loc["exercise-2", "points"] == 0
    assert (
        "without grpo_helpers.advantages.group_advantages"
        in (eve.loc["exercise-2", "error"])
    )


@pytest.mark.notebook
def test_an_endless_loop_is_stopped_and_reported(graded):
    eve = student_rows(graded.grades, "eve")
    assert eve.loc["exercise-1", "points"] == 0
    assert f"took longer than {FUNCTION_SECONDS} s" in eve.loc["exercise-1", "error"]
    # the notebook went on: exercise 2 was graded (it fails for its own reason)
    assert "hidden test of success_advantage" in eve.loc["exercise-2", "error"]


@pytest.mark.notebook
def test_a_correct_submission_with_a_slow_cell_gets_full_marks(graded):
    """fay's import cell takes longer than the graded function's limit (a torch
    import on a loaded machine), and every later cell needs it; only the graded
    function is timed."""
    fay = student_rows(graded.grades, "fay")
    assert list(fay["points"]) == [1.0, 1.0]
    assert SLOW_CELL_SECONDS > FUNCTION_SECONDS


@pytest.mark.notebook
def test_submissions_run_where_the_solutions_are_not(graded):
    (line,) = [t for t in graded.printed("fay").splitlines() if t.startswith("fay saw")]
    seen = json.loads(line.partition(":")[2])
    assert not seen["solutions_exist"]
    for key in ("package", "project_root", "cwd"):
        assert not Path(seen[key]).resolve().is_relative_to(ROOT), key


#: The students of issue 38's attacks (built in ``graded``).
ATTACKERS = ["gus", "hal", "ivy", "kim", "kit", "lee"]
FORBIDDEN = "which this exercise asks you to write without"


@pytest.mark.notebook
def test_a_fresh_copy_or_a_rebuilt_forbidden_function_scores_zero(graded):
    gus = student_rows(graded.grades, "gus")
    assert list(gus["points"]) == [0.0, 0.0]
    for exercise, function in [
        ("exercise-1", "degenerate_probability"),
        ("exercise-2", "group_advantages"),
    ]:
        error = gus.loc[exercise, "error"]
        assert f"reached grpo_helpers.advantages.{function}" in error, error
        assert FORBIDDEN in error


@pytest.mark.notebook
def test_a_re_import_of_a_forbidden_function_scores_zero(graded):
    hal = student_rows(graded.grades, "hal")
    assert hal.loc["exercise-1", "points"] == 0
    error = hal.loc["exercise-1", "error"]
    assert "reached grpo_helpers.advantages.degenerate_probability" in error


@pytest.mark.notebook
def test_hunting_for_the_expected_values_finds_none_and_scores_zero(graded):
    """hal looks for them on the stack, in IPython's history and line cache and in
    every database under the working folder: none holds one, so the hidden cases
    get None (the visible ones, hard-coded, pass)."""
    hal = student_rows(graded.grades, "hal")
    assert hal.loc["exercise-2", "points"] == 0
    error = hal.loc["exercise-2", "error"]
    assert "hidden test of success_advantage, case 1 of 8" in error
    assert "returned None" in error


@pytest.mark.notebook
def test_transformers_of_an_earlier_cell_do_not_change_the_graded_cells(graded):
    """ivy's input transformer (exercise 1) and AST transformer (exercise 2)
    empty the forbid lists of the graded cells: they are not applied there."""
    ivy = student_rows(graded.grades, "ivy")
    assert list(ivy["points"]) == [0.0, 0.0]
    assert (
        "without grpo_helpers.advantages.degenerate_probability"
        in (ivy.loc["exercise-1", "error"])
    )
    assert (
        "without grpo_helpers.advantages.group_advantages"
        in (ivy.loc["exercise-2", "error"])
    )


@pytest.mark.notebook
def test_a_custom_exception_handler_does_not_silence_the_graded_cells(graded):
    """kit's first cell silences every error (``set_custom_exc``); the answers
    are stubs, so every check fails, graded cells included."""
    kit = student_rows(graded.grades, "kit")
    assert list(kit["points"]) == [0.0, 0.0]
    for exercise in ("exercise-1", "exercise-2"):
        assert "still the stub" in kit.loc[exercise, "error"]


@pytest.mark.notebook
@pytest.mark.parametrize("student", ["kim", "lee"])
def test_a_loop_that_swallows_or_cancels_the_alarm_is_killed(graded, student):
    """kim's loop catches BaseException, lee's cancels the timer: the grading
    process kills the kernel a few seconds past the limit (not after the cell's
    900 s or the student's hour); the notebook scores nothing after it."""
    rows = student_rows(graded.grades, student)
    assert list(rows["points"]) == [0.0, 0.0]
    for exercise in ("exercise-1", "exercise-2"):
        error = rows.loc[exercise, "error"]
        assert "stopped: a self-check ran past its time limit" in error, error
        assert "its kernel was killed" in error


@pytest.mark.notebook
def test_a_process_left_running_cannot_rewrite_the_grades(graded):
    """kit's notebook also starts a process in a session of its own that
    rewrites kit's results file and appends to the grades file, again and again:
    it is killed when the notebook's execution ends."""
    assert list(student_rows(graded.grades, "kit")["points"]) == [0.0, 0.0]
    assert "kit's forger runs: True" in graded.printed("kit")  # it ran
    assert graded.seen["survivors"] == []
    assert "forged" not in (graded.course_dir / "grades.csv").read_text()


# ----------------------------------------------------------------------------------
# Issue 47: students who attack the machine or the watch, in the same run
# ----------------------------------------------------------------------------------

#: The students of issue 47's attacks (built in ``graded``).
INTRUDERS = ["cal", "ezra", "lin", "sam", "sid", "tom", "val"]


def _said(graded, student, opening):
    """The value ``student`` printed after ``opening`` (a Python literal)."""
    lines = [t for t in graded.printed(student).splitlines() if t.startswith(opening)]
    assert len(lines) == 1, (student, graded.printed(student)[-2000:])
    return ast.literal_eval(lines[0][len(opening) :].strip())


@pytest.mark.notebook
def test_the_snooper_reads_nothing_outside_its_folder_and_scores_zero(graded):
    """sam reads the key, the solutions file, the gradebook and ada's submission
    by their absolute paths, and looks for them walking up from the package, its
    working folder and the Python installation; it would answer with what it
    read. Nothing is there, and no file it holds open leads out."""
    assert _said(graded, "sam", "the snooper read:") == []
    # the only file open in its sandbox is its kernel's own output (not the
    # grading process's log, which it could read back through /proc/self/fd)
    held = _said(graded, "sam", "the snooper holds:")
    assert held and all(Path(h).name == "kernel.log" for h in held), held
    assert list(student_rows(graded.grades, "sam")["points"]) == [0.0, 0.0]


@pytest.mark.notebook
def test_the_vandal_changes_nothing_and_scores_zero(graded):
    """val appends to the gradebook, the key, ada's submission and the source
    notebooks, writes a new file into the course directory and the project's
    notebooks, and makes the grader's watch file (in its kernel's folder) a link
    to the key: every file of the course directory, the submissions and the
    project's notebooks is byte for byte what it was (its hash)."""
    assert _said(graded, "val", "the vandal wrote:") == []
    assert "the vandal linked:" in graded.printed("val")
    assert graded.seen["changed"] == []
    assert list(student_rows(graded.grades, "val")["points"]) == [0.0, 0.0]


@pytest.mark.notebook
def test_the_vandal_can_write_nothing_the_next_kernel_imports(graded):
    """val asks, writing nothing, whether it could write the package, the data,
    the model cache's entries and the Python installation that every student's
    kernel shares: each is read-only in its sandbox, its own folder is not."""
    checked = _said(graded, "val", "the vandal checked:")
    assert any(p.endswith("/grpo_helpers") for p in checked), checked
    assert any(p.endswith("/data") for p in checked), checked
    assert any("site-packages" in p for p in checked), checked
    assert _said(graded, "val", "the vandal could write:") == []
    assert _said(graded, "val", "the vandal could write its folder:") is True


@pytest.mark.notebook
def test_the_caller_reaches_no_network_and_scores_zero(graded):
    """cal connects to a port the test listens on at 127.0.0.1 and resolves a
    host name: the listener hears nothing, no name resolves."""
    got = _said(graded, "cal", "the caller got:")
    assert got[0].startswith("no connection"), got
    assert got[1].startswith("no name resolution"), got
    assert graded.seen["heard"] == []
    assert list(student_rows(graded.grades, "cal")["points"]) == [0.0, 0.0]


@pytest.mark.notebook
def test_a_notebook_that_prints_too_much_is_stopped(graded):
    """cal's second cell prints 25 MB: its kernel is killed, nothing of it is kept
    and the rest of the notebook scores 0."""
    cal = student_rows(graded.grades, "cal")
    error = cal.loc["exercise-2", "error"]
    assert "the notebook printed more than 20 MB" in error, error
    notebook = graded.course_dir / "autograded" / "cal" / f"{NOTEBOOK}.ipynb"
    assert notebook.stat().st_size < 2**20


@pytest.mark.notebook
def test_the_signaller_reaches_no_process_of_the_teacher_and_scores_zero(graded):
    """sid stops and kills its parent, a process of the teacher's (given by its
    PID) and every process it can list: it lists only its own sandbox (its
    parent there is the sandbox's init, which ignores it), the teacher's process
    runs on, and grading completed."""
    sent = _said(graded, "sid", "the signaller sent:")
    assert {int(s.split()[1]) for s in sent} <= {1}, sent
    assert graded.seen["bystander"] in ("sleeping", "running")
    assert list(student_rows(graded.grades, "sid")["points"]) == [0.0, 0.0]


@pytest.mark.notebook
def test_the_lingerer_leaves_no_process_and_writes_nothing(graded):
    """lin starts a detached process that waits 3 s, then writes into the course
    directory again and again: nothing is written, and no process that an
    attack started (nor any process of the grading) is left."""
    assert "the lingerer left a process" in graded.printed("lin")
    assert not (graded.course_dir / "lingerer-was-here.txt").exists()
    assert "lingerer" not in (graded.course_dir / "grades.csv").read_text()
    assert graded.seen["survivors"] == []
    assert graded.seen["left"] == []
    assert list(student_rows(graded.grades, "lin")["points"]) == [0.0, 0.0]


@pytest.mark.notebook
def test_the_threader_gets_nothing_from_a_thread_or_a_process_pool(graded):
    """tom runs a copy of the forbidden function, loaded before the hidden test,
    on a thread his answer starts (only the watch set on new threads sees it);
    and the package's own function in a process pool whose worker started
    before the hidden test (which no process start reveals)."""
    tom = student_rows(graded.grades, "tom")
    assert list(tom["points"]) == [0.0, 0.0]
    error = tom.loc["exercise-1", "error"]
    assert "reached grpo_helpers.advantages.degenerate_probability" in error, error
    error = tom.loc["exercise-2", "error"]
    assert "other process(es) of the notebook were running" in error, error


@pytest.mark.notebook
def test_the_hog_is_stopped_and_the_next_student_graded(graded):
    """ezra asks for 16 GiB (past the 4 GiB limit), then forks until refused
    (the sandbox's process limit, or the watchdog's count where that does not
    bind, as for root); both cells score 0, and fay, graded next, gets full
    marks."""
    ezra = student_rows(graded.grades, "ezra")
    assert list(ezra["points"]) == [0.0, 0.0]
    assert "the hog was refused memory" in graded.printed("ezra")
    assert "MemoryError" in ezra.loc["exercise-1", "error"]
    error = ezra.loc["exercise-2", "error"]
    refused = "the hog was refused after" in graded.printed("ezra")
    stopped = f"it ran more than {MAX_PROCESSES} processes" in error
    assert refused or stopped, error
    assert "never refused" not in graded.printed("ezra")
    assert list(student_rows(graded.grades, "fay")["points"]) == [1.0, 1.0]


@pytest.mark.notebook
def test_the_grades_file_has_a_row_per_exercise_and_a_total_per_student(graded):
    grades = graded.grades
    assert list(grades.columns) == grading.COLUMNS
    students = sorted(["ada", "carl", "dora", "eve", "fay", *ATTACKERS, *INTRUDERS])
    assert sorted(set(grades["student"])) == students
    for student in students:
        mine = grades[grades["student"] == student]
        assert list(mine["exercise"]) == ["exercise-1", "exercise-2", "TOTAL"]
        total = mine.iloc[-1]
        assert total["points"] == mine.iloc[:2]["points"].sum()
        assert total["max_points"] == 2.0
    totals = grades[grades["exercise"] == "TOTAL"].set_index("student")["points"]
    assert totals.to_dict() == {
        "ada": 2.0,
        "carl": 0.0,
        "dora": 0.0,
        "eve": 0.0,
        "fay": 2.0,
        **dict.fromkeys(ATTACKERS + INTRUDERS, 0.0),
    }


@pytest.mark.notebook
def test_feedback_is_written_for_every_student(graded):
    grades, course_dir = graded.grades, graded.course_dir
    for student, points in [("ada", "2.0 / 2.0"), ("eve", "0.0 / 2.0")]:
        html = course_dir / "feedback" / student / f"{NOTEBOOK}.html"
        text = html.read_text()
        assert f"Score: {points}" in text
    assert sorted(p.name for p in (course_dir / "feedback").iterdir()) == sorted(
        set(grades["student"])
    )


# ----------------------------------------------------------------------------------
# The per-student time budget (a stand-in for the grading process)
# ----------------------------------------------------------------------------------

HANGS = """
import json, os, sys, time
from pathlib import Path
spec = json.loads(sys.stdin.read())
results = Path(spec["course"]) / "results"
(results / (spec["students"][0] + ".started")).write_text(str(os.getpid()))
time.sleep(10)  # long past the total (bounded: a watchdog that fails, fails the test)
"""


def test_a_student_past_the_total_is_stopped_and_the_next_graded(tmp_path, monkeypatch):
    results = tmp_path / "results"
    results.mkdir()
    command = [sys.executable, "-c", HANGS]
    monkeypatch.setattr(grading, "DRIVER", command)
    spec = {"students": ["x", "y"], "course": str(tmp_path)}
    started = time.perf_counter()
    grading._run_drivers(spec, results, total_seconds=0.5)
    for student in ("x", "y"):
        outcome = json.loads((results / f"{student}.json").read_text())
        assert "longer than 0.5 s in total" in outcome["stopped"]
    assert time.perf_counter() - started < 30


# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("sandboxed", [False, True])
def test_grading_names_its_kernel_not_the_notebooks(tmp_path, sandboxed):
    """nbgrader runs the kernel grading names, not the one a notebook's kernelspec
    names (the project's, which a grading machine need not have installed):
    ``test_sandbox.py``'s --no-sandbox test grades where it is not installed."""
    spec = {
        "course_id": "course",
        "assignment": "assignment",
        "cell_seconds": 9,
        "sandbox": {"bwrap": "bwrap"} if sandboxed else None,
    }
    config = grading._config(spec, "ada", tmp_path / "root", tmp_path / "private")
    want = grading.KERNEL_NAME if sandboxed else grading.PLAIN_KERNEL
    assert config.Execute.kernel_name == want
