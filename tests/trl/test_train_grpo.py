"""grpo_helpers.trl.train_grpo, the exported script: the series' prompt, data and
rewards, the batch divided among processes, and two real ``GRPOTrainer`` steps on
the CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from trl_runs import NOTEBOOK_05, TINY

from grpo_helpers.config import GRPOConfig
from grpo_helpers.trl import export

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ the script


def load_script(folder: Path):
    spec = importlib.util.spec_from_file_location(
        "train_grpo", folder / "train_grpo.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# with checkpointing on, TRL and peft ask the model by transformers' old name
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated")
def test_the_script_uses_the_series_prompt_data_and_rewards(tmp_path):
    import torch

    from grpo_helpers import data, prompts, rewards
    from grpo_helpers.data import extract_gsm8k_answer

    config = GRPOConfig(**TINY)
    folder = export.export_trl(config, tmp_path / "tiny")
    script = load_script(folder)
    # the GPU config (the CPU one trains in the slow test below): its bf16 and
    # fp16 "auto" are chosen here, where the script runs (issue 54)
    trainer = script.build_trainer(
        folder / "grpo_config.yaml",
        overrides={"output_dir": str(tmp_path / "out")},
        folder=folder,
    )
    if not torch.cuda.is_available():
        assert trainer.args.bf16 is False and trainer.args.fp16 is False
    assert trainer.args.use_vllm is False
    rows = data.load_split(config, "train")
    assert trainer.train_dataset.num_rows == rows.num_rows
    first = trainer.train_dataset[0]
    assert first["ground_truth"] == extract_gsm8k_answer(rows[0]["answer"])
    # TRL renders the series' chat into exactly prompts.build_prompt's tokens
    ids, _, _ = trainer._tokenize_prompts([first["prompt"]])
    tokenizer = trainer.processing_class
    assert list(ids[0]) == prompts.build_prompt(tokenizer, rows[0]["question"])
    # the rewards are the series' own functions, named as the series names them
    assert [f.__name__ for f in trainer.reward_funcs] == ["shaped", "binary"]
    texts = ["so \\boxed{7}", "7", "\\boxed{8}"]
    chats = [[{"role": "assistant", "content": t}] for t in texts]
    for func in trainer.reward_funcs:
        want = [rewards.get_reward_fn(func.__name__)(t, "7") for t in texts]
        assert func(completions=texts, ground_truth=["7"] * 3) == want
        assert func(completions=chats, ground_truth=["7"] * 3, prompts=None) == want
    assert trainer.reward_weights.tolist() == [1.0, 0.0]
    # the LoRA adapts every linear layer but lm_head, with the series' alpha
    peft_config = trainer.model.peft_config["default"]
    assert peft_config.r == 4 and peft_config.lora_alpha == 32
    names = [n for n, _ in trainer.model.named_parameters() if "lora_A" in n]
    assert names and not any("lm_head" in n for n in names)


def test_the_script_divides_the_batch_among_processes(tmp_path):
    folder = export.export_trl(GRPOConfig(**NOTEBOOK_05), tmp_path / "nb05")
    script = load_script(folder)
    path = folder / "grpo_config.yaml"
    assert script.trl_values(path, 1)["per_device_train_batch_size"] == 16
    assert script.trl_values(path, 4)["per_device_train_batch_size"] == 4
    with pytest.raises(SystemExit, match="do not divide among 3"):
        script.trl_values(path, 3)


@pytest.mark.slow
@pytest.mark.timeout(900)  # its subprocess may take 600 s; the default is 300
def test_two_trl_steps_of_the_exported_script_on_the_cpu(tmp_path):
    """The exported script, as a user launches it, offline, on tiny-random."""
    config = GRPOConfig(**TINY)
    folder = export.export_trl(config, tmp_path / "tiny")
    out = tmp_path / "out"
    env = os.environ | {
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PYTHONPATH": str(ROOT),  # this checkout's grpo_helpers
        "TOKENIZERS_PARALLELISM": "false",
    }
    done = subprocess.run(
        [sys.executable, "train_grpo.py", "--config", "grpo_config_cpu.yaml"]
        + ["--output-dir", str(out)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    history = json.loads((out / "log_history.json").read_text())
    steps = [row for row in history if "rewards/shaped/mean" in row]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        assert "rewards/binary/mean" in row and row["learning_rate"] == 1e-2
    assert "rewards/shaped/mean" in done.stdout + done.stderr  # logged as it runs
    assert any(row["grad_norm"] > 0 for row in steps)  # a group had a signal
    assert (out / "adapter_model.safetensors").is_file()
