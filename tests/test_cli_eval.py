"""`python -m grpo_helpers eval`: base alone, base vs checkpoint, bad checkpoint."""

from __future__ import annotations

import pandas as pd
from tiny import tiny

from grpo_helpers import training
from grpo_helpers.cli import main as cli_main
from grpo_helpers.config import GRPOConfig
from grpo_helpers.engines import connect

ARGS = ["eval", "--base-model", "tiny-random", "--backend", "local",
        "--eval-questions", "4", "--eval-max-tokens", "6",
        "--dataset", "arithmetic"]  # fmt: skip


def test_eval_base_only_writes_records(tmp_path, capsys):
    out = tmp_path / "records.jsonl"
    assert cli_main([*ARGS, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "exact [95% CI]" in printed and "lenient [95% CI]" in printed
    records = pd.read_json(out, lines=True)
    assert list(records["model"]) == ["base"] * 4
    assert {"index", "question", "gold", "completion", "exact", "lenient"} <= set(
        records.columns
    )


def test_eval_base_vs_checkpoint_prints_difference_and_p_value(tmp_path, capsys):
    # Train first: an untrained LoRA adapter (B = 0) *is* the base model, so a
    # checkpoint saved before training could not show that --checkpoint-path is read.
    service = connect("local", run_dir=tmp_path / "engine")
    config = GRPOConfig(
        **tiny(steps=3, learning_rate=3e-2, run_dir=str(tmp_path / "run"))
    )
    result = training.train_sync(config, service, progress=False)
    assert result.metrics["updated"].any()
    out = tmp_path / "records.csv"
    args = [*ARGS, "--checkpoint-path", result.weights_path, "--out", str(out)]
    assert cli_main(args) == 0
    printed = capsys.readouterr().out
    assert "McNemar exact p" in printed
    assert "checkpoint" in printed
    records = pd.read_csv(out, keep_default_na=False)
    assert sorted(set(records["model"])) == ["base", "checkpoint"]
    by_model = records.pivot(index="index", columns="model", values="completion")
    # Greedy decoding of the trained weights writes something else somewhere.
    assert (by_model["base"] != by_model["checkpoint"]).any()


def test_eval_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    missing = f"local://{tmp_path}/weights/none"
    assert cli_main([*ARGS, "--checkpoint-path", missing]) == 2
    err = capsys.readouterr().err
    assert "No local-engine checkpoint" in err
    assert "Traceback" not in err


def test_eval_on_the_validation_split_asks_the_validation_questions(tmp_path, capsys):
    from grpo_helpers import arithmetic

    out = tmp_path / "records.jsonl"
    args = [*ARGS, "--split", "validation", "--seed", "3", "--out", str(out)]
    assert cli_main(args) == 0
    assert "arithmetic validation[:4]" in capsys.readouterr().out
    records = pd.read_json(out, lines=True, dtype=False)
    wanted = arithmetic.arithmetic_split("validation", seed=3, difficulty=1)
    assert list(records["question"]) == list(wanted.select(range(4))["question"])
    test = arithmetic.arithmetic_split("test", seed=3, difficulty=1)
    assert not set(records["question"]) & set(test["question"])
