"""Exercise checks against the engine: the learner writes GRPO's core, the engine
says whether it is right.

Notebooks 04-06 ask the learner to write the per-token losses, one GRPO step and the
concurrent calls. Each check here runs the learner's code beside the engine and
compares what matters, never a value the notebook holds:

* :func:`loss_check` (the ``importance_sampling`` and ``ppo`` losses, notebooks 04
  and 05): Datums whose old logprobs it shifts at random, so that the ratios land
  on both sides of the clip and the engine has never seen them; the engine's
  ``forward`` gives its ``loss_sum`` and the learner's logprobs; the learner's
  function gets those as padded ``[B, T]`` tensors with a ``mask`` and must give
  the same value, and through autograd the same gradient as the engine's own loss
  function (:func:`grpo_helpers.local.losses.loss_sum`). A sign flip, a missing
  mask, a clip on the wrong side or a detached ratio fails.
* :func:`grpo_step_check` (notebook 05): the learner's step gets a training client
  that records what it is sent (and passes it on to the engine); the Datums must be
  the loop's own (``step_math.build_step_datums``) for the same samples and rewards,
  sent by one ``forward_backward`` or one per group (the gradients add up either
  way), then one ``optim_step``, and no call at all when every group is
  degenerate.
* :func:`plain_step_check` (notebook 04, exercise 4; written in
  :mod:`grpo_helpers.classroom.plain_step`): one GRPO step in plain PyTorch, from the
  logits to an Adam step on the LoRA weights, against the engine's ``forward_backward``
  + ``optim_step`` on an identical copy of the policy: loss, gradients, weights.
* :func:`submitted_first_check` and :func:`two_await_check` (notebook 06): clients
  that count how many requests were in flight together, so a sequential answer
  fails even when it returns the right responses.

Hints say *what* differs (the sign, the masked positions, the clip's side, the
order of the calls), never the wanted value. Like
:mod:`grpo_helpers.classroom.self_checks`, a failed check raises under
``GRPO_STRICT_CHECKS=1`` and the learner's code gets ``GRPO_CHECK_SECONDS`` seconds.
``tests/classroom/test_against_engine.py`` shows that each check passes the solutions
and fails at least three named wrong answers.

The module is longer than most (about 650 lines) because each check carries the
recording client it needs; they stay together as one idea, a learner's code held
against the engine, apart from :mod:`grpo_helpers.classroom.self_checks` (which needs no
torch).

Introduced in: 04_datum_alignment.ipynb (the loss check), 05 and 06 (the others)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from grpo_helpers.classroom.plain_step import plain_step_check
from grpo_helpers.classroom.self_checks import (
    STUB_HINT,
    TimeLimitExceeded,
    _report,
    run_check,
    time_limit,
)
from grpo_helpers.datum import RolloutSample, build_grpo_datum
from grpo_helpers.settings import SETTINGS

__all__ = [
    "LossCase",
    "grpo_step_check",
    "loss_case",
    "loss_check",
    "plain_step_check",
    "submitted_first_check",
    "two_await_check",
]

#: Shifts of the old logprobs (the ratio becomes about exp(-shift)): both sides of
#: the clip bounds of the series (0.8, 1.2) and of clip-higher (1.28), and inside.
SHIFTS = (-0.45, -0.15, 0.12, 0.4)
#: Advantages given to the completions in turn: both signs, several sizes.
ADVANTAGES = (0.75, -0.5, 1.0, -0.25, 0.5, -1.0)
#: Junk in the padded positions: only ``mask`` says that they are not trained.
PAD_LOGPROB, PAD_OLD = -1.0, -2.0


# ----------------------------------------------------------------------------------
# The losses
# ----------------------------------------------------------------------------------


@dataclass
class LossCase:
    """One batch for a loss exercise, and the engine's answer on it.

    Attributes:
        logprobs: ``[B, T]`` the learner's logprob of each target (the engine's
            ``forward``); padding holds junk.
        old_logprobs: ``[B, T]`` the sampler's logprobs as the Datums carry them,
            shifted (0 on the prompt positions, junk on padding).
        advantages: ``[B, T]`` each completion's advantage on its whole row, as a
            trainer broadcasts it (prompt and padding included).
        mask: ``[B, T]`` bool, True on the positions the engine trains with a
            non-zero advantage: the completion tokens.
        loss_sum: the engine's ``loss_sum`` on these Datums.
        loss_fn, clip_low, clip_high: the loss and its bounds.
        datums: the Datums the engine received.
    """

    logprobs: Any
    old_logprobs: Any
    advantages: Any
    mask: Any
    loss_sum: float
    loss_fn: str
    clip_low: float
    clip_high: float
    datums: list[Any]

    def tensors(self) -> tuple[Any, Any, Any, Any]:
        """Fresh copies for one call (``logprobs`` requires grad)."""
        return (
            self.logprobs.clone().requires_grad_(True),
            self.old_logprobs.clone(),
            self.advantages.clone(),
            self.mask.clone(),
        )

    def args(self) -> tuple[Any, ...]:
        base = self.tensors()
        if self.loss_fn == "ppo":
            return (*base, self.clip_low, self.clip_high)
        return base

    def engine_loss(self, logprobs: Any, mask: Any | None = None) -> Any:
        """The engine's own loss function on these tensors (``mask`` by default)."""
        from grpo_helpers.local import losses

        config = {
            "clip_low_threshold": self.clip_low,
            "clip_high_threshold": self.clip_high,
        }
        return losses.loss_sum(
            self.loss_fn,
            logprobs,
            self.old_logprobs,
            self.advantages,
            None,
            config,
            self.mask if mask is None else mask,
        )


