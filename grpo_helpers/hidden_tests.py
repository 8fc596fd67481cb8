"""Hidden tests: what a graded cell of the student edition runs when it is graded.

The teacher's solutions (``notebooks/solutions/<notebook>.py``) list, beside each
exercise, hidden cases in a ``HIDDEN_CASES`` dict: inputs other than those of the
notebook's own check, a tolerance where floats are involved, and the package
functions the exercise says not to use. When the student edition is built,
:func:`hidden_block` calls the solution on every case and writes a block of code
into the exercise's graded cell, between nbgrader's ``### BEGIN HIDDEN TESTS`` and
``### END HIDDEN TESTS`` markers. The block holds

* the source of :func:`run_hidden_tests`, copied rather than imported, so that a
  submission that patches a module (``checks``, this one) cannot change it;
* the exercise's ``setup`` (building Datums, data frames or a fake client from
  literal data, and reading what the function returns as literals);
* the cases and the expected values, as literals.

nbgrader removes the block from the notebooks students get and puts it back when
it autogrades, so the expected values and the solutions stay with the teacher.

A hidden test fails on a stub, on a wrong answer and on an answer that only
hard-codes the visible cases (the inputs differ); while it calls the learner's
function, the package functions the exercise rules out raise (their code is
swapped, so every name bound to them raises), and each call gets
``GRPO_CHECK_SECONDS`` seconds (default 60) before it is stopped as an endless
loop. It compares with plain Python: it checks types (a number, a string, a
list...) before values, so an object that claims to equal anything fails.

What it does not stop: a submission that rewrites Python's builtins or the
interpreter, keeps a reference to a forbidden function's original code, or reads
the grading files; see ``grpo_helpers.grading`` for where grading runs.

Introduced in: the README (for teachers)
"""

from __future__ import annotations

import ast
import copy
import inspect
import numbers
import pprint
import textwrap
from collections.abc import Callable, Mapping
from typing import Any

#: Package functions no exercise may call: the teacher's loader of the solutions.
ALWAYS_FORBIDDEN = ("grpo_helpers.course._load_solutions",)


def run_hidden_tests(
    name: str,
    function: Any,
    cases: list[Any],
    expected: list[Any],
    tol: float | None = None,
    forbid: tuple[str, ...] | list[str] = (),
    prepare: Callable[[Any], tuple] | None = None,
    project: Callable[[Any, tuple], Any] | None = None,
    value: bool = False,
) -> None:
    """Call ``function`` on every case; raise ``AssertionError`` at the first
    case whose result is not the expected literal.

    Self-contained (its imports and helpers are inside): its source is copied into
    graded cells.

    Args:
        name: the exercise's name, for the messages.
        function: the learner's function (or, with ``value=True``, the learner's
            value itself).
        cases: one entry per call: the arguments (a tuple), or what ``prepare``
            turns into the arguments.
        expected: one literal per case (None, bool, number, str, and lists,
            tuples and dicts of those).
        tol: None compares numbers exactly; a number, within that absolute
            tolerance.
        forbid: dotted names of package functions that raise during the calls.
        prepare: ``case -> arguments``; default ``tuple(case)``.
        project: ``(result, arguments) -> literal``; default the result itself.
        value: the exercise is a value, not a function: ``function`` is it.
    """
    import copy
    import importlib
    import inspect
    import numbers
    import os
    import signal
    import threading
    import types

    class HiddenTimeout(BaseException):
        pass

    seconds = float(os.environ.get("GRPO_CHECK_SECONDS") or 60)

    def refusal(dotted: str) -> types.CodeType:
        message = (
            f"{name}: this exercise asks you to write it without {dotted} "
            "(the hidden test makes it raise)"
        )
        source = f"def refuse(*args, **kwargs):\n    raise RuntimeError({message!r})\n"
        namespace: dict[str, Any] = {}
        exec(source, namespace)
        return namespace["refuse"].__code__

    def forbidden() -> list[tuple[Any, Any]]:
        swapped = []
        for dotted in forbid:
            module_name, _, attribute = dotted.rpartition(".")
            try:
                target = getattr(importlib.import_module(module_name), attribute)
            except (ImportError, AttributeError):
                continue
            if isinstance(target, types.FunctionType) and target.__closure__ is None:
                swapped.append((target, target.__code__))
                target.__code__ = refusal(dotted)
        return swapped

    def stop(signum: int, frame: Any) -> None:
        raise HiddenTimeout

    def drive(coroutine: Any) -> Any:
        """Run a coroutine whose awaits finish at once (the fake clients')."""
        try:
            while True:
                if coroutine.send(None) is not None:
                    raise RuntimeError("it awaited something other than the client")
        except StopIteration as done:
            return done.value

    def call(args: tuple) -> Any:
        result = function if value else function(*args)
        if inspect.iscoroutine(result):
            result = drive(result)
        return result if project is None else project(result, args)

    def same(got: Any, want: Any) -> bool:
        if want is None:
            return got is None
        if isinstance(want, bool):
            return type(got).__name__ in ("bool", "bool_") and bool(got) is want
        if isinstance(want, (int, float)):
            if isinstance(got, bool) or not isinstance(got, numbers.Real):
                return False
            difference = float(got) - want
            if tol is None:
                return difference == 0
            return -tol <= difference <= tol
        if isinstance(want, str):
            return isinstance(got, str) and str.__eq__(got, want) is True
        if isinstance(want, (list, tuple)):
            if type(got).__name__ == "ndarray":
                got = got.tolist()
            if not isinstance(got, (list, tuple)) or len(got) != len(want):
                return False
            return all(same(g, w) for g, w in zip(got, want, strict=True))
        if isinstance(want, dict):
            if not isinstance(got, dict) or any(type(k) is not str for k in got):
                return False
            if sorted(got) != sorted(want):
                return False
            return all(same(got[k], want[k]) for k in want)
        return False

    def shown(thing: Any) -> str:
        try:
            text = repr(thing)
        except Exception:  # noqa: BLE001 - any object: say what it is
            text = f"a {type(thing).__name__}"
        return text if len(text) <= 120 else text[:117] + "..."

    timed = hasattr(signal, "setitimer") and (
        threading.current_thread() is threading.main_thread()
    )
    total = len(cases)
    for number, (case, want) in enumerate(zip(cases, expected, strict=True), start=1):
        where = f"hidden test of {name}, case {number} of {total} ({shown(case)})"
        case = copy.deepcopy(case)  # a function that changes its input changes no case
        args = prepare(case) if prepare is not None else tuple(case)
        swapped = forbidden()
        previous = signal.signal(signal.SIGALRM, stop) if timed else None
        try:
            if timed:
                signal.setitimer(signal.ITIMER_REAL, seconds)
            got = call(args)
        except HiddenTimeout:
            raise AssertionError(
                f"{where}: took longer than {seconds:g} s: an endless loop?"
            ) from None
        except Exception as error:  # the learner's bug: report it as a failure
            raise AssertionError(
                f"{where}: raised {type(error).__name__}: {error}"
            ) from None
        finally:
            if timed:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
            for target, code in swapped:
                target.__code__ = code
        if got is None and want is not None:
            raise AssertionError(f"{where}: returned None: is it still the stub?")
        if not same(got, want):
            raise AssertionError(f"{where}: wrong result {shown(got)}")


