"""The series' run in TRL's terms: every setting mapped onto TRL 1.16, or refused.

A run of the series is a :class:`~grpo_helpers.config.GRPOConfig`. This module maps
every one of its fields onto TRL's ``GRPOTrainer`` (TRL 1.16.0) or refuses the
export, naming the field and why TRL cannot express it: nothing is dropped
silently. :data:`FIELD_RULES` has one rule per field, by its name (a new knob of
the run brings its rule here: :func:`unmapped` names one that did not),
:func:`trl_settings` computes TRL's ``GRPOConfig`` for a run,
:func:`refusals` lists what TRL cannot express, and :func:`loss_scale` is the
constant between the two losses. :mod:`grpo_helpers.trl.export` writes the folder that
trains the run with TRL from these.

The losses are compared, not assumed: ``tests/trl/test_mapping_oracle.py`` computes
TRL's own loss and the series' on the same tensors for each mapping below, and each
known difference (:data:`KNOWN_DIFFERENCES`) names the test that pins it.

The module is longer than most and stays whole: the rules, the settings and the
refusals are one mapping, each read against the others.

Introduced in: docs/beyond-the-laptop.md (after notebook 09)
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from typing import Any

import pytrio as trio

from grpo_helpers.config import GRPOConfig

__all__ = [
    "FIELD_RULES",
    "KNOWN_DIFFERENCES",
    "LOSS_TYPES",
    "PRECISION_AUTO",
    "TARGETS",
    "TRL_VERSION",
    "VLLM_INSTALL",
    "VLLM_REQUIREMENT",
    "ExportRefused",
    "gpu_precision",
    "loss_scale",
    "unmapped",
    "refusals",
    "resolve_precision",
    "reward_names",
    "run_notes",
    "trl_missing",
    "trl_settings",
    "trl_version",
]

#: The TRL release the mapping was checked against (tests/trl/test_mapping_oracle.py).
TRL_VERSION = "1.16.0"
INSTALL_HINT = (
    "pip install -e '.[trl]' -c constraints.txt in the grpo-notebooks checkout "
    "(TRL 1.16.0; it needs Python >= 3.11)"
)

#: The vLLM releases TRL 1.16.0 supports: its ``vllm`` extra's requirement
#: (``importlib.metadata.requires("trl")``; tests/trl/test_mapping.py reads it).
VLLM_REQUIREMENT = "vllm>=0.22.0,<=0.31.0"
#: What ``grpo_config_vllm.yaml`` needs beyond the ``trl`` extra, in the checkout:
#: TRL's ``vllm`` extra at the pinned TRL, vLLM in that range, and the project's
#: constraints, which hold torch: a vLLM built for another torch is refused by
#: pip, never installed over it.
VLLM_INSTALL = (
    f"pip install 'trl[vllm]=={TRL_VERSION}' '{VLLM_REQUIREMENT}' -c constraints.txt"
)

#: The TRL settings an export writes: ``gpu`` (``grpo_config.yaml``), ``vllm``
#: (``grpo_config_vllm.yaml``: the same with vLLM generating), ``cpu``.
TARGETS = ("gpu", "vllm", "cpu")

#: ``bf16`` and ``fp16`` in the GPU configs: ``train_grpo.py`` chooses them on the
#: GPU it runs on (:func:`resolve_precision`).
PRECISION_AUTO = "auto"

#: The series' optimiser settings beyond its config (eps, weight decay, clipping):
#: ``pytrio.AdamParams``' defaults, which the training loop keeps.
ADAM = trio.AdamParams()

#: The series' normalisation -> TRL's ``loss_type`` (see :func:`loss_scale`).
LOSS_TYPES = {
    "token_sum": "dr_grpo",
    "constant": "dr_grpo",
    "sequence_mean": "grpo",
    "token_mean": "dapo",
}


@dataclass(frozen=True)
class FieldRule:
    """How one field of the series' ``GRPOConfig`` becomes a TRL setting.

    Attributes:
        trl: the TRL settings it sets (``GRPOConfig`` keys of TRL), or where else
            the value goes (the LoRA config, the dataset, an environment variable).
        how: one line on how the value maps (or when it is refused).
    """

    trl: tuple[str, ...]
    how: str


#: How each field of the series' ``GRPOConfig`` becomes a TRL setting, by field name:
#: a new knob brings its rule here (``tests/trl/test_mapping.py`` holds that every
#: field has one). The refusals are :func:`refusals`.
FIELD_RULES: dict[str, FieldRule] = {
    "base_model": FieldRule(
        ("model",),
        "the policy; train_grpo.py loads it through local.models.pretrained_dir"
        " (SmolLM2's offline copy and tiny-random become local folders)",
    ),
    "lora_rank": FieldRule(
        ("LoraConfig.r",),
        "peft LoraConfig(r, lora_alpha=32, lora_dropout=0, "
        "target_modules='all-linear'): every linear layer but lm_head (see the "
        "differences)",
    ),
    "steps": FieldRule(
        ("max_steps",),
        "steps x updates_per_batch: TRL counts optimiser steps",
    ),
    "all_data": FieldRule(
        ("num_train_epochs", "max_steps"),
        "one pass: num_train_epochs=1, max_steps=-1",
    ),
    "limit": FieldRule(
        ("dataset",),
        "the first `limit` rows of the train split",
    ),
    "batch_size": FieldRule(
        ("per_device_train_batch_size", "gradient_accumulation_steps"),
        "batch_size x group_size completions per optimiser step, one generation"
        " each (steps_per_generation=1); train_grpo.py divides the per-device "
        "batch among the processes",
    ),
    "group_size": FieldRule(
        ("num_generations",),
        "the same G",
    ),
    "max_tokens": FieldRule(
        ("max_completion_length",),
        "the same budget",
    ),
    "temperature": FieldRule(
        ("temperature",),
        "the same; refused at 0 (TRL always samples). TRL's logprobs are of "
        "logits / T (see the differences)",
    ),
    "top_p": FieldRule(
        ("top_p", "top_k"),
        "the same top_p; top_k=0 (off), as here",
    ),
    "seed": FieldRule(
        ("seed",),
        "the same seed (the arithmetic problems' too); TRL's random streams "
        "differ, so the completions differ",
    ),
    "learning_rate": FieldRule(
        ("learning_rate", "lr_scheduler_type", "warmup_steps"),
        "the same, constant (TRL's default schedule decays linearly)",
    ),
    "beta1": FieldRule(
        ("adam_beta1",),
        "the same",
    ),
    "beta2": FieldRule(
        ("adam_beta2", "adam_epsilon", "weight_decay", "optim"),
        "the same; with pytrio.AdamParams' other defaults: eps 1e-12, no weight decay",
    ),
    "reward": FieldRule(
        ("reward_funcs", "reward_weights"),
        "the series' reward, imported and wrapped in TRL's signature; the exact"
        " grade (binary) is logged beside it with weight 0",
    ),
    "advantage_scale": FieldRule(
        ("scale_rewards",),
        "none -> none (equal); group -> group (TRL's std is Bessel-corrected)",
    ),
    "weights_name": FieldRule(
        ("run_name",),
        "the run's name (without SwanLab)",
    ),
    "swanlab": FieldRule(
        ("report_to",),
        "['swanlab'] (transformers' SwanLab callback)",
    ),
    "swanlab_project": FieldRule(
        ("SWANLAB_PROJECT",),
        "set by train_grpo.py",
    ),
    "swanlab_experiment_name": FieldRule(
        ("run_name",),
        "with SwanLab on",
    ),
    "swanlab_mode": FieldRule(
        ("SWANLAB_MODE",),
        "set by train_grpo.py",
    ),
    "trackio": FieldRule(
        ("report_to",),
        "['trackio'] (transformers' trackio callback)",
    ),
    "backend": FieldRule(
        ("model",),
        "chooses the default base model only: the engine is now TRL",
    ),
    "run_dir": FieldRule(
        ("output_dir",),
        "runs/<the run directory's name>-trl, where it is launched",
    ),
    "save_every": FieldRule(
        ("save_strategy", "save_steps"),
        "every save_every x updates_per_batch optimiser steps; 0: the final "
        "adapter only",
    ),
    "dataset": FieldRule(
        ("dataset",),
        "data.load_split: the same rows, in order (no shuffle)",
    ),
    "difficulty": FieldRule(
        ("dataset",),
        "the arithmetic problems' difficulty",
    ),
    "loss_fn": FieldRule(
        ("loss_type", "epsilon", "epsilon_high"),
        "ppo -> TRL's clipped loss (the same formula); importance_sampling -> "
        "the same at mu=1 (ratio 1 where the sampler's logprobs are the "
        "trainer's: the clip never acts); cispo -> cispo",
    ),
    "updates_per_batch": FieldRule(
        ("num_iterations",),
        "mu, the same",
    ),
    "clip_low": FieldRule(
        ("epsilon",),
        "epsilon = 1 - clip_low",
    ),
    "clip_high": FieldRule(
        ("epsilon_high",),
        "epsilon_high = clip_high - 1 (cispo: clip_high itself)",
    ),
    "kl_coef": FieldRule(
        ("beta", "use_bias_correction_kl"),
        "beta = kl_coef; the two KL terms differ (see the differences)",
    ),
    "measure_kl": FieldRule(
        ("beta",),
        "TRL logs the KL when beta > 0; refused with kl_coef = 0",
    ),
    "normalization": FieldRule(
        ("loss_type",),
        "token_sum, constant -> dr_grpo; sequence_mean -> grpo; token_mean -> "
        "dapo (batch_size 1 only); equal losses up to the factor c below",
    ),
    "train_temperature": FieldRule(
        ("temperature",),
        "sampling -> what TRL always trains (it divides the logits by "
        "temperature before its loss); 1 at temperature != 1 has no TRL "
        "equivalent (the export's notes say what differs)",
    ),
    "dynamic_sampling": FieldRule(
        (),
        "refused when > 0: TRL 1.16 has no dynamic sampling (its request, "
        "trl#3708, is open)",
    ),
    "max_steps_off_policy": FieldRule(
        (),
        "refused when > 0: TRL samples each generation from the weights at its "
        "start, with no setting for a sampler one update behind",
    ),
    "sampler_logprobs": FieldRule(
        ("vllm_importance_sampling_correction",),
        "trainer -> TRL's old logprobs, recomputed at the sampler's weights; "
        "behaviour -> vLLM's processed logprobs, which TRL's correction "
        "compares with; model at temperature != 1 has no TRL equivalent",
    ),
    "sampler_precision": FieldRule(
        (),
        "refused when bfloat16: TRL has no setting for a sampler in another "
        "precision than the model's",
    ),
    "is_correction": FieldRule(
        ("vllm_importance_sampling_mode", "vllm_importance_sampling_correction"),
        "the same mode (with vLLM's samples); none -> correction off",
    ),
    "is_clip_max": FieldRule(
        ("vllm_importance_sampling_clip_max",),
        "the same",
    ),
    "is_clip_min": FieldRule(
        ("vllm_importance_sampling_clip_min",),
        "the same",
    ),
    "ratio_level": FieldRule(
        ("importance_sampling_level",),
        "the same (GSPO: arXiv 2507.18071)",
    ),
    "mask_truncated": FieldRule(
        ("mask_truncated_completions",),
        "the same: a completion cut off at the budget (the series: stop_reason "
        "'length'; TRL: no end-of-sequence token) is left out of the loss, its "
        "reward still counts in its group's mean",
    ),
    "grad_clip_norm": FieldRule(
        ("max_grad_norm",),
        "grad_clip_norm / c: TRL's loss, so its gradient, is the series' "
        "divided by c (below), so it clips at the same point; 0: no clipping",
    ),
}


def unmapped(cls: type = GRPOConfig) -> list[str]:
    """The fields of a config class with no rule in :data:`FIELD_RULES`: a new
    knob of the run must bring its rule here.

    Example:
        >>> unmapped()
        []
    """
    from dataclasses import fields

    return [f.name for f in fields(cls) if f.name not in FIELD_RULES]


class ExportRefused(ValueError):
    """Settings TRL cannot express; ``refused`` holds ``(field, reason)`` pairs."""

    def __init__(self, refused: list[tuple[str, str]]) -> None:
        self.refused = refused
        lines = [f"{name}: {reason}" for name, reason in refused]
        super().__init__(
            "cannot export to TRL, it cannot express these settings:\n  "
            + "\n  ".join(lines)
        )


def refusals(config: GRPOConfig) -> list[tuple[str, str]]:
    """The settings of ``config`` that TRL 1.16 cannot express, with the reason.

    Args:
        config: the series' run.

    Returns:
        ``(field, reason)`` pairs; empty when the run can be exported.

    Example:
        >>> refusals(GRPOConfig(temperature=0.0, backend="local"))[0][0]
        'temperature'
    """
    out: list[tuple[str, str]] = []
    if config.temperature <= 0:
        out.append(
            (
                "temperature",
                "TRL samples every completion and divides the logits by the "
                "temperature: 0 (greedy) cannot be expressed, and a greedy group "
                "would be degenerate anyway",
            )
        )
    if config.normalization == "token_mean" and config.batch_size > 1:
        out.append(
            (
                "normalization",
                "token_mean divides each group's tokens by that group's token count; "
                "TRL's dapo divides by the whole batch's, which weighs the groups "
                "differently when batch_size > 1. Export it with batch_size=1 (dapo "
                "then equals it), or choose another normalization",
            )
        )
    if config.loss_fn == "importance_sampling" and config.updates_per_batch > 1:
        out.append(
            (
                "loss_fn",
                "TRL's GRPO losses always clip the ratio and importance_sampling "
                "does not: equal at updates_per_batch=1 (ratio 1), not after the "
                "first update. Use loss_fn=ppo for updates_per_batch > 1",
            )
        )
    if config.loss_fn == "cispo":
        if config.updates_per_batch > 1:
            out.append(
                (
                    "loss_fn",
                    "TRL's cispo caps the ratio from above only; the series' cispo "
                    "also clips it below clip_low, which acts once "
                    "updates_per_batch > 1",
                )
            )
        if config.normalization != "token_mean" or config.batch_size != 1:
            out.append(
                (
                    "normalization",
                    "TRL's cispo always averages over the batch's tokens (as dapo); "
                    "that is the series' token_mean with batch_size=1 only",
                )
            )
    if config.measure_kl and config.kl_coef == 0:
        out.append(
            (
                "measure_kl",
                "TRL computes the KL to the reference model only when beta > 0 "
                "(otherwise it loads none); it cannot log the KL of an unpenalised "
                "run. Set kl_coef > 0 or measure_kl=False",
            )
        )
    if config.sampler_precision != "float32":
        out.append(
            (
                "sampler_precision",
                "TRL has no setting for a sampler in another precision than the "
                "model's (its vLLM samples in the model's dtype). Export with "
                "sampler_precision='float32'",
            )
        )
    if config.max_steps_off_policy > 0:
        out.append(
            (
                "max_steps_off_policy",
                "TRL samples each generation from the weights at its start: it has "
                "no setting for a sampler one update behind the trainer. Export "
                "with max_steps_off_policy=0",
            )
        )
    if config.dynamic_sampling > 0:
        out.append(
            (
                "dynamic_sampling",
                "TRL 1.16 has no dynamic sampling (its request, trl#3708, is open): "
                "its trainer trains every group it sampled. Export with "
                "dynamic_sampling=0",
            )
        )
    return out


def loss_scale(config: GRPOConfig) -> float:
    """``c`` such that the series' loss is ``c`` times TRL's on the same batch.

    The local engine minimises a plain sum of per-token losses (notebook 09); TRL
    divides it by the normalisation of its ``loss_type``. With ``N = batch_size x
    group_size`` completions and ``L = max_tokens``:

    * token_sum -> dr_grpo (``sum / (N L)``): ``c = N L``;
    * constant (``s_i = 1/L``) -> dr_grpo: ``c = N``;
    * sequence_mean (``s_i = 1/|o_i|``) -> grpo (the mean over sequences): ``c = N``;
    * token_mean with one group -> dapo (the batch's token mean): ``c = 1``;
    * cispo (token_mean, one group) -> cispo: ``c = 1``.

    ``c`` depends on the batch's shape only, so the gradients differ by the same
    constant, and Adam makes the same update (up to its epsilon); gradient
    clipping maps to ``max_grad_norm = grad_clip_norm / c``, the same point.

    Example:
        >>> loss_scale(GRPOConfig(batch_size=2, group_size=8, max_tokens=48))
        768.0
    """
    sequences = config.batch_size * config.group_size
    if config.loss_fn == "cispo" or config.normalization == "token_mean":
        return 1.0
    if config.normalization == "token_sum":
        return float(sequences * config.max_tokens)
    return float(sequences)


def reward_names(config: GRPOConfig) -> list[str]:
    """The reward functions the TRL run gets: the run's reward, then the exact grade
    (``binary``, weight 0: logged as the series logs its accuracy)."""
    return [config.reward] + ([] if config.reward == "binary" else ["binary"])


def trl_settings(config: GRPOConfig, target: str = "gpu") -> dict[str, Any]:
    """TRL ``GRPOConfig`` keyword arguments for the series' run.

    Args:
        config: the series' run.
        target: ``"gpu"``: gradient checkpointing on, ``transformers`` generates,
            and ``bf16``/``fp16`` are ``"auto"``, chosen by the script on the GPU
            it runs on (:func:`resolve_precision`; TRL's own default, bf16, fails
            on a GPU older than Ampere, such as Colab's T4); ``"vllm"``: the same
            with TRL's vLLM generating in the training process; ``"cpu"``: bf16
            and checkpointing off, on the CPU.

    Returns:
        The settings, for one process: ``train_grpo.py`` divides
        ``per_device_train_batch_size`` by the number of processes it runs on.

    Raises:
        ExportRefused: a setting TRL cannot express (:func:`refusals`).
    """
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    refused = refusals(config)
    if refused:
        raise ExportRefused(refused)
    mu = config.updates_per_batch
    cispo = config.loss_fn == "cispo"
    settings: dict[str, Any] = {
        # relative to where the run is launched: a run_dir written on one machine
        # (notebooks write absolute ones) means nothing on the GPU machine
        "output_dir": f"runs/{config.run_path.name}-trl",
        "run_name": (
            config.swanlab_experiment_name if config.swanlab else config.weights_name
        ),
        "seed": config.seed,
        # one optimiser step per batch of batch_size prompts x group_size completions
        "per_device_train_batch_size": config.batch_size * config.group_size,
        "gradient_accumulation_steps": 1,
        "steps_per_generation": 1,
        "num_generations": config.group_size,
        "shuffle_dataset": False,
        "max_steps": -1 if config.all_data else config.steps * mu,
        "num_train_epochs": 1,
        # sampling
        "max_completion_length": config.max_tokens,
        "temperature": config.temperature,
        "top_p": config.top_p,
        "top_k": 0,
        "chat_template_kwargs": {"enable_thinking": False},
        # the optimiser: pytrio.AdamParams, constant learning rate
        "learning_rate": config.learning_rate,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "optim": "adamw_torch",
        "adam_beta1": config.beta1,
        "adam_beta2": config.beta2,
        "adam_epsilon": ADAM.eps,
        "weight_decay": ADAM.weight_decay,
        # clipping at the same point: TRL's gradient is the series' divided by c
        "max_grad_norm": (
            config.grad_clip_norm / loss_scale(config) if config.grad_clip_norm else 0.0
        ),
        # the objective
        "loss_type": "cispo" if cispo else LOSS_TYPES[config.normalization],
        "num_iterations": mu,
        "epsilon": round(1.0 - config.clip_low, 12),
        "epsilon_high": (
            config.clip_high if cispo else round(config.clip_high - 1.0, 12)
        ),
        "importance_sampling_level": config.ratio_level,
        # TRL applies its correction to vLLM's samples only (the GPU export); the
        # CPU export generates with the trainer itself, so there is nothing to
        # correct and TRL reads none of these.
        "vllm_importance_sampling_correction": config.is_correction != "none",
        **(
            {"vllm_importance_sampling_mode": config.is_correction}
            if config.is_correction != "none"
            else {}
        ),
        "vllm_importance_sampling_clip_max": config.is_clip_max,
        "vllm_importance_sampling_clip_min": config.is_clip_min,
        "beta": config.kl_coef,
        "use_bias_correction_kl": True,
        "scale_rewards": config.advantage_scale,
        "mask_truncated_completions": config.mask_truncated,
        "disable_dropout": True,
        "reward_weights": [1.0] + [0.0] * (len(reward_names(config)) - 1),
        # logging and saving
        "logging_steps": 1,
        "report_to": [
            name
            for name, on in (("swanlab", config.swanlab), ("trackio", config.trackio))
            if on
        ]
        or "none",
        "save_strategy": "steps" if config.save_every > 0 else "no",
    }
    if config.save_every > 0:
        settings["save_steps"] = config.save_every * mu
    if target in ("gpu", "vllm"):
        settings |= {
            "bf16": PRECISION_AUTO,
            "fp16": PRECISION_AUTO,
            "activation_checkpointing": True,
            # transformers' generate: nothing to install beyond the trl extra
            "use_vllm": False,
        }
    if target == "vllm":
        # TRL's fast path on a GPU: vLLM generates, in the training process
        # (colocate: no second server), and TRL corrects its logprobs' small
        # difference from the trainer's (vllm_importance_sampling_correction).
        # vLLM is installed apart (VLLM_INSTALL): its wheels pin their own torch.
        settings |= {"use_vllm": True, "vllm_mode": "colocate"}
    if target == "cpu":
        settings |= {
            "bf16": False,
            "activation_checkpointing": False,
            "use_cpu": True,
            "use_vllm": False,  # vLLM needs a GPU: transformers' generate on the CPU
        }
    return settings


def gpu_precision(cuda: bool, bf16: bool) -> dict[str, bool]:
    """TRL's ``bf16`` and ``fp16`` for a machine: bf16 where the GPU computes in
    it natively (Ampere or newer), fp16 on an older GPU (a T4 or a V100: bf16
    fails there), neither (float32) without a GPU. Both mix precisions: the
    weights stay float32 (TRL loads the model in float32).

    Args:
        cuda: a CUDA GPU is visible.
        bf16: it computes in bf16 natively
            (``torch.cuda.is_bf16_supported(including_emulation=False)``).

    Example:
        >>> gpu_precision(cuda=True, bf16=False)  # Colab's T4
        {'bf16': False, 'fp16': True}
    """
    return {"bf16": cuda and bf16, "fp16": cuda and not bf16}


def resolve_precision(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (TRL settings) with ``bf16``/``fp16`` written ``"auto"``
    replaced by :func:`gpu_precision`'s choice for this machine. A value written
    in the file is kept, and the other follows it: ``fp16: true`` turns bf16
    off, ``bf16: false`` leaves fp16 on a GPU (write ``fp16: false`` too for
    float32). ``train_grpo.py`` calls it before it builds TRL's ``GRPOConfig``.

    torch reports bf16 on a T4 by default, because it can emulate it
    (``is_bf16_supported()`` is ``including_emulation=True``); TRL's bf16 then
    fails there, so only native support counts.
    """
    bf16, fp16 = values.get("bf16"), values.get("fp16")
    if PRECISION_AUTO not in (bf16, fp16):
        return values
    import torch

    cuda = torch.cuda.is_available()
    native = cuda and torch.cuda.is_bf16_supported(including_emulation=False)
    if bf16 == PRECISION_AUTO:
        bf16 = False if fp16 is True else gpu_precision(cuda, native)["bf16"]
    if fp16 == PRECISION_AUTO:
        fp16 = cuda and not bf16
    return values | {"bf16": bool(bf16), "fp16": bool(fp16)}


@dataclass(frozen=True)
class Difference:
    """A known difference between the series' objective and TRL 1.16's.

    Attributes:
        name: a short title.
        text: one or two sentences (the exported README prints them).
        test: the test of ``tests/trl/test_mapping_oracle.py`` that pins it down.
    """

    name: str
    text: str
    test: str


KNOWN_DIFFERENCES: tuple[Difference, ...] = (
    Difference(
        "default loss_type",
        "TRL 1.16's default `loss_type` is `dapo`, a token mean over the whole "
        "generation batch; `grpo` is the per-sequence mean and `dr_grpo` divides by "
        "the number of sequences times `max_completion_length`. The export always "
        "writes `loss_type`, from the series' normalisation.",
        "test_trl_losses_equal_the_series_for_every_normalisation",
    ),
    Difference(
        "group std",
        "TRL's group standard deviation is Bessel-corrected (divided by G - 1) with "
        "1e-4 added; the series divides by the population std (G) plus 1e-4. With "
        "`scale_rewards='group'` TRL's advantages are about sqrt((G-1)/G) of the "
        "series' (0.935 for G = 8), a factor Adam absorbs; with `'none'` they are "
        "equal, and a degenerate group gets 0 on both sides.",
        "test_trl_advantages_against_the_series",
    ),
    Difference(
        "temperature",
        "TRL computes logprobs from the logits divided by the sampling temperature; "
        "the local engine scores at temperature 1 unless `train_temperature` is "
        "'sampling' (notebook 05, section 7). At T = 0.6 and the default TRL trains "
        "log pi_T, the series log pi (run_notes: the export says what that changes "
        "in the run it writes); with 'sampling' both train log pi_T.",
        "test_trl_logprobs_are_tempered_and_the_engines_are_not",
    ),
    Difference(
        "KL",
        "TRL adds beta times the k3 estimate to each token's loss, multiplied by the "
        "ratio by default in 1.16 (`use_bias_correction_kl`), and normalises it with "
        "the loss; the series adds beta (mean d - d_t) to each token's advantage, "
        "unnormalised. At ratio 1 TRL's per-token gradient is beta d_t times the "
        "token's weight, the series' beta (d_t - mean d): the same up to a baseline. "
        "With the clipped loss and mu > 1 the series' term sits inside the clip, "
        "TRL's outside (run_notes: the export says so where it applies).",
        "test_trl_kl_against_the_series_kl_penalty",
    ),
    Difference(
        "GPU defaults",
        "TRL's defaults assume a GPU (`bf16=True`, gradient checkpointing on); "
        "grpo_config_cpu.yaml turns both off, and the GPU configs write `bf16: "
        "auto`: train_grpo.py chooses bf16 where the GPU has it natively, fp16 on "
        "an older one (bf16 fails on a T4).",
        "test_trl_defaults_assume_a_gpu_and_the_cpu_export_turns_them_off",
    ),
    Difference(
        "Python",
        "TRL 1.16 needs Python 3.11 or newer: the project's minimum, so the `trl` "
        "extra installs wherever the project does.",
        "test_the_trl_extra_needs_python_3_11",
    ),
    Difference(
        "lm_head",
        "TRL 1.16 refuses a LoRA adapter on `lm_head`; the series' adapter also "
        "adapts it, the exported one adapts every other linear layer.",
        "test_trl_refuses_an_adapter_on_lm_head",
    ),
)


def run_notes(config: GRPOConfig) -> list[tuple[str, str]]:
    """What TRL changes in *this* run, beyond the mapping: ``(topic, sentence)``.

    Two differences of :data:`KNOWN_DIFFERENCES` change the update of a run only
    for some settings, so the export says, for the run it writes, whether they do:

    * ``temperature``: at T != 1 (the series' default 0.6) TRL trains the logprobs
      of ``logits / T``, the series those of the logits (temperature 1) unless
      ``train_temperature='sampling'``;
    * ``KL placement``: with ``loss_fn='ppo'``, ``updates_per_batch > 1`` and
      ``kl_coef > 0``, the series' KL term is part of the advantage, inside the
      clip, and TRL adds its own after the clip.

    Args:
        config: the series' run.

    Returns:
        One pair per difference that applies (empty when neither does); the
        export's README and ``export trl``'s output print them.

    Example:
        >>> [topic for topic, _ in run_notes(GRPOConfig(temperature=0.6))]
        ['temperature']
    """
    notes = []
    t = config.temperature
    if t != 1.0 and config.train_temperature == "1":
        notes.append(
            (
                "temperature",
                f"this run samples at temperature {t:g}, and TRL computes the "
                f"training logprobs from the logits divided by {t:g}, the local "
                "engine from the logits themselves (temperature 1). On the same "
                "completions and advantages TRL's gradient per logit z is "
                "A (e_y - pi_T) / T, the series' A (e_y - pi): scaled by "
                f"1/T = {1 / t:.2f} and centred on the tempered distribution pi_T "
                "(the one the completions were sampled from) instead of the "
                "untempered pi, so not a multiple of the series': another update, "
                "whose overall scale Adam absorbs but whose direction it does not"
                + (
                    "; and the ratios TRL clips are of tempered probabilities"
                    if config.updates_per_batch > 1
                    else ""
                )
                + ". Export with train_temperature='sampling' (what TRL trains) "
                "or temperature 1.0 for the same update",
            )
        )
    mu = config.updates_per_batch
    if config.loss_fn == "ppo" and mu > 1 and config.kl_coef > 0:
        notes.append(
            (
                "KL placement",
                f"with the clipped loss (ppo), {mu} updates per batch and kl_coef "
                f"{config.kl_coef:g}, the series adds the KL penalty to each "
                "token's advantage, inside the clipped objective: once a token's "
                "ratio leaves [clip_low, clip_high] the way its advantage pushes, "
                "its KL term stops acting too. TRL adds beta times its KL term to "
                "the loss after the clip, so it always acts. The first of the "
                f"{mu} updates (ratio 1) agrees up to the KL terms' known "
                "difference; from the second on, clipped tokens differ. Export "
                "with updates_per_batch 1 or kl_coef 0 for the same objective",
            )
        )
    return notes


def trl_missing() -> str | None:
    """None when TRL is installed; otherwise what to run to install it."""
    if importlib.util.find_spec("trl") is None:
        return f"TRL is not installed: {INSTALL_HINT}"
    return None


def trl_version() -> str | None:
    """The installed TRL version, or None."""
    try:
        return importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return None
