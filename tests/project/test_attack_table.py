"""``docs/teaching.md``'s table of attacks names tests that exist, and every attack
of the shared grading run (issue 55: the table cannot go stale silently).

The section "Which layer stops which attack" has one row per attack: who tries
what, the tests that hold it (``file.py::test_name`` or ``...[id]``, files of
``tests/classroom/``), the layer that stops it in the sandbox, whether the sandbox
alone would, and the layer that stops it with ``--no-sandbox``. Here, read with
``ast`` (nothing is imported or run):

* every test a row names is a function of that file, and its ``[id]`` one of the
  file's strings;
* every row has its five cells and says whether the sandbox alone stops it;
* every student of the shared grading run, and every test of
  ``test_grading.py`` but those that grade no attack, is in the table.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "teaching.md"
CLASSROOM = ROOT / "tests" / "classroom"
HEADING = "### Which layer stops which attack"
#: A test as a row names it: ``test_grading.py::test_name[id]``.
NAMED = re.compile(r"`(test_\w+\.py)::(test_\w+)(?:\[([^\]`]+)\])?`")
#: The tests of test_grading.py that grade no attack (the honest students, the
#: grades file, the feedback, the kernel's name).
NO_ATTACK = {
    "test_the_solutions_get_full_marks",
    "test_a_correct_submission_with_a_slow_cell_gets_full_marks",
    "test_the_grades_file_has_a_row_per_exercise_and_a_total_per_student",
    "test_feedback_is_written_for_every_student",
    "test_grading_names_its_kernel_not_the_notebooks",
}
#: The cheats of issue 22 (test_grading.py lists the attackers of issues 38 and 47).
CHEATS = ["carl", "dora", "eve"]


def rows() -> list[list[str]]:
    """The table's rows below its header, each as its cells."""
    text = PAGE.read_text()
    assert HEADING in text, f"docs/teaching.md has no section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n#", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


@cache
def tree(name: str) -> ast.Module:
    return ast.parse((CLASSROOM / name).read_text())


def functions(name: str) -> set[str]:
    """The top-level functions of ``tests/classroom/<name>``."""
    return {n.name for n in tree(name).body if isinstance(n, ast.FunctionDef)}


def strings(name: str) -> set[str]:
    """Every string constant of ``tests/classroom/<name>``."""
    return {
        n.value
        for n in ast.walk(tree(name))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def constant(name: str, variable: str):
    """The literal value of a module-level assignment of ``tests/classroom/<name>``."""
    for node in tree(name).body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", "") == variable for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} assigns no {variable}")


ROWS = rows()


def test_the_table_has_a_row_per_attack_and_five_cells_each():
    assert len(ROWS) >= 30, len(ROWS)
    for row in ROWS:
        assert len(row) == 5, row
        alone = row[3]
        assert alone.startswith(("yes", "no")), f"{row[0]}: sandbox alone? {alone!r}"


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row[0][:40])
def test_every_test_a_row_names_exists(row):
    named = NAMED.findall(row[1])
    assert named, f"{row[0]}: names no test"
    assert len(named) == row[1].count("::"), f"{row[0]}: a test name unread"
    for file, function, case in named:
        assert (CLASSROOM / file).is_file(), f"{row[0]}: no tests/classroom/{file}"
        assert function in functions(file), f"{row[0]}: {file} has no {function}"
        if case:
            assert case in strings(file), f"{row[0]}: {file} has no case {case!r}"


def test_every_attack_of_the_grading_run_is_in_the_table():
    students = CHEATS + constant("test_grading.py", "ATTACKERS")
    students += constant("test_grading.py", "INTRUDERS")
    attacks = " ".join(row[0] for row in ROWS)
    missing = [s for s in students if not re.search(rf"\b{s}\b", attacks)]
    assert not missing, f"students of the grading run not in the table: {missing}"
    named = {function for row in ROWS for _, function, _ in NAMED.findall(row[1])}
    tests = {f for f in functions("test_grading.py") if f.startswith("test_")}
    assert tests >= NO_ATTACK, NO_ATTACK - tests
    missing = sorted(tests - NO_ATTACK - named)
    assert not missing, f"tests of test_grading.py not in the table: {missing}"


def test_the_reader_finds_a_missing_test():
    """The check reads a name that is not there as missing."""
    assert "test_no_such_attack" not in functions("test_grading.py")
    row = "`test_grading.py::test_no_such_attack[kim]`"
    assert NAMED.findall(row) == [("test_grading.py", "test_no_such_attack", "kim")]
