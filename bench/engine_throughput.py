"""How fast does the local engine sample? Two ratios, one run, the same inputs.

1. **Engine vs ``model.generate``**: one GSM8K prompt, ``group_size`` completions at
   temperature 1, through ``SamplingClient.sample`` and through plain
   ``transformers`` ``model.generate`` (same model weights, same prompt repeated
   ``group_size`` times). Sampled tokens per second; the target ratio is >= 1.0.
2. **Async vs sync rollout**: ``prompts`` prompts x ``group_size`` samples, through
   ``asyncio.gather`` of ``sample_async`` (the engine batches them) and through
   ``prompts`` sequential ``sample(...).result()`` calls. Sampled tokens per second;
   the target ratio is >= 1.8 on a 2-core CPU.

Run::

    python bench/engine_throughput.py                 # SmolLM2, 128 tokens
    python bench/engine_throughput.py --model tiny-random --max-tokens 64
"""

from __future__ import annotations

import asyncio
import json
import time

import common


def gsm8k_questions(n: int) -> list[str]:
    path = common.ROOT / "data" / "gsm8k" / "test.jsonl"
    with path.open() as f:
        return [json.loads(next(f))["question"] for _ in range(n)]


def chat_prompt(tokenizer, question: str) -> list[int]:  # noqa: ANN001
    messages = [
        {
            "role": "user",
            "content": question + "\nReason step by step, then give the answer.",
        }
    ]
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return list(ids)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--verbose", action="store_true", help="print every run")
    args = parser.parse_args()

    import pytrio as trio
    import torch

    from grpo_helpers.local.models import load_model

    svc = common.connect()
    sampler = svc.create_sampling_client(args.model)
    tok = sampler.get_tokenizer()
    model, _ = load_model(args.model)  # a plain copy for model.generate
    prompts = [chat_prompt(tok, q) for q in gsm8k_questions(args.prompts)]
    stop = [tok.eos_token] if tok.eos_token else None
    G, N = args.group_size, args.max_tokens
    lengths = [len(p) for p in prompts]
    print(
        f"model={args.model} threads={torch.get_num_threads()} group_size={G} "
        f"max_tokens={N} prompts={args.prompts} prompt_tokens={lengths} "
        f"repeats={args.repeats}"
    )

    def params(seed: int) -> trio.SamplingParams:
        return trio.SamplingParams(max_tokens=N, temperature=1.0, seed=seed, stop=stop)

    def engine_once(seed: int) -> tuple[int, float]:
        t = time.perf_counter()
        r = sampler.sample(trio.ModelInput.from_ints(prompts[0]), G, params(seed))
        out = r.result()
        return out.output_tokens, time.perf_counter() - t

    def generate_once(seed: int) -> tuple[int, float]:
        ids = torch.tensor([prompts[0]] * G)
        torch.manual_seed(seed)
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=N,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        dt = time.perf_counter() - t
        new = out[:, ids.shape[1] :]
        # Tokens up to and including each row's first EOS count as sampled.
        count = 0
        for row in new.tolist():
            count += row.index(tok.eos_token_id) + 1 if tok.eos_token_id in row else N
        return count, dt

    def sync_once(seed: int) -> tuple[int, float]:
        t = time.perf_counter()
        n = 0
        for i, p in enumerate(prompts):
            out = sampler.sample(trio.ModelInput.from_ints(p), G, params(seed + i))
            n += out.result().output_tokens
        return n, time.perf_counter() - t

    def async_once(seed: int) -> tuple[int, float]:
        async def go() -> list:
            calls = [
                sampler.sample_async(trio.ModelInput.from_ints(p), G, params(seed + i))
                for i, p in enumerate(prompts)
            ]
            return await asyncio.gather(*calls)

        t = time.perf_counter()
        outs = asyncio.run(go())
        return sum(o.output_tokens for o in outs), time.perf_counter() - t

    # Interleave the four measurements, so that load from other processes on a
    # shared machine hits them alike; report the best run of each (least disturbed)
    # and the total over all runs.
    runs: dict[str, list[tuple[int, float]]] = {
        "generate": [],
        "engine": [],
        "sync": [],
        "async": [],
    }
    fns = {
        "generate": generate_once,
        "engine": engine_once,
        "sync": sync_once,
        "async": async_once,
    }
    engine_once(12345)  # warm-up: first calls build caches and threads
    generate_once(12345)
    for r in range(args.repeats):
        for name, fn in fns.items():
            runs[name].append(fn(r))
            if args.verbose:
                n, dt = runs[name][-1]
                print(f"  {name:<9} run {r}: {n:5d} tokens, {dt:6.2f} s", flush=True)

    def best(name: str) -> float:
        return max(n / dt for n, dt in runs[name])

    def total(name: str) -> float:
        return sum(n for n, _ in runs[name]) / sum(dt for _, dt in runs[name])

    def line(label: str, name: str) -> None:
        print(f"{label:<32}: best {best(name):7.1f}  all runs {total(name):7.1f} tok/s")

    line("[1] model.generate", "generate")
    line("[1] engine sample", "engine")

    def ratio(label: str, a: str, b: str, target: float) -> None:
        print(
            f"{label:<32}: best {best(a) / best(b):.2f}  all runs "
            f"{total(a) / total(b):.2f}  (target >= {target})"
        )

    ratio("[1] ratio engine / generate", "engine", "generate", 1.0)
    line(f"[2] {args.prompts} x sample().result()", "sync")
    line(f"[2] gather {args.prompts} x sample_async", "async")
    ratio("[2] ratio async / sync", "async", "sync", 1.8)


if __name__ == "__main__":
    main()
