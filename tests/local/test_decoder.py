"""grpo_helpers.local.decoder: the sampler's forward passes, merged or plain, on
any device.

The merged-weights decoder against teacher forcing on the unmerged adapter; MKL's
packed products and held rows against the plain loop; the preallocated KV cache.
Devices, checked on the CPU: the sampler each device, dtype and model type gets
(never a LoRA merged below float32), the merged decoder refusing low-precision
weights, and a float32 merge equal to the plain path on a padded batch.
"""

from __future__ import annotations

import numpy as np
import pytest
import pytrio as trio
import torch
from local_engine import (
    MODEL,
    engine,
    grpo_batch,
    perturbed_client,
    random_tokens,
    same_until_a_cdf_boundary,
    sample,
    sampler_and_decoder,
    teacher_forced,
    uneven_batch,
)

from grpo_helpers.engines import connect
from grpo_helpers.local.decoder import (
    MergedLlamaDecoder,
    choose_sampler,
    key_mask,
    packing_available,
)
from grpo_helpers.local.models import load_model
from grpo_helpers.local.prompt_cache import pad_rows


def test_preallocated_cache_layer_equals_concatenation():
    from grpo_helpers.local.decoder import PreallocatedLayer

    layer = PreallocatedLayer(capacity=3)
    chunks = [torch.randn(4, 2, n, 5) for n in (2, 1, 3)]  # the last one must grow
    for c in chunks:
        keys, values = layer.update(c, -c)
    assert torch.equal(keys, torch.cat(chunks, dim=2))
    assert torch.equal(values, -torch.cat(chunks, dim=2))
    assert layer.get_seq_length() == 6
    layer.batch_select_indices(torch.tensor([3, 1]))
    assert torch.equal(layer.keys, torch.cat(chunks, dim=2)[[3, 1]])
    keys, _ = layer.update(torch.ones(2, 2, 1, 5), torch.ones(2, 2, 1, 5))
    assert keys.shape == (2, 2, 7, 5) and torch.equal(
        keys[:, :, -1], torch.ones(2, 2, 5)
    )


@pytest.mark.parametrize("merged", [True, False])
def test_sampled_logprobs_match_teacher_forcing(tmp_path, merged):
    svc = engine(tmp_path, merged_sampler=merged)
    tc = perturbed_client(svc, scale=0.05)
    prompt = random_tokens(torch.Generator().manual_seed(1), 20)
    for tokens, logprobs in sample(tc.save_weights_and_get_sampling_client(), prompt):
        np.testing.assert_allclose(
            teacher_forced(tc, prompt, tokens), logprobs, atol=1e-4
        )


def test_merged_and_plain_samplers_agree_greedily(tmp_path):
    prompts = [random_tokens(torch.Generator().manual_seed(s), 15) for s in (1, 2)]
    outputs = []
    for merged in (True, False):
        svc = engine(tmp_path, merged_sampler=merged)
        sc = perturbed_client(svc).save_weights_and_get_sampling_client()
        outputs.append([sample(sc, p, temperature=0.0) for p in prompts])
    for a, b in zip(*outputs, strict=True):
        for (ta, la), (tb, lb) in zip(a, b, strict=True):
            assert ta == tb
            np.testing.assert_allclose(la, lb, atol=1e-4)


def test_merged_sampler_uses_the_merged_decoder(tmp_path):
    svc = engine(tmp_path)
    tc = perturbed_client(svc)
    sample(tc.save_weights_and_get_sampling_client(), [5, 6, 7])
    decoder = tc._host._merged
    assert isinstance(decoder, MergedLlamaDecoder)
    # One merged copy per host, however many samplers: about the model's size.
    for _ in range(3):
        tc.forward_backward(grpo_batch("series", prompts=1), "importance_sampling")
        tc.optim_step(trio.AdamParams(learning_rate=1e-2))
        sample(tc.save_weights_and_get_sampling_client(), [5, 6, 7])
    assert tc._host._merged is decoder
    params = sum(p.numel() * p.element_size() for p in tc._host.model.parameters())
    assert decoder.nbytes() <= params


def test_merged_decoder_refuses_models_it_cannot_run():
    class Config:
        model_type = "llama"
        attention_bias = True

    class Model:
        config = Config()

    assert not MergedLlamaDecoder.supports(Model())
    Config.attention_bias = False
    Config.model_type = "gpt2"
    assert not MergedLlamaDecoder.supports(Model())


