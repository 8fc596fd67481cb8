"""One GRPO step in plain PyTorch, held against the engine's own step.

Notebook 04's exercise 4 asks the learner to write what ``forward_backward`` and
``optim_step`` do, with nothing but torch: the model's logits, ``log_softmax`` and
``gather`` on the shifted targets, the mask of the completion tokens, the
importance-sampling loss with a length normalisation, ``loss.backward()`` and one
Adam step on the LoRA weights. :func:`plain_step_check` runs the learner's step on
one copy of a policy and the engine's ``forward_backward`` + ``optim_step`` on
another, identical copy, and compares the loss, the gradients of the LoRA weights
and the weights after the step.

The batch (:class:`PlainBatch`) is built from completions the check samples itself,
at a temperature below 1, after two short prompts of different lengths: rows of
different lengths, right-padded, with junk in ``old_logprobs`` outside the
completions, so that only a right mask counts the right positions. Both copies
start from the same LoRA weights, moved away from zero (so that every LoRA tensor
gets a gradient and the ratios are not 1). Each normalisation (``token_sum``,
``sequence_mean``, ``constant``) is one case, on fresh copies.

The engine's sampler draws at the sampling temperature but records each token's
logprob under the model's own distribution (temperature 1), and the engine trains
at temperature 1 too (``grpo_helpers.local.sampling``): a step that divides the
logits by the temperature computes other logprobs, ratios and loss, and fails.
(TRL divides by it on both sides instead: ``trl_mapping``'s "temperature".)

Hints name the mistake (no shift, no mask, the logits divided by the temperature,
another normalisation, the sign, no backward, no step, a plain gradient step),
never the wanted numbers.

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
    mistakes = [
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
    """One normalisation's batch, the engine's Datums for it, and the LoRA
    weights both copies start from."""

    batch: PlainBatch
    datums: list[Any]
    start: dict[str, Any]


def _cases(
    service: Any,
    base_model: str,
    prompt_tokens: Sequence[int],
    lora_rank: int,
    seed: int,
) -> list[_Case]:
    """Sample the check's completions and build one case per normalisation."""
    import pytrio as trio
    import torch

    from grpo_helpers.datum import RolloutSample, build_grpo_datum
    from grpo_helpers.local.plain import lora_parameters

    tokens = list(prompt_tokens)
    prompts = [tokens[-min(4, len(tokens)) :], tokens[-min(7, len(tokens)) :]]
    sampler = service.create_sampling_client(base_model=base_model)
    rows = []
    for i, prompt in enumerate(prompts):
        params = trio.SamplingParams(
            max_tokens=MAX_TOKENS, temperature=TEMPERATURE, seed=seed + i
        )
        response = sampler.sample(
            prompt=trio.ModelInput.from_ints(prompt),
            num_samples=2,
            sampling_params=params,
        ).result()
        for j, sequence in enumerate(response.sequences):
            # cut the completions to different lengths: the normalisations differ
            keep = max(1, len(sequence.tokens) - 2 * j - 3 * i)
            advantage = ADVANTAGES[len(rows) % len(ADVANTAGES)]
            rows.append(
                (
                    prompt,
                    list(sequence.tokens[:keep]),
                    list(sequence.logprobs[:keep]),
                    advantage,
                )
            )
    reference = service.create_lora_training_client(
        base_model, rank=lora_rank, seed=seed
    )
    generator = torch.Generator().manual_seed(seed)
    start = {}
    for name, p in lora_parameters(reference).items():
        moved = torch.randn(p.shape, generator=generator) * 0.01
        start[name] = moved if "lora_B" in name else p.detach().clone()
    pad = reference.get_tokenizer().pad_token_id or 0
    cases = []
    for normalization in NORMALIZATIONS:
        batch = plain_batch(rows, normalization, MAX_TOKENS, TEMPERATURE, pad)
        scales = _scales(batch, normalization).tolist()
        datums = [
            build_grpo_datum(
                prompt,
                RolloutSample(completion, logprobs, "", 0.0, advantage),
                [advantage * scale] * len(completion),
            )
            for (prompt, completion, logprobs, advantage), scale in zip(
                rows, scales, strict=True
            )
        ]
        cases.append(_Case(batch, datums, start))
    return cases


