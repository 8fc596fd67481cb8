"""The local engine's checks that need a CUDA GPU: run this on a machine with one.

Two faults only showed on a GPU: a mask built on the CPU and applied to CUDA scores
(a crash on any padded batch), and a LoRA delta merged into bfloat16 weights (the
sampler sampling from a policy other than the one being trained). The test suite
pins both on the CPU (the device tests of ``tests/local/``); this script runs the real
thing, for the GPU default (bfloat16) and for float32:

1. ``sampler``: which sampler the host chose (bfloat16: LoRA unmerged; float32 and
   a Llama-style model: merged);
2. ``padded sampling``: prompts of unequal length in one batch; every sampled
   logprob against the trainer's teacher-forced logprob of the same token;
3. ``shared-prefix sampling``: prompts that share the series' few-shot prefix in one
   batch (the prefix prefilled once) against teacher forcing, and (float32) the
   same completions as the plain prefill;
4. ``shared-prefix scoring``: ``compute_logprobs`` of a GRPO group (prompt +
   completions) batched against each alone;
5. ``training step``: ``forward_backward`` on the group's Datums (its prompt once)
   against the plain path, then ``optim_step``;
6. ``sampler vs trainer``: after the step, the new sampler's logprobs against the
   trainer's, on the weights it just trained.

Run::

    python bench/gpu_check.py                        # SmolLM2 (its offline copy)
    python bench/gpu_check.py --model tiny-random    # seconds
    python bench/gpu_check.py --model Qwen/Qwen2.5-0.5B-Instruct  # the GPU preset's

It prints one line per check (``PASS`` or ``FAIL``, what was compared, the largest
difference) and exits 1 if any failed. Without a CUDA GPU it says it needs one and
exits 2 (``--device cpu`` runs the same checks on the CPU: a dry run of the script,
not of the GPU faults). ``make test`` does not run it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common

#: Largest |sampler - trainer| logprob difference allowed, per dtype: (max, mean).
TOLERANCE = {"float32": (2e-3, 2e-4), "bfloat16": (0.5, 0.05)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.parser(__doc__)
    p.add_argument("--device", default="cuda", help="cuda (default) or cuda:1...")
    p.add_argument(
        "--dtypes",
        nargs="+",
        default=["bfloat16", "float32"],
        choices=sorted(TOLERANCE),
        help="the services to check (bfloat16: the GPU default)",
    )
    p.add_argument("--max-tokens", type=int, default=24)
    return p.parse_args(argv)


class Report:
    """One line per check; remembers the failures."""

    def __init__(self) -> None:
        self.failed: list[str] = []
        self.passed = 0

    def check(self, name: str, run: Callable[[], str]) -> None:
        try:
            detail = run()
        except Exception as error:  # noqa: BLE001 - every failure is a line
            self.failed.append(name)
            last = traceback.format_exception_only(type(error), error)[-1].strip()
            print(f"FAIL {name}: {last}", flush=True)
            return
        self.passed += 1
        print(f"PASS {name}: {detail}", flush=True)


def compare(got: list[float], want: list[float], dtype: str, what: str) -> str:
    """Max and mean |got - want|; raises AssertionError beyond the dtype's bound."""
    import numpy as np

    diff = np.abs(np.asarray(got, dtype=float) - np.asarray(want, dtype=float))
    top, mean = TOLERANCE[dtype]
    worst, average = (
        float(diff.max(initial=0.0)),
        float(diff.mean()) if diff.size else 0.0,
    )
    text = f"{what}: max |diff| {worst:.2e}, mean {average:.2e} ({diff.size} tokens)"
    if worst > top or average > mean:
        raise AssertionError(f"{text}; allowed max {top:g}, mean {mean:g}")
    return text


def teacher_forced(tc: Any, prompt: list[int], tokens: list[int]) -> list[float]:
    import pytrio as trio

    n = len(prompt) - 1
    datum = trio.Datum(
        model_input=trio.ModelInput.from_ints(prompt + tokens[:-1]),
        loss_fn_inputs={"target_tokens": [0] * n + tokens},
    )
    return list(tc.forward([datum]).result().loss_fn_outputs[0]["logprobs"].data[n:])


def batched(sampler: Any, prompts: list[list[int]], n: int, **params: Any) -> list:
    """Sample every prompt in one batch (the scheduler holds them together)."""
    import pytrio as trio

    scheduler = sampler._host.scheduler
    sampling = trio.SamplingParams(**params)
    with scheduler.hold():
        futures = [
            sampler.sample(trio.ModelInput.from_ints(p), n, sampling) for p in prompts
        ]
    return [[(s.tokens, s.logprobs) for s in f.result().sequences] for f in futures]


