"""The local engine's sampler: one KV-cached decoding loop for many prompts at once.

In GRPO the sampler answers each prompt ``group_size`` times. :func:`generate` does
what an inference server does, in four steps, a function each:

1. **Prefill once per prompt.** The prompts of all requests in a batch are left-padded
   into one ``[R, P]`` tensor (attention mask and position ids make padding
   invisible) and run through the model once, filling the KV cache. When every
   prompt starts with the same tokens (an evaluation's few-shot prompt: about 230
   of each prompt's 280), those run once and only each prompt's own tokens after.
2. **Fan out.** Each prompt's cache row is repeated ``num_samples`` times, so the
   shared prompt is encoded once for the whole group.
3. **Decode.** Every step feeds one new token per row. The token is drawn from the
   *sampling* distribution (temperature, top-k, top-p). The logprob recorded for it
   is the request's choice (:data:`LOGPROBS_OF`): by default the one under the
   model's *raw* distribution (temperature 1, no filtering), which is what
   ``forward_backward`` recomputes at temperature 1, so the ratio
   ``exp(logprob_train - logprob_sample)`` starts at 1 up to float noise (1e-4)
   whatever the temperature; or ``"behaviour"``, the logprob under the distribution
   the token was drawn from (``logits / T`` after top-k and top-p), the one an
   importance weight of the behaviour policy needs (notebook 11).
4. **Stop.** A row stops at the tokenizer's EOS token, at any stop token id, when its
   text contains a stop string, or after ``max_tokens``. Finished rows leave the batch
   (their cache rows are dropped) so long completions do not pay for short ones;
   except where the decoder runs MKL's packed products for the batch's row count
   (``decoder.prepare``, a batch of 2-16 rows on a CPU): a step at that count costs
   less than an unpacked one at a row fewer, so finished rows stay, fed padding,
   their logits unread, until the last row ends. Batches are packed up to 16 rows
   only, where a step's cost grows little with its rows.

The sync loop samples one prompt at a time, and the prompts of a step start with the
same few-shot tokens: the decoder remembers the last prompt's keys and values for
the current weights (``decoder.recall``), and the next prompt runs only the tokens
after the common start.

Randomness comes from one ``torch.Generator`` per request, seeded with
``SamplingParams.seed`` when given: the same seed gives the same completions, whether
the request ran alone or batched with others.

The module stays whole: the four steps and the distribution they draw from
(:func:`filter_logits`, :func:`draw`) are one idea, the sampler.

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch
from pytrio.types import SampleResponse, SampleSequence, SamplingParams

from grpo_helpers.local import counters
from grpo_helpers.local.decoder import Decoder
from grpo_helpers.local.prompt_cache import fill, pad_rows

#: What a sampled token's logprob is: under the model's own distribution
#: (temperature 1, unfiltered) or under the one it was drawn from (``behaviour``:
#: ``logits / T`` after top-k and top-p; 0 for a greedy token).
LOGPROBS_OF = ("model", "behaviour")


@dataclass
class GenerationRequest:
    """One ``SamplingClient.sample`` call, waiting in the batching queue.

    Attributes:
        prompt: prompt token ids, ``[P]``.
        num_samples: completions to draw (the GRPO ``group_size``).
        params: pytrio ``SamplingParams`` (``max_tokens`` already checked > 0).
        include_prompt_logprobs: also return ``log p(prompt[t] | prompt[:t])``.
        topk_prompt_logprobs: also return the top-k alternatives at each prompt
            position.
        return_text: decode each completion.
        weights_key: which weights to sample from; only requests with the same key
            share a batch.
        merged: sample with the merged-weights decoder (False: the adapter runs
            unmerged, through ``transformers`` and peft).
        prompt_only: only the prompt's logprobs are wanted (``compute_logprobs``):
            nothing is sampled, and prompts that share a prefix compute it once.
        share_prefix: may share a prefix with the other prompts of its batch
            (:func:`generate`); False for a service made with ``shared_prefix=False``.
        logprobs_of: which logprob each drawn token reports (:data:`LOGPROBS_OF`).
        precision: the merged decoder's products (``decoder.SAMPLER_PRECISIONS``).
        future: resolved with the ``SampleResponse``.
    """

    prompt: list[int]
    num_samples: int
    params: SamplingParams
    include_prompt_logprobs: bool = False
    topk_prompt_logprobs: int = 0
    return_text: bool = True
    weights_key: Any = None
    merged: bool = True
    prompt_only: bool = False
    share_prefix: bool = True
    logprobs_of: str = "model"
    precision: str = "float32"
    future: Future = field(default_factory=Future)

    @property
    def rows(self) -> int:
        return self.num_samples


def stop_lists(
    stop: str | Sequence[str] | Sequence[int] | None,
) -> tuple[list[str], set[int]]:
    """Split ``SamplingParams.stop`` into stop strings and stop token ids.

    Example::

        >>> stop_lists(["\\n\\n", "</answer>"])
        (['\\n\\n', '</answer>'], set())
        >>> stop_lists([2, 7])
        ([], {2, 7})
    """
    if stop is None:
        return [], set()
    if isinstance(stop, str):
        return ([stop] if stop else []), set()
    items = list(stop)
    if items and all(isinstance(s, int) and not isinstance(s, bool) for s in items):
        return [], {s for s in items if isinstance(s, int)}
    return [str(s) for s in items if str(s)], set()


def filter_logits(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> torch.Tensor:
    """The sampling distribution's logits: ``logits / T``, then top-k, then top-p.

    Args:
        logits: ``[B, V]`` raw next-token logits.
        temperature: > 0 (temperature 0 is greedy and never gets here).
        top_k: keep the k most likely tokens; ``-1`` or ``0`` keeps all.
        top_p: keep the smallest set of tokens whose probability reaches ``top_p``.

    Returns:
        ``[B, V]`` logits with removed tokens set to ``-inf``.
    """
    scores = logits / temperature
    vocab = scores.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True, dim=-1)
        probs = sorted_scores.softmax(-1)
        # Remove a token when the tokens ranked above it already reach top_p.
        remove_sorted = probs.cumsum(-1) - probs >= top_p
        remove_sorted[..., 0] = False
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        scores = scores.masked_fill(remove, float("-inf"))
    return scores


def _generator(seed: int | None, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed if seed is not None else secrets.randbits(63))
    return gen


def draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of ``probs`` ([B, V]), by inverting the cumulative sum.

    Equivalent to ``torch.multinomial(probs, 1)`` but one uniform number per row
    instead of a pass per row: about 15x faster on a CPU for a 49k vocabulary. The
    cumulative sum is in float64 so that 49k float32 probabilities add up exactly
    enough; tokens of probability 0 (removed by top-k / top-p) are never drawn.

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> draw(torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), g).tolist()
        [1, 2]
    """
    cdf = probs.double().cumsum(-1)
    u = 1.0 - torch.rand(
        (probs.shape[0], 1),
        generator=generator,
        dtype=torch.float64,
        device=probs.device,
    )
    return torch.searchsorted(cdf, u * cdf[:, -1:]).clamp_(max=probs.shape[-1] - 1)[
        :, 0
    ]


