"""One GRPO step, as arithmetic: a step's groups, their Datums, the step's metrics.

A step of the loops (:mod:`grpo_helpers.training`) samples ``group_size``
completions for each of ``batch_size`` prompts, grades them and gives each its
advantage. What happens next is pure arithmetic over those groups, and it lives
here, apart from the loops, so that a notebook (and a test) can run it on groups
it built by hand:

1. skip the *degenerate* groups (all rewards equal: every advantage is zero);
2. turn the rest into Datums (:func:`build_step_datums`), with the objective's
   advantage transforms: length normalisation, the KL penalty's per-token changes
   (:func:`kl_terms`), truncated completions left out when masked;
3. after ``forward_backward`` and ``optim_step``, one row of metrics
   (:func:`step_metrics`), with the learner/sampler ratios and the clip's share
   (:func:`ratio_metrics`), and the ``samples.jsonl`` lines of the step
   (:func:`sample_records`).

Nothing here calls an engine or writes a file. The module stays whole (about 650
lines): a step's Datums, the ratios they give, the gap between the sampler's and
the trainer's logprobs and its corrections all read and rewrite the same Datum
fields, and each function's example builds on ``build_grpo_datum``.

Example: two prompts of two completions each; the second group is degenerate.

>>> from grpo_helpers.datum import RolloutSample
>>> right = RolloutSample([5, 6], [-0.1, -0.2], "It is 4.", reward=1.0, advantage=0.5)
>>> wrong = RolloutSample([7], [-0.3], "It is 5.", reward=0.0, advantage=-0.5)
>>> same = RolloutSample([8], [-0.4], "It is 5.", reward=0.0, advantage=0.0)
>>> groups = [PromptGroup(0, [1, 2, 3], "4", [right, wrong]),
...           PromptGroup(1, [1, 2], "9", [same, same])]
>>> [group.degenerate for group in groups]
[False, True]
>>> datums = build_step_datums(groups)
>>> [datum.model_input.length for datum in datums]  # P + C - 1 tokens each
[4, 3]
>>> row = step_metrics(0, groups, datums, max_tokens=48,
...                    loss_metrics={"loss_mean": -0.25},
...                    optim_metrics={"grad_norm": 1.5},
...                    seconds={"sampling": 1.0, "training": 0.5, "total": 1.5})
>>> print(format_step_line(row))  # doctest: +NORMALIZE_WHITESPACE
Step 0 | reward: 0.250 | acc: 0% | degenerate: 50% | datums: 2 | tokens mean/max:
1.2/2 | hit max: 0 | loss: -0.2500 | 1.5s

Introduced in: 05_sync_training_loop.ipynb (a step by hand), 09_what_the_knobs_do.ipynb
(ratios and the KL)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pytrio as trio

from grpo_helpers.advantages import is_degenerate, kl_penalty, length_scales
from grpo_helpers.datum import IGNORED_TARGET, RolloutSample, build_grpo_datum
from grpo_helpers.rewards import answers_match, grade_answer, read_answer

#: The gap between the sampler's logprobs and the trainer's at the same weights, on
#: the sampled tokens (notebook 11): mean and largest |log ratio|, an estimate of
#: KL(sampler || trainer), and the share of tokens whose ratio trainer/sampler is
#: outside the correction's bounds.
MISMATCH_METRICS = (
    "mismatch_mean",
    "mismatch_max",
    "mismatch_kl",
    "mismatch_outside",
)
#: The gap from staleness (the async loop's ``max_steps_off_policy``): the trainer's
#: logprobs now against its logprobs at the sampler's (older) weights, on the sampled
#: tokens; and how many updates the sampler's weights were behind. 0 on-policy.
STALENESS_METRICS = ("staleness", "stale_mean", "stale_max", "stale_kl")
#: Metrics of the objective's knobs (notebooks 09 and 11); NaN when not measured.
OBJECTIVE_METRICS = (
    "ratio_mean",
    "clip_frac",
    "kl_k1",
    "kl_k3",
    "updates",
    *MISMATCH_METRICS,
    "is_weight_mean",
    *STALENESS_METRICS,
)


def derive_seed(seed: int, step: int, prompt: int) -> int:
    """A sampling seed for one prompt of one step: repeatable, distinct per call.

    >>> derive_seed(0, step=0, prompt=1), derive_seed(0, step=1, prompt=0)
    (1, 10007)
    >>> derive_seed(7, 3, 2) == derive_seed(7, 3, 2)
    True
    """
    return (seed * 1_000_003 + step * 10_007 + prompt) % (2**31 - 1)


@dataclass
class PromptGroup:
    """One prompt of a step and the ``group_size`` completions sampled for it."""

    row_index: int
    prompt_tokens: list[int]
    ground_truth: str
    samples: list[RolloutSample]

    @property
    def rewards(self) -> list[float]:
        return [s.reward for s in self.samples]

    @functools.cached_property
    def exact(self) -> list[float]:
        """1.0 where a completion's boxed answer is exactly right (binary grade)."""
        return [grade_answer(s.text, self.ground_truth) for s in self.samples]

    @property
    def degenerate(self) -> bool:
        """All rewards equal: every advantage is zero, no learning signal."""
        return is_degenerate(self.rewards)


