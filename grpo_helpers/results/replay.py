"""Run a recorded run's first steps again and find where it parts from its record.

A recorded run (an ablation record, or a ``runs/<name>/`` directory) holds every
step's metrics. Training its settings again on the same engine should give the same
rewards and the same gradient norms step by step, as long as nothing that shapes
the floating-point path changed: the code (``provenance.commit``), the thread
count, the CPU's kernels and BLAS (``provenance.numeric``). :func:`first_difference`
compares two metric tables and names the first step where they part;
:func:`replay` trains the first steps again; ``bench/rerun_record.py`` does both
and prints the table.

Example::

    >>> recorded = pd.DataFrame({"step": [0, 1], "reward_mean": [0.1, 0.2],
    ...                          "grad_norm": [1.0, 2.0]})
    >>> first_difference(recorded, recorded) is None
    True
    >>> first_difference(recorded, recorded.assign(grad_norm=[1.0, 2.5]))["step"]
    1

Only a bench runs it; it stays in the package because its tests check it, and
tests never import a bench (docs/package.md, the house rules): what a test needs
from a bench lives here.

Introduced in: docs/results.md (why one configuration gave two results)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_helpers import run_files
from grpo_helpers.config import GRPOConfig

__all__ = [
    "COMPARED",
    "RECORD_RTOL",
    "compare_steps",
    "first_difference",
    "load_record",
    "record_run",
    "record_threads",
    "replay",
]

#: The per-step metrics a replay is held to: what the step sampled and was paid
#: (the reward) and what it learned from it (the gradient norm).
COMPARED = ("reward_mean", "grad_norm")
#: Records keep a metric to 10 significant digits (pandas' JSON), so two equal
#: numbers compare within this relative tolerance.
RECORD_RTOL = 1e-9


def load_record(path: str | Path) -> dict[str, Any]:
    """A recorded run as ``{"settings", "metrics", "hardware", "provenance"}``.

    Reads an ablation record (``data/reference_runs/ablation/<variant>-seed<k>.json``)
    or a run directory (``config.json`` and ``metrics.jsonl``, with
    ``provenance.json`` when the run wrote one).

    Raises:
        FileNotFoundError: neither form is at ``path``.
    """
    path = Path(path)
    if path.is_file():
        record: dict[str, Any] = json.loads(path.read_text())
        if "settings" not in record or "metrics" not in record:
            raise ValueError(f"{path} is not a run record (no settings or metrics)")
        return record
    config = path / "config.json"
    if not config.is_file():
        raise FileNotFoundError(
            f"No recorded run at {path}: give an ablation record (.json) or a run "
            "directory holding config.json and metrics.jsonl"
        )
    record = {
        "settings": json.loads(config.read_text()),
        "metrics": json.loads(run_files.load_metrics(path).to_json(orient="records")),
    }
    provenance = path / "provenance.json"
    if provenance.is_file():
        record["provenance"] = json.loads(provenance.read_text())
    return record


def record_run(folder: str | Path, steps: int = 3) -> dict[str, Any]:
    """Train notebook 05's fast-mode run for ``steps`` steps in ``folder`` and
    record it as the ablation records a run: what a replay can be tried on.

    Returns:
        ``{"settings", "metrics", "hardware", "provenance"}``, as
        :func:`load_record` reads it.
    """
    import json

    from grpo_helpers import presets, provenance, training

    config = GRPOConfig(
        backend="local",
        **(presets.notebook_run(fast=True) | {"steps": steps}),
        run_dir=str(Path(folder) / "recorded"),
        weights_name="recorded",
        save_every=1,
    )
    result = training.train_sync(config, overwrite=True, progress=False)
    return {
        "settings": config.to_dict(),
        "metrics": json.loads(result.metrics.to_json(orient="records")),
        "hardware": provenance.hardware(),
        "provenance": provenance.record(config.base_model),
    }


def record_threads(record: Mapping[str, Any]) -> int | None:
    """The torch thread count a record was made with: its provenance, else the
    ``"(N torch threads)"`` of its hardware line, else None."""
    numeric = (record.get("provenance") or {}).get("numeric") or {}
    if "torch_threads" in numeric:
        return int(numeric["torch_threads"])
    found = re.search(r"\((\d+) torch threads?\)", str(record.get("hardware", "")))
    return int(found.group(1)) if found else None


def _same(a: Any, b: Any, rtol: float) -> bool:
    missing_a = a is None or (isinstance(a, float) and math.isnan(a))
    missing_b = b is None or (isinstance(b, float) and math.isnan(b))
    if missing_a or missing_b:
        return missing_a and missing_b
    return abs(float(a) - float(b)) <= rtol * max(abs(float(a)), abs(float(b)))


def compare_steps(
    recorded: pd.DataFrame,
    rerun: pd.DataFrame,
    columns: Sequence[str] = COMPARED,
    rtol: float = RECORD_RTOL,
) -> pd.DataFrame:
    """Step by step, each compared metric of the record beside the rerun's, and
    whether they agree (within ``rtol``, relative; a missing value, such as the
    gradient norm of a step that made no update, agrees only with another).

    Only the steps both tables hold are compared.
    """
    merged = recorded[["step", *columns]].merge(
        rerun[["step", *columns]], on="step", suffixes=(" recorded", " rerun")
    )
    for column in columns:
        merged[f"{column} same"] = [
            _same(a, b, rtol)
            for a, b in zip(
                merged[f"{column} recorded"], merged[f"{column} rerun"], strict=True
            )
        ]
    return merged


def first_difference(
    recorded: pd.DataFrame,
    rerun: pd.DataFrame,
    columns: Sequence[str] = COMPARED,
    rtol: float = RECORD_RTOL,
) -> dict[str, Any] | None:
    """The first step at which the rerun parts from the record, or None.

    Returns:
        ``{"step", "column", "recorded", "rerun"}`` of the first disagreement
        (:func:`compare_steps`), in step order and then in ``columns`` order.
    """
    table = compare_steps(recorded, rerun, columns, rtol)
    for row in table.to_dict("records"):
        for column in columns:
            if not row[f"{column} same"]:
                return {
                    "step": int(row["step"]),
                    "column": column,
                    "recorded": row[f"{column} recorded"],
                    "rerun": row[f"{column} rerun"],
                }
    return None


def replay(
    record: Mapping[str, Any],
    steps: int,
    run_dir: str | Path,
    service: Any = None,
    **changes: Any,
) -> pd.DataFrame:
    """Train the record's settings again for its first ``steps`` steps.

    Args:
        record: from :func:`load_record`.
        steps: how many steps to run (at most the record's).
        run_dir: where the rerun's run directory goes (overwritten).
        service: a ServiceClient (default: the record's engine).
        changes: settings to change (a deliberate difference, to see the replay
            find it).

    Returns:
        The rerun's metrics, one row per step.
    """
    from grpo_helpers import training

    settings = dict(record["settings"])
    if steps < 1 or steps > int(settings["steps"]):
        raise ValueError(
            f"steps must be between 1 and the record's {settings['steps']}, not {steps}"
        )
    config = GRPOConfig.from_dict(settings)
    config = replace(
        config,
        steps=steps,
        run_dir=str(run_dir),
        weights_name=Path(run_dir).name,
        swanlab=False,
        **changes,
    )
    result = training.train_sync(config, service, overwrite=True, progress=False)
    return result.metrics
