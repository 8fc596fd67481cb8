"""grpo_helpers.local.prompt_cache: prompts that share a start prefill it once,
and sample and score what the plain prefill samples and scores.

Each comparison asserts, with the engine's counters, that the shared path ran on
one side and only the plain one on the other; the prompt memory samples what a
full prefill samples.
"""

from __future__ import annotations

import numpy as np
import pytest
import pytrio as trio
import torch
from local_engine import (
    batched_samples,
    engine,
    grpo_batch,
    perturbed_client,
    random_tokens,
    same_until_a_cdf_boundary,
    sample,
    sampler_and_decoder,
    teacher_forced,
)

from grpo_helpers.local import counters


@pytest.mark.parametrize("merged", [True, False])
def test_scoring_prompts_that_share_a_prefix(tmp_path, merged):
    """compute_logprobs of a group (prompt + completions, as the KL reference does)
    runs the shared prompt once: same numbers as scoring each alone, and as
    teacher forcing on the training client."""
    svc = engine(tmp_path, merged_sampler=merged)
    tc = perturbed_client(svc)
    sampler = tc.save_weights_and_get_sampling_client()
    gen = torch.Generator().manual_seed(9)
    prompt = random_tokens(gen, 30)
    sequences = [prompt + random_tokens(gen, n) for n in (1, 5, 9)]
    sequences.append(random_tokens(gen, 12))  # shares nothing
    with counters.counting() as seen_alone:
        alone = [
            sampler.compute_logprobs(trio.ModelInput.from_ints(s)).result()
            for s in sequences
        ]
    assert seen_alone["scoring_shared_groups"] == 0
    assert seen_alone["scoring_plain_prompts"] == len(sequences)
    scheduler = tc._host.scheduler
    with counters.counting() as seen:
        with scheduler.hold():  # all four in one batch: the shared path
            futures = [
                sampler.compute_logprobs(trio.ModelInput.from_ints(s))
                for s in sequences
            ]
        together = [f.result() for f in futures]
    # the three that share the prompt ran it once; the fourth on its own
    assert seen["scoring_shared_groups"] == 1 and seen["scoring_plain_prompts"] == 1
    for seq, a, b in zip(sequences, alone, together, strict=True):
        assert a[0] is None and b[0] is None and len(b) == len(seq)
        np.testing.assert_allclose(a[1:], b[1:], atol=1e-4)
        teacher = teacher_forced(tc, seq[:1], seq[1:])
        np.testing.assert_allclose(b[1:], teacher, atol=1e-4)


def test_shared_prefix_length_rules():
    from grpo_helpers.local.prompt_cache import MIN_SHARED_PREFIX, shared_prefix_len
    from grpo_helpers.local.sampling import GenerationRequest

    def reqs(*prompts):
        params = trio.SamplingParams(max_tokens=4)
        return [GenerationRequest(list(p), 1, params) for p in prompts]

    head = list(range(100, 100 + MIN_SHARED_PREFIX + 4))
    assert shared_prefix_len(reqs(head + [1, 2], head + [3])) == len(head)
    # Each prompt keeps a token of its own; identical prompts share all but one.
    assert shared_prefix_len(reqs(head, head)) == len(head) - 1
    assert shared_prefix_len(reqs(head + [1], head[:-1])) == len(head) - 2
    # Too short to be worth a second forward pass, or one request alone: nothing.
    short = head[: MIN_SHARED_PREFIX - 1]
    assert shared_prefix_len(reqs(short + [1], short + [2])) == 0
    assert shared_prefix_len(reqs(head + [1])) == 0
    assert shared_prefix_len(reqs(head + [1], [7] + head)) == 0


