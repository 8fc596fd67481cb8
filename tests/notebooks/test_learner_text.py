"""The series reads as a course: the README is a front door, and every notebook
says what holds now, in short cells, with one runtime per mode.

* the README: at most 2,000 words, the two commands in its first code block, and
  every link resolves to a file of the repository (and its anchor to a heading);
* every notebook: at most 45 cells, no markdown cell over 200 words, no date in
  its markdown, and a runtime line with exactly one fast and one full time and the
  command that measured them; those times are the README syllabus's, and, once
  ``python -m grpo_helpers series --record-times`` has measured them, its.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from grpo_helpers.classroom import course

ROOT = Path(__file__).resolve().parents[2]


STEMS = [p.stem for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


#: "about 19 s", "about 9.3 min": a runtime figure of a runtime line.
FIGURE = re.compile(r"about (\d+(?:\.\d+)? (?:s|min))\b")


def notebook(stem: str):
    return nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", 4)


def markdown(stem: str) -> list[str]:
    return [c.source for c in notebook(stem).cells if c.cell_type == "markdown"]


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.split()) <= 2000, len(text.split())
    first_block = text.split("```")[1]
    assert "make series" in first_block and "make test" in first_block


def _anchors(path: Path) -> set[str]:
    """The heading anchors of a markdown page (GitHub's and MyST's slugs)."""
    out = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            out.add(slug)
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_of_a_page_resolves(page):
    text = page.read_text()
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if (
            not resolved.exists()
            or anchor
            and resolved.suffix == ".md"
            and anchor not in _anchors(resolved)
        ):
            bad.append(target)
    assert not bad, f"{page.name}: links that resolve to nothing: {bad}"


@pytest.mark.parametrize("stem", STEMS)
def test_a_notebook_is_short_and_undated(stem):
    nb = notebook(stem)
    assert len(nb.cells) <= 45, f"{stem}: {len(nb.cells)} cells"
    for source in markdown(stem):
        words = len(source.split())
        assert words <= 200, f"{stem}: a markdown cell of {words} words"
        assert not DATE.search(source), f"{stem}: a date in {source[:60]!r}"


def runtime_line(stem: str) -> str:
    opening = "\n\n".join(markdown(stem)[:3])
    return opening.split("**Runtime**")[1].split("\n\n")[0]


def syllabus_row(stem: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    (row,) = [r for r in text.splitlines() if f"(notebooks/{stem}.ipynb)" in r]
    return [cell.strip() for cell in row.strip("|").split("|")]


@pytest.mark.parametrize("stem", STEMS)
def test_one_fast_and_one_full_time_and_the_command(stem):
    line = " ".join(runtime_line(stem).split())
    found = list(FIGURE.finditer(line))
    figures = [m.group(1) for m in found]
    assert len(figures) == 2, f"{stem}: runtime figures {figures} in {line!r}"
    # no other time beside them, such as "6.2 min (293 s)" from another measurement
    times = re.findall(r"\b\d+(?:\.\d+)? ?(?:s|min)\b", line)
    assert len(times) == 2, f"{stem}: times {times} in {line!r}"
    fast, full = (line[: m.start()] for m in found)
    assert "fast" in fast and "full" in full[len(fast) :], line
    assert f"python -m grpo_helpers series --only {stem[:2]}" in line
    assert syllabus_row(stem)[-2:] == figures, (stem, syllabus_row(stem), figures)


def test_the_times_are_the_recorded_ones():
    """Where ``series --record-times`` has measured a notebook, the syllabus quotes
    that time (``course.format_runtime``)."""
    if not course.TIMES.is_file():
        pytest.skip(
            "no recorded times yet: python -m grpo_helpers series --record-times"
        )
    times = json.loads(course.TIMES.read_text())
    for stem in STEMS:
        fast, full = syllabus_row(stem)[-2:]
        for mode, quoted in (("fast", fast), ("full", full)):
            if stem in times.get(mode, {}):
                recorded = course.format_runtime(times[mode][stem]["seconds"])
                assert quoted == recorded, (stem, mode, quoted, recorded)
