"""The GRPO training loops, sync and async, with a run directory you can resume.

One GRPO step, as in the PyTRIO demo scripts:

1. ``save_weights_and_get_sampling_client()``: a sampler frozen at the current
   weights (on-policy: the completions come from the policy being trained);
2. for each of ``batch_size`` prompts, sample ``group_size`` completions, grade each
   with the reward function, and give each ``reward - group mean`` as advantage;
3. skip *degenerate* groups (all rewards equal: every advantage is zero);
4. turn the rest into Datums and call
   ``forward_backward(datums, loss_fn="importance_sampling")`` then ``optim_step``;
   a step with no datums makes no update.

``train_sync`` waits on every future explicitly (``.result()``); ``train_async``
samples all prompts of a step concurrently and submits ``forward_backward`` and
``optim_step`` before awaiting either. Both write the same run directory::

    runs/<name>/config.json       the GRPOConfig of the run
    runs/<name>/metrics.jsonl     one line per step, flushed as it is written
    runs/<name>/samples.jsonl     every completion: step, question, text, reward...
    runs/<name>/checkpoint.json   the last resumable state (step and its path)
    runs/<name>/weights.json      the final sampler weights (name and path)

Introduced in: 05_sync_training_loop.ipynb and 06_async_training_loop.ipynb
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytrio as trio
from tqdm.auto import tqdm

from grpo_helpers import tracking
from grpo_helpers.advantages import is_degenerate, kl_penalty, length_scales
from grpo_helpers.arithmetic import arithmetic_split
from grpo_helpers.config import GRPOConfig
from grpo_helpers.data import (
    batch_indices,
    extract_gsm8k_answer,
    get_num_steps,
    load_gsm8k,
)
from grpo_helpers.datum import RolloutSample, build_grpo_datum
from grpo_helpers.prompts import build_prompt
from grpo_helpers.rewards import (
    answers_match,
    get_reward_fn,
    grade_answer,
    read_answer,
)
from grpo_helpers.rollout import (
    make_sampling_params,
    run_rollout_group,
    run_rollout_group_async,
)

StepCallback = Callable[[pd.DataFrame], None]

#: Config fields that may differ when a run is resumed (they change no result).
RESUME_MUTABLE_FIELDS = (
    "run_dir",
    "swanlab",
    "swanlab_mode",
    "eval_limit",
    "steps",
    "save_every",
)

#: The splits a run can load: train on ``train``; choose settings on ``validation``
#: (the arithmetic track only: GSM8K has no validation split); report on ``test``.
SPLITS = ("train", "validation", "test")


# ----------------------------------------------------------------------------------
# Data for a run
# ----------------------------------------------------------------------------------


def load_split(config: GRPOConfig, split: str) -> Any:
    """The rows a run trains on (``split="train"``), is tuned on (``"validation"``)
    or is reported on (``"test"``).

    GSM8K comes from the bundled copy; ``dataset="arithmetic"`` generates GSM8K-format
    word problems with disjoint train, validation and test questions
    (``arithmetic.arithmetic_split``: same seed, same rows). ``limit`` keeps the
    first rows of the train split, as train.py's ``--limit``.

    Raises:
        ValueError: an unknown split, or ``"validation"`` on GSM8K.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    if config.dataset == "arithmetic":
        rows = arithmetic_split(split, seed=config.seed, difficulty=config.difficulty)
    elif split == "validation":
        raise ValueError(
            "GSM8K has no validation split (only train and test); choose settings "
            "on the arithmetic track's validation split (dataset='arithmetic')"
        )
    else:
        rows = load_gsm8k(split)
    if split == "train" and config.limit is not None:
        rows = rows.select(range(min(config.limit, len(rows))))
    return rows


def derive_seed(seed: int, step: int, prompt: int) -> int:
    """A sampling seed for one prompt of one step: repeatable, distinct per call."""
    return (seed * 1_000_003 + step * 10_007 + prompt) % (2**31 - 1)


# ----------------------------------------------------------------------------------
# One step's bookkeeping: pure functions over the step's groups
# ----------------------------------------------------------------------------------


