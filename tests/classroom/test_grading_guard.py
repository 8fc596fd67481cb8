"""What the grading process keeps around a learner's kernel
(``grading_guard.py``), with stand-in processes and no nbgrader.

* a daemon left by a kernel (a writer in a session of its own) is adopted by the
  grading process (Linux's subreaper) and killed;
* the watchdog kills what runs below the grading process past a case's deadline
  that a hidden test wrote for it, past a cell's budget, past a notebook's budget,
  or when more processes run than it allows; the reason is recorded under the
  notebook.

The guards attacked by the graded students (kit's leftover, kim's and lee's
endless loops, lin's lingerer, ezra's fork hog): ``test_grading.py``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]

#: A process that writes to a file every 0.05 s for a minute.
WRITER = (
    "import sys, time\n"
    "for _ in range(1200):\n"
    "    open(sys.argv[1], 'a').write('.')\n"
    "    time.sleep(0.05)\n"
)


def _still_writing(path, seconds=0.6):
    before = path.stat().st_size if path.exists() else 0
    time.sleep(seconds)
    return (path.stat().st_size if path.exists() else 0) > before


def test_a_daemon_left_by_a_kernel_is_adopted_and_killed(tmp_path):
    """A stand-in grading process adopts orphans (Linux's subreaper); a kernel
    starts a writer in a session of its own and exits: kill_descendants ends the
    writer."""
    canary = tmp_path / "canary"
    grading_process = textwrap.dedent(f"""
        import pathlib, subprocess, sys, time
        sys.path.insert(0, {str(ROOT / "grpo_helpers" / "classroom")!r})
        import grading_guard
        assert grading_guard.become_subreaper()
        kernel = (
            "import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
            + repr({WRITER!r}) + ", {str(canary)!r}], start_new_session=True)"
        )
        subprocess.run([sys.executable, "-c", kernel], timeout=30)
        for _ in range(300):  # the writer runs; the kernel is gone
            if pathlib.Path({str(canary)!r}).exists():
                break
            time.sleep(0.1)
        time.sleep(0.2)
        print(grading_guard.kill_descendants())
    """)
    if not sys.platform.startswith("linux"):
        pytest.skip("the subreaper is Linux's")
    done = subprocess.run(
        [sys.executable, "-c", grading_process],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1"]  # the writer, adopted, then killed
    assert canary.stat().st_size > 0  # it ran
    assert not _still_writing(canary)


def test_the_watchdog_kills_past_a_deadline_it_was_told_or_a_cell_budget(
    tmp_path, monkeypatch
):
    from grpo_helpers.classroom import grading_guard

    monkeypatch.setattr(grading_guard, "GRACE", 0.2)
    for how in ("case", "cell"):
        canary = tmp_path / f"canary-{how}"
        # a stand-in for the grading process (root) whose child writes
        root = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import subprocess, sys, time\n"
                f"subprocess.Popen([sys.executable, '-c', {WRITER!r}, sys.argv[1]])\n"
                "time.sleep(60)\n",
                str(canary),
            ]
        )
        try:
            watchdog = grading_guard.Watchdog(tmp_path / "watch", root=root.pid)
            watchdog.begin_notebook("03_x")
            for _ in range(300):  # until the writer runs
                if canary.exists():
                    break
                time.sleep(0.05)
            assert _still_writing(canary, 0.3)
            if how == "case":  # what a hidden test writes: due now
                (tmp_path / "watch").write_text(f"{time.time():.3f} case 1 of 7")
            else:
                watchdog.begin_cell(0.1, "cell 4 ran past 0.1 s")
            time.sleep(1.0)
            assert not _still_writing(canary, 0.4)
            assert root.poll() is None  # only what is below it
            reason = watchdog.stopped["03_x"]
            assert reason.startswith(
                "stopped: case 1 of 7 ran past" if how == "case" else "stopped: cell 4"
            )
            assert reason.endswith("its kernel was killed")
            watchdog.close()
        finally:
            root.kill()
            root.wait()


def test_the_watchdog_kills_past_a_notebook_budget_or_too_many_processes(tmp_path):
    """A notebook's budget (begin_notebook), and more processes below the grading
    process than ``max_processes`` allows (a fork bomb where the sandbox's own
    limit does not bind), stop the kernel too."""
    from grpo_helpers.classroom import grading_guard

    sleeper = "import signal, subprocess, sys, time\n" + (
        "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"  # no zombies to wait for
        "for _ in range(int(sys.argv[1])):\n"
        "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )
    for how, children in (("notebook", 1), ("processes", 6)):
        root = subprocess.Popen([sys.executable, "-c", sleeper, str(children)])
        watchdog = None
        try:
            for _ in range(300):  # until its children run
                if len(psutil.Process(root.pid).children()) == children:
                    break
                time.sleep(0.05)
            limit = 3 if how == "processes" else None
            watchdog = grading_guard.Watchdog(
                tmp_path / "watch", root=root.pid, every=0.05, max_processes=limit
            )
            watchdog.begin_notebook("03_x", 0.1 if how == "notebook" else None)
            for _ in range(100):
                if "03_x" in watchdog.stopped:
                    break
                time.sleep(0.05)
            reason = watchdog.stopped["03_x"]
            assert reason.startswith(
                "stopped: the notebook ran past 0.1 s"
                if how == "notebook"
                else "stopped: it ran more than 3 processes"
            ), reason
            for _ in range(100):  # SIGKILL sent; the children exit
                if not psutil.Process(root.pid).children():
                    break
                time.sleep(0.05)
            assert psutil.Process(root.pid).children() == []
        finally:
            if watchdog is not None:
                watchdog.close()
            root.kill()
            root.wait()
