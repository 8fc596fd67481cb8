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
``optim_step`` before awaiting either. The arithmetic of steps 3 and 4 and the
step's metrics are :mod:`grpo_helpers.step_math`'s; both loops write the same run
directory (:mod:`grpo_helpers.run_files`) and load their rows with
:func:`grpo_helpers.data.load_split`.

The module stays whole (about 600 lines): the two loops share one set-up and one
step's bookkeeping (``_Run``), and each reads as the demo scripts' loop with them.

Introduced in: 05_sync_training_loop.ipynb and 06_async_training_loop.ipynb
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytrio as trio
from tqdm.auto import tqdm

from grpo_helpers import tracking
from grpo_helpers.config import GRPOConfig
from grpo_helpers.data import (
    batch_indices,
    extract_gsm8k_answer,
    get_num_steps,
    load_split,
)
from grpo_helpers.engines import connect, run_coroutine
from grpo_helpers.prompts import build_prompt
from grpo_helpers.rewards import get_reward_fn
from grpo_helpers.rollout import (
    make_sampling_params,
    run_rollout_group,
    run_rollout_group_async,
)
from grpo_helpers.run_files import TOKEN_COUNTERS, RunDirectory
from grpo_helpers.settings import SETTINGS
from grpo_helpers.step_math import (
    PromptGroup,
    build_step_datums,
    derive_seed,
    format_step_line,
    kl_terms,
    ratio_metrics,
    reference_inputs,
    sample_records,
    step_metrics,
    with_sampler_logprobs,
)

StepCallback = Callable[[pd.DataFrame], None]


