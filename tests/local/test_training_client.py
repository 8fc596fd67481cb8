"""grpo_helpers.local.training_client: one LoRA policy and its AdamW state, on
tiny-random.

Gradients accumulate until ``optim_step``; micro-batching changes no gradient;
``optim_step`` follows ``AdamParams`` and measures the gradient norm once; custom
losses and ``auto_shift``; the two awaits; the worker thread ends with its client;
the client rejects what PyTRIO rejects, with PyTRIO's errors and messages.
"""

from __future__ import annotations

import asyncio

import pytest
import pytrio as trio
import torch
from local_engine import (
    adapter_tensors,
    assert_same_gradient,
    encode,
    grpo_datum,
    new_client,
    params,
    sample_one,
)
from pytrio.errors.base import ValidationError
from pytrio.types import APIFuture, ForwardBackwardOutput, SampleResponse

from grpo_helpers.engines import connect


def test_cross_entropy_steps_drive_loss_down(svc, tok):
    tc = new_client(svc)
    tokens = tok.encode("The answer is 42. The answer is 42.")
    datum = trio.Datum(
        model_input=trio.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:]},
    )
    losses = []
    for _ in range(5):
        fb = tc.forward_backward([datum], "cross_entropy")
        tc.optim_step(trio.AdamParams(learning_rate=1e-2))
        losses.append(fb.result().metrics["loss_mean"])
    assert losses == sorted(losses, reverse=True)
    assert losses[-1] < losses[0] - 1.0


def test_cross_entropy_weights_and_ignored_targets(svc, tok):
    tc = new_client(svc)
    tokens = tok.encode("one two three four five")
    inp, tgt = tokens[:-1], tokens[1:]
    full = trio.Datum(
        model_input=trio.ModelInput.from_ints(inp),
        loss_fn_inputs={"target_tokens": tgt},
    )
    out = tc.forward([full]).result()
    lps = out.loss_fn_outputs[0]["logprobs"].data
    assert out.loss_fn_outputs[0]["logprobs"].dtype == "float32"
    assert out.metrics["loss_sum"] == pytest.approx(-sum(lps), rel=1e-5)
    masked = trio.Datum(
        model_input=trio.ModelInput.from_ints(inp),
        loss_fn_inputs={
            "target_tokens": [-100] + tgt[1:],
            "weights": [1.0, 0.0] + [2.0] * (len(tgt) - 2),
        },
    )
    m = tc.forward([masked]).result().metrics
    assert m["token_count"] == len(tgt) - 2
    assert m["loss_sum"] == pytest.approx(-2 * sum(lps[2:]), rel=1e-5)
    assert m["loss_mean"] == pytest.approx(m["loss_sum"] / m["token_count"])


def test_gradients_accumulate_until_optim_step(svc, tok):
    """Two forward_backward calls, one step == one call with both Datums."""
    prompt, seq = sample_one(
        new_client(svc).save_weights_and_get_sampling_client(), tok
    )
    d1, d2 = grpo_datum(prompt, seq, 1.0), grpo_datum(prompt, seq, 0.5)
    a, b = new_client(svc, seed=5), new_client(svc, seed=5)
    a.forward_backward([d1], "importance_sampling")
    a.forward_backward([d2], "importance_sampling").result()
    b.forward_backward([d1, d2], "importance_sampling").result()
    for x, y in zip(a._params, b._params, strict=True):
        assert_same_gradient(x.grad, y.grad)
    a.optim_step(trio.AdamParams()).result()
    assert all(p.grad is None for p in a._params)


def test_micro_batching_gives_the_same_gradient(tmp_path, tok):
    small = connect("local", run_dir=tmp_path, train_tokens_per_batch=16)
    big = connect("local", run_dir=tmp_path, train_tokens_per_batch=4096)
    data = [
        trio.Datum(
            model_input=trio.ModelInput.from_ints(tok.encode(t)[:-1]),
            loss_fn_inputs={"target_tokens": tok.encode(t)[1:]},
        )
        for t in ["a b c d e f g h", "hello there", "x y z " * 6]
    ]
    tcs = [new_client(s, seed=2) for s in (small, big)]
    samples = tcs[0]._prepare(data, "cross_entropy", None, 0).samples
    lengths = {i: s.input_length for i, s in enumerate(samples)}
    assert len(tcs[0]._micro_batches(lengths)) > 1
    outs = [tc.forward_backward(data).result() for tc in tcs]
    assert outs[0].metrics["loss_sum"] == pytest.approx(
        outs[1].metrics["loss_sum"], 1e-5
    )
    for x, y in zip(outs[0].loss_fn_outputs, outs[1].loss_fn_outputs, strict=True):
        assert torch.allclose(
            torch.tensor(x["logprobs"].data),
            torch.tensor(y["logprobs"].data),
            atol=1e-5,
        )
    for p, q in zip(tcs[0]._params, tcs[1]._params, strict=True):
        assert_same_gradient(p.grad, q.grad)


