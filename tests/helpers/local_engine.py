"""What the local engine's tests share: tiny-random clients, Datums, samples, and
the comparison of two paths that must give the same numbers.

``new_client``, ``perturbed_client`` (a LoRA whose B matrices are not zero, so the
adapter matters), ``grpo_datum`` and ``grpo_batch`` make what a test trains on;
``run_both`` trains one batch on the plain and on the shared-prefix path and
checks, with the engine's counters, which path each side took; ``assert_same``
compares the two; ``batched_samples`` and ``uneven_batch`` sample in one batch of
the sampler's queue.
"""

from __future__ import annotations

import pytest
import pytrio as trio
import torch
from tensors import rel_err

from grpo_helpers.datum import RolloutSample, build_grpo_datum
from grpo_helpers.engines import connect
from grpo_helpers.local import counters
from grpo_helpers.local.decoder import MergedLlamaDecoder

MODEL = "tiny-random"


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


LOSSES = ["cross_entropy", "importance_sampling", "ppo", "cispo"]


# Adam divides each gradient by its own size: with a tiny eps, float noise in a
# gradient that is ~0 becomes a full-size step of either sign. A larger eps keeps
# the step a smooth function of the gradient, so "same gradient, same step" holds.
ADAM = trio.AdamParams(learning_rate=1e-3, eps=1e-4)


def engine(tmp_path, **options):
    return connect("local", run_dir=tmp_path, **options)


def perturbed_client(service, seed=0, rank=8, scale=0.05):
    """A LoRA client whose B matrices are not zero, so the adapter matters."""
    tc = service.create_lora_training_client(MODEL, rank=rank, seed=seed)
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for name, p in sorted(tc._host.parameters(tc._adapter).items()):
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen).to(p.dtype) * scale)
    return tc


def random_tokens(gen, n):
    return torch.randint(10, 49000, (n,), generator=gen).tolist()


def policy_datum(prompt, completion, advantage, gen):
    """The series' layout (build_grpo_datum): prompt + completion[:-1]."""
    logprobs = (-torch.rand(len(completion), generator=gen) * 4).tolist()
    sample = RolloutSample(completion, logprobs, "", 0.0, advantage)
    return build_grpo_datum(prompt, sample)


def demo_datum(prompt, completion, advantage, gen):
    """The demo scripts' layout, as plain lists (prompt positions: 0, 0.0, 0.0)."""
    n = len(prompt) - 1
    logprobs = (-torch.rand(len(completion), generator=gen) * 4).tolist()
    return trio.Datum(
        model_input=trio.ModelInput.from_ints(prompt + completion[:-1]),
        loss_fn_inputs={
            "target_tokens": [0] * n + completion,
            "logprobs": [0.0] * n + logprobs,
            "advantages": [0.0] * n + [advantage] * len(completion),
        },
    )


def grpo_batch(layout, seed=0, prompts=2, group=4):
    """``prompts`` prompts x ``group`` completions of mixed lengths (1 to 11)."""
    gen = torch.Generator().manual_seed(seed)
    make = policy_datum if layout == "series" else demo_datum
    data = []
    for _ in range(prompts):
        prompt = random_tokens(gen, 30)
        for i in range(group):
            length = int(torch.randint(1, 12, (1,), generator=gen))
            completion = random_tokens(gen, length)
            data.append(make(prompt, completion, float(i) - (group - 1) / 2, gen))
    return data


def run_both(tmp_path, data, loss, backward=True, auto_shift=False, **options):
    """(output, grads, weights after one step) for the plain and the shared path.

    Also checks which path ran: the plain engine never shares a batch_plan, and the
    shared engine trains at least one group on a prefix computed once (otherwise
    the comparison would be the plain path against itself). ``run_both.seen``
    keeps the counters of the shared side for tests that need more."""
    results = []
    for shared in (False, True):
        svc = engine(tmp_path, shared_prefix=shared, **options)
        tc = perturbed_client(svc)
        with counters.counting() as seen:
            if backward:
                out = tc.forward_backward(data, loss, auto_shift=auto_shift).result()
                grads = {k: p.grad.clone() for k, p in named(tc)}
                tc.optim_step(ADAM).result()
            else:
                out = tc.forward(data, loss, auto_shift=auto_shift).result()
                grads = {}
        if shared:
            assert seen["training_shared_groups"] >= 1, seen
            run_both.seen = seen
        else:
            assert seen["training_shared_groups"] == 0, seen
            assert seen["training_plain_batches"] >= 1, seen
        weights = {k: p.detach().clone() for k, p in named(tc)}
        results.append((out, grads, weights))
    return results


def named(tc):
    return tc._host.parameters(tc._adapter).items()


