"""The full GRPO objective's knobs: length normalisation, the KL penalty, mu > 1
updates with the clipped ratio, and the defaults that reproduce the demo loop.

The first half checks the pure functions by hand. The second half runs the sync and
the async loop on tiny-random behind a spy (``tests/helpers/spies.py``) and checks
what the *engine received*: the ``loss_fn``, the ``loss_fn_config``, how many
updates per batch, and every Datum's advantages, recomputed here from the run's
samples (and, for the KL penalty, from the base model's own logprobs) rather than
taken from the loop's bookkeeping."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import pytrio as trio
from spies import EngineSpy

from grpo_helpers import advantages, run_files, step_math, training
from grpo_helpers.config import GRPOConfig
from grpo_helpers.datum import RolloutSample, build_grpo_datum
from grpo_helpers.engines import connect

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


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("loss_fn", "dro", "unknown loss_fn 'dro'"),
        ("updates_per_batch", 0, "updates_per_batch must be >= 1"),
        ("clip_low", 1.5, r"clip_low must be in \(0, 1\]"),
        ("kl_coef", -0.1, "kl_coef must be >= 0"),
        ("normalization", "mean", "unknown normalization 'mean'"),
    ],
)
def test_bad_objective_settings_are_clear_errors(field, value, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**{field: value})


FLOAT_SETTINGS = [f.name for f in dataclasses.fields(GRPOConfig) if f.type == "float"]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("setting", FLOAT_SETTINGS)
def test_every_float_setting_refuses_inf_and_nan_by_name(setting, value):
    """Issue 38: ``inf`` passed ``>= 0`` checks (kl_coef, learning_rate,
    temperature, clip_high)."""
    with pytest.raises(ValueError, match=f"{setting} must be a finite number"):
        GRPOConfig(**{setting: value})


def test_the_float_settings_are_the_objectives_and_the_samplers():
    assert sorted(FLOAT_SETTINGS) == sorted(
        [
            "temperature",
            "top_p",
            "learning_rate",
            "beta1",
            "beta2",
            "clip_low",
            "clip_high",
            "kl_coef",
            "grad_clip_norm",
        ]
    )


# ------------------------------------------------------------------ on the engine

MODES = ["sync", "async"]


@pytest.fixture
def service(tmp_path):
    return connect("local", run_dir=tmp_path / "engine")


def train_with_spy(config, mode, service):
    """(metrics, spy, per-step Datum expectations) of a run behind an EngineSpy."""
    spy = EngineSpy(service)
    result = training.train(config, mode, service=spy, progress=False)
    return result.metrics, spy


def trained_completions(run_dir, step, column="advantage"):
    """Per non-degenerate group of ``step``, in the loop's order: (lengths,
    ``column``) of its completions, read from samples.jsonl."""
    samples = run_files.load_samples(run_dir)
    rows = samples[samples["step"] == step]
    groups = []
    for _, group in rows.groupby("question_index", sort=False):
        group = group.sort_values("sample_index")
        if len(set(group["reward"])) > 1:  # degenerate groups send nothing
            groups.append(
                (list(group["num_tokens"]), [float(v) for v in group[column]])
            )
    return groups


def updates_by_step(metrics, spy, mu):
    """{step: its mu [forward_backward, optim_step] pairs}, for updated steps."""
    updates = spy.updates()
    steps = list(metrics.loc[metrics["updated"], "step"])
    assert len(updates) == mu * len(steps), (len(updates), steps)
    return {s: updates[i * mu : (i + 1) * mu] for i, s in enumerate(steps)}


def split_advantages(datum, length):
    """(prompt part, completion part) of a Datum's per-token advantages."""
    adv = datum.loss_fn_inputs["advantages"].tolist()
    return adv[:-length], adv[-length:]


def by_hand_scales(lengths, normalization, max_tokens):
    if normalization == "token_sum":
        return [1.0] * len(lengths)
    if normalization == "sequence_mean":
        return [1 / n for n in lengths]
    if normalization == "token_mean":
        return [1 / sum(lengths)] * len(lengths)
    assert normalization == "constant"
    return [1 / max_tokens] * len(lengths)


