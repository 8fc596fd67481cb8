"""A run's settings: :class:`GRPOConfig`, each knob written once.

A knob is one field of :class:`GRPOConfig`: its type and default, and in its
metadata (:func:`knob`, :mod:`grpo_helpers.knobs`) its help text and the values it
allows. Everything else is generated from the fields:

* :meth:`GRPOConfig.validate` (every float finite, every value in its range or
  among its choices, each message naming the setting);
* the command line's flags (:func:`add_arguments`: ``--group-size`` for
  ``group_size``, its type, default, choices and help).

How each field becomes a TRL setting is the TRL wing's, keyed by the field's name
(``grpo_helpers.trl.mapping.FIELD_RULES``). Adding a knob is one field here and
its rule there. The module stays whole: a knob's rules sit in its field, and the
two config classes built of them sit together. Example::

    >>> config = GRPOConfig(group_size=8, backend="local")
    >>> config.group_size, knob_of("group_size").at_least
    (8, 2)
    >>> GRPOConfig(group_size=1, backend="local")
    Traceback (most recent call last):
    ...
    ValueError: Bad GRPO configuration: group_size must be >= 2 (GRPO compares \
completions within a group), got 1

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import argparse
from dataclasses import Field, asdict, dataclass, fields
from pathlib import Path
from typing import Any

from grpo_helpers import knobs as _knobs
from grpo_helpers.advantages import ADVANTAGE_SCALES, NORMALIZATIONS
from grpo_helpers.data import DATASETS, RUN_SPLITS
from grpo_helpers.knobs import (
    GROUPS,
    Knob,
    add_renamed,
    default_of,
    field_problems,
    knob,
    raise_problems,
)
from grpo_helpers.rewards import EARLIER_REWARDS, REWARD_FUNCTIONS
from grpo_helpers.settings import BACKENDS, DEFAULT_BASE_MODELS, SETTINGS

__all__ = [
    "EvalConfig",
    "GROUPS",
    "LOSS_FNS",
    "MODES",
    "GRPOConfig",
    "Knob",
    "add_arguments",
    "add_renamed",
    "default_of",
    "field_problems",
    "from_arguments",
    "knob",
    "knob_of",
    "knobs",
]

LOSS_FNS = ("importance_sampling", "ppo", "cispo")
#: What the loss trains (notebook 05, section 7): the model's own distribution
#: ("1") or the tempered one the completions were sampled from ("sampling").
TRAIN_TEMPERATURES = ("1", "sampling")
#: Which logprob of a sampled token the update divides by (notebook 11): the
#: sampler's at temperature 1 ("model"), the sampler's under the distribution the
#: token was drawn from ("behaviour"), or the trainer's at the sampler's weights
#: ("trainer", recomputed with ``forward``).
SAMPLER_LOGPROBS = ("model", "behaviour", "trainer")
#: Corrections of the sampler/trainer mismatch (TRL's ``vllm_importance_sampling_mode``
#: names): a token's or a sequence's weight trainer/sampler truncated at the bounds
#: (TIS) or set to 0 outside them (MIS).
IS_CORRECTIONS = (
    "none",
    "token_truncate",
    "token_mask",
    "sequence_truncate",
    "sequence_mask",
)
#: The sampler's arithmetic: the trained policy's (float32) or bfloat16 copies of
#: the merged weights (the local engine: faster, another policy).
SAMPLER_PRECISIONS = ("float32", "bfloat16")
#: One ratio per token, or GSPO's one per sequence (TRL's importance_sampling_level).
RATIO_LEVELS = ("token", "sequence")
#: Knobs that earlier runs saved and no loop reads any more: dropped on reading.
#: ``eval_limit`` ("test questions to evaluate after training") was read by none.
RETIRED_FIELDS = ("eval_limit",)
#: The two loops of :mod:`grpo_helpers.training` (a command-line choice, not a knob).
MODES = ("sync", "async")
SWANLAB_MODES = ("offline", "local", "online")


#: Titles of the command line's groups of flags.
@dataclass
class GRPOConfig:
    """Everything that defines a GRPO run; saved as ``config.json`` in its run dir.

    The defaults are the demo scripts' (``--steps 10 --batch-size 4 --group-size 4
    --max-tokens 1024 --lora-rank 32 --learning-rate 4e-5``). ``base_model=None``
    means the engine's default: SmolLM2-135M-Instruct on the local engine (its
    4-bit GGUF, dequantised: ``settings.SMOLLM2_GGUF_NOTE``), Qwen/Qwen3.5-4B on
    PyTRIO.

    Introduced in: 05_sync_training_loop.ipynb
    """

    base_model: str | None = knob(
        None,
        "the policy's base model (default: the engine's default)",
    )
    lora_rank: int = knob(
        32,
        "rank r of the LoRA adapter",
        at_least=4,
        at_most=64,
        why="PyTRIO's limit",
    )
    steps: int = knob(
        10,
        "GRPO steps",
        at_least=0,
    )
    all_data: bool = knob(
        False,
        "one pass over the train split (ignores --steps)",
    )
    limit: int | None = knob(
        None,
        "rows of the train split to use (default: all)",
        at_least=1,
    )
    batch_size: int = knob(
        4,
        "prompts per step",
        at_least=1,
    )
    group_size: int = knob(
        4,
        "completions per prompt (G)",
        at_least=2,
        why="GRPO compares completions within a group",
    )
    max_tokens: int = knob(
        1024,
        "most tokens per completion",
        at_least=1,
    )
    temperature: float = knob(
        1.0,
        "sampling temperature",
        at_least=0,
    )
    top_p: float = knob(
        1.0,
        "nucleus sampling: the smallest set of tokens with this much probability",
        above=0,
        at_most=1,
    )
    seed: int = knob(
        42,
        "seeds the LoRA initialisation, the sampling and the arithmetic problems",
    )
    learning_rate: float = knob(
        4e-5,
        "Adam's learning rate",
        above=0,
    )
    beta1: float = knob(
        0.9,
        "Adam's beta1",
        at_least=0,
        below=1,
    )
    beta2: float = knob(
        0.95,
        "Adam's beta2",
        at_least=0,
        below=1,
    )
    reward: str = knob(
        "binary",
        "the reward function (rewards.REWARD_FUNCTIONS)",
        choices=tuple(REWARD_FUNCTIONS),
        accepted=tuple(EARLIER_REWARDS),
    )
    advantage_scale: str = knob(
        "none",
        "none: reward - group mean; group: divided by the group's std too",
        choices=ADVANTAGE_SCALES,
    )
    weights_name: str = knob(
        "grpo-gsm8k",
        "the run's name: its weights and its directory runs/<weights-name>",
    )
    swanlab: bool = knob(
        False,
        "log to SwanLab (off unless asked; offline by default, no account)",
    )
    swanlab_project: str = knob(
        "trio-case",
        "SwanLab's project",
    )
    swanlab_experiment_name: str = knob(
        "grpo-gsm8k",
        "SwanLab's experiment name",
    )
    swanlab_mode: str = knob(
        "offline",
        "offline (no account) writes runs/<name>/swanlog; local adds a dashboard; "
        "online needs an account",
        choices=SWANLAB_MODES,
    )
    trackio: bool = knob(
        False,
        "log to trackio too (off unless asked; local-first: SQLite under "
        "runs/trackio, project grpo-notebooks, the run's weights-name)",
    )
    backend: str = knob(
        help="the engine: local (this machine) or pytrio (default: GRPO_BACKEND)",
        default_factory=lambda: SETTINGS.backend,
        choices=BACKENDS,
    )
    run_dir: str | None = knob(
        None,
        "the run directory (default: runs/<weights-name>)",
    )
    save_every: int = knob(
        1,
        "steps between resumable checkpoints (0: only at the end)",
        at_least=0,
    )
    dataset: str = knob(
        "gsm8k",
        "gsm8k, or arithmetic (word problems in its format a 135M model can learn)",
        choices=DATASETS,
    )
    difficulty: int = knob(
        1,
        "arithmetic problems only: 1 (one + or -), 2 or 3",
        choices=(1, 2, 3),
    )
    # The knobs of the full GRPO objective (notebook 09); the defaults are the demo
    # scripts' loop: one unclipped update per batch, no KL, a plain token sum.
    loss_fn: str = knob(
        "importance_sampling",
        "the per-token loss",
        choices=LOSS_FNS,
        group="objective",
    )
    updates_per_batch: int = knob(
        1,
        "mu: optimiser steps on each batch of samples (use with --loss-fn ppo)",
        at_least=1,
        group="objective",
    )
    clip_low: float = knob(
        0.8,
        "ppo and cispo: lower bound of the ratio",
        above=0,
        at_most=1,
        group="objective",
    )
    clip_high: float = knob(
        1.2,
        "ppo and cispo: upper bound of the ratio",
        at_least=1,
        group="objective",
    )
    kl_coef: float = knob(
        0.0,
        "beta: KL penalty to the base model, in the advantages (0: none)",
        at_least=0,
        group="objective",
    )
    measure_kl: bool = knob(
        False,
        "log the KL to the base model even when --kl-coef is 0",
        group="objective",
    )
    normalization: str = knob(
        "token_sum",
        "length normalisation of the advantages",
        choices=NORMALIZATIONS,
        group="objective",
    )
    train_temperature: str = knob(
        "1",
        "the policy the loss trains: '1', the model's own logprobs (tinker, the "
        "demo scripts); 'sampling', those of logits / temperature (TRL)",
        choices=TRAIN_TEMPERATURES,
        group="objective",
    )
    dynamic_sampling: int = knob(
        0,
        "DAPO's dynamic sampling: when fewer than --batch-size groups of a step "
        "teach, draw up to this many more batches of questions (0: off)",
        at_least=0,
        at_most=100,
        why="each batch's sampling seeds must stay apart from the next step's",
        group="objective",
    )
    max_steps_off_policy: int = knob(
        0,
        "async loop: how many updates the sampler's weights may lag the "
        "trainer's (0: each step samples from the current weights; 1: step k+1 is "
        "sampled while step k trains, from the weights before its update)",
        at_least=0,
        at_most=1,
        why="the async loop keeps at most one step in flight",
        group="objective",
    )
    # When the sampler is not the trainer (notebook 11): which logprobs the ratio
    # divides by, and the corrections of the gap between the two.
    sampler_logprobs: str = knob(
        "model",
        "the logprob the ratio divides by: 'model', the sampler's at temperature 1 "
        "(the demo scripts); 'behaviour', the sampler's under the distribution it "
        "drew from (local engine); 'trainer', recomputed by the trainer at the "
        "sampler's weights (TRL)",
        choices=SAMPLER_LOGPROBS,
        group="objective",
    )
    sampler_precision: str = knob(
        "float32",
        "the sampler's products: float32 (the trained policy) or bfloat16 (local "
        "engine: faster, another policy; the mismatch metrics show how far)",
        choices=SAMPLER_PRECISIONS,
        group="objective",
    )
    is_correction: str = knob(
        "none",
        "correct the sampler/trainer gap with a weight trainer/sampler per token "
        "or sequence: truncated at --is-clip-max (TIS) or 0 outside the bounds (MIS)",
        choices=IS_CORRECTIONS,
        group="objective",
    )
    is_clip_max: float = knob(
        3.0,
        "the correction's upper bound C (TRL's default, 3)",
        above=1,
        group="objective",
    )
    is_clip_min: float | None = knob(
        None,
        "the correction's lower bound (None: truncate none from below, mask none)",
        above=0,
        below=1,
        group="objective",
    )
    ratio_level: str = knob(
        "token",
        "token: one ratio per token; sequence: GSPO's ratio, the geometric mean "
        "of the sequence's token ratios, shared by its tokens",
        choices=RATIO_LEVELS,
        group="objective",
    )
    # Two safeguards (notebook 05): DAPO's masking of truncated completions, and
    # gradient clipping. Off by default, as in the demo scripts.
    mask_truncated: bool = knob(
        False,
        "leave completions cut off at --max-tokens out of the loss (DAPO)",
        group="objective",
    )
    grad_clip_norm: float = knob(
        0.0,
        "clip the gradient's global norm to this before Adam (0: off)",
        at_least=0,
        why="0: no clipping",
        group="objective",
    )

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming each bad field, its value and what is allowed
        (every rule is the field's :class:`Knob`)."""
        errors = field_problems(self)
        raise_problems("Bad GRPO configuration", errors or self._combination_problems())

    def _combination_problems(self) -> list[str]:
        """Values that are each allowed but not together."""
        problems = []
        if self.dynamic_sampling > 0 and self.all_data:
            problems.append(
                "dynamic_sampling draws questions past a step's own batch, and "
                "all_data runs one pass over the rows: choose one of the two"
            )
        if self.train_temperature == "sampling":
            if self.backend != "local":
                problems.append(
                    "train_temperature 'sampling' needs the local engine: PyTRIO's "
                    "losses have no temperature (it would pass the setting through "
                    "unread and train at 1); use train_temperature '1' on PyTRIO"
                )
            if self.temperature <= 0:
                problems.append(
                    "train_temperature 'sampling' divides the logits by the "
                    "sampling temperature, which is 0 (greedy): choose a "
                    "temperature > 0 or train_temperature '1'"
                )
        if self.sampler_logprobs == "behaviour" and self.backend != "local":
            problems.append(
                "sampler_logprobs 'behaviour' needs the local engine: PyTRIO's "
                "sampler has no setting for which logprob it reports; use "
                "'trainer' (recomputed through the client API)"
            )
        if self.sampler_precision != "float32" and self.backend != "local":
            problems.append(
                f"sampler_precision {self.sampler_precision!r} needs the local "
                "engine: PyTRIO's samplers are its own; use 'float32'"
            )
        if self.is_correction != "none" and self.sampler_logprobs == "trainer":
            problems.append(
                "is_correction weighs the trainer's logprobs against the "
                "sampler's, and sampler_logprobs 'trainer' replaces the sampler's "
                "by the trainer's (every weight 1): choose sampler_logprobs "
                "'model' or 'behaviour'"
            )
        if self.is_correction != "none" and self.ratio_level == "sequence":
            problems.append(
                "ratio_level 'sequence' (GSPO) weighs each sequence by its own "
                "ratio to the sampler: choose it or an is_correction, not both"
            )
        if self.is_clip_min is not None and self.is_clip_min >= self.is_clip_max:
            problems.append(
                f"is_clip_min ({self.is_clip_min}) must be below is_clip_max "
                f"({self.is_clip_max})"
            )
        return problems

    @property
    def rescores(self) -> bool:
        """Whether a step scores its Datums with the trainer (``forward``) at the
        sampler's weights before updating: for the trainer's logprobs, for a
        correction's weights, for GSPO's sequence ratio, or for a tempered loss
        whose sampler reports temperature-1 logprobs."""
        return (
            self.sampler_logprobs == "trainer"
            or self.is_correction != "none"
            or self.ratio_level == "sequence"
            or (self.loss_temperature != 1.0 and self.sampler_logprobs == "model")
        )

    @property
    def model_name(self) -> str:
        """The base model this run uses (the engine's default when not given)."""
        return self.base_model or DEFAULT_BASE_MODELS[self.backend]

    @property
    def loss_fn_config(self) -> dict[str, float] | None:
        """``loss_fn_config`` for ``forward_backward``: the clip bounds of ppo and
        cispo, and the local engine's ``temperature`` when the loss trains the
        tempered policy; None for importance_sampling at temperature 1 (nothing
        to set)."""
        values: dict[str, float] = {}
        if self.loss_fn != "importance_sampling":
            values["clip_low_threshold"] = self.clip_low
            values["clip_high_threshold"] = self.clip_high
        if self.loss_temperature != 1.0:
            values["temperature"] = self.loss_temperature
        return values or None

    @property
    def loss_temperature(self) -> float:
        """The temperature of the logprobs the loss trains: 1.0, or the sampling
        temperature with ``train_temperature='sampling'``."""
        if self.train_temperature == "sampling":
            return float(self.temperature)
        return 1.0

    @property
    def adam_params(self) -> Any:
        """The ``pytrio.AdamParams`` of every ``optim_step``: the learning rate,
        Adam's betas and ``grad_clip_norm`` (pytrio's defaults for the rest)."""
        import pytrio as trio

        return trio.AdamParams(
            learning_rate=self.learning_rate,
            beta1=self.beta1,
            beta2=self.beta2,
            grad_clip_norm=float(self.grad_clip_norm),
        )

    @property
    def needs_reference(self) -> bool:
        """Whether the loop needs the base model's logprobs (KL penalty or metric)."""
        return self.kl_coef > 0 or self.measure_kl

    @property
    def run_path(self) -> Path:
        """The run directory: ``run_dir``, or ``runs/<weights_name>``."""
        return Path(self.run_dir or Path("runs") / self.weights_name)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> GRPOConfig:
        """A config from a saved ``config.json`` (or a record's settings). A knob
        the series has retired (:data:`RETIRED_FIELDS`) is dropped; any other
        unknown name is refused."""
        values = {k: v for k, v in values.items() if k not in RETIRED_FIELDS}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"Unknown {cls.__name__} fields: {', '.join(unknown)}")
        return cls(**values)


