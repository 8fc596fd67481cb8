"""The course as published from the notebooks: its site, and its student edition
with hidden tests.

``make book`` (``python -m grpo_helpers book``) builds a static site of the whole
series with Jupyter Book 1 (Sphinx + MyST-NB), offline:

* the README, its syllabus table first, is the index page; the teacher's guide
  (``docs/teaching.md``) is a page; each notebook is a page with its plots;
* the pages come from **executed** copies. Full-mode copies from ``make series``
  (``build/notebooks/``) are used when present; otherwise the notebook is executed
  in fast mode here, and its page starts with a note saying so;
* math is rendered by a MathJax copied from the ``jupyter-server-mathjax``
  package, so the site loads nothing from the internet, at build time or when read
  (``tests/classroom/test_course.py`` builds it with the network refused and scans
  every file of the built site for an address it would load).

``make student`` (``python -m grpo_helpers student``) writes the student edition
with nbgrader: the notebooks without their solutions, each graded cell carrying
hidden tests with literal expected values (:mod:`grpo_helpers.classroom.hidden_tests`)
that stay in the teacher's course directory. ``python -m grpo_helpers grade`` grades
handed-in notebooks with them (:mod:`grpo_helpers.classroom.grading`).

Introduced in: docs/teaching.md (for teachers)
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

from grpo_helpers.classroom import hidden_tests
from grpo_helpers.settings import SETTINGS

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

    from grpo_helpers.classroom import notebooks

    nb = nbformat.read(source, as_version=4)
    run = notebooks.execute(nb, cwd=NOTEBOOKS, timeout=timeout, fast=True)
    if not run.ok:
        raise RuntimeError(f"{source.name} failed in fast mode: {run.error}")
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


#: Where ``python -m grpo_helpers series --record-times`` writes each notebook's
#: time, by mode: what the README's syllabus and the runtime lines quote.
TIMES = ROOT / "bench" / "results" / "notebook-times.json"


def record_time(path: Path, stem: str, seconds: float) -> None:
    """Write one notebook's time into ``path`` under the current mode (``fast``
    with ``GRPO_FAST=1``, else ``full``), with the day, the machine and the
    commit; the other entries stay."""
    from grpo_helpers import provenance

    times = json.loads(path.read_text()) if path.is_file() else {}
    mode = "fast" if SETTINGS.fast else "full"
    times.setdefault(mode, {})[stem] = {
        "seconds": round(seconds, 1),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "hardware": provenance.hardware(),
        "commit": provenance.commit()["commit"][:12],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")


def format_runtime(seconds: float) -> str:
    """A notebook's time as the syllabus and the runtime lines write it.

    Example:
        >>> format_runtime(19.4), format_runtime(89), format_runtime(557.6)
        ('19 s', '89 s', '9.3 min')
    """
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def _relink(text: str, from_notebook: bool = False) -> str:
    """Links of the repository, rewritten for the site's flat layout."""
    if from_notebook:
        text = text.replace("../README.md#", "index.md#").replace(
            "../README.md", "index.md"
        )
        return text
    text = re.sub(r"\(notebooks/(\d\d_[\w]+\.ipynb)\)", r"(\1)", text)
    text = re.sub(r"\(docs/([\w-]+\.md(?:#[\w-]+)?)\)", r"(\1)", text)
    return text.replace("(docs/images/", "(images/")


#: The pages of ``docs/`` the site carries, in its order, after the notebooks.
DOC_PAGES = ("results", "teaching", "performance", "beyond-the-laptop", "package")


def _doc_page(text: str) -> str:
    """A page of ``docs/``, its links rewritten for the site's flat layout."""
    text = re.sub(r"\(\.\./notebooks/(\d\d_[\w]+\.ipynb)", r"(\1", text)
    text = text.replace("../notebooks/", "")
    return text.replace("(../README.md", "(index.md")


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
    images = ROOT / "docs" / "images"
    if images.is_dir():
        shutil.copytree(images, out / "images")
    chapters = [f"  - file: {p.stem}" for p in notebook_paths()]
    for name in DOC_PAGES:
        page = ROOT / "docs" / f"{name}.md"
        if page.is_file():
            (out / f"{name}.md").write_text(_doc_page(page.read_text()))
            chapters.append(f"  - file: {name}")
    (out / "_toc.yml").write_text(
        "format: jb-book\nroot: index\nchapters:\n" + "\n".join(chapters) + "\n"
    )
    shutil.copy(ROOT / "docs" / "book" / "_config.yml", out / "_config.yml")
    (out / "_static").mkdir()
    _copy_mathjax(out / "_static" / "mathjax")
    return modes


