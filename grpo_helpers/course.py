"""The classroom kit: a course site, a student edition, and autograding.

``make book`` (``python -m grpo_helpers book``) builds a static site of the whole
series with Jupyter Book 1 (Sphinx + MyST-NB), offline:

* the README, its syllabus table first, is the index page; the teacher's guide
  (``docs/teaching.md``) is a page; each notebook is a page with its plots;
* the pages come from **executed** copies. Full-mode copies from ``make series``
  (``build/notebooks/``) are used when present; otherwise the notebook is executed
  in fast mode here, and its page starts with a note saying so;
* math is rendered by a MathJax copied from the ``jupyter-server-mathjax``
  package, so the site loads nothing from the internet, at build time or when read.

Introduced in: the README (for teachers)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from grpo_helpers.config import SETTINGS

ROOT = SETTINGS.project_root
NOTEBOOKS = ROOT / "notebooks"
EXECUTED = ROOT / "build" / "notebooks"
BOOK = ROOT / "build" / "book"
TITLE = "GRPO on GSM8K, step by step"

FAST_NOTE = (
    "```{note}\n"
    "This page was executed in **fast mode** (`GRPO_FAST=1`: the tiny random model, "
    "few steps), so its numbers and curves are not those of a real run; the "
    "recorded runs it plots are. Run `make series`, then `make book`, for the full "
    "outputs.\n"
    "```"
)


def notebook_paths() -> list[Path]:
    """The series' notebooks, in order."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def executed_mode(path: Path) -> str | None:
    """``"full"`` or ``"fast"`` for an executed copy written by ``grpo series``
    (it records the mode in the notebook's metadata); None for anything else."""
    import nbformat

    if not path.is_file():
        return None
    meta = nbformat.read(path, as_version=4).metadata.get("grpo", {})
    if "fast" not in meta:
        return None
    return "fast" if meta["fast"] else "full"


def execute_fast(source: Path, target: Path, timeout: int = 900) -> None:
    """Execute a notebook in fast mode (its kernel sees ``GRPO_FAST=1``)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(source, as_version=4)
    previous = os.environ.get("GRPO_FAST")
    os.environ["GRPO_FAST"] = "1"
    try:
        NotebookClient(
            nb, timeout=timeout, resources={"metadata": {"path": str(NOTEBOOKS)}}
        ).execute()
    finally:
        if previous is None:
            os.environ.pop("GRPO_FAST", None)
        else:
            os.environ["GRPO_FAST"] = previous
    nb.metadata["grpo"] = {"fast": True}
    nbformat.write(nb, target)


def _book_notebook(source: Path, executed: Path, target: Path) -> str:
    """Write the page's notebook to ``target``; return its mode."""
    import nbformat

    mode = executed_mode(executed)
    if mode is None:
        execute_fast(source, executed)
        mode = "fast"
    nb = nbformat.read(executed, as_version=4)
    _refresh_prose(nb, nbformat.read(source, as_version=4))
    if mode == "fast":
        first = nb.cells[0]
        title, _, rest = first.source.partition("\n")
        first.source = f"{title}\n\n{FAST_NOTE}\n{rest}"
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _relink(cell.source, from_notebook=True)
    _drop_widgets(nb)
    nbformat.write(nb, target)
    return mode


