"""Solutions to the exercises of 11_sampler_vs_trainer.ipynb.

tests/classroom/test_self_checks.py runs the notebook's self-check cell on these,
and its named wrong answers (tests/helpers/wrong_answers.py) must fail it.
"""

import numpy as np


def correction_weights(log_ratios, mode, clip_max):
    """Each token's weight: TIS or MIS, per token or per sequence.

    A token's ratio is exp(log r_t); a sequence's is the product of its tokens',
    exp(sum_t log r_t), shared by every token. Truncation caps the ratio at
    clip_max; the mask sets it to 0 above clip_max.

    >>> correction_weights([0.0, np.log(4.0)], "token_truncate", 3.0).tolist()
    [1.0, 3.0]
    >>> correction_weights([0.0, np.log(4.0)], "sequence_mask", 3.0).tolist()
    [0.0, 0.0]
    """
    log_ratios = np.asarray(log_ratios, dtype=float)
    if mode.startswith("sequence"):
        ratios = np.full(log_ratios.shape, np.exp(log_ratios.sum()))
    else:
        ratios = np.exp(log_ratios)
    if mode.endswith("truncate"):
        return np.minimum(ratios, clip_max)
    return np.where(ratios > clip_max, 0.0, ratios)


#: The grader's own cases (other log ratios, modes and bounds than the self-check's);
#: the hidden test compares each answer with this solution's, element by element.
HIDDEN_CASES = {
    "correction_weights": {
        "cases": [
            ([0.2, -0.3, 1.3], "token_truncate", 2.5),
            ([0.2, -0.3, 1.3], "token_mask", 2.5),
            ([0.4, 0.4, 0.4], "sequence_truncate", 3.0),
            ([0.4, 0.4, 0.4], "sequence_mask", 3.0),
            ([-1.0, 2.0], "token_mask", 5.0),
            ([-0.05, 0.02, 0.01, -0.3], "sequence_mask", 1.5),
            ([1.1], "sequence_truncate", 2.0),
        ],
        "forbid": ["grpo_helpers.step_math.is_weights"],
        "tol": 1e-6,
    },
}