@pytest.mark.parametrize("clip", [0.0, 1e-3])
def test_optim_step_measures_the_gradient_norm_once(svc, tok, monkeypatch, clip):
    """The reported grad_norm is the one global norm a step computes:
    clip_grad_norm_'s own return value when clipping, the plain norm otherwise."""
    tc = new_client(svc, seed=3)
    prompt, seq = sample_one(tc.save_weights_and_get_sampling_client(), tok)
    tc.forward_backward([grpo_datum(prompt, seq, 1.0)], "importance_sampling").result()
    grads = [p.grad for p in tc._params if p.grad is not None]
    by_hand = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))
    returned, norms = [], []
    clip_grad_norm, vector_norm = (
        torch.nn.utils.clip_grad_norm_,
        torch.linalg.vector_norm,
    )

    def spy_clip(*args, **kwargs):
        returned.append(clip_grad_norm(*args, **kwargs))
        return returned[-1]

    def spy_norm(*args, **kwargs):
        norms.append(vector_norm(*args, **kwargs))
        return norms[-1]

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy_clip)
    monkeypatch.setattr(torch.linalg, "vector_norm", spy_norm)
    adam = trio.AdamParams(learning_rate=1e-2, grad_clip_norm=clip)
    metrics = tc.optim_step(adam).result().metrics
    monkeypatch.undo()
    assert len(norms) == 1  # one global norm per step, not one more to report
    assert len(returned) == (1 if clip else 0)
    assert metrics["grad_norm"] == float((returned or norms)[0])
    assert metrics["grad_norm"] == pytest.approx(by_hand, rel=1e-5)
    assert metrics["grad_norm"] > 10 * clip  # so clipping acted when asked


def test_optim_step_honours_adam_params(svc, tok):
    prompt, seq = sample_one(
        new_client(svc).save_weights_and_get_sampling_client(), tok
    )
    datum = grpo_datum(prompt, seq, 1.0)
    # grad_clip_norm: the reported norm is the pre-clip one; clipping shrinks the
    # first gradient, which shows in Adam's moments after a second, unclipped step.
    a, b = new_client(svc, seed=1), new_client(svc, seed=1)
    norms = []
    for tc, clip in ((a, 0.0), (b, 1e-3)):
        for c in (clip, 0.0):
            tc.forward_backward([datum], "importance_sampling")
            m = tc.optim_step(trio.AdamParams(learning_rate=1e-2, grad_clip_norm=c))
            m = m.result().metrics
            assert m["learning_rate"] == 1e-2
            norms.append(m["grad_norm"])
    assert norms[0] == pytest.approx(norms[2]) and norms[0] > 1e-2
    ta, tb = adapter_tensors(a), adapter_tensors(b)
    assert not all(torch.allclose(ta[k], tb[k], atol=1e-6) for k in ta)
    # weight_decay alone (zero gradient) shrinks weights by lr * wd.
    c = new_client(svc, seed=1)
    before = adapter_tensors(c)
    c.forward_backward([grpo_datum(prompt, seq, 0.0)], "importance_sampling")
    c.optim_step(trio.AdamParams(learning_rate=0.1, weight_decay=0.5)).result()
    after = adapter_tensors(c)
    key = next(k for k in before if "lora_A" in k)
    assert torch.allclose(after[key], before[key] * (1 - 0.05), atol=1e-6)
    # learning_rate 0 changes nothing.
    d = new_client(svc, seed=1)
    before = adapter_tensors(d)
    d.forward_backward([datum], "importance_sampling")
    d.optim_step(trio.AdamParams(learning_rate=0.0)).result()
    assert all(torch.equal(before[k], v) for k, v in adapter_tensors(d).items())


