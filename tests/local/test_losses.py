"""grpo_helpers.local.losses: each loss moves the policy the way its sign says, and
PPO clips on both sides and only where it should."""

from __future__ import annotations

import math

import pytest
import pytrio as trio
import torch
from local_engine import (
    adapter_tensors,
    assert_same_gradient,
    completion_logprob,
    grpo_datum,
    new_client,
    sample_one,
)

# ----------------------------------------------------------------------- learning


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_importance_sampling_moves_logprob_with_advantage_sign(svc, tok, advantage):
    tc = new_client(svc)
    sampler = tc.save_weights_and_get_sampling_client()
    prompt, seq = sample_one(sampler, tok, seed=3)
    datum = grpo_datum(prompt, seq, advantage)
    before = completion_logprob(tc, datum, len(prompt))
    assert before == pytest.approx(sum(seq.logprobs), abs=1e-3)
    out = tc.forward_backward([datum], "importance_sampling").result()
    assert set(out.metrics) == {"loss_sum", "loss_mean", "token_count"}
    assert out.metrics["token_count"] == len(prompt) - 1 + len(seq.tokens)
    # At ratio 1 the loss is -A per completion token.
    assert out.metrics["loss_sum"] == pytest.approx(-advantage * len(seq.tokens), 1e-4)
    tc.optim_step(trio.AdamParams(learning_rate=1e-2)).result()
    after = completion_logprob(tc, datum, len(prompt))
    assert (after - before) * advantage > 0.1


def test_zero_advantage_leaves_weights_unchanged(svc, tok):
    tc = new_client(svc)
    prompt, seq = sample_one(tc.save_weights_and_get_sampling_client(), tok, seed=1)
    before = adapter_tensors(tc)
    tc.forward_backward([grpo_datum(prompt, seq, 0.0)], "importance_sampling")
    metrics = tc.optim_step(trio.AdamParams(learning_rate=1e-2)).result().metrics
    assert metrics["grad_norm"] == 0.0
    after = adapter_tensors(tc)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_ppo_and_cispo_equal_importance_sampling_on_policy(svc, tok):
    prompt, seq = sample_one(
        new_client(svc).save_weights_and_get_sampling_client(), tok
    )
    datum = grpo_datum(prompt, seq, 0.7)
    grads, losses = {}, {}
    for name in ("importance_sampling", "ppo", "cispo"):
        tc = new_client(svc, seed=4)
        losses[name] = tc.forward_backward([datum], name).result().metrics["loss_sum"]
        grads[name] = torch.cat([p.grad.flatten() for p in tc._params])
    assert losses["ppo"] == pytest.approx(losses["importance_sampling"], 1e-5)
    for name in ("ppo", "cispo"):
        assert_same_gradient(grads[name], grads["importance_sampling"])


def test_ppo_clips_far_off_policy_tokens(svc, tok):
    prompt, seq = sample_one(
        new_client(svc).save_weights_and_get_sampling_client(), tok
    )
    shifted = seq.model_copy(update={"logprobs": [lp - 1.0 for lp in seq.logprobs]})
    tc = new_client(svc)
    # ratio = e > 1.2 with A > 0: clipped, so no gradient at all.
    tc.forward_backward([grpo_datum(prompt, shifted, 1.0)], "ppo").result()
    assert all(float(p.grad.abs().max()) == 0.0 for p in tc._params)
    out = tc.forward(
        [grpo_datum(prompt, shifted, 1.0)], "ppo", {"clip_high_threshold": 5.0}
    )
    assert out.result().metrics["loss_sum"] == pytest.approx(
        -math.e * len(seq.tokens), 1e-3
    )


@pytest.mark.parametrize(
    ("shift", "advantage", "clipped"),
    [
        (-1.0, 1.0, True),  # ratio e > 1.2, A > 0: the upper clip stops it
        (1.0, -1.0, True),  # ratio 1/e < 0.8, A < 0: the lower clip stops it
        (1.0, 1.0, False),  # ratio 1/e, A > 0: min() keeps the unclipped term
        (-1.0, -1.0, False),  # ratio e, A < 0: likewise
    ],
    ids=["upper", "lower", "low-ratio-positive-A", "high-ratio-negative-A"],
)
def test_ppo_clips_on_both_sides_and_only_where_it_should(
    svc, tok, shift, advantage, clipped
):
    """PPO's pessimistic min: a token whose ratio left [0.8, 1.2] in the direction
    its advantage pushes gets no gradient; in the other direction it keeps it."""
    prompt, seq = sample_one(
        new_client(svc).save_weights_and_get_sampling_client(), tok
    )
    old = seq.model_copy(update={"logprobs": [lp + shift for lp in seq.logprobs]})
    datum = grpo_datum(prompt, old, advantage)
    tc = new_client(svc)
    out = tc.forward_backward([datum], "ppo").result()
    largest = max(float(p.grad.abs().max()) for p in tc._params)
    assert (largest == 0.0) == clipped, largest
    ratio = math.exp(-shift)  # learner logprob - (sampler logprob + shift)
    bound = 1.2 if ratio > 1 else 0.8
    kept = bound if clipped else ratio
    n = len(seq.tokens)
    assert out.metrics["loss_sum"] == pytest.approx(-kept * advantage * n, rel=1e-3)
