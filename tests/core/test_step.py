"""``step``: one step after sampling, and when the sampler is not the trainer.

The loops' shared step (``train_on_groups``) and the knobs it reads: which logprob
the ratio divides by (``sampler_logprobs``), the corrections (``is_correction``)
and GSPO's sequence ratio (``ratio_level``). Each is held against a hand
computation on the tiny model's engine; the default run's ratio is 1 and its clip
fraction 0, the behaviour policy's at T = 0.6 is not; the sampler/trainer gap is
in every run's metrics; PyTRIO refuses what its client API cannot do.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import pytrio as trio
from tiny import tiny

from grpo_helpers import engines, step, training
from grpo_helpers.config import GRPOConfig
from grpo_helpers.datum import RolloutSample, build_grpo_datum
from grpo_helpers.engines import connect
from grpo_helpers.step_math import MISMATCH_METRICS, PromptGroup

MODEL = "tiny-random"
T = 0.6


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    return connect("local", run_dir=tmp_path_factory.mktemp("step-run"))


def _sampled(svc, logprobs_of: str, top_p: float = 1.0):
    """A training client, a prompt and 4 completions at T = 0.6 whose sampler
    reports ``logprobs_of``'s logprobs."""
    tc = svc.create_lora_training_client(MODEL, rank=4, seed=3)
    engines.configure_samplers(tc, logprobs_of)
    prompt = tc.get_tokenizer().encode("Q: what is 2+3?\nA:")
    params = trio.SamplingParams(max_tokens=6, temperature=T, top_p=top_p, seed=1)
    response = (
        tc.save_weights_and_get_sampling_client()
        .sample(trio.ModelInput.from_ints(prompt), 4, params)
        .result()
    )
    return tc, prompt, response.sequences


def _datums(prompt, sequences, advantages=(0.5, -0.25, 1.0, -1.25)):
    return [
        build_grpo_datum(
            prompt, RolloutSample(seq.tokens, list(seq.logprobs), "", 0.0, a)
        )
        for seq, a in zip(sequences, advantages, strict=True)
    ]


def _trainer(tc, datums, temperature: float = 1.0) -> list[np.ndarray]:
    """The trainer's logprobs of each Datum's completion tokens at ``temperature``."""
    config = None if temperature == 1.0 else {"temperature": temperature}
    out = tc.forward(datums, "importance_sampling", config).result()
    return [
        np.asarray(o["logprobs"].tolist())[-len(d.loss_fn_inputs["logprobs"]) :]
        for o, d in zip(out.loss_fn_outputs, datums, strict=True)
    ]


def _completion(values, n_tokens: int) -> np.ndarray:
    return np.asarray(values.tolist() if hasattr(values, "tolist") else values)[
        -n_tokens:
    ]


@pytest.mark.parametrize(("choice", "temperature"), [("model", 1.0), ("behaviour", T)])
def test_the_sampler_reports_the_logprobs_of_the_policy_asked(svc, choice, temperature):
    """ "model": log softmax(z) of each drawn token; "behaviour" (top_p 1): log
    softmax(z / T), the distribution it was drawn from; each against the
    trainer's forward at that temperature."""
    tc, prompt, sequences = _sampled(svc, choice)
    datums = _datums(prompt, sequences)
    for seq, got in zip(sequences, _trainer(tc, datums, temperature), strict=True):
        n = len(seq.tokens)
        assert np.allclose(seq.logprobs, got[-n:], atol=1e-4), choice
    other = _trainer(tc, datums, T if choice == "model" else 1.0)
    assert not all(
        np.allclose(s.logprobs, o[-len(s.tokens) :], atol=1e-2)
        for s, o in zip(sequences, other, strict=True)
    )


