"""GRPO steps in plain PyTorch, held against the engine's own steps.

Notebook 04's exercise 4 asks the learner to write what ``forward_backward`` and
``optim_step`` do, with nothing but torch: the model's logits, ``log_softmax`` and
``gather`` on the shifted targets, the mask of the completion tokens, the
importance-sampling loss with a length normalisation, ``loss.backward()`` and an
Adam step on the LoRA weights, once per batch of a list, with one optimiser whose
moments carry over. :func:`plain_step_check` runs the learner's steps on one copy of
a policy and the engine's ``forward_backward`` + ``optim_step`` per batch on
another, identical copy, and compares each loss, each step's gradients of the LoRA
weights and the weights after the last step.

Why two steps: one Adam step from fresh moments moves each weight by about
``lr * sign(g)`` whatever ``beta1`` and ``beta2`` are, so a single step cannot tell
Adam from sign-SGD. The second step's moments hold the first gradient, so the
betas and eps count; the weight decay (1.0, on LoRA weights moved away from zero)
shrinks every weight by ``lr * 1.0 * w`` per step, so an optimiser that ignores it
or uses torch's default (0.01) lands elsewhere.

Each batch (:class:`PlainBatch`) is built from completions the check samples itself,
at a temperature below 1, after two short prompts of different lengths: rows of
different lengths, right-padded, with junk in ``old_logprobs`` outside the
completions, so that only a right mask counts the right positions. Both copies
start from the same LoRA weights, moved away from zero (so that every LoRA tensor
gets a gradient and the ratios are not 1). Each normalisation (``token_sum``,
``sequence_mean``, ``constant``) is one case, on fresh copies.

The engine's sampler draws at the sampling temperature but, by default, records
each token's logprob under the model's own distribution (temperature 1), and the
engine trains at temperature 1 too (``grpo_helpers.local.sampling``): a step that
divides the logits by the temperature computes other logprobs, ratios and loss, and
fails.
(TRL divides by it on both sides instead: ``trl_mapping``'s "temperature".)

Hints name the mistake (no shift, no mask, the logits divided by the temperature,
another normalisation, the sign, no backward, no step, a plain gradient step, the
gradients not zeroed between batches, Adam's settings not read), never the wanted
numbers.

The module stays whole (about 600 lines): the batch the learner gets, the two
copies of the policy, the steps on each and the hints that compare them are one
check, and each hint reads what the others computed.

Introduced in: 04_datum_alignment.ipynb (exercise 4)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from grpo_helpers.classroom.self_checks import STUB_HINT, run_check

__all__ = ["NORMALIZATIONS", "PlainBatch", "plain_batch", "plain_step_check"]

#: The normalisations the exercise writes: every token once, each completion's
#: tokens divided by its length, all divided by ``max_tokens``.
NORMALIZATIONS = ("token_sum", "sequence_mean", "constant")
#: The check's sampling: this many tokens at most, at this temperature.
MAX_TOKENS = 8
TEMPERATURE = 0.6
#: What ``old_logprobs`` holds outside the completions: only a mask ignores it.
JUNK_LOGPROB = -12.0
#: The advantages of the rows, in turn: both signs, several sizes.
ADVANTAGES = (0.75, -0.5, 1.0, -0.25, 0.5, -1.0)


@dataclass
class PlainBatch:
    """One batch of completions, as plain tensors (``B`` rows of ``L`` tokens).

    Attributes:
        tokens: ``[B, L]`` int64: each row's prompt then completion tokens,
            right-padded.
        attention_mask: ``[B, L]`` int64: 1 on a row's tokens, 0 on its padding.
        prompt_lengths: ``[B]`` int64: the prompt tokens ``P`` of each row.
        completion_lengths: ``[B]`` int64: the completion tokens ``C`` of each row.
        old_logprobs: ``[B, L]`` float32: at the completion's positions ``P`` to
            ``P + C - 1``, the sampler's logprob of the token there; junk elsewhere.
        advantages: ``[B]`` float32: each completion's advantage.
        normalization: ``"token_sum"``, ``"sequence_mean"`` or ``"constant"``.
        max_tokens: the sampling budget (``"constant"`` divides by it).
        temperature: the temperature the completions were sampled at.
    """

    tokens: Any
    attention_mask: Any
    prompt_lengths: Any
    completion_lengths: Any
    old_logprobs: Any
    advantages: Any
    normalization: str
    max_tokens: int
    temperature: float

    def copy(self) -> PlainBatch:
        """Fresh tensors: what a learner's step changes, no other call sees."""
        return replace(
            self,
            **{
                name: getattr(self, name).clone()
                for name in (
                    "tokens",
                    "attention_mask",
                    "prompt_lengths",
                    "completion_lengths",
                    "old_logprobs",
                    "advantages",
                )
            },
        )