def teaching(groups: Iterable[PromptGroup]) -> list[PromptGroup]:
    """The groups that teach: those whose rewards differ (a degenerate group's
    advantages are all 0, so it sends no Datum). The one rule every step uses."""
    return [g for g in groups if not g.degenerate]


def build_step_datums(
    groups: Iterable[PromptGroup],
    normalization: str = "token_sum",
    max_tokens: int | None = None,
    kl_changes: Sequence[Sequence[float]] | None = None,
    mask_truncated: bool = False,
) -> list[trio.Datum]:
    """Datums of the non-degenerate groups (degenerate ones are skipped).

    Args:
        groups: the step's prompt groups, rewards and advantages filled in.
        normalization: how each completion's advantage is scaled by its length
            (``advantages.length_scales``; ``"token_sum"`` leaves it as it is).
        max_tokens: the sampling budget (for ``normalization="constant"``).
        kl_changes: per completion of the non-degenerate groups, in order, the
            per-token advantage changes of the KL penalty
            (``advantages.kl_penalty``); None for no penalty.
        mask_truncated: leave out the completions that ``max_tokens`` cut off
            (``RolloutSample.truncated``; DAPO's overlong filtering, TRL's
            ``mask_truncated_completions``): no Datum, so no loss and no
            gradient. Their rewards still count in their group's mean, and a
            token-mean normalisation divides by the tokens that are trained.

    Returns:
        One Datum per completion of the non-degenerate groups (without the
        truncated ones when masked). With the defaults each is exactly
        ``build_grpo_datum(prompt_tokens, sample)``.

    Example: one group of a right (2 tokens) and a wrong (1 token) completion.
    Each Datum holds ``P + C - 1`` positions; the prompt's get advantage 0.

    >>> from grpo_helpers.datum import RolloutSample
    >>> group = PromptGroup(0, [1, 2, 3], "4", [
    ...     RolloutSample([5, 6], [-0.1, -0.2], "It is 4.", 1.0, advantage=0.5),
    ...     RolloutSample([7], [-0.3], "It is 5.", 0.0, advantage=-0.5)])
    >>> [d.loss_fn_inputs["advantages"].tolist() for d in build_step_datums([group])]
    [[0.0, 0.0, 0.5, 0.5], [0.0, 0.0, -0.5]]
    >>> first = build_step_datums([group], normalization="sequence_mean")[0]
    >>> first.loss_fn_inputs["advantages"].tolist()  # divided by its 2 tokens
    [0.0, 0.0, 0.25, 0.25]
    """
    kept = teaching(groups)
    count = sum(len(g.samples) for g in kept)
    if kl_changes is not None and len(kl_changes) != count:
        raise ValueError(
            f"{len(kl_changes)} KL changes for {count} completions to train on"
        )
    datums = []
    position = 0
    for group in kept:
        trained = [not (mask_truncated and s.truncated) for s in group.samples]
        kept_samples = [s for s, t in zip(group.samples, trained, strict=True) if t]
        lengths = [len(s.tokens) for s in kept_samples]
        scales = iter(
            length_scales(lengths, normalization, max_tokens) if lengths else []
        )
        for sample, is_trained in zip(group.samples, trained, strict=True):
            change = None if kl_changes is None else kl_changes[position]
            position += 1
            if not is_trained:
                continue
            scale = next(scales)
            if scale == 1.0 and change is None:
                datums.append(build_grpo_datum(group.prompt_tokens, sample))
                continue
            per_token = [sample.advantage * scale] * len(sample.tokens)
            if change is not None:
                per_token = [a + c for a, c in zip(per_token, change, strict=True)]
            datums.append(build_grpo_datum(group.prompt_tokens, sample, per_token))
    return datums


