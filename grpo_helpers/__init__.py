r"""grpo_helpers: the code the grpo-notebooks series teaches, ready to import.

Each notebook writes a step of GRPO out in full, then later notebooks import it from
here. Data flows one way::

    GSM8K row -> prompt tokens -> G completions -> rewards -> advantages -> Datums

============================  ==========================================  ===========
module                        what it does                                notebook
============================  ==========================================  ===========
``grpo_helpers.data``         load GSM8K, read ``####`` answers, batches  01
``grpo_helpers.prompts``      few-shot chat, ``\boxed{}`` suffix, tokens  01, 02
``grpo_helpers.rewards``      extract ``\boxed{}``, the three rewards     02
``grpo_helpers.advantages``   reward - group mean, degenerate groups      03
``grpo_helpers.datum``        prompt + completion[:-1] -> pytrio.Datum    04
``grpo_helpers.arithmetic``   easy word problems in GSM8K's format        01
``grpo_helpers.engines``      ``connect``: PyTRIO's or the local engine   04
``grpo_helpers.rollout``      groups of completions, sync and async       05, 06
``grpo_helpers.step_math``    a step's Datums, metrics, ratios, KL        05, 08
``grpo_helpers.run_files``    the run directory: write, resume, read      05
``grpo_helpers.training``     the sync and async loops                    05, 06
``grpo_helpers.evaluation``   sample and grade held-out questions         07
``grpo_helpers.report``       accuracies with intervals, base vs trained  07
``grpo_helpers.stats``        Wilson, McNemar, bootstrap, pass@k, maj@k   07
``grpo_helpers.plotting``     every figure of the series                  all
============================  ==========================================  ===========

One module per idea; the README's "How the code is organised" has them all.

Import a module and call through it (``from grpo_helpers import rewards``, then
``rewards.grade_answer(...)``), or take the most used functions from the top level.
Importing the package imports none of its modules (they load on first use), so
the local engine (``grpo_helpers.local``) loads the environment's settings and
never the rewards or the prompts; nor does it import torch or transformers.

Introduced in: 01_gsm8k_dataset.ipynb
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

#: The most used functions, by the module that defines them: loaded on first use.
_SHORTCUTS = {
    "RolloutSample": "datum",
    "build_grpo_datum": "datum",
    "build_prompt": "prompts",
    "extract_boxed": "rewards",
    "extract_gsm8k_answer": "data",
    "grade_answer": "rewards",
    "group_advantages": "advantages",
    "load_gsm8k": "data",
    "shaped_reward": "rewards",
}
_MODULES = ("advantages", "data", "datum", "prompts", "rewards")

__all__ = sorted([*_MODULES, *_SHORTCUTS])


def __getattr__(name: str) -> Any:
    """A core module, or one of its most used functions, imported on first use."""
    if name in _MODULES:
        module: ModuleType = importlib.import_module(f"{__name__}.{name}")
        return module
    if name in _SHORTCUTS:
        module = importlib.import_module(f"{__name__}.{_SHORTCUTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
