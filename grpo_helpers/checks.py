"""Exercise self-checks: say whether an answer is right, and what is wrong, without
giving the answer away.

Every notebook ends with exercises; after each one a cell calls
:func:`self_check` or :func:`property_check`. For a learner it prints ``exercise 1:
ok`` or ``exercise 1: not yet`` with a hint about *what* differs (an exception, a
stub still returning None, a wrong type or length, which cases differ, which
property of the answer does not hold), never the wanted value itself. Under the test
suite and the grader (``GRPO_STRICT_CHECKS=1``) a failed check raises, so a solution
that stops passing fails the tests.

A check compares with the package or the engine (``self_check``), or tests
properties that any right answer has (``property_check``): it never loads the
reference solutions, which stay on the teacher's side (``notebooks/solutions/``,
read by ``grpo_helpers.course``) and never reach a notebook's namespace. When
``GRPO_CHECK_SECONDS`` is set (the grader sets it), the learner's code gets that
many seconds per check (:func:`time_limit`): an endless loop is reported instead of
hanging the notebook.

Example::

    >>> self_check("demo", lambda: [1, 2, 3], [1, 2, 4], strict=False)
    demo: not yet
        case 3 of 3 differs
    False

Introduced in: 01_gsm8k_dataset.ipynb
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from grpo_helpers.config import SETTINGS

STUB_HINT = "your function returned None: is it still the stub?"


class TimeLimitExceeded(BaseException):
    """The learner's code ran past :func:`time_limit`'s seconds.

    A ``BaseException``, like ``KeyboardInterrupt``: an ``except Exception`` in
    the learner's loop cannot swallow it.
    """


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`TimeLimitExceeded` in the block after ``seconds`` seconds.

    It uses ``SIGALRM``, so it stops pure-Python loops (an endless ``while``) but
    not a single long call into C code, and it only acts in the main thread on a
    system with ``signal.setitimer`` (not Windows); elsewhere, and with
    ``seconds=None``, the block runs without a limit.

    Example::

        >>> with time_limit(5):
        ...     total = sum(range(10))
        >>> total
        45
    """
    usable = (
        seconds is not None
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise TimeLimitExceeded(f"took longer than {seconds:g} s: an endless loop?")

    previous = signal.signal(signal.SIGALRM, stop)
    _tell_grader(f"{time.time() + float(seconds):.3f} a self-check")
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        _tell_grader("")


def _tell_grader(deadline: str) -> None:
    """Under the grader, write when the check must end (``GRPO_GRADING_WATCH``):
    a learner's loop that swallows the alarm or cancels it is then stopped from
    outside (:class:`grpo_helpers.grading_guard.Watchdog`)."""
    watch = os.environ.get("GRPO_GRADING_WATCH")
    if watch:
        with contextlib.suppress(OSError), open(watch, "w") as out:
            out.write(deadline)


def _close(got: Any, want: Any, tol: float | None) -> bool:
    if tol is None:
        return bool(got == want)
    if _is_sequence(got) and _is_sequence(want) and len(got) == len(want):
        # element by element: a list of lists of different lengths (ragged) has no
        # array form
        return all(_close(g, w, tol) for g, w in zip(got, want, strict=True))
    try:
        return bool(np.allclose(np.asarray(got, dtype=float), want, rtol=0, atol=tol))
    except (TypeError, ValueError):
        return False


def _is_sequence(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray))


def describe_mismatch(
    got: Any,
    want: Any,
    tol: float | None = None,
    cases: Sequence[Any] | None = None,
) -> str:
    """What differs between ``got`` and ``want``, without showing ``want``.

    Example::

        >>> describe_mismatch(None, 3)
        'your function returned None: is it still the stub?'
        >>> describe_mismatch([1, 2], [1, 2, 3])
        'returned 2 values, expected 3'
        >>> describe_mismatch([1, 5, 3], [1, 2, 3], cases=["a", "b", "c"])
        "case 2 of 3 differs (input: 'b')"
    """
    if got is None and want is not None:
        return STUB_HINT
    if _is_sequence(want) and not _is_sequence(got):
        return f"returned a {type(got).__name__}, expected a sequence of {len(want)}"
    if _is_sequence(want):
        if len(got) != len(want):
            return f"returned {len(got)} values, expected {len(want)}"
        if len(got) and all(g is None for g in got):
            return "your function returned None every time: is it still the stub?"
        wrong = [
            i
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            if not _close(g, w, tol)
        ]
        if not wrong:
            return "the values agree one by one, but not as a whole (check the types)"
        shown = ", ".join(str(i + 1) for i in wrong[:5])
        more = f" and {len(wrong) - 5} more" if len(wrong) > 5 else ""
        noun = "case" if len(wrong) == 1 else "cases"
        verb = "differs" if len(wrong) == 1 else "differ"
        text = f"{noun} {shown}{more} of {len(want)} {verb}"
        if cases is not None:
            text += f" (input: {cases[wrong[0]]!r:.80})"
        return text
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        if tol is not None and math.isfinite(got):
            return f"off by more than {tol:g}"
        return "not the expected number"
    if type(got) is not type(want):
        return f"returned a {type(got).__name__}, expected a {type(want).__name__}"
    return "not the expected value"


