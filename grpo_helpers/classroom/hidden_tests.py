"""Hidden tests: what a graded cell of the student edition runs when it is graded.

The teacher's solutions (``notebooks/solutions/<notebook>.py``) list, beside each
exercise, hidden cases in a ``HIDDEN_CASES`` dict: inputs other than those of the
notebook's own check, a tolerance where floats are involved, and the package
functions the exercise says not to use. When the student edition is built,
:func:`hidden_test` calls the solution on every case and returns two things:

* a **block** of code for the exercise's graded cell, between nbgrader's
  ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS`` markers: the source of
  :func:`run_hidden_tests` (copied rather than imported, so that a submission that
  patches a module cannot change it), the exercise's ``setup`` (building Datums,
  data frames or a fake client from literal data) and the cases, as literals.
  It calls the learner's function on every case and prints what came back, as
  plain literals, on one line that starts with :data:`RESULT`;
* a **key**: the expected values and the tolerance. The key never enters the
  learner's kernel: it stays in the teacher's course directory and the grading
  process, which compares the printed results with it (:func:`judge`) after the
  cell ran. No frame, history, cache or file of the kernel holds an expected
  value, so a submission that walks the stack, reads IPython's history or the
  gradebook finds none.

nbgrader removes the block from the notebooks students get and puts it back when
it autogrades.

While the block calls the learner's function, a **forbidden** package function (the
exercise's ``forbid`` list) stays forbidden however it is reached: the package's
own function raises (its code is swapped), and a profiler watches every function
the call runs, in its thread and in threads it starts. A function whose code is
the forbidden one (:func:`fingerprint`: its bytecode, names and constants, wherever
it was loaded from) fails the case: a second copy of the module loaded from its
file, a re-import, a function rebuilt from the original's ``__code__``. An audit
hook (which cannot be removed) also fails the case when the call makes or
re-executes such code, starts a process, or switches the profiler off.

Each call gets ``GRPO_CHECK_SECONDS`` seconds (default 60): an alarm raises in the
learner's code, again and again until the call ends, and the case fails even if
the learner's code swallowed it or stopped the timer. Under the grader, each case
also writes its deadline to ``GRPO_GRADING_WATCH``: a learner's loop that catches
``BaseException`` or cancels the alarm is stopped from outside, by killing the
kernel (:mod:`grpo_helpers.classroom.grading`).

In the grader's sandbox (:mod:`grpo_helpers.classroom.sandbox`), a case also fails
while another process of the notebook is running: a process pool started before the
test would compute the answer where no watch is.

What it does not stop: a submission that rewrites the interpreter or the kernel's
own machinery (Python's builtins, ``sys.stdout``, IPython's methods, the standard
library functions this code calls) or runs a copy on a thread started before the
test. The teacher's files are out of its reach only in the sandbox; see
:mod:`grpo_helpers.classroom.grading` for where grading runs.

The module is longer than most (about 780 lines) and stays whole on purpose: the
code copied into graded cells, the build that writes it with its key, and the
verdict that reads what it printed are one protocol, and each half must change
with the others.

Introduced in: docs/teaching.md (for teachers)
"""

from __future__ import annotations

import ast
import copy
import inspect
import json
import numbers
import pprint
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: Package functions no exercise may call: the teacher's loader of the solutions.
ALWAYS_FORBIDDEN = ("grpo_helpers.classroom.course._load_solutions",)
#: What starts the line on which a hidden test prints the learner's results.
RESULT = "grpo-hidden-result: "


