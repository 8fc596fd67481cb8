"""Solutions to the exercises of 05_sync_training_loop.ipynb.

tests/notebooks/test_05_09.py checks these functions against the engine and the
package.
"""

from __future__ import annotations

import pandas as pd


def ppo_clipped_loss(logprobs, old_logprobs, advantages, mask, clip_low, clip_high):
    """Exercise 1: the engine's ``ppo`` loss on a padded batch.

    Per trained token, ``-min(ratio * A, clip(ratio, clip_low, clip_high) * A)``: the
    smaller of the two objectives, so a token whose ratio has already moved past a
    bound in the direction its advantage pushes gets no more push (no gradient),
    while a token whose ratio moved the other way keeps its full, unclipped term.

    Args:
        logprobs: ``[B, T]`` the learner's logprobs (with grad).
        old_logprobs: ``[B, T]`` the sampler's logprobs.
        advantages: ``[B, T]`` each token's advantage.
        mask: ``[B, T]`` bool, True where a position is trained.
        clip_low, clip_high: the ratio's bounds (``1 - epsilon``, ``1 + epsilon``;
            clip-higher makes the upper one larger).

    Returns:
        A scalar tensor: the engine's ``loss_sum`` for ``loss_fn="ppo"``.
    """
    import torch

    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = ratio.clamp(clip_low, clip_high) * advantages
    return torch.where(mask, -torch.minimum(unclipped, clipped), 0.0).sum()


def grpo_step(training_client, prompts, responses, rewards, adam_params):
    """Exercise 2: one GRPO update, from sampled groups and their rewards.

    For each group: skip it when its rewards are all equal (degenerate: every
    advantage would be 0); otherwise give each completion ``reward - mean`` and
    turn it into a Datum (notebook 04). Then one ``forward_backward`` with the
    ``importance_sampling`` loss and one ``optim_step``, each waited on.

    Args:
        training_client: the policy's ``TrainingClient``.
        prompts: one list of prompt token ids per group.
        responses: one ``SampleResponse`` per group (its ``sequences`` hold each
            completion's ``tokens`` and ``logprobs``).
        rewards: one list of rewards per group, one per completion.
        adam_params: the ``pytrio.AdamParams`` of the update.

    Returns:
        ``(ForwardBackwardOutput, OptimStepResponse)``, or None when every group is
        degenerate (nothing is sent).
    """
    from grpo_helpers import datum

    datums = []
    for prompt, response, group_rewards in zip(
        prompts, responses, rewards, strict=True
    ):
        if max(group_rewards) == min(group_rewards):
            continue
        mean = sum(group_rewards) / len(group_rewards)
        for sequence, reward in zip(response.sequences, group_rewards, strict=True):
            sample = datum.RolloutSample(
                list(sequence.tokens),
                list(sequence.logprobs),
                "",
                reward,
                reward - mean,
            )
            datums.append(datum.build_grpo_datum(prompt, sample))
    if not datums:
        return None
    fb_future = training_client.forward_backward(datums, loss_fn="importance_sampling")
    optim_future = training_client.optim_step(adam_params)
    return fb_future.result(), optim_future.result()


def step_summary(samples: pd.DataFrame, step: int) -> dict[str, float]:
    """Exercise 3: reward_mean, accuracy and frac_degenerate of one step.

    Args:
        samples: ``run_files.load_samples(run_dir)``, one row per completion.
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
#: ``grpo_helpers.classroom.course`` computes the expected values with the functions
#: above when it builds the student edition and writes them into the graded cells
#: as literals (nbgrader keeps them out of the student edition). ``setup`` builds the
#: arguments from literal data in the graded cell (``prepare``) and turns what the
#: function returns into literals (``project``). This file never ships to students.
HIDDEN_CASES = {
    # Each case: logprobs, old logprobs, advantages, mask ([B, T]) and the bounds;
    # the expected value is the loss and its gradient with respect to logprobs.
    # The ratios sit on both sides of both bounds, with advantages of both signs.
    "ppo_clipped_loss": {
        "cases": [
            (
                [[-0.5, -0.2, -1.0, -0.3], [-0.1, -2.0, -0.7, -0.7]],
                [[0.0, -0.8, -0.4, -0.5], [0.0, -1.5, -1.2, -0.6]],
                [[0.5, 0.5, 0.5, 0.5], [-1.0, -1.0, -1.0, -1.0]],
                [[False, True, True, True], [False, True, True, False]],
                0.8,
                1.2,
            ),
            (
                [[-1.0, -1.0, -1.0, -1.0]],
                [[-1.5, -0.5, -1.25, -0.9]],
                [[1.0, -2.0, -0.5, 0.25]],
                [[True, True, True, True]],
                0.8,
                1.28,
            ),
            (
                [[-0.3, -0.9, -2.0], [-0.6, -0.05, -9.0]],
                [[-0.9, -0.3, -2.0], [-0.2, -0.45, 0.0]],
                [[-0.75, -0.75, -0.75], [2.0, 2.0, 2.0]],
                [[True, True, False], [True, True, False]],
                0.7,
                1.3,
            ),
        ],
        "tol": 1e-5,
        "forbid": [
            "grpo_helpers.local.losses.token_loss",
            "grpo_helpers.local.losses.loss_sum",
        ],
        "setup": """
def prepare(case):
    import torch

    logprobs, old, advantages, mask, low, high = case
    return (
        torch.tensor(logprobs, requires_grad=True),
        torch.tensor(old),
        torch.tensor(advantages),
        torch.tensor(mask),
        low,
        high,
    )


def project(result, args):
    import torch

    (gradient,) = torch.autograd.grad(result.reshape(()), args[0])
    return [float(result.detach()), gradient.tolist()]