#: The check's optimiser settings: not PyTRIO's defaults, so that they must be read.
def _adam() -> Any:
    import pytrio as trio

    return trio.AdamParams(
        learning_rate=2e-3, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.0
    )


def _engine_step(
    service: Any, base_model: str, case: _Case, lora_rank: int, seed: int, adam: Any
) -> tuple[float, dict[str, Any], dict[str, Any]]:
    """The engine's loss, LoRA gradients and LoRA weights after one step."""
    import torch

    from grpo_helpers.local.plain import load_lora, lora_parameters

    engine = service.create_lora_training_client(base_model, rank=lora_rank, seed=seed)
    load_lora(engine, case.start)
    output = engine.forward_backward(case.datums, "importance_sampling").result()
    params = lora_parameters(engine)
    grads = {
        name: (torch.zeros_like(p) if p.grad is None else p.grad.detach().clone())
        for name, p in params.items()
    }
    engine.optim_step(adam).result()
    after = {name: p.detach().clone() for name, p in params.items()}
    return float(output.metrics["loss_sum"]), grads, after


def _learner_step(
    step: Callable[..., Any],
    service: Any,
    base_model: str,
    case: _Case,
    lora_rank: int,
    seed: int,
    adam: Any,
) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """What the learner's step returned, the gradients it left and the weights
    after it."""
    from grpo_helpers.local.plain import load_lora, lora_parameters, torch_policy

    mine = service.create_lora_training_client(base_model, rank=lora_rank, seed=seed)
    load_lora(mine, case.start)
    names = {id(p): name for name, p in lora_parameters(mine).items()}
    grads: dict[str, Any] = {}
    with torch_policy(mine) as (model, params):

        def record(p: Any) -> None:
            grads[names[id(p)]] = p.grad.detach().clone()

        hooks = [p.register_post_accumulate_grad_hook(record) for p in params]
        try:
            got = step(model, params, case.batch.copy(), adam)
        finally:
            for hook in hooks:
                hook.remove()
    after = {name: p.detach().clone() for name, p in lora_parameters(mine).items()}
    return got, grads, after


def _start_logits(
    service: Any, base_model: str, case: _Case, lora_rank: int, seed: int
) -> Any:
    """The policy's logits on the batch at the start (for the hints only)."""
    import torch

    from grpo_helpers.local.plain import load_lora, torch_policy

    policy = service.create_lora_training_client(base_model, rank=lora_rank, seed=seed)
    load_lora(policy, case.start)
    with torch_policy(policy) as (model, _), torch.no_grad():
        batch = case.batch
        return model(
            input_ids=batch.tokens, attention_mask=batch.attention_mask
        ).logits.float()


def _close(got: dict[str, Any], want: dict[str, Any], atol: float) -> bool:
    import torch

    return all(
        torch.allclose(got[name], want[name], atol=atol, rtol=1e-3) for name in want
    )


def _same_step(
    after: dict[str, Any],
    want: dict[str, Any],
    start: dict[str, Any],
    grads: dict[str, Any],
    grad_tol: float,
    lr: float,
) -> bool:
    """Whether the weights after a step are ``want``, within 5% of the learning
    rate, where the gradient is larger than its tolerance. Where it is not (a few
    elements of a real model, whose gradient is rounding noise on both sides),
    Adam's first step has no reliable direction: there the weight need only have
    moved by at most one learning rate."""
    for name, target in want.items():
        sure = grads[name].abs() > grad_tol
        gap = (after[name] - target).abs()
        moved = (after[name] - start[name]).abs()
        if bool((gap > 0.05 * lr + 1e-3 * target.abs())[sure].any()):
            return False
        if bool((moved > 1.05 * lr)[~sure].any()):
            return False
    return True