def _copy_mathjax(target: Path) -> None:
    """MathJax from the jupyter-server-mathjax package: math renders offline.

    Its accessibility extensions (``extensions/a11y``) are left out: their speech
    rule engine loads its rules and a polyfill from a CDN when a reader turns them
    on in the math menu, and the site loads nothing from the internet.
    """
    try:
        import jupyter_server_mathjax
    except ImportError:
        raise ImportError(
            "The course site needs a local MathJax: pip install -e '.[course]' "
            "(make setup installs it)."
        ) from None
    source = Path(jupyter_server_mathjax.__file__).parent / "static"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("a11y"))


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
# The student edition: nbgrader's source version, hidden tests, the release
# --------------------------------------------------------------------------------------

STUDENT = ROOT / "build" / "student"
COURSE = ROOT / "build" / "grading"
SOLUTIONS = NOTEBOOKS / "solutions"
#: The hidden tests' expected values, in the course directory (teacher's side):
#: ``{notebook: {grade_id: key}}``
#: (:attr:`grpo_helpers.classroom.hidden_tests.Hidden.key`).
KEY = "hidden_key.json"
ASSIGNMENT = "series"
COURSE_ID = "grpo-notebooks"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"

#: What the student edition says instead of pointing at the solutions file.
NO_SOLUTIONS = (
    "Your teacher grades them with hidden tests; the solutions are not part of "
    "this edition."
)


def _load_solutions(stem: str) -> ModuleType:
    """The reference solutions of a notebook (``notebooks/solutions/<stem>.py``).

    The teacher's side only: the student edition ships no solutions, no check
    cell loads them, and the grader runs where this path does not exist (a
    submission that calls this raises ``FileNotFoundError``, and the hidden tests
    make it raise in any case).
    """
    path = SOLUTIONS / f"{stem}.py"
    if not path.is_file():
        raise FileNotFoundError(f"No solutions for {stem!r} at {path}")
    spec = importlib.util.spec_from_file_location(f"solutions_{stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _top_level_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _solution_block(stem: str, name: str) -> str:
    """The solutions file's imports, the definition of ``name`` and the
    module-level helpers it uses, as source (in the file's order)."""
    text = (SOLUTIONS / f"{stem}.py").read_text()
    tree = ast.parse(text)
    imports = [
        ast.get_source_segment(text, node) or ""
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and not (isinstance(node, ast.ImportFrom) and node.module == "__future__")
    ]
    defined = {n: node for node in tree.body for n in _top_level_names(node)}
    if name not in defined:
        raise ValueError(f"solutions/{stem}.py defines no {name!r}")
    wanted, queue = set(), [name]
    while queue:
        current = queue.pop()
        if current in wanted:
            continue
        wanted.add(current)
        used = {n.id for n in ast.walk(defined[current]) if isinstance(n, ast.Name)}
        queue += [n for n in used if n in defined and n not in wanted]
    parts = [
        ast.get_source_segment(text, node) or ""
        for node in tree.body
        if set(_top_level_names(node)) & wanted
    ]
    return "\n".join(imports) + "\n\n\n" + "\n\n\n".join(parts)


def _exercise_name(source: str) -> str:
    node = ast.parse(source).body[0]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name
    assert isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    return node.targets[0].id  # an exercise that is a value (notebook 02)


def _without_solution_paths(text: str) -> str:
    """Markdown of the student edition: the sentence naming the solutions file
    becomes :data:`NO_SOLUTIONS`.

    Raises:
        ValueError: the text still names ``solutions/`` (a sentence this does not
            recognise): the student edition must not point at a path it lacks.
    """
    text = re.sub(
        r"The\s+solutions\s+are\s+in\s+`solutions/[\w.]+`\.",
        NO_SOLUTIONS,
        text,
    )
    if "solutions/" in text:
        raise ValueError(
            "a notebook's text names solutions/ in a way the student edition "
            f"cannot rewrite: {text[:200]!r}"
        )
    return text


def source_notebook(path: Path, key: dict[str, Any] | None = None) -> Any:
    """The nbgrader *source* version of a notebook (the teacher's side).

    * Each exercise cell keeps the learner's stub and gains the solution between
      ``### BEGIN SOLUTION`` / ``### END SOLUTION`` (nbgrader removes it from the
      student edition).
    * Each self-check cell becomes an autograded test cell worth one point. It
      keeps the learner's check (under grading it runs with
      ``GRPO_STRICT_CHECKS=1``, so a wrong answer raises) and gains the hidden
      tests (:func:`grpo_helpers.classroom.hidden_tests.hidden_test`): the cases of
      ``HIDDEN_CASES`` in the solutions file, as literals between
      ``### BEGIN HIDDEN TESTS`` / ``### END HIDDEN TESTS`` (nbgrader removes them
      from the student edition and restores them when it autogrades). The
      expected values, computed here, are not in the notebook: they go to ``key``.
    * The sentence that names ``solutions/<notebook>.py`` says instead that the
      solutions are not in this edition.

    Args:
        path: the notebook.
        key: when given, gets ``{grade_id: key}`` of each graded cell (what
            :func:`grpo_helpers.classroom.hidden_tests.judge` compares its results
            with).
    """
    import nbformat

    nb = nbformat.read(path, as_version=4)
    solutions = _load_solutions(path.stem)
    cases = getattr(solutions, "HIDDEN_CASES", {})
    exercises = [c for c in nb.cells if "exercise" in c.metadata.get("tags", [])]
    checks = [c for c in nb.cells if "self-check" in c.metadata.get("tags", [])]
    if len(exercises) != len(checks):
        raise ValueError(f"{path.name}: one self-check cell per exercise cell")
    for number, (exercise, check) in enumerate(zip(exercises, checks, strict=True), 1):
        name = _exercise_name(exercise.source)
        if name not in cases:
            raise ValueError(f"solutions/{path.stem}.py: no HIDDEN_CASES[{name!r}]")
        exercise.source = (
            f"{exercise.source}\n{BEGIN}\n{_solution_block(path.stem, name)}\n{END}"
        )
        exercise.metadata["nbgrader"] = {
            "grade": False,
            "solution": True,
            "locked": False,
            "grade_id": f"{name}-answer",
            "schema_version": 3,
            "task": False,
        }
        hidden = hidden_tests.hidden_test(name, cases[name], getattr(solutions, name))
        check.source = f"{check.source.rstrip()}\n\n{hidden.block}"
        if key is not None:
            key[f"exercise-{number}"] = hidden.key
        check.metadata["nbgrader"] = {
            "grade": True,
            "solution": False,
            "locked": True,
            "points": 1,
            "grade_id": f"exercise-{number}",
            "schema_version": 3,
            "task": False,
        }
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _without_solution_paths(cell.source)
    return nb


def write_nbgrader_config(root: Path, extra: str = "") -> None:
    """``root/nbgrader_config.py`` for a course directory at ``root``."""
    (root / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(root)!r}\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        "c.ClearSolutions.code_stub = {'python': ''}\n" + extra
    )


