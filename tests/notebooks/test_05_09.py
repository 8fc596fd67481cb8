"""Notebooks 05-09: their exercise solutions, what they compute by hand, their shape.

Three groups of tests:

* the solutions in ``notebooks/solutions/0[5-9]_*.py`` against the engine and the
  package (tiny-random model on the local engine);
* what the notebooks show by hand and the package also computes: the hand-made
  rollout group and Datums of notebook 05, ``loss_sum = -sum(A_i * C_i)`` at ratio 1,
  an update moving probability towards positive advantages, the same draws sync and
  async (notebook 06);
* the notebooks themselves: the house opening, one ``parameters`` cell, the PyTRIO
  preset, stripped outputs. Their execution (every self-check printing "not yet"
  with the stubs, and, with the teacher's exercise and check cells run at the end
  of the same execution, "ok" and every hidden test passing) is checked on the one
  execution per session of ``tests/notebooks/test_executed.py``.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import itertools
import math
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
import pytrio as trio
import torch
from notebook_kernel import without_guard
from tiny import tiny

from grpo_helpers import (
    advantages,
    data,
    datum,
    presets,
    prompts,
    rewards,
    rollout,
    run_files,
    step_math,
    training,
)
from grpo_helpers.config import GRPOConfig
from grpo_helpers.engines import connect
from grpo_helpers.local import checkpoints
from grpo_helpers.results import report, stats

ROOT = Path(__file__).resolve().parents[2]


NOTEBOOKS = {
    "05": ("05_sync_training_loop", "The sync training loop"),
    "06": ("06_async_training_loop", "The async training loop"),
    "07": ("07_evaluating_a_trained_model", "Evaluating a trained model"),
    "08": ("08_what_grpo_learned", "What GRPO learned"),
    "09": ("09_what_the_knobs_do", "What the knobs do"),
}


#: The article's PyTRIO run (grpo-notes.md): what backend="pytrio" must select.
ARTICLE_RUN = {
    "base_model": "Qwen/Qwen3.5-4B",
    "dataset": "gsm8k",
    "steps": 50,
    "batch_size": 2,
    "group_size": 16,
    "max_tokens": 512,
    "lora_rank": 16,
    "learning_rate": 4e-5,
    "reward": "shaped",
}


def load_solution(key: str):
    name = NOTEBOOKS[key][0]
    path = ROOT / "notebooks" / "solutions" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"solutions_{key}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_notebook(key: str) -> nbformat.NotebookNode:
    return nbformat.read(
        ROOT / "notebooks" / f"{NOTEBOOKS[key][0]}.ipynb", as_version=4
    )


# ----------------------------------------------------------------------------------
# A tiny-random group on the local engine, shared by the engine tests
# ----------------------------------------------------------------------------------

MAX_TOKENS = 6


GROUP_SIZE = 4


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    return connect("local", run_dir=tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture(scope="module")
def question():
    config = GRPOConfig(base_model="tiny-random", dataset="arithmetic", backend="local")
    row = data.load_split(config, "train")[0]
    return row["question"], row["answer"].split("####")[-1].strip()


def new_client(service, seed=0):
    return service.create_lora_training_client(
        base_model="tiny-random", rank=4, seed=seed
    )


def sample_group(client, tokenizer, prompt_tokens, seed=0):
    sampler = client.save_weights_and_get_sampling_client()
    params = rollout.make_sampling_params(tokenizer, MAX_TOKENS, 1.0, seed=seed)
    return sampler.sample(
        prompt=trio.ModelInput.from_ints(prompt_tokens),
        num_samples=GROUP_SIZE,
        sampling_params=params,
    ).result()


def datums_with_advantages(prompt_tokens, response, advantages):
    """Datums of a sampled group with chosen (non-degenerate) advantages."""
    samples = [
        datum.RolloutSample(
            tokens=list(seq.tokens),
            logprobs=list(seq.logprobs),
            text=seq.text,
            reward=0.0,
            advantage=a,
        )
        for seq, a in zip(response.sequences, advantages, strict=True)
    ]
    return samples, [datum.build_grpo_datum(prompt_tokens, s) for s in samples]


@pytest.fixture(scope="module")
def trained_group(service, question):
    """One forward_backward on a group whose advantages are not all zero."""
    client = new_client(service)
    tokenizer = client.get_tokenizer()
    prompt_tokens = prompts.build_prompt(tokenizer, question[0])
    response = sample_group(client, tokenizer, prompt_tokens)
    advantages = [0.75, -0.25, -0.25, -0.25]
    samples, datums = datums_with_advantages(prompt_tokens, response, advantages)
    fb_output = client.forward_backward(datums, loss_fn="importance_sampling").result()
    return client, samples, datums, fb_output


# ----------------------------------------------------------------------------------
# Notebook 05
# ----------------------------------------------------------------------------------


def test_05_metrics_as_the_notebook_explains_them(trained_group):
    """token_count = sum of model_input lengths; loss_sum = -sum(A_i C_i) at rho 1."""
    _, samples, datums, fb_output = trained_group
    metrics = fb_output.metrics
    assert metrics["token_count"] == sum(d.model_input.length for d in datums)
    predicted = -sum(s.advantage * len(s.tokens) for s in samples)
    assert metrics["loss_sum"] == pytest.approx(predicted, rel=1e-3, abs=1e-4)
    assert metrics["loss_mean"] == pytest.approx(
        metrics["loss_sum"] / metrics["token_count"]
    )
    ratios = np.concatenate(
        [
            np.exp(np.array(out["logprobs"].tolist()[-len(s.tokens) :]) - s.logprobs)
            for out, s in zip(fb_output.loss_fn_outputs, samples, strict=True)
        ]
    )
    assert np.allclose(ratios, 1.0, atol=1e-3)


def test_05_an_update_moves_probability_towards_positive_advantages(service, question):
    """After one small step, sum_i A_i * change of log p(completion i) > 0."""
    client = new_client(service, seed=1)
    tokenizer = client.get_tokenizer()
    prompt_tokens = prompts.build_prompt(tokenizer, question[0])
    response = sample_group(client, tokenizer, prompt_tokens, seed=3)
    advantages = [0.75, -0.25, -0.25, -0.25]
    samples, datums = datums_with_advantages(prompt_tokens, response, advantages)
    before = client.forward_backward(datums, loss_fn="importance_sampling").result()
    client.optim_step(trio.AdamParams(learning_rate=1e-4)).result()
    after = client.forward(datums, loss_fn="importance_sampling").result()
    change = [
        sum(new["logprobs"].tolist()[-len(s.tokens) :])
        - sum(old["logprobs"].tolist()[-len(s.tokens) :])
        for new, old, s in zip(
            after.loss_fn_outputs, before.loss_fn_outputs, samples, strict=True
        )
    ]
    assert sum(a * c for a, c in zip(advantages, change, strict=True)) > 0
    assert change[0] > 0  # the one positive completion became more likely


def test_05_hand_made_group_matches_the_package(service, question):
    """Notebook 05, sections 4-6 = samples_from_response + build_step_datums.

    The expectation is computed by hand (plain Python: mean, subtraction, list
    concatenation), not with the package functions under test.
    """
    client = new_client(service)
    tokenizer = client.get_tokenizer()
    prompt_tokens = prompts.build_prompt(tokenizer, question[0])
    response = sample_group(client, tokenizer, prompt_tokens)
    gold = question[1]
    texts = [seq.text for seq in response.sequences]

    def reward_fn(text, _gold):  # a different number for (almost) every text
        return float(sum(map(ord, text)) % 101)

    group_rewards = [reward_fn(text, gold) for text in texts]
    assert len(set(group_rewards)) > 1, "pick another reward: this group is flat"
    mean = sum(group_rewards) / len(group_rewards)
    by_hand = [
        datum.RolloutSample(list(seq.tokens), list(seq.logprobs), text, r, r - mean)
        for seq, text, r in zip(response.sequences, texts, group_rewards, strict=True)
    ]
    package = rollout.samples_from_response(response, tokenizer, gold, reward_fn)
    assert [s.reward for s in package] == group_rewards
    for got, want in zip(package, by_hand, strict=True):
        assert (got.tokens, got.logprobs, got.text) == (
            want.tokens,
            want.logprobs,
            want.text,
        )
        assert got.advantage == pytest.approx(want.advantage, abs=1e-12)
    group = step_math.PromptGroup(0, prompt_tokens, gold, package)
    package_datums = step_math.build_step_datums([group])
    p = len(prompt_tokens)
    for d, s in zip(package_datums, by_hand, strict=True):
        c = len(s.tokens)
        assert d.model_input.to_ints() == prompt_tokens + s.tokens[:-1]
        inputs = d.loss_fn_inputs
        assert inputs["target_tokens"].tolist() == [0] * (p - 1) + s.tokens
        assert inputs["logprobs"].tolist() == pytest.approx(
            [0.0] * (p - 1) + s.logprobs, abs=1e-6
        )
        assert inputs["advantages"].tolist() == pytest.approx(
            [0.0] * (p - 1) + [s.advantage] * c, abs=1e-6
        )


def _synthetic_samples() -> pd.DataFrame:
    """samples.jsonl rows of two steps with mixed, degenerate and partial groups."""
    texts_rewards = {
        0: [
            (7, ["\\boxed{12}", "12", "\\boxed{11}", "x"]),
            (8, ["\\boxed{5}", "\\boxed{5}", "\\boxed{5}", "\\boxed{5}"]),
        ],
        1: [
            (9, ["no", "no", "no", "no"]),
            (10, ["\\boxed{3}", "\\boxed{4}", "3", "\\boxed{30}"]),
            (11, ["\\boxed{12}", "\\boxed{12}", "\\boxed{11}", "12"]),
        ],
    }
    golds = {7: "12", 8: "5", 9: "1", 10: "3", 11: "12"}
    records = []
    expected = {}
    for step, groups in texts_rewards.items():
        prompt_groups = []
        for index, texts in groups:
            gold = golds[index]
            group_rewards = [rewards.shaped_reward(t, gold) for t in texts]
            samples = [
                datum.RolloutSample([1, 2], [-0.1, -0.2], t, r, 0.0)
                for t, r in zip(texts, group_rewards, strict=True)
            ]
            prompt_groups.append(step_math.PromptGroup(index, [5, 6], gold, samples))
        records += step_math.sample_records(step, prompt_groups)
        expected[step] = step_math.step_metrics(
            step,
            prompt_groups,
            [],
            64,
            {},
            {},
            {"sampling": 0.0, "training": 0.0, "total": 0.0},
        )
    return pd.DataFrame(records), expected


def test_05_step_summary_matches_step_metrics():
    solution = load_solution("05")
    samples, expected = _synthetic_samples()
    for step, row in expected.items():
        got = solution.step_summary(samples, step)
        for key in ("reward_mean", "accuracy", "frac_degenerate"):
            assert got[key] == pytest.approx(row[key]), (step, key)
    assert 0 < expected[1]["frac_degenerate"] < 1


def test_05_step_summary_on_a_real_run(tmp_path, service):
    solution = load_solution("05")
    config = GRPOConfig(**tiny(group_size=2, run_dir=str(tmp_path / "run")))
    training.train_sync(config, service, progress=False)
    metrics = run_files.load_metrics(config.run_path)
    samples = run_files.load_samples(config.run_path)
    for row in metrics.to_dict("records"):
        got = solution.step_summary(samples, row["step"])
        for key in ("reward_mean", "accuracy", "frac_degenerate"):
            assert got[key] == pytest.approx(row[key])


# ----------------------------------------------------------------------------------
# Notebook 06
# ----------------------------------------------------------------------------------


def _batch(client, n=3):
    tokenizer = client.get_tokenizer()
    config = GRPOConfig(base_model="tiny-random", dataset="arithmetic", backend="local")
    rows = data.load_split(config, "train")
    tokens = [prompts.build_prompt(tokenizer, rows[i]["question"]) for i in range(n)]
    base = rollout.make_sampling_params(tokenizer, MAX_TOKENS, 1.0)
    params = [
        base.model_copy(update={"seed": step_math.derive_seed(0, 0, i)})
        for i in range(n)
    ]
    return tokens, params


def _sequential(sampler, tokens, params):
    return [
        sampler.sample(
            prompt=trio.ModelInput.from_ints(t),
            num_samples=GROUP_SIZE,
            sampling_params=p,
        ).result()
        for t, p in zip(tokens, params, strict=True)
    ]


def test_06_sample_submitted_first(service):
    solution = load_solution("06")
    client = new_client(service)
    sampler = client.save_weights_and_get_sampling_client()
    tokens, params = _batch(client)
    got = solution.sample_submitted_first(sampler, tokens, params, GROUP_SIZE)
    want = _sequential(sampler, tokens, params)
    assert [r.input_tokens for r in got] == [len(t) for t in tokens]
    assert [[s.tokens for s in r.sequences] for r in got] == [
        [s.tokens for s in r.sequences] for r in want
    ]


def test_06_sync_and_async_sampling_draw_the_same_completions(service):
    """Notebook 06, section 3: batching changes the speed, not the draws."""
    client = new_client(service)
    sampler = client.save_weights_and_get_sampling_client()
    tokens, params = _batch(client)

    async def gathered():
        return await asyncio.gather(
            *[
                sampler.sample_async(
                    prompt=trio.ModelInput.from_ints(t),
                    num_samples=GROUP_SIZE,
                    sampling_params=p,
                )
                for t, p in zip(tokens, params, strict=True)
            ]
        )

    concurrent = asyncio.run(gathered())
    sequential = _sequential(sampler, tokens, params)
    assert [[s.tokens for s in r.sequences] for r in concurrent] == [
        [s.tokens for s in r.sequences] for r in sequential
    ]


def _group_datums(client, question):
    tokenizer = client.get_tokenizer()
    prompt_tokens = prompts.build_prompt(tokenizer, question[0])
    _, datums = datums_with_advantages(
        prompt_tokens,
        sample_group(client, tokenizer, prompt_tokens),
        [0.5, -0.5, 0.25, -0.25],
    )
    return prompt_tokens, datums


def _lora(client, name):
    path = client.save_weights_for_sampler(name).result().path
    return checkpoints.load_checkpoint(path)[1]


def _sync_update(client, datums, adam):
    fb = client.forward_backward(datums, loss_fn="importance_sampling")
    optim = client.optim_step(adam)
    return fb.result(), optim.result()


def test_06_one_await_and_two_awaits(service, question):
    """Notebook 06, section 2: one ``await`` of ``sample_async`` gives the
    response (the draws of the sync call); the first ``await`` of
    ``forward_backward_async`` gives a future (``.metrics`` fails, the slip the
    notebook warns of), the second its output: the sync call's. Both training
    calls are queued before either is awaited, and run in that order: the update
    equals the sync one on a twin client."""
    client, twin = new_client(service), new_client(service)
    prompt_tokens, datums = _group_datums(client, question)
    adam = trio.AdamParams(learning_rate=1e-2)
    sampler = client.save_weights_and_get_sampling_client()
    params = trio.SamplingParams(max_tokens=3, seed=7)
    prompt = trio.ModelInput.from_ints(prompt_tokens)

    async def steps():
        response = await sampler.sample_async(
            prompt=prompt, num_samples=2, sampling_params=params
        )
        fb_future = await client.forward_backward_async(
            datums, loss_fn="importance_sampling"
        )
        optim_future = await client.optim_step_async(adam)
        return response, fb_future, await fb_future, await optim_future

    response, fb_future, fb_output, optim_output = asyncio.run(steps())
    assert isinstance(response, trio.types.SampleResponse)
    again = sampler.sample(prompt=prompt, num_samples=2, sampling_params=params)
    assert [s.tokens for s in response.sequences] == [
        s.tokens for s in again.result().sequences
    ]
    assert isinstance(fb_future, trio.types.APIFuture)
    with pytest.raises(AttributeError):
        _ = fb_future.metrics
    assert isinstance(fb_output, trio.types.ForwardBackwardOutput)
    want_fb, want_optim = _sync_update(twin, datums, adam)
    assert fb_output.metrics["loss_sum"] == pytest.approx(want_fb.metrics["loss_sum"])
    assert optim_output.metrics["grad_norm"] == pytest.approx(
        want_optim.metrics["grad_norm"]
    )
    got, want = _lora(client, "async"), _lora(twin, "sync")
    assert any(float(t.abs().max()) > 0 for k, t in want.items() if "lora_B" in k)
    for key, tensor in want.items():
        torch.testing.assert_close(got[key], tensor, msg=key)


class _Order:
    """A training client that records when each call is submitted and awaited."""

    def __init__(self, client):
        self.client, self.log = client, []

    async def forward_backward_async(self, *args, **kwargs):
        future = await self.client.forward_backward_async(*args, **kwargs)
        self.log.append("submit forward_backward")
        return _Awaited(future, "forward_backward", self.log)

    async def optim_step_async(self, *args, **kwargs):
        future = await self.client.optim_step_async(*args, **kwargs)
        self.log.append("submit optim_step")
        return _Awaited(future, "optim_step", self.log)

    def __getattr__(self, name):
        return getattr(self.client, name)


class _Awaited:
    def __init__(self, future, name, log):
        self.future, self.name, self.log = future, name, log

    def __await__(self):
        self.log.append(f"await {self.name}")
        return self.future.__await__()


def test_06_train_step_async(service, question):
    """Exercise 2's solution: forward_backward, then optim_step, both submitted
    before either is awaited; the update is the sync one of a twin client."""
    solution = load_solution("06")
    client, twin = new_client(service), new_client(service)
    _, datums = _group_datums(client, question)
    adam = trio.AdamParams(learning_rate=1e-2)
    order = _Order(client)
    fb_output, optim_output = asyncio.run(
        solution.train_step_async(order, datums, adam)
    )
    assert order.log[:2] == ["submit forward_backward", "submit optim_step"]
    assert sorted(order.log[2:]) == ["await forward_backward", "await optim_step"]
    want_fb, want_optim = _sync_update(twin, datums, adam)
    assert fb_output.metrics["loss_sum"] == pytest.approx(want_fb.metrics["loss_sum"])
    assert fb_output.metrics["loss_sum"] != 0.0
    assert optim_output.metrics["grad_norm"] == pytest.approx(
        want_optim.metrics["grad_norm"]
    )
    assert client.step == twin.step == 1
    got, want = _lora(client, "async"), _lora(twin, "sync")
    for key, tensor in want.items():
        torch.testing.assert_close(got[key], tensor, msg=key)


# ----------------------------------------------------------------------------------
# Notebook 07
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "n"), [(79, 100), (95, 100), (0, 10), (10, 10), (1, 3), (7, 8), (500, 1000)]
)
def test_07_wilson_by_hand(k, n):
    solution = load_solution("07")
    low, high = solution.wilson_by_hand(k, n)
    want = stats.wilson_interval(k, n)
    assert (low, high) == pytest.approx(want, abs=1e-4)


def _records(outcomes, seed):
    frame = pd.DataFrame({"index": range(len(outcomes)), "exact": outcomes})
    return frame.sample(frac=1, random_state=seed)  # any order


@pytest.mark.parametrize("seed", range(5))
def test_07_flips_and_p_matches_compare(seed):
    solution = load_solution("07")
    rng = np.random.default_rng(seed)
    base = rng.random(60) < 0.5
    trained = np.where(rng.random(60) < 0.3, ~base, base)
    b, c, p = solution.flips_and_p(_records(base, seed), _records(trained, seed + 1))
    full = {
        "question": ["q"] * 60,
        "gold": ["1"] * 60,
        "completion": [""] * 60,
        "extracted": [None] * 60,
        "answer_lenient": [None] * 60,
        "boxed": [False] * 60,
    }
    base_frame = pd.DataFrame({"index": range(60), "exact": base, "lenient": base})
    trained_frame = pd.DataFrame(
        {"index": range(60), "exact": trained, "lenient": trained}
    )
    comparison = report.compare(
        base_frame.assign(**full), trained_frame.assign(**full), n_bootstrap=0
    )
    assert (b, c) == (comparison.wrong_to_right, comparison.right_to_wrong)
    assert p == pytest.approx(comparison.p_value, rel=1e-12)


def test_07_flips_and_p_with_no_flips():
    solution = load_solution("07")
    same = _records([True, False, True], 0)
    assert solution.flips_and_p(same, same) == (0, 0, 1.0)


def test_07_questions_needed():
    solution = load_solution("07")

    def half_width(accuracy, n):
        low, high = stats.wilson_interval(round(accuracy * n), n)
        return (high - low) / 2

    for accuracy, target in itertools.product((0.5, 0.8, 0.95), (0.1, 0.05, 0.03)):
        n = solution.questions_needed(accuracy, target)
        assert half_width(accuracy, n) <= target
        assert all(half_width(accuracy, m) > target for m in range(1, n))
    assert solution.questions_needed(0.8, 0.08) == 95  # about 100 questions


def test_07_what_the_notebook_quotes():
    """The article's 79/100 and 95/100 intervals and the McNemar scenarios."""
    assert stats.wilson_interval(79, 100) == pytest.approx((0.700, 0.858), abs=1e-3)
    assert stats.wilson_interval(95, 100) == pytest.approx((0.888, 0.978), abs=1e-3)
    for b, c in [(16, 0), (18, 2), (20, 4), (24, 8)]:
        assert stats.mcnemar_exact_p(b, c) < 0.01
    assert stats.mcnemar_exact_p(16, 0) == pytest.approx(2 / 2**16)
    assert math.isclose(stats.mcnemar_exact_p(0, 0), 1.0)


