"""grpo_helpers.local.forward: shared-prefix training changes no number a caller
sees.

Shared-prefix training (``shared_prefix=True``) against the plain path, which runs
every Datum on its own: logprobs, ``loss_sum``, ``token_count``, gradients and the
weights after one ``optim_step``, for every loss, with and without backward. The
path is chosen by a cost estimate, so every comparison also checks, with the
engine's counters (``grpo_helpers.local.counters``), that the shared path ran on
one side and only the plain path on the other. Under ``torch.device("meta")``
training creates no tensor off the model's device (the CPU stands in for a GPU).
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import pytrio as trio
import torch
from local_engine import (
    ADAM,
    LOSSES,
    MODEL,
    assert_same,
    engine,
    grpo_batch,
    named,
    perturbed_client,
    random_tokens,
    run_both,
    teacher_forced,
)

from grpo_helpers.datum import build_grpo_datum
from grpo_helpers.engines import connect
from grpo_helpers.local import counters


def as_cross_entropy(datum, gen):
    """Same tokens; weights on every position, the prompt's included."""
    targets = datum.loss_fn_inputs["target_tokens"].tolist()
    weights = torch.rand(len(targets), generator=gen).tolist()
    return trio.Datum(
        model_input=datum.model_input,
        loss_fn_inputs={"target_tokens": targets, "weights": weights},
    )


# ------------------------------------------------------------------ shared = plain


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("layout", ["series", "demo"])
def test_shared_prefix_equals_plain_path(tmp_path, loss, layout):
    gen = torch.Generator().manual_seed(7)
    data = grpo_batch(layout, seed=len(loss))
    if loss == "cross_entropy":
        data = [as_cross_entropy(d, gen) for d in data]
    plain, shared = run_both(tmp_path, data, loss)
    assert_same(plain, shared)


@pytest.mark.parametrize("loss", LOSSES)
def test_shared_prefix_forward_without_backward(tmp_path, loss):
    plain, shared = run_both(tmp_path, grpo_batch("series"), loss, backward=False)
    assert_same(plain, shared, grads=False)


def test_shared_prefix_when_one_input_is_a_prefix_of_another(tmp_path):
    gen = torch.Generator().manual_seed(11)
    long = random_tokens(gen, 40)
    data = [
        trio.Datum(
            model_input=trio.ModelInput.from_ints(long[:n]),
            loss_fn_inputs={
                "target_tokens": long[1 : n + 1],
                "weights": torch.rand(n, generator=gen).tolist(),
            },
        )
        for n in (24, 30, 39, 39)
    ]
    plain, shared = run_both(tmp_path, data, "cross_entropy")
    assert_same(plain, shared)


def test_shared_prefix_with_auto_shift(tmp_path):
    gen = torch.Generator().manual_seed(5)
    prompt = random_tokens(gen, 25)
    sequences = [prompt + random_tokens(gen, n) for n in (3, 8, 1)]
    data = [
        trio.Datum(
            model_input=trio.ModelInput.from_ints(tokens),
            loss_fn_inputs={"target_tokens": tokens},
        )
        for tokens in sequences
    ]
    plain, shared = run_both(tmp_path, data, "cross_entropy", auto_shift=True)
    assert_same(plain, shared)


def test_shared_prefix_in_small_micro_batches(tmp_path):
    """Suffix chunks that do not fit one micro-batch accumulate the prefix's
    key/value gradients before the one backward through the prefix."""
    data = grpo_batch("series", seed=4, prompts=1, group=8)
    svc = engine(tmp_path, train_tokens_per_batch=24)
    tc = svc.create_lora_training_client(MODEL, rank=8, seed=0)
    job = tc._prepare(data, "importance_sampling", None, False)
    lengths = [s.input_length - 29 for s in job.samples]
    assert max(lengths) * 3 > 24  # so the 8 suffixes need several chunks
    plain, shared = run_both(
        tmp_path, data, "importance_sampling", train_tokens_per_batch=24
    )
    assert run_both.seen["training_shared_groups"] == 1  # one prompt, shared
    assert run_both.seen["training_shared_chunks"] > 1  # in several chunks
    assert_same(plain, shared)


def test_custom_loss_errors_are_raised_at_the_call(tmp_path):
    svc = engine(tmp_path)
    tc = perturbed_client(svc)
    data = grpo_batch("series", prompts=1, group=2)

    def broken(data, logprobs):
        raise RuntimeError("my loss is broken")

    with pytest.raises(RuntimeError, match="my loss is broken"):
        tc.forward_backward_custom(data, broken)

    async def call_async():
        return await tc.forward_backward_custom_async(data, broken)

    with pytest.raises(RuntimeError, match="my loss is broken"):
        asyncio.run(call_async())

    def fine(data, logprobs):
        return sum(-lp.sum() for lp in logprobs), {"custom": 1.0}

    out = tc.forward_backward_custom(data, fine).result()
    assert out.metrics["custom"] == 1.0 and "loss_sum" in out.metrics


# ------------------------------------------------------------------ SmolLM2


@pytest.mark.slow
def test_fast_paths_on_smollm2_with_series_datums(tmp_path):
    """One real series group on SmolLM2: the merged sampler's logprobs match
    teacher forcing, and shared-prefix training equals the plain path."""
    from grpo_helpers import arithmetic, data, prompts, rewards, rollout
    from grpo_helpers.local.models import SMOLLM2

    row = arithmetic.make_arithmetic_splits(4, 1, seed=0)[0][0]
    results = []
    for shared in (False, True):
        svc = engine(tmp_path, shared_prefix=shared)
        tc = svc.create_lora_training_client(SMOLLM2, rank=8, seed=0)
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, p in sorted(tc._host.parameters(tc._adapter).items()):
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=gen) * 2e-3)
        tok = tc.get_tokenizer()
        prompt = prompts.build_prompt(tok, row["question"])
        if not results:  # sample once, train both paths on the same datums
            group = rollout.run_rollout_group(
                tc.save_weights_and_get_sampling_client(),
                tok,
                prompt,
                data.extract_gsm8k_answer(row["answer"]),
                rollout.make_sampling_params(tok, 16, seed=3),
                4,
                rewards.shaped_reward,
            )
            for sample in group:
                np.testing.assert_allclose(
                    teacher_forced(tc, prompt, sample.tokens),
                    sample.logprobs,
                    atol=1e-4,
                )
            for i, sample in enumerate(group):
                sample.advantage = (i - 1.5) / 2  # a learning signal in any case
            datums = [build_grpo_datum(prompt, s) for s in group]
        with counters.counting() as seen:
            out = tc.forward_backward(datums, "importance_sampling").result()
        assert seen["training_shared_groups"] == (1 if shared else 0), seen
        grads = {k: p.grad.clone() for k, p in named(tc)}
        tc.optim_step(ADAM).result()
        weights = {k: p.detach().clone() for k, p in named(tc)}
        results.append((out, grads, weights))
    # At ratio 1, loss_sum = -sum(A_i * C_i): terms of about 1 that cancel.
    scale = sum(abs(s.advantage) * len(s.tokens) for s in group)
    assert_same(*results, loss_scale=scale)


@pytest.mark.parametrize("shared", [True, False])
def test_training_creates_no_tensor_off_the_model_device(tmp_path, shared):
    """Shared-prefix training (a GRPO group's prompt once) and the plain path,
    forward and backward, under the same audit."""
    svc = connect("local", run_dir=tmp_path, shared_prefix=shared)
    tc = perturbed_client(svc, rank=4)
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
