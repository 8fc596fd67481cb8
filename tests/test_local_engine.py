"""The local engine on tiny-random: learning signs, sampling, checkpoints."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import pytrio as trio
import torch
from pytrio.types import APIFuture, ForwardBackwardOutput, SampleResponse
from tensors import rel_err

from grpo_helpers.engines import connect

ROOT = Path(__file__).resolve().parent.parent
MODEL = "tiny-random"


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    return connect("local", run_dir=tmp_path_factory.mktemp("engine-run"))


@pytest.fixture(scope="module")
def tok(svc):
    return svc.create_sampling_client(MODEL).get_tokenizer()


@pytest.fixture(scope="module")
def base(svc):
    return svc.create_sampling_client(MODEL)


def new_client(svc, rank=8, seed=0, **kw):
    return svc.create_lora_training_client(MODEL, rank=rank, seed=seed, **kw)


def encode(tok, text: str) -> trio.ModelInput:
    return trio.ModelInput.from_ints(tok.encode(text))


def params(**kw) -> trio.SamplingParams:
    kw.setdefault("max_tokens", 8)
    return trio.SamplingParams(**kw)


def grpo_datum(prompt: list[int], seq, advantage: float) -> trio.Datum:
    """The cookbook's alignment: prompt + completion[:-1] in, completion targets."""
    n = len(prompt) - 1
    return trio.Datum(
        model_input=trio.ModelInput.from_ints(prompt + seq.tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": [0] * n + seq.tokens,
            "logprobs": [0.0] * n + seq.logprobs,
            "advantages": [0.0] * n + [advantage] * len(seq.tokens),
        },
    )


def completion_logprob(tc, datum: trio.Datum, prompt_len: int) -> float:
    out = tc.forward([datum], "importance_sampling").result()
    return sum(out.loss_fn_outputs[0]["logprobs"].data[prompt_len - 1 :])


def adapter_tensors(tc) -> dict[str, torch.Tensor]:
    return {k: p.detach().clone() for k, p in tc._host.parameters(tc._adapter).items()}


def sample_one(sampler, tok, text="Q: what is 2+3?\nA:", **kw):
    prompt = tok.encode(text)
    seq = sampler.sample(trio.ModelInput.from_ints(prompt), 1, params(**kw)).result()
    return prompt, seq.sequences[0]


def assert_same_gradient(x: torch.Tensor, y: torch.Tensor, rel: float = 1e-4) -> None:
    """Two gradients equal up to the order of float32 sums
    (``tests/helpers/tensors.py``)."""
    err = rel_err(x, y)
    assert err <= rel, f"gradients differ: |x - y| / |x| = {err:.3e}"


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


def test_a_collected_training_client_shuts_its_worker_thread_down(svc, tok):
    """Each training client runs its calls on a thread of its own; once the client
    is garbage collected (after the calls it queued), that thread ends."""
    import gc

    tc = new_client(svc, seed=4)
    prompt, seq = sample_one(tc.save_weights_and_get_sampling_client(), tok)
    tc.forward_backward([grpo_datum(prompt, seq, 1.0)], "importance_sampling")
    pending = tc.optim_step(trio.AdamParams(learning_rate=1e-2))  # still queued
    executor = tc._executor
    threads = list(executor._threads)
    assert threads and all(t.is_alive() for t in threads)
    del tc
    gc.collect()
    assert pending.result().metrics["step"] == 1.0  # queued calls still run
    for thread in threads:
        thread.join(timeout=30)
    assert executor._shutdown
    assert not any(t.is_alive() for t in threads)


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


# ----------------------------------------------------------------------- sampling


def test_sampler_is_a_snapshot(svc, tok):
    tc = new_client(svc)
    frozen = tc.save_weights_and_get_sampling_client()
    prompt, seq = sample_one(frozen, tok, temperature=0.0, max_tokens=10)
    tc.forward_backward([grpo_datum(prompt, seq, -1.0)], "importance_sampling")
    tc.optim_step(trio.AdamParams(learning_rate=5e-2)).result()
    _, again = sample_one(frozen, tok, temperature=0.0, max_tokens=10)
    assert again.tokens == seq.tokens
    assert again.logprobs == pytest.approx(seq.logprobs, abs=1e-6)
    _, moved = sample_one(
        tc.save_weights_and_get_sampling_client(), tok, temperature=0.0
    )
    assert moved.logprobs[: len(seq.tokens)] != pytest.approx(seq.logprobs, abs=1e-3)


