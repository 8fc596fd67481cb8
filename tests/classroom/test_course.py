"""The course site: built in fast mode from the session's executed notebooks, with
the network refused; every notebook has a page, the links between pages resolve,
the pages that plot have their images, and no file of the site loads anything
from the internet."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from grpo_helpers.classroom import course

PLOTTING = (
    "01_gsm8k_dataset",
    "03_group_advantages",
    "05_sync_training_loop",
    "06_async_training_loop",
    "07_evaluating_a_trained_model",
    "08_what_grpo_learned",
    "09_what_the_knobs_do",
)

#: Imported by every Python process the site build starts (it is put first on
#: PYTHONPATH): a connection to anything but this machine, a name lookup of
#: another host, or a connection to the proxy the environment names (a closed
#: port: what a client that honours proxies tries), is written down and refused,
#: before a packet leaves.
NO_NETWORK = textwrap.dedent(
    """
    import os
    import socket

    _LOG = os.environ["GRPO_TEST_NETWORK_LOG"]
    _PROXY_PORT = int(os.environ["GRPO_TEST_PROXY_PORT"])
    _LOCAL = ("localhost", "::1", "", None)


    def _is_local(address):
        if not isinstance(address, tuple):  # a Unix socket's path
            return True
        host = address[0]
        if isinstance(host, bytes):
            host = host.decode()
        if len(address) > 1 and address[1] == _PROXY_PORT:
            return False  # through the proxy: to another machine
        return host in _LOCAL or str(host).startswith("127.")


    def _refuse(what):
        with open(_LOG, "a") as log:
            log.write(f"{what}\\n")
        raise OSError(f"the network is refused in this test: {what}")


    _connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex
    _getaddrinfo = socket.getaddrinfo


    def guarded_connect(self, address):
        if not _is_local(address):
            _refuse(f"connect {address!r}")
        return _connect(self, address)


    def guarded_connect_ex(self, address):
        if not _is_local(address):
            _refuse(f"connect_ex {address!r}")
        return _connect_ex(self, address)


    def guarded_getaddrinfo(host, *args, **kwargs):
        if not _is_local((host,)):
            _refuse(f"getaddrinfo {host!r}")
        return _getaddrinfo(host, *args, **kwargs)


    socket.socket.connect = guarded_connect
    socket.socket.connect_ex = guarded_connect_ex
    socket.getaddrinfo = guarded_getaddrinfo
    """
)


def closed_port() -> int:
    """A port on this machine where nothing listens (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def offline_env(guard_dir: Path, log: Path) -> dict[str, str]:
    """Environment variables that refuse the network to the processes started."""
    (guard_dir / "sitecustomize.py").write_text(NO_NETWORK)
    port = closed_port()
    proxy = f"http://127.0.0.1:{port}"
    env = {name: proxy for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}
    env |= {name.lower(): proxy for name in env}
    env["NO_PROXY"] = env["no_proxy"] = ""
    pythonpath = [str(guard_dir), os.environ.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, pythonpath))
    env["GRPO_TEST_NETWORK_LOG"] = str(log)
    env["GRPO_TEST_PROXY_PORT"] = str(port)
    return env