# ----------------------------------------------------------------------------------
# Notebook 08
# ----------------------------------------------------------------------------------


def test_08_gain_by_source_matches_the_package():
    from grpo_helpers.results import answers

    solution = load_solution("08")
    kinds = [c for c in answers.CLASSES if c != answers.RIGHT_BOXED]
    every_kind = pd.DataFrame(
        {
            "flip": ["wrong -> right"] * len(kinds) + ["right -> wrong"] * len(kinds),
            "before": kinds + [answers.RIGHT_BOXED] * len(kinds),
            "after": [answers.RIGHT_BOXED] * len(kinds) + kinds,
        }
    )
    for flips in (every_kind, every_kind[::3], every_kind[:0]):
        assert solution.gain_by_source(flips) == answers.gain_sources(flips).to_dict()


# ----------------------------------------------------------------------------------
# Notebook 09
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", advantages.NORMALIZATIONS)
def test_09_token_weights(mode):
    solution = load_solution("09")
    for lengths in ([5, 40], [1], [3, 3, 9, 1], [64] * 8):
        assert solution.token_weights(lengths, mode, 64) == pytest.approx(
            advantages.length_scales(lengths, mode, 64)
        )


def test_09_k3_estimate():
    solution = load_solution("09")
    rng = np.random.default_rng(1)
    for sizes in ([1], [3, 7], [5, 5, 5]):
        sampled = [list(-rng.exponential(size=n)) for n in sizes]
        reference = [list(-rng.exponential(size=n)) for n in sizes]
        want = advantages.kl_penalty(sampled, reference, 0.0)[1]["kl_k3"]
        assert solution.k3_estimate(sampled, reference) == pytest.approx(want)
        assert want >= 0


