"""Group-relative advantages: how much better each completion did than its siblings.

GRPO needs no value model. For one prompt the sampler draws ``group_size``
completions, each gets a reward, and the group's mean reward is the baseline:

    advantage_i = reward_i - mean(rewards)

A completion above the mean is pushed up, one below it is pushed down, and the
advantages of a group always sum to zero. Optionally (``scale="group"``) they are
divided by the group's standard deviation, as in the DeepSeekMath paper and the PyTRIO
cookbook's ``scale_rewards="group"``.

When every completion of a group gets the same reward (all right or all wrong) the
group is *degenerate*: every advantage is exactly zero and it teaches nothing. The
chance of that is ``p**G + (1 - p)**G`` for pass rate ``p`` and group size ``G``.

Introduced in: 03_group_advantages.ipynb
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = [
    "ADVANTAGE_SCALES",
    "NORMALIZATIONS",
    "batch_summary",
    "degenerate_probability",
    "group_advantages",
    "is_degenerate",
    "kl_penalty",
    "length_scales",
]

#: Valid values of ``scale`` in :func:`group_advantages`.
ADVANTAGE_SCALES = ("none", "group")


def _checked_rewards(rewards: Iterable[float]) -> list[float]:
    """The rewards as floats; ValueError for an empty group or a non-finite reward."""
    values = [float(reward) for reward in rewards]
    if not values:
        raise ValueError("A group needs at least one reward; got an empty group")
    for index, value in enumerate(values):
        if not math.isfinite(value):
            raise ValueError(
                f"Reward {index} of the group is {value}; rewards must be finite"
            )
    return values


def is_degenerate(rewards: Sequence[float]) -> bool:
    """Whether every reward of a group is the same (so every advantage is zero).

    Args:
        rewards: the ``group_size`` rewards of one prompt's completions.

    Returns:
        True when the group carries no training signal.

    Raises:
        ValueError: empty group or a non-finite reward.

    Introduced in: 03_group_advantages.ipynb

    Example:
        >>> is_degenerate([1.0, 1.0, 1.0]), is_degenerate([1.0, 0.0, 1.0])
        (True, False)
    """
    values = _checked_rewards(rewards)
    return max(values) == min(values)


def group_advantages(
    rewards: Sequence[float], scale: str = "none", eps: float = 1e-4
) -> list[float]:
    """Advantages of one group: reward minus the group mean, optionally std-scaled.

    Args:
        rewards: the ``group_size`` rewards of one prompt's completions.
        scale: ``"none"`` gives ``reward - mean`` (the demo scripts and the article);
            ``"group"`` also divides by ``(std + eps)``, where ``std`` is the group's
            population standard deviation.
        eps: keeps the ``"group"`` division finite for nearly equal rewards; >= 0.

    Returns:
        One advantage per reward, in the same order. They sum to zero (up to float
        rounding). A degenerate group gives exact zeros, not ``1e-17``.

    Raises:
        ValueError: empty group, non-finite reward, unknown ``scale`` or bad ``eps``.

    Introduced in: 03_group_advantages.ipynb

    Example:
        >>> [round(a, 2) for a in group_advantages([1.0, 1.0, 0.2, 0.0])]
        [0.45, 0.45, -0.35, -0.55]
        >>> group_advantages([0.0, 0.0, 0.0])
        [0.0, 0.0, 0.0]
    """
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(
            f"Unknown advantage scale {scale!r}; valid scales: "
            + ", ".join(repr(name) for name in ADVANTAGE_SCALES)
        )
    try:
        eps_value = float(eps)
    except (TypeError, ValueError):
        eps_value = math.nan
    if not (math.isfinite(eps_value) and eps_value >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    values = _checked_rewards(rewards)
    if max(values) == min(values):
        return [0.0] * len(values)
    mean = math.fsum(values) / len(values)
    advantages = [value - mean for value in values]
    if scale == "group":
        # Population std, computed on values divided by the largest |a| so that
        # tiny rewards do not underflow to std == 0.
        largest = max(abs(a) for a in advantages)
        mean_square = math.fsum((a / largest) ** 2 for a in advantages) / len(values)
        std = largest * math.sqrt(mean_square)
        advantages = [a / (std + eps_value) for a in advantages]
    return advantages


def degenerate_probability(pass_rate: float, group_size: int) -> float:
    """Chance that a group is degenerate: all ``group_size`` right or all wrong.

    With independent completions that are right with probability ``p``, it is
    ``p**G + (1 - p)**G``. It is smallest at ``p = 0.5`` and grows towards 1 as the
    model gets very good or very bad at a question, which is why easy (or impossible)
    questions stop teaching.

    Args:
        pass_rate: probability ``p`` in [0, 1] that one completion is correct.
        group_size: number of completions ``G`` per prompt, >= 1.

    Returns:
        A probability in [0, 1].

    Introduced in: 03_group_advantages.ipynb

    Example:
        >>> round(degenerate_probability(0.9, 4), 4)
        0.6562
        >>> degenerate_probability(0.5, 2)
        0.5
    """
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    p = float(pass_rate)
    if not (0.0 <= p <= 1.0):
        raise ValueError(f"pass_rate must be in [0, 1], got {pass_rate!r}")
    return p**group_size + (1.0 - p) ** group_size


def _population_std(values: Sequence[float]) -> float:
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))


def batch_summary(groups_of_rewards: Sequence[Sequence[float]]) -> dict[str, float]:
    """Step metrics of a batch of groups, as the training loop logs them.

    Args:
        groups_of_rewards: one list of rewards per prompt of the batch.

    Returns:
        ``{"frac_degenerate", "group_reward_std", "reward_mean"}``:
        the fraction of groups whose rewards are all equal; the mean over groups of
        each group's population standard deviation (0 means no signal at all); and
        the mean over groups of each group's mean reward (the demo scripts'
        ``reward``, equal to the mean of all rewards when groups have equal size).

    Raises:
        ValueError: no groups, an empty group or a non-finite reward.

    Introduced in: 03_group_advantages.ipynb

    Example:
        >>> batch_summary([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
        {'frac_degenerate': 0.75, 'group_reward_std': 0.125, 'reward_mean': 0.375}
    """
    groups = [_checked_rewards(group) for group in groups_of_rewards]
    if not groups:
        raise ValueError("batch_summary needs at least one group; got none")
    n_groups = len(groups)
    n_degenerate = sum(max(group) == min(group) for group in groups)
    stds = [_population_std(group) for group in groups]
    means = [math.fsum(group) / len(group) for group in groups]
    return {
        "frac_degenerate": n_degenerate / n_groups,
        "group_reward_std": math.fsum(stds) / n_groups,
        "reward_mean": math.fsum(means) / n_groups,
    }


# ----------------------------------------------------------------------------------
# Length normalisation and the KL penalty: both are transforms of the advantages,
# because the engine's loss is a plain sum over tokens (see notebook 09).
# ----------------------------------------------------------------------------------

#: Valid values of ``mode`` in :func:`length_scales`.
NORMALIZATIONS = ("token_sum", "sequence_mean", "token_mean", "constant")


def length_scales(
    lengths: Sequence[int], mode: str = "token_sum", max_tokens: int | None = None
) -> list[float]:
    """The factor each completion's advantage is multiplied by, per normalisation.

    The engine minimises a plain **sum** over tokens, ``-sum_i sum_t rho_{i,t} A_i``,
    so a completion of ``|o_i|`` tokens weighs ``|o_i|`` times in the gradient.
    The objectives of the papers divide that sum differently; multiplying ``A_i`` by
    ``s_i`` below gives exactly their per-token weights:

    * ``"token_sum"``: ``s_i = 1``. The series' default (and the demo scripts'):
      every token counts once, so long completions count more.
    * ``"sequence_mean"``: ``s_i = 1 / |o_i|``. The original GRPO objective
      (DeepSeekMath): average over each completion's tokens, then over completions;
      a short completion's tokens weigh more than a long one's.
    * ``"token_mean"``: ``s_i = 1 / sum_j |o_j|`` over the group. DAPO's
      token-level loss: every token of the group weighs the same, whatever the
      length of its completion.
    * ``"constant"``: ``s_i = 1 / max_tokens``. Dr. GRPO: the token sum divided
      by a constant, so no completion's length changes its tokens' weight.

    Args:
        lengths: completion lengths ``|o_i|`` of one group (each >= 1).
        mode: one of :data:`NORMALIZATIONS`.
        max_tokens: the sampling budget (needed for ``"constant"``).

    Returns:
        One factor per completion.

    Raises:
        ValueError: unknown mode, an empty completion, or ``"constant"`` without
            ``max_tokens``.

    Introduced in: 09_what_the_knobs_do.ipynb

    Example:
        >>> length_scales([2, 8], "sequence_mean")
        [0.5, 0.125]
        >>> length_scales([2, 8], "token_mean")
        [0.1, 0.1]
    """
    if mode not in NORMALIZATIONS:
        raise ValueError(
            f"Unknown normalization {mode!r}; choose one of {', '.join(NORMALIZATIONS)}"
        )
    sizes = [int(n) for n in lengths]
    if any(n < 1 for n in sizes):
        raise ValueError(f"Completion lengths must be >= 1, got {sizes}")
    if mode == "token_sum":
        return [1.0] * len(sizes)
    if mode == "sequence_mean":
        return [1.0 / n for n in sizes]
    if mode == "token_mean":
        return [1.0 / sum(sizes)] * len(sizes)
    if max_tokens is None or max_tokens < 1:
        raise ValueError("normalization 'constant' needs max_tokens >= 1")
    return [1.0 / max_tokens] * len(sizes)


def kl_penalty(
    sampled_logprobs: Sequence[Sequence[float]],
    reference_logprobs: Sequence[Sequence[float]],
    kl_coef: float,
) -> tuple[list[list[float]], dict[str, float]]:
    """Per-token advantage changes that penalise drifting from the reference model.

    For every sampled token ``t`` of every completion, ``d_t = log pi(t) - log
    pi_ref(t)`` (the sampler's logprob minus the reference model's). With ``d``
    the mean of ``d_t`` over all tokens of the batch, each token's advantage gets

        ``kl_coef * (d - d_t)``

    as tinker-cookbook's KL penalty does: tokens the policy likes much more than the
    reference did are pushed down, the others up, and the changes sum to zero over
    the batch. (DeepSeekMath instead subtracts ``beta`` times the k3 estimate in
    the loss. Its gradient per token, ``(1 - exp(-d_t)) grad log pi``, is
    ``d_t grad log pi`` to first order in ``d_t``: near the reference both push the
    same way; the mean ``d`` is only a baseline.)

    Args:
        sampled_logprobs: per completion, the sampler's logprob of each token.
        reference_logprobs: per completion, the reference model's logprob of the
            same tokens (same lengths).
        kl_coef: the penalty's weight (``beta``); 0 gives zeros.

    Returns:
        ``(changes, metrics)``: one list of per-token changes per completion, and
        ``kl_k1`` = mean of ``d_t`` and ``kl_k3`` = mean of
        ``exp(-d_t) + d_t - 1``, two estimates of KL(pi || pi_ref) from the sampled
        tokens (k3 is never negative).

    Raises:
        ValueError: the two lists do not have the same shapes.

    Introduced in: 09_what_the_knobs_do.ipynb

    Example:
        >>> changes, m = kl_penalty([[-1.0, -2.0]], [[-1.5, -2.5]], 0.1)
        >>> [round(c, 6) for c in changes[0]], m["kl_k1"]
        ([0.0, 0.0], 0.5)
    """
    if len(sampled_logprobs) != len(reference_logprobs):
        raise ValueError(
            f"{len(sampled_logprobs)} sampled completions but "
            f"{len(reference_logprobs)} reference ones"
        )
    diffs: list[list[float]] = []
    for i, (sampled, ref) in enumerate(
        zip(sampled_logprobs, reference_logprobs, strict=True)
    ):
        if len(sampled) != len(ref):
            raise ValueError(
                f"completion {i}: {len(sampled)} sampled logprobs but {len(ref)} "
                "reference logprobs"
            )
        diffs.append([float(a) - float(b) for a, b in zip(sampled, ref, strict=True)])
    flat = [d for row in diffs for d in row]
    if not flat:
        return [[] for _ in diffs], {"kl_k1": 0.0, "kl_k3": 0.0}
    mean = sum(flat) / len(flat)
    k3 = sum(math.exp(-d) + d - 1.0 for d in flat) / len(flat)
    changes = [[kl_coef * (mean - d) for d in row] for row in diffs]
    return changes, {"kl_k1": mean, "kl_k3": k3}
