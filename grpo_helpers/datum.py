"""Datums: one sampled completion, laid out for PyTRIO's ``importance_sampling`` loss.

A language model predicts token ``t+1`` from tokens ``0..t``. So for a prompt of ``P``
tokens followed by a completion of ``C`` tokens, the model reads
``prompt + completion[:-1]`` (``P + C - 1`` tokens) and at position ``i`` is asked
for token ``i + 1``. The first ``P - 1`` positions predict prompt tokens: they are not
trained, so their target, old logprob and advantage are padded with zeros. From
position ``P - 1`` (the last prompt token) on, each position predicts one completion
token, and carries the sampler's logprob of that token and the completion's advantage:

    position       0 .. P-2          P-1 .. P+C-2
    model_input    prompt[0..P-2]    prompt[P-1], completion[0..C-2]
    target_tokens  0 ...             completion[0..C-1]
    logprobs       0.0 ...           sampled logprobs
    advantages     0.0 ...           advantage (one value, repeated C times)

PyTRIO does no shifting for us (``auto_shift=False``), and every field must have the
length of ``model_input``.

A completion sampled with a tool (:mod:`grpo_helpers.tool_rollout`: GSM8K's
calculator) comes in :class:`Turn` s, the policy's and the tool's;
:func:`build_multiturn_datum` lays it out the same way, the tool's tokens in the
model input and out of the loss.

Introduced in: 04_datum_alignment.ipynb (a tool's turns: 12, to be written)
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pytrio as trio

__all__ = [
    "IGNORED_TARGET",
    "POLICY",
    "TOOL",
    "RolloutSample",
    "Turn",
    "alignment_table",
    "build_grpo_datum",
    "build_multiturn_datum",
]

#: Who wrote a turn of a completion: the policy (sampled: trained on) or a tool
#: (its tokens are in the model input, never in the loss or a ratio).
POLICY = "policy"
TOOL = "tool"
#: The target of a position that no loss reads: PyTRIO leaves ``-100`` out of the
#: loss, out of ``token_count`` (``loss_mean``'s denominator), and returns logprob 0
#: there.
IGNORED_TARGET = -100


@dataclass
class RolloutSample:
    """One sampled completion with everything GRPO needs to train on it.

    Attributes:
        tokens: completion token ids (the prompt excluded), length ``C``.
        logprobs: the sampler's logprob of each completion token, length ``C``
            (the "old" policy of importance sampling).
        text: the decoded completion, which the reward function reads.
        reward: the completion's reward.
        advantage: reward minus the group mean (optionally std-scaled).
        truncated: ``max_tokens`` cut the completion off before it ended (the
            sampler's ``stop_reason == "length"``); ``GRPOConfig.mask_truncated``
            leaves such completions out of the loss (notebook 05).

    Introduced in: 04_datum_alignment.ipynb
    """

    tokens: list[int]
    logprobs: list[float]
    text: str
    reward: float
    advantage: float
    truncated: bool = False


def _check_finite(name: str, value: float) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"The sample's {name} is {number}; it must be finite")
    return number


def _checked_parts(
    prompt_tokens: Sequence[int], sample: RolloutSample
) -> tuple[list[int], list[int], list[float], float]:
    """Validated copies of (prompt tokens, completion tokens, logprobs, advantage)."""
    prompt = [operator.index(token) for token in prompt_tokens]
    completion = [operator.index(token) for token in sample.tokens]
    if not prompt:
        raise ValueError("Cannot build a datum from an empty prompt (no tokens)")
    if not completion:
        raise ValueError("Cannot train on an empty completion (no tokens)")
    negative = [token for token in prompt + completion if token < 0]
    if negative:
        raise ValueError(f"Token ids must be >= 0; found {negative[0]}")
    logprobs = [float(value) for value in sample.logprobs]
    if len(logprobs) != len(completion):
        raise ValueError(
            "Completion token/logprob length mismatch: "
            f"{len(completion)} tokens but {len(logprobs)} logprobs"
        )
    for index, value in enumerate(logprobs):
        if not math.isfinite(value):
            raise ValueError(
                f"Logprob {index} of the completion is {value}; logprobs must be finite"
            )
    _check_finite("reward", sample.reward)
    advantage = _check_finite("advantage", sample.advantage)
    return prompt, completion, logprobs, advantage


def build_grpo_datum(
    prompt_tokens: Sequence[int],
    sample: RolloutSample,
    token_advantages: Sequence[float] | None = None,
) -> trio.Datum:
    """Turn one completion into a ``pytrio.Datum`` for the importance_sampling loss.

    Args:
        prompt_tokens: the prompt's token ids (``P >= 1`` of them).
        sample: the completion (``C >= 1`` tokens) with its logprobs and advantage.
        token_advantages: optional, one advantage per completion token (``C``
            values) instead of ``sample.advantage`` repeated: what a length
            normalisation or a KL penalty produces (notebook 09).

    Returns:
        A Datum whose ``model_input`` is ``prompt + completion[:-1]`` (length
        ``L = P + C - 1``) and whose ``loss_fn_inputs`` hold ``target_tokens``
        (int64), ``logprobs`` and ``advantages`` (float32), each of shape ``[L]``,
        zero on the first ``P - 1`` positions.

    Raises:
        ValueError: empty prompt or completion, negative token id, token/logprob
            length mismatch, or a non-finite logprob, reward or advantage.

    Introduced in: 04_datum_alignment.ipynb

    Example:
        >>> sample = RolloutSample([7, 8], [-0.5, -1.0], "hi", 1.0, 0.5)
        >>> datum = build_grpo_datum([1, 2, 3], sample)
        >>> datum.model_input.to_ints()
        [1, 2, 3, 7]
        >>> datum.loss_fn_inputs["target_tokens"].tolist()
        [0, 0, 7, 8]
        >>> datum.loss_fn_inputs["advantages"].tolist()
        [0.0, 0.0, 0.5, 0.5]
    """
    prompt, completion, logprobs, advantage = _checked_parts(prompt_tokens, sample)
    per_token = [advantage] * len(completion)
    if token_advantages is not None:
        per_token = [float(a) for a in token_advantages]
        if len(per_token) != len(completion):
            raise ValueError(
                f"{len(per_token)} token advantages for a completion of "
                f"{len(completion)} tokens"
            )
        for index, value in enumerate(per_token):
            _check_finite(f"token advantage {index}", value)
    observation_len = len(prompt) - 1
    input_tokens = prompt + completion[:-1]
    target_tokens = [0] * observation_len + completion
    padded_logprobs = [0.0] * observation_len + logprobs
    padded_advantages = [0.0] * observation_len + per_token
    return trio.Datum(
        model_input=trio.ModelInput.from_ints(input_tokens),
        loss_fn_inputs={
            "target_tokens": np.asarray(target_tokens, dtype=np.int64),
            "logprobs": np.asarray(padded_logprobs, dtype=np.float32),
            "advantages": np.asarray(padded_advantages, dtype=np.float32),
        },
    )


class Turn(NamedTuple):
    """One turn of a completion sampled with a tool.

    Attributes:
        tokens: the turn's token ids (at least one).
        logprobs: the sampler's logprob of each token of a policy turn; None for
            a tool's turn (no policy drew those tokens).
        whose: :data:`POLICY` or :data:`TOOL`.

    Introduced in: 12 (GRPO with a tool; the notebook is still to be written)
    """

    tokens: list[int]
    logprobs: list[float] | None
    whose: str


def _checked_turns(
    turns: Sequence[Turn],
) -> tuple[list[int], list[float], list[bool]]:
    """The completion's tokens, a logprob per token (0.0 on a tool's) and whether
    the policy wrote each, from validated turns."""
    tokens: list[int] = []
    logprobs: list[float] = []
    policy: list[bool] = []
    for index, turn in enumerate(turns):
        ids = [operator.index(token) for token in turn.tokens]
        if not ids:
            raise ValueError(f"Turn {index} has no tokens")
        if turn.whose == POLICY:
            if turn.logprobs is None or len(turn.logprobs) != len(ids):
                count = None if turn.logprobs is None else len(turn.logprobs)
                raise ValueError(
                    f"Turn {index} (policy): {len(ids)} tokens but {count} logprobs"
                )
            values = [
                _check_finite(f"logprob of turn {index}", v) for v in turn.logprobs
            ]
        elif turn.whose == TOOL:
            if turn.logprobs is not None:
                raise ValueError(
                    f"Turn {index} is the tool's: it has no sampler logprobs (None)"
                )
            values = [0.0] * len(ids)
        else:
            raise ValueError(f"Turn {index}: whose is {turn.whose!r}, not policy/tool")
        tokens += ids
        logprobs += values
        policy += [turn.whose == POLICY] * len(ids)
    if not any(policy):
        raise ValueError("Cannot train on a completion with no policy token")
    return tokens, logprobs, policy


def build_multiturn_datum(
    prompt_tokens: Sequence[int], turns: Sequence[Turn], advantage: float
) -> trio.Datum:
    """A completion of policy and tool turns as one ``pytrio.Datum``.

    The model reads ``prompt + completion[:-1]``, the completion being every turn's
    tokens in order, exactly as :func:`build_grpo_datum` lays out a one-turn
    completion: the policy's tokens after a tool's turn are predicted from the
    tool's text, as when they were sampled. Only the policy's tokens are trained::

        position       0 .. P-2          P-1 .. P+C-2
        model_input    prompt[0..P-2]    prompt[P-1], completion[0..C-2]
        target_tokens  0 ...             the policy's token | -100 on a tool's
        logprobs       0.0 ...           the sampled logprob | 0.0 on a tool's
        advantages     0.0 ...           advantage | 0.0 on a tool's

    A tool's token has target :data:`IGNORED_TARGET` (``-100``), the one per-token
    mask of PyTRIO's policy losses (their ``weights`` key is read by
    ``cross_entropy`` only): the position leaves the loss, the ``token_count``
    that ``loss_mean`` divides by, and the learner's logprobs (0 there), so no
    ratio, KL or mismatch metric can read it (:func:`step_math.completion_positions
    <grpo_helpers.step_math.completion_positions>` skips it). Advantage 0 alone
    would zero its gradient but still count it, with a ratio against a made-up
    sampler logprob.

    Args:
        prompt_tokens: the prompt's token ids (``P >= 1``).
        turns: the completion's turns (:class:`Turn`), at least one of the policy.
        advantage: the completion's advantage, given to each policy token.

    Returns:
        A Datum of length ``L = P + C - 1``; with one policy turn, exactly
        :func:`build_grpo_datum`'s.

    Raises:
        ValueError: an empty prompt or turn, no policy token, a policy turn whose
            logprobs do not match its tokens, a tool turn with logprobs, an
            unknown ``whose``, a negative token id, a non-finite value.

    Example: the policy wrote ``[7, 8]``, the calculator ``[9]``, the policy ``[5]``.

        >>> turns = [Turn([7, 8], [-0.5, -1.0], POLICY), Turn([9], None, TOOL),
        ...          Turn([5], [-0.25], POLICY)]
        >>> datum = build_multiturn_datum([1, 2], turns, 0.5)
        >>> datum.model_input.to_ints()
        [1, 2, 7, 8, 9]
        >>> datum.loss_fn_inputs["target_tokens"].tolist()
        [0, 7, 8, -100, 5]
        >>> datum.loss_fn_inputs["advantages"].tolist()
        [0.0, 0.5, 0.5, 0.0, 0.5]
    """
    prompt = [operator.index(token) for token in prompt_tokens]
    if not prompt:
        raise ValueError("Cannot build a datum from an empty prompt (no tokens)")
    completion, logprobs, policy = _checked_turns(turns)
    negative = [token for token in prompt + completion if token < 0]
    if negative:
        raise ValueError(f"Token ids must be >= 0; found {negative[0]}")
    advantage = _check_finite("advantage", advantage)
    pad = len(prompt) - 1
    targets = [
        t if p else IGNORED_TARGET for t, p in zip(completion, policy, strict=True)
    ]
    return trio.Datum(
        model_input=trio.ModelInput.from_ints(prompt + completion[:-1]),
        loss_fn_inputs={
            "target_tokens": np.asarray([0] * pad + targets, dtype=np.int64),
            "logprobs": np.asarray([0.0] * pad + logprobs, dtype=np.float32),
            "advantages": np.asarray(
                [0.0] * pad + [advantage if p else 0.0 for p in policy],
                dtype=np.float32,
            ),
        },
    )


def _decode(tokenizer: Any, token: int) -> str:
    return tokenizer.decode([token])


def alignment_table(
    prompt_tokens: Sequence[int], sample: RolloutSample, tokenizer: Any = None
) -> pd.DataFrame:
    """The Datum of :func:`build_grpo_datum`, one row per position, for reading.

    The table is built from the Datum itself, so what it shows is what is trained.

    Args:
        prompt_tokens: the prompt's token ids.
        sample: the completion with its logprobs and advantage.
        tokenizer: optional; anything with ``decode(list[int]) -> str`` fills the
            text columns.

    Returns:
        A DataFrame with ``L = P + C - 1`` rows and columns ``position``,
        ``input_token`` (id the model reads), ``input_text``, ``target_token`` (id it
        is trained to predict; 0 = padding), ``target_text`` (empty on padding),
        ``old_logprob``, ``advantage`` and ``trained`` (True from position ``P - 1``
        on). The text columns hold None without a tokenizer.

    Introduced in: 04_datum_alignment.ipynb

    Example:
        >>> sample = RolloutSample([7, 8], [-0.5, -1.0], "hi", 1.0, 0.5)
        >>> table = alignment_table([1, 2, 3], sample)
        >>> table["trained"].tolist()
        [False, False, True, True]
        >>> table["target_token"].tolist()
        [0, 0, 7, 8]
    """
    datum = build_grpo_datum(prompt_tokens, sample)
    inputs = datum.model_input.to_ints()
    targets = [int(t) for t in datum.loss_fn_inputs["target_tokens"].tolist()]
    logprobs = [float(x) for x in datum.loss_fn_inputs["logprobs"].tolist()]
    advantages = [float(x) for x in datum.loss_fn_inputs["advantages"].tolist()]
    first_trained = len(prompt_tokens) - 1
    trained = [position >= first_trained for position in range(len(inputs))]
    if tokenizer is None:
        input_text: list[str | None] = [None] * len(inputs)
        target_text: list[str | None] = [None] * len(inputs)
    else:
        input_text = [_decode(tokenizer, token) for token in inputs]
        target_text = [
            _decode(tokenizer, token) if is_trained else ""
            for token, is_trained in zip(targets, trained, strict=True)
        ]
    return pd.DataFrame(
        {
            "position": range(len(inputs)),
            "input_token": inputs,
            "input_text": input_text,
            "target_token": targets,
            "target_text": target_text,
            "old_logprob": logprobs,
            "advantage": advantages,
            "trained": trained,
        }
    )
