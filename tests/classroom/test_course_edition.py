"""The student edition ships no answers (``course.build_student``).

* the edition (built once for the session: ``conftest.py``'s ``edition``) holds
  only the notebooks and a README: no solution, hidden test or path to either,
  and its graded cells hold only the learners' checks; the teacher's side (the
  course directory's source notebooks) has what the edition lacks;
* no cell of any notebook loads the reference solutions (issue 22).

That no graded cell holds an expected value: ``test_hidden_tests.py``.
"""

from __future__ import annotations

import ast

import nbformat
from grading_runs import NOTEBOOK, tagged

from grpo_helpers.classroom import course, self_checks


def test_the_student_edition_ships_no_answers(edition):
    out, notebooks, course_dir = edition
    assert sorted(p.relative_to(out).parts[0] for p in out.iterdir()) == [
        "README.md",
        "notebooks",
    ]
    assert sorted(p.name for p in notebooks.iterdir()) == [
        p.name for p in course.notebook_paths()
    ]
    for path in notebooks.glob("*.ipynb"):
        text = path.read_text()
        for marker in ("SOLUTION", "HIDDEN TESTS", "solutions/", "_load_solutions"):
            assert marker not in text, (path.name, marker)
        assert "self_checks.solution" not in text
        nb = nbformat.read(path, as_version=4)
        original = nbformat.read(course.NOTEBOOKS / path.name, as_version=4)
        # the exercises are the stubs, the graded cells the learners' own checks
        for tag in ("exercise", "self-check"):
            assert [c.source.strip() for c in tagged(nb, tag)] == [
                c.source.strip() for c in tagged(original, tag)
            ]
        graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
        assert len(graded) == len(tagged(original, "exercise"))
        # where the teacher's notebook names its solutions file, the edition says
        # instead that they are not part of it
        named = any("solutions/" in c.source for c in original.cells)
        assert (course.NO_SOLUTIONS in text) == named, path.name
    # the teacher's side has what the edition lacks
    source = course_dir / "source" / course.ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    assert "### BEGIN HIDDEN TESTS" in source.read_text()
    assert "### BEGIN SOLUTION" in source.read_text()


def test_no_cell_of_any_notebook_loads_the_solutions():
    """Issue 22: check cells bound the reference solutions to a name
    (``solutions = self_checks.solution(...)``); no cell may load them."""
    loaders = {"solution", "_load_solutions", "spec_from_file_location", "run_path"}
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT  # notebook 06 awaits
    for path in course.notebook_paths():
        nb = nbformat.read(path, as_version=4)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            where = f"{path.name} cell {index}"
            tree = compile(cell.source, where, "exec", flags=flags)
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    callee = node.func
                    name = getattr(callee, "attr", getattr(callee, "id", ""))
                    assert name not in loaders, f"{where} calls {name}"
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    assert "solutions/" not in node.value, f"{where}: {node.value!r}"
                if isinstance(node, ast.Name) and "self-check" in cell.metadata.get(
                    "tags", []
                ):
                    assert "solution" not in node.id.lower(), f"{where}: {node.id}"
    assert not hasattr(self_checks, "solution")
