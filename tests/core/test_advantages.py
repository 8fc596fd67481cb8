"""Unit and property tests of grpo_helpers.advantages (notebook 03)."""

from __future__ import annotations

import doctest
import math
import statistics
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_helpers import advantages
from grpo_helpers.advantages import (
    ADVANTAGE_SCALES,
    batch_summary,
    degenerate_probability,
    group_advantages,
    is_degenerate,
)

REWARD = st.floats(min_value=-10.0, max_value=10.0, allow_nan=False)


GROUP = st.lists(REWARD, min_size=1, max_size=16)


def test_doctests_pass() -> None:
    result = doctest.testmod(advantages)
    assert result.failed == 0 and result.attempted > 0


def test_worked_example_from_the_article() -> None:
    # notebook 03 / the article: mean 0.55, advantages [0.45, 0.45, -0.35, -0.55]
    result = group_advantages([1.0, 1.0, 0.2, 0.0])
    assert result == pytest.approx([0.45, 0.45, -0.35, -0.55], abs=1e-12)


def test_binary_group_example() -> None:
    assert group_advantages([1.0, 0.0, 0.0, 0.0]) == pytest.approx(
        [0.75, -0.25, -0.25, -0.25]
    )


def test_group_scaling_divides_by_population_std() -> None:
    rewards = [1.0, 0.0, 1.0, 0.0]  # mean 0.5, population std 0.5
    result = group_advantages(rewards, scale="group", eps=0.0)
    assert result == pytest.approx([1.0, -1.0, 1.0, -1.0])
    with_eps = group_advantages(rewards, scale="group")  # eps=1e-4
    assert with_eps == pytest.approx([0.5 / (0.5 + 1e-4), -0.5 / (0.5 + 1e-4)] * 2)


@pytest.mark.parametrize("scale", ADVANTAGE_SCALES)
@pytest.mark.parametrize("rewards", [[0.0] * 4, [1.0] * 8, [0.1 + 0.2] * 3, [7.5]])
def test_degenerate_group_gives_exact_zeros(rewards: list[float], scale: str) -> None:
    result = group_advantages(rewards, scale=scale)
    assert result == [0.0] * len(rewards)
    assert all(type(a) is float for a in result)
    assert is_degenerate(rewards)


