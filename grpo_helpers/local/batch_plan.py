"""Planning the forward passes: which Datums share a prefix, and how to batch them.

In GRPO the Datums of one group are ``prompt + completion_i[:-1]``: the same prompt
(about 200 tokens in this series) followed by different completions (about 50).
Run one by one, a group of 8 recomputes the prompt 8 times: about 80% of the work.
The local engine instead computes each shared prefix once, keeps its keys and
values, and runs every completion on top of them (see
``grpo_helpers.local.forward``). This module only plans: *which* Datums share
*how many* tokens, and how items are batched; it knows nothing about models.

The plan minimises the number of token positions the model must compute. Sorted
lexicographically, Datums with a common prefix sit next to each other, and the common
prefix of a run of neighbours is the smallest common prefix of adjacent pairs; a
small dynamic programme then cuts the sorted list into runs. A run of ``n`` Datums
sharing ``p`` tokens costs ``overhead + p + sum(len_i - p)`` positions; a Datum on
its own costs ``len``. Every member keeps at least one token of its own (``p <=
min(len_i) - 1``), so each member has a suffix to run.

:func:`plan_chunks` is the engine's one packer: it cuts items into right-padded
batches under a token budget, for the suffixes that run on a shared prefix, the
plain micro-batches of whole Datums (``forward.micro_batches``) and the prompts
that ``compute_logprobs`` scores on a shared prefix.

Example::

    >>> plan = plan_shared_prefixes([[1, 2, 3, 4], [1, 2, 3, 5], [9]], overhead=0)
    >>> [(g.prefix_len, g.members) for g in plan]
    [(3, [0, 1]), (0, [2])]

Introduced in: 05_sync_training_loop.ipynb (the engine's speed, not the maths)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Extra cost, in token positions, of running a shared prefix as its own forward
#: pass: below this saving, Datums run on their own (plain batched path).
DEFAULT_OVERHEAD = 16


@dataclass(frozen=True)
class PrefixGroup:
    """Datums that share their first ``prefix_len`` tokens.

    Attributes:
        prefix_len: tokens computed once for all members (0: no sharing, a
            singleton that runs on the plain path).
        members: indices into the Datum list, in sorted token order.
    """

    prefix_len: int
    members: list[int]

    @property
    def shared(self) -> bool:
        return self.prefix_len > 0 and len(self.members) > 1


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """The number of leading tokens ``a`` and ``b`` have in common.

    Example::

        >>> common_prefix_len([1, 2, 3], [1, 2, 4, 5])
        2
    """
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def plan_shared_prefixes(
    sequences: Sequence[Sequence[int]], overhead: int = DEFAULT_OVERHEAD
) -> list[PrefixGroup]:
    """Partition Datums into groups that compute a common prefix once.

    Args:
        sequences: each Datum's ``model_input`` tokens (non-empty).
        overhead: the cost, in token positions, of one extra prefix pass.

    Returns:
        Groups covering every index exactly once. Groups with ``prefix_len > 0``
        have at least two members, and ``prefix_len < len(sequence)`` for each.
        The total cost ``sum(overhead + p + sum(len - p))`` (singletons: ``len``)
        is the least over all partitions of the sorted order into runs.
    """
    order = sorted(range(len(sequences)), key=lambda i: tuple(sequences[i]))
    n = len(order)
    lengths = [len(sequences[i]) for i in order]
    adjacent = [
        common_prefix_len(sequences[order[k]], sequences[order[k + 1]])
        for k in range(n - 1)
    ]
    # best[j]: least cost of the first j sorted Datums; cut[j]: where its last run
    # starts, and the prefix that run shares.
    best = [0] * (n + 1)
    cut: list[tuple[int, int]] = [(0, 0)] * (n + 1)
    for j in range(1, n + 1):
        best[j] = best[j - 1] + lengths[j - 1]  # Datum j-1 on its own
        cut[j] = (j - 1, 0)
        lcp = None
        shortest = lengths[j - 1]
        total = lengths[j - 1]
        for i in range(j - 2, -1, -1):  # the run i .. j-1
            lcp = adjacent[i] if lcp is None else min(lcp, adjacent[i])
            shortest = min(shortest, lengths[i])
            total += lengths[i]
            p = min(lcp, shortest - 1)
            if p <= 0:
                break
            size = j - i
            cost = best[i] + overhead + p + total - size * p
            if cost < best[j]:
                best[j] = cost
                cut[j] = (i, p)
    groups: list[PrefixGroup] = []
    j = n
    while j > 0:
        i, p = cut[j]
        members = order[i:j]
        if p > 0:
            groups.append(PrefixGroup(p, members))
        else:
            groups.extend(PrefixGroup(0, [m]) for m in members)
        j = i
    groups.reverse()
    return groups


def plan_chunks(
    lengths: Sequence[int], budget: int, overhead: int = DEFAULT_OVERHEAD
) -> list[list[int]]:
    """Cut items into right-padded batches that waste the fewest positions.

    Items sorted by length are cut into runs; a run of ``n`` items whose longest
    has ``w`` tokens costs ``n * w`` padded positions plus ``overhead`` (one more
    forward pass), and holds at most ``budget`` padded positions (a longer item
    gets a batch of its own).

    Args:
        lengths: each item's length.
        budget: most padded positions in one batch.
        overhead: the cost of one more batch, in positions.

    Returns:
        Batches of item indices, each sorted by length.

    Example::

        >>> plan_chunks([64, 8, 60, 9], budget=1024, overhead=16)
        [[1, 3], [2, 0]]
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    n = len(order)
    best = [0] * (n + 1)
    start = [0] * (n + 1)
    for j in range(1, n + 1):
        width = lengths[order[j - 1]]  # the run i .. j-1 is padded to its last item
        best[j] = -1
        for i in range(j - 1, -1, -1):
            size = j - i
            if size > 1 and size * width > budget:
                break
            cost = best[i] + size * width + overhead
            if best[j] < 0 or cost < best[j]:
                best[j], start[j] = cost, i
    chunks = []
    j = n
    while j > 0:
        chunks.append(order[start[j] : j])
        j = start[j]
    return chunks[::-1]


def positions_computed(
    sequences: Sequence[Sequence[int]], groups: Sequence[PrefixGroup]
) -> int:
    """Token positions a plan computes (the plain path computes ``sum(len)``)."""
    total = 0
    for g in groups:
        if g.shared:
            total += g.prefix_len + sum(
                len(sequences[m]) - g.prefix_len for m in g.members
            )
        else:
            total += sum(len(sequences[m]) for m in g.members)
    return total


__all__ = [
    "DEFAULT_OVERHEAD",
    "PrefixGroup",
    "common_prefix_len",
    "plan_chunks",
    "plan_shared_prefixes",
    "positions_computed",
]