def assert_datums_carry(datums, groups, normalization, max_tokens, kl=None):
    """Each Datum's advantages are its completion's advantage times its length
    scale (plus the KL change per token), and 0 on the prompt."""
    expected = [
        [a * s] * n
        for lengths, advs in groups
        for n, a, s in zip(
            lengths,
            advs,
            by_hand_scales(lengths, normalization, max_tokens),
            strict=True,
        )
    ]
    assert len(datums) == len(expected)
    for i, (datum, want) in enumerate(zip(datums, expected, strict=True)):
        if kl is not None:
            want = [w + c for w, c in zip(want, kl[i], strict=True)]
        prompt, completion = split_advantages(datum, len(want))
        assert prompt == [0.0] * len(prompt)
        assert completion == pytest.approx(want, abs=1e-6), i


@pytest.mark.parametrize("mode", MODES)
def test_defaults_send_importance_sampling_and_the_plain_advantages(
    tiny_config, tmp_path, service, mode
):
    config = tiny_config()
    metrics, spy = train_with_spy(config, mode, service)
    per_step = updates_by_step(metrics, spy, mu=1)
    assert per_step, "no step had a group with different rewards"
    for step, [(fb, _optim)] in per_step.items():
        assert (fb.loss_fn, fb.loss_fn_config) == ("importance_sampling", None)
        groups = trained_completions(config.run_path, step)
        assert_datums_carry(fb.datums, groups, "token_sum", config.max_tokens)
    updated = metrics[metrics["updated"]]
    assert np.allclose(updated["ratio_mean"], 1.0, atol=1e-3)
    assert (updated["clip_frac"] == 0).all() and (updated["updates"] == 1).all()
    assert metrics["kl_k1"].isna().all()
    assert (metrics["entropy"] > 0).all()


@pytest.mark.parametrize("normalization", ["sequence_mean", "token_mean", "constant"])
@pytest.mark.parametrize("mode", MODES)
def test_each_normalisation_scales_the_advantages_the_engine_receives(
    tiny_config, tmp_path, service, mode, normalization
):
    config = tiny_config(steps=1, normalization=normalization)
    metrics, spy = train_with_spy(config, mode, service)
    per_step = updates_by_step(metrics, spy, mu=1)
    assert list(per_step) == [0], "step 0 must train for this test to mean anything"
    [(fb, _)] = per_step[0]
    assert (fb.loss_fn, fb.loss_fn_config) == ("importance_sampling", None)
    groups = trained_completions(config.run_path, 0)
    assert_datums_carry(fb.datums, groups, normalization, config.max_tokens)
    # the scale really changed something: not the token-sum advantages
    plain = [a for _, advs in groups for a in advs]
    sent = [split_advantages(d, 1)[1][0] for d in fb.datums]
    assert any(abs(s - a) > 1e-3 for s, a in zip(sent, plain, strict=True) if a)


