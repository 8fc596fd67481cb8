"""Shared test fixtures, and a report of what fast-mode training did.

Isolation. Before anything imports ``grpo_helpers`` (whose settings are read once,
at import), this file points ``GRPO_RUNS_ROOT`` at a temporary folder of this test
session (of each xdist worker): every run a test, a notebook or the local engine
writes without an explicit directory lands there, never in the project's ``runs/``,
and the folder is removed when the session ends. It also puts this checkout first
on ``PYTHONPATH``, so that a subprocess started in another folder does not import
another checkout's package through an editable install.

Notebooks. ``notebook_runs`` executes each notebook once per session and hands the
executed copies to every test that needs them (``tests/helpers/notebook_runs.py``).

Evidence. The loop tests train tiny-random for real (its groups earn different
rewards). Each records one line of evidence (steps updated, non-degenerate groups,
how far the LoRA weights moved from zero); ``make test`` prints them in a section of
its own at the end, so the run's output shows that a GRPO update went through the
loop.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

assert "grpo_helpers.settings" not in sys.modules, (
    "grpo_helpers was imported before tests/conftest.py could isolate its runs"
)
_RUNS = Path(tempfile.mkdtemp(prefix="grpo-test-runs-"))
os.environ["GRPO_RUNS_ROOT"] = str(_RUNS)
# Every process a test starts (CLI runs, notebook kernels, nbgrader, the site
# build) imports this checkout's package, wherever an editable install points.
_ROOT = Path(__file__).resolve().parent.parent
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(_ROOT), os.environ.get("PYTHONPATH", "")])
)

# The comparisons the local engine's tests share (tests/helpers/local_engine.py)
# assert as the tests do: their failures say what differed.
pytest.register_assert_rewrite("local_engine")

from notebook_runs import NotebookRuns  # noqa: E402
from tiny import tiny  # noqa: E402

_EVIDENCE: list[str] = []


@pytest.fixture(scope="session")
def session_runs_dir() -> Path:
    """This session's runs folder (``GRPO_RUNS_ROOT``)."""
    return _RUNS


@pytest.fixture(scope="session")
def notebook_runs(tmp_path_factory) -> NotebookRuns:
    """Each notebook executed once for the session (shared by xdist workers)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # one folder for every worker of this session
    return NotebookRuns(base / "executed-notebooks")


@pytest.fixture
def tiny_config(tmp_path) -> Callable[..., object]:
    """``tiny_config(**changes)``: the tests' tiny run (``tests/helpers/tiny.py``) as a
    ``GRPOConfig``, its run directory in this test's folder."""
    from grpo_helpers.config import GRPOConfig

    def make(**changes: object) -> GRPOConfig:
        return GRPOConfig(**tiny(run_dir=str(tmp_path / "run"), **changes))

    return make


@pytest.fixture
def training_evidence(request) -> Callable[[str], Callable[[str], None]]:
    """``training_evidence(label)(line)`` records a line for the final report.

    The line travels in the test's report (``user_properties``), so the report
    gathers it under ``pytest-xdist`` too."""

    def for_label(label: str) -> Callable[[str], None]:
        def record(line: str) -> None:
            line = f"{request.node.name} [{label}]: {line}"
            request.node.user_properties.append((_EVIDENCE_KEY, line))

        return record

    return for_label


_EVIDENCE_KEY = "fast-mode training evidence"

#: Where each test's start and end go, one JSON line per test with its xdist worker,
#: when GRPO_TEST_TIMELINE names a file (python bench/suite_timeline.py reads it).
_TIMELINE = os.environ.get("GRPO_TEST_TIMELINE")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # noqa: ANN001, ANN201
    start = time.time()
    yield
    if _TIMELINE:
        line = {
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
            "test": item.nodeid,
            "start": start,
            "end": time.time(),
        }
        with open(_TIMELINE, "a") as out:
            out.write(json.dumps(line) + "\n")


def pytest_runtest_logreport(report) -> None:  # noqa: ANN001
    if report.when == "call":
        _EVIDENCE.extend(v for k, v in report.user_properties if k == _EVIDENCE_KEY)


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    if _EVIDENCE:
        terminalreporter.section("fast-mode training updated the policy")
        for line in _EVIDENCE:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(config, items) -> None:  # noqa: ANN001
    """Long tests are not handed out last.

    xdist gives the workers tests in collection order, in chunks that shrink towards
    the end; a 30-second test among the last ones keeps one worker busy while the
    other has nothing left (on a fresh clone: 41 s of 379 idle, the two SIGKILL
    resume tests of ``test_training`` last). Tests marked ``slow`` in the last
    quarter of the collection move to the middle, at the start of a module (so no
    module fixture is set up twice); the order stays the same on every worker.
    """
    n = len(items)
    late = {i for i in range(3 * n // 4, n) if items[i].get_closest_marker("slow")}
    if not late:
        return
    moved = [items[i] for i in sorted(late)]
    rest = [item for i, item in enumerate(items) if i not in late]
    at = n // 2
    while 0 < at < len(rest) and rest[at].module is rest[at - 1].module:
        at += 1
    items[:] = rest[:at] + moved + rest[at:]


def pytest_unconfigure(config) -> None:  # noqa: ANN001
    shutil.rmtree(_RUNS, ignore_errors=True)