def loss_case(
    training_client: Any,
    groups: Sequence[tuple[Sequence[int], Sequence[RolloutSample]]],
    loss_fn: str = "importance_sampling",
    clip_low: float = 0.8,
    clip_high: float = 1.2,
    seed: int = 0,
) -> LossCase:
    """Datums the engine has not seen, its ``loss_sum`` on them, and the same
    batch as padded tensors.

    Args:
        training_client: the engine's policy (``forward`` only: nothing changes).
        groups: ``(prompt_tokens, samples)`` pairs; each sample becomes a Datum
            with an advantage from :data:`ADVANTAGES` and its old logprobs shifted
            by :data:`SHIFTS` plus a little noise (``seed``).
        loss_fn: ``"importance_sampling"`` or ``"ppo"``.
        clip_low, clip_high: the ratio bounds of ``ppo``.
    """
    import torch

    rng = np.random.default_rng(seed)
    datums, first = [], []
    index = 0
    for prompt, samples in groups:
        for sample in samples:
            n = len(sample.tokens)
            shift = rng.choice(SHIFTS, n) + rng.uniform(-0.03, 0.03, n)
            shifted = RolloutSample(
                list(sample.tokens),
                [float(v) for v in np.asarray(sample.logprobs) + shift],
                sample.text,
                sample.reward,
                ADVANTAGES[index % len(ADVANTAGES)],
            )
            index += 1
            datums.append(build_grpo_datum(prompt, shifted))
            first.append(len(prompt) - 1)
    config = (
        {"clip_low_threshold": clip_low, "clip_high_threshold": clip_high}
        if loss_fn == "ppo"
        else None
    )
    output = training_client.forward(datums, loss_fn, config).result()
    width = max(d.model_input.length for d in datums) + 2  # every row has padding
    rows = len(datums)
    logprobs = torch.full((rows, width), PAD_LOGPROB)
    old = torch.full((rows, width), PAD_OLD)
    adv = torch.zeros((rows, width))
    mask = torch.zeros((rows, width), dtype=torch.bool)
    for i, (d, out, start) in enumerate(
        zip(datums, output.loss_fn_outputs, first, strict=True)
    ):
        n = d.model_input.length
        logprobs[i, :n] = torch.tensor(out["logprobs"].tolist())
        old[i, :n] = torch.tensor(d.loss_fn_inputs["logprobs"].tolist())
        adv[i, :] = ADVANTAGES[i % len(ADVANTAGES)]
        mask[i, start:n] = True
    return LossCase(
        logprobs,
        old,
        adv,
        mask,
        float(output.metrics["loss_sum"]),
        loss_fn,
        clip_low,
        clip_high,
        datums,
    )


