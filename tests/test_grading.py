"""Graded exercises with nbgrader: a student edition without solutions, and
autograding that gives the solutions full marks, the stubs zero, a half-done
submission partial marks, and reports a submission that raises or never ends
without stopping anyone else's grading."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from grpo_helpers import course

NOTEBOOK = "03_group_advantages"  # two code exercises, pure numpy: quick to grade
SOLUTIONS = course.NOTEBOOKS / "solutions" / f"{NOTEBOOK}.py"


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    return out, course.build_student(out)


def _exercise_cells(nb):
    return [c for c in nb.cells if "exercise" in c.metadata.get("tags", [])]


def _submit(edition_dir: Path, folder: Path, student: str, answers: list[str | None]):
    """A copy of the student notebook with exercise i replaced by answers[i]
    (None: left as the stub)."""
    nb = nbformat.read(edition_dir / f"{NOTEBOOK}.ipynb", as_version=4)
    for cell, answer in zip(_exercise_cells(nb), answers, strict=True):
        if answer is not None:
            cell.source = answer
    (folder / student).mkdir(parents=True)
    nbformat.write(nb, folder / student / f"{NOTEBOOK}.ipynb")


def test_the_student_edition_has_no_solutions(edition):
    _, notebooks = edition
    assert sorted(p.stem for p in notebooks.glob("*.ipynb")) == [
        p.stem for p in course.notebook_paths()
    ]
    for path in notebooks.glob("*.ipynb"):
        text = path.read_text()
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
        nb = nbformat.read(path, as_version=4)
        originals = nbformat.read(course.NOTEBOOKS / path.name, as_version=4)
        stubs = [c.source.strip() for c in _exercise_cells(originals)]
        assert [c.source.strip() for c in _exercise_cells(nb)] == stubs
    assert not (notebooks / "solutions").exists()


@pytest.mark.notebook
def test_grading_solutions_stubs_partial_broken_and_endless(edition, tmp_path):
    out, notebooks = edition
    solution = f"exec({SOLUTIONS.read_text()!r})"
    loops = (
        "def smallest_group_size(pass_rate, max_degenerate):\n"
        "    while True:\n"
        "        pass"
    )
    raises = "raise RuntimeError('my cell is broken')"
    submissions = tmp_path / "submissions"
    _submit(notebooks, submissions, "ada", [solution, solution])
    _submit(notebooks, submissions, "bob", [None, None])
    _submit(notebooks, submissions, "cy", [solution, None])
    _submit(notebooks, submissions, "dee", [raises, solution])
    _submit(notebooks, submissions, "eve", [loops, solution])
    grades = course.grade(submissions, out, timeout=20)
    by = {s: g for s, g in grades.groupby("student")}
    assert set(by) == {"ada", "bob", "cy", "dee", "eve"}
    points = {s: g["points"].sum() for s, g in by.items()}
    assert points == {"ada": 2.0, "bob": 0.0, "cy": 1.0, "dee": 1.0, "eve": 1.0}
    assert list(by["ada"]["error"]) == ["", ""]
    assert all("stub" in error for error in by["bob"]["error"])
    broken = by["dee"].set_index("exercise").loc["exercise-1", "error"]
    assert "my cell is broken" in broken or "NameError" in broken
    endless = by["eve"].set_index("exercise").loc["exercise-1", "error"]
    assert "Timeout" in endless or "KeyboardInterrupt" in endless
    assert (out / "grades.csv").is_file()
    shutil.rmtree(out / "nbgrader" / "autograded", ignore_errors=True)