def plain_batch(
    rows: Sequence[tuple[Sequence[int], Sequence[int], Sequence[float], float]],
    normalization: str,
    max_tokens: int,
    temperature: float,
    pad_token_id: int = 0,
) -> PlainBatch:
    """A :class:`PlainBatch` of ``rows``: ``(prompt_tokens, completion_tokens,
    completion_logprobs, advantage)`` each."""
    import torch

    width = max(len(p) + len(c) for p, c, _, _ in rows)
    size = len(rows)
    tokens = torch.full((size, width), int(pad_token_id), dtype=torch.long)
    attention = torch.zeros((size, width), dtype=torch.long)
    old = torch.full((size, width), JUNK_LOGPROB)
    for i, (prompt, completion, logprobs, _) in enumerate(rows):
        n, p = len(prompt) + len(completion), len(prompt)
        tokens[i, :n] = torch.tensor([*prompt, *completion])
        attention[i, :n] = 1
        old[i, p:n] = torch.tensor([float(v) for v in logprobs])
    return PlainBatch(
        tokens=tokens,
        attention_mask=attention,
        prompt_lengths=torch.tensor([len(p) for p, _, _, _ in rows]),
        completion_lengths=torch.tensor([len(c) for _, c, _, _ in rows]),
        old_logprobs=old,
        advantages=torch.tensor([float(a) for _, _, _, a in rows]),
        normalization=normalization,
        max_tokens=int(max_tokens),
        temperature=float(temperature),
    )


def _scales(batch: PlainBatch, normalization: str) -> Any:
    """Each row's factor under ``normalization`` (``advantages.length_scales``,
    one completion per row)."""
    import torch

    lengths = batch.completion_lengths.float()
    if normalization == "sequence_mean":
        return 1.0 / lengths
    if normalization == "constant":
        return torch.full_like(lengths, 1.0 / batch.max_tokens)
    if normalization == "token_mean":  # over the whole batch: not one of ours
        return torch.full_like(lengths, 1.0 / float(lengths.sum()))
    return torch.ones_like(lengths)


def _loss(
    logits: Any,
    batch: PlainBatch,
    *,
    normalization: str | None = None,
    shift: bool = True,
    masked: bool = True,
    temperature: float = 1.0,
) -> float:
    """The batch's loss from ``logits`` ([B, L, V]), right or with one mistake:
    the hints' yardsticks. With the defaults it is the engine's ``loss_sum``."""
    import torch

    logits = logits.float() / temperature
    if shift:  # position t predicts token t + 1
        logprobs = torch.log_softmax(logits[:, :-1], dim=-1)
        targets, old, first = batch.tokens[:, 1:], batch.old_logprobs[:, 1:], 1
    else:
        logprobs = torch.log_softmax(logits, dim=-1)
        targets, old, first = batch.tokens, batch.old_logprobs, 0
    chosen = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    position = torch.arange(first, first + chosen.shape[1])[None]
    start = batch.prompt_lengths[:, None]
    mask = (position >= start) & (position < start + batch.completion_lengths[:, None])
    if not masked:
        mask = torch.ones_like(mask)
    scale = _scales(batch, normalization or batch.normalization)
    weight = (batch.advantages * scale)[:, None]
    ratio = torch.exp(chosen - old)
    return float(torch.where(mask, -ratio * weight, 0.0).sum())