class _Row:
    """One completion being decoded."""

    __slots__ = ("req", "tokens", "logprobs", "stop_reason")

    def __init__(self, req: int) -> None:
        self.req = req
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.stop_reason: str | None = None


def _prompt_logprobs(
    logits: torch.Tensor, prompt: list[int], topk: int
) -> tuple[list[float | None], list[list[tuple[int, float]] | None]]:
    """``log p(prompt[t] | prompt[:t])`` for t >= 1 (None at t = 0), and top-k lists."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # [P, V], row t predicts t+1
    targets = torch.tensor(prompt[1:], dtype=torch.long, device=logp.device)
    values = logp[:-1].gather(-1, targets[:, None])[:, 0].tolist()
    top: list[list[tuple[int, float]] | None] = []
    if topk > 0:
        vals, ids = torch.topk(logp[:-1], min(topk, logp.shape[-1]), dim=-1)
        top = [None] + [
            list(zip(i, v, strict=True))
            for i, v in zip(ids.tolist(), vals.tolist(), strict=True)
        ]
    return [None, *values], top


@torch.no_grad()
def generate(
    decoder: Decoder,
    tokenizer: Any,
    requests: list[GenerationRequest],
    eos_token_ids: set[int],
    pad_token_id: int = 0,
) -> list[SampleResponse]:
    """Sample every request of a batch in one KV-cached decoding loop.

    The four steps of the module's docstring, one function each: fill the cache
    with the prompts (:func:`_prefill`), give each completion its row
    (:func:`_fan_out`), decode a token per row until every row stops
    (:func:`_decode`), and hand back one response per request (:func:`_responses`).

    Args:
        decoder: runs the model (``grpo_helpers.local.decoder``: the merged fast
            path or a ``transformers`` model with its adapter active).
        tokenizer: decodes completions and checks stop strings.
        requests: requests that share the decoder's current weights.
        eos_token_ids: tokens that always end a completion (stop reason ``"stop"``).
        pad_token_id: filler for left padding (never attended to).

    Returns:
        One ``SampleResponse`` per request, in order. Each ``SampleSequence`` holds
        the completion ``tokens`` (a final stop or EOS token included, since the
        policy chose it), their ``logprobs`` (:data:`LOGPROBS_OF`), the
        ``text`` (cut before a stop string or stop token) and ``stop_reason``:
        ``"stop"`` or ``"length"``. ``input_tokens`` is the prompt length (encoded
        once per request), ``output_tokens`` the number of sampled tokens.
    """
    if all(r.prompt_only for r in requests):
        return _scored_prompts(decoder, requests, pad_token_id)
    filled = _prefill(decoder, requests, pad_token_id)
    batch = _fan_out(decoder, requests, filled)
    _decode(decoder, tokenizer, requests, batch, eos_token_ids, pad_token_id)
    return _responses(tokenizer, requests, batch, filled.prompt_logprobs, eos_token_ids)


def _scored_prompts(
    decoder: Decoder, requests: list[GenerationRequest], pad_token_id: int
) -> list[SampleResponse]:
    """Responses for requests that want only their prompt's logprobs."""
    scores = score_prompts(decoder, requests, pad_token_id)
    return [
        SampleResponse(
            sequences=[],
            prompt_logprobs=values,
            topk_prompt_logprobs=top,
            input_tokens=len(r.prompt),
            output_tokens=0,
        )
        for r, (values, top) in zip(requests, scores, strict=True)
    ]