def test_greedy_and_seeded_sampling_are_deterministic(base, tok):
    prompt = encode(tok, "Determinism check:")
    g = [base.sample(prompt, 3, params(temperature=0.0)).result() for _ in range(2)]
    tokens = [s.tokens for s in g[0].sequences]
    assert tokens[0] == tokens[1] == tokens[2] == g[1].sequences[0].tokens
    s1 = base.sample(prompt, 4, params(seed=7)).result()
    s2 = base.sample(prompt, 4, params(seed=7)).result()
    s3 = base.sample(prompt, 4, params(seed=8)).result()
    assert [s.tokens for s in s1.sequences] == [s.tokens for s in s2.sequences]
    assert [s.tokens for s in s1.sequences] != [s.tokens for s in s3.sequences]
    assert len({tuple(s.tokens) for s in s1.sequences}) > 1  # G distinct samples


def test_response_fields(base, tok):
    prompt = encode(tok, "Fields:")
    r = base.sample(prompt, 3, params(max_tokens=5, seed=0)).result()
    assert isinstance(r, SampleResponse) and len(r.sequences) == 3
    assert r.input_tokens == len(prompt) and r.output_tokens == 15
    for s in r.sequences:
        assert s.stop_reason == "length" and len(s.tokens) == len(s.logprobs) == 5
        assert s.text == tok.decode(s.tokens)
    assert (
        base.sample(prompt, 1, params(), return_text=False).result().sequences[0].text
        is None
    )


def test_stop_strings_and_stop_tokens(base, tok):
    prompt = encode(tok, "Stops:")
    free = (
        base.sample(prompt, 1, params(temperature=0.0, max_tokens=12))
        .result()
        .sequences[0]
    )
    # A stop string made of the text of completion tokens 3..4 (spanning tokens).
    stop = tok.decode(free.tokens[3:5])
    cut = base.sample(
        prompt, 1, params(temperature=0.0, max_tokens=12, stop=[stop])
    ).result()
    seq = cut.sequences[0]
    assert seq.stop_reason == "stop"
    assert seq.tokens == free.tokens[: len(seq.tokens)] and len(seq.tokens) <= 5
    assert stop not in seq.text and seq.text == tok.decode(free.tokens)[: len(seq.text)]
    assert free.text.startswith(seq.text + stop)
    by_id = base.sample(
        prompt, 1, params(temperature=0.0, max_tokens=12, stop=[free.tokens[2]])
    )
    seq = by_id.result().sequences[0]
    assert seq.stop_reason == "stop" and seq.tokens == free.tokens[:3]
    assert seq.text == tok.decode(free.tokens[:2])


@pytest.mark.parametrize("kw", [{}, {"temperature": 0.7, "top_p": 0.9, "top_k": 50}])
def test_logprobs_match_teacher_forcing(svc, tok, kw):
    tc = new_client(svc)
    tc.forward_backward(  # move the adapter off zero so LoRA matters
        [
            trio.Datum(
                model_input=encode(tok, "warm up"),
                loss_fn_inputs={"target_tokens": tok.encode("warm up")},
            )
        ]
    )
    tc.optim_step(trio.AdamParams(learning_rate=1e-2))
    sampler = tc.save_weights_and_get_sampling_client()
    prompt = tok.encode("Teacher forcing:")
    resp = sampler.sample(
        trio.ModelInput.from_ints(prompt), 4, params(max_tokens=12, seed=0, **kw)
    ).result()
    data = [grpo_datum(prompt, s, 1.0) for s in resp.sequences]
    out = tc.forward(data, "importance_sampling").result()
    for seq, o in zip(resp.sequences, out.loss_fn_outputs, strict=True):
        train = o["logprobs"].data[len(prompt) - 1 :]
        assert train == pytest.approx(seq.logprobs, abs=1e-4)
    plp = sampler.compute_logprobs(trio.ModelInput.from_ints(prompt)).result()
    ce = tc.forward(
        [
            trio.Datum(
                model_input=trio.ModelInput.from_ints(prompt[:-1]),
                loss_fn_inputs={"target_tokens": prompt[1:]},
            )
        ]
    ).result()
    assert plp[0] is None
    assert plp[1:] == pytest.approx(ce.loss_fn_outputs[0]["logprobs"].data, abs=1e-4)


