"""``python -m grpo_helpers``: what the command line does with good and bad input.

``train`` with the demo scripts' flags and no secret in the run directory, on
PyTRIO without a server; ``eval`` of the base model alone and against a trained
checkpoint. Bad command lines give a clear message and a nonzero exit, and damage
no run directory: each bad call is made next to a finished run (or an empty
folder) whose every file is compared, bytes and modification times, before and
after the call.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from tiny import tiny, tiny_flags
from training_runs import closed_port, subprocess_env

from grpo_helpers import training
from grpo_helpers.cli import main as cli_main
from grpo_helpers.config import GRPOConfig
from grpo_helpers.engines import connect

#: One step of one prompt x 2 completions, checkpointed every step.
TRAIN = [
    "train",
    *tiny_flags(
        steps=1, batch_size=1, group_size=2, max_tokens=4, reward="binary", save_every=1
    ),
]


EVAL = ["eval", "--base-model", "tiny-random", "--backend", "local"]


EVAL += ["--dataset", "arithmetic", "--eval-max-tokens", "4"]


def tree(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder``: its bytes and modification time."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A one-step run, made once; each test works on a copy of it."""
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    assert cli_main([*TRAIN, "--run-dir", str(run_dir)]) == 0
    return run_dir


@pytest.fixture
def run_copy(finished_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy


def refused(argv, capsys) -> str:
    """Run the CLI; return stderr after checking it exited 2 without a traceback.

    argparse refuses a bad choice or type by raising SystemExit(2); the CLI's own
    checks return 2."""
    try:
        code = cli_main(argv)
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--loss-fn", "dro"], "argument --loss-fn: invalid choice: 'dro'"),
        (["--normalization", "mean"], "argument --normalization: invalid choice"),
        (["--updates-per-batch", "0"], "updates_per_batch must be >= 1, got 0"),
        (["--updates-per-batch", "two"], "argument --updates-per-batch: invalid int"),
        (["--clip-low", "1.5"], "clip_low must be in (0, 1], got 1.5"),
        (["--clip-low", "0"], "clip_low must be in (0, 1], got 0.0"),
        (["--clip-high", "0.9"], "clip_high must be >= 1, got 0.9"),
        (["--kl-coef", "-0.1"], "kl_coef must be >= 0, got -0.1"),
        (["--kl-coef", "nan?"], "argument --kl-coef: invalid float value"),
    ],
)
def test_bad_objective_flags_are_refused_before_the_run_is_touched(
    run_copy, capsys, flags, message
):
    before = tree(run_copy)
    err = refused([*TRAIN, *flags, "--run-dir", str(run_copy), "--resume"], capsys)
    assert message in err
    assert tree(run_copy) == before