def _loss_hint(value: float, want: float, logits: Any, batch: PlainBatch) -> str:
    """What differs between the learner's loss and the engine's ``loss_sum``."""
    tol = 1e-3 + 1e-4 * abs(want)
    if abs(value - want) <= tol:
        return ""
    if abs(value + want) <= tol:
        return "the sign is flipped: the engine *minimises* -ratio * advantage"
    mistakes: list[tuple[dict[str, Any], str]] = [
        (
            {"temperature": batch.temperature},
            "your logprobs come from logits divided by the temperature; the sampler "
            "recorded them at temperature 1, as the engine trains",
        ),
        (
            {"shift": False},
            "no shift: the logits at position t give the logprob of token t + 1, "
            "so drop the last position's logits and the first token",
        ),
        (
            {"masked": False},
            "positions outside the completions count in your loss (the prompt, the "
            "padding): mask them out",
        ),
    ]
    others = [n for n in (*NORMALIZATIONS, "token_mean") if n != batch.normalization]
    mistakes += [
        (
            {"normalization": name},
            f"the loss is normalised another way than batch.normalization "
            f"({batch.normalization!r} here)",
        )
        for name in others
    ]
    for kwargs, hint in mistakes:
        if abs(value - _loss(logits, batch, **kwargs)) <= tol:
            return hint
    return "the loss differs from the engine's loss_sum on the same batch"


@dataclass
class _Case:
    """One normalisation's batches (one per prompt), the engine's Datums for each,
    and the LoRA weights both copies start from."""

    batches: list[PlainBatch]
    datums: list[list[Any]]
    start: dict[str, Any]


#: Where the check's LoRA weights start (normal, with these spreads): ``lora_A``
#: large enough that the weight decay moves it visibly, ``lora_B`` small but not
#: zero (every LoRA tensor gets a gradient, the ratios are not 1, and the policy
#: stays close to the one that sampled).
START_A, START_B = 0.05, 0.01
#: Where every step's gradient is clear of rounding, a weight after the steps must
#: be the engine's within this share of the learning rate (plus 1e-4 of itself).
STEP_TOLERANCE = 0.01


def _cases(
    service: Any,
    base_model: str,
    prompt_tokens: Sequence[int],
    lora_rank: int,
    seed: int,
) -> list[_Case]:
    """Sample the check's completions and build one case per normalisation: two
    batches, the completions of one prompt each."""
    import pytrio as trio
    import torch

    from grpo_helpers.datum import RolloutSample, build_grpo_datum
    from grpo_helpers.local.plain import lora_parameters

    tokens = list(prompt_tokens)
    prompts = [tokens[-min(4, len(tokens)) :], tokens[-min(7, len(tokens)) :]]
    sampler = service.create_sampling_client(base_model=base_model)
    per_prompt: list[list[tuple[Any, ...]]] = []
    count = 0
    for i, prompt in enumerate(prompts):
        params = trio.SamplingParams(
            max_tokens=MAX_TOKENS, temperature=TEMPERATURE, seed=seed + i
        )
        response = sampler.sample(
            prompt=trio.ModelInput.from_ints(prompt),
            num_samples=2,
            sampling_params=params,
        ).result()
        rows = []
        for j, sequence in enumerate(response.sequences):
            # cut the completions to different lengths: the normalisations differ
            keep = max(1, len(sequence.tokens) - 2 * j - 3 * i)
            advantage = ADVANTAGES[count % len(ADVANTAGES)]
            count += 1
            rows.append(
                (
                    prompt,
                    list(sequence.tokens[:keep]),
                    list(sequence.logprobs[:keep]),
                    advantage,
                )
            )
        per_prompt.append(rows)
    reference = service.create_lora_training_client(
        base_model, rank=lora_rank, seed=seed
    )
    generator = torch.Generator().manual_seed(seed)
    start = {}
    for name, p in lora_parameters(reference).items():
        spread = START_B if "lora_B" in name else START_A
        start[name] = torch.randn(p.shape, generator=generator) * spread
    pad = reference.get_tokenizer().pad_token_id or 0
    cases = []
    for normalization in NORMALIZATIONS:
        batches, datums = [], []
        for rows in per_prompt:
            batch = plain_batch(rows, normalization, MAX_TOKENS, TEMPERATURE, pad)
            scales = _scales(batch, normalization).tolist()
            batches.append(batch)
            datums.append(
                [
                    build_grpo_datum(
                        prompt,
                        RolloutSample(completion, logprobs, "", 0.0, advantage),
                        [advantage * scale] * len(completion),
                    )
                    for (prompt, completion, logprobs, advantage), scale in zip(
                        rows, scales, strict=True
                    )
                ]
            )
        cases.append(_Case(batches, datums, start))
    return cases


