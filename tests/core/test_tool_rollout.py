"""grpo_helpers.tool_rollout: the policy writes, the calculator answers, through
the client API.

A scripted policy (a fake SamplingClient that writes a fixed text one character a
token and stops as a sampler does: at a stop string, the stop token included, or
at ``max_tokens``) shows each rule: which ``=`` gets a tool turn, the prompt of
each call, the budgets, the seeds, the async twin. On the local engine's
tiny-random model, a LoRA that favours ``<<``, ``+`` and ``=`` calls the
calculator for real: the turns alternate, the budgets hold, and the Datum of a
completion gives the trainer's logprobs equal to the sampler's on the policy's
tokens (so the tool's insertion shifted nothing).
"""

from __future__ import annotations

import asyncio
import doctest

import numpy as np
import pytest
import pytrio as trio
import torch
from pytrio.types import SampleResponse, SampleSequence

from grpo_helpers import tool_rollout
from grpo_helpers.calculator import calculate
from grpo_helpers.datum import POLICY, TOOL, build_multiturn_datum
from grpo_helpers.engines import connect
from grpo_helpers.rollout import make_sampling_params
from grpo_helpers.tool_rollout import (
    open_call,
    sample_with_calculator,
    sample_with_calculator_async,
)

EOS = "\u00b6"  # the fake tokenizer's end of turn: one character, one token


class CharTokenizer:
    """One token per character (its code point); ``EOS`` ends a turn."""

    eos_token = EOS
    eos_token_id = ord(EOS)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, tokens: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(chr(t) for t in tokens)


class ScriptedPolicy:
    """A SamplingClient whose policy writes ``script`` (what it writes between the
    calculator's answers), one character a token, logprob ``-position / 100``.

    Each call goes on from where the last one stopped, and stops as a sampler
    does: when its text holds a stop string (that token included), at the end of
    turn (``EOS``, stop reason ``"stop"``) or after ``max_tokens`` (``"length"``).
    Records each call's prompt and settings.
    """

    def __init__(self, script: str) -> None:
        self.script = script
        self.at = 0
        self.prompts: list[list[int]] = []
        self.params: list[trio.SamplingParams] = []

    def _respond(self, prompt, num_samples, sampling_params) -> SampleResponse:
        assert num_samples == 1
        self.prompts.append(prompt.to_ints())
        self.params.append(sampling_params)
        stops = sampling_params.stop or []
        written, reason = "", "length"
        while len(written) < sampling_params.max_tokens:
            written += self.script[self.at]
            self.at += 1
            if written.endswith(EOS) or any(s in written for s in stops):
                reason = "stop"
                break
        start = self.at - len(written)
        return SampleResponse(
            sequences=[
                SampleSequence(
                    stop_reason=reason,
                    tokens=[ord(c) for c in written],
                    logprobs=[-(start + i) / 100 for i in range(len(written))],
                )
            ]
        )

    def sample(self, prompt, num_samples=1, sampling_params=None, **kwargs):
        return trio.types.APIFuture.completed(
            self._respond(prompt, num_samples, sampling_params)
        )

    async def sample_async(self, prompt, num_samples=1, sampling_params=None, **kw):
        await asyncio.sleep(0)
        return self._respond(prompt, num_samples, sampling_params)


TOK = CharTokenizer()
PROMPT = [ord(c) for c in "Q? "]
#: What the policy writes: an ``=`` outside ``<<`` (no call), two calls, the end.
SCRIPT = "48/2 = <<48/2=" + " clips; total <<48+24=" + " in all." + EOS


def params(max_tokens: int = 100, seed: int | None = None) -> trio.SamplingParams:
    return trio.SamplingParams(max_tokens=max_tokens, seed=seed, stop=[EOS])


def texts(done) -> list[tuple[str, str]]:
    return [(turn.whose, TOK.decode(turn.tokens)) for turn in done.turns]


def test_doctests_pass():
    result = doctest.testmod(tool_rollout)
    assert result.failed == 0 and result.attempted > 0


