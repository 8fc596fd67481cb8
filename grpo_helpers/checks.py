"""Exercise self-checks: say whether an answer is right, and what is wrong, without
giving the answer away.

Every notebook ends with exercises; after each one a cell calls
:func:`self_check`. For a learner it prints ``exercise 1: ok`` or ``exercise 1: not
yet`` with a hint about *what* differs (an exception, a stub still returning None, a
wrong type or length, which cases differ), never the wanted value itself. Under the
test suite (``GRPO_STRICT_CHECKS=1``, with the solutions pasted in) a failed check
raises, so a solution that stops passing fails the tests.

Reference answers live in ``notebooks/solutions/``; :func:`solution` loads them.

Example::

    >>> self_check("demo", lambda: [1, 2, 3], [1, 2, 4], strict=False)
    demo: not yet
        case 3 of 3 differs
    False

Introduced in: 01_gsm8k_dataset.ipynb
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from grpo_helpers.config import SETTINGS

SOLUTIONS_DIR = SETTINGS.project_root / "notebooks" / "solutions"


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
        return "your function returned None: is it still the stub?"
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
        got = compute()
        ok = got is not None and _close(got, want, tol)
        hint = "" if ok else describe_mismatch(got, want, tol, cases)
    except Exception as error:  # a stub or a bug: say so, keep the notebook going
        ok, hint = False, f"raised {type(error).__name__}: {error}"
    print(f"{exercise}: {'ok' if ok else 'not yet'}")
    if not ok:
        print(f"    {hint}")
    if not ok and (SETTINGS.strict_checks if strict is None else strict):
        raise AssertionError(f"{exercise}: {hint}")
    return ok


def solution(notebook: str) -> ModuleType:
    """The reference solutions of a notebook (``notebooks/solutions/<name>.py``).

    Args:
        notebook: the notebook's name without ``.ipynb``
            (``"01_gsm8k_dataset"``).
    """
    path = SOLUTIONS_DIR / f"{notebook}.py"
    if not path.is_file():
        raise FileNotFoundError(f"No solutions for {notebook!r} at {path}")
    spec = importlib.util.spec_from_file_location(f"solutions_{notebook}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


__all__ = ["describe_mismatch", "self_check", "solution"]
