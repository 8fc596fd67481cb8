"""The two commands' parts as a normal user: a user who owns only their home and
their checkout trains a run and executes a notebook (issue 54).

Here, the suite runs as root, so the test makes such a user: a copy of the
checkout's tracked files, owned by ``nobody`` with a home of its own, and runs
``python -m grpo_helpers train`` (the tiny run) and ``series --only 01`` in it
through ``setpriv``. Every file they write goes to the copy or the home; anywhere
else is refused by the system. Where the tests do not run as root, or ``setpriv``
cannot switch user, or that user cannot run this Python, the test skips and says
which.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from tiny import tiny_flags

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534


def _as_nobody(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "PYTHONPATH": str(cwd),
        "GRPO_FAST": "1",
        "OMP_NUM_THREADS": "1",
        "LANG": "C.UTF-8",
    }
    command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return subprocess.run(
        [*command, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def checkout():
    """A copy of the tracked files and a home, both owned by ``nobody``."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run as another user")
    top = Path(tempfile.mkdtemp(prefix="grpo-user-"))
    top.chmod(0o755)
    copy, home = top / "checkout", top / "home"
    tracked = (
        subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, tracked):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    home.mkdir()
    for path in (top, *top.rglob("*")):
        os.chown(path, NOBODY, NOBODY)
    probe = _as_nobody(sys.executable, "-c", "import torch", cwd=copy, home=home)
    if probe.returncode != 0:
        shutil.rmtree(top)
        pytest.skip(f"user {NOBODY} cannot run {sys.executable}: {probe.stderr[-300:]}")
    yield copy, home
    shutil.rmtree(top)


def test_a_normal_user_trains_in_their_checkout(checkout):
    copy, home = checkout
    done = _as_nobody(
        sys.executable,
        "-m",
        "grpo_helpers",
        "train",
        *tiny_flags(steps=1),
        "--weights-name",
        "as-a-user",
        cwd=copy,
        home=home,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (copy / "runs" / "as-a-user" / "metrics.jsonl").is_file()


def test_a_normal_user_runs_a_notebook(checkout):
    copy, home = checkout
    nested = (
        "import subprocess, sys; subprocess.run([sys.executable, '-V'], check=True)"
    )
    probe = _as_nobody(sys.executable, "-c", nested, cwd=copy, home=home)
    if probe.returncode != 0:  # a kernel is this Python, started by the notebook's
        pytest.skip(
            f"user {NOBODY} can run {sys.executable} but not start it again (a "
            f"kernel): {probe.stderr.strip().splitlines()[-1]}"
        )
    done = _as_nobody(
        sys.executable,
        "-m",
        "grpo_helpers",
        "series",
        "--only",
        "01",
        cwd=copy,
        home=home,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    assert (copy / "build" / "notebooks" / "01_gsm8k_dataset.ipynb").is_file()