@dataclass
class _Filled:
    """The KV cache after the prompts: one row per request."""

    cache: Any
    mask: torch.Tensor  # [R, T] attention mask
    positions: torch.Tensor  # [R, T] position ids
    last: torch.Tensor  # [R, V] logits after each prompt's last token
    prompt_logprobs: list[tuple[list[float | None], list]]


def _prefill(
    decoder: Decoder, requests: list[GenerationRequest], pad_token_id: int
) -> _Filled:
    """Step 1: fill the cache with the prompts (:func:`prompt_cache.fill` chooses
    the cheapest way), and read the prompts' own logprobs where they were asked for.
    """
    lengths = [len(r.prompt) for r in requests]
    width = max(lengths)
    need_prompt = any(
        r.include_prompt_logprobs or r.topk_prompt_logprobs for r in requests
    )
    capacity = width + max(int(r.params.max_tokens) for r in requests)
    logits, cache, mask, positions = fill(
        decoder, requests, pad_token_id, capacity, need_prompt
    )
    prompt_lp: list[tuple[list[float | None], list]] = []
    for i, r in enumerate(requests):
        if r.include_prompt_logprobs or r.topk_prompt_logprobs:
            prompt_lp.append(
                _prompt_logprobs(
                    logits[i, width - lengths[i] :], r.prompt, r.topk_prompt_logprobs
                )
            )
        else:
            prompt_lp.append(([], []))
    return _Filled(cache, mask, positions, logits[:, -1, :].float(), prompt_lp)