def test_behaviour_logprobs_after_top_p_are_renormalised_over_the_nucleus(svc):
    """With top_p < 1 a drawn token's behaviour logprob is its tempered one plus
    -log(the nucleus's tempered mass): never below it, and 0 when the nucleus is
    one token."""
    tc, prompt, sequences = _sampled(svc, "behaviour", top_p=0.3)
    tempered = _trainer(tc, _datums(prompt, sequences), T)
    for seq, lp in zip(sequences, tempered, strict=True):
        got = np.asarray(seq.logprobs)
        assert (got >= lp[-len(seq.tokens) :] - 1e-4).all()
        assert (got <= 1e-6).all()


def test_pytrio_refuses_behaviour_logprobs_and_takes_the_others():
    with pytest.raises(ValueError, match="needs the local engine"):
        GRPOConfig(backend="pytrio", sampler_logprobs="behaviour")
    with pytest.raises(ValueError, match="need the local engine"):
        engines.configure_samplers(object(), "behaviour")
    with pytest.raises(ValueError, match="need the local engine"):
        engines.configure_samplers(object(), precision="bfloat16")
    with pytest.raises(ValueError, match="needs the local engine"):
        GRPOConfig(backend="pytrio", sampler_precision="bfloat16")
    for choice in ("model", "trainer"):
        engines.configure_samplers(object(), choice)  # nothing to set
        GRPOConfig(backend="pytrio", sampler_logprobs=choice)
    GRPOConfig(backend="pytrio", is_correction="token_truncate")
    GRPOConfig(backend="pytrio", ratio_level="sequence")


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"is_correction": "token_mask", "sampler_logprobs": "trainer"}, "every"),
        ({"is_correction": "token_mask", "ratio_level": "sequence"}, "not both"),
        ({"is_clip_min": 0.5, "is_clip_max": 1.5, "is_correction": "x"}, "unknown"),
        ({"is_clip_max": 1.0}, "is_clip_max must be"),
    ],
)
def test_settings_that_do_not_go_together_are_refused(changes, words):
    with pytest.raises(ValueError, match=words):
        GRPOConfig(backend="local", **changes)


def _config(**changes) -> GRPOConfig:
    return GRPOConfig(**tiny(temperature=T, **changes))


def test_tis_trains_each_token_with_its_truncated_weight(svc):
    """TIS through the client API: the update's loss is -sum(w * A) at the sampler's
    weights (ratio 1), with w = min(trainer / sampler, C), by hand."""
    tc, prompt, sequences = _sampled(svc, "behaviour")
    sampled = _datums(prompt, sequences)
    config = _config(sampler_logprobs="behaviour", is_correction="token_truncate")
    datums, scored, metrics = step.rescore(tc, config, sampled)
    want = 0.0
    weights = []
    for seq, trainer, a in zip(
        sequences, _trainer(tc, sampled), (0.5, -0.25, 1.0, -1.25), strict=True
    ):
        n = len(seq.tokens)
        w = np.minimum(np.exp(trainer[-n:] - np.asarray(seq.logprobs)), 3.0)
        weights.extend(w)
        want -= float(np.sum(w * a))
    assert metrics["is_weight_mean"] == pytest.approx(np.mean(weights), rel=1e-4)
    out = tc.forward(datums, "importance_sampling", None).result()
    assert out.metrics["loss_sum"] == pytest.approx(want, rel=1e-3, abs=1e-4)
    # the token mask zeroes what truncation caps
    masked, _, _ = step.rescore(
        tc,
        _config(
            sampler_logprobs="behaviour", is_correction="token_mask", is_clip_max=1.5
        ),
        sampled,
    )
    adv = np.concatenate([d.loss_fn_inputs["advantages"].tolist() for d in masked])
    assert (adv == 0).sum() > sum(len(p) - 1 for p in [prompt] * 4)


