"""grpo_helpers.step_math: one step's arithmetic, by hand.

The defaults build exactly the demo scripts' Datums; the normalisation and the KL
penalty change the Datums' advantages as written; masking a truncated completion
drops its Datum, renormalises the rest and still uses up its KL change; the ratio
metrics count the tokens the clip stops.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import pytrio as trio

from grpo_helpers import step_math
from grpo_helpers.config import GRPOConfig
from grpo_helpers.datum import RolloutSample, build_grpo_datum


def _group(prompt, lengths, rewards):
    samples = [
        RolloutSample(
            list(range(10, 10 + n)), [-0.5] * n, "", r, r - float(np.mean(rewards))
        )
        for n, r in zip(lengths, rewards, strict=True)
    ]
    return step_math.PromptGroup(0, prompt, "1", samples)


def test_defaults_build_exactly_the_demo_datums():
    groups = [
        _group([1, 2, 3], [2, 5], [1.0, 0.0]),
        _group([4, 5], [3, 3], [0.5, 0.5]),  # degenerate: skipped
    ]
    config = GRPOConfig()
    assert (config.loss_fn, config.updates_per_batch, config.kl_coef) == (
        "importance_sampling",
        1,
        0.0,
    )
    assert config.normalization == "token_sum" and config.loss_fn_config is None
    got = step_math.build_step_datums(groups, config.normalization, config.max_tokens)
    want = [build_grpo_datum([1, 2, 3], s) for s in groups[0].samples]
    assert [d.model_dump() for d in got] == [d.model_dump() for d in want]


def test_normalisation_and_kl_change_the_datum_advantages():
    group = _group([1, 2, 3], [2, 4], [1.0, 0.0])  # advantages +0.5, -0.5
    datums = step_math.build_step_datums([group], "sequence_mean", 64)
    adv = [d.loss_fn_inputs["advantages"].tolist() for d in datums]
    assert adv[0] == [0.0, 0.0, 0.25, 0.25]
    assert adv[1] == pytest.approx([0.0, 0.0] + [-0.125] * 4)
    changes = [[0.1, -0.1], [0.0, 0.0, 0.2, -0.2]]
    datums = step_math.build_step_datums([group], "token_sum", 64, changes)
    adv = [d.loss_fn_inputs["advantages"].tolist() for d in datums]
    assert adv[0] == pytest.approx([0.0, 0.0, 0.6, 0.4])
    assert adv[1] == pytest.approx([0.0, 0.0, -0.5, -0.5, -0.3, -0.7])
    with pytest.raises(ValueError, match="KL changes"):
        step_math.build_step_datums([group], "token_sum", 64, changes[:1])


class _Output:
    def __init__(self, logprobs):
        self.loss_fn_outputs = [
            {"logprobs": trio.types.TensorData(data=lp, dtype="float32")}
            for lp in logprobs
        ]


def test_ratio_metrics_count_the_tokens_the_clip_stops():
    prompt = [1, 2]
    up = RolloutSample([7, 8], [-1.0, -1.0], "", 1.0, 1.0)
    down = RolloutSample([9], [-1.0], "", 0.0, -1.0)
    datums = [build_grpo_datum(prompt, s) for s in (up, down)]
    # learner logprobs at positions 1.. : ratios exp(0.5) = 1.65 (clipped for A>0),
    # exp(0) = 1, and exp(-0.5) = 0.61 for A<0 (clipped)
    out = _Output([[0.0, -0.5, -1.0], [0.0, -1.5]])
    m = step_math.ratio_metrics([out], datums, 0.8, 1.2)
    assert m["clip_frac"] == pytest.approx(2 / 3)
    assert m["ratio_mean"] == pytest.approx((math.exp(0.5) + 1.0 + math.exp(-0.5)) / 3)


def test_build_step_datums_masks_truncated_completions_and_renormalises():
    prompt = [5, 6, 7]
    samples = [
        RolloutSample([8, 9], [-0.1, -0.2], "a", 1.0, 0.5, truncated=False),
        RolloutSample([8, 9, 10, 11], [-0.3] * 4, "b", 0.0, -0.5, truncated=True),
        RolloutSample([12, 13, 14], [-0.4] * 3, "c", 0.5, 0.0, truncated=False),
    ]
    group = step_math.PromptGroup(0, prompt, "1", samples)
    assert len(step_math.build_step_datums([group])) == 3
    masked = step_math.build_step_datums([group], mask_truncated=True)
    assert [d.model_input.to_ints() for d in masked] == [
        prompt + [8],
        prompt + [12, 13],
    ]
    # token_mean divides by the tokens that are trained: 2 + 3, not 2 + 4 + 3
    token_mean = step_math.build_step_datums([group], "token_mean", mask_truncated=True)
    first = token_mean[0].loss_fn_inputs["advantages"].tolist()
    assert first[-1] == pytest.approx(0.5 / 5)


def test_each_completions_kl_change_reaches_its_own_datum_when_one_is_masked():
    """Issue 48's mutation: the KL changes come one per completion of the groups
    that teach, truncated ones included; with ``mask_truncated`` the truncated
    completion sends no Datum but must still use up its change, or every later
    completion gets its neighbour's (the issue's [-0.4, 0.7] for [-0.3, 0.8])."""
    from grpo_helpers.datum import RolloutSample
    from grpo_helpers.step_math import PromptGroup, build_step_datums

    group = PromptGroup(
        0,
        [1, 2, 3],
        "4",
        [
            RolloutSample([5, 6], [-0.1, -0.2], "cut", 0.0, 0.0, truncated=True),
            RolloutSample([7, 8], [-0.3, -0.4], "wrong", 0.0, -0.5),
            RolloutSample([9, 10], [-0.5, -0.6], "right", 1.0, 0.5),
        ],
    )
    changes = [[0.1, 0.1], [0.2, 0.2], [0.3, 0.3]]
    datums = build_step_datums([group], kl_changes=changes, mask_truncated=True)
    sent = [v for d in datums for v in d.loss_fn_inputs["advantages"].tolist()[2:]]
    assert len(datums) == 2
    assert sent == pytest.approx([-0.3, -0.3, 0.8, 0.8])


# --- a completion with a tool's turns: no ratio, KL or mismatch reads the tool ----


def _multiturn():
    from grpo_helpers.datum import POLICY, TOOL, Turn, build_multiturn_datum

    turns = [
        Turn([10, 11], [-1.0, -2.0], POLICY),
        Turn([20, 21], None, TOOL),
        Turn([12], [-0.5], POLICY),
    ]
    return build_multiturn_datum([1, 2], turns, 0.5)  # positions 1, 2, 5: policy


def _scored(values):
    from types import SimpleNamespace

    return SimpleNamespace(loss_fn_outputs=[{"logprobs": np.array(values)}])


#: The trainer's logprobs: the policy's tokens equal the sampler's, the tool's
#: positions hold values far off (what a trainer asked of them would say).
TRAINER = [0.0, -1.0, -2.0, -9.0, -7.0, -0.5]
POLICY_AT = [False, True, True, False, False, True]


def test_the_metrics_and_corrections_skip_a_tools_tokens():
    datum = _multiturn()
    assert step_math.completion_positions(datum).tolist() == POLICY_AT
    scored = _scored(TRAINER)
    mismatch = step_math.mismatch_metrics([datum], scored, None, 2.0)
    assert mismatch == {
        "mismatch_mean": 0.0,
        "mismatch_max": 0.0,
        "mismatch_kl": 0.0,
        "mismatch_outside": 0.0,
    }
    ratios = step_math.ratio_metrics([scored], [datum], 0.8, 1.2)
    assert ratios == {"ratio_mean": 1.0, "clip_frac": 0.0}
    rescored = step_math.with_sampler_logprobs([datum], scored)[0]
    assert rescored.loss_fn_inputs["logprobs"].tolist() == [0, -1, -2, 0, 0, -0.5]
    new, weights = step_math.corrected_datums([datum], scored, "token_mask", None, 2.0)
    assert weights == {"is_weight_mean": 1.0}
    assert new[0].loss_fn_inputs["advantages"].tolist() == [0, 0.5, 0.5, 0, 0, 0.5]
    gspo = step_math.sequence_ratio_datums([datum], scored)[0]
    assert gspo.loss_fn_inputs["logprobs"].tolist() == [0, -1, -2, 0, 0, -0.5]
    # Each keeps the tool's -100 targets.
    for d in (rescored, new[0], gspo):
        assert d.loss_fn_inputs["target_tokens"].tolist()[3:5] == [-100, -100]


def test_a_tools_position_is_skipped_by_its_target_whatever_it_holds():
    """Even with a logprob written there (a transform that filled every position
    with the trainer's), a -100 target keeps a tool's token out of every ratio."""
    datum = _multiturn()
    filled = step_math._datum(
        datum,
        np.asarray(TRAINER),
        np.asarray(datum.loss_fn_inputs["advantages"].tolist()),
    )
    assert step_math.completion_positions(filled).tolist() == POLICY_AT
