"""TRL as an oracle for the series' loss and advantages, on fixed tensors.

Nothing outside the series checked its loss arithmetic; TRL's ``GRPOTrainer`` now
does. Each test builds a *real* TRL 1.16 trainer on tiny-random, with the settings
``grpo_helpers.trl.mapping`` maps the series' run to, and calls TRL's own code:

* the loss: ``GRPOTrainer._compute_loss``, the method ``compute_loss`` calls. It
  gets its current logprobs from ``_get_per_token_logps_and_entropies``; that one
  method is replaced on the trainer object by a function returning our fixed
  tensor (a leaf with a gradient), so TRL's loss code runs unchanged on the same
  completions, old logprobs, current logprobs, advantages and mask as the series;
* the advantages: ``_generate_and_score_completions`` on a batch whose rewards come
  from a column (TRL's own reward plumbing, grouping and scaling);
* the logprobs: ``_get_per_token_logps_and_entropies`` itself, on the tiny model.

The series' side is the local engine's ``forward`` on Datums built by
``step_math.build_step_datums`` (the advantages, length normalisation and skipped
degenerate groups of the real loop), and the engine's per-token losses
(``local.losses.token_loss``) for the gradients.

Each known difference (``mapping.KNOWN_DIFFERENCES``) names the test here that pins
it: matched by the mapping, or asserted as a relation.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import pytrio as trio
import torch
from datasets import Dataset  # noqa: E402  (a TRL dependency)
from needs_trl import import_trl

from grpo_helpers import advantages as adv
from grpo_helpers import datum, step_math
from grpo_helpers.config import GRPOConfig
from grpo_helpers.datum import RolloutSample
from grpo_helpers.engines import connect
from grpo_helpers.local import losses
from grpo_helpers.local.models import load_model, pretrained_dir
from grpo_helpers.trl import mapping

trl = import_trl()

ROOT = Path(__file__).resolve().parents[2]


MODEL = "tiny-random"


PROMPT_LEN = 12


def series_config(**changes) -> GRPOConfig:
    values = dict(
        backend="local",
        base_model=MODEL,
        dataset="arithmetic",
        batch_size=3,
        group_size=4,
        max_tokens=6,
        lora_rank=4,
        temperature=1.0,
        save_every=0,
    )
    return GRPOConfig(**(values | changes))


def fixed_reward(completions, reward, **_):
    """Rewards from the dataset's ``reward`` column (TRL passes columns along)."""
    return [float(r) for r in reward]


def trl_trainer(tmp_path, config: GRPOConfig, rewards=None, **settings):
    """A real GRPOTrainer on tiny-random with the export's settings for ``config``
    (``settings`` override them)."""
    values = mapping.trl_settings(config, "cpu")
    values |= {
        "output_dir": str(tmp_path / "trl"),
        "reward_weights": [1.0],
        "report_to": "none",
        **settings,
    }
    n = values["per_device_train_batch_size"]
    rows = rewards if rewards is not None else [0.0] * n
    dataset = Dataset.from_dict({"prompt": ["1 + 1 ="] * len(rows), "reward": rows})
    trainer = trl.GRPOTrainer(
        model=pretrained_dir(MODEL),  # a folder: TRL loads its reference from it
        reward_funcs=[fixed_reward],
        args=trl.GRPOConfig(**values),
        train_dataset=dataset,
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop
    return trainer


def trl_loss(trainer, current, mask, advantages, old=None, ref=None):
    """TRL's ``_compute_loss`` on fixed tensors ([N, T]; advantages [N])."""
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (
        current,
        torch.zeros_like(current),
        None,
    )
    n, t = current.shape
    inputs = {
        "prompt_ids": torch.ones((n, 2), dtype=torch.long),
        "prompt_mask": torch.ones((n, 2), dtype=torch.long),
        "completion_ids": torch.ones((n, t), dtype=torch.long),
        "completion_mask": mask,
        "advantages": advantages,
        "num_items_in_batch": mask.sum(),
    }
    if old is not None:
        inputs["old_per_token_logps"] = old
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    return trainer._compute_loss(trainer.model, inputs)


# ------------------------------------------------------------------ fixed batches

#: Rewards per group: mixed, degenerate (skipped by the series, advantage 0 in
#: TRL), mixed with ties.
REWARDS = [[1.0, 0.0, 0.5, 0.0], [1.0, 1.0, 1.0, 1.0], [0.2, 0.9, 0.4, 0.4]]


def fixed_batch(config: GRPOConfig, seed: int = 0):
    """Prompts, completions (1 to max_tokens tokens) and rewards of one step."""
    gen = torch.Generator().manual_seed(seed)
    prompts, completions = [], []
    for _ in range(config.batch_size):
        prompts.append(torch.randint(10, 4000, (PROMPT_LEN,), generator=gen).tolist())
        completions.append(
            [
                torch.randint(10, 4000, (n,), generator=gen).tolist()
                for n in torch.randint(
                    1, config.max_tokens + 1, (config.group_size,)
                ).tolist()
            ]
        )
    return prompts, completions, REWARDS[: config.batch_size]


def engine_logprobs(tc, prompt, completions):
    """The engine's teacher-forced logprobs of each completion (its forward)."""
    data = []
    for c in completions:
        sample = RolloutSample(c, [0.0] * len(c), "", 0.0, 1.0)
        data.append(datum.build_grpo_datum(prompt, sample))
    out = tc.forward(data, "importance_sampling").result()
    return [list(o["logprobs"].data[len(prompt) - 1 :]) for o in out.loss_fn_outputs]


def padded(rows, width, value=0.0):
    return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows])


