"""The local engine is correct on any device, checked on the CPU.

Two faults only a GPU shows, pinned here without one:

* **Tensors on the wrong device.** A mask built on the CPU and added to CUDA scores
  raises, but only on a padded batch. The CPU stands in for a GPU: under
  ``torch.device("meta")`` every tensor created *without* saying where lands on the
  meta device, and the first time it meets the model's CPU tensors (or is copied
  back) the call fails, as it would on a GPU. The merged decoder, the plain path,
  the shared-prefix sampling and scoring paths and shared-prefix training all run
  under it.
* **LoRA merged into bfloat16.** The sampler choice is a small pure function,
  checked for each device, dtype and model type; the merged decoder refuses
  low-precision weights; a bfloat16 host samples with the adapter unmerged and
  agrees with its trainer.
"""

from __future__ import annotations

import numpy as np
import pytest
import pytrio as trio
import torch

from grpo_helpers.engines import connect
from grpo_helpers.local import counters
from grpo_helpers.local.decoder import (
    HFDecoder,
    MergedLlamaDecoder,
    choose_sampler,
    key_mask,
    packing_available,
)
from grpo_helpers.local.models import load_model
from grpo_helpers.local.prompt_cache import pad_rows
from grpo_helpers.local.sampling import GenerationRequest, generate

MODEL = "tiny-random"


def perturbed_client(service, seed=0, scale=0.05):
    tc = service.create_lora_training_client(MODEL, rank=4, seed=seed)
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for name, p in sorted(tc._host.parameters(tc._adapter).items()):
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen).to(p.dtype) * scale)
    return tc


def teacher_forced(tc, prompt, tokens):
    n = len(prompt) - 1
    datum = trio.Datum(
        model_input=trio.ModelInput.from_ints(prompt + tokens[:-1]),
        loss_fn_inputs={"target_tokens": [0] * n + tokens},
    )
    return tc.forward([datum]).result().loss_fn_outputs[0]["logprobs"].data[n:]


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


def test_a_bfloat16_host_samples_unmerged_and_agrees_with_its_trainer(tmp_path):
    svc = connect("local", run_dir=tmp_path, dtype=torch.bfloat16)
    tc = perturbed_client(svc)
    host = tc._host
    assert next(host.model.parameters()).dtype == torch.bfloat16
    assert host.sampler_kind == "plain"
    sampler = tc.save_weights_and_get_sampling_client()
    prompt = [11, 12, 13, 14, 15]
    response = sampler.sample(
        trio.ModelInput.from_ints(prompt), 2, trio.SamplingParams(max_tokens=6, seed=3)
    ).result()
    assert host._merged is None  # no merged copy was built
    with host.using(sampler._snapshot) as decoder:
        assert isinstance(decoder, HFDecoder)
    for seq in response.sequences:
        trained = teacher_forced(tc, prompt, seq.tokens)
        # bfloat16 on both sides: agreement to its precision, not float32's
        np.testing.assert_allclose(trained, seq.logprobs, atol=5e-2)


def test_a_float32_merge_on_the_cpu_equals_the_plain_path_on_a_padded_batch(tmp_path):
    """Prompts of unequal length, batched: the merged decoder's padded steps give
    the plain path's completions and logprobs."""
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [15]]
    results = []
    for merged in (True, False):
        svc = connect("local", run_dir=tmp_path, merged_sampler=merged)
        tc = perturbed_client(svc)
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


def _requests(prompts, merged, max_tokens=(4,), **kw):
    """One request of 2 samples per prompt; ``max_tokens`` per prompt, cycled."""
    return [
        GenerationRequest(
            list(p),
            2,
            trio.SamplingParams(max_tokens=n, seed=1, **kw),
            merged=merged,
        )
        for p, n in zip(prompts, max_tokens * len(prompts), strict=False)
    ]


