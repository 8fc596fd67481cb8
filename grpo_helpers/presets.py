"""The series' named runs, defined once: the notebooks and the benches read them.

* ``NOTEBOOK``: notebook 05's full-size run on the local engine, what ``make
  series`` trains and the baseline of notebook 09's ablation; ``NOTEBOOK_EVAL``:
  how notebook 07 scores a run.
* ``DEMO``: the README's longer CPU run (``bench/cpu_grpo_demo.py --preset demo``),
  scored as ``DEMO_EVAL`` says.
* ``FAST_NOTEBOOK``, ``FAST_EVAL``: what fast mode (``GRPO_FAST=1``) changes in
  them, and the benches' ``--quick`` smoke runs.
* ``PYTRIO``: the article's run (Qwen3.5-4B on GSM8K), for the same notebooks on
  PyTRIO; ``GPU``: the local engine on one GPU.

A run's keys are ``GRPOConfig`` fields; an evaluation's are :data:`EVAL_KEYS`.

The notebooks' ``parameters`` cells spell the values out, one knob per line, so a
learner can read and change them; a test checks that they equal these.

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from grpo_helpers.config import EvalConfig, knobs
from grpo_helpers.settings import FAST, SMOLLM2

__all__ = [
    "BACKEND_PRESETS",
    "DEMO",
    "DEMO_EVAL",
    "EVAL_KEYS",
    "FAST_EVAL",
    "FAST_NOTEBOOK",
    "GPU",
    "NOTEBOOK",
    "NOTEBOOK_EVAL",
    "PYTRIO",
    "backend_overrides",
    "notebook_eval",
    "notebook_run",
]

#: Notebook 05's full-size run: ``GRPOConfig`` fields (the sync loop).
NOTEBOOK: dict[str, Any] = {
    "dataset": "arithmetic",
    "difficulty": 1,
    "steps": 30,
    "batch_size": 2,
    "group_size": 8,
    "max_tokens": 48,
    "temperature": 0.6,
    "lora_rank": 16,
    "learning_rate": 3e-4,
    # a boxed right answer pays only as the written result of a calculation shown
    # in the completion, never as a bare guess (rewards.shown_work_reward; the
    # choice and its evidence: docs/results.md)
    "reward": "shown_work",
}

#: How a run is scored: greedy, on the first 100 questions of the final test split
#: (``arithmetic.arithmetic_split``), at most 64 tokens per answer; and on GSM8K's own
#: ``test[:100]`` with at most ``gsm8k_max_tokens`` (notebook 08, section 3, says what
#: that budget cuts off).
NOTEBOOK_EVAL: dict[str, Any] = {
    "split": "test",
    "eval_questions": 100,
    "eval_max_tokens": 64,
    "gsm8k_questions": 100,
    "gsm8k_max_tokens": 128,
}

#: The README's longer CPU run: notebook 06's loop (async) at notebook 05's settings
#: with 44 steps, completions of at most 32 tokens, temperature 0.8, learning rate
#: 4e-4 and the right_answer reward, sized for 15 minutes per seed on 2 cores.
DEMO: dict[str, Any] = {
    **NOTEBOOK,
    "steps": 44,
    "max_tokens": 32,
    "temperature": 0.8,
    "learning_rate": 4e-4,
    "reward": "right_answer",
}
#: How the demo run is scored: 200 held-out problems, no GSM8K.
DEMO_EVAL: dict[str, Any] = {
    "split": "test",
    "eval_questions": 200,
    "eval_max_tokens": 64,
    "gsm8k_questions": 0,
    "gsm8k_max_tokens": 0,
}

#: The article's run on PyTRIO: 50 steps of 2 prompts x 16 completions on GSM8K,
#: scored on GSM8K ``test[:100]`` with at most 512 tokens.
PYTRIO: dict[str, Any] = {
    "base_model": "Qwen/Qwen3.5-4B",
    "dataset": "gsm8k",
    "steps": 50,
    "batch_size": 2,
    "group_size": 16,
    "max_tokens": 512,
    "temperature": 1.0,
    "lora_rank": 16,
    "learning_rate": 4e-5,
    "reward": "shaped",  # the article's train.py reward
    "eval_questions": 100,
    "eval_max_tokens": 512,
}

#: What a notebook's ``backend`` parameter changes: nothing on the local engine,
#: the article's settings on PyTRIO.
BACKEND_PRESETS: dict[str, dict[str, Any]] = {"local": {}, "pytrio": PYTRIO}
#: Keys of the presets that say how a run is scored, not how it trains: the
#: fields of ``EvalConfig`` that are not a run's (``temperature`` is both, and in a
#: run preset it is the run's).
EVAL_KEYS = tuple(
    f.name for f in fields(EvalConfig) if f.name not in {g.name for g in knobs()}
)


def backend_overrides(backend: str) -> dict[str, Any]:
    """What ``backend`` changes in a run's ``GRPOConfig`` fields (notebooks 05 and
    06): nothing on the local engine, the article's run on PyTRIO.

    Example:
        >>> backend_overrides("local"), backend_overrides("pytrio")["group_size"]
        ({}, 16)
    """
    return {k: v for k, v in BACKEND_PRESETS[backend].items() if k not in EVAL_KEYS}


#: What fast mode (``GRPO_FAST=1``) changes in :data:`NOTEBOOK`: the tiny random
#: model, two steps of a few tokens, and the shaped reward (random text is never
#: right, so only the shaped reward gives its groups a spread to learn from).
FAST_NOTEBOOK: dict[str, Any] = {
    "base_model": "tiny-random",
    "steps": 2,
    "group_size": 4,
    "max_tokens": 8,
    "reward": "shaped",
}
#: What fast mode changes in :data:`NOTEBOOK_EVAL`: a few questions, few tokens.
FAST_EVAL: dict[str, Any] = {
    "eval_questions": 8,
    "eval_max_tokens": 8,
    "gsm8k_questions": 4,
    "gsm8k_max_tokens": 8,
}


def notebook_run(fast: bool | None = None) -> dict[str, Any]:
    """Notebook 05's run as ``GRPOConfig`` fields, with the model named; smaller in
    fast mode (``fast=None`` reads ``GRPO_FAST``).

    Example:
        >>> notebook_run(fast=True)["base_model"], notebook_run(fast=False)["steps"]
        ('tiny-random', 30)
    """
    fast = FAST if fast is None else fast
    return {"base_model": SMOLLM2, **NOTEBOOK, **(FAST_NOTEBOOK if fast else {})}


def notebook_eval(fast: bool | None = None) -> dict[str, Any]:
    """How notebook 07 scores a run (:data:`NOTEBOOK_EVAL`), smaller in fast mode;
    valid ``EvalConfig`` fields (checked)."""
    fast = FAST if fast is None else fast
    values = {**NOTEBOOK_EVAL, **(FAST_EVAL if fast else {})}
    EvalConfig(**values)  # each value within its knob's range
    return values


#: The local engine on one GPU: Qwen2.5-0.5B-Instruct on GSM8K itself. NOT YET
#: MEASURED: no run on a GPU has recorded its result, its time or its memory
#: (``docs/beyond-the-laptop.md`` gives the estimate and the commands).
#: Qwen2 is not a Llama-style model, so it samples on the plain path (LoRA
#: unmerged), as every model in bfloat16 does (``local.decoder.choose_sampler``).
GPU: dict[str, Any] = {
    "base_model": "Qwen/Qwen2.5-0.5B-Instruct",
    "dataset": "gsm8k",
    "steps": 100,
    "batch_size": 8,
    "group_size": 8,
    "max_tokens": 256,
    "temperature": 1.0,
    "lora_rank": 32,
    "learning_rate": 5e-5,
    "reward": "right_answer",
    "eval_questions": 200,
    "eval_max_tokens": 256,
}