def series_prompts(tokenizer: Any, count: int) -> tuple[list[list[int]], list[str]]:
    """The series' prompts (few-shot example + question) of the first problems."""
    from grpo_helpers import data, prompts
    from grpo_helpers.config import GRPOConfig

    config = GRPOConfig(backend="local", dataset="arithmetic", seed=0)
    rows = data.load_split(config, "train").select(range(count))
    tokens = [prompts.build_prompt(tokenizer, q) for q in rows["question"]]
    golds = [data.extract_gsm8k_answer(a) for a in rows["answer"]]
    return tokens, golds


def check_dtype(report: Report, args: argparse.Namespace, dtype_name: str) -> None:
    import pytrio as trio
    import torch

    from grpo_helpers import datum, rewards, rollout
    from grpo_helpers.local.decoder import HFDecoder, MergedLlamaDecoder, choose_sampler

    dtype = getattr(torch, dtype_name)
    run_dir = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    service = common.connect(run_dir=run_dir, device=args.device, dtype=dtype)
    plain_service = common.connect(
        run_dir=run_dir,
        device=args.device,
        dtype=dtype,
        shared_prefix=False,
        merged_sampler=False,
    )
    tc = service.create_lora_training_client(args.model, rank=16, seed=0)
    host = tc._host
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # an adapter that matters: B is not zero
        for name, p in sorted(host.parameters(tc._adapter).items()):
            if "lora_B" in name:
                noise = torch.randn(p.shape, generator=gen) * 0.02
                p.copy_(noise.to(device=p.device, dtype=p.dtype))
    tag = f"({dtype_name}, {args.model})"
    model_type = host.model.config.model_type
    expected = choose_sampler(host.device, dtype, model_type)

    def sampler_choice() -> str:
        if dtype != torch.float32 and host.sampler_kind != "plain":
            raise AssertionError(f"{dtype_name} weights chose {host.sampler_kind}")
        if host.sampler_kind != expected:
            raise AssertionError(f"chose {host.sampler_kind}, expected {expected}")
        sampler = tc.save_weights_and_get_sampling_client()
        with host.using(sampler._snapshot) as decoder:
            kind = type(decoder).__name__
            want = MergedLlamaDecoder if expected == "merged" else HFDecoder
            assert isinstance(decoder, want), kind
        return f"{host.sampler_kind} ({kind}) on {host.device}, model_type {model_type}"

    report.check(f"sampler {tag}", sampler_choice)
    tokenizer = tc.get_tokenizer()
    prompts, golds = series_prompts(tokenizer, 3)
    max_tokens = args.max_tokens

    def padded_sampling() -> str:
        sampler = tc.save_weights_and_get_sampling_client()
        unequal = [prompts[0][-40:], prompts[1][-9:], prompts[2]]  # 40, 9, ~280
        out = batched(sampler, unequal, 2, max_tokens=max_tokens, seed=1)
        got, want = [], []
        for prompt, seqs in zip(unequal, out, strict=True):
            for tokens, logprobs in seqs:
                got += logprobs
                want += teacher_forced(tc, prompt, tokens)
        lengths = sorted(len(p) for p in unequal)
        return compare(got, want, dtype_name, f"prompts of {lengths} tokens vs trainer")

    report.check(f"padded sampling {tag}", padded_sampling)

    def shared_prefix_sampling() -> str:
        sampler = tc.save_weights_and_get_sampling_client()
        out = batched(sampler, prompts, 2, max_tokens=max_tokens, seed=2)
        got, want = [], []
        for prompt, seqs in zip(prompts, out, strict=True):
            for tokens, logprobs in seqs:
                got += logprobs
                want += teacher_forced(tc, prompt, tokens)
        text = compare(got, want, dtype_name, "series prompts vs trainer")
        if dtype == torch.float32:  # greedy: the plain prefill's completions
            plain = type(sampler)(host, sampler._snapshot, None, sampler._merged, False)
            a = batched(sampler, prompts, 1, max_tokens=max_tokens, temperature=0.0)
            b = batched(plain, prompts, 1, max_tokens=max_tokens, temperature=0.0)
            assert [x[0][0] for x in a] == [x[0][0] for x in b], "greedy differs"
            text += "; greedy = plain prefill"
        return text

    report.check(f"shared-prefix sampling {tag}", shared_prefix_sampling)
    sampler = tc.save_weights_and_get_sampling_client()
    params = rollout.make_sampling_params(tokenizer, max_tokens, 1.0, seed=3)
    group = rollout.run_rollout_group(
        sampler, tokenizer, prompts[0], golds[0], params, 4, rewards.shaped_reward
    )
    for j, sample in enumerate(group):  # a learning signal in any case
        sample.advantage = (j - 1.5) / 2

    def shared_prefix_scoring() -> str:
        inputs = [trio.ModelInput.from_ints(prompts[0] + s.tokens) for s in group]
        alone = [sampler.compute_logprobs(x).result() for x in inputs]
        with host.scheduler.hold():
            futures = [sampler.compute_logprobs(x) for x in inputs]
        together = [f.result() for f in futures]
        got = [v for row in together for v in row[1:]]
        want = [v for row in alone for v in row[1:]]
        return compare(got, want, dtype_name, "a group batched vs each alone")

    report.check(f"shared-prefix scoring {tag}", shared_prefix_scoring)

    def training_step() -> str:
        datums = [datum.build_grpo_datum(prompts[0], s) for s in group]
        other = plain_service.create_lora_training_client(args.model, rank=16, seed=0)
        with torch.no_grad():
            mine = host.parameters(tc._adapter)
            for name, p in other._host.parameters(other._adapter).items():
                p.copy_(mine[name])
        shared = tc.forward_backward(datums, "importance_sampling").result()
        plain = other.forward_backward(datums, "importance_sampling").result()
        grads = [p.grad for p in host.parameters(tc._adapter).values()]
        plain_grads = [p.grad for p in other._host.parameters(other._adapter).values()]
        assert all(g is not None and bool(torch.isfinite(g).all()) for g in grads)
        num = sum(
            float((a - b).float().norm() ** 2)
            for a, b in zip(grads, plain_grads, strict=True)
        )
        den = sum(float(b.float().norm() ** 2) for b in plain_grads)
        rel = (num / max(den, 1e-30)) ** 0.5
        allowed = 1e-3 if dtype == torch.float32 else 0.1
        if rel > allowed:
            raise AssertionError(f"gradient differs from the plain path by {rel:.2e}")
        before = {
            k: p.detach().clone() for k, p in host.parameters(tc._adapter).items()
        }
        tc.optim_step(trio.AdamParams(learning_rate=1e-3)).result()
        moved = max(
            float((p.detach() - before[k]).abs().max())
            for k, p in host.parameters(tc._adapter).items()
        )
        assert moved > 0, "optim_step did not move the weights"
        loss = shared.metrics["loss_sum"], plain.metrics["loss_sum"]
        return (
            f"loss_sum {loss[0]:.4f} (plain path {loss[1]:.4f}), gradient vs plain "
            f"path {rel:.1e} (relative), weights moved by up to {moved:.1e}"
        )

    report.check(f"training step {tag}", training_step)

    def sampler_vs_trainer() -> str:
        fresh = tc.save_weights_and_get_sampling_client()
        out = batched(fresh, prompts[:2], 4, max_tokens=max_tokens, seed=4)
        got, want = [], []
        for prompt, seqs in zip(prompts[:2], out, strict=True):
            for tokens, logprobs in seqs:
                got += logprobs
                want += teacher_forced(tc, prompt, tokens)
        return compare(got, want, dtype_name, "the trained weights, sampler vs trainer")

    report.check(f"sampler vs trainer {tag}", sampler_vs_trainer)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "bench/gpu_check.py needs a CUDA GPU: torch sees none "
            "(torch.cuda.is_available() is False). Run it on a machine with one; "
            "`--device cpu` runs the same checks here, as a dry run of the script.",
            file=sys.stderr,
        )
        return 2
    where = (
        torch.cuda.get_device_name(torch.device(args.device))
        if args.device.startswith("cuda")
        else args.device
    )
    print(
        f"gpu_check on {where}: torch {torch.__version__}, cuda "
        f"{torch.version.cuda}, model {args.model}",
        flush=True,
    )
    report = Report()
    started = time.perf_counter()
    for dtype_name in args.dtypes:
        check_dtype(report, args, dtype_name)
    total = report.passed + len(report.failed)
    peak = ""
    if args.device.startswith("cuda"):
        peak = f", peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB"
    print(
        f"gpu_check: {report.passed} of {total} checks passed in "
        f"{time.perf_counter() - started:.0f} s{peak}",
        flush=True,
    )
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
