"""``train_temperature``: the loss trains the tempered policy when asked.

The completions are sampled from ``softmax(logits / T)``; by default the loss
trains ``log softmax(logits)`` (temperature 1, as tinker and the demo scripts);
``train_temperature='sampling'`` trains ``log softmax(logits / T)`` (as TRL). The
engine's tempered loss is checked against a hand computation on the tiny model,
on both of its forward paths; the loop puts the tempered sampler logprobs in its
Datums (ratio 1 at the update); PyTRIO refuses the knob.
"""

from __future__ import annotations

import math

import pytest
import pytrio as trio
import torch
from pytrio.errors.base import ValidationError
from tensors import rel_err
from tiny import tiny

from grpo_helpers import training
from grpo_helpers.config import GRPOConfig
from grpo_helpers.engines import connect
from grpo_helpers.local import checkpoints
from grpo_helpers.trl import mapping

MODEL = "tiny-random"


T = 0.6


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    return connect("local", run_dir=tmp_path_factory.mktemp("temperature-run"))


def _group(svc, n: int = 3) -> tuple[list[int], list[trio.Datum]]:
    """One prompt and ``n`` sampled completions as Datums with mixed advantages."""
    tc = svc.create_lora_training_client(MODEL, rank=4, seed=3)
    tok = tc.get_tokenizer()
    prompt = tok.encode("Q: what is 2+3?\nA:")
    response = (
        tc.save_weights_and_get_sampling_client()
        .sample(
            trio.ModelInput.from_ints(prompt),
            n,
            trio.SamplingParams(max_tokens=6, temperature=T, seed=1),
        )
        .result()
    )
    datums = []
    for k, seq in enumerate(response.sequences):
        m = len(prompt) - 1
        advantage = [0.5, -0.25, 1.0][k % 3]
        datums.append(
            trio.Datum(
                model_input=trio.ModelInput.from_ints(prompt + seq.tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": [0] * m + seq.tokens,
                    "logprobs": [0.0] * m + seq.logprobs,
                    "advantages": [0.0] * m + [advantage] * len(seq.tokens),
                },
            )
        )
    return prompt, datums


def _by_hand(tc, datums: list[trio.Datum], temperature: float):
    """Each Datum's target logprobs under softmax(logits / T), and the
    importance_sampling loss_sum, from the model's logits (plain torch)."""
    host = tc._host
    total = torch.zeros(())
    logprobs = []
    with host.lock:
        host.activate(tc._adapter, trainable=False)
        with torch.no_grad():
            for d in datums:
                ids = torch.tensor([d.model_input.to_ints()])
                logits = host.model(input_ids=ids).logits[0].float()
                lp_all = torch.log_softmax(logits / temperature, dim=-1)
                targets = torch.tensor(d.loss_fn_inputs["target_tokens"].tolist())
                lp = lp_all[torch.arange(len(targets)), targets]
                old = torch.tensor(d.loss_fn_inputs["logprobs"].tolist())
                adv = torch.tensor(d.loss_fn_inputs["advantages"].tolist())
                total += (-torch.exp(lp - old) * adv).sum()
                logprobs.append(lp)
    return logprobs, float(total)


@pytest.mark.parametrize("together", [True, False], ids=["shared-prefix", "plain"])
def test_the_tempered_loss_equals_a_hand_computation(svc, together):
    """One group (the shared-prefix path) or Datums one by one (the plain path)."""
    _, datums = _group(svc)
    tc = svc.create_lora_training_client(MODEL, rank=4, seed=5)
    config = {"temperature": T}
    calls = [datums] if together else [[d] for d in datums]
    outputs = [tc.forward(c, "importance_sampling", config).result() for c in calls]
    engine_lp = [
        torch.tensor(o["logprobs"].tolist())
        for out in outputs
        for o in out.loss_fn_outputs
    ]
    engine_loss = sum(out.metrics["loss_sum"] for out in outputs)
    hand_lp, hand_loss = _by_hand(tc, datums, T)
    for engine, hand, d in zip(engine_lp, hand_lp, datums, strict=True):
        active = torch.tensor(d.loss_fn_inputs["advantages"].tolist()) != 0
        assert rel_err(engine[active], hand[active]) < 1e-5
    assert engine_loss == pytest.approx(hand_loss, rel=1e-4, abs=1e-5)
    # ... and it is not the untempered loss: the knob changes the number.
    _, untempered = _by_hand(tc, datums, 1.0)
    assert abs(untempered - hand_loss) > 1e-3


