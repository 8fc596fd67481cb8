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


#: samples.jsonl rows of the hidden tests of step_summary.
_ROWS = [
    [5, 2, 0.0, False],
    [3, 0, 1.0, True],
    [3, 0, 0.0, False],
    [5, 1, 1.0, True],
    [3, 0, 0.5, False],
    [3, 4, 0.2, False],
    [5, 1, 1.0, True],
    [3, 4, 0.2, False],
    [3, 4, 0.2, False],
    [5, 1, 1.0, True],
    [5, 2, 0.85, False],
    [5, 2, 1.0, True],
    [5, 0, 0.1, False],
    [5, 0, 0.1, False],
    [5, 0, 0.1, False],
    [8, 3, 0.0, False],
    [8, 3, 0.0, False],
    [8, 7, 1.0, True],
    [8, 7, 1.0, True],
]

#: The grader's hidden tests: other inputs than the notebook's visible checks.
#: ``grpo_helpers.course`` computes the expected values with the functions above
#: when it builds the student edition and writes them into the graded cells as
#: literals (nbgrader keeps them out of the student edition). ``setup`` builds the
#: arguments from literal data in the graded cell (``prepare``) and turns what the
#: function returns into literals (``project``). This file never ships to students.
HIDDEN_CASES = {
    # Each case: Datums as (prompt, completion, sampled logprobs, advantage,
    # learner logprobs of all P + C - 1 positions). The ForwardBackwardOutput has
    # no metrics, so returning fb_output.metrics["loss_sum"] fails.
    "loss_sum_by_hand": {
        "cases": [
            [
                ([1, 2, 3], [4, 5], [-0.5, -1.2], 0.75, [0.3, -0.2, -0.4, -1.0]),
                (
                    [1, 2, 3],
                    [6, 7, 8],
                    [-0.1, -0.2, -0.3],
                    -0.25,
                    [0.1, 0.5, -0.3, -0.1, -0.35],
                ),
            ],
            [([7], [9, 9, 2], [-2.0, -0.7, -0.05], -1.5, [-1.4, -0.9, -0.01])],
            [
                ([5, 6], [7], [-0.3], 0.0, [-9.0, -0.2]),
                ([5, 6], [8, 9], [-0.6, -0.8], 1.0, [2.0, -0.5, -0.7]),
            ],
        ],
        "tol": 1e-4,
        "setup": """
def prepare(case):
    import numpy as np
    import pytrio as trio

    datums, outputs = [], []
    for prompt, completion, sampled, advantage, learner in case:
        pad = len(prompt) - 1
        datums.append(
            trio.Datum(
                model_input=trio.ModelInput.from_ints(prompt + completion[:-1]),
                loss_fn_inputs={
                    "target_tokens": np.asarray([0] * pad + completion, np.int64),
                    "logprobs": np.asarray([0.0] * pad + sampled, np.float32),
                    "advantages": np.asarray(
                        [0.0] * pad + [advantage] * len(completion), np.float32
                    ),
                },
            )
        )
        logprobs = np.asarray(learner, np.float32)
        outputs.append({"logprobs": trio.types.TensorData.from_numpy(logprobs)})
    output = trio.types.ForwardBackwardOutput(
        loss_fn_outputs=outputs, metrics={}, debug={}
    )
    return datums, output
""",
    },
    # Each case: samples.jsonl rows (step, question_index, reward, exact) and a step.
    # Question 0 appears in two steps: a group is one question *within* a step.
    "step_summary": {
        "cases": [
            (_ROWS, 3),
            (_ROWS, 5),
            (_ROWS, 8),
        ],
        "tol": 1e-9,
        "setup": """
def prepare(case):
    import pandas as pd

    rows, step = case
    columns = ["step", "question_index", "reward", "exact"]
    samples = pd.DataFrame(rows, columns=columns)
    samples["completion"] = [f"completion {i}" for i in range(len(samples))]
    return samples, step
""",
    },
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
