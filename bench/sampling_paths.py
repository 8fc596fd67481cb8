"""One sync step's sampling, with and without the sampler's CPU shortcuts.

Notebook 05's sync loop samples two prompts one after the other, 8 completions of at
most 48 tokens each, from new weights at every step. Sampling is most of the
notebook's time, and most of sampling is decoding steps (``bench/packed_linear.py``).
Two shortcuts of ``MergedLlamaDecoder`` target that:

* **packed products** (``decoder.prepare``): the weights are re-laid out once for
  8 rows by MKL, and finished completions stay in the batch, fed padding, so that
  every decoding step has the packed row count;
* **the prompt memory** (``decoder.recall`` / ``remember``): the second prompt of
  a step starts with the same few-shot tokens as the first, on the same weights,
  and runs only its own tokens.

``--only packing|memory`` turns off that one shortcut "without" (the others
stay on both ways), to measure what it alone buys.

This script samples one step both ways, in one process and on the same weights and
seeds, alternating (without, with, without, ...) so that a disturbance on a shared
machine hits both; each time from a new sampler (``save_weights_and_get_sampling_
client``), so the merge, the packing and the first prompt's prefill are paid as the
notebook pays them. It reports the median seconds of each way, their ratio, and
how many of the 16 completions came out token for token the same (the products
add up in another order, so a draw that falls on the border between two tokens
may change; see ``same_until_a_cdf_boundary`` in ``tests/helpers/local_engine.py``).

Run (about 5 minutes on 2 cores; nothing else running)::

    python bench/sampling_paths.py
    python bench/sampling_paths.py --quick   # tiny-random, seconds
    python bench/sampling_paths.py --only packing

The last line is for a script to read::

    RESULT without <s> with <s> ratio <x> same <n>/<total>
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import common

WAYS = ("without", "with")
SHORTCUTS = ("packing", "memory")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.parser(__doc__, quick="tiny-random, 1 repeat")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--only", choices=SHORTCUTS, help="the one shortcut that 'without' turns off"
    )
    args = p.parse_args(argv)
    args.model = common.model_name(args)
    if args.quick:
        args.repeats = 1
    return args


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse_args(argv)
    import pytrio as trio

    from grpo_helpers import rollout

    tc, tok, prompt_tokens = common.policy_and_prompts("sampling-paths", args.model)

    defaults: dict[str, bool] = {}  # the decoder's own settings, restored at the end

    def sample(way: str, seed: int) -> tuple[float, list[list[int]]]:
        """Seconds and completions of one step's sampling, done ``way``."""
        sampler = tc.save_weights_and_get_sampling_client()  # new weights' id
        decoder = tc._host._merged
        if decoder is not None:
            for name in SHORTCUTS:
                defaults.setdefault(name, getattr(decoder, name))
                off = way == "without" and args.only in (None, name)
                setattr(decoder, name, defaults[name] and not off)
        t = time.perf_counter()
        completions = []
        for i, tokens in enumerate(prompt_tokens):  # one after the other
            params = rollout.make_sampling_params(
                tok, args.max_tokens, temperature=args.temperature, seed=seed + i
            )
            response = sampler.sample(
                prompt=trio.ModelInput.from_ints(tokens),
                num_samples=args.group_size,
                sampling_params=params,
            ).result()
            completions += [s.tokens for s in response.sequences]
        return time.perf_counter() - t, completions

    try:
        return common.write_json(args, _compare(args, sample, tc._host))
    finally:
        if tc._host._merged is not None and defaults:
            for name in SHORTCUTS:
                setattr(tc._host._merged, name, defaults[name])


def _compare(args: argparse.Namespace, sample: Any, host: Any) -> dict[str, float]:
    """Warm up, then alternate the two ways ``args.repeats`` times and report."""
    for way in WAYS:  # warm-up: buffers, thread pools, the merged decoder
        sample(way, seed=999)
    if host._merged is None:
        print("this host samples on the plain path: no shortcut to compare")
        return {}
    if not host._merged.packing:
        print("no MKL packed products here: 'with' differs by the prompt memory only")
    seconds: dict[str, list[float]] = {w: [] for w in WAYS}
    same = total = 0
    for r in range(args.repeats):
        outputs = {}
        for way in WAYS:
            s, outputs[way] = sample(way, seed=100 * r)
            seconds[way].append(s)
        pairs = list(zip(*outputs.values(), strict=True))
        same += sum(a == b for a, b in pairs)
        total += len(pairs)
        lengths = [len(c) for c in outputs["with"]]
        print(
            f"  repeat {r}: without {seconds['without'][-1]:6.2f} s, with "
            f"{seconds['with'][-1]:6.2f} s; {sum(a == b for a, b in pairs)}/"
            f"{len(pairs)} completions the same; longest {max(lengths)} tokens",
            flush=True,
        )
    med = {w: statistics.median(v) for w, v in seconds.items()}
    ratio = med["without"] / med["with"]
    print(
        f"model={args.model} group={args.group_size} x 2 prompts, at most "
        f"{args.max_tokens} tokens, temperature {args.temperature}, "
        f"{args.repeats} repeats; without: {args.only or 'every shortcut'} off"
    )
    print(
        f"median seconds of one step's sampling: without {med['without']:.2f}, with "
        f"{med['with']:.2f}: {ratio:.2f}x; {same}/{total} completions the same"
    )
    print(
        f"RESULT without {med['without']:.2f} with {med['with']:.2f} "
        f"ratio {ratio:.2f} same {same}/{total}"
    )
    return {
        "without": med["without"],
        "with": med["with"],
        "ratio": ratio,
        "same": same,
        "total": total,
    }


if __name__ == "__main__":
    main()
