"""Solutions to the exercises of 03_group_advantages.ipynb.

tests/test_notebooks_01_04.py runs the notebook's self-check cells on these.
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
