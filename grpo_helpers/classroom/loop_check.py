"""The learner's whole GRPO loop, held against ``training.train_sync`` step by step.

Notebook 10 asks the learner to write ``train_loop(service, run_config, train_rows)``,
the sync loop of the demo scripts, from PyTRIO's client API and the pieces written
in notebooks 02-05. :func:`train_loop_check` runs it on the check's small run
(:func:`check_config`: the tiny random model, three steps), or on it with
``mask_truncated=True`` for exercise 3 (the tiny model never stops before
``max_tokens``, so every completion is cut off: none is sent, every reward still
counts), beside ``train_sync`` on the same run, through a recording service that
passes every call on to the local engine and logs what the engine received. While
the learner's loop runs, the functions it is compared with (:data:`FORBIDDEN`)
raise, saying so; the hidden grader forbids the same.

Both loops start from the same LoRA initialisation (the run's seed), so from the
same prompts, seeds and weights they sample the same completions. The check
compares them step by step, **by layer, in the order the data flows**, and the
first layer that differs is the hint (never a wanted value):

1. the samples: for each ``sample`` call, keyed by its prompt tokens (so the order
   in which a loop visits the prompts does not matter), its parameters (the seed is
   the prompt's own ``derive_seed(seed, step, i)``, ``i`` its place in the run's
   batch), the sampler's weights (a sampler saved before the last update is a
   stale policy) and the completions returned;
2. the rewards: the step's ``reward_mean``, and within each group sent, whether
   its advantages follow the run's rewards (equal rewards, equal advantages; a
   better completion, a larger one): otherwise the reward is not the run's;
3. the advantages: each group's against ``train_sync``'s (a factor: the wrong
   ``advantage_scale``; a minus: the wrong sign);
4. the Datums of the step, as a multiset (their order does not change the summed
   loss): which completions are sent (degenerate groups, ``mask_truncated``),
   their tokens, logprobs and advantages;
5. the updates: the loss, one ``optim_step`` per step with ``AdamParams``, the
   weights after it (read through the client API, as the logprobs a ``forward``
   gives on :data:`PROBE`; the start, as the training client's arguments).
   Several ``forward_backward`` calls before one ``optim_step`` are one update
   (the loss is a sum), but summed in another order: the weights
   differ in float32's last bits and a sampled token can flip a step later; the
   hint then says so (:data:`SPLIT_UPDATE`) and asks for one call.

How the loop waits does not matter: every ``sample`` call runs to its end when it
is submitted, so sampling every prompt before the first ``.result()`` gets the same
completions as one at a time (the engine batches requests in flight together, and
batched decoding can flip a token: notebook 06). Samplers from
``save_weights_and_get_sampling_client()`` and from ``save_weights_for_sampler``
then ``create_sampling_client(model_path=...)`` are recorded alike. Last, the
loop's metrics (one dict per step) are compared with ``train_sync``'s on
:data:`METRIC_KEYS`.

The module is longer than most (about 820 lines) and stays whole on purpose: the
recorder, ``train_sync``'s groups and the layered comparison are one protocol
(what the recorder logs is what each layer reads), and each changes with the others.

``tests/classroom/test_loop_check.py`` holds the right loops that pass and the
wrong loops that fail (``tests/helpers/wrong_loops.py``), each with its own hint,
here and in the hidden grader (``notebooks/solutions/10_grpo_whole.py``).

Introduced in: 10_grpo_whole.ipynb
"""

from __future__ import annotations

import inspect
import math
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np

from grpo_helpers.classroom.self_checks import STUB_HINT, run_check
from grpo_helpers.config import GRPOConfig