def trained_samples(groups: Iterable[PromptGroup]) -> list[tuple[list[int], Any]]:
    """(prompt tokens, sample) of every completion of the non-degenerate groups."""
    return [
        (group.prompt_tokens, sample)
        for group in teaching(groups)
        for sample in group.samples
    ]


def reference_inputs(groups: Iterable[PromptGroup]) -> list[trio.ModelInput]:
    """What to ask the reference model: prompt + completion of each trained sample."""
    return [
        trio.ModelInput.from_ints(list(prompt) + list(sample.tokens))
        for prompt, sample in trained_samples(groups)
    ]


def kl_terms(
    groups: list[PromptGroup],
    reference: Sequence[Sequence[float | None]],
    kl_coef: float,
) -> tuple[list[list[float]], dict[str, float]]:
    """The KL penalty's per-token changes and the KL metrics of a step.

    Args:
        groups: the step's groups.
        reference: per trained sample (see :func:`reference_inputs`), the reference
            model's ``compute_logprobs`` of prompt + completion.
        kl_coef: the penalty's weight.
    """
    samples = trained_samples(groups)
    ref_completion = [
        # only the prompt's first token has None: never a completion token
        [float(cast(float, v)) for v in values[len(values) - len(sample.tokens) :]]
        for values, (_, sample) in zip(reference, samples, strict=True)
    ]
    return kl_penalty([s.logprobs for _, s in samples], ref_completion, kl_coef)


def with_sampler_logprobs(
    datums: Sequence[trio.Datum], scored: Any
) -> list[trio.Datum]:
    """The Datums with their sampler logprobs replaced by ``scored``'s.

    By default the local sampler reports each token's logprob under the model's own
    distribution (temperature 1). A loss that trains the tempered policy
    (``GRPOConfig.train_temperature='sampling'``) needs the tempered ones: the loop
    scores the step's Datums once with ``forward`` (same weights as the sampler,
    before any update) and puts them here, so that the ratio starts at 1. Positions
    without a completion token keep 0.

    Args:
        datums: the step's Datums.
        scored: the ``ForwardBackwardOutput`` of ``forward(datums, ...)``.

    Example:
        >>> from types import SimpleNamespace
        >>> from grpo_helpers.datum import RolloutSample, build_grpo_datum
        >>> d = build_grpo_datum([1, 2], RolloutSample([5, 6], [-1.0, -2.0], "", 1, 1))
        >>> out = SimpleNamespace(loss_fn_outputs=[{"logprobs": np.array(
        ...     [-9.0, -0.5, -0.75])}])
        >>> with_sampler_logprobs([d], out)[0].loss_fn_inputs["logprobs"].tolist()
        [0.0, -0.5, -0.75]
    """
    return [
        _datum(
            datum,
            np.where(completion_positions(datum), _values(result["logprobs"]), 0.0),
            _values(datum.loss_fn_inputs["advantages"]),
        )
        for datum, result in zip(datums, scored.loss_fn_outputs, strict=True)
    ]