def series_side(tmp_path, config, old_shift=0.0, seed=0):
    """The series' step on the local engine: (loss_sum, tensors for TRL, and the
    per-token advantages the Datums carry, padded [N, T])."""
    svc = connect("local", run_dir=tmp_path / "engine")
    tc = svc.create_lora_training_client(MODEL, rank=4, seed=0)
    prompts, completions, rewards = fixed_batch(config, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    groups, current, old = [], [], []
    for prompt, group, group_rewards in zip(prompts, completions, rewards, strict=True):
        now = engine_logprobs(tc, prompt, group)
        advantages = adv.group_advantages(group_rewards, config.advantage_scale)
        samples = []
        for c, lp, r, a in zip(group, now, group_rewards, advantages, strict=True):
            shift = (torch.rand(len(c), generator=gen) * 2 - 1) * old_shift
            sampled = [x - float(s) for x, s in zip(lp, shift, strict=True)]
            samples.append(RolloutSample(c, sampled, "", r, a))
            current.append(lp)
            old.append(sampled)
        groups.append(step_math.PromptGroup(0, prompt, "1", samples))
    datums = step_math.build_step_datums(
        groups, config.normalization, config.max_tokens
    )
    out = tc.forward(datums, config.loss_fn, config.loss_fn_config).result()
    # the Datums' per-token advantages, back in the [N, T] layout (0: skipped)
    width = config.max_tokens
    kept = iter(datums)
    token_adv = []
    for group in groups:
        for sample in group.samples:
            if group.degenerate:
                token_adv.append([0.0] * len(sample.tokens))
            else:
                values = next(kept).loss_fn_inputs["advantages"].tolist()
                token_adv.append(values[PROMPT_LEN - 1 :])
    lengths = [len(c) for c in current]
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    seq_adv = torch.tensor([s.advantage for g in groups for s in g.samples])
    return {
        "loss_sum": out.metrics["loss_sum"],
        "current": padded(current, width),
        "old": padded(old, width),
        "mask": mask,
        "advantages": seq_adv.float(),
        "token_advantages": padded(token_adv, width),
        "groups": groups,
    }


def series_grad(config, side):
    """d(series loss)/d(current logprobs): the engine's per-token losses, summed."""
    current = side["current"].clone().requires_grad_(True)
    per_token = losses.token_loss(
        config.loss_fn,
        current,
        side["old"],
        side["token_advantages"],
        None,
        config.loss_fn_config,
    )
    (per_token * side["mask"]).sum().backward()
    return current.grad


LOSS_CASES = [
    # (normalisation, batch_size): token_mean maps to dapo for one group only
    ("token_sum", 3),
    ("sequence_mean", 3),
    ("constant", 3),
    ("token_mean", 1),
]


@pytest.mark.parametrize(("normalization", "batch_size"), LOSS_CASES)
@pytest.mark.parametrize("scale", ["none", "group"])
def test_trl_losses_equal_the_series_for_every_normalisation(
    tmp_path, normalization, batch_size, scale
):
    """mu = 1, the series' loop: TRL's loss_type for each normalisation gives the
    engine's loss_sum divided by mapping.loss_scale, and the same gradient."""
    assert trl.GRPOConfig.__dataclass_fields__["loss_type"].default == "dapo"
    config = series_config(
        normalization=normalization, batch_size=batch_size, advantage_scale=scale
    )
    settings = mapping.trl_settings(config, "cpu")
    assert settings["loss_type"] == mapping.LOSS_TYPES[normalization]
    side = series_side(tmp_path, config)
    trainer = trl_trainer(tmp_path, config)
    current = side["current"].clone().requires_grad_(True)
    loss = trl_loss(trainer, current, side["mask"], side["advantages"])
    c = mapping.loss_scale(config)
    assert side["loss_sum"] == pytest.approx(c * loss.item(), rel=1e-5, abs=1e-6)
    loss.backward()
    np.testing.assert_allclose(
        c * current.grad.numpy(), series_grad(config, side).numpy(), atol=1e-5
    )
    assert float(side["token_advantages"].abs().sum()) > 0  # a real signal


@pytest.mark.parametrize(("normalization", "batch_size"), LOSS_CASES)
def test_trl_clipped_loss_equals_the_series_ppo_at_mu_2(
    tmp_path, normalization, batch_size
):
    """mu = 2: the second update sees a moved policy. Old logprobs away from the
    current ones put tokens on both sides of the clip; TRL's clipped loss
    (epsilon = 1 - clip_low, epsilon_high = clip_high - 1) equals the series' ppo."""
    config = series_config(
        normalization=normalization,
        batch_size=batch_size,
        loss_fn="ppo",
        updates_per_batch=2,
        clip_low=0.85,
        clip_high=1.1,
    )
    settings = mapping.trl_settings(config, "cpu")
    assert (settings["num_iterations"], settings["epsilon"]) == (2, 0.15)
    assert settings["epsilon_high"] == pytest.approx(0.1)
    side = series_side(tmp_path, config, old_shift=0.5)
    ratio = torch.exp(side["current"] - side["old"])
    a = side["token_advantages"]
    on = side["mask"].bool()
    assert bool(((a > 0) & (ratio > 1.1) & on).any())  # clipped above
    assert bool(((a < 0) & (ratio < 0.85) & on).any())  # clipped below
    assert bool(((a != 0) & (ratio > 0.85) & (ratio < 1.1) & on).any())  # inside
    trainer = trl_trainer(tmp_path, config)
    current = side["current"].clone().requires_grad_(True)
    loss = trl_loss(trainer, current, side["mask"], side["advantages"], side["old"])
    c = mapping.loss_scale(config)
    assert side["loss_sum"] == pytest.approx(c * loss.item(), rel=1e-5, abs=1e-6)
    loss.backward()
    np.testing.assert_allclose(
        c * current.grad.numpy(), series_grad(config, side).numpy(), atol=1e-5
    )


def test_trl_cispo_equals_the_series_cispo_for_one_group(tmp_path):
    config = series_config(loss_fn="cispo", normalization="token_mean", batch_size=1)
    assert mapping.trl_settings(config, "cpu")["epsilon_high"] == config.clip_high
    side = series_side(tmp_path, config)
    trainer = trl_trainer(tmp_path, config)
    current = side["current"].clone().requires_grad_(True)
    loss = trl_loss(trainer, current, side["mask"], side["advantages"])
    assert side["loss_sum"] == pytest.approx(loss.item(), rel=1e-5, abs=1e-6)
    loss.backward()
    np.testing.assert_allclose(
        current.grad.numpy(), series_grad(config, side).numpy(), atol=1e-5
    )


# ------------------------------------------------------------------ the KL term


@pytest.mark.parametrize(("normalization", "batch_size"), LOSS_CASES)
@pytest.mark.parametrize("bias_correction", [True, False])
def test_trl_kl_against_the_series_kl_penalty(
    tmp_path, normalization, batch_size, bias_correction
):
    """The two KL formulations differ; their documented relation holds.

    At ratio 1 (mu = 1) with zero advantages, so that only the KL acts, and
    d_t = log pi(t) - log pi_ref(t):

    * TRL (beta k3 in the loss, times the ratio by default in 1.16): the per-token
      gradient times ``loss_scale`` is ``beta d_t s_t`` (``beta (1 - exp(-d_t)) s_t``
      without ``use_bias_correction_kl``), ``s_t`` the token's length scale: TRL
      normalises the KL with the loss.
    * the series (``advantages.kl_penalty``: ``beta (mean d - d_t)`` added to each
      token's advantage, not length-scaled): the gradient is ``beta (d_t - mean d)``.
    * TRL's logged ``kl`` is the series' ``kl_k3`` of the same tokens.
    """
    beta = 0.1
    config = series_config(
        kl_coef=beta, normalization=normalization, batch_size=batch_size
    )
    assert mapping.trl_settings(config, "cpu")["beta"] == beta
    gen = torch.Generator().manual_seed(4)
    prompts, completions, _ = fixed_batch(config)
    lengths = [len(c) for group in completions for c in group]
    width = config.max_tokens
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    sampled = [(-torch.rand(n, generator=gen) * 3).tolist() for n in lengths]
    reference = [
        (torch.tensor(row) + torch.randn(len(row), generator=gen) * 0.4).tolist()
        for row in sampled
    ]
    changes, metrics = adv.kl_penalty(sampled, reference, beta)
    # the series: importance_sampling at ratio 1 with the KL changes as advantages
    current = padded(sampled, width).requires_grad_(True)
    per_token = losses.token_loss(
        "importance_sampling",
        current,
        current.detach(),
        padded(changes, width),
        None,
        None,
    )
    (per_token * mask).sum().backward()
    series = current.grad.clone()
    # TRL
    trainer = trl_trainer(tmp_path, config, use_bias_correction_kl=bias_correction)
    current = padded(sampled, width).requires_grad_(True)
    n = len(lengths)
    loss = trl_loss(
        trainer, current, mask, torch.zeros(n), ref=padded(reference, width)
    )
    loss.backward()
    scales = []  # each token's length scale s_t, per group as the series computes
    for g in range(config.batch_size):
        group = lengths[g * config.group_size : (g + 1) * config.group_size]
        scales += adv.length_scales(group, normalization, config.max_tokens)
    s = torch.tensor(scales)[:, None] * mask
    d = (padded(sampled, width) - padded(reference, width)) * mask
    c = mapping.loss_scale(config)
    expected = d if bias_correction else (1 - torch.exp(-d)) * mask
    np.testing.assert_allclose(
        c * current.grad.numpy(), (beta * expected * s).numpy(), atol=1e-6
    )
    mean_d = metrics["kl_k1"]
    np.testing.assert_allclose(
        series.numpy(), (beta * (d - mean_d) * mask).numpy(), atol=1e-6
    )
    assert trainer._metrics["train"]["kl"][-1] == pytest.approx(
        metrics["kl_k3"], rel=1e-5
    )


# ------------------------------------------------------------------ advantages


def test_trl_advantages_against_the_series(tmp_path):
    """TRL's own reward plumbing and group statistics, on rewards from a column:
    scale_rewards="none" equals the series' reward - mean; "group" divides by the
    Bessel-corrected std + 1e-4 where the series uses the population std + 1e-4;
    a degenerate group gets 0 on both sides."""
    config = series_config()
    g = config.group_size
    flat = [r for group in REWARDS for r in group]
    results = {}
    for scale in ("none", "group"):
        trainer = trl_trainer(
            tmp_path / scale,
            series_config(advantage_scale=scale),
            rewards=flat,
            max_completion_length=2,
        )
        assert trainer.scale_rewards == scale
        inputs = [{"prompt": "1 + 1 =", "reward": r} for r in flat]
        out = trainer._generate_and_score_completions(inputs)
        results[scale] = out["advantages"].view(-1, g).tolist()
    for i, rewards in enumerate(REWARDS):
        mean_only = adv.group_advantages(rewards, "none")
        np.testing.assert_allclose(results["none"][i], mean_only, atol=1e-6)
        series = adv.group_advantages(rewards, "group")
        population = float(np.std(rewards))
        bessel = population * math.sqrt(g / (g - 1))
        want = [a / (bessel + 1e-4) for a in mean_only]
        np.testing.assert_allclose(results["group"][i], want, atol=1e-5)
        np.testing.assert_allclose(
            series, [a / (population + 1e-4) for a in mean_only], atol=1e-9
        )
        if population == 0:  # degenerate: zeros everywhere
            assert results["group"][i] == [0.0] * g and series == [0.0] * g
        else:  # about sqrt((G-1)/G) of the series' (0.866 for G = 4)
            nonzero = np.abs(series) > 0
            got = np.asarray(results["group"][i])[nonzero] / np.asarray(series)[nonzero]
            np.testing.assert_allclose(got, math.sqrt((g - 1) / g), rtol=1e-3)


# ------------------------------------------------------------------ logprobs


def test_trl_logprobs_are_tempered_and_the_engines_are_not(tmp_path):
    """TRL scores completions under logits / T; the local engine under the logits
    (temperature 1), both when it trains and what its sampler reports at T = 0.6."""
    temperature = 0.6
    config = series_config(temperature=temperature)
    trainer = trl_trainer(tmp_path, config)
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(10, 4000, (2, 10), generator=gen)
    keep = 4  # the last 4 tokens are the "completion"
    with torch.no_grad():
        trl_lp, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, torch.ones_like(ids), keep
        )
        logits = trainer.model(input_ids=ids).logits[:, -keep - 1 : -1].float()
    targets = ids[:, -keep:, None]
    tempered = torch.log_softmax(logits / temperature, -1).gather(-1, targets)[..., 0]
    plain = torch.log_softmax(logits, -1).gather(-1, targets)[..., 0]
    np.testing.assert_allclose(trl_lp.numpy(), tempered.numpy(), atol=1e-4)
    assert float((trl_lp - plain).abs().max()) > 0.05
    # the engine, on the same tiny-random weights (a fresh LoRA is the base model)
    svc = connect("local", run_dir=tmp_path / "engine")
    tc = svc.create_lora_training_client(MODEL, rank=4, seed=0)
    for row, want in zip(ids.tolist(), plain, strict=True):
        got = engine_logprobs(tc, row[:-keep], [row[-keep:]])[0]
        np.testing.assert_allclose(got, want.numpy(), atol=1e-4)
    sampler = tc.save_weights_and_get_sampling_client()
    prompt = ids[0, :-keep].tolist()
    params = trio.SamplingParams(max_tokens=5, temperature=temperature, seed=1)
    seq = sampler.sample(trio.ModelInput.from_ints(prompt), 1, params).result()
    seq = seq.sequences[0]
    np.testing.assert_allclose(
        engine_logprobs(tc, prompt, [seq.tokens])[0], seq.logprobs, atol=1e-4
    )


