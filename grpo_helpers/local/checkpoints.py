"""Checkpoints of the local engine: where they live, what is in them, their URIs.

PyTRIO answers ``save_weights_for_sampler`` and ``save_state`` with a URI
(``trio://...``) that only its servers can open. The local engine answers with

    ``local://<absolute run_dir>/<run id>/weights/<name>``   sampler weights (LoRA)
    ``local://<absolute run_dir>/<run id>/state/<name>``     weights + Adam state

and any process on the same machine can reopen them:
``connect("local").create_sampling_client(base_model, model_path=uri)`` or
``training_client.load_state_with_optimizer(uri)``. A plain path or a ``file://`` URI
to the same directory works too.

Each checkpoint is a directory, written to a temporary name and renamed, so a crash
never leaves half a checkpoint:

    adapter_model.safetensors   LoRA A/B matrices, under peft's key names
    adapter_config.json         peft's LoraConfig (``PeftModel.from_pretrained``)
    grpo_local.json             base model, rank, train_* flags, seed, kind, step
    optimizer.pt                (state only) AdamW moments and step count, torch.save

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
from pytrio.errors.base import ValidationError

from grpo_helpers.atomic_write import write_atomically
from grpo_helpers.local.adapters import AdapterSnapshot, LoraSpec
from grpo_helpers.local.models import canonical_name

SCHEME = "local://"
FORMAT = "grpo-local-lora/1"
PEFT_PREFIX = "base_model.model."
ADAPTER_FILE = "adapter_model.safetensors"
META_FILE = "grpo_local.json"
OPTIMIZER_FILE = "optimizer.pt"


def normalize_name(name: object) -> str:
    """Validate a checkpoint name exactly as PyTRIO does.

    Spaces become ``-``; the result must match
    ``^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9_-])?$``; names over 200 characters are
    shortened with a hash. Raises ``pytrio.errors.ValidationError`` otherwise.

    Example::

        >>> normalize_name("grpo step 3")
        'grpo-step-3'
    """
    from pytrio.client.builders.training import _normalize_checkpoint_name

    return _normalize_checkpoint_name(name)


def to_uri(path: Path) -> str:
    """``local://`` + the absolute POSIX path of a checkpoint directory."""
    return SCHEME + Path(path).resolve().as_posix()


def from_uri(uri: str) -> Path:
    """The checkpoint directory behind ``local://...``, ``file://...`` or a path.

    Raises:
        ValidationError: another engine's URI (``trio://``), or no checkpoint there.
    """
    text = str(uri)
    if text.startswith(SCHEME):
        path = Path(text[len(SCHEME) :])
    elif text.startswith("file://"):
        path = Path(text[len("file://") :])
    elif "://" in text:
        raise ValidationError(
            f"{text!r} is not a local-engine checkpoint. The local engine opens "
            f"{SCHEME}<path> URIs (or plain paths); a trio:// checkpoint lives on "
            "PyTRIO's servers: download it with RestClient or use backend='pytrio'.",
            code="validation.invalid_checkpoint_uri",
        )
    else:
        path = Path(text).expanduser()
    if not (path / META_FILE).is_file():
        raise ValidationError(
            f"No local-engine checkpoint at {path} (expected {META_FILE} there).",
            code="validation.checkpoint_not_found",
        )
    return path


def save_checkpoint(
    directory: Path,
    tensors: dict[str, torch.Tensor],
    meta: dict[str, Any],
    peft_config: Any,
    optimizer_state: dict[str, Any] | None = None,
    overwrite: bool = True,
) -> int:
    """Write a checkpoint directory atomically.

    Args:
        directory: final location (``<run_dir>/<run id>/weights/<name>``...).
        tensors: LoRA tensors by adapter-independent name.
        meta: JSON-able facts: base_model, rank, train_* flags, seed, kind, step.
        peft_config: the adapter's ``peft.LoraConfig`` (saved as adapter_config.json).
        optimizer_state: ``optimizer.state_dict()`` to resume training, or None.
        overwrite: replace an existing checkpoint of that name.

    Returns:
        The checkpoint's size in bytes.

    Raises:
        ValidationError: it exists and ``overwrite`` is False.
    """
    from safetensors.torch import save_file

    directory = Path(directory)
    if directory.exists() and not overwrite:
        raise ValidationError(
            f"Checkpoint {directory.name!r} already exists in {directory.parent}; "
            "pass overwrite=True or choose another name.",
            code="validation.checkpoint_exists",
        )

    def write(tmp: Path) -> None:
        tmp.mkdir()
        flat = {
            PEFT_PREFIX + k: v.detach().contiguous().cpu() for k, v in tensors.items()
        }
        save_file(flat, str(tmp / ADAPTER_FILE), metadata={"format": "pt"})
        peft_config.save_pretrained(str(tmp))
        info = {"format": FORMAT, "created": time.time(), **meta}
        (tmp / META_FILE).write_text(json.dumps(info, indent=2) + "\n")
        if optimizer_state is not None:
            torch.save(optimizer_state, tmp / OPTIMIZER_FILE)

    write_atomically(directory, write)
    return sum(f.stat().st_size for f in directory.iterdir() if f.is_file())


def load_checkpoint(
    uri: str, with_optimizer: bool = False
) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, Any] | None]:
    """Read a checkpoint: ``(meta, lora_tensors, optimizer_state or None)``.

    Raises:
        ValidationError: no checkpoint there, or ``with_optimizer`` and the
            checkpoint holds sampler weights only.
    """
    from safetensors.torch import load_file

    path = from_uri(uri)
    meta = json.loads((path / META_FILE).read_text())
    raw = load_file(str(path / ADAPTER_FILE))
    tensors = {k.removeprefix(PEFT_PREFIX): v for k, v in raw.items()}
    optimizer_state = None
    if with_optimizer:
        opt_path = path / OPTIMIZER_FILE
        if not opt_path.is_file():
            raise ValidationError(
                f"{uri} holds sampler weights only (no optimizer state); save it "
                "with save_state(...) to resume with load_state_with_optimizer.",
                code="validation.checkpoint_missing_optimizer",
            )
        optimizer_state = torch.load(opt_path, map_location="cpu", weights_only=True)
    return meta, tensors, optimizer_state


def load_snapshot(uri: str, base_model: str, device: Any) -> AdapterSnapshot:
    """The LoRA weights of a checkpoint, as a frozen snapshot on ``device``.

    Args:
        uri: the checkpoint (``local://...``, ``file://...`` or a path).
        base_model: the base model the sampler runs (its canonical name).
        device: where the tensors go (the model host's device).

    Raises:
        ValidationError: no checkpoint there, or one trained on another base model.
    """
    meta, tensors, _ = load_checkpoint(uri)
    if canonical_name(meta["base_model"]) != base_model:
        raise ValidationError(
            f"Checkpoint {uri} was trained on {meta['base_model']!r}, not "
            f"{base_model!r}.",
            code="validation.checkpoint_config_mismatch",
        )
    spec = LoraSpec(
        int(meta["rank"]),
        bool(meta["train_mlp"]),
        bool(meta["train_attn"]),
        bool(meta["train_unembed"]),
    )
    # Keep the saved dtype (LoRA weights stay float32 even on a bf16 base model).
    tensors = {k: v.to(device=device) for k, v in tensors.items()}
    return AdapterSnapshot(spec, tensors, base_model, name=str(meta.get("name", "")))