def test_the_calculator_answers_each_open_call_and_the_turns_alternate():
    policy = ScriptedPolicy(SCRIPT)
    done = sample_with_calculator(policy, TOK, PROMPT, params(seed=7))
    assert texts(done) == [
        ("policy", "48/2 = <<48/2="),  # two calls: "48/2 =" then " <<48/2="
        ("tool", "24>>"),
        ("policy", " clips; total <<48+24="),
        ("tool", "72>>"),
        ("policy", " in all." + EOS),
    ]
    assert done.text == "48/2 = <<48/2=24>> clips; total <<48+24=72>> in all."
    assert (done.stop_reason, done.tool_calls, done.sample_calls) == ("stop", 2, 4)
    # The policy's tokens and logprobs are exactly the sampled ones, in order.
    policy_tokens = [
        t for turn in done.turns if turn.whose == POLICY for t in turn.tokens
    ]
    assert TOK.decode(policy_tokens) == SCRIPT
    policy_logprobs = [v for t in done.turns if t.whose == POLICY for v in t.logprobs]
    assert policy_logprobs == [-i / 100 for i in range(len(SCRIPT))]
    assert all(turn.logprobs is None for turn in done.turns if turn.whose == TOOL)
    # Each call reads the prompt and everything so far, the tool's text included,
    # with the policy's tokens left as max_tokens and its own seed.
    written = [len("48/2 ="), len("48/2 = <<48/2=24>>"), len(done.tokens) - 9]
    assert [len(p) - len(PROMPT) for p in policy.prompts] == [0, *written]
    assert all(p[: len(PROMPT)] == PROMPT for p in policy.prompts)
    assert policy.prompts[-1] == PROMPT + done.tokens[: written[-1]]
    assert [p.max_tokens for p in policy.params] == [100, 94, 86, 64]
    assert [p.seed for p in policy.params] == [7, 8, 9, 10]
    assert all(p.stop == [EOS, "="] for p in policy.params)


def test_the_policy_budget_counts_the_policys_tokens_only():
    for budget in range(1, len(SCRIPT) + 3):
        done = sample_with_calculator(
            ScriptedPolicy(SCRIPT), TOK, PROMPT, params(budget)
        )
        assert done.policy_token_count == min(budget, len(SCRIPT))
        assert done.stop_reason == ("length" if budget < len(SCRIPT) else "stop")
        # cut right at a call's "=": no tool turn after the last policy token
        assert done.turns[-1].whose == POLICY


def test_calls_past_max_tool_calls_are_left_to_the_policy():
    policy = ScriptedPolicy(SCRIPT)
    done = sample_with_calculator(policy, TOK, PROMPT, params(), max_tool_calls=1)
    assert done.text == "48/2 = <<48/2=24>> clips; total <<48+24= in all."
    assert done.tool_calls == 1
    assert [p.stop for p in policy.params] == [[EOS, "="], [EOS, "="], [EOS]]
    none = sample_with_calculator(
        ScriptedPolicy(SCRIPT), TOK, PROMPT, params(), max_tool_calls=0
    )
    assert none.tool_calls == 0 and none.sample_calls == 1
    assert len(none.turns) == 1 and none.text == SCRIPT[:-1]


def test_a_bad_expression_gets_the_error_marker():
    done = sample_with_calculator(
        ScriptedPolicy("<<1/0=" + " hm <<2**99=" + " ok" + EOS), TOK, PROMPT, params()
    )
    assert done.text == "<<1/0=ERROR>> hm <<2**99=ERROR>> ok"


def test_the_async_twin_samples_the_same_completion():
    sync = sample_with_calculator(ScriptedPolicy(SCRIPT), TOK, PROMPT, params(50))
    policy = ScriptedPolicy(SCRIPT)
    run = sample_with_calculator_async(policy, TOK, PROMPT, params(50))
    assert asyncio.run(run) == sync


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("Half is <<48/2=", "48/2"),
        ("<< (3 + 1) * 2 =", " (3 + 1) * 2 "),
        ("a <<1=2>> then <<5-1=", "5-1"),
        ("<<<<2+2=", "2+2"),
        ("<<=", ""),  # an empty call: the calculator answers ERROR
        ("x =", None),  # an = outside <<
        ("<<48/2=24>> so y =", None),  # the call was closed
        ("<<1=2=", None),  # a second =
        ("<<2=-", None),  # a token past the = (``=-`` is one of SmolLM2's)
        ("<<2+2", None),
        ("", None),
    ],
)
def test_open_call(text, expression):
    assert open_call(text) == expression


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": [2, 7]}, "stop strings, not token ids"),
    ],
)
def test_refusals(change, message):
    bad = params().model_copy(update=change)
    with pytest.raises(ValueError, match=message):
        sample_with_calculator(ScriptedPolicy(SCRIPT), TOK, PROMPT, bad)


