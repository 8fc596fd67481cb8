"""How often each of the engine's paths ran: counters for tests and benches.

The shared-prefix paths are chosen by a cost estimate
(``batch_plan.plan_shared_prefixes`` for training and scoring,
``prompt_cache.shared_prefix_len`` for sampling), so a test that compares a fast path
with the plain one must also know that the fast path ran: otherwise it may compare the
plain path with itself. The engine adds one to a counter each time it takes a path.
Nothing but tests and benches reads them, and they change no number a caller sees.

Counters (one set per process, for every engine and model host together):

============================== =========================================================
``training_shared_groups``     Datums trained on a prefix computed once
                               (``forward._forward_shared``)
``training_shared_chunks``     chunks of suffixes run on top of such a prefix
``training_plain_batches``     micro-batches of whole Datums
                               (``forward._forward_plain``)
``sampling_shared_prefills``   sampling batches whose common prompt start was prefilled
                               once (``sampling.generate``)
``sampling_plain_prefills``    sampling batches prefilled as left-padded prompts
``sampling_recalled_prefills`` sampling batches whose prompt start (one prompt's, or
                               the start all share) came from the decoder's memory of
                               an earlier prompt (``decoder.recall``)
``sampling_held_batches``      sampling batches decoded with packed products, finished
                               rows kept in the batch (``decoder.prepare``)
``sampling_shrinking_batches`` sampling batches whose finished rows left the batch
``scoring_shared_groups``      ``compute_logprobs`` groups scored on a shared prefix
``scoring_plain_prompts``      prompts scored alone (``sampling.score_prompts``)
============================== =========================================================

Example::

    >>> from grpo_helpers.local import counters
    >>> with counters.counting() as seen:
    ...     counters.add("training_plain_batches")
    >>> seen["training_plain_batches"], seen["training_shared_groups"]
    (1, 0)

Introduced in: tests/local/test_forward.py and test_prompt_cache.py (not taught in a
notebook)
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator

NAMES = (
    "training_shared_groups",
    "training_shared_chunks",
    "training_plain_batches",
    "sampling_shared_prefills",
    "sampling_plain_prefills",
    "sampling_recalled_prefills",
    "sampling_held_batches",
    "sampling_shrinking_batches",
    "scoring_shared_groups",
    "scoring_plain_prompts",
)

_counts: Counter[str] = Counter()
_lock = threading.Lock()


def add(name: str, n: int = 1) -> None:
    """Count ``n`` more runs of the path ``name`` (one of :data:`NAMES`)."""
    if name not in NAMES:
        raise KeyError(f"unknown counter {name!r}; one of {', '.join(NAMES)}")
    with _lock:
        _counts[name] += n


def snapshot() -> dict[str, int]:
    """Every counter's value now."""
    with _lock:
        return {name: _counts[name] for name in NAMES}


@contextlib.contextmanager
def counting() -> Iterator[dict[str, int]]:
    """Yield a dict that, when the block ends, holds what each counter gained in it.

    Wait for the block's futures inside it: the sampler and the training worker
    count on their own threads, before they hand a result back.
    """
    before = snapshot()
    seen = dict.fromkeys(NAMES, 0)
    try:
        yield seen
    finally:
        after = snapshot()
        seen.update({name: after[name] - before[name] for name in NAMES})


__all__ = ["NAMES", "add", "counting", "snapshot"]
