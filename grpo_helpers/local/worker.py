"""The local engine's one compute thread: every torch job of the engine runs on it.

The client API returns futures, so the engine's work runs off the caller's thread.
It runs on *one* thread for the whole process, whatever the number of clients and
models: loading a model, every ``sample`` batch (``host.SamplingScheduler``), and
every training client's calls, in the order they were submitted.

Why one. torch's CPU operators run on OpenMP (GNU libgomp in the PyPI wheels), and
each thread that starts parallel work gets a team of helper threads of its own.
While a process holds more of them than it has cores, libgomp lets an idle helper
spin only briefly before it sleeps, and every operator then pays for waking it: a
decoding step is hundreds of small operators. On this project's 2-core machine a
SmolLM2 decoding step of 8 rows took about 1.5x as long on a second thread of a
process whose main thread had run torch work as on the main thread alone
(``python bench/engine_threads.py``). With every job on one thread, one team serves
them all.

A job that the compute thread itself submits runs at once, in place: waiting for the
thread from the thread would never end. A forked child starts a thread of its own.

Introduced in: 06_async_training_loop.ipynb (the engine's speed, not the maths)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_ident: int | None = None  # the compute thread's, once it has started


def _started() -> None:
    global _ident
    _ident = threading.get_ident()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                1, thread_name_prefix="grpo-local-engine", initializer=_started
            )
        return _pool


def _forget() -> None:
    """In a forked child: the parent's thread does not exist here."""
    global _pool, _ident, _lock
    _pool, _ident, _lock = None, None, threading.Lock()


os.register_at_fork(after_in_child=_forget)


def on_compute_thread() -> bool:
    """Whether the calling thread is the engine's compute thread."""
    return _ident is not None and threading.get_ident() == _ident


def submit(fn: Callable[..., T], *args: Any) -> Future[T]:
    """Queue ``fn(*args)`` on the compute thread; its future.

    Example:
        >>> submit(sum, [1, 2, 3]).result()
        6
        >>> submit(on_compute_thread).result(), on_compute_thread()
        (True, False)
    """
    if on_compute_thread():
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - the caller's future holds it
            future.set_exception(exc)
        return future
    return _executor().submit(fn, *args)


def run(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the compute thread, waited for."""
    return submit(fn, *args).result()


__all__ = ["on_compute_thread", "run", "submit"]