@dataclass
class _Batch:
    """The decoding loop's state: one row per completion.

    ``active`` lists the rows still decoding, in batch order. With packed products
    (``decoder.prepare``) finished rows stay in the batch, fed padding, their
    logits unread (``hold``); ``slots`` then maps the active rows to batch rows
    (None: the batch is the active rows).
    """

    rows: list[_Row]
    cache: Any
    mask: torch.Tensor  # [B, T]
    pos: torch.Tensor  # [B] the last position of each row
    logits: torch.Tensor  # [active, V] the next token's logits
    hold: bool
    active: list[int]
    slots: torch.Tensor | None = None


def _fan_out(
    decoder: Decoder, requests: list[GenerationRequest], filled: _Filled
) -> _Batch:
    """Step 2: a row per completion, each a copy of its request's cache row."""
    rows = [_Row(i) for i, r in enumerate(requests) for _ in range(r.num_samples)]
    index = torch.tensor([row.req for row in rows], device=decoder.device)
    decoder.select(filled.cache, index)
    max_tokens = max(int(r.params.max_tokens) for r in requests)
    hold = decoder.prepare(len(rows), max_tokens - 1)
    counters.add("sampling_held_batches" if hold else "sampling_shrinking_batches")
    return _Batch(
        rows=rows,
        cache=filled.cache,
        mask=filled.mask[index],
        pos=filled.positions[index, -1],
        logits=filled.last[index],
        hold=hold,
        active=list(range(len(rows))),
    )


def _decode(
    decoder: Decoder,
    tokenizer: Any,
    requests: list[GenerationRequest],
    batch: _Batch,
    eos_token_ids: set[int],
    pad_token_id: int,
) -> None:
    """Step 3: draw a token per active row, note it, stop the rows that are done,
    and run the next step, until no row is left."""
    gens = [_generator(r.params.seed, decoder.device) for r in requests]
    stopping = _Stopping(tokenizer, requests, eos_token_ids)
    while batch.active:
        chosen, chosen_lp = _draw_tokens(requests, batch, gens)
        keep = []
        for slot, (b, tok, lp) in enumerate(
            zip(batch.active, chosen.tolist(), chosen_lp.tolist(), strict=True)
        ):
            row = batch.rows[b]
            row.tokens.append(tok)
            row.logprobs.append(lp)
            row.stop_reason = stopping.reason(row)
            if row.stop_reason is None:
                keep.append(slot)
        if not keep:
            break
        _next_step(decoder, batch, keep, chosen, pad_token_id)


