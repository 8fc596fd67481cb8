"""Filling the KV cache before the first sampled token: the sampler's three ways.

``sampling.generate`` decodes from a cache that already holds every prompt: it calls
:func:`fill`, which fills it one of three ways, whichever costs least, and counts
which ran (``sampling_*_prefills``):

1. **plain**: the prompts, left-padded to one width (:func:`pad_rows`), in one
   forward pass;
2. **shared** (:func:`prefill_shared`): prompts that start with the same tokens
   (an evaluation's few-shot prompt, :func:`shared_prefix_len`) run that start
   once, then each prompt's own tokens on top;
3. **recalled** (:func:`recall_prompt`): a prompt alone that starts like the last
   prompt the decoder ran on the same weights (the sync loop's second prompt of a
   step) runs only its own tokens, on the remembered start.

Every tensor is created on the decoder's device. ``tests/local/test_prompt_cache.py``
checks that the shared and the recalled ways sample what the plain way samples.

Introduced in: 05_sync_training_loop.ipynb (the engine's speed, not the maths)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from grpo_helpers.local import counters
from grpo_helpers.local.batch_plan import common_prefix_len
from grpo_helpers.local.decoder import Decoder


def pad_rows(
    rows: Sequence[Sequence[int]],
    width: int,
    pad_token_id: int,
    device: str | torch.device,
    side: str = "left",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows padded to ``width``, as ``(ids, mask)`` created on ``device``.

    Built as Python lists and sent once, so no CPU tensor is ever combined with a
    device tensor (a CPU mask applied to GPU scores raises).

    Args:
        rows: token ids per row, each at most ``width`` long.
        width: the padded length.
        pad_token_id: filler for the padding (never attended to).
        device: where the tensors are created: the model's device.
        side: ``"left"`` (prompts: the last token sits in the last column) or
            ``"right"``.

    Returns:
        ``ids`` ``[R, width]`` (int64) and ``mask`` ``[R, width]`` (int64, 1 on real
        tokens), both on ``device``.

    Example:
        >>> ids, mask = pad_rows([[5, 6], [7]], 3, 0, "cpu")
        >>> ids.tolist(), mask.tolist()
        ([[0, 5, 6], [0, 0, 7]], [[0, 1, 1], [0, 0, 1]])
    """
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    ids, mask = [], []
    for row in rows:
        n = len(row)
        if n > width:
            raise ValueError(f"a row of {n} tokens does not fit in width {width}")
        pad = [pad_token_id] * (width - n)
        ids.append(pad + list(row) if side == "left" else list(row) + pad)
        ones, zeros = [1] * n, [0] * (width - n)
        mask.append(zeros + ones if side == "left" else ones + zeros)
    return (
        torch.tensor(ids, dtype=torch.long, device=device).reshape(len(rows), width),
        torch.tensor(mask, dtype=torch.long, device=device).reshape(len(rows), width),
    )


#: Fewest tokens every prompt of a batch must share before ``sampling.generate`` runs
#: them once (below this, one plain prefill costs about the same).
MIN_SHARED_PREFIX = 16


def fill(
    decoder: Decoder,
    requests: Sequence[Any],
    pad_token_id: int,
    capacity: int,
    need_prompt: bool,
) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
    """Fill a cache of ``capacity`` positions with the requests' prompts, the
    cheapest of the three ways that gives the plain way's numbers, and count which
    ran (``sampling_<way>_prefills``).

    Shared when every prompt starts with the same tokens (an evaluation's few-shot
    prompt); recalled when a prompt alone starts like the decoder's last one on
    these weights (the sync loop's second prompt of a step); plain otherwise, and
    always when the prompts' own logprobs are wanted (``need_prompt``: every
    position's logits) or a request asks not to share (``share_prefix=False``,
    which the tests compare against).

    Returns:
        The logits of the prompts' positions (``[R, P, V]``; only the last column's
        unless ``need_prompt``), the cache, the attention mask ``[R, width]`` and
        the positions ``[R, width]``.
    """
    width = max(len(r.prompt) for r in requests)
    sharing = not need_prompt and all(r.share_prefix for r in requests)
    shared = shared_prefix_len(requests) if sharing else 0
    recalled = None
    if sharing and not shared:
        recalled = recall_prompt(decoder, requests, capacity)
    path = "recalled" if recalled is not None else "shared" if shared else "plain"
    counters.add(f"sampling_{path}_prefills")
    if shared:
        return prefill_shared(decoder, requests, shared, width, capacity, pad_token_id)
    if recalled is not None:
        return recalled
    input_ids, mask = pad_rows(
        [r.prompt for r in requests], width, pad_token_id, decoder.device
    )
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits, cache = decoder.prefill(input_ids, mask, positions, capacity, need_prompt)
    if sharing and len(requests) == 1:  # the next prompt may start alike
        decoder.remember(requests[0].prompt, cache)
    return logits, cache, mask, positions


