"""The learner's whole GRPO loop, held against ``training.train_sync`` step by step.

Notebook 10 asks the learner to write ``train_loop(service, run_config, train_rows)``,
the sync loop of the demo scripts, from PyTRIO's client API and the pieces written
in notebooks 02-05. :func:`train_loop_check` runs it and ``train_sync`` on the same
small run (:func:`check_config`: the tiny random model, three steps), each through a
recording service that passes every call on to the local engine and logs what the
engine received:

* every ``SamplingClient`` the loop made, and whether a later ``sample`` used one
  saved before the latest update (a stale policy);
* the Datums of each ``forward_backward`` (their loss), each ``optim_step`` (its
  ``AdamParams``) and the adapter's weights after it.

Both runs start from the same LoRA initialisation (the run's seed), take the same
questions (``data.batch_indices``) and the same sampling seeds
(``step_math.derive_seed(seed, step, i)``), so on the same weights they sample the
same completions: from there every Datum and every weight must agree. The hint
names the first step and the first thing that differs, never a wanted value. The
loop's metrics (one dict per step) are compared with ``train_sync``'s
``metrics.jsonl`` on the four the exercise asks for.

``tests/classroom/test_self_checks.py`` holds the wrong loops that must fail: a sampler
made once, a degenerate group sent, std-scaled advantages, no ``optim_step``, one
``optim_step`` per group, the batch's prompts in another order.

Introduced in: 10_grpo_whole.ipynb
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from grpo_helpers.classroom.self_checks import STUB_HINT, run_check
from grpo_helpers.config import GRPOConfig

__all__ = ["CHECK_RUN", "METRIC_KEYS", "check_config", "train_loop_check"]

#: The run both loops train in the check: the tiny random model, three steps of two
#: prompts x four completions, mean-only advantages, a large learning rate (an
#: update visibly moves the weights), and a seed whose steps hold a degenerate group,
#: two groups that teach in one step, and an update before the last step's samples
#: (``tests/classroom/test_loop_check.py`` holds the seed to that).
CHECK_RUN: dict[str, Any] = {
    "base_model": "tiny-random",
    "backend": "local",
    "dataset": "arithmetic",
    "steps": 3,
    "batch_size": 2,
    "group_size": 4,
    "max_tokens": 8,
    "lora_rank": 4,
    "learning_rate": 1e-2,
    "reward": "shaped",
    "temperature": 0.8,
    "advantage_scale": "none",
    "seed": 3,
    "save_every": 0,
}
#: What each step's metrics dict must hold, compared with ``train_sync``'s.
METRIC_KEYS = ("reward_mean", "accuracy", "frac_degenerate", "datums")
#: Weights after an update agree to float32's reach of the same sums.
WEIGHT_TOLERANCE = 1e-4


def check_config(run_dir: str | Path) -> GRPOConfig:
    """The check's run (:data:`CHECK_RUN`), with its run directory."""
    return GRPOConfig(
        **CHECK_RUN, run_dir=str(run_dir), weights_name="loop-check-reference"
    )


@cache
def _service() -> Any:
    """One local engine for every check of the process (the tiny model loads once)."""
    from grpo_helpers.engines import connect

    return connect("local", run_dir=Path(tempfile.mkdtemp(prefix="loop-check-")))


# ----------------------------------------------------------------------------------
# What the engine received
# ----------------------------------------------------------------------------------


@dataclass
class _Update:
    """One ``optim_step``: the Datums sent since the last one, and the weights after."""

    datums: list[Any]
    weights: dict[str, Any]
    adam: Any
    loss_fns: set[str]


@dataclass
class _Log:
    """Everything one loop sent to the engine."""

    clients: int = 0
    client_kwargs: dict[str, Any] = field(default_factory=dict)
    start_weights: dict[str, Any] = field(default_factory=dict)
    samplers: int = 0
    # (updates at the sample, whether its sampler was made in that step, the
    # learner's step) of each sample from a sampler older than the last update
    stale: list[tuple[int, bool, int]] = field(default_factory=list)
    seeds: list[Any] = field(default_factory=list)  # each sample's seed, in order
    pending: list[Any] = field(default_factory=list)
    pending_loss_fns: set[str] = field(default_factory=set)
    updates: list[_Update] = field(default_factory=list)
    steps_of_updates: list[int] = field(default_factory=list)


