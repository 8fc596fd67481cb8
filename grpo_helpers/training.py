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

The two loops differ only in how they sample: ``train_sync`` waits on each
prompt's rollout (``.result()``) before the next; ``train_async`` samples all
prompts of a step concurrently (``asyncio.gather``). Steps 3 and 4, and the step's
metrics, are one function both loops call, :func:`grpo_helpers.step.train_on_groups`
(the async loop in a worker thread). Both loops write the same run directory
(:mod:`grpo_helpers.run_files`) and load their rows with
:func:`grpo_helpers.data.load_split`; ``_Run`` holds their one set-up and a step's
bookkeeping.

Introduced in: 05_sync_training_loop.ipynb and 06_async_training_loop.ipynb
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
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
from grpo_helpers.engines import configure_samplers, connect, run_coroutine
from grpo_helpers.prompts import build_prompt
from grpo_helpers.rewards import get_reward_fn
from grpo_helpers.rollout import (
    make_sampling_params,
    run_rollout_group,
    run_rollout_group_async,
)
from grpo_helpers.run_files import TOKEN_COUNTERS, RunDirectory
from grpo_helpers.settings import SETTINGS
from grpo_helpers.step import Outcome, train_on_groups
from grpo_helpers.step_math import (
    PromptGroup,
    derive_seed,
    format_step_line,
    sample_records,
    step_metrics,
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
        configure_samplers(
            self.training_client, config.sampler_logprobs, config.sampler_precision
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
        self, step: int, round_: int = 0, ahead: int = 0
    ) -> list[tuple[int, dict[str, Any], list[int], str]]:
        """(row index, row, prompt tokens, gold answer) for the step's prompts:
        its batch of questions (``round_`` 0) or dynamic sampling's extra batch
        ``round_``, the next questions of the split in the run's order; ``ahead``:
        the batches the step before will have drawn when this one is sampled while
        it trains (the async loop's ``max_steps_off_policy``)."""
        number = step if self.config.all_data else self.position + ahead + round_
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

    def sampled(
        self, started: float, refill_started: float, rounds: int
    ) -> dict[str, float]:
        """When the step's sampling started and ended, and how long dynamic
        sampling's extra batches took (0 without them)."""
        ended = time.perf_counter()
        refill = ended - refill_started if rounds else 0.0
        return {"started": started, "ended": ended, "refill": refill}

    def drawn(
        self, groups: list[PromptGroup], trained: list[PromptGroup], rounds: int
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
        }

    def finish_step(
        self,
        step: int,
        groups: list[PromptGroup],
        outcome: Outcome,
        rounds: int,
        sampled: dict[str, float],
    ) -> None:
        """The step's metrics row and samples, written; the live plot and trackers
        fed; a checkpoint where one is due. ``samples.jsonl`` marks the groups
        dynamic sampling discarded (``discarded``)."""
        ended = time.perf_counter()
        seconds = {
            "sampling": sampled["ended"] - sampled["started"],
            "training": ended - sampled["ended"],
            "total": ended - sampled["started"],
        }
        objective = outcome.objective | self.drawn(groups, outcome.trained, rounds)
        objective["seconds_refill"] = sampled["refill"]
        row = step_metrics(
            step,
            groups,
            outcome.datums,
            self.config.max_tokens,
            outcome.loss_metrics,
            outcome.optim_metrics,
            seconds,
            objective,
        )
        for key in TOKEN_COUNTERS:
            self.cumulative[key] += row[key]
            row[f"cum_{key}"] = self.cumulative[key]
        trained = outcome.trained if self.config.dynamic_sampling else None
        self.run.append_step(row, sample_records(step, groups, trained))
        self.log(format_step_line(row))
        if self.swanlab_run is not None:
            import swanlab

            swanlab.log(tracking.loggable(row), step=step)
        if self.trackio_run is not None:
            self.trackio_run.log(tracking.loggable(row), step=step)
        if self.on_step is not None:
            self.on_step(pd.DataFrame(self.run.metrics))

    def checkpoint(self, step: int) -> None:
        """A resumable checkpoint after ``step``, where one is due."""
        if self.should_checkpoint(step):
            client = self.training_client
            saved = client.save_state(self.state_name(step), overwrite=True).result()
            self.run.record_checkpoint(step, saved.path)

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
    if config.max_steps_off_policy:
        raise ValueError(
            f"max_steps_off_policy={config.max_steps_off_policy}: the sync loop "
            "samples every step from the current weights; train with the async loop "
            "(train_async, or train(config, mode='async')), or set it to 0"
        )
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
        started = time.perf_counter()
        sampler = client.save_weights_and_get_sampling_client()
        groups = _sample_groups(loop, sampler, step)
        rounds, refill_started = 0, time.perf_counter()
        while loop.needs_more(groups, rounds):  # dynamic sampling: another batch
            rounds += 1
            groups += _sample_groups(loop, sampler, step, rounds)
        sampled = loop.sampled(started, refill_started, rounds)
        outcome = train_on_groups(config, client, loop.reference, groups)
        loop.finish_step(step, groups, outcome, rounds, sampled)
        loop.checkpoint(step)
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
    loop: _Run, sampler: Any, step: int, round_: int = 0, ahead: int = 0
) -> list[PromptGroup]:
    """One group of completions per prompt of ``step``'s batch ``round_``, sampled
    at once.

    ``asyncio.gather`` runs one rollout per prompt concurrently and keeps the
    input order, so the groups line up with the batch.
    """
    config = loop.config
    batch = loop.batch(step, round_, ahead)
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
    engine batches them into one generation). The rest of the step is the sync
    loop's (:func:`grpo_helpers.step.train_on_groups`, which submits
    ``forward_backward`` and ``optim_step`` before waiting on either), run in a
    worker thread. With ``config.max_steps_off_policy = 1`` the loop is one step
    off-policy: step k+1 is sampled while step k trains, from the weights before
    step k's update, and its Datums are scored at those weights too (the gap from
    staleness apart from the sampler's numerics: ``step_math.staleness_metrics``).
    A resumed run samples its first step from the weights it resumed at. Same
    arguments and result as :func:`train_sync`. In a notebook:
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
    steps = list(loop.steps())
    in_flight: asyncio.Task | None = None  # the next step, sampled meanwhile
    behind: Any = None  # a TrainingClient at the in-flight step's sampler's weights
    for k, step in enumerate(steps):
        if in_flight is None:  # on-policy: sample from the current weights
            sampler = await client.save_weights_and_get_sampling_client_async()
            groups, rounds, sampled = await _sample_step_async(loop, sampler, step)
            staleness, at_sampler = 0, None
        else:  # sampled while the last step trained, from the weights before it
            groups, rounds, sampled = await in_flight
            staleness, at_sampler = config.max_steps_off_policy, behind
        in_flight, saved = None, None
        if config.max_steps_off_policy and k + 1 < len(steps):
            # the next step samples from these weights while this step trains
            saved = await client.save_state_async(
                f"sampler-weights-{step % 2}", overwrite=True
            )
            sampler = await client.save_weights_and_get_sampling_client_async()
            in_flight = asyncio.create_task(
                _sample_step_async(loop, sampler, steps[k + 1], 1 + rounds)
            )
        # The step after sampling is the sync loop's, in a worker thread: the
        # event loop stays free (for the next step's sampling, when it is in flight).
        outcome = await asyncio.to_thread(
            train_on_groups,
            config,
            client,
            loop.reference,
            groups,
            at_sampler,
            staleness,
        )
        if saved is not None:  # the next step's Datums are scored at those weights
            behind = None  # its adapter goes before the next one is made
            behind = await _training_client_at(loop, (await saved).path)
        loop.finish_step(step, groups, outcome, rounds, sampled)
        await asyncio.to_thread(loop.checkpoint, step)
    future = await client.save_weights_for_sampler_async(name=config.weights_name)
    return loop.finish((await future).path)


async def _sample_step_async(
    loop: _Run, sampler: Any, step: int, ahead: int = 0
) -> tuple[list[PromptGroup], int, dict[str, float]]:
    """A step's groups, every prompt at once, with dynamic sampling's extra batches:
    (the groups, the extra batches, when sampling started and ended); ``ahead``:
    the batches the step before draws (:meth:`_Run.batch`)."""
    started = time.perf_counter()
    groups = await _sample_groups_async(loop, sampler, step, 0, ahead)
    rounds, refill_started = 0, time.perf_counter()
    while loop.needs_more(groups, rounds):  # dynamic sampling: another batch
        rounds += 1
        groups += await _sample_groups_async(loop, sampler, step, rounds, ahead)
    return groups, rounds, loop.sampled(started, refill_started, rounds)


async def _training_client_at(loop: _Run, path: str) -> Any:
    """A new TrainingClient at the weights saved in ``path`` (``save_state``),
    through the client API, so on any engine (the last one's adapter is freed when
    it is dropped)."""
    return await loop.service.create_training_client_from_state_async(path)


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
