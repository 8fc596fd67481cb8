"""Rollouts: one group of completions for one prompt, from any SamplingClient.

A *rollout group* is what GRPO learns from: the sampler answers the same prompt
``group_size`` times, each completion is graded by a reward function, and each reward
is compared with the group mean to give an advantage. The same functions work with
PyTRIO's SamplingClient and with the local engine's, because both speak one API:

* sync: ``sampling_client.sample(...)`` returns a future; ``.result()`` waits for it;
* async: ``await sampling_client.sample_async(...)`` returns the response at once.

Introduced in: 05_sync_training_loop.ipynb (sync) and 06_async_training_loop.ipynb
(async).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytrio as trio

from grpo_helpers.advantages import group_advantages
from grpo_helpers.datum import RolloutSample
from grpo_helpers.prompts import get_stop_sequences
from grpo_helpers.rewards import grade_answer

RewardFn = Callable[[str, str], float]


def make_sampling_params(
    tokenizer: Any,
    max_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int | None = None,
) -> trio.SamplingParams:
    """The sampling settings of the demo scripts: stop at the end of the turn.

    Args:
        tokenizer: the model's tokenizer (its eos token becomes a stop string).
        max_tokens: most tokens one completion may have; must be >= 1.
        temperature: 1.0 samples from the model's own distribution, 0 is greedy.
        top_p: nucleus sampling threshold (1.0 keeps every token).
        seed: makes sampling repeatable on engines that honour it.

    Returns:
        ``pytrio.SamplingParams`` with ``stop`` set to the chat template's end tokens.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    return trio.SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        stop=get_stop_sequences(tokenizer),
    )


def samples_from_response(
    response: Any,
    tokenizer: Any,
    ground_truth: str,
    reward_fn: RewardFn = grade_answer,
    advantage_scale: str = "none",
) -> list[RolloutSample]:
    """Grade the completions of one SampleResponse and give each its advantage.

    Args:
        response: a ``SampleResponse``; each of its ``sequences`` has completion
            ``tokens``, per-token ``logprobs`` and (usually) ``text``.
        tokenizer: decodes ``tokens`` when an engine returned no ``text``.
        ground_truth: the gold answer (the text after ``####``).
        reward_fn: ``reward_fn(completion_text, ground_truth) -> float``.
        advantage_scale: ``"none"`` (reward - group mean) or ``"group"`` (also
            divided by the group's standard deviation).

    Returns:
        One ``RolloutSample`` per completion, in the order the engine returned them;
        ``truncated`` is True where the sampler stopped at ``max_tokens``
        (``stop_reason == "length"``).
    """
    raw: list[tuple[list[int], list[float], str, bool]] = []
    rewards: list[float] = []
    for i, sequence in enumerate(response.sequences):
        tokens = [int(t) for t in sequence.tokens]
        logprobs = [float(v) for v in sequence.logprobs]
        if len(tokens) != len(logprobs):
            raise ValueError(
                f"Completion {i}: generated token/logprob length mismatch: "
                f"{len(tokens)} tokens != {len(logprobs)} logprobs. The sampler must "
                "return one logprob per completion token."
            )
        text = sequence.text
        if text is None:
            text = tokenizer.decode(tokens, skip_special_tokens=True)
        rewards.append(float(reward_fn(text, ground_truth)))
        truncated = getattr(sequence, "stop_reason", None) == "length"
        raw.append((tokens, logprobs, text, truncated))
    if not raw:
        raise ValueError("The sampler returned no completions for this prompt.")
    advantages = group_advantages(rewards, scale=advantage_scale)
    return [
        RolloutSample(tokens, logprobs, text, reward, adv, truncated)
        for (tokens, logprobs, text, truncated), reward, adv in zip(
            raw, rewards, advantages, strict=True
        )
    ]


def run_rollout_group(
    sampling_client: Any,
    tokenizer: Any,
    prompt_tokens: list[int],
    ground_truth: str,
    sampling_params: trio.SamplingParams,
    group_size: int,
    reward_fn: RewardFn = grade_answer,
    advantage_scale: str = "none",
) -> list[RolloutSample]:
    """Sample ``group_size`` completions of one prompt and wait for them (sync).

    ``sample`` returns a future; ``.result()`` right away is the sync loop's explicit
    wait. Returns the group's ``RolloutSample``s with rewards and advantages.

    Example, on the local engine's tiny random model (its answers are noise):

    >>> from grpo_helpers import prompts
    >>> from grpo_helpers.engines import connect
    >>> sampler = connect("local").create_sampling_client(base_model="tiny-random")
    >>> tokenizer = sampler.get_tokenizer()
    >>> tokens = list(prompts.build_prompt(tokenizer, "What is 2 + 3?"))
    >>> params = make_sampling_params(tokenizer, max_tokens=8, seed=0)
    >>> group = run_rollout_group(sampler, tokenizer, tokens, "5", params, 4)
    >>> len(group), all(len(s.tokens) == len(s.logprobs) <= 8 for s in group)
    (4, True)
    >>> abs(sum(s.advantage for s in group)) < 1e-9  # reward minus the group mean
    True
    """
    future = sampling_client.sample(
        prompt=trio.ModelInput.from_ints(prompt_tokens),
        num_samples=group_size,
        sampling_params=sampling_params,
        return_text=True,
    )
    return samples_from_response(
        future.result(), tokenizer, ground_truth, reward_fn, advantage_scale
    )


async def run_rollout_group_async(
    sampling_client: Any,
    tokenizer: Any,
    prompt_tokens: list[int],
    ground_truth: str,
    sampling_params: trio.SamplingParams,
    group_size: int,
    reward_fn: RewardFn = grade_answer,
    advantage_scale: str = "none",
) -> list[RolloutSample]:
    """The async twin of :func:`run_rollout_group`: one ``await`` gives the response.

    Many of these can run at once (``asyncio.gather``); the engine serves them
    together.
    """
    response = await sampling_client.sample_async(
        prompt=trio.ModelInput.from_ints(prompt_tokens),
        num_samples=group_size,
        sampling_params=sampling_params,
        return_text=True,
    )
    return samples_from_response(
        response, tokenizer, ground_truth, reward_fn, advantage_scale
    )