def test_packed_products_give_the_plain_products_numbers():
    """MKL's packed product against the engine's plain one, at every packed row
    count, on the tiny model's weights (SmolLM2's: ``bench/packed_linear.py``)."""
    from grpo_helpers.local import decoder as dec_mod
    from grpo_helpers.local.models import load_model

    model, _ = load_model(MODEL)
    dec = MergedLlamaDecoder(model)
    if not dec.packing:
        pytest.skip("this torch build has no MKL packed products")
    gen = torch.Generator().manual_seed(0)
    for rows in (2, 8, 16):
        assert dec.prepare(rows, steps=dec_mod.MIN_PACKED_STEPS)
        for weight in dec.weights():
            x = torch.randn(rows, weight.shape[1], generator=gen)
            np.testing.assert_allclose(
                dec._mm(x, weight, True), dec_mod._linear(x, weight), atol=1e-5
            )
    # Not worth it: too few steps, one row, or more rows than PACKED_ROWS.
    assert not dec.prepare(4, steps=dec_mod.MIN_PACKED_STEPS - 1)
    assert not dec.prepare(1, steps=100)
    assert not dec.prepare(dec_mod.PACKED_ROWS[1] + 1, steps=100)
    # Other weights drop the packed copies: they held the old weights.
    assert dec._packed
    dec._fill(None)
    assert not dec._packed and not dec.prepare(16, steps=1)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_held_rows_and_packed_products_sample_what_the_plain_loop_samples(
    tmp_path, monkeypatch, temperature
):
    """Finished rows kept in the batch (fed padding) and packed products change no
    completion: tokens and logprobs are those of the shrinking batch on plain
    products, and the logprobs equal teacher forcing."""
    gen = torch.Generator().manual_seed(4)
    prompts = [random_tokens(gen, n) for n in (7, 12, 9)]
    tc, sampler, decoder = sampler_and_decoder(
        tmp_path, monkeypatch, packing=False, memory=False
    )
    plain, seen = uneven_batch(sampler, prompts, temperature=temperature)
    assert seen["sampling_shrinking_batches"] == 1, seen
    packing_on = packing_available(torch.device("cpu"), torch.float32)
    if packing_on:
        decoder.packing = True
    else:  # no MKL: keep the rows in the batch all the same, on plain products
        monkeypatch.setattr(decoder, "prepare", lambda rows, steps: True)
    held, seen = uneven_batch(sampler, prompts, temperature=temperature)
    assert seen["sampling_held_batches"] == 1, seen
    if packing_on:
        assert decoder._packed_rows == 9  # 3 requests x 3 samples
    for prompt, a, b in zip(prompts, plain, held, strict=True):
        for (ta, la), (tb, lb) in zip(a, b, strict=True):
            same = same_until_a_cdf_boundary(ta, tb, temperature)
            np.testing.assert_allclose(la[:same], lb[:same], atol=1e-4)
            np.testing.assert_allclose(teacher_forced(tc, prompt, tb), lb, atol=1e-4)
    assert [len(t) for t, _ in held[0]] == [16] * 3  # each request's own length
    # New weights at the same row count: packed again from them, not the old ones.
    tc.forward_backward(grpo_batch("series", prompts=1), "importance_sampling")
    tc.optim_step(trio.AdamParams(learning_rate=1e-2))
    again, seen = uneven_batch(
        tc.save_weights_and_get_sampling_client(), prompts, temperature=temperature
    )
    assert seen["sampling_held_batches"] == 1, seen
    for prompt, group in zip(prompts, again, strict=True):
        for tokens, logprobs in group:
            np.testing.assert_allclose(
                teacher_forced(tc, prompt, tokens), logprobs, atol=1e-4
            )


# ------------------------------------------------------------------ sampler choice

F32, F64, BF16, F16 = torch.float32, torch.float64, torch.bfloat16, torch.float16


