"""Your own loop's run, read: its metrics as a frame, the panels it can draw, and
whether it retraced the recorded run of the same settings.

Notebook 10 trains the learner's ``train_loop`` once its check passes
(:mod:`grpo_helpers.classroom.loop_check`); what the loop returns is its whole
record, one dict per step. :func:`history_frame` numbers the steps when the loop
does not, :func:`panels` names the panels of ``plotting.plot_run_curves`` that its
keys can draw (and the keys the others need), and :func:`retrace` says whether the
loop's steps equal the recorded run's, step by step.

Introduced in: 10_grpo_whole.ipynb
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pandas as pd

from grpo_helpers.classroom.loop_check import same_number
from grpo_helpers.config import GRPOConfig

__all__ = ["RETRACE_KEYS", "history_frame", "panels", "retrace"]

#: The settings a retrace needs equal (what changes what a loop samples or sends).
RETRACE_KEYS: tuple[str, ...] = (
    "model_name",
    "dataset",
    "difficulty",
    "steps",
    "batch_size",
    "group_size",
    "max_tokens",
    "lora_rank",
    "learning_rate",
    "reward",
    "temperature",
    "top_p",
    "seed",
    "advantage_scale",
    "mask_truncated",
)


def _recorded_config(recorded: Any) -> GRPOConfig:
    """The recorded run's settings (``meta["settings"]``) as a ``GRPOConfig``."""
    names = {f.name for f in fields(GRPOConfig)} - {"run_dir", "weights_name"}
    settings = recorded.meta.get("settings", {})
    return GRPOConfig(**{k: v for k, v in settings.items() if k in names})


def retrace(history: Any, run_config: GRPOConfig, recorded: Any) -> str:
    """Whether a loop's steps retraced a recorded run's, step by step, in words.

    Args:
        history: the loop's metrics (a DataFrame or one dict per step).
        run_config: the loop's run.
        recorded: the recorded run (``recorded_runs.load_run()``), with its
            ``meta["settings"]`` and ``metrics``.

    Returns:
        One line: the settings that differ (nothing to retrace), or on how many
        steps ``reward_mean`` and ``datums`` equal the recorded run's, and the
        first step that parts from it.
    """
    from grpo_helpers.rewards import canonical_reward

    frame = pd.DataFrame(history)
    theirs = _recorded_config(recorded)
    differ = [
        k
        for k in RETRACE_KEYS
        if (
            canonical_reward(getattr(theirs, k))
            != canonical_reward(getattr(run_config, k))
            if k == "reward"
            else getattr(theirs, k) != getattr(run_config, k)
        )
    ]
    if differ:
        return (
            "no retrace to check: your run's settings differ from the recorded run's "
            f"({recorded.meta.get('settings', {}).get('weights_name', 'recorded')}) "
            f"in {', '.join(differ)}"
        )
    want = recorded.metrics
    same = [
        all(
            k in frame and same_number(frame[k].iloc[step], want[k].iloc[step])
            for k in ("reward_mean", "datums")
        )
        for step in range(min(len(frame), len(want)))
    ]
    if same and all(same) and len(frame) == len(want):
        return (
            f"your loop retraced the recorded run (seed {run_config.seed}) on all "
            f"{len(same)} steps: the same rewards and Datums, step by step"
        )
    first = same.index(False) if False in same else len(same)
    return (
        f"your loop retraced the recorded run on {first} of {len(want)} steps, then "
        f"parted from it at step {first}: on a machine whose CPU kernels differ from "
        "the recording's, the same seed trains into another run (README, 'What "
        "reproduces'); the band below is what to read then"
    )


def history_frame(history: Any) -> pd.DataFrame:
    """A loop's metrics (one dict per step) as a DataFrame with a ``step`` column:
    the loop's own, or 0, 1, ... when it returns none."""
    frame = (
        history.copy()
        if isinstance(history, pd.DataFrame)
        else pd.DataFrame(list(history))
    )
    if "step" not in frame:
        frame.insert(0, "step", range(len(frame)))
    return frame


def panels(frame: pd.DataFrame) -> list[str]:
    """The columns of ``plotting.RUN_PANELS`` that ``frame`` holds; prints the
    panels left out, and the metric each would need."""
    from grpo_helpers.plotting import RUN_PANELS

    drawn = [column for column, *_ in RUN_PANELS if column in frame]
    left = [
        f"{title} ({column})" for column, title, *_ in RUN_PANELS if column not in frame
    ]
    if left:
        print(
            f"{len(drawn)} of {len(RUN_PANELS)} panels drawn: your loop returns no "
            + "; ".join(left)
            + ". Add a key to your metrics dict to draw its panel."
        )
    return drawn
