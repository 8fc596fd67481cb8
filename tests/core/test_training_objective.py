"""The full GRPO objective's knobs reach the engine: length normalisation, the KL
penalty, mu > 1 updates with the clipped ratio, and the defaults that reproduce the
demo loop.

The sync and the async loop run on tiny-random behind a spy
(``tests/helpers/spies.py``), and the test checks what the *engine received*: the
``loss_fn``, the ``loss_fn_config``, how many updates per batch, and every Datum's
advantages, recomputed here from the run's samples (and, for the KL penalty, from
the base model's own logprobs) rather than taken from the loop's bookkeeping. The
arithmetic itself is checked by hand in ``test_advantages.py`` and
``test_step_math.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import pytrio as trio
from spies import EngineSpy

from grpo_helpers import run_files, training
from grpo_helpers.config import GRPOConfig
from grpo_helpers.engines import connect


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
