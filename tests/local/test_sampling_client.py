"""grpo_helpers.local.sampling_client: completions and logprobs from frozen
weights, as PyTRIO's ``SamplingClient`` gives them.

Samplers are snapshots; greedy and seeded sampling are deterministic; sampled
logprobs equal teacher forcing; a batch equals its requests alone; stops, prompt
logprobs and top-k; the sampler rejects what PyTRIO rejects, with PyTRIO's errors.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import pytrio as trio
from local_engine import (
    MODEL,
    encode,
    engine,
    grpo_batch,
    grpo_datum,
    new_client,
    params,
    perturbed_client,
    sample,
    sample_one,
)
from pytrio.errors.base import ValidationError
from pytrio.types import SampleResponse

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


def test_only_the_base_sampler_says_it_is_the_base_model(svc, base) -> None:
    assert base.is_base  # evaluation reuses recorded answers only for this one
    assert not new_client(svc).save_weights_and_get_sampling_client().is_base


@pytest.fixture(scope="module")
def sc(svc):
    return svc.create_sampling_client(MODEL)


@pytest.mark.parametrize("max_tokens", [None, 0, -3])
def test_max_tokens_required_and_positive(sc, max_tokens):
    prompt = trio.ModelInput.from_ints([1, 2, 3])
    with pytest.raises(ValidationError, match="max_tokens must be greater than 0"):
        sc.sample(prompt, 1, trio.SamplingParams(max_tokens=max_tokens))


def test_default_sampling_params_fail_like_pytrio(sc):
    with pytest.raises(ValidationError, match="max_tokens must be greater than 0"):
        sc.sample(trio.ModelInput.from_ints([1, 2]))


def test_empty_prompt(sc):
    with pytest.raises(ValidationError, match="prompt cannot be empty") as e:
        sc.sample(trio.ModelInput.from_ints([]), 1, trio.SamplingParams(max_tokens=2))
    assert e.value.code == "validation.empty_prompt"
    with pytest.raises(ValidationError, match="prompt cannot be empty"):
        sc.compute_logprobs(trio.ModelInput.from_ints([]))


def test_num_samples_at_least_one(sc):
    with pytest.raises(ValidationError, match="invalid sampling request"):
        sc.sample(
            trio.ModelInput.from_ints([1, 2]), 0, trio.SamplingParams(max_tokens=2)
        )


def test_sample_async_validates_too(sc):
    with pytest.raises(ValidationError):
        asyncio.run(
            sc.sample_async(trio.ModelInput.from_ints([1]), 1, trio.SamplingParams())
        )


def test_prompt_token_outside_vocabulary(sc):
    vocab = len(sc.get_tokenizer())
    with pytest.raises(ValidationError, match="outside the tokenizer vocabulary"):
        sc.sample(
            trio.ModelInput.from_ints([1, vocab]), 1, trio.SamplingParams(max_tokens=1)
        )


def test_samplers_are_isolated_snapshots(tmp_path):
    svc = engine(tmp_path)
    tc = perturbed_client(svc)
    prompt = [11, 12, 13, 14]
    old = tc.save_weights_and_get_sampling_client()
    before = sample(old, prompt)
    data = grpo_batch("series", prompts=1)
    for _ in range(3):
        tc.forward_backward(data, "importance_sampling")
        tc.optim_step(trio.AdamParams(learning_rate=5e-2)).result()
    new = tc.save_weights_and_get_sampling_client()
    after_new = sample(new, prompt)
    assert sample(old, prompt) == before  # training did not reach the old sampler
    assert after_new != before
    assert sample(new, prompt) == after_new  # alternating re-merges the right one
    base = svc.create_sampling_client(MODEL)
    plain_base = engine(tmp_path, merged_sampler=False).create_sampling_client(MODEL)
    greedy = {"temperature": 0.0}
    assert (
        sample(base, prompt, **greedy)[0][0]
        == sample(plain_base, prompt, **greedy)[0][0]
    )


def test_concurrent_samplers_of_different_weights(tmp_path):
    svc = engine(tmp_path)
    tc = perturbed_client(svc)
    first = tc.save_weights_and_get_sampling_client()
    tc.forward_backward(grpo_batch("series", prompts=1), "importance_sampling")
    tc.optim_step(trio.AdamParams(learning_rate=5e-2)).result()
    second = tc.save_weights_and_get_sampling_client()
    prompt = [21, 22, 23]
    alone = [sample(s, prompt) for s in (first, second)]

    async def both():
        params = trio.SamplingParams(max_tokens=12, seed=5)
        calls = [
            s.sample_async(trio.ModelInput.from_ints(prompt), 3, params)
            for s in (first, second, first)
        ]
        return await asyncio.gather(*calls)

    together = asyncio.run(both())
    # Batched with other rows, the arithmetic (not the weights) differs slightly.
    for response, want in zip(together, [alone[0], alone[1], alone[0]], strict=True):
        for seq, (tokens, logprobs) in zip(response.sequences, want, strict=True):
            assert seq.tokens == tokens
            np.testing.assert_allclose(seq.logprobs, logprobs, atol=1e-4)
