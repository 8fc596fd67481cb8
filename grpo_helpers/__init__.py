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
============================  ==========================================  ===========

Import a module and call through it (``from grpo_helpers import rewards``, then
``rewards.grade_answer(...)``), or take the most used functions from the top level.
Importing the package is light: it does not import torch or transformers.

Introduced in: 01_gsm8k_dataset.ipynb
"""

from grpo_helpers import advantages, data, datum, prompts, rewards
from grpo_helpers.advantages import group_advantages
from grpo_helpers.data import extract_gsm8k_answer, load_gsm8k
from grpo_helpers.datum import RolloutSample, build_grpo_datum
from grpo_helpers.prompts import build_prompt
from grpo_helpers.rewards import extract_boxed, grade_answer, shaped_reward

__all__ = [
    "RolloutSample",
    "advantages",
    "build_grpo_datum",
    "build_prompt",
    "data",
    "datum",
    "extract_boxed",
    "extract_gsm8k_answer",
    "grade_answer",
    "group_advantages",
    "load_gsm8k",
    "prompts",
    "rewards",
    "shaped_reward",
]
