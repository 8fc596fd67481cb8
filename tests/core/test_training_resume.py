"""A resumed run is the same training: after a SIGKILL anywhere, ``--resume``
gives the final LoRA tensors, the metrics (timings aside) and the samples of an
uninterrupted run with the same seed, sync and async."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
import torch
from tiny import tiny
from training_runs import TIMING, final_lora, subprocess_env

from grpo_helpers import run_files, training
from grpo_helpers.config import GRPOConfig

RESUME_FLAGS = [
    "--base-model",
    "tiny-random",
    "--backend",
    "local",
    "--dataset",
    "arithmetic",
    "--steps",
    "4",
    "--batch-size",
    "2",
    "--group-size",
    "2",
    "--max-tokens",
    "6",
    "--lora-rank",
    "4",
    "--learning-rate",
    "1e-2",  # large enough that Adam's state matters after a resume
    "--reward",
    "shaped",
    "--seed",
    "3",
    "--save-every",
    "1",
]


#: The self-killing subprocess: an uninterrupted run first (the reference), then
#: the same run that SIGKILLs itself from its step callback right after step 1's
#: metrics line is written and before step 1's checkpoint: the resumed run must
#: drop that line and redo step 1. No clocks, no polling.
KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from grpo_helpers import cli, run_files, training
    from grpo_helpers.config import from_arguments

    flags, mode, reference, killed = sys.argv[1:-3], *sys.argv[-3:]

    def config(run_dir):
        parser = cli.build_parser()
        return from_arguments(
            parser.parse_args(["train", *flags, "--run-dir", run_dir])
        )

    training.train(config(reference), mode, progress=False)

    def kill_after_two_steps(metrics):
        if len(metrics) == 2:
            os.kill(os.getpid(), signal.SIGKILL)

    training.train(config(killed), mode, progress=False, on_step=kill_after_two_steps)
    """
)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_resume_after_sigkill_is_the_same_training(tmp_path, mode):
    """SIGKILL mid-run, then ``--resume``: the final LoRA tensors, the metrics and
    the samples equal those of an uninterrupted run with the same seed."""
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    env = subprocess_env()
    run = subprocess.run(
        [sys.executable, "-c", KILLER, *RESUME_FLAGS, mode, reference, killed],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    assert json.loads((killed / "checkpoint.json").read_text())["step"] == 0
    assert list(run_files.load_metrics(killed)["step"]) == [0, 1]
    assert not (killed / "weights.json").exists()
    done = subprocess.run(
        [sys.executable, "-m", "grpo_helpers", "train", *RESUME_FLAGS]
        + ["--mode", mode, "--run-dir", str(killed), "--resume"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Resuming" in done.stdout + done.stderr
    # the same metrics, step by step (timings aside)
    want = run_files.load_metrics(reference).drop(columns=list(TIMING))
    got = run_files.load_metrics(killed).drop(columns=list(TIMING))
    assert list(got["step"]) == [0, 1, 2, 3]
    assert list(got.columns) == list(want.columns)
    assert got["updated"].any(), "no step trained: the comparison would be empty"
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-5, atol=1e-6)
    # the same completions
    pd.testing.assert_frame_equal(
        run_files.load_samples(killed), run_files.load_samples(reference)
    )
    # the same final adapter
    a, b = final_lora(reference), final_lora(killed)
    assert a.keys() == b.keys() and a
    assert any(float(t.abs().max()) > 0 for k, t in a.items() if "lora_B" in k)
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=1e-5, atol=1e-6, msg=key)


#: A run that kills itself (SIGKILL) at one point of step ``at``: writing its
#: checkpoint (between the two renames of the atomic write), right after the
#: checkpoint's state is written (before checkpoint.json names it), half-way
#: through its samples, or after its metrics line (what
#: ``test_resume_after_sigkill_is_the_same_training`` tries).
KILL_AT = textwrap.dedent(
    """
    import json, os, signal, sys
    from grpo_helpers import run_files, training
    from grpo_helpers.config import GRPOConfig
    from grpo_helpers.local import checkpoints

    config = GRPOConfig(**json.loads(sys.argv[1]))
    where, at = sys.argv[2], int(sys.argv[3])
    real_save = checkpoints.save_checkpoint
    real_append = run_files.RunDirectory.append_step
    current = [None]  # the step whose metrics line was written last

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def save_checkpoint(directory, tensors, meta, *args, **kwargs):
        if meta.get("kind") != "state" or current[0] != at:
            return real_save(directory, tensors, meta, *args, **kwargs)
        if where == "state-written":
            real_save(directory, tensors, meta, *args, **kwargs)
        elif directory.exists():  # the old state moved aside, the new not in place
            directory.rename(directory.parent / f".old-{directory.name}-killed")
        die()

    def append_step(self, row, samples):
        if row["step"] == at and where == "samples-written":
            text = "".join(json.dumps(s) + "\\n" for s in samples)
            with self.samples_path.open("a") as f:
                f.write(text[: len(text) // 2])
            die()
        real_append(self, row, samples)
        current[0] = row["step"]
        if row["step"] == at and where == "metrics":
            die()

    checkpoints.save_checkpoint = save_checkpoint
    run_files.RunDirectory.append_step = append_step
    training.train(config, "sync", progress=False)
    """
)


#: The runs the kills are tried on: 4 steps whose optimizer state matters.
KILLED = tiny(steps=4, learning_rate=1e-2, seed=3, save_every=1)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The run every killed one must give after its resume (save_every changes
    no result: it is one of the settings a resume may change)."""
    run_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
    config = GRPOConfig(**KILLED, run_dir=str(run_dir))
    training.train(config, "sync", progress=False)
    return run_dir


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("where", "at", "save_every"),
    [
        ("checkpoint-written", 2, 1),
        ("samples-written", 2, 1),
        ("state-written", 3, 2),
    ],
    ids=[
        "while-the-checkpoint-is-written",
        "while-the-samples-are-written",
        "save-every-2-after-its-state",
    ],
)
def test_a_run_killed_anywhere_resumes_to_the_same_training(
    tmp_path, uninterrupted, where, at, save_every
):
    """Issue 38: killed while a checkpoint or the samples are written, or with
    ``save_every > 1``, then resumed: the final LoRA tensors, the metrics and the
    samples equal the uninterrupted run's. (``save_every=2`` checkpoints steps 1
    and 3, which by step parity shared one state name: the kill after step 3's
    state left checkpoint.json naming step 1 over step 3's weights.)"""
    killed = tmp_path / "killed"
    config = GRPOConfig(**(KILLED | {"save_every": save_every}), run_dir=str(killed))
    run = subprocess.run(
        [sys.executable, "-c", KILL_AT, json.dumps(config.to_dict()), where, str(at)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    assert not (killed / "weights.json").exists()
    result = training.train(config, "sync", resume=True, progress=False)
    assert result.metrics["step"].tolist() == [0, 1, 2, 3]
    want = run_files.load_metrics(uninterrupted).drop(columns=list(TIMING))
    got = run_files.load_metrics(killed).drop(columns=list(TIMING))
    assert got["updated"].any()
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-5, atol=1e-6)
    pd.testing.assert_frame_equal(
        run_files.load_samples(killed), run_files.load_samples(uninterrupted)
    )
    a, b = final_lora(uninterrupted), final_lora(killed)
    assert a.keys() == b.keys() and a
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=1e-5, atol=1e-6, msg=key)