def test_batched_equals_unbatched(base, tok):
    prompts = [
        encode(tok, t)
        for t in ["Short.", "A somewhat longer prompt here, yes.", "Mid size prompt"]
    ]

    scheduler = base._host.scheduler
    for p in (params(temperature=0.0, max_tokens=10), params(seed=11, max_tokens=10)):
        before = scheduler.batches
        with scheduler.hold():  # all three queued before any batch starts
            futures = [base.sample(x, 3, p) for x in prompts]
        together = [f.result() for f in futures]
        assert scheduler.batches == before + 1  # one batched generation
        alone = [base.sample(x, 3, p).result() for x in prompts]
        for a, b in zip(together, alone, strict=True):
            assert [s.tokens for s in a.sequences] == [s.tokens for s in b.sequences]
            for sa, sb in zip(a.sequences, b.sequences, strict=True):
                assert sa.logprobs == pytest.approx(sb.logprobs, abs=1e-4)


def test_prompt_logprobs_and_topk(base, tok):
    prompt = encode(tok, "Prompt logprobs here")
    r = base.sample(
        prompt,
        1,
        params(max_tokens=2),
        include_prompt_logprobs=True,
        topk_prompt_logprobs=3,
    ).result()
    assert len(r.prompt_logprobs) == len(prompt) and r.prompt_logprobs[0] is None
    assert r.topk_prompt_logprobs[0] is None and len(r.topk_prompt_logprobs[1]) == 3
    ids = prompt.to_ints()
    for t in range(1, len(ids)):
        best = r.topk_prompt_logprobs[t][0][1]
        assert r.prompt_logprobs[t] <= best + 1e-6


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


# ----------------------------------------------------------------------- checkpoints


