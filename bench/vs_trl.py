"""One GRPO step of notebook 05's run: the local engine against TRL, like for like.

Same conditions on both sides: SmolLM2-135M-Instruct (the dequantised 4-bit GGUF)
on this CPU, the series' prompt on the arithmetic problems, 2 prompts x 8
completions of at most 48 tokens at temperature 0.6, LoRA rank 16
(``presets.NOTEBOOK``), then one optimiser step on the 16 completions.

* **local**: the series' sync step on today's engine (``training.train_sync``'s
  body): a sampler frozen at the current weights (merged sampler, packed products,
  prompt memory), one group per prompt with the series' rewards and advantages,
  Datums, one ``forward_backward`` and one ``optim_step``.
* **TRL**: the ``GRPOTrainer`` that ``python -m grpo_helpers export trl`` writes for
  the same run (``train_grpo.py`` with ``grpo_config_cpu.yaml``), one step of its
  own training loop.

Each phase is compared on the same work:

* **sampling**, per generated token: each side samples its own completions for the
  same prompts (TRL with ``transformers``' ``generate``, the rewards and
  advantages included: ``_generate_and_score_completions``), and the seconds per
  completion token are compared, since the two draw different completions.
* **training**, on the *same* completions: TRL's step trains on the local side's
  completions of that repeat, with the same advantages (the series' group
  advantages, zero for a tied group on both sides, as TRL never skips one),
  teacher-forced on both sides: its generation still runs and is timed, then
  its batch is replaced by the local side's before the loss. Both sides'
  trained completions are recorded and compared (``same_completions``).
* **step**: the local step as measured; TRL's as its sampling seconds per token
  times the local side's completion tokens, plus its training on them (its step
  as measured, on its own completions' sampling, is printed too).
* **peak memory**: the largest peak resident memory of a step above the process
  at its start (``PeakMemory`` of ``bench/common.py``).

Sides alternate (local, TRL, local, ...) in one process after one warm-up step
each; each ratio is TRL's median over the local engine's median. On a CPU, TRL's
fused log-prob kernel scores every position of the batch, the prompt's included
(only the completion's where Triton runs, on a GPU). Timings need a quiet machine.

Run::

    python bench/vs_trl.py            # SmolLM2, notebook 05's step, 5 repeats
    python bench/vs_trl.py --quick    # tiny-random, 1 repeat: a smoke run

The last line is for a script to read (TRL's time over the local engine's)::

    RESULT sampling <x>x training <x>x step <x>x peak-local <MB> peak-trl <MB>
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import common

PHASES = ("sampling", "training", "step")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.parser(
        __doc__,
        quick="tiny-random, 2 x 2 completions of at most 4 tokens, 1 repeat, no "
        "warm-up: a smoke run",
    )
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    args.model = common.model_name(args)
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
        args.repeats = 1
    config = GRPOConfig(backend="local", base_model=args.model, **settings)
    # what TRL's batch below holds: no reference or old logprobs to carry over
    if config.updates_per_batch != 1 or config.kl_coef != 0:
        raise SystemExit("vs_trl compares one update without a KL penalty")
    return config


class Completions:
    """The completions a step trains on: one row per completion."""

    def __init__(
        self,
        prompts: list[list[int]],
        completions: list[list[int]],
        advantages: list[float],
    ) -> None:
        self.prompts = prompts
        self.completions = completions
        self.advantages = advantages

    def rows(self) -> list[tuple[tuple[int, ...], tuple[int, ...], float]]:
        """Order-free form, to compare what two trainers saw."""
        return sorted(
            (tuple(p), tuple(c), round(float(a), 6))
            for p, c, a in zip(
                self.prompts, self.completions, self.advantages, strict=True
            )
        )

    @property
    def tokens(self) -> int:
        return sum(len(c) for c in self.completions)


class LocalStep:
    """The series' sync step on the local engine."""

    def __init__(self, config: Any, run_dir: Path) -> None:
        from grpo_helpers import data, prompts, rollout
        from grpo_helpers.rewards import get_reward_fn

        self.config = config
        service = common.connect(run_dir=run_dir)
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

    def __call__(self, seed: int) -> tuple[dict[str, float], Completions]:
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
            groups.append(step_math.PromptGroup(i, prompt, gold, samples))
        t1 = time.perf_counter()
        # As step_math.build_step_datums, with the series' advantages, but no group
        # skipped: TRL trains on tied groups too (their advantages are 0 on both).
        datums = []
        shared = Completions([], [], [])
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
                shared.prompts.append(list(group.prompt_tokens))
                shared.completions.append(list(sample.tokens))
                shared.advantages.append(float(sample.advantage))
        self.tc.forward_backward(datums, config.loss_fn, config.loss_fn_config)
        self.tc.optim_step(self.adam).result()
        t2 = time.perf_counter()
        times = {
            "sampling": t1 - t0,
            "training": t2 - t1,
            "step": t2 - t0,
            "sampled_tokens": shared.tokens,
            "trained_tokens": shared.tokens,
        }
        return times, shared