def ratios_and_advantages(fb):
    """Per active token of an update: (learner/sampler ratio, advantage)."""
    out = []
    for datum, result in zip(fb.datums, fb.output().loss_fn_outputs, strict=True):
        adv = np.asarray(datum.loss_fn_inputs["advantages"].tolist())
        old = np.asarray(datum.loss_fn_inputs["logprobs"].tolist())
        new = np.asarray(result["logprobs"].tolist())
        active = adv != 0
        out += list(zip(np.exp(new[active] - old[active]), adv[active], strict=True))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_ppo_with_two_updates_sends_its_clip_bounds_and_clips_both_sides(
    tiny_config, tmp_path, service, mode
):
    config = tiny_config(
        loss_fn="ppo",
        updates_per_batch=2,
        learning_rate=5e-2,
        clip_low=0.9,
        clip_high=1.1,
    )
    metrics, spy = train_with_spy(config, mode, service)
    per_step = updates_by_step(metrics, spy, mu=2)
    assert per_step
    above = below = 0
    for step, [(first, _), (second, _)] in per_step.items():
        for fb in (first, second):
            assert fb.loss_fn == "ppo"
            assert fb.loss_fn_config == {
                "clip_low_threshold": 0.9,
                "clip_high_threshold": 1.1,
            }
        # mu updates on one batch: the same Datums twice
        assert [d.model_dump() for d in second.datums] == [
            d.model_dump() for d in first.datums
        ]
        groups = trained_completions(config.run_path, step)
        assert_datums_carry(first.datums, groups, "token_sum", config.max_tokens)
        # the first update is on-policy; the second sees the moved policy
        assert all(abs(r - 1) < 1e-3 for r, _ in ratios_and_advantages(first))
        tokens = ratios_and_advantages(second)
        above += sum(r > 1.1 and a > 0 for r, a in tokens)
        below += sum(r < 0.9 and a < 0 for r, a in tokens)
        clipped = sum((r > 1.1 and a > 0) or (r < 0.9 and a < 0) for r, a in tokens)
        row = metrics[metrics["step"] == step].iloc[0]
        all_tokens = len(ratios_and_advantages(first)) + len(tokens)
        assert row["clip_frac"] == pytest.approx(clipped / all_tokens)
        assert row["updates"] == 2
    # both sides of the clip acted: A > 0 above clip_high, A < 0 below clip_low
    assert above > 0 and below > 0, (above, below)


def reference_logprobs(service, datums, lengths):
    """The base model's logprobs of each Datum's completion tokens, asked here."""
    base = service.create_sampling_client(base_model="tiny-random")
    futures = [
        base.compute_logprobs(
            trio.ModelInput.from_ints(
                d.model_input.to_ints()
                + d.loss_fn_inputs["target_tokens"].tolist()[-1:]
            )
        )
        for d in datums
    ]
    return [
        [float(v) for v in future.result()[-n:]]
        for future, n in zip(futures, lengths, strict=True)
    ]


@pytest.mark.parametrize("mode", MODES)
def test_kl_penalty_changes_the_advantages_the_engine_receives(
    tiny_config, tmp_path, service, mode
):
    kl_coef = 0.1
    config = tiny_config(steps=3, kl_coef=kl_coef, learning_rate=3e-2)
    assert config.needs_reference
    metrics, spy = train_with_spy(config, mode, service)
    per_step = updates_by_step(metrics, spy, mu=1)
    assert 0 in per_step, "step 0 must train for this test to mean anything"
    moved = {}
    for step, [(fb, _)] in per_step.items():
        assert (fb.loss_fn, fb.loss_fn_config) == ("importance_sampling", None)
        groups = trained_completions(config.run_path, step)
        lengths = [n for group_lengths, _ in groups for n in group_lengths]
        diffs = []
        references = reference_logprobs(service, fb.datums, lengths)
        for datum, n, reference in zip(fb.datums, lengths, references, strict=True):
            sampled = datum.loss_fn_inputs["logprobs"].tolist()[-n:]
            diffs.append([s - r for s, r in zip(sampled, reference, strict=True)])
        mean = float(np.mean([d for row in diffs for d in row]))
        changes = [[kl_coef * (mean - d) for d in row] for row in diffs]
        assert_datums_carry(fb.datums, groups, "token_sum", config.max_tokens, changes)
        moved[step] = max(abs(c) for row in changes for c in row)
        row = metrics[metrics["step"] == step].iloc[0]
        assert row["kl_k1"] == pytest.approx(mean, abs=1e-5)
    # Step 0 samples from the untrained policy, which is the base model.
    first = metrics[metrics["step"] == 0].iloc[0]
    assert abs(first["kl_k1"]) < 1e-3 and first["kl_k3"] < 1e-6
    assert moved[0] < 1e-4
    # Later the policy has moved: the penalty changed the Datums it sent.
    last = max(per_step)
    assert last > 0 and moved[last] > 1e-4, moved
    kl = metrics.dropna(subset=["kl_k1"])
    assert (kl["kl_k3"] >= 0).all()
    assert kl["kl_k3"].iloc[-1] > 1e-4