@dataclass
class EvalConfig:
    """How a model is scored: the split, how many questions, the sampling of each
    answer; each setting written once, as :class:`GRPOConfig`'s knobs are.

    ``python -m grpo_helpers eval`` takes its flags from these fields
    (:func:`add_arguments`), the presets' evaluation parts are its fields
    (``presets.NOTEBOOK_EVAL``...), and ``results.evaluation.evaluate`` takes one
    (``config=``) or its values as keywords.

    Example::

        >>> EvalConfig(eval_questions=20).eval_max_tokens
        512
        >>> EvalConfig(eval_questions=0)
        Traceback (most recent call last):
        ...
        ValueError: Bad evaluation settings: eval_questions must be >= 1, got 0

    Introduced in: 07_evaluating_a_trained_model.ipynb
    """

    split: str = knob(
        "test",
        "the split scored: test (final, reported), validation (arithmetic only: "
        "tuning) or train",
        choices=RUN_SPLITS,
    )
    eval_questions: int = knob(
        100, "how many questions: the first N of the split", at_least=1
    )
    eval_max_tokens: int = knob(
        512, "most tokens per answer (the series' arithmetic track: 64)", at_least=1
    )
    gsm8k_questions: int = knob(
        100, "GSM8K test questions also scored (notebook 08; 0: none)", at_least=0
    )
    gsm8k_max_tokens: int = knob(
        128, "most tokens per GSM8K answer (0 with no GSM8K questions)", at_least=0
    )
    temperature: float = knob(0.0, "sampling temperature (0: greedy)", at_least=0)
    num_samples: int = knob(
        1, "answers per question (pass@k and maj@k with k > 1)", at_least=1
    )
    concurrency: int = knob(
        8, "requests in flight at once (speed only, not the score)", at_least=1
    )

    def __post_init__(self) -> None:
        raise_problems("Bad evaluation settings", field_problems(self))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The knob functions, with GRPOConfig as the config class unless told another.


def knobs(cls: type = GRPOConfig) -> list[Field]:
    """The fields of a config class that are knobs (all of :class:`GRPOConfig`'s)."""
    return _knobs.knobs(cls)


def knob_of(name_or_field: str | Field, cls: type = GRPOConfig) -> Knob:
    """The :class:`Knob` of a field, by name or by the field itself."""
    return _knobs.knob_of(name_or_field, cls)


def add_arguments(
    parser: argparse.ArgumentParser, cls: type = GRPOConfig, **options: Any
) -> None:
    """A flag per knob of ``cls`` (``knobs.add_arguments``).

    Example:
        >>> p = argparse.ArgumentParser()
        >>> add_arguments(p)
        >>> p.parse_args(["--group-size", "8", "--mask-truncated"]).group_size
        8
    """
    _knobs.add_arguments(parser, cls, **options)


def from_arguments(args: argparse.Namespace, cls: type = GRPOConfig) -> Any:
    """The config that parsed flags describe (the knobs among ``args``)."""
    return _knobs.from_arguments(args, cls)
