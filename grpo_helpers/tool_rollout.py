"""Sampling with GSM8K's calculator: the policy writes, the calculator answers.

In GSM8K's paper (Cobbe et al. 2021) the model samples with a calculator: when it
writes ``=`` inside ``<<``, sampling stops, the calculator writes the result and
``>>``, and the model goes on. :func:`sample_with_calculator` does that through the
client API alone (any SamplingClient, PyTRIO's or the local engine's), one
``sample`` call at a time:

1. sample from the prompt and everything written so far, with the run's stop
   strings plus ``"="``, and ``max_tokens`` = the policy's tokens left;
2. keep the sampled tokens and logprobs as they are (a continuation joins the
   policy's turn it continues);
3. if the run's own stop ended the call, or ``max_tokens`` did, the completion is
   done. If ``"="`` did and the completion's text now ends in an open call
   ``<<expression=`` (:func:`open_call`), the calculator writes
   ``calculate(expression) + ">>"`` as a tool's turn; an ``=`` outside ``<<``
   (``x = 3``) gets no turn, and sampling simply goes on;
4. repeat.

The result is a :class:`ToolCompletion`: its turns alternate between the policy
(tokens and the sampler's logprobs) and the tool (tokens, no logprobs), ready for
:func:`grpo_helpers.datum.build_multiturn_datum`.

Choices, each a rule of the function:

* **Budgets.** ``max_tokens`` counts the policy's tokens only. The tool's are
  capped by ``max_tool_calls``: after the last call, ``=`` is no longer a stop and
  the policy writes its own results. A tool turn is a result of at most 23
  characters (:mod:`grpo_helpers.calculator`'s bounds) and ``>>``. When the
  policy stops at ``=`` with no token left, no tool turn follows: the completion
  was cut (``stop_reason == "length"``).
* **Token boundary.** The policy's tokens are exactly the sampled ones; the tool's
  are ``tokenizer.encode(result + ">>", add_special_tokens=False)``. Their
  concatenation may differ from the tokenizer's encoding of the whole text
  (``=`` then ``24`` rather than a merged piece): the Datum trains on the very
  sequence the sampler saw, so each policy logprob is that of its own context.
  The call is taken only when the text ends in ``=``: a sampled token that goes
  past it (``=-`` is one token of SmolLM2's) gets no tool turn.
* **Seeds.** With ``sampling_params.seed`` set, the ``k``-th call of a completion
  uses ``seed + k``: repeatable, and each call draws afresh.

Introduced in: 12 (GRPO with a tool; the notebook is still to be written)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytrio as trio

from grpo_helpers.calculator import calculate
from grpo_helpers.datum import POLICY, TOOL, Turn

__all__ = [
    "CALL_CLOSE",
    "CALL_EQUALS",
    "CALL_OPEN",
    "ToolCompletion",
    "open_call",
    "sample_with_calculator",
    "sample_with_calculator_async",
]

#: A calculator call is ``<<expression=``; the calculator closes it with ``>>``.
CALL_OPEN = "<<"
CALL_EQUALS = "="
CALL_CLOSE = ">>"


@dataclass
class ToolCompletion:
    """One completion sampled with the calculator.

    Attributes:
        turns: the policy's and the tool's turns, in order; they alternate.
        stop_reason: ``"stop"`` (the run's stop strings or the end of turn) or
            ``"length"`` (the policy's ``max_tokens`` ran out), as a
            ``SampleSequence``'s.
        text: every turn's text, decoded, cut before the run's first stop string
            (what a reward reads).
        sample_calls: how many ``sample`` calls it took.
    """

    turns: list[Turn]
    stop_reason: str
    text: str
    sample_calls: int

    @property
    def tokens(self) -> list[int]:
        """Every turn's tokens, in order (the completion the Datum trains on)."""
        return [token for turn in self.turns for token in turn.tokens]

    @property
    def policy_token_count(self) -> int:
        return sum(len(t.tokens) for t in self.turns if t.whose == POLICY)

    @property
    def tool_calls(self) -> int:
        return sum(t.whose == TOOL for t in self.turns)


def open_call(text: str) -> str | None:
    """The expression of the calculator call a text ends in, or None.

    A call is open when the text ends in ``=`` after its last ``<<``, with no
    ``>>`` and no other ``=`` in between.

    Example:
        >>> open_call("Half is <<48/2="), open_call("x =")
        ('48/2', None)
        >>> open_call("<<48/2=24>> so y ="), open_call("<<1=2="), open_call("<<2=-")
        (None, None, None)
    """
    start = text.rfind(CALL_OPEN)
    if start < 0 or not text.endswith(CALL_EQUALS):
        return None
    inside = text[start + len(CALL_OPEN) : -len(CALL_EQUALS)]
    if CALL_CLOSE in inside or CALL_EQUALS in inside:
        return None
    return inside


def _stop_strings(stop: Any) -> list[str]:
    """The run's stop strings (``SamplingParams.stop``); token ids are refused."""
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    items = list(stop)
    if not all(isinstance(item, str) for item in items):
        raise ValueError(
            "sample_with_calculator needs stop strings, not token ids: it adds "
            f"{CALL_EQUALS!r} to them (got {stop!r})"
        )
    return items


class _Calls:
    """The state of one completion between ``sample`` calls: what to ask next,
    and what a call's answer changes (the module's steps 1-3)."""

    def __init__(
        self,
        tokenizer: Any,
        prompt_tokens: Sequence[int],
        sampling_params: trio.SamplingParams,
        max_tool_calls: int,
    ) -> None:
        if max_tool_calls < 0:
            raise ValueError(f"max_tool_calls must be >= 0, got {max_tool_calls}")
        if not sampling_params.max_tokens or sampling_params.max_tokens < 1:
            raise ValueError("sampling_params.max_tokens must be >= 1")
        self.tokenizer = tokenizer
        self.prompt = [int(t) for t in prompt_tokens]
        self.params = sampling_params
        self.stops = _stop_strings(sampling_params.stop)
        self.max_tool_calls = max_tool_calls
        self.left = int(sampling_params.max_tokens)
        self.turns: list[Turn] = []
        self.sample_calls = 0
        self.stop_reason = "stop"

    def request(self) -> tuple[trio.ModelInput, trio.SamplingParams]:
        """The next call: the prompt and everything so far; the tokens left."""
        calls_left = sum(t.whose == TOOL for t in self.turns) < self.max_tool_calls
        seed = self.params.seed
        params = self.params.model_copy(
            update={
                "max_tokens": self.left,
                "stop": self.stops + ([CALL_EQUALS] if calls_left else []),
                "seed": None if seed is None else seed + self.sample_calls,
            }
        )
        tokens = self.prompt + [t for turn in self.turns for t in turn.tokens]
        return trio.ModelInput.from_ints(tokens), params

    def read(self, sequence: Any) -> bool:
        """Take one call's ``SampleSequence``; True when the completion is done."""
        self.sample_calls += 1
        tokens = [int(t) for t in sequence.tokens]
        logprobs = [float(v) for v in sequence.logprobs]
        if len(tokens) != len(logprobs):
            raise ValueError(
                f"The sampler returned {len(tokens)} tokens and {len(logprobs)} "
                "logprobs; it must return one logprob per token"
            )
        if not tokens:
            self.stop_reason = sequence.stop_reason or "stop"
            return True
        self._add(Turn(tokens, logprobs, POLICY))
        self.left -= len(tokens)
        said = self.tokenizer.decode(tokens, skip_special_tokens=False)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if tokens[-1] == eos or any(stop in said for stop in self.stops):
            self.stop_reason = "stop"
            return True
        if sequence.stop_reason != "stop" or self.left <= 0:
            self.stop_reason = "length"
            return True
        if CALL_EQUALS not in said:  # a stop of the engine's own
            self.stop_reason = "stop"
            return True
        expression = open_call(self._text())
        if expression is not None:
            result = calculate(expression) + CALL_CLOSE
            encoded = self.tokenizer.encode(result, add_special_tokens=False)
            self._add(Turn([int(t) for t in encoded], None, TOOL))
        return False

    def _add(self, turn: Turn) -> None:
        """Append a turn; a policy turn after a policy turn continues it."""
        last = self.turns[-1] if self.turns else None
        if last is not None and last.whose == POLICY and turn.whose == POLICY:
            assert last.logprobs is not None and turn.logprobs is not None
            turn = Turn(
                last.tokens + turn.tokens, last.logprobs + turn.logprobs, POLICY
            )
            self.turns[-1] = turn
        else:
            self.turns.append(turn)

    def _text(self) -> str:
        tokens = [t for turn in self.turns for t in turn.tokens]
        return self.tokenizer.decode(tokens, skip_special_tokens=False)

    def result(self) -> ToolCompletion:
        text = self._text()
        cut = min((text.find(s) for s in self.stops if s in text), default=-1)
        return ToolCompletion(
            turns=self.turns,
            stop_reason=self.stop_reason,
            text=text[:cut] if cut >= 0 else text,
            sample_calls=self.sample_calls,
        )


def sample_with_calculator(
    sampling_client: Any,
    tokenizer: Any,
    prompt_tokens: Sequence[int],
    sampling_params: trio.SamplingParams,
    max_tool_calls: int = 8,
) -> ToolCompletion:
    """Sample one completion, the calculator answering each ``<<expression=``.

    Args:
        sampling_client: any SamplingClient (``sample(...).result()``).
        tokenizer: the model's tokenizer: decodes the policy's text, encodes the
            calculator's.
        prompt_tokens: the prompt's token ids.
        sampling_params: the run's settings: ``max_tokens`` (the policy's tokens,
            at least 1), stop strings (not token ids), temperature, seed...
        max_tool_calls: most calculator calls in the completion (>= 0).

    Returns:
        A :class:`ToolCompletion` whose policy tokens number at most
        ``max_tokens`` and whose tool turns number at most ``max_tool_calls``.

    Raises:
        ValueError: ``max_tokens`` unset or < 1, stop token ids, a negative
            ``max_tool_calls``, a sampler that returns unequal tokens and logprobs.

    Example, on the local engine's tiny random model (it never writes ``<<``, so
    no call: the policy writes alone, within its budget):

    >>> from grpo_helpers import prompts
    >>> from grpo_helpers.engines import connect
    >>> from grpo_helpers.rollout import make_sampling_params
    >>> sampler = connect("local").create_sampling_client(base_model="tiny-random")
    >>> tokenizer = sampler.get_tokenizer()
    >>> tokens = list(prompts.build_prompt(tokenizer, "What is 2 + 3?"))
    >>> params = make_sampling_params(tokenizer, max_tokens=8, seed=0)
    >>> done = sample_with_calculator(sampler, tokenizer, tokens, params)
    >>> done.policy_token_count <= 8, done.tool_calls
    (True, 0)
    """
    calls = _Calls(tokenizer, prompt_tokens, sampling_params, max_tool_calls)
    while True:
        prompt, params = calls.request()
        future = sampling_client.sample(
            prompt=prompt, num_samples=1, sampling_params=params, return_text=False
        )
        if calls.read(future.result().sequences[0]):
            return calls.result()


async def sample_with_calculator_async(
    sampling_client: Any,
    tokenizer: Any,
    prompt_tokens: Sequence[int],
    sampling_params: trio.SamplingParams,
    max_tool_calls: int = 8,
) -> ToolCompletion:
    """The async twin of :func:`sample_with_calculator`: each call is one
    ``await sampling_client.sample_async(...)``; many completions can run at once
    (``asyncio.gather``)."""
    calls = _Calls(tokenizer, prompt_tokens, sampling_params, max_tool_calls)
    while True:
        prompt, params = calls.request()
        response = await sampling_client.sample_async(
            prompt=prompt, num_samples=1, sampling_params=params, return_text=False
        )
        if calls.read(response.sequences[0]):
            return calls.result()