#: The check's optimiser settings: far from torch's defaults (betas 0.9 and 0.999,
#: eps 1e-8, AdamW's weight decay 0.01), so that an optimiser that does not read
#: them takes other steps.
def _adam() -> Any:
    import pytrio as trio

    return trio.AdamParams(
        learning_rate=2e-3, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=1.0
    )


def _engine_steps(
    service: Any, base_model: str, case: _Case, lora_rank: int, seed: int, adam: Any
) -> tuple[list[float], list[dict[str, Any]], dict[str, Any]]:
    """The engine's loss and LoRA gradients at each step, and the LoRA weights
    after the last."""
    import torch

    from grpo_helpers.local.plain import load_lora, lora_parameters

    engine = service.create_lora_training_client(base_model, rank=lora_rank, seed=seed)
    load_lora(engine, case.start)
    params = lora_parameters(engine)
    losses, grads = [], []
    for datums in case.datums:
        output = engine.forward_backward(datums, "importance_sampling").result()
        losses.append(float(output.metrics["loss_sum"]))
        grads.append(
            {
                name: (
                    torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
                )
                for name, p in params.items()
            }
        )
        engine.optim_step(adam).result()
    after = {name: p.detach().clone() for name, p in params.items()}
    return losses, grads, after


def _learner_steps(
    steps: Callable[..., Any],
    service: Any,
    base_model: str,
    case: _Case,
    lora_rank: int,
    seed: int,
    adam: Any,
) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
    """What the learner's function returned, the gradient of each step (one dict
    per step: what ``.grad`` held when it was last accumulated before the weights
    changed, so several backward calls within a step read as one) and the
    weights after it."""
    from grpo_helpers.local.plain import load_lora, lora_parameters, torch_policy

    mine = service.create_lora_training_client(base_model, rank=lora_rank, seed=seed)
    load_lora(mine, case.start)
    names = {id(p): name for name, p in lora_parameters(mine).items()}
    # per weight: its gradient at each version of the weight (a step changes it)
    by_version: dict[str, dict[int, Any]] = {}
    with torch_policy(mine) as (model, params):

        def record(p: Any) -> None:
            versions = by_version.setdefault(names[id(p)], {})
            versions[p._version] = p.grad.detach().clone()

        hooks = [p.register_post_accumulate_grad_hook(record) for p in params]
        try:
            got = steps(model, params, [b.copy() for b in case.batches], adam)
        finally:
            for hook in hooks:
                hook.remove()
    grads: list[dict[str, Any]] = []
    for name, versions in by_version.items():
        for k, version in enumerate(sorted(versions)):
            while len(grads) <= k:
                grads.append({})
            grads[k][name] = versions[version]
    after = {name: p.detach().clone() for name, p in lora_parameters(mine).items()}
    return got, grads, after


def _start_logits(
    service: Any, base_model: str, case: _Case, lora_rank: int, seed: int
) -> Any:
    """The policy's logits on the first batch at the start (for the hints only)."""
    import torch

    from grpo_helpers.local.plain import load_lora, torch_policy

    policy = service.create_lora_training_client(base_model, rank=lora_rank, seed=seed)
    load_lora(policy, case.start)
    with torch_policy(policy) as (model, _), torch.no_grad():
        batch = case.batches[0]
        return model(
            input_ids=batch.tokens, attention_mask=batch.attention_mask
        ).logits.float()