__all__ = ["CHECK_RUN", "METRIC_KEYS", "check_config"]
__all__ += ["FORBIDDEN", "same_number", "train_loop_check"]

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
#: What the exercise rules out: the functions the check compares your loop with
#: (notebook 10's "Do not call"; the hidden grader forbids the same).
FORBIDDEN = (
    "grpo_helpers.training.train_sync",
    "grpo_helpers.training.train_async",
    "grpo_helpers.training.train",
    "grpo_helpers.step_math.build_step_datums",
    "grpo_helpers.rollout.run_rollout_group",
    "grpo_helpers.rollout.samples_from_response",
)
#: The weights after an update are compared through the client API: the logprobs a
#: ``forward`` gives on :data:`PROBE` agree to float32's reach of the same sums.
PROBE_TOLERANCE = 1e-5
#: The text scored after every update (its tokens after the first).
PROBE = "Q: Ann has 3 apples and buys 4 more. How many now?\nA: 3 + 4 = 7. \\boxed{7}"
#: The sampling parameters compared, beside the seed.
PARAMS = ("max_tokens", "temperature", "top_p", "top_k", "stop")


def check_config(run_dir: str | Path, **changes: Any) -> GRPOConfig:
    """The check's run (:data:`CHECK_RUN`, with ``changes``), with its run directory."""
    return GRPOConfig(
        **(CHECK_RUN | changes),
        run_dir=str(run_dir),
        weights_name="loop-check-reference",
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
class _Sample:
    """One ``sample`` call: what was asked, of which weights, and what came back."""

    prompt: tuple[int, ...]
    num_samples: Any
    params: dict[str, Any]
    version: int  # updates before the sampler's weights were saved
    updates: int  # updates before this call
    made_at: int  # sample calls before the sampler was made
    completions: list[tuple[int, ...]]
    texts: list[str]
    truncated: list[bool]


@dataclass
class _Update:
    """One ``optim_step``: the Datums sent since the last one, and the weights after."""

    datums: list[Any]
    probe: Any  # the logprobs of PROBE after it
    adam: Any
    samples: int  # sample calls before it
    calls: int = 1  # forward_backward calls it summed


@dataclass
class _Log:
    """Everything one loop sent to the engine."""

    clients: int = 0
    client_call: dict[str, Any] = field(default_factory=dict)  # its arguments
    tokenizer: Any = None
    probe: Any = None  # PROBE as a Datum, for this tokenizer
    samples: list[_Sample] = field(default_factory=list)
    sent: list[tuple[int, Any]] = field(default_factory=list)  # (samples, Datum)
    loss_fns: set[str] = field(default_factory=set)
    pending: list[Any] = field(default_factory=list)
    pending_calls: int = 0
    updates: list[_Update] = field(default_factory=list)
    saved: dict[str, int] = field(default_factory=dict)  # sampler path -> version


class _Done:
    """A future that is already done (the recorder waited on the engine)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def result(self, timeout: float | None = None) -> Any:
        return self._value

    def done(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:  # e.g. a SaveWeights response's path
        return getattr(self._value, name)


#: What the check says when a loop split an update into several forward_backward
#: calls and a later step's completions then differ.
SPLIT_UPDATE = (
    "the completions differ from train_sync's after an update your loop split into "
    "{calls} forward_backward calls: the gradients add up to the same sum (the loss "
    "is a sum), but in another order, so the weights differ in float32's last bits "
    "and a sampled token flipped. The same algorithm, not the same computation: "
    "this check compares completions exactly, so send each step's Datums in one "
    "forward_backward"
)
#: What the check says to a loop written with the engine's async calls.
SYNC_ONLY = (
    "this check records the sync calls: write the loop with sample(...), "
    "forward_backward(...), optim_step(...) and .result() (notebook 06 makes them "
    "concurrent)"
)


def _bound(args: tuple, kwargs: dict, names: tuple[str, ...]) -> dict[str, Any]:
    """``kwargs`` with the positional ``args`` named by ``names``."""
    return dict(zip(names, args, strict=False)) | kwargs


class _Sampler:
    def __init__(self, inner: Any, log: _Log, version: int) -> None:
        self._inner, self._log, self._version = inner, log, version
        self._made_at = len(log.samples)

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        call = _bound(args, kwargs, ("prompt", "num_samples", "sampling_params"))
        # run to the end now: what the loop waits on, and when, changes nothing
        response = self._inner.sample(*args, **kwargs).result()
        prompt: Any = call.get("prompt")
        params = call.get("sampling_params")
        sequences = list(getattr(response, "sequences", []))
        self._log.samples.append(
            _Sample(
                prompt=tuple(prompt.to_ints()) if hasattr(prompt, "to_ints") else (),
                num_samples=call.get("num_samples", 1),
                params={k: getattr(params, k, None) for k in ("seed", *PARAMS)},
                version=self._version,
                updates=len(self._log.updates),
                made_at=self._made_at,
                completions=[tuple(s.tokens) for s in sequences],
                texts=[s.text or "" for s in sequences],
                truncated=[s.stop_reason == "length" for s in sequences],
            )
        )
        return _Done(response)

    async def sample_async(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(SYNC_ONLY)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _probe_datum(tokenizer: Any) -> Any:
    """:data:`PROBE` as a Datum (its tokens after the first, scored)."""
    from grpo_helpers.datum import RolloutSample, build_grpo_datum

    tokens = list(tokenizer.encode(PROBE, add_special_tokens=False))
    sample = RolloutSample(tokens[1:], [0.0] * (len(tokens) - 1), PROBE, 0.0, 0.0)
    return build_grpo_datum(tokens[:1], sample)


def _probe(client: Any, probe: Any) -> Any:
    """What the client's weights say on the probe Datum: its logprobs, through the
    client API (``forward``, no gradient), so on any engine."""
    out = client.forward([probe], loss_fn="importance_sampling").result()
    return np.asarray(out.loss_fn_outputs[0]["logprobs"].tolist(), dtype=float)


class _Trainer:
    def __init__(self, inner: Any, log: _Log) -> None:
        self._inner, self._log = inner, log

    def forward_backward(self, *args: Any, **kwargs: Any) -> Any:
        call = _bound(args, kwargs, ("data", "loss_fn", "loss_fn_config"))
        data = list(call.get("data", []))
        log = self._log
        log.sent += [(len(log.samples), d) for d in data]
        log.pending += data
        log.pending_calls += 1
        log.loss_fns.add(str(call.get("loss_fn", "cross_entropy")))
        return self._inner.forward_backward(*args, **kwargs)

    def optim_step(self, *args: Any, **kwargs: Any) -> Any:
        result = self._inner.optim_step(*args, **kwargs).result()
        log = self._log
        adam = _bound(args, kwargs, ("adam_params",)).get("adam_params")
        log.updates.append(
            _Update(
                log.pending,
                _probe(self._inner, log.probe),
                adam,
                len(log.samples),
                log.pending_calls,
            )
        )
        log.pending, log.pending_calls = [], 0
        return _Done(result)

    def save_weights_and_get_sampling_client(self, *args: Any, **kwargs: Any) -> Any:
        inner = self._inner.save_weights_and_get_sampling_client(*args, **kwargs)
        return _Sampler(inner, self._log, len(self._log.updates))

    def save_weights_for_sampler(self, *args: Any, **kwargs: Any) -> Any:
        response = self._inner.save_weights_for_sampler(*args, **kwargs).result()
        self._log.saved[response.path] = len(self._log.updates)
        return _Done(response)

    def create_sampling_client(self, model_path: str) -> Any:
        inner = self._inner.create_sampling_client(model_path)
        return _Sampler(inner, self._log, self._log.saved.get(model_path, -1))

    def __getattr__(self, name: str) -> Any:
        if name.endswith("_async"):  # forward_backward_async, optim_step_async...
            raise RuntimeError(SYNC_ONLY)
        return getattr(self._inner, name)


class _Service:
    def __init__(self, inner: Any, log: _Log) -> None:
        self._inner, self._log = inner, log

    def create_lora_training_client(self, *args: Any, **kwargs: Any) -> Any:
        log = self._log
        log.clients += 1
        inner = self._inner.create_lora_training_client(*args, **kwargs)
        if log.clients == 1:
            call = inspect.signature(self._inner.create_lora_training_client).bind(
                *args, **kwargs
            )
            call.apply_defaults()
            log.client_call = dict(call.arguments)
            log.tokenizer = inner.get_tokenizer()
            log.probe = _probe_datum(log.tokenizer)
        return _Trainer(inner, log)

    def create_sampling_client(self, *args: Any, **kwargs: Any) -> Any:
        path = _bound(args, kwargs, ("base_model", "model_path")).get("model_path")
        inner = self._inner.create_sampling_client(*args, **kwargs)
        version = self._log.saved.get(path, -1) if path is not None else -1
        return _Sampler(inner, self._log, version)

    def __getattr__(self, name: str) -> Any:
        if name.endswith("_async"):
            raise RuntimeError(SYNC_ONLY)
        return getattr(self._inner, name)


# ----------------------------------------------------------------------------------
# What train_sync did, group by group
# ----------------------------------------------------------------------------------


@dataclass
class _Group:
    """One prompt's group in ``train_sync``'s run: the run's rewards and advantages."""

    place: int  # the prompt's place in the step's batch (data.batch_indices)
    sample: _Sample
    rewards: list[float]
    advantages: list[float]
    degenerate: bool


@dataclass
class _Reference:
    """``train_sync``'s run of one case: what it sent, and its groups per step."""

    config: GRPOConfig
    log: _Log
    metrics: list[dict[str, Any]]
    groups: list[list[_Group]]


def _values(datum: Any, key: str) -> np.ndarray:
    return np.asarray(datum.loss_fn_inputs[key].tolist(), dtype=float)


def _tokens(datum: Any) -> tuple:
    """A Datum's input and target tokens: which completion it sends."""
    targets = datum.loss_fn_inputs["target_tokens"].tolist()
    return tuple(datum.model_input.to_ints()), tuple(int(t) for t in targets)


def _same_datum(mine: Any, want: Any) -> bool:
    """The same tokens, and every loss input equal to float32's reach (two loops
    whose sums differ in their order differ in the last bits)."""
    if _tokens(mine) != _tokens(want) or set(mine.loss_fn_inputs) != set(
        want.loss_fn_inputs
    ):
        return False
    for key in want.loss_fn_inputs:
        got, wanted = _values(mine, key), _values(want, key)
        if got.shape != wanted.shape or not np.allclose(got, wanted, atol=1e-6):
            return False
    return True


def _same_datums(mine: list[Any], want: list[Any]) -> bool:
    """The same Datums as a multiset: their order does not change the summed loss."""
    if len(mine) != len(want):
        return False
    return all(
        _same_datum(a, b)
        for a, b in zip(
            sorted(mine, key=_tokens), sorted(want, key=_tokens), strict=True
        )
    )


def _step_of(samples_before: int) -> int:
    """The step a Datum or an update belongs to: that of the last sample before it."""
    return max(samples_before - 1, 0) // CHECK_RUN["batch_size"]


@cache
def _reference(case: tuple[tuple[str, Any], ...]) -> _Reference:
    """``train_sync`` on one case, through the recorder (once per process)."""
    from grpo_helpers import advantages, data, prompts, rewards, training

    with tempfile.TemporaryDirectory(prefix="loop-check-") as folder:
        config = check_config(Path(folder) / "reference", **dict(case))
        log = _Log()
        result = training.train_sync(config, _Service(_service(), log), progress=False)
    metrics = result.metrics.to_dict("records")
    rows = data.load_split(config, "train")
    reward_fn = rewards.get_reward_fn(config.reward)
    batch, groups = config.batch_size, []
    for step in range(config.steps):
        indices = data.batch_indices(len(rows), step, batch, all_data=False)
        golds = {
            tuple(prompts.build_prompt(log.tokenizer, rows[i]["question"])): (
                place,
                data.extract_gsm8k_answer(rows[i]["answer"]),
            )
            for place, i in enumerate(indices)
        }
        step_groups = []
        for sample in log.samples[step * batch : (step + 1) * batch]:
            place, gold = golds[sample.prompt]
            got = [float(reward_fn(text, gold)) for text in sample.texts]
            adv = advantages.group_advantages(got, config.advantage_scale)
            step_groups.append(
                _Group(place, sample, got, list(adv), advantages.is_degenerate(got))
            )
        groups.append(step_groups)
    return _Reference(config, log, metrics, groups)


# ----------------------------------------------------------------------------------
# Where the two loops part, layer by layer
# ----------------------------------------------------------------------------------


def _samples_hint(step: int, got: list[_Sample], ref: _Reference) -> str:
    """Layer 1: ``""`` or what differs in the step's ``sample`` calls."""
    batch = ref.config.batch_size
    if len(got) < batch:
        return (
            f"your loop sampled {len(got)} prompts where train_sync samples {batch}: "
            "one sample call per prompt of the step's batch, with "
            "num_samples=run_config.group_size"
        )
    for sample in got:
        if sample.version < sample.updates:
            if sample.made_at // batch == step:  # the step's own sampler
                return (
                    "your loop updated the weights in the middle of the step, then "
                    "sampled again: one optim_step per step, after all of its groups"
                )
            return (
                "your loop sampled from a SamplingClient saved before the latest "
                "update (a stale policy): save one from the current weights at the "
                "start of every step"
            )
    by_prompt = {s.prompt: s for s in got}
    if len(by_prompt) < len(got):
        return "your loop sampled the same prompt twice in one step"
    for group in ref.groups[step]:
        want, i = group.sample, group.place
        mine = by_prompt.get(want.prompt)
        if mine is None:
            return (
                "your loop sampled a prompt train_sync does not sample in this step: "
                "the step's rows are data.batch_indices(len(train_rows), step, "
                "run_config.batch_size, all_data=False), each prompt "
                'prompts.build_prompt(tokenizer, row["question"])'
            )
        if mine.num_samples != want.num_samples:
            return f"prompt {i} was sampled with num_samples != run_config.group_size"
        if mine.params["seed"] != want.params["seed"]:
            return (
                f"prompt {i}'s sampling seed is not its own: "
                "step_math.derive_seed(run_config.seed, step, i), i the prompt's "
                "place in data.batch_indices' order (whatever order you visit them)"
            )
        differ = [k for k in PARAMS if mine.params[k] != want.params[k]]
        if differ:
            return (
                f"prompt {i}'s sampling params differ in {', '.join(differ)}: "
                "rollout.make_sampling_params(tokenizer, run_config.max_tokens, "
                "run_config.temperature, run_config.top_p, seed=...)"
            )
        if mine.completions != want.completions or mine.version < 0:
            return (
                f"prompt {i}'s completions differ from train_sync's with the same "
                "prompt and params: sample from a sampler saved from the current "
                "weights"
            )
    return ""


def _advantage(datum: Any, prompt_length: int) -> float | None:
    """The one advantage a Datum gives its completion's tokens (None: several)."""
    values = _values(datum, "advantages")[prompt_length - 1 :]
    if len(values) and np.allclose(values, values[0], atol=1e-9):
        return float(values[0])
    return None


def _sent_by_group(
    step: int, sent: list[Any], ref: _Reference
) -> tuple[dict[int, list[tuple[int, Any]]], str]:
    """Each Datum of the step matched to its completion: ``{group: [(j, Datum)]}``,
    or a hint when a Datum is not ``prompt + completion[:-1]`` of one."""
    where: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for g, group in enumerate(ref.groups[step]):
        prompt = group.sample.prompt
        for j, completion in enumerate(group.sample.completions):
            where.setdefault(prompt + completion[:-1], []).append((g, j))
    matched: dict[int, list[tuple[int, Any]]] = {}
    for datum in sent:
        try:
            tokens = tuple(datum.model_input.to_ints())
            _values(datum, "advantages"), _values(datum, "logprobs")
            targets = tuple(datum.loss_fn_inputs["target_tokens"].tolist())
        except (AttributeError, KeyError, TypeError):
            return {}, (
                "a Datum is not a pytrio.Datum with target_tokens, logprobs, advantages"
            )
        places = where.get(tokens, [])
        if places:
            g, j = places[0]
            group = ref.groups[step][g]
            want = group.sample.completions[j]  # the prompt's targets are unused
        if not places or targets[len(group.sample.prompt) - 1 :] != want:
            return {}, (
                "a Datum is not prompt + completion[:-1] of a completion sampled in "
                "this step, with the targets shifted by one (notebook 04)"
            )
        matched.setdefault(g, []).append((j, datum))
    return matched, ""


def _groups_hint(step: int, sent: list[Any], ref: _Reference, rows: Any) -> str:
    """Layers 2-4: ``""`` or what differs in the rewards, advantages and Datums."""
    if rows is not None:
        mine, want = rows[step].get("reward_mean"), ref.metrics[step]["reward_mean"]
        if not same_number(mine, want):
            return (
                "reward_mean is not the mean of the run's rewards over the step's "
                f"completions, sent or not: the run's reward is {ref.config.reward!r}"
                ", rewards.get_reward_fn(run_config.reward)(text, gold)"
            )
    matched, hint = _sent_by_group(step, sent, ref)
    if hint:
        return hint
    wrong_reward = (
        "the advantages of prompt {i}'s group do not follow the run's rewards "
        "(equal rewards give equal advantages, a better completion a larger one): "
        f"the reward is rewards.get_reward_fn(run_config.reward), here "
        f"{ref.config.reward!r}"
    )
    scales = {}
    for g, pairs in matched.items():
        group = ref.groups[step][g]
        prompt_length = len(group.sample.prompt)
        each = [_advantage(d, prompt_length) for _, d in pairs]
        if any(a is None for a in each):
            return (
                f"a Datum of prompt {group.place}'s group gives its completion's "
                "tokens different advantages: one advantage per completion, 0 over "
                "the prompt (datum.build_grpo_datum)"
            )
        want = np.array([group.advantages[j] for j, _ in pairs])
        got = np.array(each, dtype=float)
        if group.degenerate:
            if np.any(np.abs(got) > 1e-9):
                return wrong_reward.format(i=group.place)
            continue
        norm = float(want @ want)
        scale = float(got @ want) / norm if norm > 0 else 1.0
        if not np.allclose(got, scale * want, atol=1e-6):
            return wrong_reward.format(i=group.place)
        scales[group.place] = scale
    for place, scale in sorted(scales.items()):
        if scale < 0:
            return f"the advantages of prompt {place}'s group have the wrong sign"
        if not math.isclose(scale, 1.0, rel_tol=1e-5):
            return (
                f"the advantages of prompt {place}'s group differ from train_sync's "
                f"by a factor: this run's advantage_scale is "
                f"{ref.config.advantage_scale!r} "
                "(advantages.group_advantages(rewards, run_config.advantage_scale))"
            )
    return _datums_hint(step, matched, ref)


def _datums_hint(step: int, matched: dict, ref: _Reference) -> str:
    """Layer 4: ``""`` or which completions are sent, and what each Datum holds."""
    masked = ref.config.mask_truncated
    for g, group in enumerate(ref.groups[step]):
        mine = Counter(j for j, _ in matched.get(g, []))
        want = Counter(
            j
            for j in range(len(group.sample.completions))
            if not group.degenerate and not (masked and group.sample.truncated[j])
        )
        if mine == want:
            continue
        i = group.place
        if group.degenerate:
            return (
                f"prompt {i}'s group is degenerate (every reward equal, so every "
                "advantage 0) and was sent; skip it"
            )
        extra, missing = mine - want, want - mine
        cut = group.sample.truncated
        if masked and any(cut[j] for j in extra):
            return (
                f"a completion of prompt {i}'s group cut off at max_tokens "
                "(stop_reason 'length') is sent: run_config.mask_truncated leaves it "
                "out of the Datums, its reward still in the group's mean"
            )
        if not masked and any(cut[j] for j in missing) and any(mine.values()):
            return (
                f"a completion of prompt {i}'s group cut off at max_tokens is left "
                "out: run_config.mask_truncated is False in this run"
            )
        if not mine:
            return (
                f"prompt {i}'s group sends no Datums where train_sync sends "
                f"{sum(want.values())}: its rewards are not all equal"
            )
        return (
            f"prompt {i}'s group sends {sum(mine.values())} Datums where train_sync "
            f"sends {sum(want.values())}: one per completion"
        )
    reference = {}
    for at, datum in ref.log.sent:
        if _step_of(at) == step:
            reference[tuple(datum.model_input.to_ints())] = datum
    for pairs in matched.values():
        for _, datum in pairs:
            want = reference[tuple(datum.model_input.to_ints())]
            got, wanted = _values(datum, "logprobs"), _values(want, "logprobs")
            if got.shape != wanted.shape or not np.allclose(got, wanted, atol=1e-6):
                return (
                    "a Datum's logprobs are not the sampler's, at the right positions"
                )
            if not _same_datum(datum, want):
                return (
                    "a Datum differs from train_sync's in its advantages or inputs: "
                    "datum.build_grpo_datum(prompt_tokens, sample)"
                )
    return ""


def _updates_hint(step: int, got: list[_Update], ref: _Reference, log: _Log) -> str:
    """Layer 5: ``""`` or what differs in the step's updates."""
    want = [u for u in ref.log.updates if _step_of(u.samples) == step]
    if len(got) > len(want):
        if not want:
            return "train_sync makes no update in this step; your loop did"
        return (
            f"{len(got)} optim_step calls where train_sync makes one: one optim_step "
            "per step, after every group of the step"
        )
    if len(got) < len(want):
        sent = any(_step_of(at) == step for at, _ in log.sent)
        if sent:
            return (
                "forward_backward was not followed by optim_step: the gradients pile "
                "up and the weights never change"
            )
        return "train_sync updates the weights here; your loop did not"
    for mine, theirs in zip(got, want, strict=True):
        if not _same_datums(mine.datums, theirs.datums):
            return "optim_step came after other Datums than train_sync's update"
        if mine.adam != theirs.adam:
            return "optim_step did not get run_config.adam_params"
        if not np.allclose(mine.probe, theirs.probe, rtol=0, atol=PROBE_TOLERANCE):
            return (
                "the same Datums, but the weights after optim_step differ from "
                "train_sync's: forward_backward over them, then "
                "optim_step(run_config.adam_params)?"
            )
    return ""


def same_number(value: Any, want: Any) -> bool:
    """Whether a metric the loop returned is ``want`` to float's reach of the same
    sums (not a number: no)."""
    try:
        return math.isclose(float(value), float(want), rel_tol=1e-6, abs_tol=1e-9)
    except (TypeError, ValueError):
        return False


def _rows(history: Any, steps: int) -> list[dict] | None:
    """The loop's metrics, when they are one dict per step; else None."""
    if not isinstance(history, (list, tuple)) or len(history) != steps:
        return None
    return list(history) if all(isinstance(r, dict) for r in history) else None


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
                float(row[key])
            except (TypeError, ValueError):
                return f"step {step}: {key} is not a number"
            if not same_number(row[key], want[key]):
                return f"step {step}: {key} differs from train_sync's ({_MEANING[key]})"
    return ""


_MEANING = {
    "reward_mean": "the mean reward over all the step's completions",
    "accuracy": "the share of the step's completions whose boxed answer is exactly "
    "right: rewards.grade_answer",
    "frac_degenerate": "the share of the step's groups whose rewards are all equal",
    "datums": "the number of Datums sent in the step",
}


def compare(learner: _Log, ref: _Reference, history: Any) -> str:
    """The first difference between the learner's loop and ``train_sync``, layer by
    layer and step by step, as a hint ("" when there is none)."""
    if not learner.clients:
        return "your loop made no training client (service.create_lora_training_client)"
    differ = [
        name
        for name, value in ref.log.client_call.items()
        if learner.client_call.get(name) != value
    ]
    if differ:
        return (
            "step 0: the policy starts from other LoRA weights than train_sync's (its "
            f"{', '.join(differ)} {'differs' if len(differ) == 1 else 'differ'}): "
            "create_lora_training_client("
            "base_model=run_config.model_name, rank=run_config.lora_rank, "
            "seed=run_config.seed)"
        )
    steps, batch = ref.config.steps, ref.config.batch_size
    rows = _rows(history, steps)
    for step in range(steps):
        got = learner.samples[step * batch : (step + 1) * batch]
        sent = [d for at, d in learner.sent if _step_of(at) == step]
        updates = [u for u in learner.updates if _step_of(u.samples) == step]
        if bad := _loss_fn_hint(learner) if sent else "":
            return f"step {step}: {bad}"
        hint = (
            _samples_hint(step, got, ref)
            or _groups_hint(step, sent, ref, rows)
            or _updates_hint(step, updates, ref, learner)
        )
        split = [u.calls for u in learner.updates if _step_of(u.samples) < step]
        if "completions differ" in hint and max(split, default=1) > 1:
            hint = SPLIT_UPDATE.format(calls=max(split))
        if hint:
            return f"step {step}: {hint}"
    if len(learner.samples) > steps * batch:
        return (
            f"your loop sampled {len(learner.samples)} prompts in {steps} steps, "
            f"where train_sync samples {steps * batch}"
        )
    return _metrics_hint(history, ref.metrics, steps)


def _loss_fn_hint(log: _Log) -> str:
    if log.loss_fns != {"importance_sampling"}:
        return (
            f"forward_backward got loss_fn {', '.join(sorted(log.loss_fns))}: the "
            "run's loss_fn is importance_sampling"
        )
    return ""


@contextmanager
def _forbidden() -> Iterator[None]:
    """While the learner's loop runs, each of :data:`FORBIDDEN` raises, saying so."""
    import importlib

    with ExitStack() as stack:
        for dotted in FORBIDDEN:
            module_name, _, name = dotted.rpartition(".")
            module = importlib.import_module(module_name)

            def refuse(*args: Any, _name: str = dotted, **kwargs: Any) -> Any:
                raise RuntimeError(
                    f"{_name.removeprefix('grpo_helpers.')}: the exercise asks you to "
                    "write the loop without it (the check compares your loop with it)"
                )

            stack.enter_context(patch.object(module, name, refuse))
        yield


def train_loop_check(
    exercise: str,
    train_loop: Callable[[Any, GRPOConfig, Any], Any],
    strict: bool | None = None,
    mask_truncated: bool = False,
) -> bool:
    """Check a learner's ``train_loop(service, run_config, train_rows)`` against
    ``training.train_sync``, step by step, on :func:`check_config`'s run
    (exercise 1), or on it with ``mask_truncated=True`` (exercise 3).

    Prints ``ok``, or ``not yet`` with a hint that names the first step and the
    first thing that differs (see the module's docstring).
    """
    from grpo_helpers import data

    changes = {"mask_truncated": True} if mask_truncated else {}

    def check() -> str:
        ref = _reference(tuple(sorted(changes.items())))
        with tempfile.TemporaryDirectory(prefix="loop-check-") as folder:
            config = check_config(Path(folder) / "yours", **changes)
            learner = _Log()
            rows = data.load_split(config, "train")
            with _forbidden():
                history = train_loop(_Service(_service(), learner), config, rows)
        if history is None and not learner.clients:
            return STUB_HINT
        hint = compare(learner, ref, history)
        if hint and changes:
            where = ", ".join(f"run_config.{k}={v!r}" for k, v in changes.items())
            hint = hint.replace(":", f" (with {where}):", 1)
        return hint

    return run_check(exercise, check, strict)
