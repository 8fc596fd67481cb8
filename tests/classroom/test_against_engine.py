"""The exercise checks that compare a learner's code with the engine
(``grpo_helpers.classroom.against_engine``): each passes the reference solution and
fails named wrong answers, each with a hint that says what differs.

Notebook 04's importance-sampling loss, notebook 05's clipped loss and GRPO step,
notebook 06's submit-first sampling and two-await update, on the tiny-random model
of the local engine. The wrong answers are the plausible slips: a sign flip, a
missing mask, a detached ratio, a clip on the wrong side or with one bound, a
degenerate group trained, a misaligned Datum, the calls in the wrong order, a
sequential submit, one await too few.
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import pytrio as trio
import torch
from wrong_async_steps import WRONG_TRAIN_STEPS

from grpo_helpers import data, datum, prompts, rollout, step_math
from grpo_helpers.classroom import against_engine, self_checks
from grpo_helpers.config import GRPOConfig
from grpo_helpers.engines import connect

ROOT = Path(__file__).resolve().parents[2]


def load_solution(stem: str):
    path = ROOT / "notebooks" / "solutions" / f"{stem}.py"
    spec = importlib.util.spec_from_file_location(f"solutions_{stem[:2]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


S04 = load_solution("04_datum_alignment")


S05 = load_solution("05_sync_training_loop")


S06 = load_solution("06_async_training_loop")


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    return connect("local", run_dir=tmp_path_factory.mktemp("engine"))


@pytest.fixture(scope="module")
def client(service):
    return service.create_lora_training_client(base_model="tiny-random", rank=4, seed=0)


@pytest.fixture(scope="module")
def batch(client):
    """Three prompts' token ids and one sampling params per prompt (own seeds)."""
    tokenizer = client.get_tokenizer()
    config = GRPOConfig(base_model="tiny-random", dataset="arithmetic", backend="local")
    rows = data.load_split(config, "train")
    tokens = [prompts.build_prompt(tokenizer, rows[i]["question"]) for i in range(3)]
    base = rollout.make_sampling_params(tokenizer, 6, 1.0)
    params = [
        base.model_copy(update={"seed": step_math.derive_seed(0, 0, i)})
        for i in range(3)
    ]
    return tokens, params


@pytest.fixture(scope="module")
def response(client, batch):
    tokens, params = batch
    sampler = client.save_weights_and_get_sampling_client()
    return sampler.sample(
        prompt=trio.ModelInput.from_ints(tokens[0]),
        num_samples=4,
        sampling_params=params[0],
    ).result()


@pytest.fixture(scope="module")
def groups(batch, response):
    """Two groups of completions of different lengths (the check sets the
    advantages and shifts the old logprobs)."""
    tokens, _ = batch
    samples = [
        datum.RolloutSample(list(s.tokens), list(s.logprobs), s.text, 0.0, 0.0)
        for s in response.sequences
    ]
    shorter = [
        datum.RolloutSample(s.tokens[:3], s.logprobs[:3], "", 0.0, 0.0)
        for s in samples[:2]
    ]
    return [(tokens[0], samples), (tokens[1], shorter)]


def verdict(capsys, passed):
    """(passed, the hint line) of the last check."""
    out = capsys.readouterr().out
    hints = [line.strip() for line in out.splitlines() if line.startswith("    ")]
    return passed, hints[0] if hints else ""


# ----------------------------------------------------------------------------------
# Notebook 04: the importance-sampling loss
# ----------------------------------------------------------------------------------


def _is_sign_flip(logprobs, old, adv, mask):
    return torch.where(mask, torch.exp(logprobs - old) * adv, 0.0).sum()


def _is_no_mask(logprobs, old, adv, mask):
    return (-torch.exp(logprobs - old) * adv).sum()


def _is_detached_ratio(logprobs, old, adv, mask):
    ratio = torch.exp(logprobs - old).detach()
    return torch.where(mask, -ratio * adv, 0.0).sum()


def _is_log_ratio(logprobs, old, adv, mask):  # REINFORCE's log pi, not the ratio
    return torch.where(mask, -(logprobs - old) * adv, 0.0).sum()


def _is_mask_off_by_one(logprobs, old, adv, mask):
    shifted = torch.zeros_like(mask)
    shifted[:, 1:] = mask[:, :-1]
    return torch.where(shifted, -torch.exp(logprobs - old) * adv, 0.0).sum()


def _is_float(logprobs, old, adv, mask):
    return (
        torch.where(mask, -torch.exp(logprobs - old) * adv, 0.0).sum().detach().item()
    )