def test_is_degenerate() -> None:
    assert is_degenerate([1.0, 1.0])
    assert not is_degenerate([1.0, 0.0])
    assert is_degenerate([0.3])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: group_advantages([]), "empty group"),
        (lambda: group_advantages([1.0, math.nan]), "finite"),
        (lambda: group_advantages([1.0, math.inf]), "finite"),
        (lambda: group_advantages([1.0, 0.0], scale="batch"), "'none', 'group'"),
        (lambda: group_advantages([1.0, 0.0], eps=-1.0), "eps"),
        (lambda: group_advantages([1.0, 0.0], eps=math.nan), "eps"),
        (lambda: is_degenerate([]), "empty group"),
        (lambda: is_degenerate([math.nan]), "finite"),
        (lambda: batch_summary([]), "at least one group"),
        (lambda: batch_summary([[1.0], []]), "empty group"),
        (lambda: batch_summary([[1.0, -math.inf]]), "finite"),
        (lambda: degenerate_probability(1.5, 4), "pass_rate"),
        (lambda: degenerate_probability(-0.1, 4), "pass_rate"),
        (lambda: degenerate_probability(0.5, 0), "group_size"),
        (lambda: degenerate_probability(0.5, 2.0), "group_size"),
    ],
)
def test_validation_errors(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_degenerate_probability_examples() -> None:
    # the notebook's example: a question the model gets right 90% of the time
    assert degenerate_probability(0.9, 4) == pytest.approx(0.9**4 + 0.1**4)
    assert degenerate_probability(0.9, 4) == pytest.approx(0.6562)
    assert degenerate_probability(0.5, 2) == 0.5
    assert degenerate_probability(0.0, 16) == 1.0
    assert degenerate_probability(1.0, 16) == 1.0
    assert degenerate_probability(0.3, 1) == 1.0  # a group of one never has signal
    # bigger groups are degenerate less often
    assert degenerate_probability(0.9, 16) < degenerate_probability(0.9, 4)


def test_degenerate_probability_matches_simulation() -> None:
    import random

    rng = random.Random(0)
    p, group_size, trials = 0.8, 4, 20_000
    hits = 0
    for _ in range(trials):
        successes = sum(rng.random() < p for _ in range(group_size))
        hits += successes in (0, group_size)  # all wrong or all right
    # by hand: 0.8**4 + 0.2**4 = 0.4096 + 0.0016
    assert degenerate_probability(p, group_size) == pytest.approx(0.4112)
    assert hits / trials == pytest.approx(0.4112, abs=0.02)


def test_batch_summary_frac_example() -> None:
    # 4 prompts, group size 2: all right, mixed, all wrong, all wrong
    summary = batch_summary([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    assert summary == {
        "frac_degenerate": 0.75,
        "group_reward_std": pytest.approx(0.125),
        "reward_mean": pytest.approx(0.375),
    }


def test_batch_summary_reward_mean_is_mean_of_group_means() -> None:
    summary = batch_summary([[1.0], [0.0, 0.0, 0.0]])
    assert summary["reward_mean"] == pytest.approx(0.5)
    assert summary["frac_degenerate"] == 1.0
    assert summary["group_reward_std"] == 0.0


@settings(max_examples=300, deadline=None)
@given(GROUP, st.sampled_from(ADVANTAGE_SCALES))
def test_advantages_sum_to_zero(rewards: list[float], scale: str) -> None:
    result = group_advantages(rewards, scale=scale)
    assert len(result) == len(rewards)
    assert all(math.isfinite(a) for a in result)
    assert math.fsum(result) == pytest.approx(0.0, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(GROUP)
def test_advantages_preserve_order_and_shift(rewards: list[float]) -> None:
    result = group_advantages(rewards)
    if len(set(rewards)) == 1:  # all equal: no signal, exact zeros
        assert result == [0.0] * len(rewards)
    else:
        mean = math.fsum(rewards) / len(rewards)
        for reward, advantage in zip(rewards, result, strict=True):
            assert advantage == pytest.approx(reward - mean, abs=1e-12)
    # a better reward never gets a smaller advantage
    order = sorted(range(len(rewards)), key=rewards.__getitem__)
    ranked = [result[i] for i in order]
    assert ranked == sorted(ranked)


@settings(max_examples=200, deadline=None)
@given(st.lists(REWARD, min_size=2, max_size=16))
def test_group_scaled_advantages_have_unit_std(rewards: list[float]) -> None:
    result = group_advantages(rewards, scale="group", eps=0.0)
    if statistics.pstdev(rewards) < 1e-6:  # equal rewards (or nearly): no scale
        return
    assert statistics.pstdev(result) == pytest.approx(1.0, rel=1e-6)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.0, max_value=1.0), st.integers(1, 64))
def test_degenerate_probability_in_unit_interval(p: float, group_size: int) -> None:
    value = degenerate_probability(p, group_size)
    assert 0.0 <= value <= 1.0 + 1e-12
    assert value >= degenerate_probability(0.5, group_size) - 1e-12


@settings(max_examples=100, deadline=None)
@given(st.lists(GROUP, min_size=1, max_size=8))
def test_batch_summary_properties(groups: list[list[float]]) -> None:
    summary = batch_summary(groups)
    assert set(summary) == {"frac_degenerate", "group_reward_std", "reward_mean"}
    assert 0.0 <= summary["frac_degenerate"] <= 1.0
    assert summary["group_reward_std"] >= 0.0
    # by hand: a group is degenerate when all its rewards are equal
    expected = sum(len(set(group)) == 1 for group in groups) / len(groups)
    assert summary["frac_degenerate"] == expected
    stds = [statistics.pstdev(group) for group in groups]
    assert summary["group_reward_std"] == pytest.approx(
        statistics.fmean(stds), abs=1e-9
    )
    means = [statistics.fmean(group) for group in groups]
    assert summary["reward_mean"] == pytest.approx(statistics.fmean(means), abs=1e-9)


# ------------------------------------------------------------------ pure functions


def test_length_scales_by_hand():
    lengths = [2, 4, 10]
    assert advantages.length_scales(lengths, "token_sum") == [1.0, 1.0, 1.0]
    assert advantages.length_scales(lengths, "sequence_mean") == [0.5, 0.25, 0.1]
    assert advantages.length_scales(lengths, "token_mean") == [1 / 16] * 3
    assert advantages.length_scales(lengths, "constant", max_tokens=64) == [1 / 64] * 3
    with pytest.raises(ValueError, match="max_tokens"):
        advantages.length_scales(lengths, "constant")
    with pytest.raises(ValueError, match="Unknown normalization 'mean'"):
        advantages.length_scales(lengths, "mean")
    with pytest.raises(ValueError, match=">= 1"):
        advantages.length_scales([3, 0], "sequence_mean")


def test_what_each_normalisation_does_to_long_and_short_completions():
    """Token-sum weighs a 10-token completion 10 times a 1-token one; sequence
    mean makes both weigh the same in total; token mean and constant weigh every
    token the same (here: the per-completion totals are 1:10 again)."""
    lengths = [1, 10]
    totals = {
        mode: [
            n * s
            for n, s in zip(
                lengths, advantages.length_scales(lengths, mode, 16), strict=True
            )
        ]
        for mode in advantages.NORMALIZATIONS
    }
    assert totals["token_sum"] == [1, 10]
    assert totals["sequence_mean"] == [1, 1]
    assert totals["token_mean"] == pytest.approx([1 / 11, 10 / 11])
    assert totals["constant"] == pytest.approx([1 / 16, 10 / 16])


def test_kl_penalty_by_hand():
    sampled = [[-1.0, -2.0], [-3.0]]
    reference = [[-1.5, -1.0], [-3.5]]
    # d = sampled - reference = [0.5, -1.0], [0.5]; mean d = 0
    changes, metrics = advantages.kl_penalty(sampled, reference, 0.1)
    assert changes[0] == pytest.approx([-0.05, 0.1])
    assert changes[1] == pytest.approx([-0.05])
    assert metrics["kl_k1"] == pytest.approx(0.0)
    k3 = (math.exp(-0.5) + 0.5 - 1) * 2 + (math.exp(1.0) - 1.0 - 1)
    assert metrics["kl_k3"] == pytest.approx(k3 / 3)
    # The changes always sum to zero over the batch, and vanish with kl_coef 0.
    assert sum(sum(c) for c in changes) == pytest.approx(0.0)
    zero, _ = advantages.kl_penalty(sampled, reference, 0.0)
    assert zero == [[0.0, 0.0], [0.0]]
    with pytest.raises(ValueError, match="completion 1"):
        advantages.kl_penalty(sampled, [[-1.0, -1.0], [-1.0, -2.0]], 0.1)