def completion_positions(datum: trio.Datum) -> np.ndarray:
    """The positions of a Datum that hold a token the policy sampled: those with a
    sampler logprob or an advantage (a prompt's positions hold 0 in both) and a
    target (a tool's tokens have ``-100``, ``datum.IGNORED_TARGET``: no ratio, KL
    or mismatch reads them).

    >>> from grpo_helpers.datum import POLICY, TOOL, Turn, build_multiturn_datum
    >>> turns = [Turn([7], [-0.5], POLICY), Turn([9], None, TOOL),
    ...          Turn([5], [-0.25], POLICY)]
    >>> completion_positions(build_multiturn_datum([1, 2], turns, 0.5)).tolist()
    [False, True, False, True]
    """
    inputs = datum.loss_fn_inputs
    old = np.asarray(inputs["logprobs"].tolist(), dtype=np.float64)
    adv = np.asarray(inputs["advantages"].tolist(), dtype=np.float64)
    target = np.asarray(inputs["target_tokens"].tolist(), dtype=np.int64)
    return ((old != 0) | (adv != 0)) & (target != IGNORED_TARGET)


def _values(tensor: Any) -> np.ndarray:
    return np.asarray(tensor.tolist(), dtype=np.float64)


def _log_gaps(datums: Sequence[trio.Datum], scored: Any) -> list[np.ndarray]:
    """Per Datum, log(trainer / sampler) of each completion token: ``scored``'s
    logprobs minus the Datum's own."""
    return [
        (_values(out["logprobs"]) - _values(d.loss_fn_inputs["logprobs"]))[
            completion_positions(d)
        ]
        for d, out in zip(datums, scored.loss_fn_outputs, strict=True)
    ]


def mismatch_metrics(
    datums: Sequence[trio.Datum],
    scored: Any,
    clip_min: float | None,
    clip_max: float,
) -> dict[str, float]:
    """How far the sampler's logprobs are from the trainer's, at the same weights.

    Args:
        datums: the step's Datums, holding the sampler's logprobs.
        scored: the trainer's output (``forward`` or the first
            ``forward_backward``) on them, at the weights the sampler had.
        clip_min, clip_max: the correction's bounds (``GRPOConfig.is_clip_*``).

    Returns:
        ``mismatch_mean`` and ``mismatch_max``: the mean and largest
        ``|log pi_sampler - log pi_trainer|`` over the completion tokens;
        ``mismatch_kl``: ``mean(r - 1 - log r)`` with ``r = pi_trainer /
        pi_sampler``, an unbiased estimate of KL(sampler || trainer) from tokens the
        sampler drew (Schulman's k3); ``mismatch_outside``: the share of tokens whose
        ``r`` is outside ``[clip_min, clip_max]``.

    Example: two tokens, the trainer's logprob of the second log 4 above the
    sampler's.

    >>> import math
    >>> from types import SimpleNamespace
    >>> from grpo_helpers.datum import RolloutSample, build_grpo_datum
    >>> d = build_grpo_datum([1], RolloutSample([5, 6], [-1.0, -2.0], "", 1, 0.5))
    >>> out = SimpleNamespace(loss_fn_outputs=[
    ...     {"logprobs": np.array([-1.0, -2.0 + math.log(4)])}])
    >>> m = mismatch_metrics([d], out, None, 3.0)
    >>> round(m["mismatch_max"], 4), m["mismatch_outside"]
    (1.3863, 0.5)
    """
    gaps = _log_gaps(datums, scored)
    gap = np.concatenate(gaps) if gaps else np.zeros(0)
    if gap.size == 0:
        return {key: math.nan for key in MISMATCH_METRICS}
    ratio = np.exp(gap)
    low = 0.0 if clip_min is None else clip_min
    return {
        "mismatch_mean": float(np.mean(np.abs(gap))),
        "mismatch_max": float(np.max(np.abs(gap))),
        "mismatch_kl": float(np.mean(ratio - 1 - gap)),
        "mismatch_outside": float(np.mean((ratio > clip_max) | (ratio < low))),
    }


