"""One GRPO step of notebook 05's run: the local engine against TRL, in one process.

Same conditions on both sides: SmolLM2-135M-Instruct on this CPU, the series'
prompt on the arithmetic problems, 2 prompts x 8 completions of at most 48 tokens at
temperature 0.6, LoRA rank 16 (``presets.NOTEBOOK``), then one optimiser step on the
16 completions.

* **local**: the series' sync step (``training.train_sync``'s body): a sampler
  frozen at the current weights, one group per prompt, Datums, one
  ``forward_backward`` and one ``optim_step`` (shared prompts, merged sampler).
* **TRL**: the ``GRPOTrainer`` that ``python -m grpo_helpers export trl`` writes
  for the same run (``train_grpo.py`` with ``grpo_config_cpu.yaml``): generation
  with ``transformers``' ``generate``, then one optimiser step.

Every completion carries a gradient on both sides: TRL never skips a group, so the
local side's advantages are made non-zero as in ``bench/step_time.py`` (an
untrained SmolLM2 leaves most groups degenerate, and the series would skip them).
*Sampling* is everything before the training pass (generation, rewards,
advantages: TRL's ``_generate_and_score_completions``), *training* the rest of the
step. On a CPU, TRL's fused log-prob kernel scores every position of the batch, the
prompt's included (only the completion's where Triton runs, on a GPU). Sides
alternate (local, TRL, local, ...), after one warm-up step each; times
are the medians, peaks the largest peak resident memory of a step above the
process at its start (``PeakMemory`` of ``bench/step_time.py``).

Run::

    python bench/vs_trl.py            # SmolLM2, notebook 05's step, 3 repeats
    python bench/vs_trl.py --quick    # tiny-random, 1 repeat: a smoke run

The last line is for a script to read (TRL's time over the local engine's)::

    RESULT sampling <x>x training <x>x step <x>x peak-local <MB> peak-trl <MB>
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

PHASES = ("sampling", "training", "step")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None, help="also write the numbers as JSON here")
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny-random, 2 x 2 completions of at most 4 tokens, 1 repeat, no "
        "warm-up: a smoke run",
    )
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    return args


def run_config(args: argparse.Namespace) -> Any:
    """Notebook 05's run (``presets.NOTEBOOK``), or a tiny one with ``--quick``."""
    from grpo_helpers import presets
    from grpo_helpers.config import GRPOConfig

    settings = dict(presets.NOTEBOOK, seed=0, save_every=0, weights_name="vs-trl")
    if args.quick:
        settings |= {"group_size": 2, "max_tokens": 4, "lora_rank": 4}
        args.model, args.repeats = "tiny-random", 1
    return GRPOConfig(backend="local", base_model=args.model, **settings)


class LocalStep:
    """The series' sync step on the local engine."""

    def __init__(self, config: Any, run_dir: Path) -> None:
        from grpo_helpers import data, prompts, rollout
        from grpo_helpers.engines import connect
        from grpo_helpers.rewards import get_reward_fn

        self.config = config
        service = connect("local", run_dir=run_dir)
        self.tc = service.create_lora_training_client(
            config.model_name, rank=config.lora_rank, seed=config.seed
        )
        self.tokenizer = self.tc.get_tokenizer()
        rows = data.load_split(config, "train").select(range(config.batch_size))
        self.prompts = [
            prompts.build_prompt(self.tokenizer, q) for q in rows["question"]
        ]
        self.golds = [data.extract_gsm8k_answer(a) for a in rows["answer"]]
        self.reward = get_reward_fn(config.reward)
        self.params = rollout.make_sampling_params(
            self.tokenizer, config.max_tokens, config.temperature, config.top_p
        )
        import pytrio as trio

        self.adam = trio.AdamParams(
            learning_rate=config.learning_rate, beta1=config.beta1, beta2=config.beta2
        )

    def __call__(self, seed: int) -> dict[str, float]:
        from grpo_helpers import advantages, datum, rollout, step_math

        config = self.config
        t0 = time.perf_counter()
        sampler = self.tc.save_weights_and_get_sampling_client()
        groups = []
        for i, (prompt, gold) in enumerate(zip(self.prompts, self.golds, strict=True)):
            params = self.params.model_copy(update={"seed": seed * 100 + i})
            samples = rollout.run_rollout_group(
                sampler,
                self.tokenizer,
                prompt,
                gold,
                params,
                config.group_size,
                self.reward,
                config.advantage_scale,
            )
            for j, sample in enumerate(samples):  # every completion trains
                sample.advantage = (j % 3 - 1) * 0.25
            groups.append(step_math.PromptGroup(i, prompt, gold, samples))
        t1 = time.perf_counter()
        datums = []  # as step_math.build_step_datums, no group skipped
        for group in groups:
            lengths = [len(s.tokens) for s in group.samples]
            scales = advantages.length_scales(
                lengths, config.normalization, config.max_tokens
            )
            for sample, scale, n in zip(group.samples, scales, lengths, strict=True):
                per_token = [sample.advantage * scale] * n
                datums.append(
                    datum.build_grpo_datum(group.prompt_tokens, sample, per_token)
                )
        self.tc.forward_backward(datums, config.loss_fn, config.loss_fn_config)
        self.tc.optim_step(self.adam).result()
        t2 = time.perf_counter()
        sampled = sum(len(s.tokens) for g in groups for s in g.samples)
        return {
            "sampling": t1 - t0,
            "training": t2 - t1,
            "step": t2 - t0,
            "sampled_tokens": sampled,
        }