@dataclass
class PromptGroup:
    """One prompt of a step and the ``group_size`` completions sampled for it."""

    row_index: int
    prompt_tokens: list[int]
    ground_truth: str
    samples: list[RolloutSample]

    @property
    def rewards(self) -> list[float]:
        return [s.reward for s in self.samples]

    @functools.cached_property
    def exact(self) -> list[float]:
        """1.0 where a completion's boxed answer is exactly right (binary grade)."""
        return [grade_answer(s.text, self.ground_truth) for s in self.samples]

    @property
    def degenerate(self) -> bool:
        """All rewards equal: every advantage is zero, no learning signal."""
        return is_degenerate(self.rewards)


def build_step_datums(
    groups: Iterable[PromptGroup],
    normalization: str = "token_sum",
    max_tokens: int | None = None,
    kl_changes: Sequence[Sequence[float]] | None = None,
    mask_truncated: bool = False,
) -> list[trio.Datum]:
    """Datums of the non-degenerate groups (degenerate ones are skipped).

    Args:
        groups: the step's prompt groups, rewards and advantages filled in.
        normalization: how each completion's advantage is scaled by its length
            (``advantages.length_scales``; ``"token_sum"`` leaves it as it is).
        max_tokens: the sampling budget (for ``normalization="constant"``).
        kl_changes: per completion of the non-degenerate groups, in order, the
            per-token advantage changes of the KL penalty
            (``advantages.kl_penalty``); None for no penalty.
        mask_truncated: leave out the completions that ``max_tokens`` cut off
            (``RolloutSample.truncated``; DAPO's overlong filtering, TRL's
            ``mask_truncated_completions``): no Datum, so no loss and no
            gradient. Their rewards still count in their group's mean, and a
            token-mean normalisation divides by the tokens that are trained.

    Returns:
        One Datum per completion of the non-degenerate groups (without the
        truncated ones when masked). With the defaults each is exactly
        ``build_grpo_datum(prompt_tokens, sample)``.
    """
    kept = [g for g in groups if not g.degenerate]
    count = sum(len(g.samples) for g in kept)
    if kl_changes is not None and len(kl_changes) != count:
        raise ValueError(
            f"{len(kl_changes)} KL changes for {count} completions to train on"
        )
    datums = []
    position = 0
    for group in kept:
        trained = [not (mask_truncated and s.truncated) for s in group.samples]
        kept_samples = [s for s, t in zip(group.samples, trained, strict=True) if t]
        lengths = [len(s.tokens) for s in kept_samples]
        scales = iter(
            length_scales(lengths, normalization, max_tokens) if lengths else []
        )
        for sample, is_trained in zip(group.samples, trained, strict=True):
            change = None if kl_changes is None else kl_changes[position]
            position += 1
            if not is_trained:
                continue
            scale = next(scales)
            if scale == 1.0 and change is None:
                datums.append(build_grpo_datum(group.prompt_tokens, sample))
                continue
            per_token = [sample.advantage * scale] * len(sample.tokens)
            if change is not None:
                per_token = [a + c for a, c in zip(per_token, change, strict=True)]
            datums.append(build_grpo_datum(group.prompt_tokens, sample, per_token))
    return datums


def trained_samples(groups: Iterable[PromptGroup]) -> list[tuple[list[int], Any]]:
    """(prompt tokens, sample) of every completion of the non-degenerate groups."""
    return [
        (group.prompt_tokens, sample)
        for group in groups
        if not group.degenerate
        for sample in group.samples
    ]


def reference_inputs(groups: Iterable[PromptGroup]) -> list[trio.ModelInput]:
    """What to ask the reference model: prompt + completion of each trained sample."""
    return [
        trio.ModelInput.from_ints(list(prompt) + list(sample.tokens))
        for prompt, sample in trained_samples(groups)
    ]


