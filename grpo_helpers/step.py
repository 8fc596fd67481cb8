"""One GRPO step after sampling, for both loops: the one home of a step's work.

The sync and async loops (:mod:`grpo_helpers.training`) differ only in how they
sample: one prompt after the other, or all of a step's prompts at once. What
follows the samples is the same, and it is written once, here, in the order the
data flows:

1. :func:`choose_groups`: the groups the step trains on (the degenerate ones send
   nothing; dynamic sampling keeps the first ``batch_size`` that teach);
2. :func:`reference_logprobs`: the base model's logprobs, for the KL penalty;
3. :func:`step_datums`: the Datums, with the objective's advantage transforms;
4. :func:`update`: ``updates_per_batch`` times ``forward_backward`` then
   ``optim_step``, both submitted before either is waited on. Where the sampler's
   logprobs are not the ones the update divides by, a ``forward`` at the sampler's
   weights first scores the Datums with the trainer (:func:`rescore`): the
   trainer's logprobs, a correction's weights (TIS, MIS), GSPO's sequence ratio;
5. the metrics of the update: the ratios, how far the sampler's logprobs were
   from the trainer's at the same weights (``step_math.mismatch_metrics``), and,
   when the sampler's weights were behind the trainer's (the async loop's
   ``max_steps_off_policy``), how far the trainer moved since
   (``step_math.staleness_metrics``).

:func:`train_on_groups` runs the five in turn and returns an :class:`Outcome`.
Everything here speaks PyTRIO's sync client API, so it runs on any engine; the
async loop calls it in a worker thread (``asyncio.to_thread``). The arithmetic is
:mod:`grpo_helpers.step_math`'s.

Introduced in: 05_sync_training_loop.ipynb (the loop), 10_grpo_whole.ipynb (what
``train_sync`` adds to the learner's loop), 11_sampler_vs_trainer.ipynb (rescoring)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytrio as trio

from grpo_helpers.config import GRPOConfig
from grpo_helpers.step_math import (
    PromptGroup,
    build_step_datums,
    corrected_datums,
    kl_terms,
    mismatch_metrics,
    ratio_metrics,
    reference_inputs,
    sequence_ratio_datums,
    staleness_metrics,
    teaching,
    with_sampler_logprobs,
)

__all__ = [
    "Outcome",
    "choose_groups",
    "reference_logprobs",
    "rescore",
    "step_datums",
    "train_on_groups",
    "update",
]


@dataclass
class Outcome:
    """What one step's update did: the groups it trained on, the Datums of its
    first update, the engine's loss and optimiser metrics of that update, and the
    objective's own metrics (ratios, KL, the sampler/trainer gap)."""

    trained: list[PromptGroup]
    datums: list[trio.Datum]
    loss_metrics: dict[str, float] = field(default_factory=dict)
    optim_metrics: dict[str, float] = field(default_factory=dict)
    objective: dict[str, float] = field(default_factory=dict)


def choose_groups(
    groups: list[PromptGroup], batch_size: int, dynamic_sampling: int
) -> list[PromptGroup]:
    """The groups a step trains on: all it sampled (the degenerate ones then send no
    Datum) or, with dynamic sampling (DAPO), the first ``batch_size`` that teach.

    >>> from grpo_helpers.datum import RolloutSample
    >>> one = RolloutSample([5], [-0.1], "4", reward=1.0, advantage=0.0)
    >>> same, apart = PromptGroup(0, [1], "4", [one, one]), PromptGroup(1, [1], "4",
    ...     [one, RolloutSample([6], [-0.2], "5", reward=0.0, advantage=-0.5)])
    >>> len(choose_groups([same, apart], 1, 0)), len(choose_groups([same, apart], 1, 3))
    (2, 1)
    """
    if dynamic_sampling == 0:
        return groups
    return teaching(groups)[:batch_size]


def reference_logprobs(reference: Any, groups: list[PromptGroup]) -> list[Any] | None:
    """The reference (base) model's logprobs of each trained completion, every
    request submitted before the first is waited on; None without a reference."""
    if reference is None:
        return None
    futures = [reference.compute_logprobs(x) for x in reference_inputs(groups)]
    return [future.result() for future in futures]


def step_datums(
    config: GRPOConfig, groups: list[PromptGroup], reference: Sequence[Any] | None
) -> tuple[list[trio.Datum], dict[str, float]]:
    """The step's Datums, with the objective's advantage transforms, and the KL
    metrics when the reference model's logprobs were computed."""
    changes = None
    objective: dict[str, float] = {}
    if reference:
        changes, objective = kl_terms(groups, reference, config.kl_coef)
        if config.kl_coef == 0:
            changes = None
    datums = build_step_datums(
        groups,
        config.normalization,
        config.max_tokens,
        changes,
        mask_truncated=config.mask_truncated,
    )
    return datums, objective


def _forward(client: Any, config: GRPOConfig, datums: list[trio.Datum]) -> Any:
    """The trainer's logprobs of the Datums at its current weights (no gradient)."""
    return client.forward(
        datums, loss_fn=config.loss_fn, loss_fn_config=config.loss_fn_config
    ).result()