# ------------------------------------------------------------------ set-up facts


def test_trl_defaults_assume_a_gpu_and_the_cpu_export_turns_them_off(tmp_path):
    fields = trl.GRPOConfig.__dataclass_fields__
    assert fields["gradient_checkpointing"].default is True
    assert fields["bf16"].default is None  # None means "bf16 unless fp16"
    defaults = trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True)
    assert defaults.bf16 is True and defaults.activation_checkpointing is True
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="bf16/gpu"):
            trl.GRPOConfig(output_dir=str(tmp_path))
    config = series_config()
    cpu = mapping.trl_settings(config, "cpu")
    gpu = mapping.trl_settings(config, "gpu")
    assert (cpu["bf16"], cpu["activation_checkpointing"], cpu["use_cpu"]) == (
        False,
        False,
        True,
    )
    # not TRL's bf16=True: chosen where the script runs (test_mapping.py)
    assert (gpu["bf16"], gpu["activation_checkpointing"]) == ("auto", True)
    args = trl.GRPOConfig(**(cpu | {"output_dir": str(tmp_path)}))
    assert args.bf16 is False and args.gradient_checkpointing is False


def test_the_trl_extra_needs_python_3_11():
    """The project's minimum is TRL's: the extra has no marker that could make it
    install nothing (and the TRL tests vanish) on an older Python."""
    import importlib.metadata
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extra = pyproject["project"]["optional-dependencies"]["trl"]
    assert extra == [f"trl=={mapping.TRL_VERSION}"]
    assert importlib.metadata.metadata("trl")["Requires-Python"] == ">=3.11"
    assert pyproject["project"]["requires-python"] == ">=3.11"
    assert importlib.metadata.version("trl") == mapping.TRL_VERSION
    assert sys.version_info >= (3, 11)


def test_trl_refuses_an_adapter_on_lm_head(tmp_path):
    from peft import LoraConfig

    config = series_config()
    values = mapping.trl_settings(config, "cpu") | {
        "output_dir": str(tmp_path),
        "reward_weights": [1.0],
    }
    dataset = Dataset.from_dict({"prompt": ["a"] * 12, "reward": [0.0] * 12})
    model, tokenizer = load_model(MODEL, device="cpu")
    with pytest.raises(ValueError, match="lm_head"):
        trl.GRPOTrainer(
            model=model,
            reward_funcs=[fixed_reward],
            args=trl.GRPOConfig(**values),
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=LoraConfig(r=4, target_modules=["q_proj", "lm_head"]),
        )


def test_every_known_difference_names_a_test_of_this_file():
    names = {name for name in globals() if name.startswith("test_")}
    for difference in mapping.KNOWN_DIFFERENCES:
        assert difference.test in names, difference
    assert dataclasses.is_dataclass(mapping.KNOWN_DIFFERENCES[0])