def staleness_metrics(
    datums: Sequence[trio.Datum], at_sampler: Any, now: Any, staleness: int
) -> dict[str, float]:
    """How far the trainer moved since the sampler's weights, on the sampled tokens:
    the gap from staleness, apart from the sampler's numerics
    (:func:`mismatch_metrics`, at the sampler's weights). The two add up, token by
    token, to the gap the update's ratio sees: log pi_now - log pi_sampler =
    (log pi_now - log pi_trainer_then) + (log pi_trainer_then - log pi_sampler).

    Args:
        datums: the step's Datums.
        at_sampler: the trainer's output on them at the sampler's weights.
        now: the trainer's output on them at its current weights (the first
            ``forward_backward``).
        staleness: how many updates the sampler's weights were behind.

    Returns:
        ``staleness``; ``stale_mean`` and ``stale_max``: the mean and largest
        ``|log pi_now - log pi_then|``; ``stale_kl``: Schulman's k3 estimate of
        KL(then || now) from the tokens drawn.

    Example: one token whose logprob rose by log 2 since the sampler's weights.

    >>> import math
    >>> from types import SimpleNamespace
    >>> from grpo_helpers.datum import RolloutSample, build_grpo_datum
    >>> d = build_grpo_datum([1], RolloutSample([5], [-1.0], "", 1, 0.5))
    >>> then = SimpleNamespace(loss_fn_outputs=[{"logprobs": np.array([-1.0])}])
    >>> now = SimpleNamespace(
    ...     loss_fn_outputs=[{"logprobs": np.array([-1.0 + math.log(2)])}])
    >>> m = staleness_metrics([d], then, now, 1)
    >>> round(m["stale_max"], 4), round(m["stale_kl"], 4)
    (0.6931, 0.3069)
    """
    gaps = [
        (_values(b["logprobs"]) - _values(a["logprobs"]))[completion_positions(d)]
        for d, a, b in zip(
            datums, at_sampler.loss_fn_outputs, now.loss_fn_outputs, strict=True
        )
    ]
    gap = np.concatenate(gaps) if gaps else np.zeros(0)
    if gap.size == 0:
        return {"staleness": float(staleness)} | {
            key: math.nan for key in STALENESS_METRICS[1:]
        }
    return {
        "staleness": float(staleness),
        "stale_mean": float(np.mean(np.abs(gap))),
        "stale_max": float(np.max(np.abs(gap))),
        "stale_kl": float(np.mean(np.exp(gap) - 1 - gap)),
    }


def is_weights(
    gap: np.ndarray, mode: str, clip_min: float | None, clip_max: float
) -> np.ndarray:
    """The correction's weight of each completion token, from its
    ``log(trainer / sampler)``: per token (``token_*``) or one per sequence, the
    product of its tokens' ratios (``sequence_*``, as TRL); truncated at the
    bounds (``*_truncate``: TIS) or 0 outside them (``*_mask``: MIS).

    >>> gap = np.log(np.array([0.5, 1.0, 4.0]))
    >>> is_weights(gap, "token_truncate", None, 3.0).tolist()
    [0.5, 1.0, 3.0]
    >>> is_weights(gap, "token_mask", None, 3.0).tolist()
    [0.5, 1.0, 0.0]
    >>> is_weights(gap, "sequence_mask", 0.5, 3.0).tolist()  # 0.5 x 1 x 4 = 2
    [2.0, 2.0, 2.0]
    """
    if mode.startswith("sequence"):
        ratio = np.full(gap.shape, math.exp(float(np.sum(gap))))
    else:
        ratio = np.exp(gap)
    low = -math.inf if clip_min is None else clip_min
    if mode.endswith("truncate"):
        return np.clip(ratio, None if clip_min is None else clip_min, clip_max)
    if mode.endswith("mask"):
        return np.where((ratio < low) | (ratio > clip_max), 0.0, ratio)
    raise ValueError(f"unknown correction {mode!r}")


def _datum(datum: trio.Datum, logprobs: np.ndarray, advantages: np.ndarray) -> Any:
    """``datum`` with other sampler logprobs and advantages (same tokens)."""
    targets = datum.loss_fn_inputs["target_tokens"].tolist()
    return trio.Datum(
        model_input=datum.model_input,
        loss_fn_inputs={
            "target_tokens": np.asarray(targets, dtype=np.int64),
            "logprobs": logprobs.astype(np.float32),
            "advantages": advantages.astype(np.float32),
        },
    )