def test_a_negative_max_tool_calls_is_refused():
    with pytest.raises(ValueError, match="max_tool_calls"):
        sample_with_calculator(ScriptedPolicy(SCRIPT), TOK, PROMPT, params(), -1)


# --- the local engine, tiny-random ----------------------------------------------

#: How far the LoRA raises the logits of ``<<``, ``+`` and ``=`` (through the
#: model's constant channel 0): enough that the untrained model, which favours
#: digits, writes calls; not so far that it writes nothing else.
CALL_BIAS = 0.4


@pytest.fixture(scope="module")
def caller():
    """A training client of tiny-random whose output layer's LoRA favours the
    pieces of a call, and a sampler of those weights."""
    svc = connect("local")
    tc = svc.create_lora_training_client("tiny-random", rank=4, seed=0)
    tok = tc.get_tokenizer()
    pieces = sorted(
        {t for s in ("<<", "+", "=") for t in tok.encode(s, add_special_tokens=False)}
    )
    lora = tc._host.parameters(tc._adapter)
    with torch.no_grad():
        lora["lm_head.lora_A.weight"].zero_()
        lora["lm_head.lora_A.weight"][0, 0] = 1.0  # read the constant channel
        lora["lm_head.lora_B.weight"].zero_()
        lora["lm_head.lora_B.weight"][pieces, 0] = CALL_BIAS
    return tc, tc.save_weights_and_get_sampling_client(), tok


def test_on_the_local_engine_the_turns_alternate_within_their_budgets(caller):
    from grpo_helpers import prompts

    tc, sampler, tok = caller
    prompt = list(prompts.build_prompt(tok, "What is 48 / 2?"))
    completions = [
        sample_with_calculator(
            sampler,
            tok,
            prompt,
            make_sampling_params(tok, max_tokens=32, seed=seed),
            max_tool_calls=2,
        )
        for seed in range(6)
    ]
    answers = []
    for done in completions:
        assert done.policy_token_count <= 32
        assert done.tool_calls <= 2
        assert [t.whose for t in done.turns][::2] == [POLICY] * len(done.turns[::2])
        assert all(t.whose == TOOL for t in done.turns[1::2])
        so_far: list[int] = []
        for turn in done.turns:
            if turn.whose == TOOL:  # the calculator's answer to the text before it
                expression = open_call(tok.decode(so_far, skip_special_tokens=False))
                assert expression is not None
                answer = calculate(expression) + ">>"
                assert turn.tokens == tok.encode(answer, add_special_tokens=False)
                answers.append(answer)
            so_far += turn.tokens
    assert sum(done.tool_calls for done in completions) >= 3, answers
    assert any(a != "ERROR>>" for a in answers), answers  # a real sum was written
    # The Datum of each completion: the trainer's logprobs on the policy's tokens
    # are the sampler's, after the tool's insertions too; its tokens read none.
    called = [d for d in completions if d.tool_calls]
    data = [build_multiturn_datum(prompt, d.turns, 1.0) for d in called]
    out = tc.forward(data, "importance_sampling").result()
    for datum, result in zip(data, out.loss_fn_outputs, strict=True):
        sampled = np.asarray(datum.loss_fn_inputs["logprobs"].tolist())
        trainer = np.asarray(result["logprobs"].tolist())
        targets = np.asarray(datum.loss_fn_inputs["target_tokens"].tolist())
        policy = datum.loss_fn_inputs["advantages"].tolist()
        at = np.asarray(policy) != 0
        assert np.abs(trainer[at] - sampled[at]).max() < 1e-4  # 4e-6 seen
        assert (trainer[targets == -100] == 0).all()