def _close_grads(got: dict[str, Any], want: dict[str, Any]) -> bool:
    """Each LoRA gradient the engine's, to 1e-3 relative and 1e-4 of that tensor's
    largest (a model's output layer has gradients far larger than the rest: one
    tolerance for all would not see a wrong gradient on a small tensor)."""
    import torch

    return all(
        name in got
        and torch.allclose(
            got[name], g, atol=1e-4 * float(g.abs().max()) + 1e-8, rtol=1e-3
        )
        for name, g in want.items()
    )


def _close(got: dict[str, Any], want: dict[str, Any], atol: float) -> bool:
    import torch

    return all(
        name in got and torch.allclose(got[name], want[name], atol=atol, rtol=1e-3)
        for name in want
    )


def _same_step(
    after: dict[str, Any],
    want: dict[str, Any],
    start: dict[str, Any],
    sure: dict[str, Any],
    lr: float,
    steps: int,
) -> bool:
    """Whether the weights after the steps are ``want``, within
    :data:`STEP_TOLERANCE` of the learning rate, where ``sure`` (a mask per
    tensor: the gradient of every step is larger than its tolerance). Where it
    is not (a few elements of a real model, whose gradient is rounding noise on
    both sides), Adam has no reliable direction:
    there the weight need only have moved by at most about one learning rate (plus
    its decay) per step."""
    for name, target in want.items():
        gap = (after[name] - target).abs()
        moved = (after[name] - start[name]).abs()
        if bool((gap > STEP_TOLERANCE * lr + 1e-4 * target.abs())[sure[name]].any()):
            return False
        reach = steps * lr * (1.5 + start[name].abs())
        if bool((moved > reach)[~sure[name]].any()):
            return False
    return True


def _sure(grads: list[dict[str, Any]]) -> dict[str, Any]:
    """Per tensor, where every step's gradient is clear of float rounding: above
    1e-4 of that tensor's largest gradient (a model's output layer has gradients
    far larger than the rest, so one tolerance for all would leave most weights
    unchecked)."""
    import torch

    out = {}
    for name in grads[0]:
        stacked = torch.stack([g[name].abs() for g in grads])
        tol = 1e-4 * float(stacked.max()) + 1e-8
        out[name] = (stacked > tol).all(dim=0)
    return out


def _returned_losses(got: Any, n: int) -> list[float] | str:
    """The learner's losses as numbers, or a hint."""
    import torch

    if not isinstance(got, (list, tuple)) or len(got) != n:
        return f"return a list of the {n} losses, one per batch (each before its step)"
    values = []
    for value in got:
        try:
            values.append(float(value.detach() if torch.is_tensor(value) else value))
        except (TypeError, ValueError, RuntimeError):
            return "return each loss as a number or a tensor with one number"
    return values


def _optimizer_hint(
    case: _Case,
    after: dict[str, Any],
    learner_grads: list[dict[str, Any]],
    adam: Any,
) -> str:
    """Why the weights after the steps are not the engine's: a plain gradient
    step, or Adam's settings not read."""
    lr = adam.learning_rate
    sgd = dict(case.start)
    for grads in learner_grads:  # what a plain step would do with its gradients
        sgd = {k: sgd[k] - lr * grads[k] for k in sgd}
    # from its own gradients a plain step is exact: every weight must agree
    if all(
        bool(((after[k] - sgd[k]).abs() <= 0.05 * lr + 1e-3 * sgd[k].abs()).all())
        for k in sgd
    ):
        return (
            "that is a plain gradient step: Adam divides each gradient by the root "
            "of its running square"
        )
    return (
        "the LoRA weights after your steps differ from Adam's with adam_params: "
        "one optimiser for all the batches, made with learning_rate, beta1, beta2, "
        "eps and weight_decay (AdamW's decoupled decay), each read from adam_params"
    )


