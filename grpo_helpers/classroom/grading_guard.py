"""What the grading process keeps around a learner's kernel.

:mod:`grpo_helpers.classroom.grading` runs each student's notebooks with nbgrader in a
grading process of its own. This module is what that process adds around the
kernel that runs a submission, so that no code of the submission decides its own
grade:

* **the kernel's guard** (:func:`kernel_guard`, an IPython startup file, run before
  the first cell): a graded cell (one that holds the hidden tests) runs without
  the input transformers, AST transformers and custom exception handler that
  earlier cells installed, so that they cannot rewrite or silence it;
* **the verdict outside the kernel** (:func:`preprocessors`): after the notebook
  ran, each graded cell's printed results are compared with the key
  (:func:`grpo_helpers.classroom.hidden_tests.judge`), and its code with the teacher's;
  a wrong one gets an error output in first place, which nbgrader scores zero;
* **the watchdog** (:class:`Watchdog`): a thread that kills the kernel, and all
  it started, when a hidden test's case runs past its deadline (the kernel writes
  it to ``GRPO_GRADING_WATCH``) or a cell past its budget, however the
  learner's code treats the alarm;
* **no leftovers** (:func:`kill_descendants`): the grading process adopts every
  orphan of the kernel (Linux's child subreaper), and kills every process below
  it when a notebook's execution ends, before anything of the grade is written.

These are a second line: the first is the sandbox the kernel runs in
(:mod:`grpo_helpers.classroom.sandbox`), which keeps it from the teacher's files,
the network and other processes. The watchdog also kills a kernel that runs too
many processes (where the sandbox's own limit does not bind, as for root) and
:func:`preprocessors` one that prints too much.

This file is copied next to the grading process's script and imported from
there: it needs only the standard library, psutil and (in :func:`preprocessors`)
nbgrader.

Introduced in: docs/teaching.md (for teachers)
"""

from __future__ import annotations

import contextlib
import inspect
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: What marks a graded cell's hidden tests (``hidden_tests.BEGIN``).
MARK = "### BEGIN HIDDEN TESTS"
#: Seconds past a hidden test case's deadline before its kernel is killed (the
#: kernel's own alarm stops a case in milliseconds; this is for a busy machine).
GRACE = 3.0


# ----------------------------------------------------------------------------------
# Inside the kernel
# ----------------------------------------------------------------------------------


def kernel_guard():  # noqa: ANN201 - no annotations: its source is a startup file
    """Make graded cells immune to the notebook's own IPython hooks.

    Run in the kernel before any cell. A cell that holds the hidden tests' marker
    is transformed by a fresh ``TransformerManager`` (IPython's defaults, not
    ``input_transformers_cleanup`` or ``input_transformers_post`` as the notebook
    left them), skips ``ast_transformers`` and runs with no custom exception
    handler (``set_custom_exc``). Other cells run as usual.
    """
    import IPython
    from IPython.core.inputtransformer2 import TransformerManager

    shell = IPython.get_ipython()
    if shell is None:
        return
    kind = type(shell)
    graded = [False]

    def transform_cell(raw_cell):  # noqa: ANN001, ANN202
        graded[0] = "### BEGIN HIDDEN TESTS" in raw_cell
        if graded[0]:
            return TransformerManager().transform_cell(raw_cell)
        return kind.transform_cell(shell, raw_cell)

    def transform_ast(node):  # noqa: ANN001, ANN202
        return node if graded[0] else kind.transform_ast(shell, node)

    async def run_code(code_obj, result=None, *, async_=False):  # noqa: ANN001, ANN202
        if not graded[0]:
            return await kind.run_code(shell, code_obj, result, async_=async_)
        custom = shell.custom_exceptions
        shell.custom_exceptions = ()
        try:
            return await kind.run_code(shell, code_obj, result, async_=async_)
        finally:
            shell.custom_exceptions = custom

    shell.transform_cell = transform_cell
    shell.transform_ast = transform_ast
    shell.run_code = run_code


def write_kernel_guard(ipython_dir: Path) -> Path:
    """Write :func:`kernel_guard` as the startup file of a fresh IPython folder
    (the kernel's ``IPYTHONDIR``); returns the file."""
    startup = ipython_dir / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    path = startup / "00-grpo-kernel-guard.py"
    source = inspect.getsource(kernel_guard)
    path.write_text(f"{source}\n\nkernel_guard()\ndel kernel_guard\n")
    return path


# ----------------------------------------------------------------------------------
# Processes: adopt the orphans, kill what is left
# ----------------------------------------------------------------------------------


