"""What the benches share: the project's package, the model's name, the engine.

A bench runs as ``python bench/<name>.py``: this folder comes first on
``sys.path``, so ``import common`` finds this file, which puts the project's root
there too (its ``grpo_helpers``, installed or not). Each bench then builds its
flags with :func:`parser` (``--model``, ``--quick``, ``--json``), names the model
with :func:`model_name` and connects with :func:`connect`. Its last printed line
starts with ``RESULT``; ``--json FILE`` also writes what it returns
(:func:`write_json`), which is how the test suite reads a bench's smoke run
without importing it.

Example::

    >>> p = parser("A bench.\\n", quick="tiny-random, seconds")
    >>> model_name(p.parse_args(["--quick"]))
    'tiny-random'
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from grpo_helpers import engines  # noqa: E402
from grpo_helpers.settings import SETTINGS, SMOLLM2  # noqa: E402

__all__ = [
    "MODEL",
    "PeakMemory",
    "ROOT",
    "TINY",
    "OneGroup",
    "connect",
    "model_name",
    "parser",
    "policy_and_prompts",
    "write_json",
]

#: The model a bench measures unless told otherwise, and the smoke runs' model.
MODEL = SMOLLM2
TINY = "tiny-random"


def parser(
    doc: str | None,
    *,
    model: bool = True,
    quick: str | None = None,
    json_out: bool = True,
) -> argparse.ArgumentParser:
    """A bench's parser: its description (the docstring's first line), and
    ``--model``, ``--quick`` and ``--json`` where it has them.

    Args:
        doc: the bench's module docstring.
        model: add ``--model`` (default :data:`MODEL`).
        quick: the help of ``--quick`` (None: no smoke mode); ``--quick`` runs
            :data:`TINY`.
        json_out: add ``--json FILE`` (:func:`write_json`).
    """
    p = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    if model:
        p.add_argument("--model", default=MODEL, help=f"base model (default {MODEL})")
    if quick is not None:
        p.add_argument("--quick", action="store_true", help=quick)
    if json_out:
        p.add_argument("--json", type=Path, default=None, help="also write as JSON")
    return p


def model_name(args: argparse.Namespace) -> str:
    """The model a run of the bench uses: :data:`TINY` with ``--quick``."""
    if getattr(args, "quick", False):
        return TINY
    return getattr(args, "model", MODEL)


def connect(name: str | None = None, **options: Any) -> Any:
    """The local engine, its checkpoints under ``runs/bench-<name>`` when named."""
    if name is not None:
        options.setdefault("run_dir", SETTINGS.runs_dir / f"bench-{name}")
    return engines.connect("local", **options)


def write_json(args: argparse.Namespace, result: Any) -> Any:
    """Write ``result`` to ``--json`` when given; return it."""
    if getattr(args, "json", None) is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return result


def policy_and_prompts(
    name: str, model: str, prompts: int = 2
) -> tuple[Any, Any, list[list[int]]]:
    """A fresh LoRA policy (rank 16, seed 0) on the local engine, its tokenizer, and
    the first ``prompts`` arithmetic training questions as the series' prompts: the
    sampling benches' starting point."""
    from grpo_helpers import data
    from grpo_helpers import prompts as prompt_module
    from grpo_helpers.config import GRPOConfig

    client = connect(name).create_lora_training_client(model, rank=16, seed=0)
    tokenizer = client.get_tokenizer()
    config = GRPOConfig(backend="local", dataset="arithmetic", seed=0)
    rows = data.load_split(config, "train").select(range(prompts))
    tokens = [prompt_module.build_prompt(tokenizer, r["question"]) for r in rows]
    return client, tokenizer, tokens


class OneGroup:
    """The merged decoder of ``model`` (as the engine builds it) with the series'
    few-shot prompt prefilled once and fanned out to ``rows`` rows (one group), and
    one decoding step's inputs: what the decoding-step benches time.

    :meth:`step` runs that one step again (the cache rewound to the prompt).
    """

    def __init__(self, model: str, rows: int = 8) -> None:
        import torch

        from grpo_helpers import data
        from grpo_helpers import prompts as prompt_module
        from grpo_helpers.config import GRPOConfig
        from grpo_helpers.local import decoder, models

        self.model, tokenizer = models.load_model(model)
        self.decoder = decoder.MergedLlamaDecoder(self.model)
        row = data.load_split(GRPOConfig(dataset="arithmetic"), "train")[0]
        self.prompt = prompt_module.build_prompt(tokenizer, row["question"])
        self.rows = rows
        n = len(self.prompt)
        with torch.no_grad():
            _, self.cache = self.decoder.prefill(*self.prompt_inputs(), n + 8, False)
            self.decoder.select(self.cache, torch.zeros(rows, dtype=torch.long))
        self.tokens = torch.randint(0, self.model.config.vocab_size, (rows,))
        self.mask = torch.ones(rows, n + 1, dtype=torch.long)
        self.positions = torch.full((rows,), n)

    def prompt_inputs(self) -> tuple[Any, Any, Any]:
        """The prompt's ids, attention mask and positions, one row."""
        import torch

        ids = torch.tensor([self.prompt])
        return ids, torch.ones_like(ids), torch.arange(len(self.prompt))[None]

    def step(self) -> Any:
        """One decoding step of every row; its logits ``[rows, V]``."""
        import torch

        self.cache.length = len(self.prompt)
        with torch.no_grad():
            return self.decoder.step(self.tokens, self.mask, self.positions, self.cache)


class PeakMemory:
    """Peak resident memory above the level at entry (MB).

    On Linux the kernel keeps the peak itself (``VmHWM``) and resets it when "5" is
    written to ``/proc/self/clear_refs``: nothing runs beside the timed code.
    Elsewhere a thread polls the resident size every 2 ms.
    """

    _STATUS = Path("/proc/self/status")
    _CLEAR = Path("/proc/self/clear_refs")

    @classmethod
    def _status_mb(cls, key: str) -> float:
        for line in cls._STATUS.read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024  # kB
        raise KeyError(key)

    def __enter__(self) -> PeakMemory:
        import threading

        import psutil

        self.peak_mb = 0.0
        self._process = psutil.Process()
        self._base = self._process.memory_info().rss
        self._thread = None  # None: the kernel's peak is read at exit
        try:
            self._CLEAR.write_text("5")
            reset = self._status_mb("VmHWM") <= self._base / 2**20 + 1
        except OSError:
            reset = False
        if not reset:
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(0.002):
            rss = self._process.memory_info().rss
            self.peak_mb = max(self.peak_mb, (rss - self._base) / 2**20)

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        else:
            self.peak_mb = self._status_mb("VmHWM") - self._base / 2**20
