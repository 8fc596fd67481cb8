"""What a run's records say went wrong: drifting out of the box, never taking off.

A run writes its metrics and completions (:mod:`grpo_helpers.run_files`); these
functions read them for the two ways a GRPO run of this series goes wrong, and say
it in words a learner can act on:

* :func:`box_drift`: the boxed share fell over the run, under a reward that pays
  something else (the model learned to leave the box);
* :func:`stall_warning`: fewer than half of the steps made an update (every group
  degenerate), with :func:`bare_boxes`, the share of bare guesses, where the reward
  pays them.

The thresholds are the ones the recorded runs were judged by (docs/results.md).

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import re

import pandas as pd

from grpo_helpers.rewards import get_reward_fn

#: Steps averaged at each end of a run by :func:`box_drift`.
DRIFT_STEPS = 5
#: How far the boxed fraction must fall for :func:`box_drift` to speak.
DRIFT_DROP = 0.15


def box_drift(metrics: pd.DataFrame, reward: str) -> str | None:
    r"""A paragraph saying that a run is drifting out of the box, and why, or None.

    Compares the boxed fraction of the first and the last :data:`DRIFT_STEPS`
    steps; when it fell by :data:`DRIFT_DROP` or more, says how much, how many
    answers were right with and without a box at the end, and what the run's reward
    pays for each (computed by the reward function itself).

    Introduced in: 05_sync_training_loop.ipynb
    """
    needed = {"boxed_frac", "accuracy", "lenient_accuracy"}
    if not needed <= set(metrics.columns) or len(metrics) < 2 * DRIFT_STEPS:
        return None
    first = metrics["boxed_frac"].head(DRIFT_STEPS).mean()
    last_rows = metrics.tail(DRIFT_STEPS)
    last = last_rows["boxed_frac"].mean()
    if first - last < DRIFT_DROP:
        return None
    reward_fn = get_reward_fn(reward)
    boxed_pay, unboxed_pay = reward_fn("\\boxed{7}", "7"), reward_fn("It is 7.", "7")
    right_boxed = last_rows["accuracy"].mean()
    right_unboxed = last_rows["lenient_accuracy"].mean() - right_boxed
    why = (
        f"An unboxed right answer still earns {unboxed_pay:g} against {boxed_pay:g} "
        "in a box, so in a group whose only right answers are unboxed, those get "
        "a positive advantage and the box loses ground."
        if unboxed_pay > 0
        else "An unboxed answer earns nothing under this reward, so the run loses "
        "reward with the box: the box went with something else the updates pushed "
        "away. Read the completions of the last steps (samples.jsonl) to see what."
    )
    return (
        f"This run is drifting out of the box: {first:.0%} of its completions were "
        f"boxed in its first {DRIFT_STEPS} steps, {last:.0%} in its last "
        f"{DRIFT_STEPS}. There, {right_boxed:.0%} were right in a box and "
        f"{right_unboxed:.0%} right without one. The {reward!r} reward pays "
        f"{boxed_pay:g} for a right answer in a box and {unboxed_pay:g} without. "
        f"{why} Exact accuracy (notebook 07) will fall with the box even while "
        "lenient accuracy rises."
    )


#: Steps at the end of a run that :func:`stall_warning` reads.
STALL_STEPS = 10

#: A completion that is a box and nothing else: ``\boxed{3}``, a guess with no working.
BARE_BOX = re.compile(r"\s*\\boxed\{[^{}]*\}\s*")


def is_bare_box(text: object) -> bool:
    r"""Whether a completion is a bare box (:data:`BARE_BOX`): ``\boxed{3}`` alone."""
    return BARE_BOX.fullmatch(str(text)) is not None


def bare_boxes(samples: pd.DataFrame, steps: int = STALL_STEPS) -> float | None:
    r"""The share of a run's sampled completions in its last ``steps`` steps that are
    a bare box (:data:`BARE_BOX`), or None when ``samples`` holds none.

    Args:
        samples: one run's ``samples.jsonl`` as a DataFrame (``step`` and ``text``).
        steps: how many of the last steps to read.

    Example:
        >>> frame = pd.DataFrame({"step": [0, 1, 1], "text": [
        ...     "2 + 3 = 5. \\boxed{5}", "\\boxed{3}", "5 - 1 = 4. \\boxed{4}"]})
        >>> bare_boxes(frame, steps=1)
        0.5
    """
    if not {"step", "text"} <= set(samples.columns):
        return None
    last = samples[samples["step"] > samples["step"].max() - steps]
    if last.empty:  # no rows, or no step recorded (every step missing)
        return None
    return float(last["text"].map(is_bare_box).mean())


#: What :func:`stall_warning` quotes of the recorded runs
#: (``tests/core/test_run_checks.py`` recomputes each from the records): the
#: bare-box share of the last 10 steps of seeds 2 and 9, which stalled, and the
#: largest among the seeds that learned.
STALLED_BARE = "72.5% and 92.5%"
LEARNED_BARE = "2.5%"
#: Seeds 2 and 9 again from scratch with ``group_size = 16`` (validation split).
GROUP16_GAINS = "9% -> 64% and 4% -> 37%"
#: Seeds 2 and 9 again from scratch with ``shown_work`` (recorded as ``worked_v2``,
#: validation split).
WORKED_GAINS = "9% -> 55% and 4% -> 41%"
#: Seeds 2 and 9 resumed from 30 to 40 steps: exact on test questions at step 30 ->
#: step 40.
RESUMED_GAINS = "4% -> 2% and 9% -> 9%"
#: The rewards that pay no bare guess: a run on one of them is not told to switch.
GUESS_PROOF_REWARDS = ("shown_work", "worked", "worked_v2")


def stall_warning(
    metrics: pd.DataFrame,
    samples: pd.DataFrame | None = None,
    reward: str | None = None,
) -> str | None:
    """A paragraph warning that a run may not have taken off, and why, or None.

    It speaks when fewer than half of a run's steps made an update, and at most half
    of its last :data:`STALL_STEPS` did: its groups were mostly degenerate all along.
    An update count cannot tell a stall from a late take-off, so the paragraph says
    "may" and sends the learner to the evaluation notebook. With ``samples`` it also
    gives the share of bare boxes (:func:`bare_boxes`) in the last steps. Its advice
    quotes recorded runs (:data:`STALLED_BARE`, :data:`RESUMED_GAINS`,
    :data:`GROUP16_GAINS`, :data:`WORKED_GAINS`); how the rule was set, and on which
    runs it speaks, is in ``docs/results.md``.

    Args:
        metrics: one run's ``metrics.jsonl`` as a DataFrame, one row per step.
        samples: the same run's ``samples.jsonl`` (:func:`load_samples`), or None.
        reward: the run's reward name; switching to ``shown_work`` is suggested
            only to a run on a reward that pays a bare guess
            (:data:`GUESS_PROOF_REWARDS`).

    Raises:
        ValueError: ``metrics`` repeats a step (several runs in one frame, such as
            ``ablation.metrics_frame`` unfiltered).

    Introduced in: 05_sync_training_loop.ipynb
    """
    needed = {"accuracy", "updated", "frac_degenerate"}
    if not needed <= set(metrics.columns) or len(metrics) < STALL_STEPS:
        return None
    if "step" in metrics and metrics["step"].duplicated().any():
        raise ValueError(
            "stall_warning reads one run, but these metrics repeat a step: select "
            "one run (for example one variant and seed of ablation.metrics_frame) first"
        )
    steps = len(metrics)
    updated = metrics["updated"].eq(True)  # a missing value is no update
    total, recent = int(updated.sum()), int(updated.tail(STALL_STEPS).sum())
    if 2 * total >= steps or 2 * recent > STALL_STEPS:
        return None
    accuracy = float(metrics["accuracy"].tail(STALL_STEPS).mean())
    degenerate = float(metrics["frac_degenerate"].mean())
    bare = None if samples is None else bare_boxes(samples)
    guesses = (
        ""
        if not bare
        else f", and {bare:.0%} were a bare box such as `\\boxed{{1}}`, a guess with "
        "no working before it"
    )
    text = (
        f"This run may not have taken off: {total} of its {steps} steps "
        f"made an update, {recent} of its last {STALL_STEPS}, and {degenerate:.0%} "
        "of its groups were degenerate (every completion earned the same reward, so "
        f"every advantage was 0: notebook 03). In its last {STALL_STEPS} steps "
        f"{accuracy:.0%} of the completions were right in a box{guesses}. Whether it "
        "learned, the evaluation notebook (07) tells. Two recorded binary-reward "
        "runs that stalled had settled on boxing guesses: in their last 10 steps "
        f"{STALLED_BARE} of the recorded completions were a bare box. Ten more "
        f"steps did not rescue them (exact at step 30 -> 40: {RESUMED_GAINS}); "
        "started again with `group_size = 16`, both learned (exact on validation "
        f"questions, base -> trained: {GROUP16_GAINS}; docs/results.md)."
    )
    if reward in GUESS_PROOF_REWARDS:
        return text
    return text + (
        ' Or start again with `reward = "shown_work"` (notebook 05\'s default), '
        "which pays no bare guess: the same two seeds then learned (exact on "
        f"validation questions: {WORKED_GAINS}; docs/results.md)."
    )