def _refresh_prose(executed: Any, source: Any) -> bool:
    """Take the text cells of ``source`` into ``executed`` when their code is the same.

    A full ``make series`` takes half an hour; a fix to a sentence should reach the
    site without it. When every code cell of the executed copy has the source's
    code, in the same cells, the outputs still belong to that code, so the page
    gets the source's current markdown. Otherwise the executed copy stays as it
    ran. Returns whether the prose was refreshed.
    """
    old, new = executed.cells, source.cells
    if [c.cell_type for c in old] != [c.cell_type for c in new]:
        return False
    pairs = list(zip(old, new, strict=True))
    if any(a.source != b.source for a, b in pairs if a.cell_type == "code"):
        return False
    for a, b in pairs:
        if a.cell_type != "code":
            a.source = b.source
    return True


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _drop_widgets(nb: Any) -> None:
    """Progress bars are ipywidgets in a notebook; on a page they would make the
    site load require.js and the widget manager from a CDN. Keep their text form
    (the finished bar) and drop the widget state, so the site loads nothing."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data")
            if data and WIDGET_VIEW in data:
                del data[WIDGET_VIEW]


def _relink(text: str, from_notebook: bool = False) -> str:
    """Links of the repository, rewritten for the site's flat layout."""
    if from_notebook:
        text = text.replace("../README.md#", "index.md#").replace(
            "../README.md", "index.md"
        )
        return text
    text = re.sub(r"\(notebooks/(\d\d_[\w]+\.ipynb)\)", r"(\1)", text)
    text = text.replace("(docs/teaching.md)", "(teaching.md)")
    return text


