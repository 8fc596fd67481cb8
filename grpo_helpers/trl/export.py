"""The same run on Hugging Face TRL: ``python -m grpo_helpers export trl``.

:func:`export_trl` writes a folder that trains a run of the series with TRL's
``GRPOTrainer``, from the mapping of :mod:`grpo_helpers.trl.mapping` (every setting
mapped, or the export refused with the reason)::

    train_grpo.py              the script (a copy of grpo_helpers/trl/train_grpo.py)
    series_config.json         the series' GRPOConfig: the data, prompt and reward
    grpo_config.yaml           TRL's GRPOConfig for a GPU: transformers generates,
                               bf16 or fp16 chosen by the GPU (``bf16: auto``)
    grpo_config_vllm.yaml      the same with vLLM generating (installed apart:
                               ``mapping.VLLM_INSTALL``)
    grpo_config_cpu.yaml       the same for a CPU (bf16 and checkpointing off)
    accelerate/single_gpu.yaml accelerate configs for one GPU and for several
    accelerate/multi_gpu.yaml
    README.md                  how to launch each, the mapping table, the
                               differences between the two objectives
                               (:mod:`grpo_helpers.trl.export_readme`)

Introduced in: docs/beyond-the-laptop.md (after notebook 09)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from grpo_helpers.config import GRPOConfig
from grpo_helpers.trl.export_paths import without_machine_paths
from grpo_helpers.trl.export_readme import readme
from grpo_helpers.trl.mapping import (
    TRL_VERSION,
    VLLM_INSTALL,
    reward_names,
    trl_settings,
)

__all__ = ["MULTI_GPU_PROCESSES", "export_trl"]

#: The exported script's source: copied, never imported by the package.
SCRIPT = Path(__file__).with_name("train_grpo.py")

#: GPUs ``accelerate/multi_gpu.yaml`` launches (``--num_processes k`` for others).
MULTI_GPU_PROCESSES = 2


def _yaml(settings: dict[str, Any], header: str) -> str:
    import yaml

    body = yaml.safe_dump(settings, sort_keys=False, default_flow_style=None)
    return header + body


def _accelerate(processes: int) -> str:
    multi = processes > 1
    return "\n".join(
        [
            "# accelerate launch --config_file <this file> train_grpo.py",
            "compute_environment: LOCAL_MACHINE",
            "debug: false",
            f"distributed_type: {'MULTI_GPU' if multi else repr('NO')}",
            "downcast_bf16: 'no'",
            "gpu_ids: all",
            "machine_rank: 0",
            "main_training_function: main",
            # the TRL config's bf16/fp16 decide (train_grpo.py chooses them by the
            # GPU's capability); bf16 here would fail on a GPU without it
            "mixed_precision: 'no'",
            "num_machines: 1",
            f"num_processes: {processes}",
            "rdzv_backend: static",
            "same_network: true",
            "use_cpu: false",
            "",
        ]
    )


def export_trl(
    config: GRPOConfig, out: str | Path, *, overwrite: bool = False, mode: str = "sync"
) -> Path:
    """Write the TRL version of ``config`` to the folder ``out``.

    Args:
        config: the series' run (``python -m grpo_helpers train`` flags, or a run's
            ``config.json``).
        out: the folder to write (created; must be empty unless ``overwrite``).
        overwrite: replace the files of an existing export.
        mode: the series loop the run used (``sync`` or ``async``), for the README:
            TRL generates each batch in one call, the same objective as either.

    Returns:
        The folder.

    Raises:
        ExportRefused: a setting TRL cannot express (nothing is written).
        FileExistsError: ``out`` holds files and ``overwrite`` is False.
    """
    gpu, vllm = trl_settings(config, "gpu"), trl_settings(config, "vllm")
    cpu = trl_settings(config, "cpu")
    folder = Path(out)
    if folder.exists() and any(folder.iterdir()) and not overwrite:
        raise FileExistsError(f"{folder} is not empty; pass --overwrite to replace it")
    (folder / "accelerate").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SCRIPT, folder / "train_grpo.py")
    # no path of this machine: the run's directory (notebooks write absolute
    # ones), the export folder, a base model's folder, the home folder
    paths: list[str | Path] = [
        folder.absolute(),
        config.run_path.absolute(),
        config.model_name,
    ]
    (folder / "series_config.json").write_text(
        json.dumps(without_machine_paths(config.to_dict(), paths), indent=2) + "\n"
    )
    rewards = ", ".join(
        f"{name} (weight {w:g})"
        for name, w in zip(reward_names(config), gpu["reward_weights"], strict=True)
    )
    header = (
        f"# TRL {TRL_VERSION} GRPOConfig for the series' run {config.weights_name!r}\n"
        "# (python -m grpo_helpers export trl; README.md maps every setting).\n"
        f"# Rewards, in order: {rewards}.\n"
        "# For one process: train_grpo.py divides per_device_train_batch_size by\n"
        "# the number of processes, so the batch per optimiser step stays the same.\n"
    )
    precision = (
        "# bf16/fp16 auto: train_grpo.py turns bf16 on where the GPU has it\n"
        "# natively (Ampere or newer), fp16 on an older one (a T4), neither without\n"
        "# a GPU; write true or false to choose.\n"
    )
    (folder / "grpo_config.yaml").write_text(
        _yaml(gpu, header + "# A GPU; transformers generates.\n" + precision)
    )
    (folder / "grpo_config_vllm.yaml").write_text(
        _yaml(
            vllm,
            header
            + "# A GPU; vLLM generates, in the training process. Install it first\n"
            + f"# (in the checkout): {VLLM_INSTALL}\n"
            + precision,
        )
    )
    (folder / "grpo_config_cpu.yaml").write_text(
        _yaml(cpu, header + "# The CPU: bf16 and gradient checkpointing off.\n")
    )
    processes = MULTI_GPU_PROCESSES
    (folder / "accelerate" / "single_gpu.yaml").write_text(_accelerate(1))
    (folder / "accelerate" / "multi_gpu.yaml").write_text(_accelerate(processes))
    (folder / "README.md").write_text(
        without_machine_paths(readme(config, gpu, processes, mode), paths)
    )
    return folder
