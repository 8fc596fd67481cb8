"""Solutions to the exercises of 03_group_advantages.ipynb.

tests/notebooks/test_01_04.py runs the notebook's self-check cells on these.
"""

import math


def smallest_group_size(pass_rate, max_degenerate):
    """Smallest G >= 2 with pass_rate**G + (1 - pass_rate)**G <= max_degenerate.

    The probability falls as G grows (for 0 < pass_rate < 1), so count up from 2.

    >>> smallest_group_size(0.9, 0.2)
    16
    """
    group_size = 2
    while pass_rate**group_size + (1 - pass_rate) ** group_size > max_degenerate:
        group_size += 1
    return group_size


def success_advantage(group_size, num_successes, scale="none"):
    """Advantage of a right completion, num_successes right of group_size.

    With k of G rewards equal to 1 and the rest 0, the mean is q = k / G, so a right
    completion gets 1 - q. The population std is sqrt(q (1 - q)), so the std-scaled
    advantage is (1 - q) / sqrt(q (1 - q)) = sqrt((G - k) / k); for k = 1 that is
    sqrt(G - 1).

    >>> success_advantage(4, 1), round(success_advantage(4, 1, "group"), 3)
    (0.75, 1.732)
    """
    q = num_successes / group_size
    if scale == "group":
        return math.sqrt((group_size - num_successes) / num_successes)
    return 1.0 - q


#: The grader's hidden tests: other inputs than the notebook's visible checks.
#: ``grpo_helpers.classroom.course`` computes the expected values with the functions
#: above when it builds the student edition and writes them into the graded cells
#: as literals (nbgrader keeps them out of the student edition). ``forbid``: the
#: package functions the exercise says not to use; the hidden test makes them raise
#: while it calls the learner's function. This file never ships to students.
HIDDEN_CASES = {
    "smallest_group_size": {
        "cases": [
            (0.8, 0.3),
            (0.6, 0.05),
            (0.3, 0.2),
            (0.95, 0.4),
            (0.5, 0.25),
            (0.2, 0.01),
            (0.97, 0.6),
        ],
        "forbid": ["grpo_helpers.advantages.degenerate_probability"],
    },
    "success_advantage": {
        "cases": [
            (3, 1, "none"),
            (3, 2, "group"),
            (5, 2, "none"),
            (5, 3, "group"),
            (32, 1, "group"),
            (10, 7, "none"),
            (6, 3, "group"),
            (12, 4, "group"),
        ],
        # the package adds eps = 1e-4 to the std; the exercise says to ignore it
        "tol": 5e-3,
        "forbid": ["grpo_helpers.advantages.group_advantages"],
    },
}