def plain_step_check(
    exercise: str,
    steps: Callable[..., Any],
    service: Any,
    base_model: str,
    prompt_tokens: Sequence[int],
    lora_rank: int = 4,
    seed: int = 0,
    strict: bool | None = None,
) -> bool:
    """Check ``steps(model, lora_params, batches, adam_params)``, GRPO steps in
    plain PyTorch, against the engine's ``forward_backward`` + ``optim_step``.

    The check samples two completions after each of two short prompts (the
    last tokens of ``prompt_tokens``) at temperature 0.6: two batches, one per
    prompt. For each normalisation of :data:`NORMALIZATIONS` it makes two identical
    copies of a LoRA policy on ``base_model`` (rank ``lora_rank``, weights moved
    away from zero). The engine trains one, batch after batch: the batch's Datums
    (advantages times the normalisation's factor), then ``optim_step``. The
    learner's ``steps`` gets the other as ``model`` (a ``torch.nn.Module``:
    ``model(input_ids=..., attention_mask=...).logits``) and ``lora_params`` (the
    tensors to step), the list of :class:`PlainBatch` and a ``pytrio.AdamParams``
    (:func:`_adam`, far from torch's defaults), and must take one step per batch
    with one optimiser and return the list of losses (each computed before its
    step).

    Passes when each loss is the engine's ``loss_sum`` (within 1e-3 + 1e-4 of it),
    each step's LoRA gradients the engine's (1e-3 relative, 1e-4 of the largest),
    and every LoRA weight after the last step the engine's (within 1% of the
    learning rate; where a gradient is within its tolerance of zero, only within
    reach of where it started). Needs the local engine: PyTRIO's model is not in
    this process.

    Returns:
        True when all three agree for every normalisation.
    """

    def check() -> str:

        adam = _adam()
        cases = _cases(service, base_model, prompt_tokens, lora_rank, seed)
        for case in cases:
            got, grads, after = _learner_steps(
                steps, service, base_model, case, lora_rank, seed, adam
            )
            want_losses, want_grads, want_after = _engine_steps(
                service, base_model, case, lora_rank, seed, adam
            )
            moved = not _close(after, case.start, 0.0)
            if got is None:
                return STUB_HINT if not (grads or moved) else "return the losses"
            values = _returned_losses(got, len(case.batches))
            if isinstance(values, str):
                return values
            if abs(values[0] - want_losses[0]) > 1e-3 + 1e-4 * abs(want_losses[0]):
                logits = _start_logits(service, base_model, case, lora_rank, seed)
                return _loss_hint(values[0], want_losses[0], logits, case.batches[0])
            if len(grads) < len(want_grads) or any(
                len(g) < len(want_grads[0]) for g in grads
            ):
                return (
                    "no gradient reached the LoRA weights (or only some, or not at "
                    "every batch): call loss.backward() on each batch's loss, from "
                    "logits of the model"
                )
            if not _close_grads(grads[0], want_grads[0]):
                return (
                    "the loss matches the engine's but its gradient does not: is part "
                    "of it detached (.detach(), .item(), torch.no_grad()), or did "
                    "backward run twice?"
                )
            if not moved:
                return (
                    "the LoRA weights did not change: take one Adam step on "
                    "lora_params after each loss.backward()"
                )
            lr, n = adam.learning_rate, len(case.batches)
            # a weight's direction is reliable where every step's gradient is
            sure = _sure(want_grads)
            wrong_step = _optimizer_hint(case, after, grads, adam)
            if abs(values[1] - want_losses[1]) > 1e-3 + 1e-4 * abs(want_losses[1]):
                # the first batch's loss and gradient were right: the first step
                # left other weights than the engine's
                return f"the second batch's loss differs: {wrong_step}"
            if not _close_grads(grads[1], want_grads[1]):
                both = {k: want_grads[0][k] + want_grads[1][k] for k in want_grads[1]}
                if _close_grads(grads[1], both):
                    return (
                        "the second batch's gradient still holds the first's: zero "
                        "the gradients after each step (optimizer.zero_grad())"
                    )
                return "the second batch's gradient differs from the engine's"
            if not _same_step(after, want_after, case.start, sure, lr, n):
                return wrong_step
        return ""

    return run_check(exercise, check, strict)
