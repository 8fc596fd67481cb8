"""One real GRPO step, old engine path vs new, in one process on the same inputs.

The step is notebook 05's at its full defaults: SmolLM2-135M-Instruct, the series'
few-shot prompt, 2 arithmetic prompts x 8 completions of at most 64 tokens, sampled
one prompt after the other (the sync loop), then ``forward_backward`` on the 16
Datums and one ``optim_step``.

* **old**: ``connect("local", shared_prefix=False, merged_sampler=False)``: every
  Datum recomputes its prompt; the sampler runs the LoRA adapter unmerged (peft).
* **new**: the defaults: shared prompts computed once in training, and a sampler on
  merged weights (``grpo_helpers.local.decoder.MergedLlamaDecoder``).

Both train on the same Datums (sampled once), and both sample the same prompts with
the same seeds. A third client samples them too, on the new path with the merged
weights' products in bfloat16 (``GRPOConfig.sampler_precision``: a faster sampler of
another policy, whose gap notebook 11 measures): its sampling time beside the
float32 sampler's. Runs alternate (old, new, old, new, ...) so that a disturbance on a
shared machine hits both; the ratios use the median run of each.

It also measures the machine's own floor, in the same run:

* training: the FLOPs the step needs (prefix once, every completion, forward and
  the backward to the inputs) divided by a ``torch.mm`` probe at the model's shapes;
* decoding: the bytes of weights one decoding step reads, times the decoding steps,
  divided by a memory-bandwidth probe (reading a 512 MB tensor), plus the prompts'
  prefill FLOPs divided by the matmul probe.

Run::

    python bench/step_time.py            # SmolLM2, about 5 minutes on 2 cores
    python bench/step_time.py --quick    # tiny-random, seconds (the test suite runs it)

The last line is for a script to read (ratios old/new, share of the floor)::

    RESULT training <x>x sampling <x>x step <x>x floor-training <p>% \
        floor-decoding <p>% bf16-sampling <x>x
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import common
import torch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.parser(
        __doc__,
        quick="tiny-random, 1 prompt x 4 completions of <= 8 tokens, 1 repeat: a "
        "smoke run of a few seconds (the test suite runs it)",
    )
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--lora-rank", type=int, default=16)
    args = p.parse_args(argv)
    args.model = common.model_name(args)
    if args.quick:
        args.repeats, args.max_tokens = 1, 8
        args.prompts, args.group_size = 1, 4
    return args


# ---------------------------------------------------------------------- probes


def matmul_probe(hidden: int, intermediate: int, rows: int = 512) -> float:
    """GFLOP/s of ``torch.mm`` at the model's projection shapes (best of 5)."""
    shapes = [(rows, hidden, intermediate), (rows, intermediate, hidden)]
    shapes.append((rows, hidden, hidden))
    mats = [(torch.randn(m, k), torch.randn(k, n)) for m, k, n in shapes]
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        flops = 0
        for a, b in mats:
            for _ in range(4):
                torch.mm(a, b)
                flops += 2 * a.shape[0] * a.shape[1] * b.shape[1]
        best = max(best, flops / (time.perf_counter() - t) / 1e9)
    return best


def skinny_matmul_probe(model: Any, rows: int = 8) -> float:
    """GB/s of weights read by ``x @ W.t()`` at ``rows`` rows (a decoding step's
    products at batch 8), over every linear layer of one decoder block."""
    block = model.get_decoder().layers[0]
    weights = [
        m.weight.detach()
        for name, m in block.named_modules()
        if isinstance(m, torch.nn.Linear) and "lora_" not in name
    ]
    inputs = [torch.randn(rows, w.shape[1]) for w in weights]
    nbytes = sum(w.numel() * w.element_size() for w in weights)
    best = 0.0
    with torch.no_grad():
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(20):
                for x, w in zip(inputs, weights, strict=True):
                    x @ w.t()
            best = max(best, 20 * nbytes / (time.perf_counter() - t) / 1e9)
    return best


