"""One decoding step of the merged sampler: plain matrix products vs MKL's packed ones.

Notebook 05's sampling is most of its time, and most of a decoding step is matrix
products of 8 rows against every weight of the model (``aten::mm`` was 64% of a
step's CPU time under ``torch.profiler``). MKL can keep a weight in its own packed
layout for a fixed number of rows (``torch.ops.mkl._mkl_reorder_linear_weight``)
and multiply by it without re-packing (``torch.ops.mkl._mkl_linear``): what
``torch.compile`` does for a frozen linear layer on a CPU. This script asks whether
that is worth building into ``MergedLlamaDecoder``, before anything changes:

* it builds the merged decoder of SmolLM2 as the engine does, prefills the series'
  few-shot prompt and fans it out to 8 rows (one group);
* it times one decoding step with the engine's ``_linear`` and with a packed
  product for every weight, alternating (plain, packed, plain, ...) so that a
  disturbance hits both, and reports the medians and their ratio;
* it compares the two steps' logits (largest absolute difference, same argmax);
* it times the prefill of the prompt, and profiles ten plain steps with
  ``torch.profiler`` to say which operations their CPU time goes to;
* it also times the step with a bfloat16 copy of every weight (``F.linear`` on
  bfloat16 inputs, oneDNN's AVX512-BF16/AMX kernels where the CPU has them), the
  lower-precision lever of ``docs/performance.md``, and how far its logits move
  from float32's. The engine has no such path: this only measures what it would buy.

Nothing in the engine changes: the packed product is patched in for this script
only. Packing costs a copy of the weights once per sampler (the weights change at
every GRPO step), which the script also times.

Run (about a minute on 2 cores; nothing else running)::

    python bench/packed_linear.py

The last line is for a script to read::

    RESULT step-plain <ms> step-packed <ms> ratio <x> max-diff <d> pack <ms> \
        step-bf16 <ms> bf16-max-diff <d>
"""

from __future__ import annotations

import statistics
import time

import common
import torch


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = common.parser(__doc__)
    p.add_argument("--rows", type=int, default=8, help="rows of a decoding step")
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args(argv)
    if not (
        torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")
    ):
        print("this torch build has no MKL packed products: nothing to compare")
        return {}

    from grpo_helpers.local import decoder as dec_mod

    group = common.OneGroup(args.model, args.rows)  # its prefill: the warm-up
    dec, n, rows = group.decoder, len(group.prompt), group.rows
    with torch.no_grad():
        t = time.perf_counter()
        dec.prefill(*group.prompt_inputs(), n + 8, False)
        prefill_ms = (time.perf_counter() - t) * 1000

    weights = [w for layer in dec.layers for w in (layer.qkv, layer.o)]
    weights += [w for layer in dec.layers for w in (layer.gate_up, layer.down)]
    weights.append(dec.head)
    t = time.perf_counter()
    packed = {id(w): torch.ops.mkl._mkl_reorder_linear_weight(w, rows) for w in weights}
    pack_ms = (time.perf_counter() - t) * 1000
    plain_linear = dec_mod._linear

    def packed_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        if flat.shape[0] != rows or id(weight) not in packed:
            return plain_linear(x, weight)
        out = torch.ops.mkl._mkl_linear(flat, packed[id(weight)], weight, None, rows)
        return out.reshape(*x.shape[:-1], weight.shape[0])

    halves = {id(w): w.to(torch.bfloat16) for w in weights}

    def bf16_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        half = halves.get(id(weight))
        if half is None:
            return plain_linear(x, weight)
        return torch.nn.functional.linear(x.to(torch.bfloat16), half).float()

    def step(linear: object) -> tuple[float, torch.Tensor]:
        dec_mod._linear = linear
        try:
            t = time.perf_counter()
            logits = group.step()
            return (time.perf_counter() - t) * 1000, logits
        finally:
            dec_mod._linear = plain_linear

    ways = {"plain": plain_linear, "packed": packed_linear, "bf16": bf16_linear}
    for fn in ways.values():  # warm-up
        step(fn)
    times: dict[str, list[float]] = {name: [] for name in ways}
    logits: dict[str, torch.Tensor] = {}
    for _ in range(args.repeats):
        for name, fn in ways.items():
            seconds, logits[name] = step(fn)
            times[name].append(seconds)
    a, b = logits["plain"], logits["packed"]
    diff = (a - b).abs().max().item()
    same = bool((a.argmax(-1) == b.argmax(-1)).all())
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["plain"] / med["packed"]
    print(
        f"model={args.model} threads={torch.get_num_threads()} rows={rows} "
        f"prompt_tokens={n} repeats={args.repeats}"
    )
    for k, v in times.items():
        print(
            f"{k:>7}: median {med[k]:.1f} ms a step (range {min(v):.1f}-{max(v):.1f})"
        )
    print(
        f"packed is {ratio:.2f}x the plain step's speed; logits differ by at most "
        f"{diff:.2e} (same argmax on every row: {same}); packing every weight once "
        f"took {pack_ms:.0f} ms"
    )
    print(f"prefill of the {n}-token prompt (one row): {prefill_ms:.0f} ms")
    half_diff = (logits["bf16"] - a).abs().max().item()
    half_same = bool((logits["bf16"].argmax(-1) == a.argmax(-1)).all())
    print(
        f"bfloat16 weights: {med['plain'] / med['bf16']:.2f}x the plain step's speed, "
        f"{med['packed'] / med['bf16']:.2f}x the packed one's; logits differ from "
        f"float32 by at most {half_diff:.2e} (same argmax on every row: {half_same})"
    )
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(10):
            step(plain_linear)
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in ops)
    shares = ", ".join(f"{e.key} {e.self_cpu_time_total / total:.0%}" for e in ops[:4])
    print(f"ten plain steps, share of self CPU time by operation: {shares}")
    print(
        f"RESULT step-plain {med['plain']:.1f} step-packed {med['packed']:.1f} "
        f"ratio {ratio:.2f} max-diff {diff:.2e} pack {pack_ms:.0f} "
        f"step-bf16 {med['bf16']:.1f} bf16-max-diff {half_diff:.2e}"
    )
    return {
        "plain": med["plain"],
        "packed": med["packed"],
        "ratio": ratio,
        "diff": diff,
        "bf16": med["bf16"],
        "bf16_diff": half_diff,
    }


if __name__ == "__main__":
    main()