def fingerprint(code: Any) -> tuple:
    """What identifies a function's code, wherever and however it was loaded.

    Its name, bytecode, names, local names and constants (nested code included):
    the same for a function of a module loaded twice, re-imported or exec'd from
    its file, different for a function written in a notebook cell. Plain
    literals, so that a hidden test can carry it.

    Example::

        >>> source = "def f(x): return x + 1"
        >>> one, two = {}, {}
        >>> exec(compile(source, "one.py", "exec"), one)
        >>> exec(compile(source, "two.py", "exec"), two)
        >>> fingerprint(one["f"].__code__) == fingerprint(two["f"].__code__)
        True
        >>> fingerprint((lambda x: x + 1).__code__) == fingerprint(one["f"].__code__)
        False
    """

    def constant(value: Any) -> Any:
        if type(value) is type(fingerprint.__code__):
            return fingerprint(value)
        if isinstance(value, tuple):
            return tuple(constant(v) for v in value)
        if isinstance(value, frozenset):  # its order changes from run to run
            return ("frozenset", tuple(sorted(repr(v) for v in value)))
        return repr(value)

    return (
        code.co_name,
        code.co_code,
        code.co_names,
        code.co_varnames,
        tuple(constant(c) for c in code.co_consts),
    )


def fingerprint_hash(code: Any) -> str:
    """:func:`fingerprint` as a short hex string (SHA-256 of its ``repr``).

    Example::

        >>> len(fingerprint_hash(fingerprint_hash.__code__))
        64
    """
    import hashlib

    return hashlib.sha256(repr(fingerprint(code)).encode()).hexdigest()