IS_WRONG = {
    "sign flip": (_is_sign_flip, "sign is flipped"),
    "missing mask": (_is_no_mask, "mask is False count"),
    "mask off by one": (_is_mask_off_by_one, "differs from the engine"),
    "detached ratio": (_is_detached_ratio, "carries no gradient"),
    "log-ratio instead of the ratio": (_is_log_ratio, "differs from the engine"),
    "a float, not a tensor": (_is_float, "torch tensor"),
}


def test_04_loss_check_passes_the_solution(client, groups, capsys):
    passed = against_engine.loss_check(
        "exercise 3", S04.importance_sampling_loss, client, groups, strict=False
    )
    assert verdict(capsys, passed) == (True, "")


@pytest.mark.parametrize("name", sorted(IS_WRONG))
def test_04_loss_check_fails_a_wrong_answer(client, groups, capsys, name):
    wrong, hint = IS_WRONG[name]
    passed = against_engine.loss_check(
        "exercise 3", wrong, client, groups, strict=False
    )
    got = verdict(capsys, passed)
    assert got[0] is False and hint in got[1], got


def test_04_the_check_cannot_be_passed_with_the_engines_number(client, groups, capsys):
    """An answer that returns the engine's loss_sum on the notebook's own Datums
    (computed before the check) fails: the check's Datums have other old logprobs."""
    plain = [
        datum.build_grpo_datum(
            prompt, datum.RolloutSample(s.tokens, s.logprobs, "", 0.0, 0.5)
        )
        for prompt, samples in groups
        for s in samples
    ]
    known = client.forward(plain, "importance_sampling").result().metrics["loss_sum"]

    def cheat(logprobs, old, adv, mask):
        return torch.tensor(known, requires_grad=True) + 0 * logprobs.sum()

    assert not against_engine.loss_check(
        "exercise 3", cheat, client, groups, strict=False
    )


def test_the_loss_case_reaches_both_sides_of_both_bounds(client, groups):
    case = against_engine.loss_case(client, groups, "ppo", 0.8, 1.28)
    ratio = torch.exp(case.logprobs - case.old_logprobs)[case.mask]
    adv = case.advantages[case.mask]
    for side in (ratio > 1.28, ratio < 0.8, (ratio > 0.8) & (ratio < 1.28)):
        assert (side & (adv > 0)).any() and (side & (adv < 0)).any()
    # the engine's own loss function on the tensors is the engine's loss_sum
    assert float(case.engine_loss(case.logprobs)) == pytest.approx(
        case.loss_sum, abs=1e-3
    )


# ----------------------------------------------------------------------------------
# Notebook 05: the clipped loss
# ----------------------------------------------------------------------------------


def _ppo(logprobs, old, adv, mask, low, high, pick=torch.minimum):
    ratio = torch.exp(logprobs - old)
    terms = pick(ratio * adv, ratio.clamp(low, high) * adv)
    return torch.where(mask, -terms, 0.0).sum()


PPO_WRONG = {
    "sign flip": (
        lambda lp, old, adv, mask, lo, hi: -_ppo(lp, old, adv, mask, lo, hi),
        "sign is flipped",
    ),
    "missing mask": (
        lambda lp, old, adv, mask, lo, hi: _ppo(
            lp, old, adv, torch.ones_like(mask), lo, hi
        ),
        "mask is False count",
    ),
    "clip on the wrong side (max for min)": (
        lambda lp, old, adv, mask, lo, hi: _ppo(
            lp, old, adv, mask, lo, hi, torch.maximum
        ),
        "wrong side",
    ),
    "one epsilon for both bounds": (
        lambda lp, old, adv, mask, lo, hi: _ppo(lp, old, adv, mask, lo, 2 - lo),
        "upper bound is not clip_high",
    ),
    "always clipped, no min": (
        lambda lp, old, adv, mask, lo, hi: torch.where(
            mask, -torch.exp(lp - old).clamp(lo, hi) * adv, 0.0
        ).sum(),
        "clips every ratio",
    ),
    "never clipped": (
        lambda lp, old, adv, mask, lo, hi: torch.where(
            mask, -torch.exp(lp - old) * adv, 0.0
        ).sum(),
        "never clips",
    ),
}


def test_05_clipped_loss_check_passes_the_solution(client, groups, capsys):
    passed = against_engine.loss_check(
        "exercise 1",
        S05.ppo_clipped_loss,
        client,
        groups,
        loss_fn="ppo",
        clip_low=0.8,
        clip_high=1.28,
        strict=False,
    )
    assert verdict(capsys, passed) == (True, "")


