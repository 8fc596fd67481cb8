"""How fast does an evaluation run on the local engine? Ratios from one run.

An evaluation sends every held-out question with the same few-shot prompt (about
230 of each prompt's 280 tokens), greedy, at most ``max_tokens`` tokens. This
script scores the same questions with the base model four ways and prints the
seconds of each and the ratios:

* ``share_prefix`` off / on (``connect("local", shared_prefix=...)``): each batch
  prefills every prompt whole, or the shared few-shot prefix once and each
  prompt's own tokens after it (``grpo_helpers.local.prompt_cache.shared_prefix_len``);
* ``concurrency``: requests in flight, hence completions decoded per batch.

It also counts the completions that differ from the plain path's (greedy: float
noise can flip a near tie; the accuracy of each run is printed beside it).

Run::

    python bench/eval_speed.py                    # SmolLM2, 100 questions
    python bench/eval_speed.py --model tiny-random --n 16 --max-tokens 8
"""

from __future__ import annotations

import json
import platform
import time

import common
import torch

from grpo_helpers import data
from grpo_helpers.config import GRPOConfig
from grpo_helpers.local import counters
from grpo_helpers.results import evaluation


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the four timings; print the table; return its rows."""
    p = common.parser(__doc__)
    p.add_argument("--n", type=int, default=100, help="held-out questions")
    p.add_argument(
        "--dataset",
        default="arithmetic",
        choices=("arithmetic", "gsm8k"),
        help="held-out split (notebook 07 and the bench score arithmetic)",
    )
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    args = p.parse_args(argv)

    config = GRPOConfig(base_model=args.model, backend="local", dataset=args.dataset)
    split = data.load_split(config, "test")
    if not 0 < args.n <= len(split):
        p.error(
            f"--n {args.n}: the {args.dataset} held-out split has {len(split)} "
            f"questions; pass a number from 1 to {len(split)}"
        )
    questions = split.select(range(args.n))
    samplers = {  # two services on one host: the same model in memory
        share: common.connect("eval-speed", shared_prefix=share).create_sampling_client(
            base_model=args.model
        )
        for share in (False, True)
    }
    tokenizer = samplers[True].get_tokenizer()
    # Warm-up: load the model and build the merged decoder outside the timings.
    evaluation.evaluate(
        samplers[True],
        tokenizer,
        questions.select(range(2)),
        max_tokens=4,
        progress=False,
    )
    rows = []
    texts: dict[tuple[bool, int], list[str]] = {}
    elapsed: list[float] = []  # unrounded, for the ratios (a quick run takes ~0 s)
    for concurrency in args.concurrency:
        for share in (False, True):
            start = time.perf_counter()
            with counters.counting() as ran:  # which prefill path really ran
                result = evaluation.evaluate(
                    samplers[share],
                    tokenizer,
                    questions,
                    temperature=0.0,
                    max_tokens=args.max_tokens,
                    concurrency=concurrency,
                    progress=False,
                )
            seconds = time.perf_counter() - start
            elapsed.append(seconds)
            texts[share, concurrency] = list(result.records["completion"])
            rows.append(
                {
                    "concurrency": concurrency,
                    "share_prefix": share,
                    "seconds": round(seconds, 1),
                    "exact_acc": result.summary["exact_acc"],
                    "lenient_acc": result.summary["lenient_acc"],
                    "shared_prefills": ran["sampling_shared_prefills"],
                    "plain_prefills": ran["sampling_plain_prefills"],
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    plain = elapsed[0]
    reference = texts[False, args.concurrency[0]]
    print(f"\n{args.n} questions, max_tokens={args.max_tokens}, {args.model}")
    print(
        f"{platform.processor() or platform.machine()}, torch threads:",
        torch.get_num_threads(),
    )
    print("concurrency  share_prefix  seconds  speed-up  differ  exact  lenient")
    for row, seconds in zip(rows, elapsed, strict=True):
        differ = sum(
            a != b
            for a, b in zip(
                reference, texts[row["share_prefix"], row["concurrency"]], strict=True
            )
        )
        row["differ_from_plain"] = differ
        row["speedup"] = round(plain / max(seconds, 1e-9), 2)
        print(
            f"{row['concurrency']:>11}  {row['share_prefix']!s:>12}  "
            f"{row['seconds']:>7}  {row['speedup']:>7}x  {differ:>6}  "
            f"{row['exact_acc']:.2f}   {row['lenient_acc']:.2f}"
        )
    return common.write_json(args, rows)


if __name__ == "__main__":
    main()
