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
