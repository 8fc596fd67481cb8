"""The classroom tests where user namespaces are blocked (stock Ubuntu 24.04 for a
normal user, a Docker container with its default seccomp profile).

``bwrap --unshare-user --disable-userns`` makes such a machine: inside it, no
process may create a user namespace, so the grader's own bwrap cannot start. There

* the sandbox tests skip, with the reason and the fix, and the rest pass;
* ``GRPO_REQUIRE_SANDBOX=1`` turns that skip into a failure (what ``.ci/run`` sets);
* ``grade --check-sandbox`` says it does not work and what to do.

A few seconds: one small test file, no grading run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_helpers.classroom import sandbox

ROOT = Path(__file__).resolve().parents[2]
#: The sandbox tests, and one that needs no sandbox, of test_sandbox.py.
SELECTED = [
    "tests/classroom/test_sandbox.py",
    "-k",
    "sees_only or check_sandbox_says or without_a_working_sandbox",
]


def _outer() -> str:
    """A bwrap that can block user namespaces, else skip with the reason."""
    if not sys.platform.startswith("linux"):
        pytest.skip("bubblewrap is Linux's")
    bwrap, _ = sandbox.find()
    if not bwrap:
        pytest.skip("no bwrap here to block user namespaces with")
    if not sandbox.supports(bwrap, "--disable-userns"):
        pytest.skip(f"{bwrap} has no --disable-userns (bubblewrap >= 0.8)")
    started = subprocess.run(
        [bwrap, "--unshare-user", "--disable-userns", "--dev-bind", "/", "/", "true"],
        capture_output=True,
        text=True,
    )
    if started.returncode != 0:
        pytest.skip(
            "this machine cannot start a bwrap that blocks user namespaces: "
            + started.stderr.strip()
        )
    return bwrap


def _inside(bwrap: str, argv: list[str], **env: str) -> subprocess.CompletedProcess:
    """Run ``argv`` in this checkout, inside a world without user namespaces."""
    environment = {**os.environ, **env}
    environment.pop("PYTEST_XDIST_WORKER", None)
    environment.pop("PYTEST_CURRENT_TEST", None)
    if "GRPO_REQUIRE_SANDBOX" not in env:
        environment.pop("GRPO_REQUIRE_SANDBOX", None)
    line = [bwrap, "--unshare-user", "--disable-userns", "--dev-bind", "/", "/"]
    line += ["--chdir", str(ROOT), sys.executable, *argv]
    return subprocess.run(
        line, capture_output=True, text=True, env=environment, timeout=300
    )


def _pytest(bwrap: str, **env: str) -> subprocess.CompletedProcess:
    argv = ["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:nbmake"]
    argv += ["-p", "no:xdist", *SELECTED]
    return _inside(bwrap, argv, **env)


def test_sandbox_tests_skip_with_the_fix_where_user_namespaces_are_blocked():
    bwrap = _outer()
    done = _pytest(bwrap)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    assert "2 skipped" in said and "1 passed" in said, said[-3000:]
    assert "no sandbox works here" in said and "Install bubblewrap" in said


def test_require_sandbox_makes_the_skip_a_failure():
    bwrap = _outer()
    done = _pytest(bwrap, GRPO_REQUIRE_SANDBOX="1")
    said = done.stdout + done.stderr
    assert done.returncode == 1, said[-3000:]
    assert "GRPO_REQUIRE_SANDBOX=1 and no sandbox works here" in said


def test_grade_says_what_to_do_where_user_namespaces_are_blocked():
    bwrap = _outer()
    done = _inside(bwrap, ["-m", "grpo_helpers", "grade", "--check-sandbox"])
    said = done.stdout + done.stderr
    assert done.returncode == 1, said[-3000:]
    assert "it does not work" in said
    for fix in ("apt install bubblewrap", "AppArmor", "Docker", "--no-sandbox"):
        assert fix in said, (fix, said)
