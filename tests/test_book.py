"""The course site: built in fast mode, every notebook has a page, the links between
pages resolve, the pages that plot have their images, and nothing is loaded from
the internet."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from grpo_helpers import course

PLOTTING = (
    "01_gsm8k_dataset",
    "03_group_advantages",
    "05_sync_training_loop",
    "06_async_training_loop",
    "07_base_vs_grpo_eval",
    "08_what_the_knobs_do",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built from fast-mode executions (no make series here)."""
    root = tmp_path_factory.mktemp("book")
    return course.build_book(root / "out", root / "executed")


@pytest.mark.notebook
def test_every_notebook_has_a_page_labelled_with_its_mode(site):
    html = site["html"]
    for notebook in course.notebook_paths():
        page = html / f"{notebook.stem}.html"
        assert page.is_file(), notebook.name
        assert site["modes"][notebook.stem] == "fast"
        assert "fast mode" in page.read_text()
    index = (html / "index.html").read_text()
    assert "Syllabus" in index


@pytest.mark.notebook
def test_links_between_pages_resolve(site):
    html = site["html"]
    for page in html.glob("*.html"):
        for target in re.findall(r'href="([^"#?]+\.html)', page.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            assert (page.parent / target).resolve().is_file(), (page.name, target)


@pytest.mark.notebook
@pytest.mark.parametrize("stem", PLOTTING)
def test_pages_that_plot_have_their_images(site, stem):
    text = (site["html"] / f"{stem}.html").read_text()
    images = re.findall(r'<img [^>]*src="([^"]+)"', text)
    local = [src for src in images if not src.startswith("http")]
    assert local, f"{stem}: no image on the page"
    for src in local:
        if src.startswith("data:image/"):
            continue
        assert (site["html"] / src).is_file(), src


@pytest.mark.notebook
def test_the_site_loads_nothing_from_the_internet(site):
    for page in Path(site["html"]).glob("*.html"):
        text = page.read_text()
        assert not re.search(r'<script[^>]+src="https?://', text), page.name
        assert not re.search(r'<link[^>]+href="https?://[^"]+\.css', text), page.name
    assert (site["html"] / "_static" / "mathjax" / "MathJax.js").is_file()


def test_widget_outputs_leave_only_their_text_form():
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {}}
    cell = nbformat.v4.new_code_cell("for _ in tqdm(range(3)): pass")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={
                course.WIDGET_VIEW: {"model_id": "abc", "version_major": 2},
                "text/plain": "100%|##########| 3/3",
            },
        )
    ]
    nb.cells = [cell]
    course._drop_widgets(nb)
    assert "widgets" not in nb.metadata
    assert dict(cell.outputs[0]["data"]) == {"text/plain": "100%|##########| 3/3"}


def test_pages_take_current_prose_only_when_the_code_is_unchanged():
    """A sentence fixed after ``make series`` reaches the site; prose next to
    outputs of other code does not."""

    def notebook(text: str, code: str) -> nbformat.NotebookNode:
        nb = nbformat.v4.new_notebook()
        markdown = nbformat.v4.new_markdown_cell(text)
        nb.cells = [markdown, nbformat.v4.new_code_cell(code)]
        return nb

    executed = notebook("full about 12 min", "x = 1")
    assert course._refresh_prose(executed, notebook("full 8-12 min", "x = 1"))
    assert executed.cells[0].source == "full 8-12 min"

    executed = notebook("full about 12 min", "x = 1")
    assert not course._refresh_prose(executed, notebook("full 8-12 min", "x = 2"))
    assert executed.cells[0].source == "full about 12 min"
