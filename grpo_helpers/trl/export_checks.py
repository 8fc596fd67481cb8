"""What an export of a run's weights is checked by before it is written.

:func:`check_logprobs` loads the written folder the way another user would
(``peft.PeftModel.from_pretrained`` on the base, or
``transformers.AutoModelForCausalLM.from_pretrained`` on a merged folder) and
compares its logprobs with the local engine's on the run's own prompts and
completions; :func:`held_out_result` scores the base model and the run's weights on
the same held-out questions, for the model card. :mod:`grpo_helpers.trl.export_peft`
writes the folders and refuses an export whose logprobs disagree.

Introduced in: docs/beyond-the-laptop.md (after notebook 09)
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "CHECK_SEQUENCES",
    "HELDOUT_FILE",
    "LOGPROB_TOLERANCE",
    "check_logprobs",
    "engine_logprobs",
    "held_out_result",
    "load_base",
    "load_export",
    "model_logprobs",
    "quiet_transformers",
    "run_sequences",
]

#: Largest |logprob difference| between the export and the engine on the same
#: tokens: float32 rounding (a merged weight sums in another order than base plus
#: LoRA; SmolLM2 agrees to about 5e-5, a merge into its tied embeddings differed
#: by 0.5).
LOGPROB_TOLERANCE = 1e-3
#: Sequences of the run (a prompt and a sampled completion) the check scores.
CHECK_SEQUENCES = 2
#: Where a run keeps its held-out result for the next export.
HELDOUT_FILE = "heldout.json"


def quiet_transformers() -> Any:
    """transformers without its progress bars and info lines."""
    from grpo_helpers.local.models import _quiet_transformers

    return _quiet_transformers()


def load_base(base: dict[str, Any]) -> Any:
    """The base model in float32 on the CPU, as ``from_pretrained`` loads it."""
    import torch
    from transformers import AutoModelForCausalLM

    from grpo_helpers.local.models import load_model

    if base["kind"] == "tiny-random":
        return load_model(base["name"], device="cpu", dtype=torch.float32)[0]
    with quiet_transformers():
        return AutoModelForCausalLM.from_pretrained(
            base["load_from"], dtype=torch.float32
        )


def run_sequences(run: Any, count: int = CHECK_SEQUENCES) -> list[list[int]]:
    """Token ids the check scores (``run``: an ``export_peft.RunWeights``): the
    run's prompts (the series' prompt on its first training rows), each followed
    by a completion the run sampled for it."""
    from grpo_helpers import data, prompts
    from grpo_helpers.local.models import load_tokenizer
    from grpo_helpers.run_files import read_jsonl

    tokenizer = load_tokenizer(run.config.model_name)
    rows = data.load_split(run.config, "train")
    rows = rows.select(range(min(count, len(rows))))
    completions: dict[int, str] = {}
    for sample in read_jsonl(run.run_dir / "samples.jsonl"):
        completions.setdefault(int(sample.get("question_index", -1)), sample["text"])
    out = []
    for i, question in enumerate(rows["question"]):
        tokens = list(prompts.build_prompt(tokenizer, question))
        text = completions.get(i) or next(iter(completions.values()), "")
        tokens += tokenizer.encode(text, add_special_tokens=False)
        out.append(tokens)
    return out


def engine_logprobs(
    base_model: str, uri: str, sequences: list[list[int]], run_dir: Path
) -> list[list[float]]:
    """The local engine's logprobs of each token after the first, with ``uri``'s
    weights (its sampling client's ``compute_logprobs``, float32 on the CPU)."""
    import pytrio as trio

    from grpo_helpers.engines import connect

    service = connect("local", run_dir=run_dir, device="cpu")
    sampler = service.create_sampling_client(base_model=base_model, model_path=uri)
    futures = [
        sampler.compute_logprobs(trio.ModelInput.from_ints(tokens))
        for tokens in sequences
    ]
    return [[float(x) for x in f.result()[1:]] for f in futures]


def model_logprobs(model: Any, sequences: list[list[int]]) -> list[list[float]]:
    """``log p(token t | tokens before t)`` for t >= 1, by a plain forward pass."""
    import torch

    model.eval()
    out = []
    with torch.no_grad():
        for tokens in sequences:
            ids = torch.tensor([tokens])
            logits = model(input_ids=ids).logits[0, :-1].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            out.append(logprobs.gather(1, ids[0, 1:, None])[:, 0].tolist())
    return out


def load_export(folder: Path, kind: str, base: dict[str, Any]) -> Any:
    """The exported model as another user loads it: ``PeftModel.from_pretrained``
    on the base, or ``AutoModelForCausalLM.from_pretrained`` on the merged folder."""
    import warnings

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    if kind == "merged":
        with quiet_transformers():
            return AutoModelForCausalLM.from_pretrained(
                str(folder), dtype=torch.float32
            )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PeftModel.from_pretrained(load_base(base), str(folder))


def check_logprobs(
    folder: Path,
    kind: str,
    run: Any,
    base: dict[str, Any],
    sequences: list[list[int]] | None = None,
) -> dict[str, Any]:
    """Compare the export's logprobs with the engine's on the run's sequences.

    Returns:
        ``{"max_abs_diff", "tokens", "sequences", "tolerance", "ok"}``: ``ok`` is
        False for a difference above :data:`LOGPROB_TOLERANCE`.
    """
    sequences = sequences if sequences is not None else run_sequences(run)
    engine = engine_logprobs(
        run.config.model_name, run.uri, sequences, run.run_dir / "checkpoints"
    )
    exported = model_logprobs(load_export(folder, kind, base), sequences)
    diffs = [
        abs(a - b)
        for row_e, row_x in zip(engine, exported, strict=True)
        for a, b in zip(row_e, row_x, strict=True)
    ]
    check = {
        "max_abs_diff": max(diffs),
        "tokens": len(diffs),
        "sequences": len(sequences),
        "tolerance": LOGPROB_TOLERANCE,
    }
    check["ok"] = check["max_abs_diff"] <= LOGPROB_TOLERANCE
    return check


def held_out_result(run: Any, questions: int, max_tokens: int) -> dict[str, Any] | None:
    """The base model and the run's weights on the same held-out questions.

    Greedy, the first ``questions`` of the run's test split, at most
    ``max_tokens`` per answer (notebook 07's evaluation). Kept in
    ``runs/<name>/heldout.json`` for the same weights and settings, so that a
    second export does not evaluate again.

    Returns:
        Exact accuracies with Wilson intervals, the difference and McNemar's p;
        None when ``questions`` is 0.
    """
    if questions <= 0:
        return None
    from grpo_helpers.atomic_write import write_text_atomically
    from grpo_helpers.data import load_split
    from grpo_helpers.engines import connect
    from grpo_helpers.results import evaluation, report

    settings = {
        "weights": run.uri,
        "split": "test",
        "questions": questions,
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }
    cache = run.run_dir / HELDOUT_FILE
    if cache.is_file():
        saved = json.loads(cache.read_text())
        if saved.get("settings") == settings:
            return saved
    rows = load_split(run.config, "test")
    rows = rows.select(range(min(questions, len(rows))))
    service = connect("local", run_dir=run.run_dir / "checkpoints", device="cpu")
    name = run.config.model_name
    samplers = {
        "base": service.create_sampling_client(base_model=name),
        "trained": service.create_sampling_client(base_model=name, model_path=run.uri),
    }
    tokenizer = samplers["base"].get_tokenizer()
    results = {
        label: evaluation.evaluate(
            sampler,
            tokenizer,
            rows,
            name=label,
            temperature=0.0,
            max_tokens=max_tokens,
            progress=False,
        )
        for label, sampler in samplers.items()
    }
    comparison = report.compare(results["base"], results["trained"], "exact")
    out = {
        "settings": settings,
        "dataset": run.config.dataset,
        "n": comparison.n,
        "base_exact": comparison.base_acc,
        "base_exact_ci": list(results["base"].summary["exact_ci"]),
        "trained_exact": comparison.trained_acc,
        "trained_exact_ci": list(results["trained"].summary["exact_ci"]),
        "difference": comparison.difference,
        "p_value": comparison.p_value,
        "summary_line": comparison.summary_line(),
    }
    write_text_atomically(cache, json.dumps(out, indent=2) + "\n")
    return out