@pytest.mark.parametrize("name", sorted(PPO_WRONG))
def test_05_clipped_loss_check_fails_a_wrong_answer(client, groups, capsys, name):
    wrong, hint = PPO_WRONG[name]
    passed = against_engine.loss_check(
        "exercise 1",
        wrong,
        client,
        groups,
        loss_fn="ppo",
        clip_low=0.8,
        clip_high=1.28,
        strict=False,
    )
    got = verdict(capsys, passed)
    assert got[0] is False and hint in got[1], got


# ----------------------------------------------------------------------------------
# Notebook 05: one GRPO step
# ----------------------------------------------------------------------------------


def _step(sign=1.0, skip=True, shift=False, order=("fb", "optim"), scale=False):
    """A GRPO step with one slip (the defaults give the solution)."""

    def step(training_client, prompt_list, responses, rewards, adam_params):
        datums = []
        for prompt, response, group_rewards in zip(
            prompt_list, responses, rewards, strict=True
        ):
            if skip and max(group_rewards) == min(group_rewards):
                continue
            t = torch.tensor(group_rewards)
            adv = (t - t.mean()) / (t.std(unbiased=False) + 1e-4 if scale else 1.0)
            for seq, a in zip(response.sequences, adv.tolist(), strict=True):
                tokens, logprobs = list(seq.tokens), list(seq.logprobs)
                pad = len(prompt) - 1
                targets = [0] * pad + ([prompt[-1]] + tokens[:-1] if shift else tokens)
                datums.append(
                    trio.Datum(
                        model_input=trio.ModelInput.from_ints(prompt + tokens[:-1]),
                        loss_fn_inputs={
                            "target_tokens": np.asarray(targets, np.int64),
                            "logprobs": np.asarray([0.0] * pad + logprobs, np.float32),
                            "advantages": np.asarray(
                                [0.0] * pad + [sign * a] * len(tokens), np.float32
                            ),
                        },
                    )
                )
        if not datums:
            return None
        if order == ("fb", "optim"):
            fb = training_client.forward_backward(datums, "importance_sampling")
            optim = training_client.optim_step(adam_params)
        else:
            optim = training_client.optim_step(adam_params)
            fb = training_client.forward_backward(datums, "importance_sampling")
        return fb.result(), optim.result()

    return step


def _groups_reversed(training_client, prompt_list, responses, rewards, adam_params):
    """The solution, with the groups taken in reverse order: the same Datums."""
    return S05.grpo_step(
        training_client, prompt_list[::-1], responses[::-1], rewards[::-1], adam_params
    )


STEP_WRONG = {
    "advantage sign flip": (_step(sign=-1.0), "wrong sign"),
    "degenerate group trained": (_step(skip=False), "degenerate"),
    "targets off by one": (_step(shift=True), "misaligned"),
    "optim_step before forward_backward": (
        _step(order=("optim", "fb")),
        "then one optim_step",
    ),
    "std-scaled advantages": (_step(scale=True), "advantages differ"),
}


def test_05_grpo_step_check_passes_the_solution(service, batch, response, capsys):
    fresh = service.create_lora_training_client(
        base_model="tiny-random", rank=4, seed=1
    )
    passed = against_engine.grpo_step_check(
        "exercise 2",
        S05.grpo_step,
        fresh,
        batch[0][0],
        response,
        trio.AdamParams(learning_rate=1e-4),
        strict=False,
    )
    assert verdict(capsys, passed) == (True, "")
    assert fresh.step == 1  # the update really ran on the engine


@pytest.mark.parametrize("step", [_step(), _groups_reversed], ids=["hand", "reversed"])
def test_05_grpo_step_check_a_hand_written_solution_passes(
    client, batch, response, capsys, step
):
    """The slip-free version of the wrong answers below passes (they differ from it
    by their slip only), and so do the same Datums in another order."""
    passed = against_engine.grpo_step_check(
        "exercise 2",
        step,
        client,
        batch[0][0],
        response,
        trio.AdamParams(learning_rate=1e-4),
        strict=False,
    )
    assert verdict(capsys, passed) == (True, "")


@pytest.mark.parametrize("name", sorted(STEP_WRONG))
def test_05_grpo_step_check_fails_a_wrong_answer(client, batch, response, capsys, name):
    wrong, hint = STEP_WRONG[name]
    passed = against_engine.grpo_step_check(
        "exercise 2",
        wrong,
        client,
        batch[0][0],
        response,
        trio.AdamParams(learning_rate=1e-4),
        strict=False,
    )
    got = verdict(capsys, passed)
    assert got[0] is False and hint in got[1], got


def test_05_grpo_step_check_says_stub(client, batch, response, capsys):
    passed = against_engine.grpo_step_check(
        "exercise 2",
        lambda *args: None,
        client,
        batch[0][0],
        response,
        trio.AdamParams(learning_rate=1e-4),
        strict=False,
    )
    assert verdict(capsys, passed) == (False, self_checks.STUB_HINT)


