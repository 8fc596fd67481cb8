"""One supported Python minimum, said the same way everywhere: 3.11, because TRL
1.16 (the ``trl`` extra: ``export trl``, its tests, the TRL oracle) needs it. Below
it pip refuses the project instead of installing it without the extra."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_requires_the_minimum_and_every_extra_installs_there():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    # no extra is cut off by a python_version marker: each installs on the minimum
    for name, requirements in project["optional-dependencies"].items():
        for requirement in requirements:
            assert "python_version" not in requirement, (name, requirement)
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    assert ruff["target-version"] == "py311"


def test_environment_yml_installs_the_minimum():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pythons = [
        d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python")
    ]
    assert pythons == ["python=3.11"], pythons


#: How to get a Python >= 3.11 where the system's is older: the README and the
#: Makefile's refusal name the same two ways and the same version.
GET_PYTHON = ("uv python install 3.12", "brew install python@3.12")


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("found", [True, False], ids=["older", "missing"])
def test_makefile_refuses_an_older_python_before_it_creates_anything(tmp_path, found):
    """``make setup`` asks the Python it would use for its version first: an older
    one, or none of that name, stops it with a sentence that names the minimum and
    how to install a newer Python, before any venv exists."""
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^PYTHON_MIN\s*:=\s*3\.11$", makefile, re.M), "PYTHON_MIN"
    old = tmp_path / "python3.10"
    if found:
        old.write_text("#!/bin/sh\nexit 1\n")  # what the version check gets from 3.10
        old.chmod(0o755)
    venv = tmp_path / "venv"
    done = subprocess.run(
        ["make", "-C", str(ROOT), "setup", f"PYTHON={old}", f"VENV={venv}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    said = " ".join(done.stdout.split())
    assert "needs Python >= 3.11" in said, done.stdout + done.stderr
    for way in GET_PYTHON:
        assert way in said, (way, said)
    # a program that the advice has just installed, not one that may not exist
    assert "make setup PYTHON=python3.12" in said, said
    assert not venv.exists()


def test_readme_states_the_minimum():
    """The README says ``Python >= 3.11`` where it says how to set up, and nowhere
    an older minimum."""
    readme = (ROOT / "README.md").read_text()
    assert "Python >= 3.11" in readme
    assert not re.search(r"Python\s*(>=|≥)?\s*3\.(?:[0-9]|10)\b", readme), re.findall(
        r"Python\s*(?:>=|≥)?\s*3\.(?:[0-9]|10)\b", readme
    )


def test_readme_says_how_to_get_a_newer_python():
    """Where the system's Python is older: uv installs one itself, Homebrew on a
    Mac (with the Command Line Tools for ``make``); then the set-up is told which
    program to use."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    for way in (*GET_PYTHON, "xcode-select --install", "PYTHON=python3.12"):
        assert re.search(rf"`[^`]*{re.escape(way)}[^`]*`", readme), way