def book_sources(out: Path, executed_dir: Path = EXECUTED) -> dict[str, str]:
    """Write the site's sources (pages, ``_toc.yml``, ``_config.yml``) under
    ``out``; return each notebook's mode (``"full"`` or ``"fast"``)."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    executed_dir.mkdir(parents=True, exist_ok=True)
    modes = {}
    for source in notebook_paths():
        modes[source.stem] = _book_notebook(
            source, executed_dir / source.name, out / source.name
        )
    readme = (ROOT / "README.md").read_text()
    (out / "index.md").write_text(_relink(readme))
    chapters = [f"  - file: {p.stem}" for p in notebook_paths()]
    guide = ROOT / "docs" / "teaching.md"
    if guide.is_file():
        (out / "teaching.md").write_text(
            guide.read_text()
            .replace("../notebooks/", "")
            .replace("../README.md", "index.md")
        )
        chapters.append("  - file: teaching")
    (out / "_toc.yml").write_text(
        "format: jb-book\nroot: index\nchapters:\n" + "\n".join(chapters) + "\n"
    )
    shutil.copy(ROOT / "docs" / "book" / "_config.yml", out / "_config.yml")
    (out / "_static").mkdir()
    _copy_mathjax(out / "_static" / "mathjax")
    return modes


def _copy_mathjax(target: Path) -> None:
    """MathJax from the jupyter-server-mathjax package: math renders offline."""
    try:
        import jupyter_server_mathjax
    except ImportError:
        raise ImportError(
            "The course site needs a local MathJax: pip install -e '.[course]' "
            "(make setup installs it)."
        ) from None
    source = Path(jupyter_server_mathjax.__file__).parent / "static"
    shutil.copytree(source, target)


def build_book(out: Path = BOOK, executed_dir: Path = EXECUTED) -> dict[str, Any]:
    """Build the course site; returns where it is and each page's mode.

    Raises:
        RuntimeError: Jupyter Book failed (its output ends the message).
    """
    src = out / "src"
    modes = book_sources(src, executed_dir)
    command = [
        sys.executable,
        "-c",
        "from jupyter_book.cli.main import main; main()",
        "build",
        str(src),
        "--path-output",
        str(out),
        "--builder",
        "html",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            "jupyter-book build failed:\n" + (done.stdout + done.stderr)[-4000:]
        )
    html = out / "_build" / "html"
    (out / "modes.json").write_text(json.dumps(modes, indent=2) + "\n")
    return {"html": html, "modes": modes}


# --------------------------------------------------------------------------------------
# Graded exercises: a student edition and autograding, with nbgrader
# --------------------------------------------------------------------------------------

STUDENT = ROOT / "build" / "student"
ASSIGNMENT = "series"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def _solution_block(stem: str, name: str) -> str:
    """The solutions file's imports and the definition of ``name``, as source."""
    import ast

    path = NOTEBOOKS / "solutions" / f"{stem}.py"
    text = path.read_text()
    tree = ast.parse(text)
    imports = [
        ast.get_source_segment(text, node)
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and not (isinstance(node, ast.ImportFrom) and node.module == "__future__")
    ]
    for node in tree.body:
        names = (
            [node.name]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            else [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            or (
                [node.target.id]
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                else []
            )
        )
        if name in names:
            return "\n".join([*imports, ast.get_source_segment(text, node)])
    raise ValueError(f"solutions/{stem}.py defines no {name!r}")


def _exercise_name(source: str) -> str:
    import ast

    node = ast.parse(source).body[0]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name
    return node.targets[0].id  # an exercise that is a value (notebook 02)


def source_notebook(path: Path) -> Any:
    """The nbgrader *source* version of a notebook.

    Each exercise cell keeps the learner's stub and gains the solution between
    ``### BEGIN SOLUTION`` / ``### END SOLUTION`` (nbgrader removes it from the
    student edition). Each self-check cell becomes an autograded test cell worth
    one point: under grading it runs with ``GRPO_STRICT_CHECKS=1``, so a wrong
    answer raises.
    """
    import nbformat

    nb = nbformat.read(path, as_version=4)
    checks = 0
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if "exercise" in tags:
            name = _exercise_name(cell.source)
            cell.source = (
                f"{cell.source}\n{BEGIN}\n{_solution_block(path.stem, name)}\n{END}"
            )
            cell.metadata["nbgrader"] = {
                "grade": False,
                "solution": True,
                "locked": False,
                "grade_id": f"{name}-answer",
                "schema_version": 3,
                "task": False,
            }
        elif "self-check" in tags:
            checks += 1
            cell.metadata["nbgrader"] = {
                "grade": True,
                "solution": False,
                "locked": True,
                "points": 1,
                "grade_id": f"exercise-{checks}",
                "schema_version": 3,
                "task": False,
            }
    return nb


def _nbgrader_dir(root: Path, timeout: int) -> Path:
    """An nbgrader course directory at ``root`` (config written, source filled)."""
    import nbformat

    source = root / "source" / ASSIGNMENT
    source.mkdir(parents=True, exist_ok=True)
    (root / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.CourseDirectory.root = {str(root)!r}\n"
        "c.CourseDirectory.course_id = 'grpo-notebooks'\n"
        "c.ClearSolutions.code_stub = {'python': ''}\n"
        f"c.Execute.timeout = {int(timeout)}\n"
        "c.Execute.interrupt_on_timeout = True\n"
        "c.Execute.allow_errors = True\n"
    )
    for path in notebook_paths():
        nbformat.write(source_notebook(path), source / path.name)
    return root


def _path_env() -> dict[str, str]:
    """The environment with this Python's scripts first on PATH: nbgrader runs
    ``alembic`` by name, which a virtual environment not activated would miss."""
    scripts = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": scripts + os.pathsep + os.environ.get("PATH", "")}


def _nbgrader(root: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=root,
        capture_output=True,
        text=True,
        env={**_path_env(), **(env or {})},
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"nbgrader {' '.join(args)} failed:\n" + (done.stdout + done.stderr)[-4000:]
        )
    return done.stdout + done.stderr


def build_student(out: Path = STUDENT, timeout: int = 300) -> Path:
    """The student edition: every notebook without its solutions, in ``out``.

    nbgrader generates it from the source versions (:func:`source_notebook`); the
    course directory it works in is ``out / "nbgrader"`` (keep it: grading uses
    it). Returns the folder of student notebooks.
    """
    if out.exists():
        shutil.rmtree(out)
    root = _nbgrader_dir(out / "nbgrader", timeout)
    _nbgrader(root, "db", "assignment", "add", ASSIGNMENT)
    _nbgrader(root, "generate_assignment", ASSIGNMENT, "--force")
    student = out / "notebooks"
    shutil.copytree(root / "release" / ASSIGNMENT, student)
    (out / "README.md").write_text(
        "# Student edition\n\nThe notebooks of the series without the exercise "
        "solutions. Each exercise's self-check still says `ok` or `not yet`; the "
        "teacher grades submitted copies with `python -m grpo_helpers grade`.\n"
    )
    return student


def grade(
    submissions: Path,
    out: Path = STUDENT,
    timeout: int = 120,
) -> Any:
    """Grade submitted notebooks: one row per student per exercise.

    Args:
        submissions: ``<submissions>/<student>/<notebook>.ipynb`` as handed in.
        out: where :func:`build_student` made the student edition (its nbgrader
            course directory is reused; built first when missing).
        timeout: seconds a cell may run; a cell past it is interrupted and
            reported (``CellTimeoutError``), and grading goes on.

    Returns:
        A DataFrame with ``student, notebook, exercise, points, max_points,
        passed, error`` (the error's type and message for a failed check, or of
        the first error of the notebook when the check never ran), also written
        to ``out / "grades.csv"``. Each submission runs in fast mode
        (``GRPO_FAST=1``) with strict self-checks (``GRPO_STRICT_CHECKS=1``).
    """
    import pandas as pd
    from nbgrader.api import Gradebook

    root = out / "nbgrader"
    if not (root / "release" / ASSIGNMENT).is_dir():
        build_student(out, timeout)
    else:
        _nbgrader_dir(root, timeout)  # refresh the timeout in the config
    submitted = root / "submitted"
    if submitted.exists():
        shutil.rmtree(submitted)
    students = sorted(p.name for p in Path(submissions).iterdir() if p.is_dir())
    for student in students:
        target = submitted / student / ASSIGNMENT
        target.mkdir(parents=True)
        for notebook in sorted((Path(submissions) / student).glob("*.ipynb")):
            shutil.copy(notebook, target / notebook.name)
    env = {"GRPO_FAST": "1", "GRPO_STRICT_CHECKS": "1"}
    for student in students:  # one at a time: a broken submission stops nobody else
        try:
            _nbgrader(
                root, "autograde", ASSIGNMENT, "--student", student, "--force", env=env
            )
        except RuntimeError as error:
            print(f"grading {student} failed: {error}", file=sys.stderr)
    rows = []
    os.environ["PATH"] = _path_env()["PATH"]  # the Gradebook runs alembic too
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        for student in students:
            for notebook in sorted((submitted / student / ASSIGNMENT).glob("*.ipynb")):
                graded = root / "autograded" / student / ASSIGNMENT / notebook.name
                errors = _cell_errors(graded) if graded.is_file() else {}
                first_error = next(iter(errors.values()), "not graded")
                try:
                    record = gradebook.find_submission_notebook(
                        notebook.stem, ASSIGNMENT, student
                    )
                    grades = {g.name: g for g in record.grades}
                except Exception:  # noqa: BLE001 - not graded at all: report it
                    grades = {}
                for name in _grade_ids(root / "source" / ASSIGNMENT / notebook.name):
                    grade_ = grades.get(name)
                    points = float(grade_.score) if grade_ is not None else 0.0
                    maximum = float(grade_.max_score) if grade_ is not None else 1.0
                    passed = grade_ is not None and points == maximum
                    error = "" if passed else errors.get(name, first_error)
                    rows.append(
                        {
                            "student": student,
                            "notebook": notebook.stem,
                            "exercise": name,
                            "points": points,
                            "max_points": maximum,
                            "passed": passed,
                            "error": error,
                        }
                    )
    frame = pd.DataFrame(rows)
    frame.to_csv(out / "grades.csv", index=False)
    return frame


def _grade_ids(path: Path) -> list[str]:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return [
        c.metadata["nbgrader"]["grade_id"]
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade")
    ]


def _cell_errors(path: Path) -> dict[str, str]:
    """``{grade_id or "cell N": "Type: message"}`` of every cell that errored."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    errors = {}
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                key = cell.metadata.get("nbgrader", {}).get("grade_id", f"cell {index}")
                errors[key] = f"{output['ename']}: {output['evalue']}"[:300]
                break
    return errors


__all__ = [
    "book_sources",
    "build_book",
    "build_student",
    "execute_fast",
    "executed_mode",
    "grade",
    "source_notebook",
]