# ----------------------------------------------------------------------------------
# The notebooks themselves
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(NOTEBOOKS))
def test_notebook_opening_and_parameters(key):
    nb = read_notebook(key)
    assert nb.cells[0].cell_type == "markdown"
    assert nb.cells[0].source.startswith(f"# {key} {NOTEBOOKS[key][1]}\n")
    first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    opening = "\n\n".join(c.source for c in nb.cells[:first_code])
    for part in ("**You will learn**", "**Prerequisites**", "**Runtime**"):
        assert part in opening
    # issue 22: versions, engine and device in one helper call, a short first cell
    versions = nb.cells[first_code].source
    assert "settings.environment_report(" in versions
    # after the guard that names `make lab` (test_kernel.py)
    assert len(without_guard(versions).splitlines()) <= 15
    parameters = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1
    lines = [line for line in parameters[0].source.splitlines() if line.strip()]
    for line in lines:
        assert "=" in line.split("#")[0] and "  # " in line, line
    names = [line.split("=")[0].strip() for line in lines]
    assert names[0] == "backend"
    if key in ("05", "06"):
        assert "base_model" in names
        want = 'settings.full_or_fast(settings.SMOLLM2, "tiny-random")'
        assert want in parameters[0].source


@pytest.mark.parametrize("key", ["05", "06"])
def test_notebook_markdown_is_short_and_its_lines_fit(key):
    """Issue 22: no markdown cell over about 200 words; every line, markdown
    included, within 88 characters; notebook 05's loop within its first 25 cells."""
    nb = read_notebook(key)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            assert len(cell.source.split()) <= 200, (key, index)
        for line in cell.source.splitlines():
            assert len(line) <= 88, (key, index, line)
    if key == "05":
        loop = next(i for i, c in enumerate(nb.cells) if "train_sync(" in c.source)
        assert loop < 25