def test_resume_on_an_empty_folder_is_refused(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    err = refused([*TRAIN, "--run-dir", str(empty), "--resume"], capsys)
    assert f"Nothing to resume in {empty}" in err
    assert "without --resume" in err
    assert list(empty.iterdir()) == []
    missing = tmp_path / "missing"
    err = refused([*TRAIN, "--run-dir", str(missing), "--resume"], capsys)
    assert f"Nothing to resume in {missing}" in err
    assert not missing.exists()


def test_resume_with_swanlab_on_an_empty_folder_writes_nothing(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    refused([*TRAIN, "--run-dir", str(empty), "--resume", "--swanlab"], capsys)
    assert list(empty.iterdir()) == []


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_eval_questions_below_one_are_refused(tmp_path, monkeypatch, capsys, limit):
    monkeypatch.chdir(tmp_path)  # eval's default records file: runs/eval/
    out = tmp_path / "records.jsonl"
    out.write_text("earlier records\n")
    err = refused([*EVAL, "--eval-questions", limit, "--out", str(out)], capsys)
    assert f"eval_questions must be >= 1, got {limit}" in err
    assert out.read_text() == "earlier records\n"
    refused([*EVAL, "--eval-questions", limit], capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.jsonl"]


def test_eval_on_gsm8k_validation_is_refused_with_where_to_tune(tmp_path, capsys):
    gsm8k = ["eval", "--base-model", "tiny-random", "--backend", "local"]
    out = tmp_path / "records.jsonl"
    err = refused([*gsm8k, "--split", "validation", "--out", str(out)], capsys)
    assert "GSM8K has no validation split" in err and "arithmetic" in err
    assert not out.exists()


def _damage_the_state(run: Path) -> None:
    """Cut the checkpoint's optimizer state in half (the copy's: checkpoint.json
    is pointed at the state inside the copy first)."""
    from grpo_helpers.local import checkpoints

    record = json.loads((run / "checkpoint.json").read_text())
    state = checkpoints.from_uri(record["state_path"])
    assert "checkpoints" in state.parts, state
    inside = state.parts[state.parts.index("checkpoints") + 1 :]
    copied = run.joinpath("checkpoints", *inside)
    record["state_path"] = checkpoints.to_uri(copied)
    (run / "checkpoint.json").write_text(json.dumps(record))
    optimizer = copied / checkpoints.OPTIMIZER_FILE
    optimizer.write_bytes(optimizer.read_bytes()[: optimizer.stat().st_size // 2])


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda run: (run / "checkpoint.json").write_text('{"step": 0, "sta'),
            "checkpoint.json is damaged",
        ),
        (_damage_the_state, "its checkpoint local://"),
        (
            lambda run: (run / "metrics.jsonl").write_text(
                (run / "metrics.jsonl").read_text()[:40]
            ),
            "checkpoint is at step 0 but metrics.jsonl holds steps []",
        ),
        (
            lambda run: (run / "metrics.jsonl").write_text(
                "{not json\n" + (run / "metrics.jsonl").read_text()
            ),
            "metrics.jsonl is damaged: line 1 of 2 is not JSON",
        ),
    ],
    ids=["checkpoint-json", "checkpoint-state", "metrics-cut", "metrics-damaged"],
)
def test_a_damaged_run_is_refused_with_how_to_go_on_and_nothing_lost(
    run_copy, tmp_path, capsys, damage, message
):
    """Issue 38: a corrupt checkpoint or a cut metrics.jsonl: a clear error that
    says how to go on, no traceback, every file of the run and of another run
    beside it as it was."""
    other = tmp_path / "other"
    shutil.copytree(run_copy, other)
    damage(run_copy)
    before, others = tree(run_copy), tree(other)
    err = refused([*TRAIN, "--run-dir", str(run_copy), "--resume"], capsys)
    assert message in err
    assert "--overwrite" in err
    assert tree(run_copy) == before
    assert tree(other) == others


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


def test_cli_train_with_demo_flags_and_no_secret_in_run_dir(
    tmp_path, capsys, monkeypatch
):
    """The demo scripts' flags, SwanLab on: no file of the run (SwanLab's log of
    the run's metadata included) holds the API key from the environment."""
    secret = "sk-test-secret-0123456789"
    monkeypatch.setenv("PYTRIO_API_KEY", secret)
    monkeypatch.chdir(tmp_path)  # SwanLab writes nothing outside the run directory
    run_dir = tmp_path / "run"
    code = cli_main(
        [
            "train",
            "--mode",
            "async",
            "--base-model",
            "tiny-random",
            "--backend",
            "local",
            "--dataset",
            "arithmetic",
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--group-size",
            "2",
            "--max-tokens",
            "6",
            "--lora-rank",
            "4",
            "--learning-rate",
            "1e-3",
            "--beta1",
            "0.9",
            "--beta2",
            "0.95",
            "--temperature",
            "1.0",
            "--top-p",
            "0.95",
            "--seed",
            "7",
            "--limit",
            "50",
            "--reward",
            "shaped",
            "--weights-name",
            "cli-test",
            "--swanlab",
            "--run-dir",
            str(run_dir),
            "--save-every",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "Saved weights path:" in out
    assert "train cost" in out
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["top_p"] == 0.95 and saved["limit"] == 50 and saved["seed"] == 7
    assert secret not in out
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any("swanlog" in p.parts for p in files)  # a third party's files too
    for path in files:
        assert secret.encode() not in path.read_bytes(), path


@pytest.mark.slow
def test_cli_train_on_pytrio_fails_without_showing_or_writing_the_key(tmp_path):
    """The one backend that reads PYTRIO_API_KEY, with no server to answer (a
    closed local port): a clear error, exit 2, and the key neither printed nor
    written anywhere."""
    secret = "sk-test-secret-9876543210"
    run_dir = tmp_path / "run"
    env = subprocess_env(
        HOME=str(tmp_path / "home"),  # no saved `trio login` profile
        PYTRIO_API_KEY=secret,
        PYTRIO_BASE_URL=f"http://127.0.0.1:{closed_port()}",
    )
    done = subprocess.run(
        [sys.executable, "-m", "grpo_helpers", "train", "--backend", "pytrio"]
        + ["--dataset", "arithmetic", "--steps", "1", "--run-dir", str(run_dir)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,  # a guard against a hang: connect() retries for 10 s
    )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-2000:]
    assert "error:" in done.stderr and "trio login" in done.stderr
    assert "Traceback" not in done.stderr
    assert secret not in output
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert not (run_dir / "config.json").exists()


def test_cli_reports_bad_input_without_traceback(capsys):
    code = cli_main(["train", "--group-size", "1", "--base-model", "tiny-random"])
    err = capsys.readouterr().err
    assert code == 2
    assert "group_size must be >= 2" in err
    assert "Traceback" not in err