@pytest.mark.parametrize(
    ("device", "dtype", "model_type", "merged", "expected"),
    [
        # the CPU defaults (float32): merged for a Llama-style model
        ("cpu", F32, "llama", True, "merged"),
        ("cpu", F64, "llama", True, "merged"),
        # the GPU defaults (bfloat16): never merged, the adapter stays unmerged
        ("cuda", BF16, "llama", True, "plain"),
        ("cuda:1", F16, "llama", True, "plain"),
        ("cpu", BF16, "llama", True, "plain"),
        # float32 on a GPU merges in float32
        ("cuda:0", F32, "llama", True, "merged"),
        # other architectures (Qwen2.5 of the GPU preset) run the plain path
        ("cuda", BF16, "qwen2", True, "plain"),
        ("cpu", F32, "qwen2", True, "plain"),
        ("cpu", F32, None, True, "plain"),
        # devices the merged decoder is not checked on
        ("mps", F32, "llama", True, "plain"),
        # the service asked for the plain path
        ("cpu", F32, "llama", False, "plain"),
    ],
)
def test_choose_sampler_picks_the_documented_sampler(
    device, dtype, model_type, merged, expected
):
    assert choose_sampler(device, dtype, model_type, merged) == expected
    assert choose_sampler(torch.device(device), dtype, model_type, merged) == expected


def test_a_bfloat16_merge_would_round_a_lora_delta_away():
    """Why low precision is never merged: a step's LoRA delta (1e-5 to 1e-4) added
    to weights near 0.02 in bfloat16 mostly vanishes."""
    weights = torch.full((1000,), 0.02) + torch.linspace(-0.005, 0.005, 1000)
    delta = torch.full_like(weights, 3e-5)
    merged_bf16 = weights.bfloat16() + delta.bfloat16()
    lost = (merged_bf16 == weights.bfloat16()).float().mean()
    assert lost > 0.5  # more than half the weights did not move at all
    merged_f32 = weights + delta
    assert torch.allclose(merged_f32 - weights, delta, atol=1e-9)


def test_the_merged_decoder_refuses_weights_below_float32():
    model, _ = load_model(MODEL, device="cpu", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="refuses torch.bfloat16 weights"):
        MergedLlamaDecoder(model)


def test_a_float32_merge_on_the_cpu_equals_the_plain_path_on_a_padded_batch(tmp_path):
    """Prompts of unequal length, batched: the merged decoder's padded steps give
    the plain path's completions and logprobs."""
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [15]]
    results = []
    for merged in (True, False):
        svc = connect("local", run_dir=tmp_path, merged_sampler=merged)
        tc = perturbed_client(svc, rank=4)
        if merged:
            assert tc._host.sampler_kind == "merged"
        sampler = tc.save_weights_and_get_sampling_client()
        scheduler = tc._host.scheduler
        params = trio.SamplingParams(max_tokens=8, seed=7, temperature=0.0)
        with scheduler.hold():
            futures = [
                sampler.sample(trio.ModelInput.from_ints(p), 2, params) for p in prompts
            ]
        results.append(
            [[(s.tokens, s.logprobs) for s in f.result().sequences] for f in futures]
        )
        if merged:
            assert isinstance(tc._host._merged, MergedLlamaDecoder)
    for a, b in zip(*results, strict=True):
        for (ta, la), (tb, lb) in zip(a, b, strict=True):
            assert ta == tb
            np.testing.assert_allclose(la, lb, atol=1e-4)


# ------------------------------------------------------------------ device audit


def test_pad_rows_and_key_mask_create_their_tensors_on_the_given_device():
    ids, mask = pad_rows([[1, 2], [3]], 4, 0, "meta")
    assert ids.device.type == "meta" and mask.device.type == "meta"
    assert ids.shape == mask.shape == (2, 4)
    ids, mask = pad_rows([[1, 2], [3]], 3, 9, "cpu", side="right")
    assert ids.tolist() == [[1, 2, 9], [3, 9, 9]]
    assert mask.tolist() == [[1, 1, 0], [1, 0, 0]]
    padded = torch.tensor([[0, 1, 1], [1, 1, 1]])
    mask = key_mask(padded, torch.float32)
    assert mask.shape == (2, 1, 1, 3) and mask.device == padded.device
    assert key_mask(torch.ones(2, 3, dtype=torch.long), torch.float32) is None
    with pytest.raises(ValueError, match="side"):
        pad_rows([[1]], 1, 0, "cpu", side="middle")


def test_doctests_pass():
    import doctest

    from grpo_helpers.local import decoder, sampling

    for module in (decoder, sampling):
        assert doctest.testmod(module).failed == 0, module.__name__