def test_forward_backward_custom_matches_builtin(svc, tok):
    prompt, seq = sample_one(
        new_client(svc).save_weights_and_get_sampling_client(), tok
    )
    datum = grpo_datum(prompt, seq, 1.0)
    a, b = new_client(svc, seed=6), new_client(svc, seed=6)
    a.forward_backward([datum], "importance_sampling").result()

    def is_loss(data, logprobs):
        d = data[0].loss_fn_inputs
        old = torch.tensor(d["logprobs"].data)
        adv = torch.tensor(d["advantages"].data)
        return -(torch.exp(logprobs[0] - old) * adv).sum(), {"custom": 1.0}

    out = b.forward_backward_custom([datum], is_loss).result()
    assert out.metrics["custom"] == 1.0
    for p, q in zip(a._params, b._params, strict=True):
        assert_same_gradient(p.grad, q.grad)


def test_auto_shift_aligns_targets_with_inputs(svc, tok):
    tc = new_client(svc)
    tokens = tok.encode("a shifted sequence of tokens")
    plain = trio.Datum(
        model_input=trio.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:]},
    )
    shifted = trio.Datum(
        model_input=trio.ModelInput.from_ints(tokens),
        loss_fn_inputs={"target_tokens": tokens},
    )
    a = tc.forward([plain]).result()
    b = tc.forward([shifted], auto_shift=True).result()
    assert a.metrics["token_count"] == b.metrics["token_count"] == len(tokens) - 1
    assert a.metrics["loss_sum"] == pytest.approx(b.metrics["loss_sum"], 1e-5)
    assert b.loss_fn_outputs[0]["logprobs"].data[1:] == pytest.approx(
        a.loss_fn_outputs[0]["logprobs"].data, abs=1e-5
    )


def test_two_await_async_semantics(svc, tok):
    tc = new_client(svc)
    datum = trio.Datum(
        model_input=encode(tok, "async"),
        loss_fn_inputs={"target_tokens": tok.encode("async")},
    )

    async def go():
        fut = await tc.forward_backward_async([datum])
        opt = await tc.optim_step_async(trio.AdamParams())
        assert isinstance(fut, APIFuture) and isinstance(opt, APIFuture)
        out = await fut
        assert isinstance(out, ForwardBackwardOutput)
        assert "grad_norm" in (await opt).metrics
        sampler = await tc.save_weights_and_get_sampling_client_async()
        resp = await sampler.sample_async(encode(tok, "hi"), 2, params())
        assert isinstance(resp, SampleResponse)
        lps = await sampler.compute_logprobs_async(encode(tok, "hi there"))
        assert lps[0] is None and len(lps) == len(tok.encode("hi there"))
        save = await tc.save_weights_for_sampler_async("async-weights")
        assert (await save).path.startswith("local://")

    asyncio.run(go())
    sync_future = tc.forward([datum])
    assert isinstance(sync_future, APIFuture) and sync_future.result().metrics


def test_two_adam_steps_follow_adam_params_by_hand(svc, tok):
    """Issue 48's mutation: ``optim_step`` must build its optimiser with
    ``AdamParams``' betas, eps and weight decay. One step from fresh moments
    cannot show the betas (Adam's bias correction hides them), so: two steps, with
    betas and eps far from torch's defaults, against AdamW written out by hand on
    the gradients the engine computed."""
    prompt, seq = sample_one(
        new_client(svc).save_weights_and_get_sampling_client(), tok
    )
    tc = new_client(svc, seed=7)
    adam = trio.AdamParams(
        learning_rate=1e-2, beta1=0.5, beta2=0.7, eps=1e-3, weight_decay=0.1
    )
    weights = {
        k: p.detach().clone() for k, p in tc._host.parameters(tc._adapter).items()
    }
    m = {k: torch.zeros_like(v) for k, v in weights.items()}
    v = {k: torch.zeros_like(w) for k, w in weights.items()}
    names = list(tc._host.parameters(tc._adapter))
    for step, advantage in ((1, 1.0), (2, -0.5)):
        datum = grpo_datum(prompt, seq, advantage)
        tc.forward_backward([datum], "importance_sampling").result()
        grads = {
            k: None if p.grad is None else p.grad.detach().clone()
            for k, p in zip(names, tc._params, strict=True)
        }
        tc.optim_step(adam).result()
        for k in weights:
            g = grads[k]
            if g is None:  # AdamW leaves a parameter without a gradient alone
                continue
            weights[k] = weights[k] * (1 - adam.learning_rate * adam.weight_decay)
            m[k] = adam.beta1 * m[k] + (1 - adam.beta1) * g
            v[k] = adam.beta2 * v[k] + (1 - adam.beta2) * g * g
            m_hat = m[k] / (1 - adam.beta1**step)
            v_hat = v[k] / (1 - adam.beta2**step)
            weights[k] = weights[k] - adam.learning_rate * m_hat / (
                v_hat.sqrt() + adam.eps
            )
    got = adapter_tensors(tc)
    for k, want in weights.items():
        torch.testing.assert_close(got[k], want, rtol=1e-5, atol=1e-7, msg=k)