""",
    },
    # Each case: groups of (prompt, completions as (tokens, logprobs), rewards). A
    # fake training client records what it is sent: the Datums, the loss, the order
    # of the calls, the optimiser's settings; the step's results are strings. One
    # forward_backward or one per group reads the same (the gradients add up until
    # optim_step): consecutive forward_backward calls count as one, their Datums
    # are put end to end, and a list of their outputs reads as one output.
    "grpo_step": {
        "cases": [
            [
                ([1, 2, 3], [([4, 5], [-0.5, -0.1]), ([6], [-2.0])], [1.0, 0.0]),
                (
                    [1, 2, 3],
                    [([7, 8, 9], [-0.3, -0.2, -0.1]), ([4], [-1.0])],
                    [0.5, 0.5],
                ),
            ],
            [
                (
                    [9],
                    [([2, 2], [-0.2, -0.4]), ([3], [-0.6]), ([5, 6], [-1.0, -0.1])],
                    [0.0, 1.0, 0.5],
                )
            ],
            [([4, 4], [([1], [-0.1]), ([2], [-0.2])], [0.25, 0.25])],
            # two groups that teach: one optim_step per group is two updates
            [
                ([5, 6], [([7, 8], [-0.4, -0.9]), ([9], [-1.2])], [0.0, 1.0]),
                (
                    [5],
                    [([2], [-0.3]), ([3, 4], [-0.6, -0.7]), ([6], [-2.0])],
                    [1.0, 0.5, 0.0],
                ),
            ],
        ],
        "tol": 1e-5,
        "forbid": [
            "grpo_helpers.step_math.build_step_datums",
            "grpo_helpers.rollout.samples_from_response",
        ],
        "setup": """
class FakeFuture:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def result(self, timeout=None):
        self.log.append(("wait", self.name))
        return f"{self.name} output"


class FakeTrainingClient:
    def __init__(self):
        self.log, self.sent = [], {}

    def forward_backward(self, data, loss_fn="cross_entropy", loss_fn_config=None):
        self.log.append(("submit", "forward_backward"))
        self.sent.setdefault("forward_backward", []).append((list(data), loss_fn))
        return FakeFuture(self.log, "forward_backward")

    def optim_step(self, adam_params):
        self.log.append(("submit", "optim_step"))
        self.sent["optim_step"] = adam_params
        return FakeFuture(self.log, "optim_step")


def prepare(case):
    from types import SimpleNamespace

    prompts, responses, rewards = [], [], []
    for prompt, completions, group_rewards in case:
        prompts.append(prompt)
        sequences = [
            SimpleNamespace(tokens=t, logprobs=lp, text="", stop_reason="stop")
            for t, lp in completions
        ]
        responses.append(SimpleNamespace(sequences=sequences))
        rewards.append(group_rewards)
    return FakeTrainingClient(), prompts, responses, rewards, {"learning_rate": 1e-4}


def project(result, args):
    client = args[0]
    calls = client.sent.get("forward_backward", [])
    data = [datum for batch, _ in calls for datum in batch]
    submitted = [name for kind, name in client.log if kind == "submit"]
    submitted = [
        name
        for i, name in enumerate(submitted)
        if i == 0 or name != "forward_backward" or submitted[i - 1] != name
    ]

    def values(datum, key):
        return [float(v) for v in datum.loss_fn_inputs[key].tolist()]

    def one(output):
        if isinstance(output, (tuple, list)) and output:
            if all(isinstance(o, str) and o == output[0] for o in output):
                return output[0]
        return output

    returned = result
    if isinstance(result, (tuple, list)):
        returned = [one(result[0]), *result[1:]] if result else []
    return {
        "returned": returned,
        "submitted": submitted,
        "loss_fn": sorted({str(loss_fn) for _, loss_fn in calls}),
        "optim_step_waited": ("wait", "optim_step") in client.log,
        "adam_params": client.sent.get("optim_step"),
        "datums": [
            [
                [int(t) for t in datum.model_input.to_ints()],
                [int(t) for t in datum.loss_fn_inputs["target_tokens"].tolist()],
                values(datum, "logprobs"),
                values(datum, "advantages"),
            ]
            for datum in data
        ],
    }
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


# Exercise 4 (discussion). With reward="binary" any boxed right answer pays, a bare
# \boxed{7} too when 7 is right. A lucky guess then takes its group's largest
# advantage over the completions that calculated and went wrong (notebook 02,
# section 6), so the share of bare boxes that run_files.stall quotes can climb: 3 of
# binary's 15 final seeds settled on boxing a guess and did not learn, where
# "shown_work", the default, pays only a right answer written as the result of a
# calculation and learned on all six final seeds it was tried on (too few seeds to
# say it fails less often). Its price: a right answer written another way earns
# nothing.
# With reward="right_answer" a right answer earns 0.5 without the box and 1.0 in it,
# so a weak model's groups have a spread more often: frac_degenerate falls, more
# steps make an update, and fewer steps log grad_norm as NaN (NaN marks a step with
# no update). The boxed share is the one to watch: in a group whose only right
# answers are unboxed, those get a positive advantage, so the box can lose ground
# (validation seed 4 boxed nothing from step 7 on,
# bench/results/pilots-robust-defaults/README.md). Under "binary" or "shown_work"
# degenerate groups are more common while the model is weak (a group needs a paid
# answer to have a spread), so the first steps may make no update at all, but the
# box can only gain. The shaped reward (notebook 02) gives almost every group a
# spread but pays for a box alone and for near misses, so a run can learn the format
# and not the arithmetic: the reward rises while exact accuracy stays flat. That is
# why the loop logs exact accuracy and the boxed share apart from the reward.