def self_check(
    exercise: str,
    compute: Callable[[], Any],
    want: Any,
    tol: float | None = None,
    cases: Sequence[Any] | None = None,
    strict: bool | None = None,
) -> bool:
    """Run ``compute()`` (it calls the learner's code) and compare it with ``want``.

    Args:
        exercise: the name printed (``"exercise 1"``).
        compute: a function of no arguments that calls the learner's code.
        want: the reference result.
        tol: None compares with ``==``; a number compares within that absolute
            tolerance (element by element for sequences).
        cases: the inputs behind a sequence of results, named in the hint.
        strict: raise ``AssertionError`` on a failure; default
            ``GRPO_STRICT_CHECKS`` (off for learners, on under the tests).

    Returns:
        True when the answer is right.
    """
    try:
        with time_limit(SETTINGS.check_seconds):
            got = compute()
        ok = got is not None and _close(got, want, tol)
        hint = "" if ok else describe_mismatch(got, want, tol, cases)
    except TimeLimitExceeded as error:
        ok, hint = False, str(error)
    except Exception as error:  # a stub or a bug: say so, keep the notebook going
        ok, hint = False, f"raised {type(error).__name__}: {error}"
    return _report(exercise, ok, hint, strict)


def property_check(
    exercise: str,
    compute: Callable[[], Any],
    properties: Mapping[str, Callable[[Any], bool]],
    strict: bool | None = None,
) -> bool:
    """Check properties that every right answer has, without a reference answer.

    Where the package has no function that computes the exercise's answer, the
    check tests what the answer must satisfy instead (for the smallest group size
    G: G meets the target and G - 1 does not). The hint names the first property
    that fails; it never shows a wanted value.

    Args:
        exercise: the name printed (``"exercise 1"``).
        compute: a function of no arguments that calls the learner's code.
        properties: ``{hint: predicate}``, in order; each predicate gets what
            ``compute()`` returned and says whether the property holds (it may call
            the learner's code again).
        strict: as for :func:`self_check`.

    Returns:
        True when every property holds.

    Example::

        >>> def square(x):
        ...     return x + x
        >>> property_check(
        ...     "demo",
        ...     lambda: [square(x) for x in (1, 2, 3)],
        ...     {
        ...         "a square is never negative": lambda got: min(got) >= 0,
        ...         "the square of 3 is 9": lambda got: got[2] == 9,
        ...     },
        ...     strict=False,
        ... )
        demo: not yet
            the square of 3 is 9
        False
    """
    try:
        with time_limit(SETTINGS.check_seconds):
            got = compute()
            hint = ""
            if _all_none(got):
                hint = STUB_HINT
            else:
                hint = next(
                    (h for h, holds in properties.items() if not holds(got)), ""
                )
        ok = not hint
    except TimeLimitExceeded as error:
        ok, hint = False, str(error)
    except Exception as error:  # a stub or a bug: say so, keep the notebook going
        ok, hint = False, f"raised {type(error).__name__}: {error}"
    return _report(exercise, ok, hint, strict)


def _all_none(got: Any) -> bool:
    """None, or a non-empty sequence or mapping of Nones: a stub's answer."""
    if isinstance(got, Mapping):
        got = list(got.values())
    if _is_sequence(got):
        return len(got) > 0 and all(g is None for g in got)
    return got is None


def _report(exercise: str, ok: bool, hint: str, strict: bool | None) -> bool:
    print(f"{exercise}: {'ok' if ok else 'not yet'}")
    if not ok:
        print(f"    {hint}")
    if not ok and (SETTINGS.strict_checks if strict is None else strict):
        raise AssertionError(f"{exercise}: {hint}")
    return ok


__all__ = [
    "TimeLimitExceeded",
    "describe_mismatch",
    "property_check",
    "self_check",
    "time_limit",
]