def corrected_datums(
    datums: Sequence[trio.Datum],
    scored: Any,
    mode: str,
    clip_min: float | None,
    clip_max: float,
) -> tuple[list[trio.Datum], dict[str, float]]:
    """TIS or MIS through the client API: each Datum's logprobs become the
    trainer's at the sampler's weights (``scored``: the ratio of the update starts
    at 1 there) and each advantage is multiplied by the token's correction weight
    (:func:`is_weights`), a constant of the loss, as in TRL's
    ``per_token_loss * importance_sampling_ratio``.

    Returns:
        The Datums and ``{"is_weight_mean": ...}`` over the completion tokens.

    Example: the sampler's logprob of the second token is log 4 below the
    trainer's; truncated at 3, its advantage 0.5 becomes 1.5.

    >>> import math
    >>> from types import SimpleNamespace
    >>> from grpo_helpers.datum import RolloutSample, build_grpo_datum
    >>> d = build_grpo_datum([1], RolloutSample([5, 6], [-1.0, -2.0], "", 1, 0.5))
    >>> out = SimpleNamespace(loss_fn_outputs=[
    ...     {"logprobs": np.array([-1.0, -2.0 + math.log(4)])}])
    >>> new, m = corrected_datums([d], out, "token_truncate", None, 3.0)
    >>> new[0].loss_fn_inputs["advantages"].tolist(), m["is_weight_mean"]
    ([0.5, 1.5], 2.0)
    """
    out, weights = [], []
    for datum, result in zip(datums, scored.loss_fn_outputs, strict=True):
        active = completion_positions(datum)
        trainer = _values(result["logprobs"])
        gap = (trainer - _values(datum.loss_fn_inputs["logprobs"]))[active]
        weight = np.ones(active.shape)
        weight[active] = is_weights(gap, mode, clip_min, clip_max)
        weights.extend(weight[active].tolist())
        advantages = _values(datum.loss_fn_inputs["advantages"]) * weight
        out.append(_datum(datum, np.where(active, trainer, 0.0), advantages))
    mean = float(np.mean(weights)) if weights else math.nan
    return out, {"is_weight_mean": mean}


def sequence_ratio_datums(
    sampled: Sequence[trio.Datum], scored: Any
) -> list[trio.Datum]:
    """GSPO's sequence ratio through a token-level loss (GSPO-token, arXiv
    2507.18071, eq. 13): each token's "sampler logprob" becomes
    ``trainer_t - log s`` with ``log s`` the mean of the sequence's
    ``log(trainer / sampler)``. The loss's token ratio ``exp(logprob - that)`` is
    then ``s * pi(y_t) / sg[pi(y_t)]``: worth ``s`` at the current weights, so a
    clip acts on the whole sequence, and its gradient ``s * grad log pi(y_t)``.
    Called before each update with that update's ``forward`` (``scored``);
    ``sampled``: the Datums with the sampler's logprobs.

    >>> import math
    >>> from types import SimpleNamespace
    >>> from grpo_helpers.datum import RolloutSample, build_grpo_datum
    >>> d = build_grpo_datum([1], RolloutSample([5, 6], [-1.0, -2.0], "", 1, 0.5))
    >>> out = SimpleNamespace(loss_fn_outputs=[{"logprobs": np.array([-0.5, -1.5])}])
    >>> new = sequence_ratio_datums([d], out)[0]  # log s = 0.5 on both tokens
    >>> new.loss_fn_inputs["logprobs"].tolist()
    [-1.0, -2.0]
    """
    out = []
    for datum, result in zip(sampled, scored.loss_fn_outputs, strict=True):
        active = completion_positions(datum)
        trainer = _values(result["logprobs"])
        log_s = (
            float(
                np.mean((trainer - _values(datum.loss_fn_inputs["logprobs"]))[active])
            )
            if active.any()
            else 0.0
        )
        logprobs = np.where(active, trainer - log_s, 0.0)
        out.append(_datum(datum, logprobs, _values(datum.loss_fn_inputs["advantages"])))
    return out