def test_gspo_weighs_each_sequence_by_its_mean_log_ratio(svc):
    """GSPO-token: at the sampler's weights the update's loss is -sum_i s_i A_i
    |o_i| with log s_i the mean of log(trainer / sampler) over o_i's tokens."""
    tc, prompt, sequences = _sampled(svc, "behaviour")
    sampled = _datums(prompt, sequences)
    config = _config(sampler_logprobs="behaviour", ratio_level="sequence")
    datums, _, _ = step.rescore(tc, config, sampled)
    want = 0.0
    for seq, trainer, a in zip(
        sequences, _trainer(tc, sampled), (0.5, -0.25, 1.0, -1.25), strict=True
    ):
        n = len(seq.tokens)
        s = math.exp(float(np.mean(trainer[-n:] - np.asarray(seq.logprobs))))
        want -= s * a * n
    out = tc.forward(datums, "importance_sampling", None).result()
    assert out.metrics["loss_sum"] == pytest.approx(want, rel=1e-3)


def _first_update(metrics):
    updated = metrics[metrics["updated"]]
    assert len(updated), "no step updated"
    return updated.iloc[0]


def test_the_default_ratio_is_one_and_the_behaviour_policys_is_not(tiny_config, svc):
    """The issue's check: at T = 0.6 the default run's first update has ratio 1 and
    nothing clipped; with the behaviour policy's logprobs it has neither, and the
    gap it measured is the one the ratio shows."""
    default = training.train_sync(
        tiny_config(temperature=T, steps=3),
        svc,
        progress=False,
    ).metrics
    row = _first_update(default)
    assert row["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert row["clip_frac"] == 0.0
    assert row["mismatch_max"] < 1e-3
    behaviour = training.train_sync(
        tiny_config(temperature=T, steps=3, sampler_logprobs="behaviour"),
        svc,
        progress=False,
        overwrite=True,
    ).metrics
    row = _first_update(behaviour)
    assert abs(row["ratio_mean"] - 1.0) > 0.01
    assert row["clip_frac"] > 0
    assert row["mismatch_mean"] > 0.01 and row["mismatch_kl"] > 0
    for metrics in (default, behaviour):
        assert set(MISMATCH_METRICS) <= set(metrics.columns)
        assert (
            metrics.loc[metrics["updated"], list(MISMATCH_METRICS)].notna().all().all()
        )


def test_choose_groups_is_the_one_rule_of_what_a_step_trains():
    right = RolloutSample([5], [-0.1], "4", reward=1.0, advantage=0.5)
    wrong = RolloutSample([6], [-0.2], "5", reward=0.0, advantage=-0.5)
    same = PromptGroup(0, [1], "4", [right, right])
    apart = [PromptGroup(i, [1], "4", [right, wrong]) for i in (1, 2, 3)]
    groups = [same, *apart]
    assert step.choose_groups(groups, 2, 0) == groups
    assert step.choose_groups(groups, 2, 1) == apart[:2]


def test_a_bfloat16_sampler_is_another_policy_close_to_the_trained_one(svc):
    """The merged decoder's bfloat16 products: the same prompt and seed draw from
    a policy whose logprobs differ from float32's, by little; the plain path and
    the TRL export refuse it."""
    from grpo_helpers.trl import mapping

    tc = svc.create_lora_training_client(MODEL, rank=4, seed=3)
    prompt = trio.ModelInput.from_ints(tc.get_tokenizer().encode("Q: 2+3?\nA:"))
    params = trio.SamplingParams(max_tokens=6, temperature=0.0)
    runs = {}
    for precision in ("float32", "bfloat16", "float32"):
        engines.configure_samplers(tc, precision=precision)
        sampler = tc.save_weights_and_get_sampling_client()
        runs.setdefault(precision, []).append(
            sampler.sample(prompt, 1, params).result().sequences[0]
        )
    first, again = runs["float32"]
    assert first.tokens == again.tokens and first.logprobs == again.logprobs
    half = runs["bfloat16"][0]
    n = min(len(half.tokens), len(first.tokens))
    gap = np.abs(np.asarray(half.logprobs[:n]) - np.asarray(first.logprobs[:n]))
    assert 0 < gap.max() < 0.5
    with pytest.raises(Exception, match="sampler_precision"):
        mapping.trl_settings(GRPOConfig(**tiny(sampler_precision="bfloat16")))
