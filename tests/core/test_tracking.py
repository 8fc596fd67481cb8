"""SwanLab, for real: a 2-step tiny-random run logs offline (no account, no network)
and the logged values read back equal the run's metrics.jsonl."""

from __future__ import annotations

import builtins
import math
from pathlib import Path

import pandas as pd
import pytest
from tiny import tiny, tiny_flags

from grpo_helpers import tracking, training
from grpo_helpers.cli import main as cli_main
from grpo_helpers.config import GRPOConfig


def swanlab_start(log_dir: Path):
    """The start record SwanLab wrote for the run: its project and experiment name
    (``name``), read with SwanLab's own record reader."""
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    (path,) = sorted(Path(log_dir).glob("run-*/run-*.swanlab"))
    reader = DataStoreReader()
    reader.open(path)
    try:
        for data in reader:
            record = Record()
            record.ParseFromString(data)
            if record.WhichOneof("record_type") == "start":
                return record.start
    finally:
        reader.close()
    raise AssertionError(f"no start record in {path}")


def read_swanlab(log_dir: Path) -> pd.DataFrame:
    """The scalars an offline or local SwanLab run logged: one row per step (columns
    ``step`` and one per logged key), read from the newest ``run-*/run-*.swanlab``
    file under ``log_dir`` with SwanLab's own record reader (SwanLab 0.10.3)."""
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    files = sorted(Path(log_dir).glob("run-*/run-*.swanlab"))
    if not files:
        raise FileNotFoundError(f"No SwanLab run under {log_dir}")
    reader = DataStoreReader()
    reader.open(files[-1])
    rows: dict[int, dict[str, float]] = {}
    try:
        for data in reader:
            record = Record()
            record.ParseFromString(data)
            if record.WhichOneof("record_type") != "scalar":
                continue
            scalar = record.scalar
            rows.setdefault(scalar.step, {})[scalar.key] = scalar.value.number
    finally:
        reader.close()
    return pd.DataFrame(
        [{"step": step, **values} for step, values in sorted(rows.items())]
    )


def test_a_run_logs_to_swanlab_offline_and_reads_back(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # SwanLab writes nothing outside the run directory
    config = GRPOConfig(
        **tiny(),
        swanlab=True,
        swanlab_project="trio-case",
        swanlab_experiment_name="grpo-gsm8k",
        run_dir=str(tmp_path / "run"),
    )
    assert config.swanlab_mode == "offline"
    result = training.train_sync(config, progress=False)
    logged = read_swanlab(tmp_path / "run" / "swanlog")
    assert list(logged["step"]) == [0, 1]
    metrics = result.metrics
    for key in ("reward_mean", "accuracy", "frac_degenerate", "sampled_tokens"):
        for step in (0, 1):
            want = float(metrics.loc[metrics["step"] == step, key].iloc[0])
            got = float(logged.loc[logged["step"] == step, key].iloc[0])
            assert math.isclose(got, want, rel_tol=1e-6), (key, step)
    # NaN metrics (no KL measured) are not sent; booleans become 0 / 1
    assert "kl_k1" not in logged.columns
    assert set(logged["updated"]) <= {0.0, 1.0}
    start = swanlab_start(tmp_path / "run" / "swanlog")
    assert (start.project, start.name) == ("trio-case", "grpo-gsm8k")


def test_the_cli_flags_of_the_demo_scripts_reach_swanlab(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = cli_main(
        [
            "train",
            *tiny_flags(
                steps=1,
                batch_size=1,
                group_size=2,
                max_tokens=4,
                reward="binary",
                save_every=1,
            ),
            "--swanlab",
            "--swanlab-project",
            "my-project",
            "--swanlab-experiment-name",
            "my-run",
            "--run-dir",
            str(tmp_path / "run"),
        ]
    )
    assert code == 0
    logged = read_swanlab(tmp_path / "run" / "swanlog")
    assert list(logged["step"]) == [0]
    start = swanlab_start(tmp_path / "run" / "swanlog")
    assert (start.project, start.name) == ("my-project", "my-run")


def test_without_swanlab_the_error_says_what_to_do(monkeypatch):
    real_import = builtins.__import__

    def no_swanlab(name, *args, **kwargs):
        if name == "swanlab":
            raise ImportError("No module named 'swanlab'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_swanlab)
    with pytest.raises(ImportError) as info:
        tracking.start_swanlab(
            project="p", experiment_name="e", config={}, log_dir="unused"
        )
    message = str(info.value)
    assert "pip install -e '.[swanlab]'" in message and "swanlab=False" in message


def read_trackio(run_name: str) -> list[dict]:
    """The steps trackio stored for ``run_name`` (its SQLite store, read here)."""
    import json
    import sqlite3

    import trackio.utils

    path = Path(trackio.utils.TRACKIO_DIR) / f"{tracking.TRACKIO_PROJECT}.db"
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT step, metrics FROM metrics WHERE run_name = ? ORDER BY step",
            (run_name,),
        ).fetchall()
    return [{"step": step, **json.loads(values)} for step, values in rows]


def test_a_run_logs_to_trackio_locally_and_reads_back(tmp_path, monkeypatch):
    """Issue 46: trackio beside SwanLab, offline: the steps it stored equal the
    run's metrics.jsonl, under the project grpo-notebooks and the run's name, in
    the series' store (``runs/trackio``), never the user's cache."""
    import os

    monkeypatch.chdir(tmp_path)
    name = f"trackio-{tmp_path.name}"
    config = GRPOConfig(
        **tiny(), trackio=True, weights_name=name, run_dir=str(tmp_path / "run")
    )
    result = training.train_sync(config, progress=False)
    import trackio.utils

    store = Path(trackio.utils.TRACKIO_DIR)
    if "TRACKIO_DIR" not in os.environ or os.environ["TRACKIO_DIR"] == str(store):
        assert "huggingface" not in str(store)
    logged = read_trackio(name)
    assert [row["step"] for row in logged] == [0, 1]
    metrics = result.metrics
    for key in ("reward_mean", "accuracy", "frac_degenerate", "sampled_tokens"):
        for row in logged:
            want = float(metrics.loc[metrics["step"] == row["step"], key].iloc[0])
            assert math.isclose(row[key], want, rel_tol=1e-6), (key, row["step"])
    assert "kl_k1" not in logged[0]  # NaN metrics are not sent


def test_the_notebooks_tracker_parameter_picks_one_or_none():
    assert tracking.tracker_settings("none") == {"swanlab": False, "trackio": False}
    assert tracking.tracker_settings("swanlab")["swanlab"] is True
    assert tracking.tracker_settings("trackio")["trackio"] is True
    with pytest.raises(ValueError, match="unknown tracker 'wandb'; choose one of"):
        tracking.tracker_settings("wandb")
