"""`python -m grpo_helpers eval`: base alone, base vs checkpoint, bad checkpoint."""

from __future__ import annotations

import pandas as pd

from grpo_helpers.cli import main as cli_main
from grpo_helpers.engines import connect

ARGS = ["eval", "--base-model", "tiny-random", "--backend", "local", "--limit", "4",
        "--max-tokens", "6", "--dataset", "arithmetic"]  # fmt: skip


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
    service = connect("local", run_dir=tmp_path / "engine")
    tc = service.create_lora_training_client(base_model="tiny-random", rank=4)
    path = tc.save_weights_for_sampler("ckpt").result().path
    out = tmp_path / "records.csv"
    assert cli_main([*ARGS, "--checkpoint-path", path, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "McNemar exact p" in printed
    assert "checkpoint" in printed
    records = pd.read_csv(out)
    assert sorted(set(records["model"])) == ["base", "checkpoint"]


def test_eval_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    missing = f"local://{tmp_path}/weights/none"
    assert cli_main([*ARGS, "--checkpoint-path", missing]) == 2
    err = capsys.readouterr().err
    assert "No local-engine checkpoint" in err
    assert "Traceback" not in err