class _Done:
    """A future that is already done (the recorder waited to read the weights)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def result(self, timeout: float | None = None) -> Any:
        return self._value

    def done(self) -> bool:
        return True


#: What the check says to a loop written with the engine's async calls.
SYNC_ONLY = (
    "this check records the sync calls: write the loop with sample(...), "
    "forward_backward(...), optim_step(...) and .result() (notebook 06 makes them "
    "concurrent)"
)


class _Sampler:
    def __init__(self, inner: Any, log: _Log) -> None:
        self._inner, self._log = inner, log
        self._made_after = len(log.updates)
        self._made_at = len(log.seeds)  # sample requests made before this sampler
        log.samplers += 1

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        log = self._log
        if self._made_after < len(log.updates):
            # made in the step it samples for: the weights changed within a step
            batch = CHECK_RUN["batch_size"]
            step = len(log.seeds) // batch
            log.stale.append((len(log.updates), self._made_at // batch == step, step))
        params = kwargs.get("sampling_params", args[2] if len(args) > 2 else None)
        log.seeds.append(getattr(params, "seed", None))
        return self._inner.sample(*args, **kwargs)

    async def sample_async(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(SYNC_ONLY)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Trainer:
    def __init__(self, inner: Any, log: _Log) -> None:
        self._inner, self._log = inner, log

    def forward_backward(
        self,
        data: list[Any],
        loss_fn: str = "cross_entropy",
        loss_fn_config: Any = None,
        **kwargs: Any,
    ) -> Any:
        self._log.pending.extend(data)
        self._log.pending_loss_fns.add(str(loss_fn))
        return self._inner.forward_backward(data, loss_fn, loss_fn_config, **kwargs)

    def optim_step(self, adam_params: Any) -> Any:
        result = self._inner.optim_step(adam_params).result()
        host, adapter = self._inner._host, self._inner._adapter
        weights = {k: p.detach().clone() for k, p in host.parameters(adapter).items()}
        log = self._log
        log.updates.append(
            _Update(log.pending, weights, adam_params, log.pending_loss_fns)
        )
        log.steps_of_updates.append(log.samplers - 1)
        log.pending, log.pending_loss_fns = [], set()
        return _Done(result)

    async def forward_backward_async(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(SYNC_ONLY)

    async def optim_step_async(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(SYNC_ONLY)

    async def save_weights_and_get_sampling_client_async(
        self, *args: Any, **kwargs: Any
    ) -> Any:
        raise RuntimeError(SYNC_ONLY)

    def save_weights_and_get_sampling_client(self, *args: Any, **kwargs: Any) -> Any:
        inner = self._inner.save_weights_and_get_sampling_client(*args, **kwargs)
        return _Sampler(inner, self._log)

    def create_sampling_client(self, *args: Any, **kwargs: Any) -> Any:
        return _Sampler(self._inner.create_sampling_client(*args, **kwargs), self._log)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Service:
    def __init__(self, inner: Any, log: _Log) -> None:
        self._inner, self._log = inner, log

    def create_lora_training_client(self, *args: Any, **kwargs: Any) -> Any:
        log = self._log
        log.clients += 1
        inner = self._inner.create_lora_training_client(*args, **kwargs)
        if log.clients == 1:
            host, adapter = inner._host, inner._adapter
            log.start_weights = {
                k: p.detach().clone() for k, p in host.parameters(adapter).items()
            }
        return _Trainer(inner, log)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


# ----------------------------------------------------------------------------------
# Where the two loops part
# ----------------------------------------------------------------------------------


def _values(datum: Any, key: str) -> np.ndarray:
    return np.asarray(datum.loss_fn_inputs[key].tolist(), dtype=float)


def _datum_key(datum: Any) -> tuple:
    return (
        tuple(datum.model_input.to_ints()),
        tuple(np.round(_values(datum, "advantages"), 6)),
        tuple(np.round(_values(datum, "logprobs"), 5)),
    )


def _datum_hint(got: Any, want: Any) -> str:
    """ "" or what differs between one Datum of each loop."""
    try:
        tokens = got.model_input.to_ints()
        targets = got.loss_fn_inputs["target_tokens"].tolist()
        logprobs, adv = _values(got, "logprobs"), _values(got, "advantages")
    except (AttributeError, KeyError, TypeError):
        return "a Datum is not a pytrio.Datum with target_tokens, logprobs, advantages"
    if tokens != want.model_input.to_ints() or list(targets) != list(
        want.loss_fn_inputs["target_tokens"].tolist()
    ):
        return (
            "a Datum's tokens differ from train_sync's: the same questions "
            "(data.batch_indices), sampling seeds (step_math.derive_seed(seed, "
            "step, i)) and sampling params (rollout.make_sampling_params with the "
            "run's max_tokens, temperature and top_p)? and prompt + completion[:-1] "
            "aligned with its targets (notebook 04)?"
        )
    if logprobs.shape != _values(want, "logprobs").shape or not np.allclose(
        logprobs, _values(want, "logprobs"), atol=1e-6
    ):
        return "a Datum's logprobs are not the sampler's, at the right positions"
    wanted = _values(want, "advantages")
    if adv.shape == wanted.shape and np.allclose(adv, wanted, atol=1e-6):
        return ""
    if adv.shape == wanted.shape and np.allclose(adv, -wanted, atol=1e-6):
        return "the advantages have the wrong sign"
    return (
        "the advantages differ from train_sync's: this run's advantage_scale is "
        f"{CHECK_RUN['advantage_scale']!r}, reward minus the group's mean "
        "(group_advantages(rewards, run_config.advantage_scale))"
    )


def _rel_err(x: Any, y: Any) -> float:
    """``|x - y| / |y|`` of two tensors (0 when both are 0)."""
    scale = float(y.norm())
    gap = float((x - y).norm())
    return gap / scale if scale > 0 else gap


def _update_hint(step: int, got: _Update, want: _Update) -> str:
    """ "" or the first thing that differs in one update."""
    if got.loss_fns != want.loss_fns:
        return (
            f"step {step}: forward_backward got loss_fn "
            f"{', '.join(sorted(got.loss_fns)) or 'none'}: the run's loss_fn is "
            "importance_sampling"
        )
    n, m = len(got.datums), len(want.datums)
    if n > m:
        extra = [
            d for d in got.datums if _datum_key(d) not in map(_datum_key, want.datums)
        ]
        if extra and all(not _values(d, "advantages").any() for d in extra):
            return (
                f"step {step}: {n} Datums where train_sync sends {m}: a degenerate "
                "group (every reward equal, so every advantage 0) was sent; skip it"
            )
        return f"step {step}: {n} Datums where train_sync sends {m}"
    if n < m:
        if [_datum_key(d) for d in got.datums] == [
            _datum_key(d) for d in want.datums[:n]
        ]:
            return (
                f"step {step}: your loop called optim_step after {n} of the step's "
                f"{m} Datums: one optim_step per step, after every group of the step"
            )
        return f"step {step}: {n} Datums where train_sync sends {m}"
    hints = [_datum_hint(g, w) for g, w in zip(got.datums, want.datums, strict=True)]
    hint = next((h for h in hints if h), "")
    if hint:
        if sorted(map(_datum_key, got.datums)) == sorted(map(_datum_key, want.datums)):
            return (
                f"step {step}: the Datums are train_sync's, in another order: take "
                "the step's prompts in the run's order (data.batch_indices) and each "
                "group's completions as sampled"
            )
        return f"step {step}: {hint}"
    if got.adam != want.adam:
        return f"step {step}: optim_step did not get run_config.adam_params"
    worst = max(_rel_err(got.weights[k], want.weights[k]) for k in want.weights)
    if not worst <= WEIGHT_TOLERANCE:
        return (
            f"step {step}: the same Datums, but the weights after optim_step "
            "differ from train_sync's: one forward_backward pass over them, then "
            "optim_step(run_config.adam_params)?"
        )
    return ""


def _metrics_hint(history: Any, reference: Any, steps: int) -> str:
    """ "" or the first step whose metrics dict differs from ``train_sync``'s."""
    if not isinstance(history, (list, tuple)) or len(history) != steps:
        return (
            f"return a list of one metrics dict per step ({steps} here), got "
            f"{type(history).__name__}"
            + (f" of {len(history)}" if isinstance(history, (list, tuple)) else "")
        )
    for step, (row, want) in enumerate(zip(history, reference, strict=True)):
        if not isinstance(row, dict):
            return f"step {step}: the metrics are a {type(row).__name__}, not a dict"
        missing = [k for k in METRIC_KEYS if k not in row]
        if missing:
            return f"step {step}: the metrics dict lacks {', '.join(missing)}"
        for key in METRIC_KEYS:
            try:
                value = float(row[key])
            except (TypeError, ValueError):
                return f"step {step}: {key} is not a number"
            if not math.isclose(value, float(want[key]), rel_tol=1e-6, abs_tol=1e-9):
                return f"step {step}: {key} differs from train_sync's ({_MEANING[key]})"
    return ""