def kl_terms(
    groups: list[PromptGroup],
    reference: Sequence[Sequence[float | None]],
    kl_coef: float,
) -> tuple[list[list[float]], dict[str, float]]:
    """The KL penalty's per-token changes and the KL metrics of a step.

    Args:
        groups: the step's groups.
        reference: per trained sample (see :func:`reference_inputs`), the reference
            model's ``compute_logprobs`` of prompt + completion.
        kl_coef: the penalty's weight.
    """
    samples = trained_samples(groups)
    ref_completion = [
        [float(v) for v in values[len(values) - len(sample.tokens) :]]
        for values, (_, sample) in zip(reference, samples, strict=True)
    ]
    return kl_penalty([s.logprobs for _, s in samples], ref_completion, kl_coef)


def ratio_metrics(
    outputs: Sequence[Any],
    datums: Sequence[trio.Datum],
    clip_low: float,
    clip_high: float,
) -> dict[str, float]:
    """Mean learner/sampler ratio and the fraction of tokens the clip stops.

    Over the completion tokens (non-zero advantage) of every update of a step:
    ``ratio = exp(learner logprob - sampler logprob)``; a token is *clipped* when
    the PPO objective stops pushing it: ``ratio > clip_high`` with a positive
    advantage, or ``ratio < clip_low`` with a negative one. With one update per
    batch the ratio is 1 (up to float noise) and nothing is clipped.

    Args:
        outputs: the ``ForwardBackwardOutput`` of each update.
        datums: the step's Datums (their sampler logprobs and advantages).
    """
    ratios: list[float] = []
    clipped = 0
    for out in outputs:
        for datum, result in zip(datums, out.loss_fn_outputs, strict=True):
            adv = np.asarray(datum.loss_fn_inputs["advantages"].tolist(), dtype=float)
            old = np.asarray(datum.loss_fn_inputs["logprobs"].tolist(), dtype=float)
            new = np.asarray(result["logprobs"].tolist(), dtype=float)
            active = adv != 0
            ratio = np.exp(new[active] - old[active])
            ratios.extend(ratio.tolist())
            a = adv[active]
            clipped += int(
                np.sum((a > 0) & (ratio > clip_high) | (a < 0) & (ratio < clip_low))
            )
    if not ratios:
        return {"ratio_mean": math.nan, "clip_frac": math.nan}
    return {"ratio_mean": float(np.mean(ratios)), "clip_frac": clipped / len(ratios)}


def _grad_norm(optim_metrics: dict[str, float]) -> float:
    for key, value in optim_metrics.items():
        if "grad_norm" in key:
            return float(value)
    return math.nan


def step_metrics(
    step: int,
    groups: list[PromptGroup],
    datums: list[trio.Datum],
    max_tokens: int,
    loss_metrics: dict[str, float],
    optim_metrics: dict[str, float],
    seconds: dict[str, float],
    objective: dict[str, float] | None = None,
) -> dict[str, Any]:
    """One row of metrics for one step (before cumulative token counts).

    Args:
        step: the step number, from 0.
        groups: the step's prompt groups with their graded completions.
        datums: what was sent to ``forward_backward`` (empty: no update).
        max_tokens: the sampling budget; a completion of that length hit it.
        loss_metrics: ``ForwardBackwardOutput.metrics`` (``loss_sum``...), or {}.
        optim_metrics: ``OptimStepResponse.metrics`` (grad norm...), or {}.
        seconds: wall-clock seconds spent ``sampling``, ``training`` and ``total``.
        objective: the objective's own metrics (``ratio_mean``, ``clip_frac``,
            ``kl_k1``, ``kl_k3``, ``updates``), NaN where not measured.

    Returns:
        A flat dict; ``reward_mean`` is the mean reward over all completions,
        ``accuracy`` the fraction whose boxed answer is exactly right,
        ``lenient_accuracy`` the fraction whose answer (boxed, else the last
        number) is right, ``boxed_frac`` the fraction with a complete
        ``\\boxed{}`` answer,
        ``entropy`` the mean negative logprob of the sampled tokens (an estimate
        of the sampler's entropy per token at temperature 1).
    """
    samples = [s for g in groups for s in g.samples]
    lengths = [len(s.tokens) for s in samples]
    exact = [e for g in groups for e in g.exact]
    skipped = sum(g.degenerate for g in groups)
    hit_max = sum(n >= max_tokens for n in lengths)
    read = [(read_answer(s.text), g.ground_truth) for g in groups for s in g.samples]
    boxed = [is_boxed for (_, is_boxed), _ in read]
    lenient = [answers_match(answer, gold) for (answer, _), gold in read]
    return {
        "step": step,
        "reward_mean": float(np.mean([s.reward for s in samples])),
        "accuracy": float(np.mean(exact)),
        "lenient_accuracy": float(np.mean(lenient)),
        "boxed_frac": float(np.mean(boxed)),
        "group_reward_std": float(np.mean([np.std(g.rewards) for g in groups])),
        "frac_degenerate": skipped / len(groups),
        "valid_groups": len(groups) - skipped,
        "skipped_groups": skipped,
        "datums": len(datums),
        "updated": bool(datums),
        "completion_tokens_mean": float(np.mean(lengths)),
        "completion_tokens_max": int(max(lengths)),
        "hit_max_count": int(hit_max),
        "hit_max_frac": hit_max / len(lengths),
        "loss_sum": float(loss_metrics.get("loss_sum", math.nan)),
        "loss_mean": float(loss_metrics.get("loss_mean", math.nan)),
        "token_count": float(loss_metrics.get("token_count", math.nan)),
        "grad_norm": _grad_norm(optim_metrics),
        "seconds_sampling": seconds["sampling"],
        "seconds_training": seconds["training"],
        "seconds_total": seconds["total"],
        "prefill_tokens": sum(len(g.prompt_tokens) for g in groups),
        "sampled_tokens": int(sum(lengths)),
        "trained_tokens": int(sum(d.model_input.length for d in datums)),
        "entropy": -float(np.mean([lp for s in samples for lp in s.logprobs])),
        **{key: math.nan for key in OBJECTIVE_METRICS},
        **(objective or {}),
    }