@dataclass
class TrainResult:
    """What a training run leaves: its metrics, where its weights are, its dir."""

    metrics: pd.DataFrame
    weights_path: str | None
    run_dir: Path
    seconds: float


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
        self.trackio_run = (
            tracking.start_trackio(
                name=config.weights_name,
                config=config.to_dict(),
                directory=SETTINGS.runs_root / "trackio",
            )
            if config.trackio
            else None
        )
        self.train_data = load_split(config, "train")
        self.num_steps = get_num_steps(
            self.train_data, config.steps, config.batch_size, config.all_data
        )
        self.cumulative = self.run.cumulative()
        # Batches of questions drawn before the next step: one per step, more where
        # dynamic sampling drew extra batches (recorded per step, so a resumed run
        # takes the same questions).
        self.position = sum(
            int(row.get("batches_drawn", 1)) for row in self.run.metrics
        )
        if service is None:
            service = connect(config.backend, run_dir=self.run.path / "checkpoints")
        self.service = service
        self.training_client = service.create_lora_training_client(
            base_model=config.model_name, rank=config.lora_rank, seed=config.seed
        )
        if self.run.state_path is not None:
            self._load_state(self.run.state_path)
        self.tokenizer = self.training_client.get_tokenizer()
        self.run.start(run_provenance(config))
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

    def _load_state(self, state_path: str) -> None:
        """The checkpoint's weights and optimizer state; a clear error when they
        cannot be read (nothing of the run directory was written yet)."""
        try:
            self.training_client.load_state_with_optimizer(state_path).result()
        except Exception as error:  # noqa: BLE001 - whatever the engine raised
            raise ValueError(
                f"Cannot resume {self.run.path}: its checkpoint {state_path} cannot "
                f"be read ({type(error).__name__}: {error}). Start the run again "
                "(overwrite=True, CLI: --overwrite; its steps are lost)."
            ) from error

    def log(self, line: str) -> None:
        if self.progress:
            tqdm.write(line)

    def steps(self) -> range:
        return range(self.run.start_step, self.num_steps)

    def batch(
        self, step: int, round_: int = 0
    ) -> list[tuple[int, dict[str, Any], list[int], str]]:
        """(row index, row, prompt tokens, gold answer) for the step's prompts:
        its batch of questions (``round_`` 0) or dynamic sampling's extra batch
        ``round_``, the next questions of the split in the run's order."""
        number = step if self.config.all_data else self.position + round_
        indices = batch_indices(
            len(self.train_data), number, self.config.batch_size, self.config.all_data
        )
        out = []
        for index, row in zip(indices, self.train_data.select(indices), strict=True):
            tokens = build_prompt(self.tokenizer, row["question"])
            out.append((index, row, tokens, extract_gsm8k_answer(row["answer"])))
        return out

    def params(self, step: int, prompt: int, round_: int = 0) -> trio.SamplingParams:
        """The sampling params of the ``prompt``-th prompt of the step's batch
        ``round_`` (its seed: ``derive_seed(seed, step, round_ * batch_size +
        prompt)``)."""
        number = round_ * self.config.batch_size + prompt
        seed = derive_seed(self.config.seed, step, number)
        return self.base_params.model_copy(update={"seed": seed})

    def label(self, step: int, round_: int) -> str:
        """The progress bar's label of the step's batch ``round_``."""
        return f"GRPO step {step}" + (f" (extra batch {round_})" if round_ else "")

    def needs_more(self, groups: list[PromptGroup], rounds: int) -> bool:
        """Dynamic sampling (DAPO): another batch of questions, when fewer than
        ``batch_size`` of the step's groups teach and the bound allows it."""
        teaching = sum(not g.degenerate for g in groups)
        return (
            teaching < self.config.batch_size and rounds < self.config.dynamic_sampling
        )

    def trained_groups(self, groups: list[PromptGroup]) -> list[PromptGroup]:
        """The groups the step trains on: all of them (degenerate ones send no
        Datum) or, with dynamic sampling, the first ``batch_size`` that teach."""
        if self.config.dynamic_sampling == 0:
            return groups
        return [g for g in groups if not g.degenerate][: self.config.batch_size]

    def drawn(
        self,
        groups: list[PromptGroup],
        trained: list[PromptGroup],
        rounds: int,
        refill_seconds: float,
    ) -> dict[str, float]:
        """What the step drew and discarded (its metrics), and the run's place in
        the questions moves on."""
        self.position += 1 + rounds
        teaching = sum(not g.degenerate for g in trained)
        return {
            "batches_drawn": float(1 + rounds),
            "groups_sampled": float(len(groups)),
            "groups_discarded": float(len(groups) - teaching),
            "refill_samples": float(
                sum(len(g.samples) for g in groups[self.config.batch_size :])
            ),
            "seconds_refill": refill_seconds,
        }

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
        trained: list[PromptGroup] | None = None,
    ) -> None:
        """The step's metrics row and samples, written; the live plot and trackers
        fed. ``trained``: the groups the step trained on, which ``samples.jsonl``
        marks (``discarded``) when dynamic sampling may have drawn others."""
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
        if not self.config.dynamic_sampling:
            trained = None
        self.run.append_step(row, sample_records(step, groups, trained))
        self.log(format_step_line(row))
        if self.swanlab_run is not None:
            import swanlab

            swanlab.log(tracking.loggable(row), step=step)
        if self.trackio_run is not None:
            self.trackio_run.log(tracking.loggable(row), step=step)
        if self.on_step is not None:
            self.on_step(pd.DataFrame(self.run.metrics))

    def should_checkpoint(self, step: int) -> bool:
        every = self.config.save_every
        return step == self.num_steps - 1 or (every > 0 and (step + 1) % every == 0)

    def state_name(self, step: int) -> str:
        """Two names, taken in turn: the state written is never the one that
        checkpoint.json names, so one intact state always exists (whatever
        ``save_every``: by step parity, every second checkpoint of
        ``save_every=2`` overwrote the recorded one)."""
        last = (self.run.state_path or "").rstrip("/")
        letter = "b" if last.endswith("-resume-a") else "a"
        return f"{self.config.weights_name}-resume-{letter}"

    def finish(self, weights_path: str | None) -> TrainResult:
        if weights_path is not None:
            self.run.record_weights(self.config.weights_name, weights_path)
            self.log(
                f"Saved weights name: {self.config.weights_name}, path: {weights_path}"
            )
        if self.swanlab_run is not None:
            self.swanlab_run.finish()
        if self.trackio_run is not None:
            self.trackio_run.finish()
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