# ----------------------------------------------------------------------------------
# Notebook 06: every request in flight before the first wait
# ----------------------------------------------------------------------------------


def _sequential(sampling_client, tokens_list, params_list, group_size):
    return [
        sampling_client.sample(
            prompt=trio.ModelInput.from_ints(t),
            num_samples=group_size,
            sampling_params=p,
        ).result()
        for t, p in zip(tokens_list, params_list, strict=True)
    ]


def _first_params_for_all(sampling_client, tokens_list, params_list, group_size):
    return S06.sample_submitted_first(
        sampling_client, tokens_list, [params_list[0]] * len(tokens_list), group_size
    )


def _reversed(sampling_client, tokens_list, params_list, group_size):
    return S06.sample_submitted_first(
        sampling_client, tokens_list, params_list, group_size
    )[::-1]


def _one_each(sampling_client, tokens_list, params_list, group_size):
    return S06.sample_submitted_first(sampling_client, tokens_list, params_list, 1)


def _async_gather(sampling_client, tokens_list, params_list, group_size):
    async def run():
        return await asyncio.gather(
            *[
                sampling_client.sample_async(
                    prompt=trio.ModelInput.from_ints(t),
                    num_samples=group_size,
                    sampling_params=p,
                )
                for t, p in zip(tokens_list, params_list, strict=True)
            ]
        )

    return asyncio.run(run())


SUBMIT_WRONG = {
    "sequential submit": (_sequential, "in flight at once"),
    "the first prompt's params for all": (_first_params_for_all, "own sampling"),
    "responses in reverse order": (_reversed, "prompt order"),
    "one completion per prompt": (_one_each, "group_size"),
    "sample_async": (_async_gather, "sync calls only"),
}


def test_06_submitted_first_check_passes_the_solution(client, batch, capsys):
    sampler = client.save_weights_and_get_sampling_client()
    tokens, params = batch
    passed = against_engine.submitted_first_check(
        "exercise 1",
        S06.sample_submitted_first,
        sampler,
        tokens,
        params,
        4,
        strict=False,
    )
    assert verdict(capsys, passed) == (True, "")


@pytest.mark.parametrize("name", sorted(SUBMIT_WRONG))
def test_06_submitted_first_check_fails_a_wrong_answer(client, batch, capsys, name):
    sampler = client.save_weights_and_get_sampling_client()
    tokens, params = batch
    wrong, hint = SUBMIT_WRONG[name]
    passed = against_engine.submitted_first_check(
        "exercise 1", wrong, sampler, tokens, params, 4, strict=False
    )
    got = verdict(capsys, passed)
    assert got[0] is False and hint in got[1], got


# ----------------------------------------------------------------------------------
# Notebook 06: two awaits
# ----------------------------------------------------------------------------------


AWAIT_WRONG = {
    name: (WRONG_TRAIN_STEPS[name], hint)
    for name, hint in (
        (
            "awaits forward_backward before submitting optim_step",
            "only one request was in flight",
        ),
        ("one await too few", "one await too few"),
        ("optim_step submitted first", "forward_backward first"),
        ("the default loss (cross_entropy)", "loss_fn='cross_entropy'"),
    )
}


@pytest.fixture
def step_datums(batch, response):
    return [
        datum.build_grpo_datum(
            batch[0][0],
            datum.RolloutSample(list(s.tokens), list(s.logprobs), "", 0.0, a),
        )
        for s, a in zip(response.sequences, [0.5, -0.5, 0.25, -0.25], strict=True)
    ]


def test_06_two_await_check_passes_the_solution(service, step_datums, capsys):
    fresh = service.create_lora_training_client(
        base_model="tiny-random", rank=4, seed=2
    )
    passed = asyncio.run(
        against_engine.two_await_check(
            "exercise 2",
            S06.train_step_async,
            fresh,
            step_datums,
            trio.AdamParams(learning_rate=1e-4),
            strict=False,
        )
    )
    assert verdict(capsys, passed) == (True, "")
    assert fresh.step == 1


@pytest.mark.parametrize("name", sorted(AWAIT_WRONG))
def test_06_two_await_check_fails_a_wrong_answer(service, step_datums, capsys, name):
    fresh = service.create_lora_training_client(
        base_model="tiny-random", rank=4, seed=3
    )
    wrong, hint = AWAIT_WRONG[name]
    passed = asyncio.run(
        against_engine.two_await_check(
            "exercise 2",
            wrong,
            fresh,
            step_datums,
            trio.AdamParams(learning_rate=1e-4),
            strict=False,
        )
    )
    got = verdict(capsys, passed)
    assert got[0] is False and hint in got[1], got
