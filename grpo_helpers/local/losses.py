"""The per-token losses ``forward_backward`` can minimise, written out in torch.

Every loss sees, for each position t of a Datum whose ``target_tokens[t] != -100``:

* ``logprobs[t]`` = log pi_theta(target_t | tokens before t), from the model being
  trained (it carries the gradient);
* for the policy losses, ``old[t]`` = the sampler's logprob of the same token and
  ``A[t]`` = the token's advantage (in GRPO: the completion's reward minus its
  group's mean, the same for every completion token, 0 on prompt tokens).

The engine sums the per-token losses over all tokens of all Datums and
backpropagates that sum (``metrics["loss_sum"]``); ``loss_mean`` divides by the number
of active tokens. With ``ratio = exp(logprobs - old)``:

================== ========================================================
``cross_entropy``  ``-weights[t] * logprobs[t]`` (weights default to 1)
``importance_sampling`` ``-ratio * A``: the REINFORCE gradient ``-A * grad logprobs``
                   when sampler and learner agree (ratio = 1), corrected when they
                   drift apart (async training).
``ppo``            ``-min(ratio * A, clip(ratio, lo, hi) * A)``: stops pushing a token
                   once its ratio left ``[lo, hi]`` (default ``[0.8, 1.2]``).
``cispo``          ``-stopgrad(clip(ratio, lo, hi)) * A * logprobs``: keeps every
                   token's gradient, only caps its weight.
``dro``            not implemented by the local engine (PyTRIO only).
================== ========================================================

``loss_fn_config`` may set ``clip_low_threshold`` and ``clip_high_threshold`` (ratio
bounds, as on PyTRIO/Tinker) for ``ppo`` and ``cispo``; other keys are ignored, as
PyTRIO passes the config through unchecked.

Example::

    >>> import torch
    >>> lp = torch.tensor([-1.0, -2.0], requires_grad=True)
    >>> adv = torch.tensor([1.0, -1.0])
    >>> token_loss("importance_sampling", lp, lp.detach(), adv, None, None).tolist()
    [-1.0, 1.0]

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["IMPLEMENTED", "clip_bounds", "loss_sum", "token_loss"]

IMPLEMENTED = ("cross_entropy", "importance_sampling", "ppo", "cispo")
DEFAULT_CLIP_LOW = 0.8
DEFAULT_CLIP_HIGH = 1.2


def clip_bounds(config: Mapping[str, object] | None) -> tuple[float, float]:
    """``(lo, hi)`` ratio bounds from ``loss_fn_config`` (default 0.8 and 1.2)."""
    config = config or {}
    lo = float(config.get("clip_low_threshold", DEFAULT_CLIP_LOW))  # type: ignore[arg-type]
    hi = float(config.get("clip_high_threshold", DEFAULT_CLIP_HIGH))  # type: ignore[arg-type]
    return lo, hi


def token_loss(
    name: str,
    logprobs: torch.Tensor,
    old: torch.Tensor | None,
    advantages: torch.Tensor | None,
    weights: torch.Tensor | None,
    config: Mapping[str, object] | None,
) -> torch.Tensor:
    """Per-token loss, same shape as ``logprobs`` (masking is the caller's job).

    Args:
        name: one of :data:`IMPLEMENTED`.
        logprobs: learner logprobs of the target tokens (with gradient).
        old: sampler logprobs (policy losses).
        advantages: per-token advantages (policy losses).
        weights: per-token weights (cross_entropy; None means 1).
        config: ``loss_fn_config``.

    Returns:
        The loss of each token; sum it to get ``loss_sum``.
    """
    if name == "cross_entropy":
        return -logprobs if weights is None else -weights * logprobs
    assert old is not None and advantages is not None
    ratio = torch.exp(logprobs - old)
    if name == "importance_sampling":
        return -ratio * advantages
    lo, hi = clip_bounds(config)
    if name == "ppo":
        return -torch.minimum(ratio * advantages, ratio.clamp(lo, hi) * advantages)
    if name == "cispo":
        return -ratio.clamp(lo, hi).detach() * advantages * logprobs
    raise ValueError(f"Unsupported loss function type: {name}")


def loss_sum(
    name: str,
    logprobs: torch.Tensor,
    old: torch.Tensor | None,
    advantages: torch.Tensor | None,
    weights: torch.Tensor | None,
    config: Mapping[str, object] | None,
    mask: torch.Tensor,
) -> torch.Tensor:
    """The engine's ``loss_sum``: :func:`token_loss` summed where ``mask`` is true.

    ``forward_backward`` calls this on every micro-batch (``mask`` is
    ``target_tokens != -100``: the positions that have a target, padding excluded)
    and backpropagates it; the exercise checks of notebooks 04 and 05 compare a
    learner's loss with its value and its gradient.

    Example::

        >>> lp = torch.tensor([[-1.0, -2.0, -3.0]])
        >>> adv = torch.tensor([[1.0, -1.0, 5.0]])
        >>> mask = torch.tensor([[True, True, False]])
        >>> float(loss_sum("importance_sampling", lp, lp, adv, None, None, mask))
        0.0
    """
    per_token = token_loss(name, logprobs, old, advantages, weights, config)
    return torch.where(mask, per_token, 0.0).sum()