class TRLStep:
    """One optimiser step of the exported run's ``GRPOTrainer`` (TRL)."""

    def __init__(self, config: Any, folder: Path, out: Path) -> None:
        import importlib.util

        from transformers import TrainerCallback
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        from grpo_helpers import export

        export.export_trl(config, folder, overwrite=True)
        spec = importlib.util.spec_from_file_location(
            "train_grpo", folder / "train_grpo.py"
        )
        script = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(script)
        overrides = {
            "output_dir": str(out),
            "max_steps": 1,
            "save_strategy": "no",
            "report_to": "none",
            "disable_tqdm": True,
            "logging_strategy": "no",
        }
        self.trainer = script.build_trainer(
            folder / "grpo_config_cpu.yaml", overrides=overrides, folder=folder
        )
        self.times: dict[str, float] = {}
        generate = self.trainer._generate_and_score_completions
        times = self.times

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            out = generate(*args, **kwargs)
            times["sampling"] = time.perf_counter() - t
            times["sampled_tokens"] = int(out["completion_mask"].sum())
            return out

        self.trainer._generate_and_score_completions = timed

        class StepClock(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
                times["begin"] = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
                times["step"] = time.perf_counter() - times["begin"]

        self.trainer.add_callback(StepClock())
        for quiet in (PrinterCallback, ProgressCallback):  # no per-step printing
            self.trainer.remove_callback(quiet)

    def __call__(self, seed: int) -> dict[str, float]:
        self.trainer.args.seed = seed
        self.trainer.train()
        times = dict(self.times)
        times["training"] = times["step"] - times["sampling"]
        return {k: times[k] for k in (*PHASES, "sampled_tokens")}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    import torch
    from step_time import PeakMemory

    from grpo_helpers import trl_mapping

    missing = trl_mapping.trl_missing()
    if missing:
        raise SystemExit(missing)
    config = run_config(args)
    work = Path(tempfile.mkdtemp(prefix="vs-trl-"))
    sides = {
        "local": LocalStep(config, work / "engine"),
        "TRL": TRLStep(config, work / "export", work / "trl-out"),
    }
    for name, step in sides.items():  # warm-up: buffers, thread pools, first calls
        if not args.quick:
            step(seed=1000)
            print(f"  warm-up {name} done", flush=True)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    peaks: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(args.repeats):
        for name, step in sides.items():
            with PeakMemory() as memory:
                result = step(seed=r)
            runs[name].append(result)
            peaks[name].append(memory.peak_mb)
            print(
                f"  run {r} {name:5}: sampling {result['sampling']:6.2f} s "
                f"({result['sampled_tokens']} tokens), training "
                f"{result['training']:6.2f} s, step {result['step']:6.2f} s, "
                f"peak +{memory.peak_mb:.0f} MB",
                flush=True,
            )
    med = {
        name: {k: statistics.median(r[k] for r in rows) for k in PHASES}
        for name, rows in runs.items()
    }
    ratio = {k: med["TRL"][k] / med["local"][k] for k in PHASES}
    peak = {name: max(values) for name, values in peaks.items()}
    print(
        f"model={config.model_name} threads={torch.get_num_threads()} "
        f"prompts={config.batch_size} group_size={config.group_size} "
        f"max_tokens={config.max_tokens} temperature={config.temperature} "
        f"lora_rank={config.lora_rank} repeats={args.repeats} "
        f"trl={trl_mapping.trl_version()} torch={torch.__version__}"
    )
    print(f"{'':10}{'local':>10}{'TRL':>10}{'TRL/local':>11}   (median seconds)")
    for k in PHASES:
        print(f"{k:10}{med['local'][k]:10.2f}{med['TRL'][k]:10.2f}{ratio[k]:10.2f}x")
    tokens = {n: statistics.median(r["sampled_tokens"] for r in runs[n]) for n in runs}
    print(
        f"sampled tokens (median): local {tokens['local']:.0f}, "
        f"TRL {tokens['TRL']:.0f}; "
        f"peak memory of a step above the process: local {peak['local']:.0f} MB, "
        f"TRL {peak['TRL']:.0f} MB"
    )
    print(
        f"RESULT sampling {ratio['sampling']:.2f}x training {ratio['training']:.2f}x "
        f"step {ratio['step']:.2f}x peak-local {peak['local']:.0f} "
        f"peak-trl {peak['TRL']:.0f}"
    )
    result = {
        "config": dataclasses.asdict(config),
        "median_seconds": med,
        "ratio_trl_over_local": ratio,
        "peak_mb": peak,
        "sampled_tokens": tokens,
        "runs": runs,
        "threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