_MEANING = {
    "reward_mean": "the mean reward over all the step's completions",
    "accuracy": "the share of the step's completions whose boxed answer is exactly "
    "right: rewards.grade_answer",
    "frac_degenerate": "the share of the step's groups whose rewards are all equal",
    "datums": "the number of Datums sent in the step",
}


def compare(learner: _Log, reference: _Log, history: Any, metrics: Any) -> str:
    """The first difference between the learner's loop and ``train_sync``, as a hint
    ("" when there is none)."""
    steps = len(metrics)
    if not learner.clients:
        return "your loop made no training client (service.create_lora_training_client)"
    same_shapes = (
        learner.start_weights.keys() == reference.start_weights.keys()
        and all(
            learner.start_weights[k].shape == w.shape
            for k, w in reference.start_weights.items()
        )
    )
    if not same_shapes or any(
        _rel_err(learner.start_weights[k], w) > WEIGHT_TOLERANCE
        for k, w in reference.start_weights.items()
    ):
        return (
            "the policy starts from other LoRA weights than train_sync's: "
            "create_lora_training_client(base_model=run_config.model_name, "
            "rank=run_config.lora_rank, seed=run_config.seed)"
        )
    if learner.stale:
        updates, same_step, step = learner.stale[0]
        if same_step:  # the step's own sampler, after an update within the step
            return (
                f"step {step}: your loop updated the weights in the middle of the "
                "step, then sampled again: one optim_step per step, after all of "
                "its groups"
            )
        done = reference.steps_of_updates
        updated = done[min(updates, len(done)) - 1] if done else 0
        return (
            f"step {updated + 1}: your loop sampled from a SamplingClient saved "
            f"before step {updated}'s update (a stale policy): save one from the "
            "current weights at the start of every step"
        )
    if learner.seeds != reference.seeds:
        k = next(
            (
                i
                for i, (a, b) in enumerate(
                    zip(learner.seeds, reference.seeds, strict=False)
                )
                if a != b
            ),
            min(len(learner.seeds), len(reference.seeds)),
        )
        batch = CHECK_RUN["batch_size"]
        return (
            f"step {k // batch}: prompt {k % batch}'s sampling seed is not "
            "train_sync's: step_math.derive_seed(run_config.seed, step, i), i the "
            "prompt's place in the step's batch"
        )
    for k, want in enumerate(reference.updates):
        step = reference.steps_of_updates[k]
        if k >= len(learner.updates):
            if learner.pending:
                return (
                    f"step {step}: forward_backward was not followed by optim_step: "
                    "the gradients pile up and the weights never change"
                )
            return (
                f"step {step}: train_sync updates the weights here; your loop did not"
            )
        hint = _update_hint(step, learner.updates[k], want)
        if hint:
            return hint
    if len(learner.updates) > len(reference.updates):
        return (
            f"your loop updated the weights {len(learner.updates)} times where "
            f"train_sync did {len(reference.updates)} times in {steps} steps: one "
            "optim_step per step, and none when every group is degenerate"
        )
    if learner.pending:
        return (
            "forward_backward at the end of the loop was never followed by optim_step"
        )
    return _metrics_hint(history, metrics, steps)


def train_loop_check(
    exercise: str,
    train_loop: Callable[[Any, GRPOConfig, Any], Any],
    strict: bool | None = None,
) -> bool:
    """Check a learner's ``train_loop(service, run_config, train_rows)`` against
    ``training.train_sync``, step by step, on :func:`check_config`'s run.

    Prints ``ok``, or ``not yet`` with a hint that names the first step and the
    first thing that differs (see the module's docstring).
    """
    from grpo_helpers import data, training

    def check() -> str:
        with tempfile.TemporaryDirectory(prefix="loop-check-") as folder:
            config = check_config(Path(folder) / "reference")
            reference = _Log()
            result = training.train_sync(
                config, _Service(_service(), reference), progress=False
            )
            metrics = result.metrics.to_dict("records")
            learner = _Log()
            rows = data.load_split(config, "train")
            history = train_loop(_Service(_service(), learner), config, rows)
        if history is None and not learner.clients:
            return STUB_HINT
        return compare(learner, reference, history, metrics)

    return run_check(exercise, check, strict)