def run_provenance(config: GRPOConfig) -> dict[str, Any]:
    """What ``runs/<name>/provenance.json`` holds: the model in words
    (``provenance.model_words``), its file and SHA-256, the commit and the numeric
    path (``provenance.record``). On PyTRIO the model runs on its servers: its
    name is all this machine knows of it."""
    from grpo_helpers import provenance

    if config.backend != "local":
        return {"model": config.model_name, **provenance.commit()}
    return {
        "model": provenance.model_words(config.model_name),
        **provenance.record(config.model_name),
    }


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
    loop = _Run(
        config,
        service,
        resume=resume,
        overwrite=overwrite,
        progress=progress,
        on_step=on_step,
    )
    client = loop.training_client
    for step in loop.steps():
        t0 = time.perf_counter()
        sampler = client.save_weights_and_get_sampling_client()
        groups = _sample_groups(loop, sampler, step)
        rounds, refill_started = 0, time.perf_counter()
        while loop.needs_more(groups, rounds):  # dynamic sampling: another batch
            rounds += 1
            groups += _sample_groups(loop, sampler, step, rounds)
        t1 = time.perf_counter()
        trained = loop.trained_groups(groups)
        drawn = loop.drawn(
            groups, trained, rounds, t1 - refill_started if rounds else 0.0
        )
        reference = None
        if loop.reference is not None:  # the base model's logprobs, for the KL
            futures = [
                loop.reference.compute_logprobs(x) for x in reference_inputs(trained)
            ]
            reference = [future.result() for future in futures]
        datums, objective = loop.datums(trained, reference)
        objective |= drawn
        loss_metrics: dict[str, float] = {}
        optim_metrics: dict[str, float] = {}
        if datums and config.loss_temperature != 1.0:  # the tempered sampler's
            scored = client.forward(
                datums, loss_fn=config.loss_fn, loss_fn_config=config.loss_fn_config
            ).result()
            datums = with_sampler_logprobs(datums, scored)
        if datums:
            outputs = []
            for _ in range(config.updates_per_batch):  # mu updates on one batch
                fb_future = client.forward_backward(
                    datums, loss_fn=config.loss_fn, loss_fn_config=config.loss_fn_config
                )
                optim_future = client.optim_step(loop.adam_params)
                outputs.append((fb_future.result(), optim_future.result()))
            loss_metrics, optim_metrics, ratios = loop.update_metrics(outputs, datums)
            objective |= ratios
        t2 = time.perf_counter()
        seconds = {"sampling": t1 - t0, "training": t2 - t1, "total": t2 - t0}
        loop.finish_step(
            step,
            groups,
            datums,
            loss_metrics,
            optim_metrics,
            seconds,
            objective,
            trained,
        )
        if loop.should_checkpoint(step):
            saved = client.save_state(loop.state_name(step), overwrite=True).result()
            loop.run.record_checkpoint(step, saved.path)
    weights = client.save_weights_for_sampler(name=config.weights_name).result()
    return loop.finish(weights.path)


def _sample_groups(
    loop: _Run, sampler: Any, step: int, round_: int = 0
) -> list[PromptGroup]:
    """One group of completions per prompt of the step's batch ``round_``, each
    waited on (the sync loop)."""
    config = loop.config
    batch = loop.batch(step, round_)
    groups = []
    for i, (index, _row, tokens, gold) in enumerate(
        tqdm(
            batch,
            desc=loop.label(step, round_),
            unit="prompt",
            disable=not loop.progress,
        )
    ):
        samples = run_rollout_group(
            sampler,
            loop.tokenizer,
            tokens,
            gold,
            loop.params(step, i, round_),
            config.group_size,
            loop.reward_fn,
            config.advantage_scale,
        )
        groups.append(PromptGroup(index, tokens, gold, samples))
    return groups