def _loss_hint(case: LossCase, value: float) -> str:
    """What differs between the learner's loss value and the engine's."""
    import torch

    want = case.loss_sum
    tol = 1e-3 + 1e-4 * abs(want)
    if abs(value - want) <= tol:
        return ""
    if abs(value + want) <= tol:
        return "the sign is flipped: the engine *minimises* this loss"
    lp = case.logprobs
    everywhere = torch.ones_like(case.mask)
    if abs(value - float(case.engine_loss(lp, everywhere))) <= tol:
        return "positions where mask is False count in your loss (prompt, padding)"
    if case.loss_fn == "ppo":
        ratio = torch.exp(lp - case.old_logprobs)
        adv = case.advantages
        clipped = ratio.clamp(case.clip_low, case.clip_high) * adv
        masked = case.mask
        if abs(value + float(torch.maximum(ratio * adv, clipped)[masked].sum())) <= tol:
            return "the clip acts on the wrong side of the ratio"
        eps = 1 - case.clip_low
        same = ratio.clamp(1 - eps, 1 + eps) * adv
        symmetric = -torch.minimum(ratio * adv, same)[masked].sum()
        if abs(value - float(symmetric)) <= tol:
            return "the upper bound is not clip_high (the two bounds differ here)"
        if abs(value + float(clipped[masked].sum())) <= tol:
            return (
                "your loss clips every ratio outside the bounds, on both sides of "
                "each advantage's push"
            )
        if abs(value + float((ratio * adv)[masked].sum())) <= tol:
            return "your loss never clips the ratio"
    return "the loss differs from the engine's loss_sum on the same Datums"


def loss_check(
    exercise: str,
    loss: Callable[..., Any],
    training_client: Any,
    groups: Sequence[tuple[Sequence[int], Sequence[RolloutSample]]],
    loss_fn: str = "importance_sampling",
    clip_low: float = 0.8,
    clip_high: float = 1.2,
    seed: int = 0,
    strict: bool | None = None,
) -> bool:
    """Check a learner's per-token loss against the engine's, value and gradient.

    The learner's ``loss(logprobs, old_logprobs, advantages, mask)`` (for ``ppo``
    also ``clip_low, clip_high``) gets the padded tensors of :func:`loss_case` and
    must return the loss as a scalar tensor: equal to the engine's ``loss_sum`` on
    the same Datums (within 1e-3 + 1e-4 of it), and with the same gradient with
    respect to ``logprobs`` as the engine's loss function (within 1e-5).

    Returns:
        True when both agree.
    """

    def check() -> str:
        import torch

        case = loss_case(training_client, groups, loss_fn, clip_low, clip_high, seed)
        args = case.args()
        got = loss(*args)
        if got is None:
            return STUB_HINT
        if not torch.is_tensor(got) or got.numel() != 1:
            return "return the loss as a torch tensor with one number (the sum)"
        hint = _loss_hint(case, float(got.detach()))
        if hint:
            return hint
        if not got.requires_grad:
            return "your loss carries no gradient: compute it from logprobs in torch"
        (grad,) = torch.autograd.grad(got.reshape(()), args[0], allow_unused=True)
        reference = case.logprobs.clone().requires_grad_(True)
        (want,) = torch.autograd.grad(case.engine_loss(reference), reference)
        if grad is None or not torch.allclose(grad, want, atol=1e-5, rtol=0):
            return (
                "the value matches the engine's but the gradient does not: is part "
                "of the loss detached from logprobs?"
            )
        return ""

    return run_check(exercise, check, strict)


# ----------------------------------------------------------------------------------
# One GRPO step
# ----------------------------------------------------------------------------------