@pytest.fixture(scope="module")
def site(tmp_path_factory, notebook_runs):
    """The site built from the session's fast-mode executions, network refused."""
    runs = notebook_runs.all()
    failed = {stem: run.error for stem, run in runs.items() if not run.ok}
    assert not failed, f"notebooks failed to execute: {failed}"
    root = tmp_path_factory.mktemp("book")
    executed = root / "executed"
    executed.mkdir()
    for run in runs.values():
        shutil.copy(run.path, executed)
    guard, log = root / "no-network", root / "network-attempts.log"
    guard.mkdir()
    log.write_text("")
    env = offline_env(guard, log)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        # the guard is in force in a process started with this environment
        probe = subprocess.run(
            [sys.executable, "-c", "import socket; print(socket.getaddrinfo)"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "guarded_getaddrinfo" in probe.stdout, probe.stderr
        built = course.build_book(root / "out", executed)
    built["network_attempts"] = log.read_text().splitlines()
    return built


def site_test(test):
    """A test of the built site: it may wait for every notebook to execute."""
    return pytest.mark.notebook(pytest.mark.timeout(2400)(test))


@site_test
def test_the_site_builds_with_the_network_refused(site):
    assert (site["html"] / "index.html").is_file()
    assert site["network_attempts"] == []


@site_test
def test_every_notebook_has_a_page_labelled_with_its_mode(site):
    html = site["html"]
    for notebook in course.notebook_paths():
        page = html / f"{notebook.stem}.html"
        assert page.is_file(), notebook.name
        assert site["modes"][notebook.stem] == "fast"
        assert "fast mode" in page.read_text()
    index = (html / "index.html").read_text()
    assert "Syllabus" in index


@site_test
def test_the_docs_pages_and_the_readme_figure_are_on_the_site(site):
    """What moved out of the README renders as pages of the site (results, the
    teacher's guide, performance, beyond the laptop, the package), the index links
    to them, and the index shows the README's figure."""
    html = site["html"]
    index = (html / "index.html").read_text()
    for name in course.DOC_PAGES:
        page = html / f"{name}.html"
        assert page.is_file(), name
        assert f'href="{name}.html' in index, name
    assert "## " not in (html / "results.html").read_text()  # rendered, not raw
    image = re.search(r'<img[^>]+src="([^"]*notebook05-seeds[^"]*)"', index)
    assert image and (html / image.group(1)).is_file()


@site_test
def test_links_between_pages_resolve(site):
    html = site["html"]
    for page in html.glob("*.html"):
        for target in re.findall(r'href="([^"#?]+\.html)', page.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            assert (page.parent / target).resolve().is_file(), (page.name, target)


@site_test
@pytest.mark.parametrize("stem", PLOTTING)
def test_pages_that_plot_have_their_images(site, stem):
    text = (site["html"] / f"{stem}.html").read_text()
    images = re.findall(r'<img [^>]*src="([^"]+)"', text)
    assert images, f"{stem}: no image on the page"
    for src in images:
        if src.startswith("data:image/"):
            continue
        assert (site["html"] / src).is_file(), src


# An address on another machine: a scheme with "//", or "//" alone (the page's
# scheme).
_EXTERNAL = r"""(?:[a-zA-Z][a-zA-Z0-9+.-]*:)?//"""


#: What a browser loads by itself: attributes and CSS values that name a file.
LOADS = {
    "src": re.compile(r"""\bsrc\s*=\s*["']?\s*(""" + _EXTERNAL + r""")""", re.I),
    "srcset": re.compile(r"""\bsrcset\s*=\s*["'][^"']*""" + _EXTERNAL, re.I),
    "href": re.compile(r"""\bhref\s*=\s*["']?\s*(""" + _EXTERNAL + r""")""", re.I),
    "url()": re.compile(r"""\burl\(\s*["']?\s*(""" + _EXTERNAL + r""")""", re.I),
    "@import": re.compile(
        r"""@import\s+(?:url\(\s*)?["']?\s*(""" + _EXTERNAL + r""")""", re.I
    ),
}


#: What a script loads: a quoted address of a script, style, font, image or data
#: file (license headers and help links name pages, not files).
SCRIPT_LOADS = {
    "script": re.compile(
        r"""["'`]"""
        + _EXTERNAL
        + r"""[^"'`\s]+\.(?:m?js|css|woff2?|ttf|otf|eot|png|jpe?g|gif|svg|json)"""
        + r"""(?:[?#][^"'`\s]*)?["'`]""",
        re.I,
    ),
}


#: Links a reader may follow (they load nothing by themselves): <a href="...">.
_ANCHOR_HREF = re.compile(r"""<a\s[^>]*$""", re.I | re.S)


#: The body of an inline <script> of a page: any address in it is for loading.
_INLINE_SCRIPT = re.compile(r"""<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>""", re.S)


_ANY_ADDRESS = re.compile(r"""["'`]""" + _EXTERNAL + r"""[^"'`\s]+["'`]""")


def external_loads(text: str, suffix: str = ".html") -> list[str]:
    """Every external address in ``text`` (a file's, ``suffix`` its type) that a
    browser or a script would load: in any file, attributes and CSS values that
    name one; in a script, quoted addresses of files; in a page, any address in
    an inline script."""

    def where(kind: str, start: int) -> str:
        line = text.count("\n", 0, start) + 1
        return f"{kind} at line {line}: {text[start : start + 100].splitlines()[0]}"

    found = []
    patterns = dict(LOADS)
    if suffix in (".js", ".mjs"):
        patterns |= SCRIPT_LOADS
    for kind, pattern in patterns.items():
        for match in pattern.finditer(text):
            if kind == "href":
                tag_start = text.rfind("<", 0, match.start())
                if _ANCHOR_HREF.match(text[tag_start : match.start()]):
                    continue  # a link to follow, not a load
            found.append(where(kind, match.start()))
    inline = _INLINE_SCRIPT.finditer(text) if suffix in (".html", ".htm") else []
    for script in inline:
        for match in _ANY_ADDRESS.finditer(script.group(1)):
            found.append(where("inline script", script.start(1) + match.start()))
    return found


def test_the_scan_finds_every_kind_of_external_load():
    page = """
    <img src="https://example.org/a.png"> <script src='//cdn.example/x.js'></script>
    <link rel="stylesheet" href="http://example.org/s.css">
    <img srcset="a.png 1x, https://example.org/b.png 2x">
    <style>@import "https://fonts.example/f.css"; @import url(//x.example/y.css);
    body { background: url( 'https://example.org/bg.png' ) }</style>
    <script>const LIB_URL = "https://unpkg.example/lib/index"; go(LIB_URL)</script>
    <a href="https://example.org/read-me">a link to follow</a>
    <img src="_images/local.png"> <link href="_static/local.css">
    """
    script = """/* see https://example.org/docs for help */
    s.url = "https://cdn.example/npm/rules@1/lib/maps.json"; help = "http://example.org"
    """
    found = external_loads(page, ".html") + external_loads(script, ".js")
    kinds = [f.split(" at ")[0] for f in found]
    assert kinds.count("src") == 2 and kinds.count("srcset") == 1
    assert kinds.count("href") == 1 and kinds.count("@import") == 2
    assert kinds.count("url()") == 2  # the background and the second @import's url()
    assert kinds.count("inline script") == 1
    assert kinds.count("script") == 1  # the .json file; not the pages it names
    assert not any("read-me" in f or "local" in f or "docs" in f for f in found)


@site_test
def test_no_file_of_the_site_loads_anything_from_the_internet(site):
    html = site["html"]
    checked, problems = 0, []
    for path in sorted(html.rglob("*")):
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # images, fonts: they name no address to load
        checked += 1
        found = external_loads(text, path.suffix)
        problems += [f"{path.relative_to(html)}: {f}" for f in found]
    assert checked > 50  # pages, their CSS and scripts, MathJax
    assert not problems, "\n".join(problems[:40])
    assert (html / "_static" / "mathjax" / "MathJax.js").is_file()


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
