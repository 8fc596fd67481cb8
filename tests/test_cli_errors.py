"""Bad command lines: a clear message, a nonzero exit, and no run directory damaged.

Each bad call is made next to a finished run (or an empty folder) whose every file
is compared, bytes and modification times, before and after the call.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tiny import tiny_flags

from grpo_helpers.cli import main as cli_main

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
