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
read by ``grpo_helpers.classroom.course``) and never reach a notebook's namespace. When
``GRPO_CHECK_SECONDS`` is set (the grader sets it), the learner's code gets that
many seconds per check (:func:`time_limit`): an endless loop is reported instead of
hanging the notebook.

The second half of the module holds the checks of the exercises of notebooks 05,
07 and 09 whose answers are plain numbers and tables (``step_summary_check``,
``wilson_by_hand_check``, ``flips_and_p_check``, ``questions_needed_check``,
``token_weights_check``, ``k3_estimate_check``): each carries constructed cases
that a plausible wrong answer gets wrong (an all-right group, flips that make the
McNemar sum pass 1, no flips at all, completions of different lengths...),
besides the learner's own run where the notebook passes it, so that a check never
depends on what a fast-mode run happened to produce.
``tests/classroom/test_self_checks.py`` feeds every exercise's check at least three
named wrong answers. The module is a
little over 600 lines and stays whole: those checks are thin uses of
``self_check`` and ``property_check`` with their tables of cases, one idea with
them (an answer held against the package, never shown), and torch-free, unlike
:mod:`grpo_helpers.classroom.against_engine`.

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

from grpo_helpers.settings import SETTINGS

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
    assert seconds is not None  # usable says so; mypy does not follow it

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
    outside (:class:`grpo_helpers.classroom.grading_guard.Watchdog`)."""
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


def run_check(exercise: str, check: Callable[[], str], strict: bool | None) -> bool:
    """Run ``check()`` (it returns a hint, "" when right) under the time limit, and
    report it as :func:`self_check` does: the checks that run the learner's code
    beside the engine (``against_engine``, ``plain_step``) end here."""
    try:
        with time_limit(SETTINGS.check_seconds):
            hint = check()
    except TimeLimitExceeded as error:
        hint = str(error)
    except Exception as error:  # the learner's bug: say so, keep the notebook going
        hint = f"raised {type(error).__name__}: {error}"
    return _report(exercise, not hint, hint, strict)


def _report(exercise: str, ok: bool, hint: str, strict: bool | None) -> bool:
    print(f"{exercise}: {'ok' if ok else 'not yet'}")
    if not ok:
        print(f"    {hint}")
    if not ok and (SETTINGS.strict_checks if strict is None else strict):
        raise AssertionError(f"{exercise}: {hint}")
    return ok


# ----------------------------------------------------------------------------------
# The exercises' own checks: notebooks 05 (step_summary), 07 (wilson_by_hand,
# flips_and_p, questions_needed) and 09 (token_weights, k3_estimate)
# ----------------------------------------------------------------------------------

#: Constructed steps of samples.jsonl for :func:`step_summary_check`: per step,
#: what it holds (the hint's name) and its groups as ``(question_index, rewards,
#: exact)``. Question 0 comes back in a later step: a group is one question
#: *within* a step.
SUMMARY_STEPS = {
    1: (
        "a group all right, one all wrong, one mixed",
        [(0, [1.0] * 4, [1] * 4), (1, [1.0, 0.0, 0.0, 1.0], [1, 0, 0, 1])]
        + [(2, [0.0] * 4, [0] * 4)],
    ),
    2: (
        "only groups all right",
        [(3, [1.0] * 4, [1] * 4), (4, [1.0] * 4, [1] * 4)],
    ),
    3: (
        "rewards all equal but not 0 or 1, question 0 again",
        [(0, [0.5] * 4, [0] * 4), (5, [0.2, 0.2, 0.85, 0.2], [0, 0, 0, 0])]
        + [(6, [1.0, 0.1, 0.1, 0.1], [1, 0, 0, 0])],
    ),
    4: (
        "a group all wrong, none all right, a right bare box paid 0",
        [(7, [0.0] * 4, [0] * 4), (8, [0.0, 1.0, 0.0, 0.0], [1, 1, 0, 0])],
    ),
}
SUMMARY_KEYS = ("reward_mean", "accuracy", "frac_degenerate")


def summary_samples() -> Any:
    """The samples.jsonl rows of :data:`SUMMARY_STEPS`, as a DataFrame."""
    import pandas as pd

    rows = [
        {
            "step": step,
            "question_index": question,
            "reward": reward,
            "exact": bool(exact),
            "completion": f"completion {i}",
        }
        for step, (_, groups) in SUMMARY_STEPS.items()
        for question, rewards, right in groups
        for i, (reward, exact) in enumerate(zip(rewards, right, strict=True))
    ]
    return pd.DataFrame(rows)


def step_summary_check(
    exercise: str,
    step_summary: Callable[[Any, int], Mapping[str, float]],
    samples: Any = None,
    metrics: Any = None,
    strict: bool | None = None,
) -> bool:
    """Check ``step_summary(samples, step)`` (notebook 05): the dict of
    ``reward_mean``, ``accuracy`` and ``frac_degenerate`` of one step.

    Cases: the constructed steps of :data:`SUMMARY_STEPS` (the package's
    ``advantages.batch_summary`` gives the wanted values), and, when the notebook
    passes them, every step of its own run: ``samples`` (``run_files.load_samples``)
    against ``metrics`` (the loop's own metrics.jsonl).
    """
    from grpo_helpers import advantages

    constructed = summary_samples()
    cases, want, names = [], [], []
    for step, (name, groups) in SUMMARY_STEPS.items():
        summary = advantages.batch_summary([rewards for _, rewards, _ in groups])
        exact = [e for _, _, right in groups for e in right]
        row = {**summary, "accuracy": sum(exact) / len(exact)}
        cases.append((constructed, step))
        want.append([row[key] for key in SUMMARY_KEYS])
        names.append(f"constructed step {step}: {name}")
    if samples is not None and metrics is not None:
        for _, row in metrics.iterrows():
            cases.append((samples, int(row["step"])))
            want.append([float(row[key]) for key in SUMMARY_KEYS])
            names.append(f"step {int(row['step'])} of your run")

    def compute() -> Any:
        got = []
        for frame, step in cases:
            result = step_summary(frame.copy(), step)
            if result is None:
                return None
            got.append([result[key] for key in SUMMARY_KEYS])
        return got

    return self_check(exercise, compute, want, tol=1e-9, cases=names, strict=strict)


#: ``(successes, n)`` of :func:`wilson_by_hand_check`: small and large n, 0 and n.
WILSON_CASES = (
    (79, 100),
    (95, 100),
    (0, 10),
    (10, 10),
    (1, 3),
    (500, 1000),
    (0, 1),
    (2, 2),
    (17, 40),
)


def wilson_by_hand_check(
    exercise: str,
    wilson_by_hand: Callable[..., Any],
    strict: bool | None = None,
) -> bool:
    """Check ``wilson_by_hand(successes, n)`` (notebook 07): ``(low, high)``
    within 1e-3 of ``stats.wilson_interval`` (whose z is 1.95996..., the
    exercise's 1.96) on :data:`WILSON_CASES`."""
    from grpo_helpers.results import stats

    cases = list(WILSON_CASES)
    return self_check(
        exercise,
        lambda: [wilson_by_hand(k, n) for k, n in cases],
        [stats.wilson_interval(k, n) for k, n in cases],
        tol=1e-3,
        cases=cases,
        strict=strict,
    )


#: ``(name, base, trained)`` exact grades of :func:`flips_and_p_check`'s
#: constructed cases, by question index ("1" right, "0" wrong).
FLIP_CASES = (
    ("flips both ways, more wrong -> right", "0000011101", "1111101110"),
    ("as many flips each way (the sum passes 1)", "001100", "110000"),
    ("one flip each way", "0110", "1010"),
    ("no flips at all", "101101", "101101"),
    ("flips one way only", "1110000", "0000000"),
    ("a longer run", "0" * 12 + "1" * 10 + "1" * 3, "1" * 12 + "1" * 10 + "0" * 3),
)


def flip_records(base: str, trained: str, seed: int = 0) -> tuple[Any, Any]:
    """Two records DataFrames (``index``, ``exact``) of grades written as 0/1
    strings; the trained rows shuffled, as they may come from an evaluation."""
    import pandas as pd

    base_records = pd.DataFrame(
        {"index": range(len(base)), "exact": [c == "1" for c in base]}
    )
    trained_records = pd.DataFrame(
        {"index": range(len(trained)), "exact": [c == "1" for c in trained]}
    ).sample(frac=1, random_state=seed)
    return base_records, trained_records


def flips_and_p_check(
    exercise: str,
    flips_and_p: Callable[[Any, Any], Any],
    base_records: Any = None,
    trained_records: Any = None,
    strict: bool | None = None,
) -> bool:
    """Check ``flips_and_p(base_records, trained_records)`` (notebook 07):
    ``(b, c, p)``, the wrong -> right and right -> wrong counts matched by
    question ``index`` and the exact McNemar p-value of ``stats.mcnemar_exact_p``.

    Cases: :data:`FLIP_CASES` (flips both ways, a sum that passes 1 so that the
    ``min(1, ...)`` binds, no flips, flips one way), each with the trained rows
    shuffled, and, when the notebook passes them, its own two evaluations.
    """
    from grpo_helpers.results import stats

    pairs = [
        flip_records(base, trained, i)
        for i, (_, base, trained) in enumerate(FLIP_CASES)
    ]
    names = [name for name, _, _ in FLIP_CASES]
    if base_records is not None and trained_records is not None:
        pairs.append((base_records, trained_records.sample(frac=1, random_state=0)))
        names.append("your two evaluations")
    want = []
    for base, trained in pairs:
        merged = base[["index", "exact"]].merge(
            trained[["index", "exact"]], on="index", suffixes=("_base", "_trained")
        )
        before = merged["exact_base"].astype(bool)
        after = merged["exact_trained"].astype(bool)
        b, c = int((~before & after).sum()), int((before & ~after).sum())
        want.append((b, c, stats.mcnemar_exact_p(b, c)))

    def compute() -> Any:
        got = [flips_and_p(base.copy(), trained.copy()) for base, trained in pairs]
        return None if all(g is None for g in got) else got

    return self_check(exercise, compute, want, tol=1e-12, cases=names, strict=strict)


def every_flip_kind() -> Any:
    """A flip table with every class of wrong answer on both sides of a flip:
    wrong -> right from each wrong class, right -> wrong to each."""
    import pandas as pd

    from grpo_helpers.results import answers

    kinds = [c for c in answers.CLASSES if c != answers.RIGHT_BOXED]
    return pd.DataFrame(
        {
            "flip": ["wrong -> right"] * len(kinds) + ["right -> wrong"] * len(kinds),
            "before": kinds + [answers.RIGHT_BOXED] * len(kinds),
            "after": [answers.RIGHT_BOXED] * len(kinds) + kinds,
        }
    )


def gain_by_source_check(
    exercise: str,
    gain_by_source: Callable[[Any], Any],
    flips: Sequence[Any] = (),
    strict: bool | None = None,
) -> bool:
    """Check ``gain_by_source(flips)`` (notebook 08): the net exact gain split by
    what the wrong side of each flip lacked, as ``answers.gain_sources`` splits it.

    Cases: every class of wrong answer on both sides (:func:`every_flip_kind`),
    every other row of it, wrong -> right flips only, no flip at all, and the flip
    tables the notebook passes (the learner's run and the recorded one).
    """
    from grpo_helpers.results import answers

    every = every_flip_kind()
    tables = [every, every[::2], every[every["flip"] == "wrong -> right"], every[:0]]
    names = ["every kind", "every other kind", "gains only", "no flip"]
    tables += list(flips)
    names += [f"flip table {i + 1} of the notebook" for i in range(len(flips))]
    want = [answers.gain_sources(t).to_dict() for t in tables]

    def compute() -> Any:
        got = [gain_by_source(t.copy()) for t in tables]
        return None if all(g is None for g in got) else [dict(g) for g in got]

    return self_check(exercise, compute, want, cases=names, strict=strict)


#: ``(accuracy, half_width)`` of :func:`questions_needed_check`: the notebook's
#: questions, one that needs thousands of questions and a coin flip.
QUESTIONS_TARGETS = (
    (0.8, 0.08),
    (0.8, 0.05),
    (0.95, 0.03),
    (0.5, 0.1),
    (0.8, 0.03),
    (0.8, 0.01),
    (0.3, 0.15),
)


def questions_needed_check(
    exercise: str,
    questions_needed: Callable[[float, float], Any],
    strict: bool | None = None,
) -> bool:
    """Check ``questions_needed(accuracy, half_width)`` (notebook 07) by the
    properties every right answer has: a whole number ``n``, whose Wilson
    interval at ``round(accuracy * n)`` of ``n`` has a half-width of at most
    ``half_width``, while every smaller ``n`` is too wide."""
    from grpo_helpers.results import stats

    targets = list(QUESTIONS_TARGETS)

    def half_width(accuracy: float, n: int) -> float:
        low, high = stats.wilson_interval(round(accuracy * n), n)
        return (high - low) / 2

    def whole(got: Any) -> bool:
        return all(
            isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1
            for n in got
        )

    return property_check(
        exercise,
        lambda: [questions_needed(a, h) for a, h in targets],
        {
            "n is a whole number of questions, at least 1": whole,
            "n questions give a half-width of at most half_width": lambda got: all(
                half_width(a, int(n)) <= h
                for (a, h), n in zip(targets, got, strict=True)
            ),
            "n is the smallest such number: every smaller n is too wide": (
                lambda got: all(
                    half_width(a, m) > h
                    for (a, h), n in zip(targets, got, strict=True)
                    for m in range(1, int(n))
                )
            ),
        },
        strict=strict,
    )


#: ``(lengths, mode, max_tokens)`` of :func:`token_weights_check`: every mode on
#: completions of different lengths, and the edge cases.
TOKEN_WEIGHT_CASES = (
    ([5, 40], "token_sum", 64),
    ([5, 40], "sequence_mean", 64),
    ([5, 40], "token_mean", 64),
    ([5, 40], "constant", 64),
    ([1, 1, 1], "token_mean", 8),
    ([3], "constant", 3),
    ([7, 2], "sequence_mean", 9),
    ([4, 12, 2], "token_mean", 16),
    ([6, 1], "constant", 10),
)


def token_weights_check(
    exercise: str,
    token_weights: Callable[[list[int], str, int], Any],
    strict: bool | None = None,
) -> bool:
    """Check ``token_weights(lengths, mode, max_tokens)`` (notebook 09) against
    ``advantages.length_scales`` on :data:`TOKEN_WEIGHT_CASES`."""
    from grpo_helpers import advantages

    cases = [(list(lengths), mode, top) for lengths, mode, top in TOKEN_WEIGHT_CASES]
    return self_check(
        exercise,
        lambda: [
            token_weights(list(lengths), mode, top) for lengths, mode, top in cases
        ],
        [advantages.length_scales(*case) for case in cases],
        tol=1e-12,
        cases=cases,
        strict=strict,
    )


#: ``(sampled, reference)`` logprobs of :func:`k3_estimate_check`: one token,
#: equal models, completions of different lengths, a token the policy likes far
#: less than the reference does.
K3_CASES = (
    ([[-1.0]], [[-1.0]]),
    ([[-0.5, -1.0]], [[-0.7, -0.9]]),
    ([[-2.0], [-0.1, -0.3, -0.2, -0.6]], [[-1.5], [-0.2, -0.2, -0.4, -0.6]]),
    ([[-3.0, -0.2], [-0.05]], [[-0.4, -0.3], [-0.9]]),
)


def k3_estimate_check(
    exercise: str,
    k3_estimate: Callable[[Any, Any], Any],
    sampled: Any = None,
    reference: Any = None,
    strict: bool | None = None,
) -> bool:
    """Check ``k3_estimate(sampled, reference)`` (notebook 09): the mean over
    every token of ``exp(-d) + d - 1`` with ``d = sampled - reference``, against
    ``advantages.kl_penalty``'s ``kl_k3``, on :data:`K3_CASES` and, when the
    notebook passes them, its own logprobs."""
    from grpo_helpers import advantages

    pairs = [(s, r) for s, r in K3_CASES]
    if sampled is not None and reference is not None:
        pairs.append((sampled, reference))
    return self_check(
        exercise,
        lambda: [k3_estimate(s, r) for s, r in pairs],
        [advantages.kl_penalty(s, r, 0.0)[1]["kl_k3"] for s, r in pairs],
        tol=1e-9,
        strict=strict,
    )


__all__ = [
    "FLIP_CASES",
    "K3_CASES",
    "QUESTIONS_TARGETS",
    "SUMMARY_STEPS",
    "TOKEN_WEIGHT_CASES",
    "TimeLimitExceeded",
    "WILSON_CASES",
    "describe_mismatch",
    "flip_records",
    "flips_and_p_check",
    "k3_estimate_check",
    "property_check",
    "questions_needed_check",
    "run_check",
    "self_check",
    "step_summary_check",
    "summary_samples",
    "time_limit",
    "token_weights_check",
    "wilson_by_hand_check",
]
