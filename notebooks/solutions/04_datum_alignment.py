"""Solutions to the exercises of 04_datum_alignment.ipynb.

tests/test_notebooks_01_04.py runs the notebook's self-check cells on these.
"""


def trained_target(prompt_tokens, completion_tokens, position):
    """Token id trained at position (0 <= position <= P + C - 2), or None.

    Position i predicts token i + 1 of prompt + completion. Positions before P - 1
    predict prompt tokens and are not trained; position P - 1 + j predicts
    completion token j.

    >>> [trained_target([5, 6, 7], [8, 2], i) for i in range(4)]
    [None, None, 8, 2]
    """
    first_trained = len(prompt_tokens) - 1
    if position < first_trained:
        return None
    return completion_tokens[position - first_trained]


def looks_aligned(model_input, target_tokens, num_prompt_tokens):
    """Same length, and target[i] == model_input[i + 1] on trained positions.

    The last position's target (the completion's last token) is never an input, so
    it cannot be checked this way.

    >>> looks_aligned([5, 6, 7, 8], [0, 0, 8, 2], 3)
    True
    >>> looks_aligned([5, 6, 7, 8], [0, 0, 7, 8], 3)
    False
    """
    if len(model_input) != len(target_tokens):
        return False
    last = len(model_input) - 1
    return all(
        target_tokens[i] == model_input[i + 1]
        for i in range(num_prompt_tokens - 1, last)
    )


def importance_sampling_loss(logprobs, old_logprobs, advantages, mask):
    """The engine's ``importance_sampling`` loss on a padded batch.

    Each trained token contributes ``-ratio * advantage`` with ``ratio =
    exp(logprobs - old_logprobs)``; only the positions where ``mask`` is True count
    (the completion tokens: the prompt positions and the padding hold numbers that
    are not trained). The sum keeps the gradient: at ratio 1 it is
    ``-advantage * grad logprobs``, the policy gradient of notebook 03.

    Args:
        logprobs: ``[B, T]`` the learner's logprob of each target token (with grad).
        old_logprobs: ``[B, T]`` the sampler's logprobs of the same tokens.
        advantages: ``[B, T]`` each token's advantage.
        mask: ``[B, T]`` bool, True where a position is trained.

    Returns:
        A scalar tensor: the engine's ``loss_sum``.
    """
    import torch

    ratio = torch.exp(logprobs - old_logprobs)
    return torch.where(mask, -ratio * advantages, 0.0).sum()


#: The grader's hidden tests: other inputs than the notebook's visible checks.
#: ``grpo_helpers.course`` computes the expected values with the functions above
#: when it builds the student edition and writes them into the graded cells as
#: literals (nbgrader keeps them out of the student edition). This file never ships
#: to students.
HIDDEN_CASES = {
    "trained_target": {
        "cases": [
            ([9, 8], [7, 6, 5], 0),
            ([9, 8], [7, 6, 5], 1),
            ([9, 8], [7, 6, 5], 3),
            ([4, 4, 4, 4], [1], 2),
            ([4, 4, 4, 4], [1], 3),
            ([3], [2], 0),
            ([11, 12, 13], [14, 15], 1),
            ([11, 12, 13], [14, 15], 2),
        ],
    },
    # Each case: logprobs, old logprobs, advantages and mask, [B, T]. The
    # expected value is the loss and its gradient with respect to logprobs.
    "importance_sampling_loss": {
        "cases": [
            (
                [[-0.5, -1.0, -2.0, -0.7], [-0.2, -0.9, -3.0, -3.0]],
                [[0.0, -1.3, -1.5, -9.0], [0.0, -0.4, -1.0, -1.0]],
                [[0.5, 0.5, 0.5, 0.5], [-1.0, -1.0, -1.0, -1.0]],
                [[False, True, True, False], [False, True, False, False]],
            ),
            (
                [[-1.0, -2.0, -0.1]],
                [[-0.5, -2.5, -0.1]],
                [[2.0, -0.5, 1.5]],
                [[True, True, True]],
            ),
            (
                [[-0.3, -0.6], [-1.2, -0.05], [-4.0, -4.0]],
                [[-0.6, -0.6], [-1.0, -0.15], [-1.0, -1.0]],
                [[1.0, 1.0], [0.25, 0.25], [3.0, 3.0]],
                [[False, True], [True, True], [False, False]],
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

    logprobs, old, advantages, mask = case
    return (
        torch.tensor(logprobs, requires_grad=True),
        torch.tensor(old),
        torch.tensor(advantages),
        torch.tensor(mask),
    )


def project(result, args):
    import torch

    (gradient,) = torch.autograd.grad(result.reshape(()), args[0])
    return [float(result.detach()), gradient.tolist()]
""",
    },
    "looks_aligned": {
        "cases": [
            ([3, 4, 5, 6], [0, 5, 6, 7], 2),
            ([3, 4, 5, 6], [0, 5, 6, 9], 2),
            ([3, 4, 5, 6], [9, 5, 6, 7], 2),
            ([3, 4, 5, 6], [0, 4, 5, 6], 2),
            ([3, 4, 5, 6], [0, 6, 7, 0], 2),
            ([3, 4, 5, 6, 7], [0, 5, 6, 7], 2),
            ([8], [2], 1),
            ([1, 2, 3, 4, 5], [0, 3, 4, 5, 6], 2),
            ([1, 2, 3, 4, 5], [0, 3, 4, 0, 6], 2),
        ],
    },
}


# Exercise 4 (discussion). On the first P - 1 positions all four lists agree across
# the group: model_input holds the same prompt tokens, target_tokens is padding 0,
# and the sampler logprobs and advantages are 0.0. Each of those positions' loss
# terms is -rho * A with A = 0, so they add exactly nothing to the gradient (the
# target 0 is never trained towards). That does not take the prompt out of the
# update: every completion token attends to the prompt's keys and values, so the
# gradient of the completion positions' losses flows back through attention into
# the prompt positions' activations, and the LoRA weights applied there change how
# the prompt is read. The prompt is trained on as context, never as a target.
