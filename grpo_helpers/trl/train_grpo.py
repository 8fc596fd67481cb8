"""Train a run of the grpo-notebooks series with Hugging Face TRL's ``GRPOTrainer``.

``python -m grpo_helpers export trl`` copies this file into an export folder as
``train_grpo.py``, beside ``series_config.json`` (the series' run) and the TRL
settings it maps to: ``grpo_config.yaml`` for a GPU, ``grpo_config_vllm.yaml`` for
a GPU with vLLM generating, ``grpo_config_cpu.yaml`` for the CPU. The folder's
README.md says how to install and launch it and how each setting maps::

    python train_grpo.py --config grpo_config_cpu.yaml          # this CPU
    accelerate launch --config_file accelerate/single_gpu.yaml train_grpo.py
    accelerate launch --config_file accelerate/multi_gpu.yaml train_grpo.py

The data, the prompt and the rewards are the series' own, imported from
``grpo_helpers``, installed in the checkout with
``pip install -e '.[local,trl]' -c constraints.txt`` (TRL, and peft and torch for
the LoRA): nothing is copied. A config's ``bf16: auto`` and ``fp16: auto`` are
chosen here, on the GPU the script runs on
(``grpo_helpers.trl.mapping.resolve_precision``). The package does not import this
module; it is the exported script's source.

Introduced in: docs/beyond-the-laptop.md (after notebook 09)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def series_config(folder: Path = HERE) -> Any:
    """The series' ``GRPOConfig`` of the exported run (``series_config.json``)."""
    from grpo_helpers.config import GRPOConfig

    values = json.loads((folder / "series_config.json").read_text())
    return GRPOConfig.from_dict(values)


def completion_text(completion: Any) -> str:
    """The text of a completion: TRL passes a chat prompt's completion as
    ``[{"role": "assistant", "content": text}]``, a plain prompt's as text."""
    return completion if isinstance(completion, str) else completion[-1]["content"]


def series_reward(name: str) -> Callable[..., list[float]]:
    """The series' reward ``name`` (``rewards.get_reward_fn``) in TRL's signature.

    TRL calls ``reward(prompts=..., completions=..., ground_truth=..., **columns)``
    with one entry per completion and logs ``rewards/<name>/mean``.
    """
    from grpo_helpers.rewards import get_reward_fn

    score = get_reward_fn(name)

    def reward(
        completions: list[Any], ground_truth: list[str], **_: Any
    ) -> list[float]:
        return [
            float(score(completion_text(c), gold))
            for c, gold in zip(completions, ground_truth, strict=True)
        ]

    reward.__name__ = name
    return reward


def train_dataset(series: Any) -> Any:
    """The run's training rows as TRL reads them: the series' chat
    (``prompts.build_messages``; TRL renders it with the chat template, as
    ``prompts.build_prompt`` does) and the gold answer, in the series' order."""
    from datasets import Dataset

    from grpo_helpers.data import extract_gsm8k_answer, load_split
    from grpo_helpers.prompts import build_messages

    rows = load_split(series, "train")
    return Dataset.from_dict(
        {
            "prompt": [build_messages(q) for q in rows["question"]],
            "ground_truth": [extract_gsm8k_answer(a) for a in rows["answer"]],
        }
    )


def trl_values(path: str | Path, processes: int) -> dict[str, Any]:
    """The TRL settings of ``path`` (YAML), for ``processes`` processes.

    The file is written for one process; the batch of one optimiser step stays
    the same on ``n`` processes by giving each ``1/n`` of it.
    """
    import yaml

    values = yaml.safe_load(Path(path).read_text())
    batch = int(values["per_device_train_batch_size"])
    if processes > 1:
        if batch % processes:
            raise SystemExit(
                f"{batch} completions per step do not divide among {processes} "
                "processes: launch on a number of processes that divides "
                "batch_size x group_size"
            )
        values["per_device_train_batch_size"] = batch // processes
    return values


def build_trainer(
    config_path: str | Path,
    *,
    model: str | None = None,
    overrides: dict[str, Any] | None = None,
    folder: Path = HERE,
) -> Any:
    """TRL's ``GRPOTrainer`` for the exported run.

    Args:
        config_path: ``grpo_config.yaml`` or ``grpo_config_cpu.yaml``.
        model: a directory or hub id instead of the run's base model.
        overrides: TRL settings that replace the file's (``max_steps``...).
        folder: the export folder (where ``series_config.json`` is).

    Returns:
        The trainer, ready for ``.train()``.
    """
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    from grpo_helpers.local.adapters import LORA_ALPHA
    from grpo_helpers.local.models import pretrained_dir
    from grpo_helpers.trl.mapping import resolve_precision, reward_names

    series = series_config(folder)
    values = trl_values(config_path, int(os.environ.get("WORLD_SIZE", "1")))
    values.update(overrides or {})
    values = resolve_precision(values)  # bf16: auto -> what this GPU computes in
    names = reward_names(series)
    if len(values["reward_weights"]) != len(names):
        raise SystemExit(f"reward_weights must have one weight per reward: {names}")
    if series.swanlab:  # transformers' SwanLab callback reads these
        os.environ.setdefault("SWANLAB_PROJECT", series.swanlab_project)
        os.environ.setdefault("SWANLAB_MODE", series.swanlab_mode)
        os.environ.setdefault(
            "SWANLAB_LOG_DIR", str(Path(values["output_dir"]) / "swanlog")
        )
    lora = LoraConfig(
        r=series.lora_rank,
        lora_alpha=LORA_ALPHA,  # the series' alpha, for every rank
        lora_dropout=0.0,
        target_modules="all-linear",  # every linear layer but lm_head
        task_type="CAUSAL_LM",
    )
    return GRPOTrainer(
        model=model or pretrained_dir(series.model_name),
        reward_funcs=[series_reward(name) for name in names],
        args=GRPOConfig(**values),
        train_dataset=train_dataset(series),
        peft_config=lora,
    )


def main(argv: list[str] | None = None) -> int:
    """Train, save the adapter and the log history; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", default=str(HERE / "grpo_config.yaml"), help="TRL settings"
    )
    parser.add_argument("--model", default=None, help="a directory or hub id")
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--output-dir", default=None)
    args = parser.parse_args(argv)
    overrides: dict[str, Any] = {}
    if args.max_steps is not None:
        overrides["max_steps"] = args.max_steps
    if args.output_dir is not None:
        overrides["output_dir"] = args.output_dir
    trainer = build_trainer(args.config, model=args.model, overrides=overrides)
    trainer.train()
    trainer.save_model()
    if trainer.accelerator.is_main_process:
        out = Path(trainer.args.output_dir)
        history = json.dumps(trainer.state.log_history, indent=1)
        (out / "log_history.json").write_text(history + "\n")
        print(f"adapter and log_history.json in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