def rescore(
    client: Any, config: GRPOConfig, datums: list[trio.Datum]
) -> tuple[list[trio.Datum], Any, dict[str, float]]:
    """The Datums the first update trains on, when the sampler's logprobs are not
    the ones it divides by (``config.rescores``): scored once with ``forward`` at
    the sampler's weights (no update has happened since it sampled), then

    * a correction (``is_correction``): the trainer's logprobs, each advantage
      times its weight (``step_math.corrected_datums``);
    * GSPO (``ratio_level="sequence"``): each token's logprob shifted by its
      sequence's mean log ratio (``step_math.sequence_ratio_datums``);
    * otherwise the trainer's own logprobs (``sampler_logprobs="trainer"``, or a
      tempered loss whose sampler reported temperature-1 logprobs).

    Returns:
        (the Datums, the ``forward`` output, the correction's metrics); the
        Datums unchanged and None when nothing needs rescoring.
    """
    if not config.rescores:
        return datums, None, {}
    scored = _forward(client, config, datums)
    if config.is_correction != "none":
        corrected, weights = corrected_datums(
            datums, scored, config.is_correction, config.is_clip_min, config.is_clip_max
        )
        return corrected, scored, weights
    if config.ratio_level == "sequence":
        return sequence_ratio_datums(datums, scored), scored, {}
    return with_sampler_logprobs(datums, scored), scored, {}


def update(
    client: Any,
    config: GRPOConfig,
    datums: list[trio.Datum],
    sampled: list[trio.Datum],
) -> list[tuple[list[trio.Datum], Any, Any]]:
    """``updates_per_batch`` updates on the step's Datums: each submits
    ``forward_backward`` and ``optim_step`` before waiting on either (they run in
    order, back to back). GSPO rescores before every update after the first, since
    its sequence ratio moves with the weights (``sampled``: the Datums with the
    sampler's logprobs).

    Returns:
        Per update, (the Datums it trained on, the ``ForwardBackwardOutput``, the
        ``OptimStepResponse``).
    """
    outputs = []
    for i in range(config.updates_per_batch):  # mu updates on one batch
        if i > 0 and config.ratio_level == "sequence":
            datums = sequence_ratio_datums(sampled, _forward(client, config, sampled))
        fb_future = client.forward_backward(
            datums, loss_fn=config.loss_fn, loss_fn_config=config.loss_fn_config
        )
        optim_future = client.optim_step(config.adam_params)
        outputs.append((datums, fb_future.result(), optim_future.result()))
    return outputs


def update_metrics(
    config: GRPOConfig,
    outputs: list[tuple[list[trio.Datum], Any, Any]],
    sampled: list[trio.Datum],
    scored: Any,
    staleness: int = 0,
) -> dict[str, float]:
    """The ratios of every update (``step_math.ratio_metrics``), the
    sampler/trainer gap at the sampler's weights (from the rescoring ``forward``
    when there was one, else from the first ``forward_backward``, which runs before
    any ``optim_step`` of the step), and the gap from staleness: the first
    ``forward_backward`` against ``scored`` when the sampler's weights were
    ``staleness`` updates behind (0: none, by construction)."""
    if config.ratio_level == "sequence":  # each update trained its own Datums
        per_update = [
            ratio_metrics([fb], datums, config.clip_low, config.clip_high)
            for datums, fb, _ in outputs
        ]
        ratios = {
            key: sum(m[key] for m in per_update) / len(per_update)
            for key in per_update[0]
        }
    else:
        ratios = ratio_metrics(
            [fb for _, fb, _ in outputs],
            outputs[0][0],
            config.clip_low,
            config.clip_high,
        )
    at_sampler = scored if scored is not None else outputs[0][1]
    return {
        **ratios,
        "updates": float(len(outputs)),
        **mismatch_metrics(sampled, at_sampler, config.is_clip_min, config.is_clip_max),
        **staleness_metrics(sampled, at_sampler, outputs[0][1], staleness),
    }


def train_on_groups(
    config: GRPOConfig,
    client: Any,
    reference: Any,
    groups: list[PromptGroup],
    at_sampler: Any = None,
    staleness: int = 0,
) -> Outcome:
    """Everything a step does after sampling: choose the groups, the reference
    logprobs, the Datums, rescoring where needed, the updates and their metrics.

    Args:
        config: the run's settings.
        client: the ``TrainingClient`` (its weights are the sampler's until the
            first ``optim_step`` here, unless ``at_sampler`` is given).
        reference: a ``SamplingClient`` of the base model (KL), or None.
        groups: every group the step sampled, graded.
        at_sampler: a ``TrainingClient`` at the sampler's weights when they are
            ``staleness`` updates behind ``client``'s (the async loop's
            ``max_steps_off_policy``): what is scored "at the sampler's weights"
            (rescoring, the mismatch) is scored there, and the gap from staleness
            is measured against it; None: ``client``'s weights are the sampler's.
    """
    trained = choose_groups(groups, config.batch_size, config.dynamic_sampling)
    reference_lps = reference_logprobs(reference, trained)
    sampled, objective = step_datums(config, trained, reference_lps)
    if not sampled:  # no update: only how old the samples were is known
        return Outcome(trained, sampled, objective=objective | {"staleness": staleness})
    datums, scored, correction = rescore(at_sampler or client, config, sampled)
    if scored is None and at_sampler is not None:
        scored = _forward(at_sampler, config, sampled)
    outputs = update(client, config, datums, sampled)
    objective |= correction | update_metrics(
        config, outputs, sampled, scored, staleness
    )
    first_datums, first_fb, first_optim = outputs[0]
    return Outcome(
        trained,
        first_datums,
        dict(first_fb.metrics),
        dict(first_optim.metrics or {}),
        objective,
    )