TOKEN_COUNTERS = ("prefill_tokens", "sampled_tokens", "trained_tokens")
#: Metrics of the objective's knobs (notebook 08); NaN when not measured.
OBJECTIVE_METRICS = ("ratio_mean", "clip_frac", "kl_k1", "kl_k3", "updates")


def format_step_line(row: dict[str, Any]) -> str:
    """The line printed after each step, in the demo scripts' style."""
    return (
        f"Step {row['step']:3d} | reward: {row['reward_mean']:.3f} | "
        f"acc: {row['accuracy']:.0%} | degenerate: {row['frac_degenerate']:.0%} | "
        f"datums: {row['datums']} | tokens mean/max: "
        f"{row['completion_tokens_mean']:.1f}/{row['completion_tokens_max']} | "
        f"hit max: {row['hit_max_count']} | loss: {row['loss_mean']:.4f} | "
        f"{row['seconds_total']:.1f}s"
    )


# ----------------------------------------------------------------------------------
# The run directory
# ----------------------------------------------------------------------------------


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file; a torn last line (a killed writer) is dropped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def _write_json_atomic(path: Path, value: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, sort_keys=True))
    os.replace(tmp, path)


def _rewrite_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(tmp, path)


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
            checkpoint = (
                json.loads(self.checkpoint_path.read_text())
                if self.checkpoint_path.exists()
                else None
            )
            last = checkpoint["step"] if checkpoint else -1
            self.state_path = checkpoint["state_path"] if checkpoint else None
            self.start_step = last + 1
            self.metrics = [
                r for r in read_jsonl(self.metrics_path) if r["step"] <= last
            ]

    def start(self) -> None:
        """Write the config and prepare the logs (after the model has loaded)."""
        if self.resuming:
            # Steps after the last checkpoint are redone: drop their rows so that no
            # step is lost or repeated.
            last = self.start_step - 1
            samples = [r for r in read_jsonl(self.samples_path) if r["step"] <= last]
            _rewrite_jsonl(self.metrics_path, self.metrics)
            _rewrite_jsonl(self.samples_path, samples)
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            for p in (self.checkpoint_path, self.path / "weights.json"):
                p.unlink(missing_ok=True)
            self.metrics_path.write_text("")
            self.samples_path.write_text("")
        _write_json_atomic(self.config_path, self.config.to_dict())

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

    def record_weights(self, name: str, path: str) -> None:
        _write_json_atomic(self.path / "weights.json", {"name": name, "path": path})


