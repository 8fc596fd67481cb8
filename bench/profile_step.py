"""Where a step of notebook 05 spends its sampling time, part by part.

Samples one step of notebook 05's defaults (SmolLM2-135M-Instruct, 2 arithmetic
prompts x 8 completions of at most 48 tokens at temperature 0.6, one prompt after
the other as the sync loop does) three ways, on the same prompts and seeds:

1. **by part**, with a wall clock around each part of the sampler: the prompt's
   prefill; in each decoding step, the projections (QKV, output, gate-up, down), the
   output layer, and the rest of the model's step (attention, norms, rotary
   embedding); drawing the token; deciding whether a row stops; the loop's own
   bookkeeping;
2. **torch.profiler**: the time inside torch's operators, against the wall time:
   the difference is Python's (the interpreter between operators);
3. **cProfile**: the Python functions that take the most time of their own.

Run::

    python bench/profile_step.py            # SmolLM2, about a minute on 2 cores
    python bench/profile_step.py --quick    # tiny-random, seconds

It prints a table of the parts (milliseconds per decoding step and share of the
sampling time) and writes everything to ``--out`` (default
``bench/results/profile_step.txt``). The last line is for a script to read::

    RESULT sampling <s>s steps <n> per-step <ms>ms python <p>% projections <p>% ...
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
import pytrio as trio
import torch

from grpo_helpers import presets, provenance, rollout
from grpo_helpers.local import decoder as decoder_module
from grpo_helpers.local import sampling

PARTS = (
    "prefill",
    "projections",
    "output layer",
    "attention and the rest of the step",
    "drawing the token",
    "stopping",
    "bookkeeping",
)


class Clock:
    """Wall-clock seconds per part, exclusive: a part's time excludes the parts
    measured inside it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.stack: list[list[Any]] = []
        self.steps = 0

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            frame = [part, time.perf_counter(), 0.0]
            self.stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                self.stack.pop()
                spent = time.perf_counter() - frame[1]
                self.seconds[part] += spent - frame[2]
                if self.stack:
                    self.stack[-1][2] += spent

        return timed


def _patch(clock: Clock) -> Callable[[], None]:
    """Wrap the sampler's parts; returns what undoes it."""
    merged = decoder_module.MergedLlamaDecoder
    saved = {
        "prefill": sampling._prefill,
        "draw": sampling._draw_tokens,
        "reason": sampling._Stopping.reason,
        "next": sampling._next_step,
        "step": merged.step,
        "mm": merged._mm,
    }

    def mm(self: Any, x: Any, weight: Any, step: bool = False) -> Any:
        part = "output layer" if weight is self.head else "projections"
        return clock.wrap(part, saved["mm"])(self, x, weight, step)

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        clock.steps += 1
        return clock.wrap("attention and the rest of the step", saved["step"])(
            self, *args, **kwargs
        )

    sampling._prefill = clock.wrap("prefill", saved["prefill"])
    sampling._draw_tokens = clock.wrap("drawing the token", saved["draw"])
    sampling._Stopping.reason = clock.wrap("stopping", saved["reason"])
    sampling._next_step = clock.wrap("bookkeeping", saved["next"])
    merged.step = step
    merged._mm = mm

    def undo() -> None:
        sampling._prefill = saved["prefill"]
        sampling._draw_tokens = saved["draw"]
        sampling._Stopping.reason = saved["reason"]
        sampling._next_step = saved["next"]
        merged.step = saved["step"]
        merged._mm = saved["mm"]

    return undo


def sample_step(
    sampler: Any, tokenizer: Any, prompts: list[list[int]], args: Any
) -> Any:
    """One step's sampling, as the sync loop does it: one prompt after the other.

    Each request is generated here, as the engine's sampling scheduler has it
    generated (``host.SamplingScheduler._generate``); :func:`main` runs on the
    engine's compute thread, so that the profilers, which watch the thread they
    start in, see it; the scheduler's batching window (for concurrent requests) is
    left out.
    """
    host = sampler._host
    out = []
    for i, tokens in enumerate(prompts):
        params = rollout.make_sampling_params(
            tokenizer, args.max_tokens, args.temperature, seed=100 + i
        )
        request = sampler._request(
            trio.ModelInput.from_ints(tokens), args.group_size, params, False, 0, True
        )
        with host.using(request.weights_key, request.merged) as decoder:
            out += sampling.generate(
                decoder,
                host.tokenizer,
                [request],
                host.eos_token_ids,
                host.pad_token_id,
            )
    return out