def test_saved_weights_reload_in_a_fresh_process(svc, tok, tmp_path):
    tc = new_client(svc)
    tc.forward_backward(
        [
            trio.Datum(
                model_input=encode(tok, "x y z"),
                loss_fn_inputs={"target_tokens": tok.encode("x y z")},
            )
        ]
    )
    tc.optim_step(trio.AdamParams(learning_rate=1e-2))
    saved = tc.save_weights_for_sampler("reload-me").result()
    assert saved.path.startswith("local://") and saved.size > 0 and saved.model == MODEL
    here = svc.create_sampling_client(MODEL, model_path=saved.path)
    prompt = tok.encode("Reload:")
    mine = here.sample(
        trio.ModelInput.from_ints(prompt), 2, params(temperature=0.0)
    ).result()
    script = textwrap.dedent(
        f"""
        import json, pytrio as trio
        from grpo_helpers.engines import connect
        sc = connect("local", run_dir={str(tmp_path)!r}).create_sampling_client(
            {MODEL!r}, model_path={saved.path!r})
        r = sc.sample(trio.ModelInput.from_ints({prompt!r}), 2,
                      trio.SamplingParams(max_tokens=8, temperature=0.0)).result()
        print(json.dumps([[s.tokens, s.logprobs] for s in r.sequences]))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    for (tokens, lps), seq in zip(theirs, mine.sequences, strict=True):
        assert tokens == seq.tokens
        assert lps == pytest.approx(seq.logprobs, abs=1e-5)
    # The checkpoint is a peft adapter directory too.
    path = Path(saved.path.removeprefix("local://"))
    assert {"adapter_model.safetensors", "adapter_config.json"} <= {
        f.name for f in path.iterdir()
    }
    # And differs from the base model.
    base_seq = (
        svc.create_sampling_client(MODEL)
        .sample(trio.ModelInput.from_ints(prompt), 1, params(temperature=0.0))
        .result()
    )
    assert base_seq.sequences[0].logprobs != pytest.approx(
        mine.sequences[0].logprobs, abs=1e-4
    )


def test_resume_with_optimizer_equals_uninterrupted(svc, tok):
    data = [
        trio.Datum(
            model_input=trio.ModelInput.from_ints(tok.encode(t)[:-1]),
            loss_fn_inputs={"target_tokens": tok.encode(t)[1:]},
        )
        for t in ["resume test one", "and a second sequence"]
    ]
    adam = trio.AdamParams(learning_rate=1e-2)

    def step(tc, i):
        tc.forward_backward([data[i % 2]])
        return tc.optim_step(adam).result()

    straight = new_client(svc, seed=9)
    for i in range(4):
        step(straight, i)
    first = new_client(svc, seed=9)
    for i in range(2):
        step(first, i)
    saved = first.save_state("resume-point").result()
    assert saved.type == "save-checkpoint"
    resumed = new_client(svc, seed=123)  # different init: load_state must overwrite it
    resumed.load_state_with_optimizer(saved.path).result()
    assert resumed.step == 2
    for i in range(2, 4):
        step(resumed, i)
    a, b = adapter_tensors(straight), adapter_tensors(resumed)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    # Weights only (fresh Adam) gives a different trajectory.
    weights_only = new_client(svc, seed=9)
    weights_only.load_state(saved.path).result()
    for i in range(2, 4):
        step(weights_only, i)
    c = adapter_tensors(weights_only)
    assert not all(torch.allclose(a[k], c[k], atol=1e-6) for k in a)
    from_state = svc.create_training_client_from_state_with_optimizer(saved.path)
    assert from_state.step == 2 and from_state.lora.rank == 8


def test_save_state_refuses_to_overwrite_unless_asked(svc):
    tc = new_client(svc)
    tc.save_state("twice").result()
    with pytest.raises(trio.PyTrioError, match="already exists"):
        tc.save_state("twice").result()
    assert tc.save_state("twice", overwrite=True).result().path.endswith("/state/twice")


def test_load_state_checks_config_and_timing(svc, tok):
    tc = new_client(svc, rank=8)
    path = tc.save_state("rank-8").result().path
    other = new_client(svc, rank=16)
    with pytest.raises(trio.PyTrioError, match="lora_rank"):
        other.load_state(path)
    with pytest.raises(trio.PyTrioError, match="cannot be called after training"):
        tc.load_state(path)
    with pytest.raises(trio.PyTrioError, match="not a local-engine checkpoint"):
        svc.create_sampling_client(MODEL, model_path="trio://run/weights/x")
    with pytest.raises(trio.PyTrioError, match="No local-engine checkpoint"):
        svc.create_sampling_client(MODEL, model_path="local:///nonexistent/ckpt")


def test_capabilities(svc):
    names = svc.get_supported_models()
    assert MODEL in names
    caps = svc.get_server_capabilities()
    assert {m.model_name for m in caps.supported_models} == set(names)
    assert asyncio.run(svc.get_server_capabilities_async()) == caps


def test_dropped_training_clients_release_their_adapter(svc, tok):
    import gc

    tc = new_client(svc)
    host, name = tc._host, tc._adapter
    assert name in host.peft.peft_config
    del tc
    gc.collect()
    svc.create_sampling_client(MODEL).sample(encode(tok, "gc"), 1, params()).result()
    assert name not in host.peft.peft_config


def test_adapter_on_attention_only(svc, tok):
    tc = new_client(svc, rank=4, train_mlp=False, train_unembed=False)
    names = set(tc._host.parameters(tc._adapter))
    assert names and all("self_attn" in n for n in names)
    out = tc.forward_backward(
        [
            trio.Datum(
                model_input=encode(tok, "attn"),
                loss_fn_inputs={"target_tokens": tok.encode("attn")},
            )
        ]
    ).result()
    assert out.metrics["token_count"] == len(tok.encode("attn"))


def test_only_the_base_sampler_says_it_is_the_base_model(svc, base) -> None:
    assert base.is_base  # evaluation reuses recorded answers only for this one
    assert not new_client(svc).save_weights_and_get_sampling_client().is_base


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
