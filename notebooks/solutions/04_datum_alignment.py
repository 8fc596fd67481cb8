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


# Exercise 3 (discussion). On the first P - 1 positions all four lists agree across
# the group: model_input holds the same prompt tokens, target_tokens is padding 0,
# and the sampler logprobs and advantages are 0.0. Each of those positions' loss
# terms is -rho * A with A = 0, so they add exactly nothing to the gradient (the
# target 0 is never trained towards). That does not take the prompt out of the
# update: every completion token attends to the prompt's keys and values, so the
# gradient of the completion positions' losses flows back through attention into
# the prompt positions' activations, and the LoRA weights applied there change how
# the prompt is read. The prompt is trained on as context, never as a target.