def plain_step_check(
    exercise: str,
    step: Callable[..., Any],
    service: Any,
    base_model: str,
    prompt_tokens: Sequence[int],
    lora_rank: int = 4,
    seed: int = 0,
    strict: bool | None = None,
) -> bool:
    """Check ``step(model, lora_params, batch, adam_params)``, one GRPO step in
    plain PyTorch, against the engine's ``forward_backward`` + ``optim_step``.

    The check samples two completions after each of two short prompts (the
    last tokens of ``prompt_tokens``) at temperature 0.6, and for each normalisation
    of :data:`NORMALIZATIONS` makes two identical copies of a LoRA policy on
    ``base_model`` (rank ``lora_rank``, weights moved away from zero). The engine
    trains one on the batch's Datums (advantages times the normalisation's
    factor); the learner's ``step`` gets the other as ``model`` (a
    ``torch.nn.Module``: ``model(input_ids=..., attention_mask=...).logits``) and
    ``lora_params`` (the tensors to step), the :class:`PlainBatch` and a
    ``pytrio.AdamParams``, and must return the loss (computed before the step).

    Passes when the loss is the engine's ``loss_sum`` (within 1e-3 + 1e-4 of it),
    every LoRA gradient the engine's (1e-3 relative, 1e-4 of the largest), and
    every LoRA weight after the step the engine's (within 5% of the learning
    rate; where a gradient is within its tolerance of zero, only within one
    learning rate of where it started). Needs the local engine: PyTRIO's model is
    not in this process.

    Returns:
        True when all three agree for every normalisation.
    """

    def check() -> str:
        import torch

        adam = _adam()
        cases = _cases(service, base_model, prompt_tokens, lora_rank, seed)
        for case in cases:
            got, grads, after = _learner_step(
                step, service, base_model, case, lora_rank, seed, adam
            )
            want_loss, want_grads, want_after = _engine_step(
                service, base_model, case, lora_rank, seed, adam
            )
            moved = not _close(after, case.start, 0.0)
            if got is None:
                return STUB_HINT if not (grads or moved) else "return the loss"
            try:
                value = float(got.detach() if torch.is_tensor(got) else got)
            except (TypeError, ValueError, RuntimeError):
                return "return the loss as a number or a tensor with one number"
            if abs(value - want_loss) > 1e-3 + 1e-4 * abs(want_loss):
                logits = _start_logits(service, base_model, case, lora_rank, seed)
                return _loss_hint(value, want_loss, logits, case.batch)
            if len(grads) < len(want_grads):
                return (
                    "no gradient reached the LoRA weights (or only some): call "
                    "loss.backward() on the loss, from logits of the model"
                )
            scale = max(float(g.abs().max()) for g in want_grads.values())
            grad_tol = 1e-4 * scale + 1e-8
            if not _close(grads, want_grads, grad_tol):
                return (
                    "the loss matches the engine's but its gradient does not: is part "
                    "of it detached (.detach(), .item(), torch.no_grad()), or did "
                    "backward run twice?"
                )
            if not moved:
                return (
                    "the LoRA weights did not change: take one Adam step on "
                    "lora_params after loss.backward()"
                )
            lr = adam.learning_rate
            if not _same_step(after, want_after, case.start, want_grads, grad_tol, lr):
                sgd = {n: case.start[n] - lr * want_grads[n] for n in want_grads}
                if _same_step(after, sgd, case.start, want_grads, grad_tol, lr):
                    return (
                        "that is a plain gradient step: Adam divides each gradient "
                        "by the root of its running square"
                    )
                return (
                    "the LoRA weights after your step differ from one Adam step "
                    "with adam_params (learning_rate, beta1, beta2, eps, "
                    "weight_decay)"
                )
        return ""

    return run_check(exercise, check, strict)
