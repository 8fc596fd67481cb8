"""The sampler's building blocks: drawing tokens, temperature/top-k/top-p, stops."""

from __future__ import annotations

import pytest
import torch

from grpo_helpers.local.sampling import draw, filter_logits, stop_lists


def test_draw_follows_the_distribution_and_skips_zero_probability():
    probs = torch.tensor([0.1, 0.0, 0.6, 0.3]).repeat(20000, 1)
    gen = torch.Generator().manual_seed(0)
    tokens = draw(probs, gen)
    freq = torch.bincount(tokens, minlength=4).float() / len(tokens)
    assert freq[1] == 0
    assert freq.tolist() == pytest.approx([0.1, 0.0, 0.6, 0.3], abs=0.015)


def test_draw_is_seeded():
    probs = torch.softmax(torch.randn(8, 1000), -1)
    a = draw(probs, torch.Generator().manual_seed(3))
    b = draw(probs, torch.Generator().manual_seed(3))
    c = draw(probs, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_filter_logits_temperature_top_k_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.1]]))
    same = torch.softmax(filter_logits(logits, 1.0, -1, 1.0), -1)
    assert same[0].tolist() == pytest.approx([0.5, 0.25, 0.15, 0.1], abs=1e-6)
    sharp = torch.softmax(filter_logits(logits, 0.5, -1, 1.0), -1)[0]
    assert sharp[0] > 0.5 and sharp.sum() == pytest.approx(1.0)
    top2 = torch.softmax(filter_logits(logits, 1.0, 2, 1.0), -1)[0]
    assert top2.tolist() == pytest.approx([2 / 3, 1 / 3, 0, 0], abs=1e-6)
    # top_p = 0.7: 0.5 alone is < 0.7, so 0.25 joins; 0.75 >= 0.7 stops there.
    nucleus = torch.softmax(filter_logits(logits, 1.0, -1, 0.7), -1)[0]
    assert nucleus.tolist() == pytest.approx([2 / 3, 1 / 3, 0, 0], abs=1e-6)
    # The most likely token always survives.
    tiny = torch.softmax(filter_logits(logits, 1.0, -1, 0.01), -1)[0]
    assert tiny.tolist() == pytest.approx([1, 0, 0, 0])


def test_stop_lists():
    assert stop_lists(None) == ([], set())
    assert stop_lists("\n") == (["\n"], set())
    assert stop_lists(["a", "bc"]) == (["a", "bc"], set())
    assert stop_lists([2, 5]) == ([], {2, 5})
    assert stop_lists([]) == ([], set())


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