class _Recorder:
    """A training client that records the calls it receives, then makes them."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[tuple[str, Any, Any]] = []

    def forward_backward(
        self,
        data: list[Any],
        loss_fn: str = "cross_entropy",
        loss_fn_config: Any = None,
        **kwargs: Any,
    ) -> Any:
        self.calls.append(("forward_backward", list(data), loss_fn))
        return self._inner.forward_backward(data, loss_fn, loss_fn_config, **kwargs)

    def optim_step(self, adam_params: Any) -> Any:
        self.calls.append(("optim_step", adam_params, None))
        return self._inner.optim_step(adam_params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


#: The rewards :func:`grpo_step_check` gives a group of ``n`` completions.
def _check_rewards(n: int) -> list[list[float]]:
    mixed = [[1.0, 0.0, 0.5, 0.0][i % 4] for i in range(n)]
    flat = [0.5] * n  # degenerate: the loop skips it
    one = [1.0 if i == n - 1 else 0.0 for i in range(n)]
    return [mixed, flat, one]


def _same_datum(got: Any, want: Any) -> str:
    """ "" or what differs between a learner's Datum and the loop's."""
    try:
        inputs = got.model_input.to_ints()
        fields = {k: list(got.loss_fn_inputs[k].tolist()) for k in want.loss_fn_inputs}
    except (AttributeError, KeyError, TypeError):
        return "a Datum is not a pytrio.Datum with target_tokens, logprobs, advantages"
    if inputs != want.model_input.to_ints() or fields["target_tokens"] != list(
        want.loss_fn_inputs["target_tokens"].tolist()
    ):
        return "a Datum's model_input or target_tokens is misaligned (notebook 04)"
    old = np.asarray(want.loss_fn_inputs["logprobs"].tolist())
    if not np.allclose(fields["logprobs"], old, atol=1e-6):
        return "a Datum's logprobs are not the sampler's, at the right positions"
    adv = np.asarray(want.loss_fn_inputs["advantages"].tolist())
    got_adv = np.asarray(fields["advantages"], dtype=float)
    if np.allclose(got_adv, adv, atol=1e-6):
        return ""
    if np.allclose(got_adv, -adv, atol=1e-6):
        return "the advantages have the wrong sign"
    return "the advantages differ from the loop's (notebook 03)"


def _in_order(datums: Sequence[Any]) -> list[Any]:
    """Datums sorted by their tokens and advantages (a learner may build the
    step's Datums in another order than the loop)."""

    def key(d: Any) -> tuple:
        try:
            advantages = d.loss_fn_inputs["advantages"].tolist()
            return (d.model_input.to_ints(), [round(float(a), 6) for a in advantages])
        except (AttributeError, KeyError, TypeError):
            return ([], [])

    return sorted(datums, key=key)


def grpo_step_check(
    exercise: str,
    step: Callable[..., Any],
    training_client: Any,
    prompt_tokens: Sequence[int],
    response: Any,
    adam_params: Any,
    strict: bool | None = None,
) -> bool:
    """Check a learner's ``step(training_client, prompts, responses, rewards,
    adam_params)`` against the loop's Datums and the engine.

    The check makes three groups from one sampled ``response`` (one prompt's
    completions) with rewards of its own: mixed, degenerate, and one right answer.
    Called first with only the degenerate group, the step must send nothing and
    return None; then with all three it must send exactly the loop's Datums
    (``step_math.build_step_datums`` of the same samples and advantages) with
    ``forward_backward(..., "importance_sampling")``: in one call, or in several
    (one per group, say: gradients add up until ``optim_step``, so the update is
    the same), then one ``optim_step`` with ``adam_params``, and return both
    results (the forward_backward output, or the list of them, first).
    """

    def check() -> str:
        from grpo_helpers import advantages, step_math

        n = len(response.sequences)
        rewards = _check_rewards(n)
        flat = _Recorder(training_client)
        if step(flat, [list(prompt_tokens)], [response], [rewards[1]], adam_params):
            return "a step whose groups are all degenerate must return None"
        if flat.calls:
            return "a step whose groups are all degenerate must send nothing"
        recorder = _Recorder(training_client)
        prompts = [list(prompt_tokens)] * 3
        result = step(recorder, prompts, [response] * 3, rewards, adam_params)
        names = [name for name, _, _ in recorder.calls]
        if result is None and not names:
            return STUB_HINT
        backward = names[:-1]
        if not backward or names[-1] != "optim_step" or "optim_step" in backward:
            return (
                "the engine got the calls "
                f"{', '.join(names) or 'none'}: forward_backward (once, or once per "
                "group), then one optim_step"
            )
        sent = [d for _, data, _ in recorder.calls[:-1] for d in data]
        loss_fns = {loss_fn for _, _, loss_fn in recorder.calls[:-1]}
        if loss_fns != {"importance_sampling"}:
            other = sorted(loss_fns - {"importance_sampling"}, key=str)[0]
            return f"forward_backward got loss_fn={other!r}"
        if recorder.calls[-1][1] is not adam_params:
            return "optim_step did not get adam_params"
        groups = []
        for prompt, group_rewards in zip(prompts, rewards, strict=True):
            adv = advantages.group_advantages(group_rewards)
            samples = [
                RolloutSample(list(seq.tokens), list(seq.logprobs), "", r, a)
                for seq, r, a in zip(
                    response.sequences, group_rewards, adv, strict=True
                )
            ]
            groups.append(step_math.PromptGroup(0, prompt, "", samples))
        want = step_math.build_step_datums(groups)
        if len(sent) != len(want):
            return (
                f"{len(sent)} Datums sent where the loop sends {len(want)}: a "
                "degenerate group trained, or completions left out?"
            )
        hints = [_same_datum(g, w) for g, w in zip(sent, want, strict=True)]
        if any(hints) and not any(
            _same_datum(g, w)
            for g, w in zip(_in_order(sent), _in_order(want), strict=True)
        ):
            hints = []  # the same Datums, in another order: the loss is a sum
        hint = next((h for h in hints if h), "")
        if hint:
            return hint
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            return "return (forward_backward's output, optim_step's output)"
        first, last = result
        outputs = list(first) if isinstance(first, (tuple, list)) else [first]
        kinds = [type(x).__name__ for x in (*outputs, last)]
        if set(kinds[:-1]) != {"ForwardBackwardOutput"} or kinds[-1] != (
            "OptimStepResponse"
        ):
            return f"returned {', '.join(kinds)}: wait for each future's result"
        return ""

    return run_check(exercise, check, strict)


# ----------------------------------------------------------------------------------
# Requests in flight (notebook 06)
# ----------------------------------------------------------------------------------


class _InFlight:
    """Counts requests submitted and not yet waited for."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.events: list[tuple[str, str]] = []

    def submit(self, name: str) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        self.events.append(("submit", name))

    def collect(self, name: str) -> None:
        self.now -= 1
        self.events.append(("wait", name))


class _CountedFuture:
    """An APIFuture whose first ``result()`` / ``await`` counts as collected."""

    def __init__(self, inner: Any, counter: _InFlight, name: str, on_value=None):
        self._inner, self._counter, self._name = inner, counter, name
        self._collected = False
        self._on_value = on_value

    def _collect(self, value: Any) -> Any:
        if not self._collected:
            self._collected = True
            self._counter.collect(self._name)
            if self._on_value is not None:
                self._on_value(value)
        return value

    def result(self, timeout: float | None = None) -> Any:
        return self._collect(self._inner.result(timeout))

    def __await__(self):  # noqa: ANN204 - a generator
        value = yield from self._inner.__await__()
        return self._collect(value)

    def done(self) -> bool:
        return self._inner.done()


class _CountingSampler:
    """A sampling client that records each ``sample`` and counts those in flight."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.counter = _InFlight()
        self.submitted: list[tuple[list[int], int, Any]] = []
        self.origin: dict[int, int] = {}  # id(response) -> submission index

    def sample(self, prompt: Any, num_samples: int = 1, sampling_params=None, **kw):  # noqa: ANN001, ANN201
        index = len(self.submitted)
        self.submitted.append((list(prompt.to_ints()), num_samples, sampling_params))
        future = self._inner.sample(
            prompt=prompt,
            num_samples=num_samples,
            sampling_params=sampling_params,
            **kw,
        )
        self.counter.submit(f"sample {index}")

        def remember(value: Any) -> None:
            self.origin[id(value)] = index

        return _CountedFuture(future, self.counter, f"sample {index}", remember)

    async def sample_async(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("this exercise asks for sync calls only (sample)")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def submitted_first_check(
    exercise: str,
    sample_all: Callable[..., Any],
    sampling_client: Any,
    prompt_tokens_list: Sequence[Sequence[int]],
    params_list: Sequence[Any],
    group_size: int,
    strict: bool | None = None,
) -> bool:
    """Check ``sample_all(sampling_client, prompt_tokens_list, params_list,
    group_size)``: every prompt sampled with its own params and ``group_size``
    completions, the responses returned in prompt order, and every request in
    flight before the first wait (counted by the client it gets)."""

    def check() -> str:
        client = _CountingSampler(sampling_client)
        result = sample_all(
            client, [list(t) for t in prompt_tokens_list], list(params_list), group_size
        )
        if result is None:
            return STUB_HINT
        result = list(result)
        if len(result) != len(prompt_tokens_list):
            count = len(prompt_tokens_list)
            return f"returned {len(result)} responses for {count} prompts"
        if any(n != group_size for _, n, _ in client.submitted):
            return "a request asked for another number of completions than group_size"
        for i, (tokens, params) in enumerate(
            zip(prompt_tokens_list, params_list, strict=True)
        ):
            mine = [
                j
                for j, (sent, _, p) in enumerate(client.submitted)
                if sent == list(tokens) and p == params
            ]
            if not mine:
                return f"prompt {i + 1} was not sampled with its own sampling params"
            if client.origin.get(id(result[i])) not in mine:
                return "the responses are not in prompt order"
        if client.counter.most < len(prompt_tokens_list):
            return (
                f"at most {client.counter.most} request(s) were in flight at once: "
                "a wait came before the last request was submitted"
            )
        return ""

    return run_check(exercise, check, strict)


class _CountingTrainer:
    """A training client whose ``*_async`` calls are recorded and counted."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.counter = _InFlight()
        self.calls: list[tuple[str, Any, Any]] = []

    async def forward_backward_async(
        self, data: list[Any], loss_fn: str = "cross_entropy", **kwargs: Any
    ) -> Any:
        self.calls.append(("forward_backward", data, loss_fn))
        future = await self._inner.forward_backward_async(data, loss_fn, **kwargs)
        self.counter.submit("forward_backward")
        return _CountedFuture(future, self.counter, "forward_backward")

    async def optim_step_async(self, adam_params: Any) -> Any:
        self.calls.append(("optim_step", adam_params, None))
        future = await self._inner.optim_step_async(adam_params)
        self.counter.submit("optim_step")
        return _CountedFuture(future, self.counter, "optim_step")

    def forward_backward(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("this exercise asks for the async calls")

    def optim_step(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("this exercise asks for the async calls")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def two_await_check(
    exercise: str,
    train_step: Callable[..., Any],
    training_client: Any,
    datums: Sequence[Any],
    adam_params: Any,
    strict: bool | None = None,
) -> bool:
    """Check the coroutine ``train_step(training_client, datums, adam_params)``:
    ``forward_backward_async`` (``importance_sampling``, these Datums) and then
    ``optim_step_async`` (these params) both submitted before either result is
    awaited, and both results returned. Await it: ``await two_await_check(...)``."""
    hint = ""
    try:
        with time_limit(SETTINGS.check_seconds):
            client = _CountingTrainer(training_client)
            result = train_step(client, list(datums), adam_params)
            if inspect.isawaitable(result):
                result = await result
            hint = _two_await_hint(client, result, datums, adam_params)
    except TimeLimitExceeded as error:
        hint = str(error)
    except Exception as error:  # the learner's bug: say so, keep the notebook going
        hint = f"raised {type(error).__name__}: {error}"
    return _report(exercise, not hint, hint, strict)


def _two_await_hint(
    client: _CountingTrainer, result: Any, datums: Sequence[Any], adam: Any
) -> str:
    names = [name for name, _, _ in client.calls]
    if result is None and not names:
        return STUB_HINT
    if names != ["forward_backward", "optim_step"]:
        return (
            f"the engine got {', '.join(names) or 'nothing'}: forward_backward first, "
            "then optim_step (it steps on the gradient forward_backward leaves)"
        )
    _, sent, loss_fn = client.calls[0]
    if loss_fn != "importance_sampling":
        return f"forward_backward got loss_fn={loss_fn!r}"
    if list(sent) != list(datums):
        return "forward_backward did not get the datums"
    if client.calls[1][1] is not adam:
        return "optim_step did not get adam_params"
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        return "return (forward_backward's output, optim_step's output)"
    kinds = [type(x).__name__ for x in result]
    if kinds != ["ForwardBackwardOutput", "OptimStepResponse"]:
        return f"returned {', '.join(kinds)}: one await too few?"
    if client.counter.most < 2:
        return (
            "forward_backward's result was awaited before optim_step was submitted: "
            "only one request was in flight at a time"
        )
    return ""