def run_hidden_tests(
    name: str,
    function: Any,
    cases: list[Any],
    forbid: tuple[str, ...] | list[str] = (),
    fingerprints: Mapping[str, str] | None = None,
    prepare: Callable[[Any], tuple] | None = None,
    project: Callable[[Any, tuple], Any] | None = None,
    value: bool = False,
) -> list[list[Any]]:
    """Call ``function`` on every case; print what it returned, as literals, on
    one line that starts with :data:`RESULT`.

    Whether the results are right is decided outside the learner's kernel, by
    :func:`judge` with the key that :func:`hidden_test` made. This raises
    ``AssertionError`` (after printing) at the first case that raised, ran past
    its time, changed the time limit or the watch, started a process, or reached
    a forbidden function; the cases after it do not run.

    Self-contained (its imports and helpers are inside; :func:`fingerprint` and
    :func:`fingerprint_hash` are copied beside it): its source is copied into
    graded cells. It stays one function on purpose: its helpers are closures, so
    the learner's code, which runs inside it, cannot rebind them, as it could a
    name in the kernel's globals.

    Args:
        name: the exercise's name, for the messages.
        function: the learner's function (or, with ``value=True``, the learner's
            value itself).
        cases: one entry per call: the arguments (a tuple), or what ``prepare``
            turns into the arguments.
        forbid: dotted names of package functions the exercise rules out.
        fingerprints: ``{dotted name: fingerprint_hash}`` of those functions,
            taken when the edition was built (a module swapped in
            ``sys.modules`` does not hide them).
        prepare: ``case -> arguments``; default ``tuple(case)``.
        project: ``(result, arguments) -> literal``; default the result itself.
        value: the exercise is a value, not a function: ``function`` is it.

    Returns:
        One outcome per case run: ``["value", literal]``, ``["other", what]``
        (a result with no literal form) or ``["error", message]``.
    """
    import copy
    import importlib
    import inspect
    import json
    import numbers
    import os
    import signal
    import sys
    import threading
    import time
    import types

    class HiddenTimeout(BaseException):
        pass

    class Unreadable(Exception):
        pass

    seconds = float(os.environ.get("GRPO_CHECK_SECONDS") or 60)
    watch = os.environ.get("GRPO_GRADING_WATCH") or ""
    code_type = type(fingerprint.__code__)
    labels = {mark: dotted for dotted, mark in (fingerprints or {}).items()}
    targets = []
    for dotted in forbid:
        module_name, _, attribute = dotted.rpartition(".")
        try:
            target = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError):
            continue
        if isinstance(target, types.FunctionType):
            targets.append((dotted, target))
            labels.setdefault(fingerprint_hash(target.__code__), dotted)
    names = {dotted.rpartition(".")[2] for dotted in forbid}
    names |= {target.__code__.co_name for _, target in targets}
    known: dict[int, tuple[Any, str]] = {}

    def reached(code: Any) -> str:
        """The forbidden function whose code ``code`` is, or holds; ``""``."""
        entry = known.get(id(code))
        if entry is not None and entry[0] is code:
            return entry[1]
        label = ""
        if code.co_name in names:
            label = labels.get(fingerprint_hash(code), "")
        for constant in code.co_consts:
            if not label and type(constant) is code_type:
                label = reached(constant)
        known[id(code)] = (code, label)
        return label

    def refusal(dotted: str) -> types.CodeType:
        message = (
            f"{name}: this exercise asks you to write it without {dotted} "
            "(the hidden test makes it raise)"
        )
        source = f"def refuse(*args, **kwargs):\n    raise RuntimeError({message!r})\n"
        namespace: dict[str, Any] = {}
        exec(source, namespace)
        return namespace["refuse"].__code__

    refusals = {dotted: refusal(dotted) for dotted, _ in targets}
    state: dict[str, Any] = {
        "active": False,
        "reached": "",
        "other": "",
        "probed": False,
    }
    starts: tuple[str, ...] = ("subprocess.Popen", "os.system", "os.fork", "os.forkpty")
    starts += ("os.posix_spawn", "os.exec", "os.spawn", "pty.spawn")

    def forbidden(dotted: str) -> str:
        return (
            f"reached {dotted} (a copy of it, re-imported or rebuilt), which this "
            "exercise asks you to write without"
        )

    def audit(event: str, args: tuple) -> None:
        if event == "grpo.hidden_tests.probe":
            state["probed"] = True
        if not state["active"]:
            return
        label = ""
        if event in ("exec", "function.__new__") and args:
            label = reached(args[0]) if type(args[0]) is code_type else ""
        elif event == "object.__setattr__" and len(args) == 3:
            if args[1] == "__code__" and type(args[2]) is code_type:
                label = reached(args[2])
        elif event in starts:
            state["other"] = state["other"] or f"started a process ({event})"
            raise RuntimeError(f"{name}: the hidden test allows no new process")
        elif event == "sys.setprofile":
            state["other"] = state["other"] or "switched off the hidden test's watch"
        if label:
            state["reached"] = state["reached"] or label
            raise RuntimeError(f"{name}: {forbidden(label)}")

    def watcher(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and not state["reached"]:
            state["reached"] = reached(frame.f_code)

    sys.addaudithook(audit)
    sys.audit("grpo.hidden_tests.probe")

    timer = {"armed": False, "fired": False}

    def stop(signum: int, frame: Any) -> None:
        if timer["armed"]:
            timer["fired"] = True
            raise HiddenTimeout

    timed = hasattr(signal, "setitimer") and (
        threading.current_thread() is threading.main_thread()
    )
    repeat = 0.05  # after the limit, the alarm comes back until the call ends

    def drive(coroutine: Any) -> Any:
        """Run a coroutine whose awaits finish at once (the fake clients')."""
        try:
            while True:
                if coroutine.send(None) is not None:
                    raise RuntimeError("it awaited something other than the client")
        except StopIteration as done:
            return done.value

    def literal(thing: Any, depth: int = 0) -> Any:
        """``thing`` as plain literals, made inside the watched call (so the
        learner's ``__float__`` or ``__iter__`` runs under the same rules)."""
        if depth > 40:
            raise Unreadable("a structure nested too deep")
        if thing is None:
            return None
        if isinstance(thing, bool) or type(thing).__name__ == "bool_":
            return bool(thing)
        if isinstance(thing, numbers.Integral):
            return int(thing)
        if isinstance(thing, numbers.Real):
            return float(thing)
        if isinstance(thing, str):
            return str.__str__(thing)
        if type(thing).__name__ == "ndarray":
            return literal(thing.tolist(), depth + 1)
        if isinstance(thing, (list, tuple)):
            return [literal(t, depth + 1) for t in thing]
        if isinstance(thing, dict):
            if any(type(k) is not str for k in thing):
                raise Unreadable("a dict whose keys are not all strings")
            return {str.__str__(k): literal(v, depth + 1) for k, v in thing.items()}
        raise Unreadable(f"a {type(thing).__name__}")

    def shown(thing: Any) -> str:
        try:
            text = repr(thing)
        except Exception:  # noqa: BLE001 - any object: say what it is
            text = f"a {type(thing).__name__}"
        return text if len(text) <= 120 else text[:117] + "..."

    def deadline(where: str) -> None:
        """Tell the grader (``GRPO_GRADING_WATCH``) when this case must end."""
        if not watch:
            return
        try:
            with open(watch, "w") as out:
                out.write(f"{time.time() + seconds:.3f} {where}" if where else "")
        except OSError:
            pass

    def beside() -> int:
        """Living processes beside the kernel in the grader's sandbox (its PID 1 is
        bwrap's; elsewhere 0): one started before the test, a process pool's
        worker say, runs where no watch is."""
        try:
            with open("/proc/1/comm") as comm:
                if comm.read().strip() != "bwrap":
                    return 0
            entries = os.listdir("/proc")
        except OSError:
            return 0
        count = 0
        for entry in entries:
            if not entry.isdigit() or int(entry) in (1, os.getpid()):
                continue
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    living = stat.read().rpartition(")")[2].split()[0] != "Z"
            except (OSError, IndexError):
                continue  # it ended
            count += living
        return count

    def run(args: tuple, where: str) -> list[Any]:
        others = beside()
        if others:
            return [
                "error",
                f"{where}: {others} other process(es) of the notebook were running "
                "(a process pool started before the hidden test?); the hidden test "
                "runs the learner's code alone",
            ]
        swapped: list[tuple[Any, Any]] = []
        state.update(reached="", other="")
        timer["fired"] = False
        profiles = (sys.getprofile(), threading.getprofile())
        handler = signal.getsignal(signal.SIGALRM) if timed else None
        checks = {}

        def disarm() -> None:
            timer["armed"] = False  # first: from here the alarm does nothing
            state["active"] = False
            for target, code in swapped:
                target.__code__ = code
            if "watch" not in checks:
                checks["watch"] = sys.getprofile() is watcher
                if timed:
                    interval = signal.getitimer(signal.ITIMER_REAL)[1]
                    checks["timer"] = abs(interval - repeat) < 1e-3
                    checks["handler"] = signal.getsignal(signal.SIGALRM) is stop
            sys.setprofile(profiles[0])
            threading.setprofile(profiles[1])
            if timed:
                signal.setitimer(signal.ITIMER_REAL, 0)
                if handler is not None:
                    signal.signal(signal.SIGALRM, handler)

        deadline(where)
        outcome: list[Any] = []
        try:
            try:
                for dotted, target in targets:
                    if target.__closure__ is None:
                        swapped.append((target, target.__code__))
                        target.__code__ = refusals[dotted]
                if timed:
                    signal.signal(signal.SIGALRM, stop)
                threading.setprofile(watcher)
                sys.setprofile(watcher)
                state["active"] = True
                if timed:
                    timer["armed"] = True
                    signal.setitimer(signal.ITIMER_REAL, seconds, repeat)
                got = function if value else function(*args)
                if inspect.iscoroutine(got):
                    got = drive(got)
                if project is not None:
                    got = project(got, args)
                try:
                    outcome = ["value", literal(got)]
                except Unreadable as unreadable:
                    outcome = ["other", str(unreadable)]
            finally:
                while True:  # an alarm due just before it disarms: disarm again
                    try:
                        disarm()
                        break
                    except HiddenTimeout:
                        continue
        except HiddenTimeout:
            timer["fired"] = True
        except Exception as error:  # the learner's bug: report it as a failure
            outcome = ["error", f"{where}: raised {type(error).__name__}: {error}"]
        deadline("")
        problems = [
            (timer["fired"], f"took longer than {seconds:g} s: an endless loop?"),
            (bool(state["reached"]), forbidden(state["reached"])),
            (bool(state["other"]), state["other"]),
            (not checks.get("timer", True), "stopped the hidden test's time limit"),
            (not checks.get("handler", True), "changed the hidden test's alarm"),
            (not checks["watch"], "switched off the hidden test's watch"),
        ]
        for problem, message in problems:
            if problem:
                return ["error", f"{where}: {message}"]
        return outcome

    outcomes: list[list[Any]] = []
    total = len(cases)
    for number, case in enumerate(cases, start=1):
        where = f"hidden test of {name}, case {number} of {total} ({shown(case)})"
        if not state["probed"]:
            outcomes.append(["error", f"{where}: the hidden test could not watch it"])
            break
        case = copy.deepcopy(case)  # a function that changes its input changes no case
        args = prepare(case) if prepare is not None else tuple(case)
        outcomes.append(run(args, where))
        if outcomes[-1][0] == "error":
            break
    record = json.dumps({"exercise": name, "outcomes": outcomes})
    print("grpo-hidden-result: " + record)  # RESULT
    for kind, message in outcomes:
        if kind == "error":
            raise AssertionError(message)
    return outcomes


# ----------------------------------------------------------------------------------
# The grader's side: the key and the verdict
# ----------------------------------------------------------------------------------


def same(got: Any, want: Any, tol: float | None = None) -> bool:
    """Whether a printed result equals an expected literal, in plain Python.

    Types first (a number, a string, a list...), then values: exactly, or within
    the absolute tolerance ``tol`` for numbers. Lists and tuples are alike.

    Example::

        >>> same(0.5000001, 0.5, tol=1e-6), same(0.5001, 0.5, tol=1e-6)
        (True, False)
        >>> same(True, 1), same([1, "a"], (1, "a"))
        (False, True)
    """
    if want is None:
        return got is None
    if isinstance(want, bool):
        return isinstance(got, bool) and got is want
    if isinstance(want, (int, float)):
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return False
        difference = float(got) - want
        if tol is None:
            return difference == 0
        return -tol <= difference <= tol
    if isinstance(want, str):
        return isinstance(got, str) and got == want
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return False
        return all(same(g, w, tol) for g, w in zip(got, want, strict=True))
    if isinstance(want, dict):
        if not isinstance(got, dict) or sorted(got) != sorted(want):
            return False
        return all(same(got[k], want[k], tol) for k in want)
    return False


def _short(thing: Any) -> str:
    text = repr(thing)
    return text if len(text) <= 120 else text[:117] + "..."


def results(printed: str, exercise: str) -> list[Any]:
    """The records that a graded cell's output (``printed``) holds for
    ``exercise``: one per run of its hidden tests; an unreadable line is None."""
    records: list[Any] = []
    for line in printed.splitlines():
        if not line.startswith(RESULT):
            continue
        try:
            record = json.loads(line[len(RESULT) :])
        except ValueError:
            records.append(None)
            continue
        if isinstance(record, dict) and record.get("exercise") == exercise:
            records.append(record)
    return records


def judge(printed: str, key: Mapping[str, Any]) -> str:
    """``""`` when ``printed`` (everything a graded cell printed) holds the
    results of ``key``'s exercise and every one is right; else what is wrong.

    Args:
        printed: the cell's stream output.
        key: the exercise's entry of the key (:attr:`Hidden.key`): ``exercise``,
            ``expected``, ``tol`` and ``shown`` (each case, for the messages).

    Example::

        >>> key = {"exercise": "double", "expected": [2, 4], "tol": None,
        ...        "shown": ["(1,)", "(2,)"]}
        >>> line = RESULT + '{"exercise": "double", "outcomes": '
        >>> judge(line + '[["value", 2], ["value", 4]]}', key)
        ''
        >>> judge(line + '[["value", 2], ["value", 5]]}', key)
        'hidden test of double, case 2 of 2 ((2,)): wrong result 5'
        >>> judge("", key)
        'hidden test of double: no results were printed (did its tests run?)'
    """
    name, expected, shown = key["exercise"], key["expected"], key["shown"]
    records = results(printed, name)
    if not records:
        return f"hidden test of {name}: no results were printed (did its tests run?)"
    if len(records) > 1:
        return f"hidden test of {name}: {len(records)} sets of results, one expected"
    outcomes = (records[0] or {}).get("outcomes")
    if not isinstance(outcomes, list):
        return f"hidden test of {name}: its results could not be read"
    total = len(expected)
    for number, want in enumerate(expected, start=1):
        where = f"hidden test of {name}, case {number} of {total} ({shown[number - 1]})"
        if number > len(outcomes):
            return f"{where}: not run"
        outcome = outcomes[number - 1]
        if not (isinstance(outcome, list) and len(outcome) == 2):
            return f"{where}: its result could not be read"
        kind, got = outcome
        if kind == "error":
            return str(got)[:600] if str(got).startswith(where) else f"{where}: {got}"
        if kind != "value":
            return f"{where}: wrong result: {str(got)[:120]}"
        if got is None and want is not None:
            return f"{where}: returned None: is it still the stub?"
        if not same(got, want, key.get("tol")):
            return f"{where}: wrong result {_short(got)}"
    if len(outcomes) != total:
        return f"hidden test of {name}: {len(outcomes)} results for {total} cases"
    return ""


# ----------------------------------------------------------------------------------
# Build time: the block written into a graded cell, and the key kept beside it
# ----------------------------------------------------------------------------------

BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


@dataclass(frozen=True)
class Hidden:
    """One exercise's hidden test, as :func:`hidden_test` builds it."""

    #: The graded cell's block, markers included: cases, no expected value.
    block: str
    #: What :func:`judge` needs: ``exercise``, ``expected``, ``tol``, ``shown``.
    #: The teacher's side only.
    key: dict[str, Any]


def to_literal(thing: Any) -> Any:
    """``thing`` as plain literals (numpy scalars and arrays become Python ones).

    Raises:
        ValueError: something that has no literal form, or a float that is not
            finite.

    Example::

        >>> import numpy as np
        >>> to_literal({"a": np.float64(0.5), "b": (np.int64(1), True)})
        {'a': 0.5, 'b': (1, True)}
    """
    if thing is None or isinstance(thing, (bool, str)):
        return thing
    if type(thing).__name__ == "bool_":
        return bool(thing)
    if isinstance(thing, numbers.Integral):
        return int(thing)
    if isinstance(thing, numbers.Real):
        number = float(thing)
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError(f"a hidden test cannot expect {number}")
        return number
    if type(thing).__name__ == "ndarray":
        return to_literal(thing.tolist())
    if isinstance(thing, (list, tuple)):
        items = [to_literal(t) for t in thing]
        return items if isinstance(thing, list) else tuple(items)
    if isinstance(thing, dict):
        return {str(k): to_literal(v) for k, v in thing.items()}
    raise ValueError(f"a hidden test cannot write a {type(thing).__name__} literally")


def _literal_source(thing: Any) -> str:
    text = pprint.pformat(thing, width=84, sort_dicts=False)
    if ast.literal_eval(text) != thing:
        raise ValueError(f"{text[:80]} does not read back as the same value")
    return text


def _fingerprints(forbid: list[str]) -> dict[str, str]:
    """``{dotted name: fingerprint_hash}`` of the forbidden package functions."""
    import importlib
    import types

    marks = {}
    for dotted in forbid:
        module_name, _, attribute = dotted.rpartition(".")
        target = getattr(importlib.import_module(module_name), attribute)
        if isinstance(target, types.FunctionType):
            marks[dotted] = fingerprint_hash(target.__code__)
    return marks


def hidden_test(name: str, entry: Mapping[str, Any], solution: Any) -> Hidden:
    """The hidden test of one exercise: the graded cell's block and the key.

    Args:
        name: the exercise's name (the function or value the learner defines).
        entry: its ``HIDDEN_CASES`` entry: ``cases``, and optionally ``tol``,
            ``forbid``, ``setup`` (source defining ``prepare`` and/or ``project``)
            and ``value``.
        solution: the reference function (or value).

    Returns:
        The block (markers included; the cases, never an expected value) and the
        key (the expected values, computed here from ``solution``).
    """
    cases = to_literal(list(entry["cases"]))
    _literal_source(cases)
    setup = textwrap.dedent(entry.get("setup", "")).strip()
    namespace: dict[str, Any] = {}
    exec(compile(setup or "pass", f"<hidden setup of {name}>", "exec"), namespace)
    prepare = namespace.get("prepare")
    project = namespace.get("project")
    is_value = bool(entry.get("value", False))
    expected = []
    for case in cases:
        case = copy.deepcopy(case)
        args = prepare(case) if prepare is not None else tuple(case)
        result = solution if is_value else solution(*args)
        if inspect.iscoroutine(result):
            result = _finish(result)
        expected.append(
            to_literal(result if project is None else project(result, args))
        )
    if len({repr(e) for e in expected}) < 2 and len(expected) > 1:
        raise ValueError(f"the hidden cases of {name} all expect the same value")
    forbid = [*entry.get("forbid", []), *ALWAYS_FORBIDDEN]
    runtime = "\n\n".join(
        _without_annotations(inspect.getsource(f))
        for f in (fingerprint, fingerprint_hash, run_hidden_tests)
    )
    arguments = [
        f"{name!r}",
        name,
        f"cases={_literal_source(cases)}",
        f"forbid={forbid!r}",
        f"fingerprints={_literal_source(_fingerprints(forbid))}",
    ]
    if prepare is not None:
        arguments.append("prepare=prepare")
    if project is not None:
        arguments.append("project=project")
    if is_value:
        arguments.append("value=True")
    call = "run_hidden_tests(\n" + textwrap.indent(",\n".join(arguments), "    ")
    body = "\n\n".join(part for part in (runtime, setup, call + ",\n)") if part)
    block = (
        f"{BEGIN}\n"
        f"# Hidden tests of {name}: the cases are literals; the grader compares the\n"
        "# results printed below with expected values that it keeps.\n"
        f"def _grpo_hidden_tests_{name}():\n"
        f"{textwrap.indent(body, '    ')}\n\n\n"
        f"_grpo_hidden_tests_{name}()\n"
        f"del _grpo_hidden_tests_{name}\n"
        f"{END}"
    )
    shown = [_short(c) for c in cases]
    key = {
        "exercise": name,
        "expected": expected,
        "tol": entry.get("tol"),
        "shown": shown,
    }
    json.dumps(key, allow_nan=False)  # the key is written as JSON
    return Hidden(block, key)


def _without_annotations(source: str) -> str:
    """The source with its type annotations removed: in a notebook cell (no
    ``from __future__ import annotations``) they would be evaluated, and the
    names they use are not defined there."""

    class Strip(ast.NodeTransformer):
        def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
            node.returns = None
            arguments = node.args
            for arg in [
                *arguments.posonlyargs,
                *arguments.args,
                *arguments.kwonlyargs,
                arguments.vararg,
                arguments.kwarg,
            ]:
                if arg is not None:
                    arg.annotation = None
            self.generic_visit(node)
            return node

        def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
            if node.value is None:
                return ast.Pass()
            return ast.Assign(targets=[node.target], value=node.value, lineno=0)

    tree = Strip().visit(ast.parse(textwrap.dedent(source)))
    return ast.unparse(ast.fix_missing_locations(tree))


def _finish(coroutine: Any) -> Any:
    try:
        while True:
            coroutine.send(None)
    except StopIteration as done:
        return done.value


__all__ = [
    "ALWAYS_FORBIDDEN",
    "BEGIN",
    "END",
    "RESULT",
    "Hidden",
    "fingerprint",
    "fingerprint_hash",
    "hidden_test",
    "judge",
    "run_hidden_tests",
    "same",
]