def trl_batch(shared: Completions, pad: int) -> dict[str, Any]:
    """``shared`` as TRL's trainer holds a generated batch: prompts padded on the
    left, completions on the right, one advantage per completion."""
    import torch

    width = max(len(p) for p in shared.prompts)
    length = max(len(c) for c in shared.completions)
    prompt_ids = [[pad] * (width - len(p)) + p for p in shared.prompts]
    prompt_mask = [[0] * (width - len(p)) + [1] * len(p) for p in shared.prompts]
    completion_ids = [c + [pad] * (length - len(c)) for c in shared.completions]
    completion_mask = [
        [1] * len(c) + [0] * (length - len(c)) for c in shared.completions
    ]
    mask = torch.tensor(completion_mask, dtype=torch.int)
    return {
        "prompt_ids": torch.tensor(prompt_ids, dtype=torch.long),
        "prompt_mask": torch.tensor(prompt_mask, dtype=torch.long),
        "completion_ids": torch.tensor(completion_ids, dtype=torch.long),
        "completion_mask": mask,
        "advantages": torch.tensor(shared.advantages, dtype=torch.float32),
        "num_items_in_batch": mask.sum(),
    }


def trained_rows(inputs: dict[str, Any]) -> Completions:
    """What TRL's loss was given, back as rows (padding dropped)."""
    out = Completions([], [], [])
    rows = zip(
        inputs["prompt_ids"].tolist(),
        inputs["prompt_mask"].tolist(),
        inputs["completion_ids"].tolist(),
        inputs["completion_mask"].tolist(),
        inputs["advantages"].reshape(-1).tolist(),
        strict=True,
    )
    for p, pm, c, cm, a in rows:
        out.prompts.append([t for t, m in zip(p, pm, strict=True) if m])
        out.completions.append([t for t, m in zip(c, cm, strict=True) if m])
        out.advantages.append(a)
    return out


