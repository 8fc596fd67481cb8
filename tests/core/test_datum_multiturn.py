"""grpo_helpers.datum.build_multiturn_datum: a completion of policy and tool turns,
the tool's tokens in the model input and out of the loss.

The hand-computed Datum, the wrong layouts it must differ from (each named), and
the engine: on tiny-random, ``forward_backward`` of the Datum gives the gradient
of the same Datum whose tool tokens are trained with advantage 0, its loss is the
sum over the policy's tokens alone, and training the tool's tokens (or leaving
them out of the model input) gives another gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import pytrio as trio
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from local_engine import named, perturbed_client
from tensors import rel_err

from grpo_helpers.datum import (
    IGNORED_TARGET,
    POLICY,
    TOOL,
    RolloutSample,
    Turn,
    build_grpo_datum,
    build_multiturn_datum,
)
from grpo_helpers.engines import connect

PROMPT = [1, 2, 3]
#: The policy writes 10 11 (say ``<<4/2=``), the calculator 20 21 (``2>>``), the
#: policy 12 (`` so``): a completion of 5 tokens.
TURNS = [
    Turn([10, 11], [-0.5, -0.25], POLICY),
    Turn([20, 21], None, TOOL),
    Turn([12], [-2.0], POLICY),
]
ADVANTAGE = 0.5
#: The Datum of PROMPT and TURNS, by hand: L = P + C - 1 = 3 + 5 - 1 = 7 positions;
#: position i reads token i and is asked for token i + 1.
BY_HAND = {
    # position:      0  1  2   3   4   5   6
    "model_input": [1, 2, 3, 10, 11, 20, 21],
    "target_tokens": [0, 0, 10, 11, -100, -100, 12],
    "logprobs": [0.0, 0.0, -0.5, -0.25, 0.0, 0.0, -2.0],
    "advantages": [0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.5],
}


def fields(datum: trio.Datum) -> dict[str, list]:
    return {
        "model_input": datum.model_input.to_ints(),
        **{key: value.tolist() for key, value in datum.loss_fn_inputs.items()},
    }


def datum_of(model_input, targets, logprobs, advantages) -> trio.Datum:
    return trio.Datum(
        model_input=trio.ModelInput.from_ints(model_input),
        loss_fn_inputs={
            "target_tokens": np.asarray(targets, dtype=np.int64),
            "logprobs": np.asarray(logprobs, dtype=np.float32),
            "advantages": np.asarray(advantages, dtype=np.float32),
        },
    )


def test_a_policy_tool_policy_completion_by_hand():
    assert fields(build_multiturn_datum(PROMPT, TURNS, ADVANTAGE)) == BY_HAND


def test_one_policy_turn_is_build_grpo_datum():
    sample = RolloutSample([10, 11, 12], [-0.5, -0.25, -2.0], "", 1.0, ADVANTAGE)
    one = [Turn(sample.tokens, sample.logprobs, POLICY)]
    assert fields(build_multiturn_datum(PROMPT, one, ADVANTAGE)) == fields(
        build_grpo_datum(PROMPT, sample)
    )


def test_a_completion_that_ends_in_a_tool_turn():
    turns = [Turn([10], [-0.5], POLICY), Turn([20, 21], None, TOOL)]
    got = fields(build_multiturn_datum([1], turns, -1.0))
    assert got == {
        "model_input": [1, 10, 20],
        "target_tokens": [10, -100, -100],
        "logprobs": [-0.5, 0.0, 0.0],
        "advantages": [-1.0, 0.0, 0.0],
    }


# --- the wrong layouts, each named: the right Datum differs from every one -------


def tools_trained_on() -> trio.Datum:
    """The tool's tokens trained like the policy's (one turn of everything, the
    tool's tokens given some logprob)."""
    tokens = [10, 11, 20, 21, 12]
    sample = RolloutSample(tokens, [-0.5, -0.25, -1.0, -1.0, -2.0], "", 1.0, ADVANTAGE)
    return build_grpo_datum(PROMPT, sample)


def advantage_zero_only() -> trio.Datum:
    """The policy's logprob asked of a tool token: the tool's positions keep their
    target (advantage 0 and a made-up sampler logprob 0): no gradient, but counted
    in ``token_count`` and read by a ratio."""
    right = BY_HAND
    targets = [10, 11, 20, 21, 12]
    return datum_of(
        right["model_input"], [0, 0, *targets], right["logprobs"], right["advantages"]
    )


def offsets_shifted() -> trio.Datum:
    """The policy's second turn placed as if the tool's tokens were not there:
    its target, logprob and advantage two positions early."""
    return datum_of(
        BY_HAND["model_input"],
        [0, 0, 10, 11, 12, -100, -100],
        [0, 0, -0.5, -0.25, -2.0, 0, 0],
        [0, 0, 0.5, 0.5, 0.5, 0, 0],
    )


def tool_left_out_of_the_input() -> trio.Datum:
    """The tool's tokens dropped: the policy's last token predicted without the
    calculator's text it was sampled after."""
    sample = RolloutSample([10, 11, 12], [-0.5, -0.25, -2.0], "", 1.0, ADVANTAGE)
    return build_grpo_datum(PROMPT, sample)


def no_shift() -> trio.Datum:
    """Targets not shifted: position i asked for the token it reads."""
    return datum_of(
        BY_HAND["model_input"][:-1] + [21],
        [1, 2, 3, 10, 11, -100, -100],
        [0, 0, 0, -0.5, -0.25, 0, 0],
        [0, 0, 0, 0.5, 0.5, 0, 0],
    )


WRONG: dict[str, Callable[[], trio.Datum]] = {
    "the tool's tokens trained on": tools_trained_on,
    "the policy's logprob asked of a tool token": advantage_zero_only,
    "offsets shifted by the insertion": offsets_shifted,
    "the tool's tokens left out of the input": tool_left_out_of_the_input,
    "targets not shifted": no_shift,
}


@pytest.mark.parametrize("name", list(WRONG))
def test_the_datum_differs_from_a_named_wrong_layout(name: str):
    assert fields(WRONG[name]()) != fields(
        build_multiturn_datum(PROMPT, TURNS, ADVANTAGE)
    )


@pytest.mark.parametrize(
    ("prompt", "turns", "advantage", "message"),
    [
        ([], TURNS, 1.0, "empty prompt"),
        (PROMPT, [], 1.0, "no policy token"),
        (PROMPT, [Turn([20], None, TOOL)], 1.0, "no policy token"),
        (PROMPT, [Turn([], [], POLICY)], 1.0, "no tokens"),
        (PROMPT, [Turn([10], None, POLICY)], 1.0, "1 tokens but None logprobs"),
        (PROMPT, [Turn([10, 11], [-1.0], POLICY)], 1.0, "2 tokens but 1 logprobs"),
        (PROMPT, [Turn([10], [-1.0], POLICY), Turn([20], [0.0], TOOL)], 1.0, "tool"),
        (PROMPT, [Turn([10], [-1.0], "user")], 1.0, "not policy/tool"),
        (PROMPT, [Turn([10], [math.nan], POLICY)], 1.0, "finite"),
        (PROMPT, TURNS, math.inf, "advantage"),
        ([-1], TURNS, 1.0, ">= 0"),
        (PROMPT, [Turn([10], [-1.0], POLICY), Turn([-5], None, TOOL)], 1.0, ">= 0"),
    ],
)
def test_clear_errors(prompt, turns, advantage, message):
    with pytest.raises(ValueError, match=message):
        build_multiturn_datum(prompt, turns, advantage)


TOKENS = st.lists(st.integers(min_value=0, max_value=50_000), min_size=1, max_size=8)
TURN = st.one_of(
    TOKENS.map(lambda t: Turn(t, [-0.125 * (i + 1) for i in range(len(t))], POLICY)),
    TOKENS.map(lambda t: Turn(t, None, TOOL)),
)


@settings(max_examples=200, deadline=None)
@given(TOKENS, st.lists(TURN, min_size=1, max_size=6), st.sampled_from([-1.5, 2.0]))
def test_each_position_predicts_the_next_token_and_only_the_policys_train(
    prompt, turns, advantage
):
    if not any(t.whose == POLICY for t in turns):
        turns = [*turns, Turn([7], [-1.0], POLICY)]
    got = fields(build_multiturn_datum(prompt, turns, advantage))
    full = prompt + [token for turn in turns for token in turn.tokens]
    whose = [turn.whose for turn in turns for _ in turn.tokens]
    logprobs = [v for t in turns for v in (t.logprobs or [0.0] * len(t.tokens))]
    pad = len(prompt) - 1
    assert got["model_input"] == full[:-1]
    assert {len(v) for v in got.values()} == {len(full) - 1}
    for i, who in enumerate(whose):
        position = pad + i  # reads full[position], is asked for full[position + 1]
        policy = who == POLICY
        assert got["target_tokens"][position] == (
            full[position + 1] if policy else IGNORED_TARGET
        )
        assert got["advantages"][position] == (advantage if policy else 0.0)
        assert got["logprobs"][position] == (logprobs[i] if policy else 0.0)
    assert got["target_tokens"][:pad] == [0] * pad


# --- the engine: the tool's tokens carry no gradient -----------------------------


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    return connect("local", run_dir=tmp_path_factory.mktemp("engine-run"))


def engine_turns() -> tuple[list[int], list[Turn]]:
    """A prompt and three turns of real-looking token ids, with logprobs off the
    trainer's (so the ratios are not 1)."""
    gen = torch.Generator().manual_seed(3)

    def ids(n: int) -> list[int]:
        return torch.randint(10, 49_000, (n,), generator=gen).tolist()

    def policy(n: int) -> Turn:
        return Turn(ids(n), (-torch.rand(n, generator=gen) * 4).tolist(), POLICY)

    return ids(12), [policy(5), Turn(ids(3), None, TOOL), policy(4)]


def gradient(svc, data: list[trio.Datum]) -> tuple[torch.Tensor, object]:
    """The gradient of one ``forward_backward`` from the same perturbed LoRA."""
    tc = perturbed_client(svc, seed=0, rank=4)
    out = tc.forward_backward(data, "importance_sampling").result()
    return torch.cat([p.grad.flatten() for _, p in sorted(named(tc))]), out


def test_the_tools_tokens_carry_no_gradient_and_no_count(svc):
    prompt, turns = engine_turns()
    right = build_multiturn_datum(prompt, turns, ADVANTAGE)
    grad, out = gradient(svc, [right])
    got = fields(right)
    pad = len(prompt) - 1
    tool = [pad + 5 + k for k in range(3)]  # the tool's three positions
    # The same Datum with the tool's tokens as targets, advantage 0: the gradient
    # the brief asks for; equal to float32 rounding.
    zero = datum_of(
        got["model_input"],
        [
            t if i not in tool else got["model_input"][i + 1]
            for i, t in enumerate(got["target_tokens"])
        ],  # fmt: skip
        got["logprobs"],
        got["advantages"],
    )
    grad_zero, out_zero = gradient(svc, [zero])
    assert float(grad.norm()) > 0
    assert rel_err(grad, grad_zero) < 1e-6, rel_err(grad, grad_zero)
    # The loss is the policy tokens' alone, by hand from the learner's logprobs.
    learner = np.asarray(out.loss_fn_outputs[0]["logprobs"].tolist())
    old = np.asarray(got["logprobs"])
    policy = [i for i in range(pad, len(old)) if i not in tool]
    by_hand = -sum(math.exp(learner[i] - old[i]) * ADVANTAGE for i in policy)
    assert out.metrics["loss_sum"] == pytest.approx(by_hand, rel=1e-5)
    assert out.metrics["token_count"] == pad + 9  # the tool's 3 not counted
    assert out_zero.metrics["token_count"] == pad + 12  # ... but counted here
    assert all(learner[i] == 0.0 for i in tool)  # no logprob asked of them
    # The wrong layouts give another gradient. Trained on, the tool's tokens get
    # the learner's own logprobs as the sampler's (ratio 1, a full-size gradient).
    trainer = np.asarray(out_zero.loss_fn_outputs[0]["logprobs"].tolist())
    tool_logprobs = [float(trainer[i]) for i in tool]
    for name in ("the tool's tokens trained on", "offsets shifted by the insertion",
                 "the tool's tokens left out of the input"):  # fmt: skip
        wrong = wrong_on_engine(name, prompt, turns, tool_logprobs)
        # float32 rounding moves it by 0 here; each wrong layout by 1.4% or more
        assert rel_err(grad, gradient(svc, [wrong])[0]) > 1e-3, name


def wrong_on_engine(
    name: str, prompt: list[int], turns: list[Turn], tool_logprobs: list[float]
) -> trio.Datum:
    """WRONG's layouts, for ``engine_turns``."""
    tokens = [t for turn in turns for t in turn.tokens]
    given = iter(tool_logprobs)
    logprobs = [
        v for t in turns for v in (t.logprobs or [next(given) for _ in t.tokens])
    ]
    if name == "the tool's tokens trained on":
        return build_grpo_datum(
            prompt, RolloutSample(tokens, logprobs, "", 1.0, ADVANTAGE)
        )
    policy = [t for turn in turns if turn.whose == POLICY for t in turn.tokens]
    policy_lp = [v for turn in turns if turn.whose == POLICY for v in turn.logprobs]
    if name == "the tool's tokens left out of the input":
        return build_grpo_datum(
            prompt, RolloutSample(policy, policy_lp, "", 1.0, ADVANTAGE)
        )
    assert name == "offsets shifted by the insertion"
    pad, tool = len(prompt) - 1, len(tokens) - len(policy)
    return datum_of(
        prompt + tokens[:-1],
        [0] * pad + policy + [IGNORED_TARGET] * tool,
        [0.0] * pad + policy_lp + [0.0] * tool,
        [0.0] * pad + [ADVANTAGE] * len(policy) + [0.0] * tool,
    )
