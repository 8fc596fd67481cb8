"""grpo_helpers.local.batch_plan: which Datums share a prefix, and the one packer
of micro-batches within their budget."""

from __future__ import annotations

import pytest
import torch
from local_engine import grpo_batch, random_tokens

from grpo_helpers.local import batch_plan

# ------------------------------------------------------------------ the plan


def test_plan_shares_each_prompt_once():
    prompt_a, prompt_b = list(range(100, 130)), list(range(200, 230))
    seqs = [prompt_a + [1, 2], prompt_b + [3], prompt_a + [4, 5, 6], prompt_b + [7]]
    plan = batch_plan.plan_shared_prefixes(seqs)
    shared = sorted((g.prefix_len, sorted(g.members)) for g in plan if g.shared)
    assert shared == [(30, [0, 2]), (30, [1, 3])]
    assert batch_plan.positions_computed(seqs, plan) == 30 + 2 + 3 + 30 + 1 + 1


def test_plan_covers_everything_and_keeps_a_suffix():
    gen = torch.Generator().manual_seed(3)
    base = random_tokens(gen, 40)
    seqs = [base[: int(torch.randint(1, 40, (1,), generator=gen))] for _ in range(9)]
    seqs += [random_tokens(gen, 5), base, base]
    plan = batch_plan.plan_shared_prefixes(seqs)
    members = sorted(m for g in plan for m in g.members)
    assert members == list(range(len(seqs)))
    for g in plan:
        for m in g.members:
            assert g.prefix_len < len(seqs[m])
            assert seqs[m][: g.prefix_len] == seqs[g.members[0]][: g.prefix_len]
    assert batch_plan.positions_computed(seqs, plan) <= sum(map(len, seqs))


def test_plan_leaves_short_or_unrelated_datums_alone():
    assert all(not g.shared for g in batch_plan.plan_shared_prefixes([[1], [2], [3]]))
    # A 3-token common prefix saves less than the extra pass costs.
    plan = batch_plan.plan_shared_prefixes([[1, 2, 3, 4], [1, 2, 3, 5]])
    assert all(not g.shared for g in plan)


@pytest.mark.parametrize("seed", range(20))
def test_plain_micro_batches_come_from_the_one_packer(seed):
    """Whole Datums are batched by ``batch_plan.plan_chunks``, the suffixes' packer:
    every Datum once, a batch within the budget unless it holds one Datum alone."""
    from grpo_helpers.local.forward import micro_batches

    gen = torch.Generator().manual_seed(seed)
    indices = torch.randperm(40, generator=gen)[: 1 + seed].tolist()  # any keys
    lengths = {i: int(torch.randint(1, 300, (1,), generator=gen)) for i in indices}
    budget = int(torch.randint(16, 1024, (1,), generator=gen))
    batches = micro_batches(lengths, budget)
    keys = list(lengths)
    chunks = batch_plan.plan_chunks([lengths[i] for i in keys], budget)
    assert batches == [[keys[k] for k in chunk] for chunk in chunks]
    assert sorted(i for b in batches for i in b) == sorted(lengths)
    for batch in batches:
        widths = [lengths[i] for i in batch]
        assert widths == sorted(widths)
        assert len(batch) == 1 or len(batch) * max(widths) <= budget


def test_shared_prefix_computes_fewer_positions():
    data = grpo_batch("series", prompts=2, group=8)
    seqs = [d.model_input.to_ints() for d in data]
    plan = batch_plan.plan_shared_prefixes(seqs)
    assert sum(g.shared for g in plan) == 2
    assert batch_plan.positions_computed(seqs, plan) < 0.6 * sum(map(len, seqs))