def become_subreaper() -> bool:
    """Make this process adopt its descendants' orphans (Linux's
    ``PR_SET_CHILD_SUBREAPER``): a process that a kernel started and left behind
    (double fork, new session) stays below it, where :func:`kill_descendants`
    finds it. False where the system has no such thing."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _living(process: Any) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def read_plain(path: Path, size: int = 4096) -> str:
    """The start of ``path`` where it is a plain file, else ``""``: not through a
    symbolic link, and without waiting on a pipe (a kernel writes the files of
    its folder, and may make them either)."""
    import stat

    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return ""
        return os.read(descriptor, size).decode(errors="replace")
    except OSError:
        return ""
    finally:
        os.close(descriptor)


def empty(folder: Path) -> None:
    """Remove what ``folder`` holds (links themselves, never what they point to)."""
    import shutil

    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def kill_descendants(pid: int | None = None, rounds: int = 50) -> int:
    """Kill every process below ``pid`` (default: this one), again until none
    is left (a process that forks while it is killed leaves orphans, which a
    subreaper adopts). Returns how many were killed."""
    import psutil

    try:
        root = psutil.Process(os.getpid() if pid is None else pid)
    except psutil.Error:
        return 0
    killed = 0
    for _ in range(rounds):
        try:
            alive = [p for p in root.children(recursive=True) if _living(p)]
        except psutil.Error:
            return killed
        if not alive:
            break
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()
                killed += 1
        psutil.wait_procs(alive, timeout=2)
    return killed


def reap() -> None:
    """Collect this process's dead children (orphans it adopted). Only where no
    child is managed by anyone else (after a kernel was shut down)."""
    with contextlib.suppress(ChildProcessError, OSError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


# ----------------------------------------------------------------------------------
# The watchdog
# ----------------------------------------------------------------------------------


class Watchdog:
    """Kill the kernel (every process below this one) when a hidden test case,
    a cell or a notebook runs past its time, or it runs too many processes,
    whatever the kernel does with its alarm.

    The kernel's hidden tests write each case's deadline and name to ``watch``
    (``GRPO_GRADING_WATCH``); the case is stopped :data:`GRACE` seconds after
    it. A cell gets the budget :meth:`begin_cell` gives it, a notebook the one
    :meth:`begin_notebook` gives it, which the kernel cannot change. More than
    ``max_processes`` processes below ``root`` (a fork bomb: where the sandbox's
    own limit does not bind, as for the root user) stop it too. Each stop is
    recorded in :attr:`stopped` under the notebook that was running.
    """

    def __init__(
        self,
        watch: Path,
        root: int | None = None,
        every: float = 0.2,
        max_processes: int | None = None,
    ) -> None:
        self.watch = Path(watch)
        self.root = root  # whose descendants are killed (default: this process's)
        self.every = every
        self.max_processes = max_processes
        self.notebook = ""
        self.stopped: dict[str, str] = {}
        self._cell: tuple[float, str] | None = None
        self._notebook: tuple[float, str] | None = None
        self._done = threading.Event()
        self.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def clear(self) -> None:
        """No case runs: the watch file removed (not written: the kernel may
        have made it a link to one of the teacher's files)."""
        with contextlib.suppress(OSError):
            self.watch.unlink()

    def begin_notebook(self, notebook: str, seconds: float | None = None) -> None:
        self.notebook = notebook
        self._cell = None
        self._notebook = None
        if seconds is not None:
            what = f"the notebook ran past {seconds:g} s"
            self._notebook = (time.time() + seconds, what)
        self.clear()

    def end_notebook(self) -> None:
        self._notebook = None

    def begin_cell(self, seconds: float, what: str) -> None:
        self._cell = (time.time() + seconds, what)

    def end_cell(self) -> None:
        self._cell = None

    def close(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def _case(self) -> tuple[float, str] | None:
        text = read_plain(self.watch)
        first, _, where = text.partition(" ")
        try:
            return float(first), where[:300]
        except ValueError:
            return None

    def _run(self) -> None:
        while not self._done.wait(self.every):
            now, case, cell = time.time(), self._case(), self._cell
            notebook = self._notebook
            if case is not None and now > case[0] + GRACE:
                self._stop(
                    f"stopped: {case[1]} ran past its time limit and went on "
                    "(an alarm caught or cancelled?); its kernel was killed"
                )
            elif cell is not None and now > cell[0]:
                self._stop(f"stopped: {cell[1]}; its kernel was killed")
            elif notebook is not None and now > notebook[0]:
                self._stop(f"stopped: {notebook[1]}; its kernel was killed")
            elif self.max_processes and self._processes() > self.max_processes + 2:
                self._stop(
                    f"stopped: it ran more than {self.max_processes} processes; "
                    "its kernel was killed"
                )

    def _processes(self) -> int:
        """Processes below ``root`` (a sandbox adds two: ``bwrap`` and its init,
        which the limit allows for)."""
        import psutil

        try:
            root = psutil.Process(os.getpid() if self.root is None else self.root)
            return len(root.children(recursive=True))
        except psutil.Error:
            return 0

    def stop(self, reason: str) -> None:
        """Kill the kernel now, for ``reason`` (the grading process found it)."""
        self._stop(reason)

    def _stop(self, reason: str) -> None:
        self.stopped.setdefault(self.notebook, reason)
        self._cell = None
        self.clear()
        kill_descendants(self.root)


# ----------------------------------------------------------------------------------
# nbgrader's autograde, with the watchdog and the verdict
# ----------------------------------------------------------------------------------


def _size(content: dict[str, Any]) -> int:
    """Characters of one output message's content (text, data, traceback)."""
    size = len(str(content.get("text", "")))
    size += sum(len(str(v)) for v in (content.get("data") or {}).values())
    return size + sum(len(str(line)) for line in content.get("traceback") or [])


def _printed(cell: Any) -> str:
    return "".join(
        o.get("text", "")
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream" and o.get("name") == "stdout"
    )


def _fail_first(cell: Any, verdict: str, node: Any) -> None:
    """Put an error first among the cell's outputs (nbgrader scores a graded cell
    by its first error or result): the cell's own error when it raised (it says
    more), else the verdict."""
    errors = [o for o in cell.outputs if o.get("output_type") == "error"]
    if errors:
        cell.outputs.remove(errors[0])
        first = errors[0]
    else:
        first = node(
            output_type="error",
            ename="AssertionError",
            evalue=verdict,
            traceback=[f"AssertionError: {verdict}"],
        )
    cell.outputs.insert(0, first)


def _kernel_killed(reason: str) -> Any:
    """An error output that says why the watchdog stopped the kernel."""
    from nbformat.notebooknode import NotebookNode

    return NotebookNode(
        output_type="error",
        ename="KernelKilled",
        evalue=reason,
        traceback=[f"KernelKilled: {reason}"],
    )


def _watched_execute(
    key: dict[str, Any],
    watchdog: Watchdog,
    budgets: dict[str, Any],
    cwd: Path | None = None,
    log: Path | None = None,
    fresh: Path | None = None,
) -> type:
    """nbgrader's ``Execute``, with every cell's time budget told to ``watchdog``,
    the kernel started in ``cwd`` with its output to ``log`` and ``fresh``
    emptied before, and what the notebook prints bounded."""
    from nbclient.util import run_sync
    from nbgrader.preprocessors import Execute

    class WatchedExecute(Execute):
        running = 0  # the index of the cell that runs
        printed = 0  # characters the notebook's outputs hold

        async def async_start_new_kernel(self, **kwargs: Any) -> None:
            if cwd is not None:
                kwargs.setdefault("cwd", str(cwd))
            if fresh is not None:  # what the last kernel left there: gone
                empty(fresh)
            if log is None:
                await super().async_start_new_kernel(**kwargs)
                return
            # the kernel's own output file: a kernel reads what its stdout and
            # stderr hold (/proc/self/fd), so not the grading process's log
            with open(log, "wb") as output:
                kwargs.setdefault("stdin", subprocess.DEVNULL)
                kwargs.setdefault("stdout", output)
                kwargs.setdefault("stderr", output)
                await super().async_start_new_kernel(**kwargs)

        # nbclient's synchronous name is bound to its own coroutine: rebind it
        start_new_kernel = run_sync(async_start_new_kernel)

        def output(self, outs: Any, msg: Any, display_id: Any, cell_index: int) -> Any:
            self.printed += _size(msg.get("content") or {})
            limit = budgets.get("output_bytes")
            if limit and self.printed > limit:
                if watchdog.notebook not in watchdog.stopped:
                    watchdog.stop(
                        f"stopped: the notebook printed more than {limit / 2**20:g} "
                        "MB; its kernel was killed"
                    )
                return None  # kept out of the notebook
            return super().output(outs, msg, display_id, cell_index)

        def preprocess(self, nb: Any, resources: Any = None, km: Any = None) -> Any:
            notebook = resources["nbgrader"]["notebook"]
            watchdog.begin_notebook(notebook, budgets.get("notebook"))
            self.printed = 0
            try:
                return super().preprocess(nb, resources, km)
            except Exception:
                if notebook not in watchdog.stopped:
                    raise
                # the watchdog killed the kernel: the cells from the one that ran
                # on get its reason (the verdict then scores them zero)
                for cell in nb.cells[self.running :]:
                    if cell.metadata.get("nbgrader", {}).get("grade"):
                        cell.outputs.append(_kernel_killed(watchdog.stopped[notebook]))
                return nb, resources
            finally:
                watchdog.end_cell()
                watchdog.end_notebook()
                kill_descendants()  # what the kernel started dies with it
                reap()
                watchdog.clear()

        def preprocess_cell(self, cell: Any, resources: Any, index: int) -> Any:
            self.running = index
            grader = cell.metadata.get("nbgrader", {})
            entry = key.get(watchdog.notebook, {}).get(grader.get("grade_id"), {})
            if grader.get("grade") and entry:
                cases = len(entry["expected"]) + 2  # and the learner's own check
                seconds = cases * budgets["graded"] + budgets["margin"]
                what = f"graded cell {grader['grade_id']} ran past {seconds:g} s"
            else:
                seconds = budgets["cell"] + budgets["margin"]
                what = f"cell {index} ran past {seconds:g} s"
            watchdog.begin_cell(seconds, what)
            try:
                return super().preprocess_cell(cell, resources, index)
            finally:
                watchdog.end_cell()

    return WatchedExecute


def _judge_hidden_tests(
    key: dict[str, Any], sources: dict[str, dict[str, str]], judge: Any
) -> type:
    """A preprocessor that judges each graded cell's printed results with the key."""
    from nbformat.notebooknode import NotebookNode
    from nbgrader.preprocessors import NbGraderPreprocessor

    class JudgeHiddenTests(NbGraderPreprocessor):  # enabled, as nbgrader's are
        def preprocess(self, nb: Any, resources: Any) -> Any:
            notebook = resources["nbgrader"]["notebook"]
            for cell in nb.cells:
                grader = cell.metadata.get("nbgrader", {})
                if not grader.get("grade"):
                    continue
                grade_id = grader.get("grade_id")
                teacher = sources.get(notebook, {}).get(grade_id)
                entry = key.get(notebook, {}).get(grade_id)
                if teacher is None or entry is None:
                    verdict = f"{grade_id}: no hidden test for this cell in the key"
                elif cell.source.rstrip() != teacher.rstrip():
                    verdict = f"{grade_id}: the graded cell's code is not the teacher's"
                else:
                    verdict = judge(_printed(cell), entry)
                if verdict:
                    _fail_first(cell, verdict, NotebookNode)
            return nb, resources

    return JudgeHiddenTests


def preprocessors(
    key: dict[str, Any],
    sources: dict[str, dict[str, str]],
    watchdog: Watchdog,
    budgets: dict[str, Any],
    judge: Any,
    cwd: Path | None = None,
    log: Path | None = None,
    fresh: Path | None = None,
) -> list[type]:
    """nbgrader's autograde preprocessors with two changes.

    * Its ``Execute`` tells ``watchdog`` which notebook and which cell runs, with
      each cell's budget (``budgets``: ``{"graded": seconds per hidden case,
      "cell": seconds for any other cell, "margin": seconds added}``) and the
      notebook's (``"notebook"``), starts the kernel in ``cwd`` (its stdout and
      stderr to the file ``log``, which holds only its own; the folder
      ``fresh``, which the kernel writes, emptied before), kills the
      kernel when the notebook prints more than ``"output_bytes"``, and kills
      what the kernel left when the notebook's execution ends.
    * After it, each graded cell is judged: its code must be the teacher's
      (``sources[notebook][grade_id]``) and what it printed must hold right
      results (``judge(printed, key[notebook][grade_id])``). A graded cell that
      fails gets an error output first, so nbgrader gives it no points.
    """
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute

    chain = list(Autograde.class_traits()["autograde_preprocessors"].default())
    at = chain.index(Execute)
    watched = _watched_execute(key, watchdog, budgets, cwd, log, fresh)
    judged = _judge_hidden_tests(key, sources, judge)
    return [*chain[:at], watched, judged, *chain[at + 1 :]]


__all__ = [
    "GRACE",
    "MARK",
    "Watchdog",
    "become_subreaper",
    "kernel_guard",
    "kill_descendants",
    "empty",
    "preprocessors",
    "read_plain",
    "reap",
    "write_kernel_guard",
]