# ----------------------------------------------------------------------------------
# Build time: the block written into a graded cell
# ----------------------------------------------------------------------------------

BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


def to_literal(thing: Any) -> Any:
    """``thing`` as plain literals (numpy scalars and arrays become Python ones).

    Raises:
        ValueError: something that has no literal form, or a float that is not
            finite.
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


def hidden_block(name: str, entry: Mapping[str, Any], solution: Any) -> str:
    """The hidden tests of one exercise, as the code of a graded cell's block.

    Args:
        name: the exercise's name (the function or value the learner defines).
        entry: its ``HIDDEN_CASES`` entry: ``cases``, and optionally ``tol``,
            ``forbid``, ``setup`` (source defining ``prepare`` and/or ``project``)
            and ``value``.
        solution: the reference function (or value).

    Returns:
        The block, markers included. Its expected values are computed here, from
        ``solution``.
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
    runtime = _without_annotations(inspect.getsource(run_hidden_tests))
    arguments = [
        f"{name!r}",
        name,
        f"cases={_literal_source(cases)}",
        f"expected={_literal_source(expected)}",
        f"tol={entry.get('tol')!r}",
        f"forbid={forbid!r}",
    ]
    if prepare is not None:
        arguments.append("prepare=prepare")
    if project is not None:
        arguments.append("project=project")
    if is_value:
        arguments.append("value=True")
    call = "run_hidden_tests(\n" + textwrap.indent(",\n".join(arguments), "    ")
    body = "\n\n".join(
        part
        for part in (
            runtime,
            setup,
            call + ",\n)",
        )
        if part
    )
    return (
        f"{BEGIN}\n"
        f"# Hidden tests of {name}: the expected values are literals computed from\n"
        "# the reference solution when the student edition was built.\n"
        f"def _grpo_hidden_tests_{name}():\n"
        f"{textwrap.indent(body, '    ')}\n\n\n"
        f"_grpo_hidden_tests_{name}()\n"
        f"del _grpo_hidden_tests_{name}\n"
        f"{END}"
    )


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


__all__ = ["ALWAYS_FORBIDDEN", "BEGIN", "END", "hidden_block", "run_hidden_tests"]