@pytest.mark.parametrize("merged", [True, False])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_sampling_with_a_shared_prefix_equals_the_plain_path(
    tmp_path, merged, temperature
):
    """Prompts that start alike (an evaluation's few-shot prompt) prefill the common
    part once; completions and their logprobs are those of the plain prefill, and
    the logprobs equal teacher forcing."""
    svc = engine(tmp_path, merged_sampler=merged)
    tc = perturbed_client(svc)
    sampler = tc.save_weights_and_get_sampling_client()
    # The same weights, sampled as a service made with shared_prefix=False would.
    plain_sampler = type(sampler)(sampler._host, sampler._snapshot, None, merged, False)
    gen = torch.Generator().manual_seed(3)
    head = random_tokens(gen, 30)
    prompts = [head + random_tokens(gen, n) for n in (1, 4, 9)]
    plain = batched_samples(plain_sampler, prompts, False, temperature=temperature)
    shared = batched_samples(sampler, prompts, True, temperature=temperature)
    for prompt, a, b in zip(prompts, plain, shared, strict=True):
        for (ta, la), (tb, lb) in zip(a, b, strict=True):
            same = same_until_a_cdf_boundary(ta, tb, temperature)
            np.testing.assert_allclose(la[:same], lb[:same], atol=1e-4)
            np.testing.assert_allclose(teacher_forced(tc, prompt, ta), la, atol=1e-4)
            np.testing.assert_allclose(teacher_forced(tc, prompt, tb), lb, atol=1e-4)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_prompt_memory_samples_what_a_full_prefill_samples(
    tmp_path, monkeypatch, temperature
):
    """The sync loop's second prompt of a step reuses the first's few-shot start:
    the same completions as prefilling it whole, logprobs equal to teacher forcing;
    other weights remember nothing."""
    gen = torch.Generator().manual_seed(6)
    head = random_tokens(gen, 30)
    prompts = [head + random_tokens(gen, n) for n in (3, 6)]

    def one_by_one(sampler):
        outputs = []
        with counters.counting() as seen:
            for p in prompts:
                outputs.append(sample(sampler, p, temperature=temperature))
        return outputs, seen

    tc, sampler, decoder = sampler_and_decoder(
        tmp_path, monkeypatch, packing=False, memory=False
    )
    full, seen = one_by_one(sampler)
    assert seen["sampling_recalled_prefills"] == 0, seen
    decoder.memory = True
    sample(sampler, prompts[1])  # the last prompt run on these weights
    recalled, seen = one_by_one(sampler)
    assert seen["sampling_recalled_prefills"] == 2, seen
    for prompt, a, b in zip(prompts, full, recalled, strict=True):
        for (ta, la), (tb, lb) in zip(a, b, strict=True):
            same = same_until_a_cdf_boundary(ta, tb, temperature)
            np.testing.assert_allclose(la[:same], lb[:same], atol=1e-4)
            np.testing.assert_allclose(teacher_forced(tc, prompt, tb), lb, atol=1e-4)
    tc.forward_backward(grpo_batch("series", prompts=1), "importance_sampling")
    tc.optim_step(trio.AdamParams(learning_rate=1e-2))
    _, seen = one_by_one(tc.save_weights_and_get_sampling_client())
    assert seen["sampling_recalled_prefills"] == 1, seen  # the first is new


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_shared_start_from_memory_samples_what_the_plain_path_samples(
    tmp_path, temperature
):
    """Batches that share a start run it once and remember it; the next batch on the
    same weights takes it from memory, whole or in part (then runs the rest). Each
    samples what a plain prefill samples, with logprobs equal to teacher forcing."""
    svc = engine(tmp_path)
    tc = perturbed_client(svc)
    sampler = tc.save_weights_and_get_sampling_client()
    plain_sampler = type(sampler)(sampler._host, sampler._snapshot, None, True, False)
    gen = torch.Generator().manual_seed(8)
    head, more = random_tokens(gen, 30), random_tokens(gen, 10)
    batches = [  # start: nothing remembered, part of it remembered, all of it
        [head + random_tokens(gen, n) for n in (2, 5)],
        [head + more + random_tokens(gen, n) for n in (1, 4)],
        [head + random_tokens(gen, n) for n in (3, 6)],
    ]
    for prompts, recalled in zip(batches, (0, 1, 1), strict=True):
        with counters.counting() as seen:
            shared = batched_samples(sampler, prompts, True, temperature=temperature)
        assert seen["sampling_recalled_prefills"] == recalled, seen
        plain = batched_samples(plain_sampler, prompts, False, temperature=temperature)
        for prompt, a, b in zip(prompts, plain, shared, strict=True):
            for (ta, la), (tb, lb) in zip(a, b, strict=True):
                same = same_until_a_cdf_boundary(ta, tb, temperature)
                np.testing.assert_allclose(la[:same], lb[:same], atol=1e-4)
                np.testing.assert_allclose(
                    teacher_forced(tc, prompt, tb), lb, atol=1e-4
                )