def test_the_pytrio_preset_is_the_article_run():
    """What backend="pytrio" selects in notebooks 05-07: presets.PYTRIO, the
    article's run, through the package (no preset copied into a notebook)."""
    for field, value in ARTICLE_RUN.items():
        assert presets.PYTRIO[field] == value, field
    assert presets.PYTRIO["eval_questions"] == 100
    assert presets.PYTRIO["eval_max_tokens"] == 512
    assert presets.backend_overrides("local") == {}
    overrides = presets.backend_overrides("pytrio")
    assert "eval_questions" not in overrides
    GRPOConfig(backend="local", **overrides)  # every key is a run setting
    for key in ("05", "06", "07"):
        sources = [c.source for c in read_notebook(key).cells]
        assert not any(s.startswith("PRESETS = {") for s in sources), key
        uses = (
            "presets.backend_overrides(backend)"
            if key != "07"
            else ("presets.BACKEND_PRESETS[backend]")
        )
        assert any(uses in s for s in sources), key


@pytest.mark.parametrize("key", sorted(NOTEBOOKS))
def test_notebook_is_stripped_and_names_its_solutions(key):
    nb = read_notebook(key)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    name = NOTEBOOKS[key][0]
    assert any(f"solutions/{name}.py" in c.source for c in nb.cells)
    solution = load_solution(key)
    exercises = [c for c in nb.cells if "exercise" in c.metadata.get("tags", [])]
    assert exercises
    for cell in exercises:
        function = ast.parse(cell.source).body[0]
        assert hasattr(solution, function.name), function.name