def _draw_tokens(
    requests: list[GenerationRequest], batch: _Batch, gens: list[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each active row's next token, drawn from its request's sampling
    distribution, and that token's logprob under the raw one (or, for a request
    that asks for the behaviour policy's, under the distribution it was drawn
    from)."""
    logits = batch.logits
    logp = torch.log_softmax(logits, dim=-1)
    vocab = logits.shape[-1]
    chosen = torch.empty(len(batch.active), dtype=torch.long, device=logits.device)
    chosen_lp = torch.empty(len(batch.active), dtype=logp.dtype, device=logits.device)
    start = 0
    while start < len(batch.active):  # rows of one request are contiguous
        req = batch.rows[batch.active[start]].req
        end = start
        while end < len(batch.active) and batch.rows[batch.active[end]].req == req:
            end += 1
        p = requests[req].params
        reported = logp[start:end]
        if p.temperature <= 0:
            chosen[start:end] = logits[start:end].argmax(-1)
            if requests[req].logprobs_of == "behaviour":  # a greedy pick: p = 1
                reported = torch.zeros_like(reported)
        else:
            if p.temperature == 1 and p.top_p >= 1 and not 0 < p.top_k < vocab:
                probs = logp[start:end].exp()  # the model's own distribution
            else:
                scores = filter_logits(
                    logits[start:end], p.temperature, p.top_k, p.top_p
                )
                probs = torch.softmax(scores, dim=-1)
                if requests[req].logprobs_of == "behaviour":
                    reported = torch.log_softmax(scores, dim=-1)
            chosen[start:end] = draw(probs, gens[req])
        chosen_lp[start:end] = reported.gather(-1, chosen[start:end, None])[:, 0]
        start = end
    return chosen, chosen_lp


class _Stopping:
    """Why a row stops: an EOS or stop token, a stop string, or ``max_tokens``."""

    def __init__(
        self, tokenizer: Any, requests: list[GenerationRequest], eos: set[int]
    ) -> None:
        self.tokenizer = tokenizer
        self.eos = eos
        self.stops = [stop_lists(r.params.stop) for r in requests]
        self.max_tokens = [int(r.params.max_tokens) for r in requests]
        self.longest = [
            max((len(s) for s in strs), default=0) for strs, _ in self.stops
        ]

    def reason(self, row: _Row) -> str | None:
        """``"stop"``, ``"length"``, or None while the row goes on."""
        strs, ids = self.stops[row.req]
        tok = row.tokens[-1]
        if (tok in ids or tok in self.eos) or (
            strs and _hits_stop(self.tokenizer, row.tokens, strs, self.longest[row.req])
        ):
            return "stop"
        if len(row.tokens) >= self.max_tokens[row.req]:
            return "length"
        return None


def _next_step(
    decoder: Decoder,
    batch: _Batch,
    keep: list[int],
    chosen: torch.Tensor,
    pad_token_id: int,
) -> None:
    """Drop the finished rows (or hold them, fed padding), then run one step."""
    if len(keep) < len(batch.active):
        sel = torch.tensor(keep, device=decoder.device)
        if batch.hold:
            batch.slots = sel if batch.slots is None else batch.slots[sel]
        else:
            decoder.select(batch.cache, sel)
            batch.mask, batch.pos = batch.mask[sel], batch.pos[sel]
        chosen = chosen[sel]
        batch.active = [batch.active[k] for k in keep]
    mask = batch.mask
    batch.mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
    batch.pos = batch.pos + 1
    if batch.slots is None:
        batch.logits = decoder.step(chosen, batch.mask, batch.pos, batch.cache).float()
    else:
        tokens = chosen.new_full((batch.mask.shape[0],), pad_token_id)
        tokens[batch.slots] = chosen
        step = decoder.step(tokens, batch.mask, batch.pos, batch.cache)
        batch.logits = step[batch.slots].float()


def _responses(
    tokenizer: Any,
    requests: list[GenerationRequest],
    batch: _Batch,
    prompt_lp: list[tuple[list[float | None], list]],
    eos_token_ids: set[int],
) -> list[SampleResponse]:
    """Step 4: one response per request, its completions in row order."""
    responses = []
    for i, r in enumerate(requests):
        stops = stop_lists(r.params.stop)
        seqs = [
            SampleSequence(
                stop_reason=row.stop_reason or "length",
                tokens=row.tokens,
                text=_completion_text(tokenizer, row, stops, eos_token_ids)
                if r.return_text
                else None,
                logprobs=row.logprobs,
            )
            for row in batch.rows
            if row.req == i
        ]
        plp, top = prompt_lp[i]
        responses.append(
            SampleResponse(
                sequences=seqs,
                prompt_logprobs=plp,
                topk_prompt_logprobs=top,
                input_tokens=len(r.prompt),
                output_tokens=sum(len(s.tokens) for s in seqs),
            )
        )
    return responses


@torch.no_grad()
def score_prompts(
    decoder: Decoder, requests: list[GenerationRequest], pad_token_id: int = 0
) -> list[tuple[list[float | None], list]]:
    """``log p(prompt[t] | prompt[:t])`` of every request's prompt, nothing sampled.

    Prompts that share a prefix (a GRPO group's prompt + completions, scored by the
    reference model of the KL penalty) run that prefix once: the prefix is
    prefilled, its keys and values copied to one cache row per member, and the
    members' remaining tokens run on top, right-padded.
    """
    from grpo_helpers.local.batch_plan import plan_chunks, plan_shared_prefixes

    device = decoder.device
    out: list[tuple[list[float | None], list] | None] = [None] * len(requests)
    for group in plan_shared_prefixes([r.prompt for r in requests]):
        p = group.prefix_len if group.shared else 0
        if p:
            counters.add("scoring_shared_groups")
        else:
            counters.add("scoring_plain_prompts", len(group.members))
        if p == 0:
            for i in group.members:
                r = requests[i]
                ids = torch.tensor([r.prompt], device=device)
                ones = torch.ones_like(ids)
                positions = torch.arange(len(r.prompt), device=device)[None]
                logits, _ = decoder.prefill(ids, ones, positions, len(r.prompt), True)
                out[i] = _prompt_logprobs(logits[0], r.prompt, r.topk_prompt_logprobs)
            continue
        members = [requests[i] for i in group.members]
        prefix = torch.tensor([members[0].prompt[:p]], device=device)
        positions = torch.arange(p, device=device)[None]
        width = max(len(r.prompt) for r in members) - p
        head, cache = decoder.prefill(
            prefix, torch.ones_like(prefix), positions, p + width, True
        )
        lengths = [len(r.prompt) - p for r in members]
        for chunk in plan_chunks(lengths, budget=2048):
            rows = torch.zeros(len(chunk), dtype=torch.long, device=device)
            chunk_cache = decoder.copy_rows(cache, rows)
            w = max(lengths[m] for m in chunk)
            ids, own = pad_rows(
                [members[m].prompt[p:] for m in chunk], w, pad_token_id, device, "right"
            )
            mask = torch.cat([own.new_ones((len(chunk), p)), own], dim=1)
            pos = torch.arange(p, p + w, device=device)[None].expand(len(chunk), w)
            tail = decoder.extend(ids, mask, pos, chunk_cache)
            for b, m in enumerate(chunk):
                logits = torch.cat([head[0], tail[b, : lengths[m]]])
                r = members[m]
                out[group.members[m]] = _prompt_logprobs(
                    logits, r.prompt, r.topk_prompt_logprobs
                )
    return [o for o in out if o is not None]


def _hits_stop(
    tokenizer: Any, tokens: list[int], strs: list[str], longest: int
) -> bool:
    """Whether the completion's text now contains a stop string.

    Only the tail is decoded (enough tokens to hold the longest stop string plus
    the new token), so the check costs the same at step 5 and step 500.
    """
    tail = tokenizer.decode(tokens[-(longest + 1) :], skip_special_tokens=False)
    return any(s in tail for s in strs)


def _completion_text(
    tokenizer: Any,
    row: _Row,
    stop: tuple[list[str], set[int]],
    eos_token_ids: set[int],
) -> str:
    """Decoded completion, cut before the first stop string or the final stop token."""
    strs, ids = stop
    tokens = row.tokens
    if (
        row.stop_reason == "stop"
        and tokens
        and (tokens[-1] in ids or tokens[-1] in eos_token_ids)
    ):
        tokens = tokens[:-1]
    text = tokenizer.decode(tokens, skip_special_tokens=False)
    cut = min((text.find(s) for s in strs if s in text), default=-1)
    return text[:cut] if cut >= 0 else text