def _alembic_head() -> str:
    """The gradebook schema's version, read in this process.

    nbgrader asks for it when it creates a gradebook by running the ``alembic``
    command, a Python process of its own (several seconds on a busy machine, and
    only found when the virtual environment's scripts are on PATH); this reads the
    same migration scripts directly.
    """
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    head = ScriptDirectory(ALEMBIC_DIR).get_current_head()
    assert head is not None
    return head


def build_student(out: Path = STUDENT, course: Path = COURSE) -> Path:
    """The student edition, in ``out``, and the teacher's course directory.

    ``out`` is what ships to students, all of it: ``out/notebooks/`` (every
    notebook, its exercises as stubs, its graded cells holding only the checks
    learners run) and a README. No solution, hidden test or path to either is in
    it.

    ``course`` is the teacher's nbgrader course directory (``source/`` with the
    solutions and the hidden tests, ``release/``, ``gradebook.db``, and
    :data:`KEY`, the hidden tests' expected values); grading
    (:func:`grpo_helpers.classroom.grading.grade`) reads it. Never hand it out.

    Returns:
        The folder of student notebooks.
    """
    import nbformat
    import nbgrader.api
    from nbgrader.converters import GenerateAssignment
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    if out.exists():
        shutil.rmtree(out)
    for stale in ("source", "release", "gradebook.db", KEY):  # grades stay
        path = course / stale
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    source = course / "source" / ASSIGNMENT
    source.mkdir(parents=True)
    write_nbgrader_config(course)
    keys: dict[str, Any] = {}
    for path in notebook_paths():
        keys[path.stem] = {}
        nbformat.write(source_notebook(path, keys[path.stem]), source / path.name)
    (course / KEY).write_text(json.dumps(keys, indent=1, allow_nan=False) + "\n")
    config = Config()
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.course_id = COURSE_ID
    config.CourseDirectory.assignment_id = ASSIGNMENT
    config.ClearSolutions.code_stub = {"python": ""}
    config.GenerateAssignment.force = True
    config.Application.log_level = "WARN"
    app = GenerateAssignment(coursedir=CourseDirectory(config=config), config=config)
    with mock.patch.object(nbgrader.api, "get_alembic_version", _alembic_head):
        app.start()
    student = out / "notebooks"
    shutil.copytree(course / "release" / ASSIGNMENT, student)
    (out / "README.md").write_text(
        "# Student edition\n\nThe notebooks of the series without the exercise "
        "solutions. Each exercise's self-check cell says `ok` or `not yet`, with a "
        "hint; your teacher grades the notebooks you hand in with hidden tests "
        "(`python -m grpo_helpers grade`).\n"
    )
    return student


__all__ = [
    "book_sources",
    "build_book",
    "build_student",
    "execute_fast",
    "executed_mode",
    "source_notebook",
    "write_nbgrader_config",
]