def assert_same(plain, shared, grads=True, loss_scale=0.1):
    """Equal to 1e-5 relative. ``loss_scale``: the size of the summed per-token
    losses, for a ``loss_sum`` that cancels to near zero."""
    (out_a, grads_a, w_a), (out_b, grads_b, w_b) = plain, shared
    assert out_a.metrics["token_count"] == out_b.metrics["token_count"]
    assert out_b.metrics["loss_sum"] == pytest.approx(
        out_a.metrics["loss_sum"], rel=1e-5, abs=1e-5 * loss_scale
    )
    for x, y in zip(out_a.loss_fn_outputs, out_b.loss_fn_outputs, strict=True):
        lx = torch.tensor(x["logprobs"].data)
        ly = torch.tensor(y["logprobs"].data)
        assert lx.shape == ly.shape
        assert rel_err(lx, ly) < 1e-5
    if grads:
        assert grads_a.keys() == grads_b.keys() and grads_a
        total = torch.cat([g.flatten() for g in grads_a.values()])
        other = torch.cat([grads_b[k].flatten() for k in grads_a])
        assert float(total.norm()) > 0
        # The whole gradient to 1e-5; one tensor at a time, float32 sums in another
        # order (the prefix's key/value gradient is summed over its expansions)
        # leave up to ~2e-5 on SmolLM2's 30 layers.
        assert rel_err(total, other) < 1e-5
        for k in grads_a:
            assert rel_err(grads_a[k], grads_b[k]) < 1e-4, k
        # After one Adam step. Adam divides each element by its own size, so an
        # element whose gradient is near eps turns small float differences into
        # larger step differences: the weights agree to 1e-5 as a whole, 1e-3 each.
        weights = torch.cat([w.flatten() for w in w_a.values()])
        assert rel_err(weights, torch.cat([w_b[k].flatten() for k in w_a])) < 1e-5
        for k in w_a:
            assert rel_err(w_a[k], w_b[k]) < 1e-3, k


# ------------------------------------------------------------------ merged sampler


def sample(sampler, prompt, n=3, **kw):
    kw.setdefault("max_tokens", 12)
    kw.setdefault("seed", 5)
    response = sampler.sample(
        trio.ModelInput.from_ints(prompt), n, trio.SamplingParams(**kw)
    ).result()
    return [(s.tokens, s.logprobs) for s in response.sequences]


def teacher_forced(tc, prompt, tokens):
    n = len(prompt) - 1
    datum = trio.Datum(
        model_input=trio.ModelInput.from_ints(prompt + tokens[:-1]),
        loss_fn_inputs={"target_tokens": [0] * n + tokens},
    )
    return tc.forward([datum]).result().loss_fn_outputs[0]["logprobs"].data[n:]


# ------------------------------------------------------- shared prompt prefix, sampling


def batched_samples(sampler, prompts, shared, **kw):
    """Sample every prompt in one batch (scheduler.hold); (tokens, logprobs) per
    completion, per prompt. ``shared``: whether that batch must prefill the
    prompts' common start once (checked with the engine's counters)."""
    scheduler = sampler._host.scheduler
    params = trio.SamplingParams(max_tokens=10, seed=7, **kw)
    batches = scheduler.batches
    with counters.counting() as seen:
        with scheduler.hold():
            futures = [
                sampler.sample(trio.ModelInput.from_ints(p), 2, params) for p in prompts
            ]
        responses = [f.result() for f in futures]
    assert scheduler.batches == batches + 1  # one batch: the path under test
    assert seen["sampling_shared_prefills"] == (1 if shared else 0), seen
    assert seen["sampling_plain_prefills"] == (0 if shared else 1), seen
    return [[(s.tokens, s.logprobs) for s in r.sequences] for r in responses]


def same_until_a_cdf_boundary(ta, tb, temperature):
    """How many leading tokens two samples of the same weights, seed and prompt share.

    Greedy decoding must agree everywhere. A draw (``sampling.draw``) inverts the
    cumulative sum of the probabilities over the vocabulary in id order, so logits that
    differ in their last bits (the shared and the plain prefill add up in different
    orders) change a token only when the uniform number falls on the border between
    two neighbours: the two tokens then differ by exactly one id. The tiny random
    model's near-uniform distribution over 49k tokens makes that border close (CI saw
    7876 against 7877 once in a while). Any other difference is a bug.
    """
    if ta == tb:
        return len(ta)
    assert temperature > 0, (ta, tb)
    first = next(
        (i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), None
    )
    assert first is not None, ("one stopped early", ta, tb)
    assert abs(ta[first] - tb[first]) == 1, (first, ta, tb)
    return first


# ------------------------------------------- packed products and the prompt memory


def sampler_and_decoder(tmp_path, monkeypatch, packing, memory):
    """A merged sampler of perturbed weights, its decoder's shortcuts set as asked
    (the host and its decoder serve the whole process: monkeypatch restores them)."""
    svc = engine(tmp_path)
    tc = perturbed_client(svc)
    sampler = tc.save_weights_and_get_sampling_client()
    sample(sampler, [5, 6, 7], n=1, max_tokens=1)  # builds the merged decoder
    decoder = tc._host._merged
    assert isinstance(decoder, MergedLlamaDecoder)
    monkeypatch.setattr(decoder, "packing", packing)
    monkeypatch.setattr(decoder, "memory", memory)
    return tc, sampler, decoder


def uneven_batch(sampler, prompts, **kw):
    """One batch whose requests stop at different lengths (16, 20, 26 tokens), so
    rows finish while others decode; (tokens, logprobs) per completion, and the
    counters the batch moved."""
    scheduler = sampler._host.scheduler
    with counters.counting() as seen:
        with scheduler.hold():
            futures = [
                sampler.sample(
                    trio.ModelInput.from_ints(p),
                    3,
                    trio.SamplingParams(max_tokens=n, seed=11 + n, **kw),
                )
                for p, n in zip(prompts, (16, 20, 26), strict=True)
            ]
        responses = [f.result() for f in futures]
    return [[(s.tokens, s.logprobs) for s in r.sequences] for r in responses], seen