def sample_records(step: int, groups: list[PromptGroup]) -> list[dict[str, Any]]:
    """The ``samples.jsonl`` lines of one step: one per completion."""
    return [
        {
            "step": step,
            "question_index": group.row_index,
            "sample_index": i,
            "text": sample.text,
            "reward": sample.reward,
            "advantage": sample.advantage,
            "num_tokens": len(sample.tokens),
            "exact": exact,
        }
        for group in groups
        for i, (sample, exact) in enumerate(
            zip(group.samples, group.exact, strict=True)
        )
    ]


# ----------------------------------------------------------------------------------
# The loops
# ----------------------------------------------------------------------------------


@dataclass
class TrainResult:
    """What a training run leaves: its metrics, where its weights are, its dir."""

    metrics: pd.DataFrame
    weights_path: str | None
    run_dir: Path
    seconds: float
    eval_summary: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class _Run:
    """Shared set-up and per-step bookkeeping of the sync and async loops."""

    def __init__(
        self,
        config: GRPOConfig,
        service: Any,
        *,
        resume: bool,
        overwrite: bool,
        progress: bool,
        on_step: StepCallback | None,
    ) -> None:
        config.validate()
        self.config = config
        self.progress = progress
        self.on_step = on_step
        self.started = time.perf_counter()
        self.reward_fn = get_reward_fn(config.reward)
        # Reading the run directory writes nothing: a refused resume leaves it as
        # it was (SwanLab, below, writes its log there).
        self.run = RunDirectory(config, resume=resume, overwrite=overwrite)
        self.swanlab_run = _init_swanlab(config)
        self.train_data = load_split(config, "train")
        self.num_steps = get_num_steps(
            self.train_data, config.steps, config.batch_size, config.all_data
        )
        self.cumulative = self.run.cumulative()
        if service is None:
            from grpo_helpers.engines import connect

            service = connect(config.backend, run_dir=self.run.path / "checkpoints")
        self.service = service
        self.training_client = service.create_lora_training_client(
            base_model=config.model_name, rank=config.lora_rank, seed=config.seed
        )
        if self.run.state_path is not None:
            self.training_client.load_state_with_optimizer(self.run.state_path).result()
        self.tokenizer = self.training_client.get_tokenizer()
        self.run.start()
        self.adam_params = config.adam_params
        self.base_params = make_sampling_params(
            self.tokenizer, config.max_tokens, config.temperature, config.top_p
        )
        # The reference policy of the KL penalty: the base model (no adapter).
        self.reference = (
            service.create_sampling_client(base_model=config.model_name)
            if config.needs_reference
            else None
        )
        if self.run.start_step > 0:
            self.log(f"Resuming {self.run.path} at step {self.run.start_step}")

    def log(self, line: str) -> None:
        if self.progress:
            tqdm.write(line)

    def steps(self) -> range:
        return range(self.run.start_step, self.num_steps)

    def batch(self, step: int) -> list[tuple[int, dict[str, Any], list[int], str]]:
        """(row index, row, prompt tokens, gold answer) for the step's prompts."""
        indices = batch_indices(
            len(self.train_data), step, self.config.batch_size, self.config.all_data
        )
        out = []
        for index, row in zip(indices, self.train_data.select(indices), strict=True):
            tokens = build_prompt(self.tokenizer, row["question"])
            out.append((index, row, tokens, extract_gsm8k_answer(row["answer"])))
        return out

    def params(self, step: int, prompt: int) -> trio.SamplingParams:
        seed = derive_seed(self.config.seed, step, prompt)
        return self.base_params.model_copy(update={"seed": seed})

    def datums(
        self, groups: list[PromptGroup], reference: Sequence[Any] | None
    ) -> tuple[list[trio.Datum], dict[str, float]]:
        """The step's Datums, with the objective's advantage transforms, and the
        KL metrics when the reference model's logprobs were computed."""
        config = self.config
        changes = None
        objective: dict[str, float] = {}
        if reference is not None and reference:
            changes, objective = kl_terms(groups, reference, config.kl_coef)
            if config.kl_coef == 0:
                changes = None
        datums = build_step_datums(
            groups,
            config.normalization,
            config.max_tokens,
            changes,
            mask_truncated=config.mask_truncated,
        )
        return datums, objective

    def update_metrics(
        self, outputs: list[tuple[Any, Any]], datums: list[trio.Datum]
    ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        """(loss metrics, optimiser metrics) of the first update, and the ratio
        metrics over all ``updates_per_batch`` updates of the step."""
        config = self.config
        ratios = ratio_metrics(
            [fb for fb, _ in outputs], datums, config.clip_low, config.clip_high
        )
        ratios["updates"] = float(len(outputs))
        first_fb, first_optim = outputs[0]
        return dict(first_fb.metrics), dict(first_optim.metrics or {}), ratios

    def finish_step(
        self,
        step: int,
        groups: list[PromptGroup],
        datums: list[trio.Datum],
        loss_metrics: dict[str, float],
        optim_metrics: dict[str, float],
        seconds: dict[str, float],
        objective: dict[str, float] | None = None,
    ) -> None:
        row = step_metrics(
            step,
            groups,
            datums,
            self.config.max_tokens,
            loss_metrics,
            optim_metrics,
            seconds,
            objective,
        )
        for key in TOKEN_COUNTERS:
            self.cumulative[key] += row[key]
            row[f"cum_{key}"] = self.cumulative[key]
        self.run.append_step(row, sample_records(step, groups))
        self.log(format_step_line(row))
        if self.swanlab_run is not None:
            import swanlab

            swanlab.log(tracking.loggable(row), step=step)
        if self.on_step is not None:
            self.on_step(pd.DataFrame(self.run.metrics))

    def should_checkpoint(self, step: int) -> bool:
        every = self.config.save_every
        return step == self.num_steps - 1 or (every > 0 and (step + 1) % every == 0)

    def state_name(self, step: int) -> str:
        # Two alternating names, overwritten in turn: one intact state always exists.
        return f"{self.config.weights_name}-resume-{'ab'[step % 2]}"

    def finish(self, weights_path: str | None) -> TrainResult:
        if weights_path is not None:
            self.run.record_weights(self.config.weights_name, weights_path)
            self.log(
                f"Saved weights name: {self.config.weights_name}, path: {weights_path}"
            )
        if self.swanlab_run is not None:
            self.swanlab_run.finish()
        close = getattr(self.training_client, "close", None)
        if callable(close):
            close()
        seconds = time.perf_counter() - self.started
        self.log(f"train cost {seconds:.2f}s")
        return TrainResult(
            metrics=pd.DataFrame(self.run.metrics),
            weights_path=weights_path,
            run_dir=self.run.path,
            seconds=seconds,
        )


def _init_swanlab(config: GRPOConfig) -> Any | None:
    if not config.swanlab:
        return None
    return tracking.start_swanlab(
        project=config.swanlab_project,
        experiment_name=config.swanlab_experiment_name,
        config=config.to_dict(),
        mode=config.swanlab_mode,
        log_dir=config.run_path / "swanlog",
    )


def train_sync(
    config: GRPOConfig,
    service: Any = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    on_step: StepCallback | None = None,
) -> TrainResult:
    """Train with the sync loop: every future is waited on where it is created.

    Args:
        config: the run's settings (see ``GRPOConfig``).
        service: a ServiceClient (``engines.connect(...)``); None connects to
            ``config.backend``.
        resume: continue the run in ``config.run_path`` from its last checkpoint
            (FileNotFoundError when it holds no run, unless ``overwrite``: then
            a missing run starts afresh).
        overwrite: start again in a run directory that already holds a run.
        progress: print a progress bar and one line per step.
        on_step: called with the metrics DataFrame after every step (live plots).

    Returns:
        A ``TrainResult``: metrics (one row per step), final weights path, run dir.
    """
    r = _Run(
        config,
        service,
        resume=resume,
        overwrite=overwrite,
        progress=progress,
        on_step=on_step,
    )
    tc = r.training_client
    for step in r.steps():
        t0 = time.perf_counter()
        sampler = tc.save_weights_and_get_sampling_client()
        groups = []
        batch = r.batch(step)
        for i, (index, _row, tokens, gold) in enumerate(
            tqdm(batch, desc=f"GRPO step {step}", unit="prompt", disable=not progress)
        ):
            samples = run_rollout_group(
                sampler,
                r.tokenizer,
                tokens,
                gold,
                r.params(step, i),
                config.group_size,
                r.reward_fn,
                config.advantage_scale,
            )
            groups.append(PromptGroup(index, tokens, gold, samples))
        t1 = time.perf_counter()
        reference = None
        if r.reference is not None:  # the base model's logprobs, for the KL
            futures = [
                r.reference.compute_logprobs(x) for x in reference_inputs(groups)
            ]
            reference = [future.result() for future in futures]
        datums, objective = r.datums(groups, reference)
        loss_metrics: dict[str, float] = {}
        optim_metrics: dict[str, float] = {}
        if datums:
            outputs = []
            for _ in range(config.updates_per_batch):  # mu updates on one batch
                fb_future = tc.forward_backward(
                    datums, loss_fn=config.loss_fn, loss_fn_config=config.loss_fn_config
                )
                optim_future = tc.optim_step(r.adam_params)
                outputs.append((fb_future.result(), optim_future.result()))
            loss_metrics, optim_metrics, ratios = r.update_metrics(outputs, datums)
            objective |= ratios
        t2 = time.perf_counter()
        seconds = {"sampling": t1 - t0, "training": t2 - t1, "total": t2 - t0}
        r.finish_step(
            step, groups, datums, loss_metrics, optim_metrics, seconds, objective
        )
        if r.should_checkpoint(step):
            saved = tc.save_state(r.state_name(step), overwrite=True).result()
            r.run.record_checkpoint(step, saved.path)
    weights = tc.save_weights_for_sampler(name=config.weights_name).result()
    return r.finish(weights.path)


async def train_async(
    config: GRPOConfig,
    service: Any = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    on_step: StepCallback | None = None,
) -> TrainResult:
    """Train with the async loop: a step's prompts are sampled concurrently.

    ``asyncio.gather`` runs one ``sample_async`` per prompt at once (the local
    engine batches them into one generation); ``forward_backward_async`` and
    ``optim_step_async`` are both submitted before either is awaited (two awaits:
    the first submits and returns a future, the second waits for its result).
    Same arguments and result as :func:`train_sync`. In a notebook:
    ``result = await train_async(config)``; in a script:
    ``asyncio.run(train_async(config))``.
    """
    r = _Run(
        config,
        service,
        resume=resume,
        overwrite=overwrite,
        progress=progress,
        on_step=on_step,
    )
    tc = r.training_client
    for step in r.steps():
        t0 = time.perf_counter()
        sampler = await tc.save_weights_and_get_sampling_client_async()
        batch = r.batch(step)
        with tqdm(
            total=len(batch),
            desc=f"GRPO step {step}",
            unit="prompt",
            disable=not progress,
        ) as bar:
            rollouts = [
                _counted(
                    run_rollout_group_async(
                        sampler,
                        r.tokenizer,
                        tokens,
                        gold,
                        r.params(step, i),
                        config.group_size,
                        r.reward_fn,
                        config.advantage_scale,
                    ),
                    bar,
                )
                for i, (_, _, tokens, gold) in enumerate(batch)
            ]
            # gather keeps the input order, so results line up with the batch.
            results = await asyncio.gather(*rollouts)
        groups = [
            PromptGroup(index, tokens, gold, samples)
            for (index, _row, tokens, gold), samples in zip(batch, results, strict=True)
        ]
        t1 = time.perf_counter()
        reference = None
        if r.reference is not None:  # the base model's logprobs, for the KL
            reference = await asyncio.gather(
                *[
                    r.reference.compute_logprobs_async(x)
                    for x in reference_inputs(groups)
                ]
            )
        datums, objective = r.datums(groups, reference)
        loss_metrics: dict[str, float] = {}
        optim_metrics: dict[str, float] = {}
        if datums:
            outputs = []
            for _ in range(config.updates_per_batch):  # mu updates on one batch
                fb_future = await tc.forward_backward_async(
                    datums, loss_fn=config.loss_fn, loss_fn_config=config.loss_fn_config
                )
                optim_future = await tc.optim_step_async(r.adam_params)
                outputs.append((await fb_future, await optim_future))
            loss_metrics, optim_metrics, ratios = r.update_metrics(outputs, datums)
            objective |= ratios
        t2 = time.perf_counter()
        seconds = {"sampling": t1 - t0, "training": t2 - t1, "total": t2 - t0}
        r.finish_step(
            step, groups, datums, loss_metrics, optim_metrics, seconds, objective
        )
        if r.should_checkpoint(step):
            future = await tc.save_state_async(r.state_name(step), overwrite=True)
            r.run.record_checkpoint(step, (await future).path)
    future = await tc.save_weights_for_sampler_async(name=config.weights_name)
    return r.finish((await future).path)


async def _counted(coroutine: Any, bar: Any) -> Any:
    """Await ``coroutine`` and tick the progress bar when it is done."""
    result = await coroutine
    bar.update(1)
    return result


def train(config: GRPOConfig, mode: str = "sync", **kwargs: Any) -> TrainResult:
    """Run :func:`train_sync` or :func:`train_async` from plain (non-async) code,
    a script or a notebook cell alike."""
    if mode == "sync":
        return train_sync(config, **kwargs)
    if mode == "async":
        from grpo_helpers.evaluation import run_coroutine

        return run_coroutine(train_async(config, **kwargs))  # works inside Jupyter
    raise ValueError(f"unknown mode {mode!r}; choose 'sync' or 'async'")


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


#: Steps averaged at each end of a run by :func:`box_drift`.
DRIFT_STEPS = 5
#: How far the boxed fraction must fall for :func:`box_drift` to speak.
DRIFT_DROP = 0.15


def box_drift(metrics: pd.DataFrame, reward: str) -> str | None:
    r"""A paragraph saying that a run is drifting out of the box, and why, or None.

    Compares the boxed fraction of the first and the last :data:`DRIFT_STEPS`
    steps; when it fell by :data:`DRIFT_DROP` or more, says how much, how many
    answers were right with and without a box at the end, and what the run's reward
    pays for each (computed by the reward function itself).

    Introduced in: 05_sync_training_loop.ipynb
    """
    needed = {"boxed_frac", "accuracy", "lenient_accuracy"}
    if not needed <= set(metrics.columns) or len(metrics) < 2 * DRIFT_STEPS:
        return None
    first = metrics["boxed_frac"].head(DRIFT_STEPS).mean()
    last_rows = metrics.tail(DRIFT_STEPS)
    last = last_rows["boxed_frac"].mean()
    if first - last < DRIFT_DROP:
        return None
    reward_fn = get_reward_fn(reward)
    boxed_pay, unboxed_pay = reward_fn("\\boxed{7}", "7"), reward_fn("It is 7.", "7")
    right_boxed = last_rows["accuracy"].mean()
    right_unboxed = last_rows["lenient_accuracy"].mean() - right_boxed
    why = (
        f"An unboxed right answer still earns {unboxed_pay:g} against {boxed_pay:g} "
        "in a box, so in a group whose only right answers are unboxed, those get "
        "a positive advantage and the box loses ground."
        if unboxed_pay > 0
        else "An unboxed answer earns nothing under this reward, so the run loses "
        "reward with the box: the box went with something else the updates pushed "
        "away. Read the completions of the last steps (samples.jsonl) to see what."
    )
    return (
        f"This run is drifting out of the box: {first:.0%} of its completions were "
        f"boxed in its first {DRIFT_STEPS} steps, {last:.0%} in its last "
        f"{DRIFT_STEPS}. There, {right_boxed:.0%} were right in a box and "
        f"{right_unboxed:.0%} right without one. The {reward!r} reward pays "
        f"{boxed_pay:g} for a right answer in a box and {unboxed_pay:g} without. "
        f"{why} Exact accuracy (notebook 07) will fall with the box even while "
        "lenient accuracy rises."
    )