def datum(n=4, **inputs) -> trio.Datum:
    inputs.setdefault("target_tokens", list(range(1, n + 1)))
    return trio.Datum(
        model_input=trio.ModelInput.from_ints(list(range(10, 10 + n))),
        loss_fn_inputs=inputs,
    )


def policy_datum(n=4, **overrides) -> trio.Datum:
    inputs = {"logprobs": [-1.0] * n, "advantages": [1.0] * n, **overrides}
    return datum(n, **inputs)


def test_unknown_loss(tc):
    with pytest.raises(ValueError, match="Unsupported loss function type: hinge"):
        tc.forward_backward([datum()], "hinge")


def test_loss_names_are_stripped_and_lowercased(tc):
    out = tc.forward([datum()], "  Cross_Entropy ").result()
    assert out.metrics["token_count"] == 4


def test_dro_is_pytrio_only(tc):
    with pytest.raises(ValidationError, match="does not implement the 'dro' loss"):
        tc.forward_backward([policy_datum()], "dro")


@pytest.mark.parametrize(
    ("loss", "missing"),
    [
        ("cross_entropy", "target_tokens"),
        ("importance_sampling", "logprobs"),
        ("importance_sampling", "advantages"),
        ("ppo", "advantages"),
    ],
)
def test_missing_loss_input(tc, loss, missing):
    d = policy_datum()
    inputs = {k: v for k, v in d.loss_fn_inputs.items() if k != missing}
    with pytest.raises(ValueError, match=f"^{missing} is required$"):
        tc.forward_backward(
            [trio.Datum(model_input=d.model_input, loss_fn_inputs=inputs)], loss
        )


@pytest.mark.parametrize("field", ["target_tokens", "logprobs", "advantages"])
def test_field_length_must_equal_input_length(tc, field):
    bad = [1, 2, 3] if field == "target_tokens" else [0.5, 0.5, 0.5]
    with pytest.raises(ValueError, match=rf"{field} must have shape \[4\]"):
        tc.forward_backward([policy_datum(**{field: bad})], "importance_sampling")


def test_weights_length(tc):
    with pytest.raises(ValueError, match=r"weights must have shape \[4\]"):
        tc.forward_backward([datum(weights=[1.0, 1.0])])


def test_target_tokens_must_be_int64(tc):
    with pytest.raises(ValueError, match="target_tokens must have dtype int64"):
        tc.forward_backward([datum(target_tokens=[1.0, 2.0, 3.0, 4.0])])


def test_token_ids_inside_vocabulary(tc):
    vocab = len(tc.get_tokenizer())
    with pytest.raises(ValidationError, match="target token ID is outside"):
        tc.forward_backward([datum(target_tokens=[1, 2, 3, vocab])])
    bad_input = trio.Datum(
        model_input=trio.ModelInput.from_ints([1, 2, vocab + 5]),
        loss_fn_inputs={"target_tokens": [1, 2, 3]},
    )
    with pytest.raises(ValidationError, match="input token ID is outside"):
        tc.forward_backward([bad_input])


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_values_must_be_finite(tc, value):
    with pytest.raises(ValueError, match=r"advantages\[2\] must be finite"):
        tc.forward_backward(
            [policy_datum(advantages=[0.0, 0.0, value, 0.0])], "importance_sampling"
        )
    with pytest.raises(ValueError, match=r"weights\[0\] must be finite"):
        tc.forward_backward([datum(weights=[value, 1.0, 1.0, 1.0])])


def test_empty_batch(tc):
    with pytest.raises(ValidationError, match="training data cannot be empty"):
        tc.forward_backward([])


def test_validation_failures_queue_nothing(tc):
    """A rejected call raises at the call, before anything reaches the worker."""
    with pytest.raises(ValueError):
        tc.forward_backward([datum()], "nope")
    assert tc.forward([datum()]).result().metrics["token_count"] == 4