def ratio_metrics(
    outputs: Sequence[Any],
    datums: Sequence[trio.Datum],
    clip_low: float,
    clip_high: float,
) -> dict[str, float]:
    """Mean learner/sampler ratio and the fraction of tokens the clip stops.

    Over the completion tokens (non-zero advantage) of every update of a step:
    ``ratio = exp(learner logprob - sampler logprob)``; a token is *clipped* when
    the PPO objective stops pushing it: ``ratio > clip_high`` with a positive
    advantage, or ``ratio < clip_low`` with a negative one. With one update per
    batch the ratio is 1 (up to float noise) and nothing is clipped.

    Args:
        outputs: the ``ForwardBackwardOutput`` of each update.
        datums: the step's Datums (their sampler logprobs and advantages).

    Example: the learner's logprob of one token of three rose by log 1.3.

    >>> import math
    >>> from types import SimpleNamespace
    >>> from grpo_helpers.datum import RolloutSample, build_grpo_datum
    >>> right = RolloutSample([5, 6], [-0.1, -0.2], "4", 1.0, advantage=0.5)
    >>> wrong = RolloutSample([7], [-0.3], "5", 0.0, advantage=-0.5)
    >>> datums = [build_grpo_datum([1, 2, 3], s) for s in (right, wrong)]
    >>> learner = [[0, 0, -0.1 + math.log(1.3), -0.2], [0, 0, -0.3]]
    >>> out = SimpleNamespace(loss_fn_outputs=[
    ...     {"logprobs": np.array(lp)} for lp in learner])
    >>> metrics = ratio_metrics([out], datums, clip_low=0.8, clip_high=1.2)
    >>> round(metrics["ratio_mean"], 4), round(metrics["clip_frac"], 4)
    (1.1, 0.3333)
    """
    ratios: list[float] = []
    clipped = 0
    for out in outputs:
        for datum, result in zip(datums, out.loss_fn_outputs, strict=True):
            adv = np.asarray(datum.loss_fn_inputs["advantages"].tolist(), dtype=float)
            old = np.asarray(datum.loss_fn_inputs["logprobs"].tolist(), dtype=float)
            new = np.asarray(result["logprobs"].tolist(), dtype=float)
            active = adv != 0
            ratio = np.exp(new[active] - old[active])
            ratios.extend(ratio.tolist())
            a = adv[active]
            clipped += int(
                np.sum((a > 0) & (ratio > clip_high) | (a < 0) & (ratio < clip_low))
            )
    if not ratios:
        return {"ratio_mean": math.nan, "clip_frac": math.nan}
    return {"ratio_mean": float(np.mean(ratios)), "clip_frac": clipped / len(ratios)}


def _grad_norm(optim_metrics: dict[str, float]) -> float:
    for key, value in optim_metrics.items():
        if "grad_norm" in key:
            return float(value)
    return math.nan