class TRLStep:
    """One optimiser step of the exported run's ``GRPOTrainer`` (TRL), trained on
    the completions it is given after generating (and timing) its own."""

    def __init__(self, config: Any, folder: Path, out: Path) -> None:
        import importlib.util

        from transformers import TrainerCallback
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        from grpo_helpers.trl import export

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
        self.pad = int(self.trainer.processing_class.pad_token_id)
        self.times: dict[str, float] = {}
        self.shared: Completions | None = None
        self.trained: list[Completions] = []
        generate = self.trainer._generate_and_score_completions
        compute_loss = self.trainer.compute_loss
        times = self.times

        def generate_then_swap(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            own = generate(*args, **kwargs)
            times["sampling"] = time.perf_counter() - t
            times["sampled_tokens"] = int(own["completion_mask"].sum())
            extra = set(own) - set(trl_batch(self.shared, self.pad))
            if extra:  # e.g. reference logprobs: this batch would lack them
                raise RuntimeError(f"TRL's batch holds {sorted(extra)} too")
            return trl_batch(self.shared, self.pad)

        def spied_loss(model: Any, inputs: dict[str, Any], *a: Any, **k: Any) -> Any:
            self.trained.append(trained_rows(inputs))
            return compute_loss(model, inputs, *a, **k)

        self.trainer._generate_and_score_completions = generate_then_swap
        self.trainer.compute_loss = spied_loss

        class StepClock(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
                times["begin"] = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
                times["step"] = time.perf_counter() - times["begin"]

        self.trainer.add_callback(StepClock())
        for quiet in (PrinterCallback, ProgressCallback):  # no per-step printing
            self.trainer.remove_callback(quiet)

    def __call__(self, seed: int, shared: Completions) -> dict[str, float]:
        self.shared = shared
        self.trained.clear()
        self.trainer.args.seed = seed
        self.trainer.train()
        times = dict(self.times)
        times["training"] = times["step"] - times["sampling"]
        times["trained_tokens"] = sum(c.tokens for c in self.trained)
        return {k: times[k] for k in (*PHASES, "sampled_tokens", "trained_tokens")}


def summarize(
    runs: dict[str, list[dict[str, float]]], peaks: dict[str, list[float]]
) -> dict[str, Any]:
    """Medians per side and TRL's ratio over the local engine's for each phase:
    sampling per generated token, training on the same completions, the step
    with TRL's sampling rescaled to the local side's completion tokens."""

    def median(side: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[side])

    per_token = {
        side: statistics.median(r["sampling"] / r["sampled_tokens"] for r in rows)
        for side, rows in runs.items()
    }
    local_step = median("local", "step")
    trl_step = statistics.median(
        per_token["TRL"] * r["trained_tokens"] + r["training"] for r in runs["TRL"]
    )
    med = {
        "local": {
            "sampling": median("local", "sampling"),
            "training": median("local", "training"),
            "step": local_step,
        },
        "TRL": {
            "sampling": median("TRL", "sampling"),
            "training": median("TRL", "training"),
            "step": trl_step,
        },
    }
    ratio = {
        "sampling": per_token["TRL"] / per_token["local"],
        "training": med["TRL"]["training"] / med["local"]["training"],
        "step": trl_step / local_step,
    }
    return {
        "median_seconds": med,
        "sampling_seconds_per_token": per_token,
        "trl_step_as_measured": median("TRL", "step"),
        "ratio_trl_over_local": ratio,
        "peak_mb": {side: max(values) for side, values in peaks.items()},
        "sampled_tokens": {side: median(side, "sampled_tokens") for side in runs},
        "trained_tokens": {side: median(side, "trained_tokens") for side in runs},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Both sides on the engine's compute thread (``grpo_helpers.local.worker``):
    one OpenMP team for the process, so neither side slows the other's threads."""
    from grpo_helpers.local import worker

    return worker.run(_compare, parse_args(argv))


def _compare(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from grpo_helpers.trl import mapping

    missing = mapping.trl_missing()
    if missing:
        raise SystemExit(missing)
    config = run_config(args)
    work = Path(tempfile.mkdtemp(prefix="vs-trl-"))
    local = LocalStep(config, work / "engine")
    trl = TRLStep(config, work / "export", work / "trl-out")
    if not args.quick:  # warm-up: buffers, thread pools, first calls
        _, shared = local(seed=1000)
        trl(seed=1000, shared=shared)
        print("  warm-up done", flush=True)
    runs: dict[str, list[dict[str, float]]] = {"local": [], "TRL": []}
    peaks: dict[str, list[float]] = {"local": [], "TRL": []}
    same: list[bool] = []
    for r in range(args.repeats):
        with common.PeakMemory() as memory:
            result, shared = local(seed=r)
        runs["local"].append(result)
        peaks["local"].append(memory.peak_mb)
        with common.PeakMemory() as memory:
            theirs = trl(seed=r, shared=shared)
        runs["TRL"].append(theirs)
        peaks["TRL"].append(memory.peak_mb)
        same.append(len(trl.trained) == 1 and trl.trained[0].rows() == shared.rows())
        for name, res, peak in (
            ("local", result, peaks["local"][-1]),
            ("TRL", theirs, peaks["TRL"][-1]),
        ):
            print(
                f"  run {r} {name:5}: sampling {res['sampling']:6.2f} s "
                f"({res['sampled_tokens']} tokens), training {res['training']:6.2f} s "
                f"({res['trained_tokens']} tokens, the same completions: {same[-1]}), "
                f"step {res['step']:6.2f} s, peak +{peak:.0f} MB",
                flush=True,
            )
    summary = summarize(runs, peaks)
    med, ratio, peak = (
        summary["median_seconds"],
        summary["ratio_trl_over_local"],
        summary["peak_mb"],
    )
    print(
        f"model={config.model_name} threads={torch.get_num_threads()} "
        f"prompts={config.batch_size} group_size={config.group_size} "
        f"max_tokens={config.max_tokens} temperature={config.temperature} "
        f"lora_rank={config.lora_rank} repeats={args.repeats} "
        f"trl={mapping.trl_version()} torch={torch.__version__}"
    )
    per_token = summary["sampling_seconds_per_token"]
    print(f"{'':24}{'local':>10}{'TRL':>10}{'TRL/local':>11}   (medians)")
    print(
        f"{'sampling (ms / token)':24}{1e3 * per_token['local']:10.1f}"
        f"{1e3 * per_token['TRL']:10.1f}{ratio['sampling']:10.2f}x"
    )
    print(
        f"{'training (s, same)':24}{med['local']['training']:10.2f}"
        f"{med['TRL']['training']:10.2f}{ratio['training']:10.2f}x"
    )
    print(
        f"{'step (s, same tokens)':24}{med['local']['step']:10.2f}"
        f"{med['TRL']['step']:10.2f}{ratio['step']:10.2f}x"
    )
    tokens = summary["sampled_tokens"]
    print(
        f"sampled tokens (median): local {tokens['local']:.0f}, TRL "
        f"{tokens['TRL']:.0f}; both trained on the local side's "
        f"{summary['trained_tokens']['local']:.0f} (the same completions in "
        f"{sum(same)} of {len(same)} repeats); TRL's step as measured "
        f"{summary['trl_step_as_measured']:.2f} s; peak memory of a step above "
        f"the process: local {peak['local']:.0f} MB, TRL {peak['TRL']:.0f} MB"
    )
    print(
        f"RESULT sampling {ratio['sampling']:.2f}x training {ratio['training']:.2f}x "
        f"step {ratio['step']:.2f}x peak-local {peak['local']:.0f} "
        f"peak-trl {peak['TRL']:.0f}"
    )
    result = {
        "config": dataclasses.asdict(config),
        **summary,
        "same_completions": same,
        "runs": runs,
        "threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    return common.write_json(args, result)


if __name__ == "__main__":
    main()