def bandwidth_probe(megabytes: int = 512) -> float:
    """GB/s of reading a tensor far larger than the caches (best of 5 sums)."""
    x = torch.ones(megabytes * 2**20 // 4)
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        x.sum()
        best = max(best, x.numel() * 4 / (time.perf_counter() - t) / 1e9)
    return best


def linear_params(model: Any) -> tuple[int, int]:
    """(parameters of the attention and MLP projections, of the output layer).

    Only the frozen base weights count (peft's ``base_layer``), not LoRA's.
    """
    body = sum(
        module.weight.numel()
        for layer in model.model.layers
        for name, module in layer.named_modules()
        if isinstance(module, torch.nn.Linear) and "lora_" not in name
    )
    head = model.get_output_embeddings()
    return body, getattr(head, "base_layer", head).weight.numel()


def attention_pairs(seqs: list[list[int]], plan: list[Any]) -> int:
    """(query, key) pairs a causal forward computes under ``plan``."""
    pairs = 0
    for group in plan:
        p = group.prefix_len if group.shared else 0
        pairs += p * (p + 1) // 2
        for m in group.members:
            s = len(seqs[m]) - p
            pairs += s * p + s * (s + 1) // 2
    return pairs


def forward_flops(body: int, head: int, positions: int, attention: int) -> float:
    """FLOPs of one forward pass: 2 per weight per position, plus attention."""
    return 2.0 * (body + head) * positions + attention


# ---------------------------------------------------------------------- the step


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse_args(argv)
    import pytrio as trio

    from grpo_helpers import data, datum, engines, prompts, rewards, rollout
    from grpo_helpers.config import GRPOConfig
    from grpo_helpers.local import batch_plan

    paths = {
        "old": common.connect("step-time", shared_prefix=False, merged_sampler=False),
        "new": common.connect("step-time"),
    }
    clients = {
        name: svc.create_lora_training_client(args.model, rank=args.lora_rank, seed=0)
        for name, svc in paths.items()
    }
    half = paths["new"].create_lora_training_client(
        args.model, rank=args.lora_rank, seed=0
    )
    engines.configure_samplers(half, precision="bfloat16")
    tok = clients["new"].get_tokenizer()
    config = GRPOConfig(backend="local", dataset="arithmetic", seed=0)
    rows = data.load_split(config, "train").select(range(args.prompts))
    prompt_tokens = [prompts.build_prompt(tok, r["question"]) for r in rows]
    golds = [data.extract_gsm8k_answer(r["answer"]) for r in rows]
    adam = trio.AdamParams(learning_rate=2e-4)
    reward = rewards.shaped_reward

    def sample_step(tc: Any, seed: int) -> tuple[float, list]:
        t = time.perf_counter()
        sampler = tc.save_weights_and_get_sampling_client()
        groups = []
        for i, (p, gold) in enumerate(zip(prompt_tokens, golds, strict=True)):
            params = rollout.make_sampling_params(tok, args.max_tokens, seed=seed + i)
            groups.append(
                rollout.run_rollout_group(
                    sampler,
                    tok,
                    p,
                    gold,
                    params,
                    args.group_size,
                    reward,
                )
            )
        return time.perf_counter() - t, groups

    peak_mb: dict[str, list[float]] = {n: [] for n in paths}

    def train_step(tc: Any, datums: list, name: str = "") -> float:
        t = time.perf_counter()
        with common.PeakMemory() as memory:
            tc.forward_backward(datums, "importance_sampling")
            tc.optim_step(adam).result()
        if name:
            peak_mb[name].append(memory.peak_mb)
        return time.perf_counter() - t

    # The Datums both paths train on: one sampling, advantages made non-zero so
    # that every completion carries a gradient (as in a step that learns).
    _, groups = sample_step(clients["new"], seed=1000)
    datums = []
    for p, group in zip(prompt_tokens, groups, strict=True):
        for j, sample in enumerate(group):
            sample.advantage = (j % 3 - 1) * 0.25
            datums.append(datum.build_grpo_datum(p, sample))

    # Warm-up: first calls build buffers (the merged decoder) and thread pools.
    for tc in clients.values():
        sample_step(tc, seed=2000)
        train_step(tc, datums[:2])
    sample_step(half, seed=2000)
    half_seconds: list[float] = []

    times: dict[str, dict[str, list[float]]] = {
        n: {"sampling": [], "training": [], "tokens": []} for n in paths
    }
    decode_steps: list[int] = []
    for r in range(args.repeats):
        for name, tc in clients.items():
            seconds, groups = sample_step(tc, seed=r)
            times[name]["sampling"].append(seconds)
            times[name]["tokens"].append(sum(len(s.tokens) for g in groups for s in g))
            if name == "new":
                decode_steps.append(sum(max(len(s.tokens) for s in g) for g in groups))
            times[name]["training"].append(train_step(tc, datums, name))
            if name == "new":
                half_seconds.append(sample_step(half, seed=r)[0])
            print(
                f"  run {r} {name}: sampling {seconds:6.2f} s "
                f"({times[name]['tokens'][-1]} tokens), training "
                f"{times[name]['training'][-1]:6.2f} s",
                flush=True,
            )

    med = {
        n: {k: statistics.median(v) for k, v in t.items() if k != "tokens"}
        for n, t in times.items()
    }
    for n in med:
        med[n]["step"] = med[n]["sampling"] + med[n]["training"]

    # ------------------------------------------------------------------ floors
    model = clients["new"]._host.model
    body, head = linear_params(model)
    cfg = model.config
    gflops = matmul_probe(cfg.hidden_size, cfg.intermediate_size)
    gbps = bandwidth_probe(64 if args.quick else 512)
    skinny = skinny_matmul_probe(model)
    seqs = [d.model_input.to_ints() for d in datums]
    plan = batch_plan.plan_shared_prefixes(seqs)
    positions = batch_plan.positions_computed(seqs, plan)
    d_attn = cfg.num_attention_heads * getattr(
        cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads
    )
    # Q K^T and A V: 2 x 2 x d FLOPs per (query, key) pair and layer.
    attention = 4.0 * cfg.num_hidden_layers * d_attn * attention_pairs(seqs, plan)
    train_flops = 2 * forward_flops(body, head, positions, attention)
    floor_train = train_flops / (gflops * 1e9)
    bytes_per_step = (body + head) * model.get_output_embeddings().weight.element_size()
    prefill = sum(forward_flops(body, head, len(p), 0) for p in prompt_tokens)
    floor_decode = statistics.median(decode_steps) * bytes_per_step / (
        gbps * 1e9
    ) + prefill / (gflops * 1e9)

    ratio = {k: med["old"][k] / med["new"][k] for k in ("training", "sampling", "step")}
    ratio["bf16_sampling"] = med["new"]["sampling"] / statistics.median(half_seconds)
    frac_train = floor_train / med["new"]["training"]
    frac_decode = floor_decode / med["new"]["sampling"]
    print(
        f"model={args.model} threads={torch.get_num_threads()} prompts={args.prompts} "
        f"group_size={args.group_size} max_tokens={args.max_tokens} "
        f"repeats={args.repeats} prompt_tokens={[len(p) for p in prompt_tokens]}"
    )
    print(f"{'':10}{'old':>10}{'new':>10}{'ratio':>8}   (median seconds; range)")
    for k in ("sampling", "training", "step"):
        spread = ""
        if k != "step":
            spread = "   " + ", ".join(
                f"{n} {min(times[n][k]):.2f}-{max(times[n][k]):.2f}" for n in paths
            )
        print(
            f"{k:10}{med['old'][k]:10.2f}{med['new'][k]:10.2f}{ratio[k]:7.2f}x{spread}"
        )
    print(
        f"training positions: plain {sum(map(len, seqs))}, shared {positions}; "
        f"FLOPs {train_flops / 1e9:.0f} G; matmul probe {gflops:.0f} GFLOP/s -> "
        f"floor {floor_train:.2f} s, {frac_train:.0%} of it reached"
    )
    print(
        f"decoding: {statistics.median(decode_steps):.0f} steps x "
        f"{bytes_per_step / 1e6:.0f} MB of weights; bandwidth probe {gbps:.1f} GB/s, "
        f"skinny-matmul probe {skinny:.1f} GB/s "
        f"(+ prefill {prefill / 1e9:.0f} GFLOP) -> floor {floor_decode:.2f} s, "
        f"{frac_decode:.0%} of it reached"
    )
    print(
        f"bfloat16 sampler: sampling {statistics.median(half_seconds):.2f} s, "
        f"{ratio['bf16_sampling']:.2f}x the float32 sampler's speed (another policy: "
        "notebook 11 measures its gap)"
    )
    decoder = clients["new"]._host._merged
    print(
        f"training peak memory above the resting process: old "
        f"{max(peak_mb['old']):.0f} MB, new {max(peak_mb['new']):.0f} MB; the merged "
        f"sampler holds {decoder.nbytes() / 2**20 if decoder else 0:.0f} MB of "
        "weights (one copy per base model)"
    )
    print(
        f"RESULT training {ratio['training']:.1f}x sampling {ratio['sampling']:.1f}x "
        f"step {ratio['step']:.1f}x floor-training {frac_train:.0%} "
        f"floor-decoding {frac_decode:.0%} bf16-sampling {ratio['bf16_sampling']:.2f}x"
    )
    result = {
        **{f"ratio_{k}": v for k, v in ratio.items()},
        "floor_training": frac_train,
        "floor_decoding": frac_decode,
        "peak_mb_old": max(peak_mb["old"]),
        "peak_mb_new": max(peak_mb["new"]),
    }
    return common.write_json(args, result)


if __name__ == "__main__":
    main()