@pytest.mark.parametrize("merged", [True, False])
def test_sampling_creates_no_tensor_off_the_model_device(tmp_path, merged):
    """Under ``torch.device("meta")`` a tensor made without a device is a meta
    tensor: the padded batch, the shared-prefix batch, a prompt recalled from the
    decoder's memory, a batch that keeps its finished rows (packed products) and
    the shared-prefix scoring all fail at once if one of their masks, positions or
    indices is."""
    svc = connect("local", run_dir=tmp_path, merged_sampler=merged)
    tc = perturbed_client(svc)
    host = tc._host
    snapshot = tc.save_weights_and_get_sampling_client()._snapshot
    head = list(range(100, 130))  # a shared prefix longer than MIN_SHARED_PREFIX
    other = list(range(300, 330))
    batches = {
        "padded": _requests([[5, 6, 7], [8, 9, 10, 11, 12, 13], [14]], merged),
        "shared prefix": _requests([head + [1], head + [2, 3, 4]], merged),
        "sampled at T=0.6, top-p": _requests(
            [[5, 6], [7, 8, 9]], merged, temperature=0.6, top_p=0.9
        ),
        # another start than the shared prefix's, which the decoder remembers
        "one prompt": _requests([other + [1, 2]], merged),
        "one prompt that starts alike": _requests([other + [3]], merged),
        # rows of the first request finish while the second's decode (last: the
        # packed row count stays packed for these weights)
        "rows that finish at different steps": _requests(
            [[5, 6, 7], [8, 9]], merged, max_tokens=(17, 21)
        ),
    }
    scoring = [head + [1, 2], head + [3], [40, 41, 42]]
    for r in (scored := _requests(scoring, merged)):
        r.prompt_only = True
    batches["shared-prefix scoring"] = scored
    # the path each batch must take (the engine's counters say which ran)
    shrinking = {"sampling_shrinking_batches": 1}
    packed = merged and packing_available(torch.device("cpu"), torch.float32)
    paths = {
        "padded": {"sampling_plain_prefills": 1, **shrinking},
        "shared prefix": {"sampling_shared_prefills": 1, **shrinking},
        "sampled at T=0.6, top-p": {"sampling_plain_prefills": 1, **shrinking},
        "one prompt": {"sampling_plain_prefills": 1, **shrinking},
        "one prompt that starts alike": {
            f"sampling_{'recalled' if merged else 'plain'}_prefills": 1,
            **shrinking,
        },
        "rows that finish at different steps": {
            "sampling_plain_prefills": 1,
            f"sampling_{'held' if packed else 'shrinking'}_batches": 1,
        },
        "shared-prefix scoring": {
            "scoring_shared_groups": 1,
            "scoring_plain_prompts": 1,
        },
    }
    with host.using(snapshot, merged) as decoder:
        assert isinstance(decoder, MergedLlamaDecoder if merged else HFDecoder)
        for name, requests in batches.items():
            with counters.counting() as seen, torch.device("meta"):
                out = generate(
                    decoder,
                    host.tokenizer,
                    requests,
                    host.eos_token_ids,
                    host.pad_token_id,
                )
            assert len(out) == len(requests), name
            assert {k: v for k, v in seen.items() if v} == paths[name], name


@pytest.mark.parametrize("shared", [True, False])
def test_training_creates_no_tensor_off_the_model_device(tmp_path, shared):
    """Shared-prefix training (a GRPO group's prompt once) and the plain path,
    forward and backward, under the same audit."""
    svc = connect("local", run_dir=tmp_path, shared_prefix=shared)
    tc = perturbed_client(svc)
    prompt = list(range(200, 230))
    data = []
    for i, completion in enumerate([[1, 2, 3], [4, 5], [6, 7, 8, 9]]):
        n = len(prompt) - 1
        data.append(
            trio.Datum(
                model_input=trio.ModelInput.from_ints(prompt + completion[:-1]),
                loss_fn_inputs={
                    "target_tokens": [0] * n + completion,
                    "logprobs": [0.0] * n + [-1.0] * len(completion),
                    "advantages": [0.0] * n + [float(i) - 1.0] * len(completion),
                },
            )
        )
    job = tc._prepare(data, "ppo", None, False)
    with counters.counting() as seen, torch.device("meta"):
        out = tc._run_forward(job, backward=True)
    assert seen["training_shared_groups"] == (1 if shared else 0), seen
    assert seen["training_plain_batches"] == (0 if shared else 1), seen
    assert np.isfinite(out.metrics["loss_sum"])
    grads = [p.grad for p in tc._host.parameters(tc._adapter).values()]
    assert any(g is not None and g.device.type == "cpu" for g in grads)


def test_the_gpu_preset_samples_on_the_plain_path_and_exports_to_trl():
    """presets.GPU (not yet measured on a GPU): a valid run, a model type the
    plain (unmerged) sampler runs in bfloat16, and the same run on TRL."""
    from grpo_helpers import presets
    from grpo_helpers.config import GRPOConfig
    from grpo_helpers.trl import mapping

    settings = {k: v for k, v in presets.GPU.items() if not k.startswith("eval_")}
    config = GRPOConfig(backend="local", **settings)
    assert config.model_name == "Qwen/Qwen2.5-0.5B-Instruct"
    assert choose_sampler("cuda", torch.bfloat16, "qwen2") == "plain"
    assert mapping.refusals(config) == []


def test_doctests_pass():
    import doctest

    from grpo_helpers.local import decoder, sampling

    for module in (decoder, sampling):
        assert doctest.testmod(module).failed == 0, module.__name__
