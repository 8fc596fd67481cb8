"""Why the local engine runs every torch job on one thread: a decoding step, three ways.

torch's CPU operators run on OpenMP, and each thread that starts parallel work gets
a team of helper threads. This script times one decoding step of the merged
sampler (SmolLM2, the series' few-shot prompt, 8 rows, packed products as the
engine uses them) in three fresh processes, so that no way inherits another's
threads:

* ``main``: everything on the main thread;
* ``second``: the main thread runs torch work first (a matrix product, as loading
  a model or a notebook cell does), then a second thread loads the model and
  decodes: what the engine did when each training client and the sampler had a
  thread of their own;
* ``one-other``: everything on one other thread, the main thread running no torch
  work: what the engine does now (``grpo_helpers.local.worker``).

It then samples one step of notebook 05 (2 prompts x 8 completions of at most 48
tokens, one after the other) through the engine, and reports its decoding steps'
median time beside the three.

Run (about 2 minutes on 2 cores; nothing else running)::

    python bench/engine_threads.py
    python bench/engine_threads.py --quick   # tiny-random, seconds

The last line is for a script to read::

    RESULT main <ms> second <ms> one-other <ms> engine <ms> second/main <x>
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common

WAYS = ("main", "second", "one-other")


def parse_args(argv: list[str] | None = None) -> Any:
    p = common.parser(__doc__, quick="tiny-random, 5 steps")
    p.add_argument("--steps", type=int, default=20, help="decoding steps timed")
    p.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)  # one child
    args = p.parse_args(argv)
    args.model = common.model_name(args)
    if args.quick:
        args.steps = 5
    return args


def decoding_step_ms(model_name: str, steps: int) -> float:
    """Median ms of one decoding step of 8 rows on the calling thread."""
    group = common.OneGroup(model_name, rows=8)
    group.decoder.prepare(group.rows, 47)  # packed products, as the engine's
    times = []
    for _ in range(steps + 2):
        t = time.perf_counter()
        group.step()
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times[2:])


def one_way(args: Any) -> float:
    """The step's time, ``args.way``, in this process."""
    import concurrent.futures

    if args.way == "main":
        return decoding_step_ms(args.model, args.steps)
    if args.way == "second":
        import torch

        x = torch.randn(1024, 1024)
        (x @ x).sum()  # the main thread's own torch work
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(decoding_step_ms, args.model, args.steps).result()


def engine_step_ms(args: Any) -> float:
    """Median ms of a decoding step while the engine samples notebook 05's step."""
    import pytrio as trio

    from grpo_helpers import rollout
    from grpo_helpers.local import decoder as dec_mod

    tc, tok, prompt_tokens = common.policy_and_prompts("engine-threads", args.model)
    times: list[float] = []
    step = dec_mod.MergedLlamaDecoder.step

    def timed(self: Any, *a: Any) -> Any:
        t = time.perf_counter()
        out = step(self, *a)
        times.append(time.perf_counter() - t)
        return out

    dec_mod.MergedLlamaDecoder.step = timed  # type: ignore[method-assign]
    try:
        for seed in (999, 0):  # a warm-up step, then the timed one
            times.clear()
            sampler = tc.save_weights_and_get_sampling_client()
            for i, tokens in enumerate(prompt_tokens):
                params = rollout.make_sampling_params(
                    tok, 48, temperature=0.6, seed=seed + i
                )
                sampler.sample(
                    prompt=trio.ModelInput.from_ints(tokens),
                    num_samples=8,
                    sampling_params=params,
                ).result()
    finally:
        dec_mod.MergedLlamaDecoder.step = step  # type: ignore[method-assign]
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse_args(argv)
    if args.way:
        print(json.dumps({"ms": one_way(args)}))
        return {}
    result: dict[str, float] = {}
    for way in WAYS:
        command = [sys.executable, str(Path(__file__).resolve()), "--way", way]
        command += ["--steps", str(args.steps), "--model", args.model]
        command += ["--quick"] if args.quick else []
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        result[way] = json.loads(out.stdout.strip().splitlines()[-1])["ms"]
        print(f"  {way:>9}: {result[way]:6.1f} ms a decoding step", flush=True)
    result["engine"] = engine_step_ms(args)
    print(f"     engine: {result['engine']:6.1f} ms a decoding step (notebook 05's)")
    slower = result["second"] / result["main"]
    print(
        f"model={args.model} rows=8 steps={args.steps}: on a second thread after the "
        f"main thread's torch work a step takes {slower:.2f}x as long as on the main "
        f"thread; on one other thread alone {result['one-other'] / result['main']:.2f}x"
    )
    print(
        f"RESULT main {result['main']:.1f} second {result['second']:.1f} one-other "
        f"{result['one-other']:.1f} engine {result['engine']:.1f} "
        f"second/main {slower:.2f}"
    )
    return common.write_json(args, result)


if __name__ == "__main__":
    main()