@pytest.mark.parametrize("mode", MODES)
def test_group_scaled_advantages_reach_the_engine(tiny_config, tmp_path, service, mode):
    """Issue 38: ``advantage_scale="group"`` through the loop. What the engine
    receives is (r - mean) / (std + 1e-4) of the rewards samples.jsonl recorded,
    computed here (not the advantages the run wrote beside them)."""
    config = tiny_config(steps=1, advantage_scale="group")
    metrics, spy = train_with_spy(config, mode, service)
    per_step = updates_by_step(metrics, spy, mu=1)
    assert list(per_step) == [0], "step 0 must train for this test to mean anything"
    [(fb, _)] = per_step[0]
    groups, unscaled = [], []
    for lengths, rewards in trained_completions(config.run_path, 0, "reward"):
        r = np.asarray(rewards, dtype=float)
        groups.append((lengths, list((r - r.mean()) / (r.std() + 1e-4))))
        unscaled += list(r - r.mean())
    assert_datums_carry(fb.datums, groups, "token_sum", config.max_tokens)
    sent = [split_advantages(d, 1)[1][0] for d in fb.datums]
    assert any(abs(s - u) > 1e-3 for s, u in zip(sent, unscaled, strict=True))


@pytest.mark.parametrize("normalization", ["sequence_mean", "token_mean", "constant"])
def test_kl_penalty_with_each_normalisation_reaches_the_engine(
    tiny_config, tmp_path, service, normalization
):
    """Issue 38: the KL change of each token is added to the *scaled* advantage
    (A * scale + beta (mean d - d_t)), whatever the normalisation; the token-sum
    case is ``test_kl_penalty_changes_the_advantages_the_engine_receives``."""
    kl_coef = 0.1
    config = tiny_config(
        steps=2, kl_coef=kl_coef, learning_rate=3e-2, normalization=normalization
    )
    metrics, spy = train_with_spy(config, "sync", service)
    per_step = updates_by_step(metrics, spy, mu=1)
    moved = {}
    for step, [(fb, _)] in per_step.items():
        groups = trained_completions(config.run_path, step)
        lengths = [n for group_lengths, _ in groups for n in group_lengths]
        references = reference_logprobs(service, fb.datums, lengths)
        diffs = []
        for datum, n, reference in zip(fb.datums, lengths, references, strict=True):
            sampled = datum.loss_fn_inputs["logprobs"].tolist()[-n:]
            diffs.append([s - r for s, r in zip(sampled, reference, strict=True)])
        mean = float(np.mean([d for row in diffs for d in row]))
        changes = [[kl_coef * (mean - d) for d in row] for row in diffs]
        assert_datums_carry(
            fb.datums, groups, normalization, config.max_tokens, changes
        )
        moved[step] = max(abs(c) for row in changes for c in row)
    # the penalty acted on a step that trained, and the scale did too
    assert max(moved.values(), default=0) > 1e-4, moved
    scales = by_hand_scales([3, 5], normalization, config.max_tokens)
    assert scales != [1.0, 1.0]


class InFlight:
    """Wraps a sampler: counts the ``sample_async`` requests not yet answered,
    and the most at once."""

    def __init__(self, sampler, counts):
        self._sampler, self._counts = sampler, counts

    async def sample_async(self, *args, **kwargs):
        self._counts["now"] += 1
        self._counts["most"] = max(self._counts["most"], self._counts["now"])
        try:
            return await self._sampler.sample_async(*args, **kwargs)
        finally:
            self._counts["now"] -= 1

    def __getattr__(self, name):
        return getattr(self._sampler, name)


def test_the_async_loop_has_every_prompt_of_a_step_in_flight_at_once(
    tiny_config, tmp_path, service
):
    """Issue 38: the async loop's concurrency. While a step samples, all its
    prompts' requests are in flight together (``gather``); awaiting them one by
    one would keep one in flight."""
    counts = {"now": 0, "most": 0}
    spy = EngineSpy(service, wrap_sampler=lambda s: InFlight(s, counts))
    config = tiny_config(steps=1, batch_size=3)
    training.train(config, "async", service=spy, progress=False)
    assert counts == {"now": 0, "most": config.batch_size}
