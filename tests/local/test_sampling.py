"""grpo_helpers.local.sampling: the sampler's building blocks (drawing tokens,
temperature/top-k/top-p, stops), and every sampling path creating no tensor off the
model's device (run under ``torch.device("meta")``, the CPU standing in for a
GPU)."""

from __future__ import annotations

import pytest
import pytrio as trio
import torch
from local_engine import perturbed_client

from grpo_helpers.engines import connect
from grpo_helpers.local import counters
from grpo_helpers.local.decoder import (
    HFDecoder,
    MergedLlamaDecoder,
    packing_available,
)
from grpo_helpers.local.sampling import (
    GenerationRequest,
    draw,
    filter_logits,
    generate,
    stop_lists,
)


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
    tc = perturbed_client(svc, rank=4)
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
