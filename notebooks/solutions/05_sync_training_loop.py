"""Solutions to the exercises of 05_sync_training_loop.ipynb.

tests/test_notebooks_05_07.py checks these functions against the engine and the
package.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def loss_sum_by_hand(datums, fb_output):
    """Exercise 1: the ``loss_sum`` of the ``importance_sampling`` loss.

    Every position of every Datum contributes ``-exp(learner - sampled) * advantage``.
    The prompt positions have advantage 0, so they add nothing, whatever their
    logprobs.

    Args:
        datums: the ``pytrio.Datum`` list sent to ``forward_backward``.
        fb_output: its ``ForwardBackwardOutput``; ``loss_fn_outputs[i]["logprobs"]``
            is the learner's logprob of each target of Datum ``i`` (shape ``[L]``).

    Returns:
        The loss sum, a float (``fb_output.metrics["loss_sum"]`` up to float32
        rounding).
    """
    total = 0.0
    for item, output in zip(datums, fb_output.loss_fn_outputs, strict=True):
        sampled = np.asarray(item.loss_fn_inputs["logprobs"].tolist(), dtype=float)
        adv = np.asarray(item.loss_fn_inputs["advantages"].tolist(), dtype=float)
        learner = np.asarray(output["logprobs"].tolist(), dtype=float)
        total += float(np.sum(-np.exp(learner - sampled) * adv))
    return total


def step_summary(samples: pd.DataFrame, step: int) -> dict[str, float]:
    """Exercise 2: reward_mean, accuracy and frac_degenerate of one step.

    Args:
        samples: ``training.load_samples(run_dir)``, one row per completion.
        step: the step to summarise.

    Returns:
        ``{"reward_mean", "accuracy", "frac_degenerate"}``, as the loop logs them in
        ``metrics.jsonl``.
    """
    rows = samples[samples["step"] == step]
    groups = rows.groupby("question_index")["reward"]
    degenerate = groups.agg(lambda r: r.max() == r.min())
    return {
        "reward_mean": float(rows["reward"].mean()),
        "accuracy": float(rows["exact"].mean()),
        "frac_degenerate": float(degenerate.mean()),
    }


# Exercise 3 (discussion). With reward="binary" a completion earns 1 only for a
# right boxed answer. A small model rarely gets one, so most groups are all zeros:
# frac_degenerate rises towards 1, and in steps where every group is degenerate
# there are no datums, no update and no grad_norm (NaN in the metrics). The shaped
# reward gives partial credit (a number close to the gold answer, a boxed answer),
# so the rewards of a group almost always differ and every step updates. Its risk
# is the one of notebook 02: the model can learn to earn the partial credit (box
# something, write a number near the question's numbers) without getting answers
# right, so the reward rises while exact accuracy stays flat. That is why the loop
# logs exact accuracy apart from the reward.
