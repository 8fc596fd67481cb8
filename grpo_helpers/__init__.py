r"""grpo_helpers: the code the grpo-notebooks series teaches, ready to import.

Each notebook writes a step of GRPO out in full, then later notebooks import it from
here. The core, at the top of the package, reads as the data flows::

    GSM8K row -> prompt tokens -> G completions -> rewards -> advantages -> Datums
              -> forward_backward + optim_step -> metrics -> run directory, plots

==============  ===================================================  ========
module          what it holds                                        notebook
==============  ===================================================  ========
``settings``    the environment: fast mode, the engine, run folders  01
``data``        GSM8K: load it, read ``####`` answers, batches       01
``arithmetic``  easy word problems in GSM8K's format                 01
``prompts``     few-shot chat, ``\boxed{}`` suffix, tokens           01, 02
``rewards``     extract ``\boxed{}``, the rewards                    02
``advantages``  reward - group mean, degenerate groups, KL           03, 09
``datum``       prompt + completion[:-1] -> ``pytrio.Datum``         04
``engines``     ``connect``: PyTRIO's or the local engine            04
``config``      a run's settings, each knob written once             05
``presets``     the named runs (notebook, PyTRIO, GPU)               05
``rollout``     groups of completions, sync and async                05, 06
``step_math``   a step's Datums, metrics, ratios, KL                 05, 09
``run_files``   the run directory: write, resume, read               05
``training``    the sync and async loops                             05, 06
``plotting``    every figure of the series                           all
==============  ===================================================  ========

Beside the core, ``provenance`` (what a run was made with), ``tracking``
(SwanLab), ``atomic_write`` (the one atomic writer) and ``cli``; ``local/`` is the
local engine. Three wings serve others and import the core, never the other way:
``results/`` (evaluation, statistics, recorded runs: notebooks 07-09),
``classroom/`` (exercise checks, hidden tests, grading, the course site) and
``trl/`` (the run on Hugging Face TRL, and its weights out). ``docs/package.md``
has every module.

Import a module and call through it (``from grpo_helpers import rewards``, then
``rewards.grade_answer(...)``; ``from grpo_helpers.results import stats``).
Importing the package imports none of its modules (they load on first use), so
the local engine (``grpo_helpers.local``) loads the environment's settings and never
the rewards or the prompts; nor does it import torch or transformers.

Introduced in: 01_gsm8k_dataset.ipynb
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

_MODULES = ("advantages", "data", "datum", "prompts", "rewards")

__all__ = sorted(_MODULES)


def __getattr__(name: str) -> Any:
    """A core module, imported on first use."""
    if name in _MODULES:
        module: ModuleType = importlib.import_module(f"{__name__}.{name}")
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