def test_the_tempered_gradient_differs_from_the_untempered_one(svc):
    _, datums = _group(svc)
    grads = {}
    for name, config in (("T", {"temperature": T}), ("1", None)):
        tc = svc.create_lora_training_client(MODEL, rank=4, seed=5)
        tc.forward_backward(datums, "importance_sampling", config).result()
        grads[name] = torch.cat([p.grad.flatten() for p in tc._params])
    assert rel_err(grads["T"], grads["1"]) > 1e-2


@pytest.mark.parametrize("value", [0, -1.0, math.inf, "hot"])
def test_a_bad_loss_temperature_is_refused_at_the_call(svc, value):
    _, datums = _group(svc, 1)
    tc = svc.create_lora_training_client(MODEL, rank=4, seed=5)
    with pytest.raises(ValidationError, match="temperature must be"):
        tc.forward(datums, "importance_sampling", {"temperature": value})


def test_the_knob_sets_the_loss_temperature_and_pytrio_refuses_it():
    local = GRPOConfig(backend="local", temperature=T, train_temperature="sampling")
    assert local.loss_fn_config == {"temperature": T}
    assert GRPOConfig(backend="local", temperature=T).loss_fn_config is None
    ppo = GRPOConfig(
        backend="local", temperature=T, train_temperature="sampling", loss_fn="ppo"
    )
    assert ppo.loss_fn_config["temperature"] == T
    with pytest.raises(ValueError, match="PyTRIO's losses have no temperature"):
        GRPOConfig(backend="pytrio", temperature=T, train_temperature="sampling")
    with pytest.raises(ValueError, match="temperature, which is 0"):
        GRPOConfig(backend="local", temperature=0.0, train_temperature="sampling")
    with pytest.raises(ValueError, match="unknown train_temperature"):
        GRPOConfig(backend="local", train_temperature="0.6")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_loop_trains_from_a_ratio_of_one(tmp_path, mode):
    """The Datums carry the tempered sampler logprobs, so the first update's
    ratio is 1; trained at 1 from the same samples, the weights end elsewhere.
    Both loops (a rescoring that dropped ``loss_fn_config`` in one of them would
    leave a ratio of pi_T / pi there)."""
    weights, ratios = {}, {}
    for knob in ("sampling", "1"):
        config = GRPOConfig(
            **tiny(
                steps=1,
                temperature=T,
                train_temperature=knob,
                run_dir=str(tmp_path / knob),
                weights_name=f"t-{knob}",
            )
        )
        result = training.train(config, mode, progress=False)
        row = result.metrics.iloc[0]
        assert row["updated"], "the tiny run's step must train for this test"
        ratios[knob] = row["ratio_mean"]
        snapshot = checkpoints.load_snapshot(result.weights_path, MODEL, "cpu")
        weights[knob] = snapshot.tensors
    assert ratios["sampling"] == pytest.approx(1.0, abs=1e-4)
    assert ratios["1"] == pytest.approx(1.0, abs=1e-4)
    differ = [rel_err(weights["sampling"][k], weights["1"][k]) for k in weights["1"]]
    assert max(differ) > 1e-3


def test_the_trl_export_says_which_policy_it_trains():
    """TRL always trains the tempered policy: the export's temperature note is
    there for train_temperature '1' at T != 1 and not for 'sampling'."""
    at_one = GRPOConfig(backend="local", temperature=T)
    tempered = GRPOConfig(backend="local", temperature=T, train_temperature="sampling")
    assert [topic for topic, _ in mapping.run_notes(at_one)] == ["temperature"]
    assert mapping.run_notes(tempered) == []
    assert mapping.trl_settings(tempered)["temperature"] == T