def step_metrics(
    step: int,
    groups: list[PromptGroup],
    datums: list[trio.Datum],
    max_tokens: int,
    loss_metrics: dict[str, float],
    optim_metrics: dict[str, float],
    seconds: dict[str, float],
    objective: dict[str, float] | None = None,
) -> dict[str, Any]:
    """One row of metrics for one step (before cumulative token counts).

    Args:
        step: the step number, from 0.
        groups: the step's prompt groups with their graded completions.
        datums: what was sent to ``forward_backward`` (empty: no update).
        max_tokens: the sampling budget; a completion of that length hit it.
        loss_metrics: ``ForwardBackwardOutput.metrics`` (``loss_sum``...), or {}.
        optim_metrics: ``OptimStepResponse.metrics`` (grad norm...), or {}.
        seconds: wall-clock seconds spent ``sampling``, ``training`` and ``total``.
        objective: the objective's own metrics (``ratio_mean``, ``clip_frac``,
            ``kl_k1``, ``kl_k3``, ``updates``), NaN where not measured.

    Returns:
        A flat dict; ``reward_mean`` is the mean reward over all completions,
        ``accuracy`` the fraction whose boxed answer is exactly right,
        ``lenient_accuracy`` the fraction whose answer (boxed, else the last
        number) is right, ``boxed_frac`` the fraction with a complete
        ``\\boxed{}`` answer,
        ``entropy`` the mean negative logprob of the sampled tokens (an estimate
        of the sampler's entropy per token at temperature 1).
    """
    samples = [s for g in groups for s in g.samples]
    lengths = [len(s.tokens) for s in samples]
    exact = [e for g in groups for e in g.exact]
    skipped = sum(g.degenerate for g in groups)
    hit_max = sum(n >= max_tokens for n in lengths)
    read = [(read_answer(s.text), g.ground_truth) for g in groups for s in g.samples]
    boxed = [is_boxed for (_, is_boxed), _ in read]
    lenient = [answers_match(answer, gold) for (answer, _), gold in read]
    return {
        "step": step,
        "reward_mean": float(np.mean([s.reward for s in samples])),
        "accuracy": float(np.mean(exact)),
        "lenient_accuracy": float(np.mean(lenient)),
        "boxed_frac": float(np.mean(boxed)),
        "group_reward_std": float(np.mean([np.std(g.rewards) for g in groups])),
        "frac_degenerate": skipped / len(groups),
        "valid_groups": len(groups) - skipped,
        "skipped_groups": skipped,
        "datums": len(datums),
        "updated": bool(datums),
        "completion_tokens_mean": float(np.mean(lengths)),
        "completion_tokens_max": int(max(lengths)),
        "hit_max_count": int(hit_max),
        "hit_max_frac": hit_max / len(lengths),
        "loss_sum": float(loss_metrics.get("loss_sum", math.nan)),
        "loss_mean": float(loss_metrics.get("loss_mean", math.nan)),
        "token_count": float(loss_metrics.get("token_count", math.nan)),
        "grad_norm": _grad_norm(optim_metrics),
        "seconds_sampling": seconds["sampling"],
        "seconds_training": seconds["training"],
        "seconds_total": seconds["total"],
        "prefill_tokens": sum(len(g.prompt_tokens) for g in groups),
        "sampled_tokens": int(sum(lengths)),
        "trained_tokens": int(sum(d.model_input.length for d in datums)),
        "entropy": -float(np.mean([lp for s in samples for lp in s.logprobs])),
        **{key: math.nan for key in OBJECTIVE_METRICS},
        **(objective or {}),
    }


def format_step_line(row: dict[str, Any]) -> str:
    """The line printed after each step, in the demo scripts' style."""
    return (
        f"Step {row['step']:3d} | reward: {row['reward_mean']:.3f} | "
        f"acc: {row['accuracy']:.0%} | degenerate: {row['frac_degenerate']:.0%} | "
        f"datums: {row['datums']} | tokens mean/max: "
        f"{row['completion_tokens_mean']:.1f}/{row['completion_tokens_max']} | "
        f"hit max: {row['hit_max_count']} | loss: {row['loss_mean']:.4f} | "
        f"{row['seconds_total']:.1f}s"
    )


def sample_records(
    step: int,
    groups: list[PromptGroup],
    trained: list[PromptGroup] | None = None,
) -> list[dict[str, Any]]:
    """The ``samples.jsonl`` lines of one step: one per completion.

    With ``trained`` (dynamic sampling: the groups the step trained on), each
    line also says whether its group was ``discarded`` (degenerate, or past the
    ``batch_size`` groups that teach).
    """
    kept = None if trained is None else {id(g) for g in trained if not g.degenerate}
    return [
        {
            "step": step,
            "question_index": group.row_index,
            "sample_index": i,
            "text": sample.text,
            "reward": sample.reward,
            "advantage": sample.advantage,
            "num_tokens": len(sample.tokens),
            "exact": exact,
            **({} if kept is None else {"discarded": id(group) not in kept}),
        }
        for group in groups
        for i, (sample, exact) in enumerate(
            zip(group.samples, group.exact, strict=True)
        )
    ]