def main(argv: list[str] | None = None) -> str:
    """Profile on the engine's compute thread, where its torch work runs
    (``grpo_helpers.local.worker``; on another thread a step is slower)."""
    from grpo_helpers.local import worker

    return worker.run(_profile, argv)


def _profile(argv: list[str] | None) -> str:
    p = common.parser(__doc__, quick="tiny-random, 1 prompt x 4 completions")
    p.add_argument("--prompts", type=int, default=presets.NOTEBOOK["batch_size"])
    p.add_argument("--group-size", type=int, default=presets.NOTEBOOK["group_size"])
    p.add_argument("--max-tokens", type=int, default=presets.NOTEBOOK["max_tokens"])
    p.add_argument("--temperature", type=float, default=presets.NOTEBOOK["temperature"])
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    args.model = common.model_name(args)
    if args.quick:
        args.prompts, args.group_size, args.max_tokens = 1, 4, 8
    client, tokenizer, prompts = common.policy_and_prompts(
        "profile", args.model, args.prompts
    )
    sampler = client.save_weights_and_get_sampling_client()
    sample_step(sampler, tokenizer, prompts, args)  # warm-up: load, pack, caches

    clock = Clock()
    undo = _patch(clock)
    started = time.perf_counter()
    responses = sample_step(sampler, tokenizer, prompts, args)
    wall = time.perf_counter() - started
    undo()
    tokens = sum(len(s.tokens) for r in responses for s in r.sequences)

    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU]
    ) as prof:
        started = time.perf_counter()
        sample_step(sampler, tokenizer, prompts, args)
        profiled_wall = time.perf_counter() - started
    events = prof.key_averages()
    # top-level operators' own time: children are inside their parents' totals
    op_seconds = sum(e.self_cpu_time_total for e in events) / 1e6
    top_ops = sorted(events, key=lambda e: -e.self_cpu_time_total)[:12]

    profiler = cProfile.Profile()
    profiler.enable()
    sample_step(sampler, tokenizer, prompts, args)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)

    lines = [
        f"model {args.model}; {args.prompts} prompts x {args.group_size} completions "
        f"of <= {args.max_tokens} tokens at temperature {args.temperature}; "
        f"{torch.get_num_threads()} torch threads; "
        f"{provenance.numeric_path()['cpu_capability']}",
        f"sampling {wall:.2f} s for {tokens} tokens in {clock.steps} decoding steps "
        f"({1000 * wall / max(clock.steps, 1):.1f} ms a step)",
        "",
        f"{'part':40s} {'ms a step':>10s} {'share':>7s}",
    ]
    shares = {}
    for part in PARTS:
        seconds = clock.seconds.get(part, 0.0)
        shares[part] = seconds / wall
        lines.append(
            f"{part:40s} {1000 * seconds / max(clock.steps, 1):10.2f} "
            f"{shares[part]:7.1%}"
        )
    rest = wall - sum(clock.seconds.values())
    lines.append(
        f"{'the rest (requests, results, text)':40s} "
        f"{1000 * rest / max(clock.steps, 1):10.2f} {rest / wall:7.1%}"
    )
    python = max(0.0, 1 - op_seconds / profiled_wall)
    lines += [
        "",
        f"torch.profiler: {op_seconds:.2f} s inside torch operators of "
        f"{profiled_wall:.2f} s: {python:.0%} of the sampling time is Python "
        "between operators (and the profiler's own cost)",
        "operators with the most time of their own:",
        *(
            f"  {e.key:40s} {e.self_cpu_time_total / 1e3:9.1f} ms  {e.count:6d} calls"
            for e in top_ops
        ),
        "",
        "cProfile, the Python functions with the most time of their own:",
        text.getvalue().strip(),
    ]
    short = {
        "prefill": "prefill",
        "projections": "projections",
        "output layer": "head",
        "attention and the rest of the step": "attention",
        "drawing the token": "draw",
        "stopping": "stop",
        "bookkeeping": "bookkeeping",
    }
    result = (
        f"RESULT sampling {wall:.2f}s steps {clock.steps} per-step "
        f"{1000 * wall / max(clock.steps, 1):.1f}ms python {python:.0%} "
        + " ".join(f"{short[k]} {v:.0%}" for k, v in shares.items())
    )
    lines.append(result)
    report = "\n".join(lines)
    print(report)
    out = args.out or (
        None if args.quick else common.ROOT / "bench" / "results" / "profile_step.txt"
    )
    if out is not None:
        out.write_text(report + "\n")
    return result


if __name__ == "__main__":
    main()
