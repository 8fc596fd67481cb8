"""A run's settings: :class:`GRPOConfig`, saved as ``config.json`` in its run dir.

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from grpo_helpers.advantages import ADVANTAGE_SCALES, NORMALIZATIONS
from grpo_helpers.data import DATASETS
from grpo_helpers.rewards import EARLIER_REWARDS, REWARD_FUNCTIONS
from grpo_helpers.settings import BACKENDS, DEFAULT_BASE_MODELS, SETTINGS

# --------------------------------------------------------------------------------------
# The run configuration: every flag of the demo scripts (01-demo.py, 02-demo-async.py)
# and of the article's train.py, with their defaults, plus what a course run needs.
# --------------------------------------------------------------------------------------

REWARDS = tuple(REWARD_FUNCTIONS)  # the names a run can choose
#: ... and those of earlier recorded runs, accepted so that they can run again
EARLIER = tuple(EARLIER_REWARDS)
LOSS_FNS = ("importance_sampling", "ppo", "cispo")
MODES = ("sync", "async")
SWANLAB_MODES = ("offline", "local", "online")


@dataclass
class GRPOConfig:
    """Everything that defines a GRPO run; saved as ``config.json`` in its run dir.

    The defaults are the demo scripts' (``--steps 10 --batch-size 4 --group-size 4
    --max-tokens 1024 --lora-rank 32 --learning-rate 4e-5``). ``base_model=None``
    means the engine's default: SmolLM2-135M-Instruct on the local engine (its
    4-bit GGUF, dequantised: :data:`SMOLLM2_GGUF_NOTE`), Qwen/Qwen3.5-4B on PyTRIO.

    Introduced in: 05_sync_training_loop.ipynb
    """

    base_model: str | None = None
    lora_rank: int = 32
    steps: int = 10
    all_data: bool = False
    limit: int | None = None  # rows of the train split to use (None: all)
    batch_size: int = 4  # prompts per step
    group_size: int = 4  # completions per prompt
    max_tokens: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 42
    learning_rate: float = 4e-5
    beta1: float = 0.9
    beta2: float = 0.95
    reward: str = "binary"  # the demo scripts'; see rewards.REWARD_FUNCTIONS
    advantage_scale: str = "none"  # none (reward - mean) | group (/ group std)
    weights_name: str = "grpo-gsm8k"
    swanlab: bool = False
    swanlab_project: str = "trio-case"
    swanlab_experiment_name: str = "grpo-gsm8k"
    swanlab_mode: str = "offline"  # offline | local (dashboard) | online (account)
    backend: str = field(default_factory=lambda: SETTINGS.backend)
    run_dir: str | None = None  # None: runs/<weights_name>
    save_every: int = 1  # steps between resumable checkpoints (0: only at the end)
    eval_limit: int = 0  # test questions to evaluate after training (0: none)
    dataset: str = "gsm8k"  # gsm8k | arithmetic (word problems a 135M model can learn)
    difficulty: int = 1  # arithmetic problems only
    # The knobs of the full GRPO objective (notebook 08); the defaults are the demo
    # scripts' loop: one unclipped update per batch, no KL, a plain token sum.
    loss_fn: str = "importance_sampling"  # importance_sampling | ppo | cispo
    updates_per_batch: int = 1  # mu: optimiser steps on each batch of samples
    clip_low: float = 0.8  # ppo / cispo: lower bound of the ratio
    clip_high: float = 1.2  # ppo / cispo: upper bound of the ratio
    kl_coef: float = 0.0  # beta: KL penalty to the base model, in the advantages
    measure_kl: bool = False  # log the KL to the base model even when kl_coef is 0
    normalization: str = "token_sum"  # sequence_mean | token_mean | constant
    # Two safeguards (notebook 05): DAPO's masking of truncated completions, and
    # gradient clipping. Off by default, as in the demo scripts.
    mask_truncated: bool = False  # a completion cut off at max_tokens trains nothing
    grad_clip_norm: float = 0.0  # clip the gradient's global norm to this (0: off)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the bad field, its value and what is allowed."""
        checks: list[tuple[bool, str]] = [
            (
                self.group_size >= 2,
                f"group_size must be >= 2 (GRPO compares "
                f"completions within a group), got {self.group_size}",
            ),
            (self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}"),
            (self.max_tokens >= 1, f"max_tokens must be >= 1, got {self.max_tokens}"),
            (self.steps >= 0, f"steps must be >= 0, got {self.steps}"),
            (
                self.limit is None or self.limit >= 1,
                f"limit must be >= 1 or None, got {self.limit}",
            ),
            (
                4 <= self.lora_rank <= 64,
                f"lora_rank must be in [4, 64] (PyTRIO's limit), got {self.lora_rank}",
            ),
            (
                self.temperature >= 0,
                f"temperature must be >= 0, got {self.temperature}",
            ),
            (0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}"),
            (
                self.learning_rate > 0,
                f"learning_rate must be > 0, got {self.learning_rate}",
            ),
            (
                0 <= self.beta1 < 1 and 0 <= self.beta2 < 1,
                f"beta1 and beta2 must be in [0, 1), got {self.beta1}, {self.beta2}",
            ),
            (
                self.reward in REWARDS + EARLIER,
                f"unknown reward {self.reward!r}; choose one of {', '.join(REWARDS)}",
            ),
            (
                self.advantage_scale in ADVANTAGE_SCALES,
                f"unknown advantage_scale {self.advantage_scale!r}; "
                f"choose one of {', '.join(ADVANTAGE_SCALES)}",
            ),
            (
                self.backend in BACKENDS,
                f"unknown backend {self.backend!r}; choose one "
                f"of {', '.join(BACKENDS)}",
            ),
            (
                self.dataset in DATASETS,
                f"unknown dataset {self.dataset!r}; choose one "
                f"of {', '.join(DATASETS)}",
            ),
            (self.save_every >= 0, f"save_every must be >= 0, got {self.save_every}"),
            (self.eval_limit >= 0, f"eval_limit must be >= 0, got {self.eval_limit}"),
            (
                self.difficulty in (1, 2, 3),
                f"difficulty must be 1, 2 or 3, got {self.difficulty}",
            ),
            (
                self.loss_fn in LOSS_FNS,
                f"unknown loss_fn {self.loss_fn!r}; choose one of "
                f"{', '.join(LOSS_FNS)}",
            ),
            (
                self.updates_per_batch >= 1,
                f"updates_per_batch must be >= 1, got {self.updates_per_batch}",
            ),
            (
                0 < self.clip_low <= 1 <= self.clip_high,
                f"clip bounds must satisfy 0 < clip_low <= 1 <= clip_high, got "
                f"{self.clip_low}, {self.clip_high}",
            ),
            (self.kl_coef >= 0, f"kl_coef must be >= 0, got {self.kl_coef}"),
            (
                self.swanlab_mode in SWANLAB_MODES,
                f"unknown swanlab_mode {self.swanlab_mode!r}; choose one of "
                f"{', '.join(SWANLAB_MODES)}",
            ),
            (
                self.normalization in NORMALIZATIONS,
                f"unknown normalization {self.normalization!r}; choose one of "
                f"{', '.join(NORMALIZATIONS)}",
            ),
            (
                isinstance(self.mask_truncated, bool),
                f"mask_truncated must be True or False, got {self.mask_truncated!r}",
            ),
            (
                isinstance(self.grad_clip_norm, (int, float))
                and not isinstance(self.grad_clip_norm, bool)
                and 0 <= self.grad_clip_norm < float("inf"),
                f"grad_clip_norm must be a finite number >= 0 (0: no clipping), got "
                f"{self.grad_clip_norm!r}",
            ),
            (bool(self.weights_name.strip()), "weights_name must not be empty"),
        ]
        errors = [*self._not_finite(), *(message for ok, message in checks if not ok)]
        if errors:
            raise ValueError("Bad GRPO configuration: " + "; ".join(errors))

    def _not_finite(self) -> list[str]:
        """A message for each float setting that is infinite or not a number
        (``inf`` passes a check such as ``>= 0``)."""
        messages = []
        for setting in fields(self):
            value = getattr(self, setting.name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if setting.type == "float" and number and not math.isfinite(value):
                messages.append(f"{setting.name} must be a finite number, got {value}")
        return messages

    @property
    def model_name(self) -> str:
        """The base model this run uses (the engine's default when not given)."""
        return self.base_model or DEFAULT_BASE_MODELS[self.backend]

    @property
    def loss_fn_config(self) -> dict[str, float] | None:
        """``loss_fn_config`` for ``forward_backward``: the clip bounds of ppo and
        cispo; None for importance_sampling (it has no knobs)."""
        if self.loss_fn == "importance_sampling":
            return None
        return {
            "clip_low_threshold": self.clip_low,
            "clip_high_threshold": self.clip_high,
        }

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
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"Unknown GRPOConfig fields: {', '.join(unknown)}")
        return cls(**values)
