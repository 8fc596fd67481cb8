"""Sampling one GRPO step as 2 prompts x 8 completions or as 1 prompt x 16.

Both shapes sample 16 completions a step, so training costs the same; sampling does
not. The sync loop samples its prompts one after the other, each group decoding
until its longest completion ends: 2 x 8 runs two decodes of 8 rows, 1 x 16 one
decode of 16 rows. On a CPU a decoding step of 16 rows costs less than two of 8,
because the weights are read once per step whatever the rows (notebook 06).

The same process runs both shapes on SmolLM2 with notebook 05's sampling settings
(at most 48 tokens, temperature 0.6), alternating (2 x 8, 1 x 16, 2 x 8, ...) so that
a disturbance on a shared machine hits both, and reports medians. Completions end
when they end, so the two shapes decode different numbers of steps; besides the
seconds per training step it reports the milliseconds per decoding step, which do
not depend on that.

Run::

    python bench/group_shape_time.py            # SmolLM2, about 3 minutes on 2 cores
    python bench/group_shape_time.py --quick    # tiny-random, seconds

The last line is for a script to read (1 x 16 over 2 x 8)::

    RESULT step-sampling <x>x decoding-step <x>x
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import common

#: The two shapes: (prompts, completions per prompt).
SHAPES = {"2 x 8": (2, 8), "1 x 16": (1, 16)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.parser(__doc__, quick="tiny-random, 8 tokens, 1 run")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    args.model = common.model_name(args)
    if args.quick:
        args.max_tokens, args.repeats = 8, 1
    return args


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse_args(argv)
    import pytrio as trio

    from grpo_helpers import rollout

    tc, tok, prompt_tokens = common.policy_and_prompts("group-shape", args.model)
    sampler = tc.save_weights_and_get_sampling_client()

    def sample(shape: str, seed: int) -> tuple[float, int, int]:
        """Seconds, decoding steps and tokens of one step's sampling."""
        n_prompts, group = SHAPES[shape]
        t = time.perf_counter()
        steps = tokens = 0
        for i in range(n_prompts):  # one after the other, as the sync loop does
            params = rollout.make_sampling_params(
                tok, args.max_tokens, temperature=args.temperature, seed=seed + i
            )
            response = sampler.sample(
                prompt=trio.ModelInput.from_ints(prompt_tokens[i]),
                num_samples=group,
                sampling_params=params,
            ).result()
            lengths = [len(s.tokens) for s in response.sequences]
            steps, tokens = steps + max(lengths), tokens + sum(lengths)
        return time.perf_counter() - t, steps, tokens

    sample("2 x 8", seed=999)  # warm-up: buffers and thread pools
    runs: dict[str, list[tuple[float, int, int]]] = {s: [] for s in SHAPES}
    for r in range(args.repeats):
        for shape in SHAPES:
            seconds, steps, tokens = sample(shape, seed=10 * r)
            runs[shape].append((seconds, steps, tokens))
            print(
                f"  run {r} {shape}: {seconds:6.2f} s, {steps} decoding steps, "
                f"{tokens} tokens, {1000 * seconds / steps:6.1f} ms a decoding step",
                flush=True,
            )
    result: dict[str, Any] = {}
    for shape, measured in runs.items():
        result[f"{shape} seconds"] = statistics.median(m[0] for m in measured)
        result[f"{shape} ms per decoding step"] = statistics.median(
            1000 * m[0] / m[1] for m in measured
        )
        print(
            f"{shape}: median {result[f'{shape} seconds']:.2f} s a step, "
            f"{result[f'{shape} ms per decoding step']:.1f} ms a decoding step "
            f"({len(measured)} runs)"
        )
    result["ratio_step"] = result["1 x 16 seconds"] / result["2 x 8 seconds"]
    result["ratio_decoding_step"] = (
        result["1 x 16 ms per decoding step"] / result["2 x 8 ms per decoding step"]
    )
    print(
        f"RESULT step-sampling {result['ratio_step']:.2f}x "
        f"decoding-step {result['ratio_decoding_step']:.2f}x"
    )
    return common.write_json(args, result)


if __name__ == "__main__":
    main()