async def _sample_groups_async(
    loop: _Run, sampler: Any, step: int, round_: int = 0
) -> list[PromptGroup]:
    """One group of completions per prompt of ``step``'s batch ``round_``, sampled
    at once.

    ``asyncio.gather`` runs one rollout per prompt concurrently and keeps the
    input order, so the groups line up with the batch.
    """
    config = loop.config
    batch = loop.batch(step, round_)
    with tqdm(
        total=len(batch),
        desc=loop.label(step, round_),
        unit="prompt",
        disable=not loop.progress,
    ) as bar:
        rollouts = [
            _counted(
                run_rollout_group_async(
                    sampler,
                    loop.tokenizer,
                    tokens,
                    gold,
                    loop.params(step, i, round_),
                    config.group_size,
                    loop.reward_fn,
                    config.advantage_scale,
                ),
                bar,
            )
            for i, (_, _, tokens, gold) in enumerate(batch)
        ]
        results = await asyncio.gather(*rollouts)
    return [
        PromptGroup(index, tokens, gold, samples)
        for (index, _row, tokens, gold), samples in zip(batch, results, strict=True)
    ]


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
    loop = _Run(
        config,
        service,
        resume=resume,
        overwrite=overwrite,
        progress=progress,
        on_step=on_step,
    )
    client = loop.training_client
    for step in loop.steps():
        t0 = time.perf_counter()
        sampler = await client.save_weights_and_get_sampling_client_async()
        groups = await _sample_groups_async(loop, sampler, step)
        rounds, refill_started = 0, time.perf_counter()
        while loop.needs_more(groups, rounds):  # dynamic sampling: another batch
            rounds += 1
            groups += await _sample_groups_async(loop, sampler, step, rounds)
        t1 = time.perf_counter()
        trained = loop.trained_groups(groups)
        drawn = loop.drawn(
            groups, trained, rounds, t1 - refill_started if rounds else 0.0
        )
        reference = None
        if loop.reference is not None:  # the base model's logprobs, for the KL
            reference = await asyncio.gather(
                *[
                    loop.reference.compute_logprobs_async(x)
                    for x in reference_inputs(trained)
                ]
            )
        datums, objective = loop.datums(trained, reference)
        objective |= drawn
        loss_metrics: dict[str, float] = {}
        optim_metrics: dict[str, float] = {}
        if datums and config.loss_temperature != 1.0:  # the tempered sampler's
            scored = await client.forward_async(
                datums, loss_fn=config.loss_fn, loss_fn_config=config.loss_fn_config
            )
            datums = with_sampler_logprobs(datums, await scored)
        if datums:
            outputs = []
            for _ in range(config.updates_per_batch):  # mu updates on one batch
                fb_future = await client.forward_backward_async(
                    datums, loss_fn=config.loss_fn, loss_fn_config=config.loss_fn_config
                )
                optim_future = await client.optim_step_async(loop.adam_params)
                outputs.append((await fb_future, await optim_future))
            loss_metrics, optim_metrics, ratios = loop.update_metrics(outputs, datums)
            objective |= ratios
        t2 = time.perf_counter()
        seconds = {"sampling": t1 - t0, "training": t2 - t1, "total": t2 - t0}
        loop.finish_step(
            step,
            groups,
            datums,
            loss_metrics,
            optim_metrics,
            seconds,
            objective,
            trained,
        )
        if loop.should_checkpoint(step):
            future = await client.save_state_async(
                loop.state_name(step), overwrite=True
            )
            loop.run.record_checkpoint(step, (await future).path)
    future = await client.save_weights_for_sampler_async(name=config.weights_name)
    return loop.finish((await future).path)


async def _counted(coroutine: Any, bar: Any) -> Any:
    """Await ``coroutine`` and tick the progress bar when it is done."""
    result = await coroutine
    bar.update(1)
    return result


def train(config: GRPOConfig, mode: str = "sync", **kwargs: Any) -> TrainResult:
    """Run :func:`train_sync` or :func:`train_async` from plain (non-async) code,
    a script or a notebook cell alike.

    Example (two steps on the tiny random model, in ``runs/demo``)::

        config = GRPOConfig(base_model="tiny-random", steps=2, batch_size=2,
                            group_size=4, max_tokens=16, weights_name="demo")
        result = train(config)                # or train(config, mode="async")
        result.metrics[["step", "reward_mean", "updated"]]
    """
    if mode == "sync":
        return train_sync(config, **kwargs)
    if mode == "async":
        return run_coroutine(train_async(config, **kwargs))  # works inside Jupyter
    raise ValueError(f"unknown mode {mode!r}; choose 'sync' or 'async'")