def shared_prefix_len(requests: Sequence[Any]) -> int:
    """Tokens at the start of every request's prompt, 0 when too few to be worth it.

    Every prompt keeps at least one token of its own, whose logits start its
    completion. One request alone shares nothing (its prompt is one prefill anyway).
    """
    if len(requests) < 2:
        return 0
    first = requests[0].prompt
    n = min(len(r.prompt) - 1 for r in requests)
    for r in requests[1:]:
        n = min(n, common_prefix_len(first, r.prompt))
    return n if n >= MIN_SHARED_PREFIX else 0


def recall_prompt(
    decoder: Decoder,
    requests: Sequence[Any],
    capacity: int,
) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor] | None:
    """One prompt that starts like the decoder's last one, on the same weights.

    The sync loop samples its prompts one at a time, each with the series'
    few-shot start: the second prompt of a step reuses the keys and values of the
    first's start (:meth:`~grpo_helpers.local.decoder.Decoder.recall`) and runs
    only its own tokens. Returns what :func:`prefill_shared` returns, or None
    (several requests, or fewer than ``MIN_SHARED_PREFIX`` tokens in common).
    """
    if len(requests) != 1:
        return None
    prompt = requests[0].prompt
    found = start_from_memory(decoder, prompt, capacity, run_last=True)
    if found is None:
        return None
    logits, cache = found
    assert logits is not None  # run_last=True runs the last token
    device = decoder.device
    mask = torch.ones((1, len(prompt)), dtype=torch.long, device=device)
    positions = torch.arange(len(prompt), device=device)[None]
    return logits, cache, mask, positions


def start_from_memory(
    decoder: Decoder, tokens: list[int], capacity: int, run_last: bool
) -> tuple[torch.Tensor | None, Any] | None:
    """A one-row cache holding ``tokens``, started from the decoder's memory.

    The remembered start (:meth:`~grpo_helpers.local.decoder.Decoder.recall`) is
    copied, the rest of ``tokens`` runs on top of it, and ``tokens`` become what the
    decoder remembers. ``run_last``: the last token always runs, so that its logits
    start a completion. Returns the last token's logits (``[1, 1, V]``, None when
    nothing ran) and the cache; None when the memory holds fewer than
    :data:`MIN_SHARED_PREFIX` of the tokens.
    """
    hit = decoder.recall(tokens[:-1] if run_last else tokens, capacity)
    if hit is None or hit[0] < MIN_SHARED_PREFIX:
        return None
    n, cache = hit
    logits = None
    if n < len(tokens):
        device = decoder.device
        logits = decoder.extend(
            torch.tensor([tokens[n:]], device=device),
            torch.ones((1, len(tokens)), dtype=torch.long, device=device),
            torch.arange(n, len(tokens), device=device)[None],
            cache,
            last_only=True,
        )
    decoder.remember(tokens, cache)
    return logits, cache


def prefill_shared(
    decoder: Decoder,
    requests: Sequence[Any],
    shared: int,
    width: int,
    capacity: int,
    pad_token_id: int,
) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
    """Prefill ``shared`` common tokens once, then every prompt's own tokens.

    The common tokens' keys and values come from the decoder's memory when an
    earlier batch on the same weights ran them (an evaluation's batches share the
    few-shot prompt), and are remembered for the next batch.

    The cache row of the prefix is repeated once per request, and the rest of each
    prompt runs on top of it, left-padded to ``width - shared`` tokens, so each
    row's last prompt token sits in the last column as in the plain path. The mask
    is ``[prefix | padding | own tokens]``: padding in the middle is never attended
    to, and positions count real tokens only, so each prompt sees exactly what a
    plain prefill shows it. Returns the last column's logits ``[R, 1, V]``, the
    cache, the attention mask ``[R, width]`` and the positions ``[R, width]``.
    """
    device = decoder.device
    n_req = len(requests)
    head = requests[0].prompt[:shared]
    # the same start, run for an earlier batch on these weights
    found = start_from_memory(decoder, head, capacity, run_last=False)
    if found is not None:
        counters.add("sampling_recalled_prefills")
        cache = found[1]
    else:
        prefix = torch.tensor([head], device=device)
        _, cache = decoder.prefill(
            prefix,
            torch.ones_like(prefix),
            torch.arange(shared, device=device)[None],
            capacity,
            False,
        )
        decoder.remember(head, cache)
    decoder.select(cache, torch.zeros(n_req, dtype=torch.long, device=device))
    rest = width - shared
    own_tokens = [r.prompt[shared:] for r in requests]
    ids, own = pad_rows(own_tokens, rest, pad_token_id, device)
    mask = torch.cat([own.new_ones((n_req, shared)), own], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = decoder.extend(ids, mask, positions[:, shared:], cache, last_only=True)
    return logits, cache, mask, positions


__all__ = [
    "MIN_SHARED_PREFIX",
    "pad_rows",
    "prefill_shared",
    "recall_prompt",
    "shared_prefix_len",
    "start_from_memory",
]
