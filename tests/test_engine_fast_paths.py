"""The local engine's speed-ups change no number a caller sees.

* Shared-prefix training (``shared_prefix=True``) against the plain path, which runs
  every Datum on its own: logprobs, ``loss_sum``, ``token_count``, gradients and the
  weights after one ``optim_step``, for every loss, with and without backward.
  The path is chosen by a cost estimate, so every comparison also checks, with the
  engine's counters (``grpo_helpers.local.counters``), that the shared path ran on
  one side and only the plain path on the other.
* The merged-weights sampler (``merged_sampler=True``) against teacher forcing on
  the unmerged adapter, and snapshot isolation.
* PyTRIO fidelity: checkpoint names scoped per training client; custom-loss errors
  raised at the call.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import pytrio as trio
import torch
from tensors import rel_err

from grpo_helpers.datum import RolloutSample, build_grpo_datum
from grpo_helpers.engines import connect
from grpo_helpers.local import batch_plan, counters
from grpo_helpers.local.decoder import MergedLlamaDecoder, packing_available

MODEL = "tiny-random"
LOSSES = ["cross_entropy", "importance_sampling", "ppo", "cispo"]
# Adam divides each gradient by its own size: with a tiny eps, float noise in a
# gradient that is ~0 becomes a full-size step of either sign. A larger eps keeps
# the step a smooth function of the gradient, so "same gradient, same step" holds.
ADAM = trio.AdamParams(learning_rate=1e-3, eps=1e-4)


def engine(tmp_path, **options):
    return connect("local", run_dir=tmp_path, **options)


def perturbed_client(service, seed=0, rank=8, scale=0.05):
    """A LoRA client whose B matrices are not zero, so the adapter matters."""
    tc = service.create_lora_training_client(MODEL, rank=rank, seed=seed)
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for name, p in sorted(tc._host.parameters(tc._adapter).items()):
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * scale)
    return tc


def random_tokens(gen, n):
    return torch.randint(10, 49000, (n,), generator=gen).tolist()


def policy_datum(prompt, completion, advantage, gen):
    """The series' layout (build_grpo_datum): prompt + completion[:-1]."""
    logprobs = (-torch.rand(len(completion), generator=gen) * 4).tolist()
    sample = RolloutSample(completion, logprobs, "", 0.0, advantage)
    return build_grpo_datum(prompt, sample)


def demo_datum(prompt, completion, advantage, gen):
    """The demo scripts' layout, as plain lists (prompt positions: 0, 0.0, 0.0)."""
    n = len(prompt) - 1
    logprobs = (-torch.rand(len(completion), generator=gen) * 4).tolist()
    return trio.Datum(
        model_input=trio.ModelInput.from_ints(prompt + completion[:-1]),
        loss_fn_inputs={
            "target_tokens": [0] * n + completion,
            "logprobs": [0.0] * n + logprobs,
            "advantages": [0.0] * n + [advantage] * len(completion),
        },
    )


def as_cross_entropy(datum, gen):
    """Same tokens; weights on every position, the prompt's included."""
    targets = datum.loss_fn_inputs["target_tokens"].tolist()
    weights = torch.rand(len(targets), generator=gen).tolist()
    return trio.Datum(
        model_input=datum.model_input,
        loss_fn_inputs={"target_tokens": targets, "weights": weights},
    )


def grpo_batch(layout, seed=0, prompts=2, group=4):
    """``prompts`` prompts x ``group`` completions of mixed lengths (1 to 11)."""
    gen = torch.Generator().manual_seed(seed)
    make = policy_datum if layout == "series" else demo_datum
    data = []
    for _ in range(prompts):
        prompt = random_tokens(gen, 30)
        for i in range(group):
            length = int(torch.randint(1, 12, (1,), generator=gen))
            completion = random_tokens(gen, length)
            data.append(make(prompt, completion, float(i) - (group - 1) / 2, gen))
    return data


def run_both(tmp_path, data, loss, backward=True, auto_shift=False, **options):
    """(output, grads, weights after one step) for the plain and the shared path.

    Also checks which path ran: the plain engine never shares a batch_plan, and the
    shared engine trains at least one group on a prefix computed once (otherwise
    the comparison would be the plain path against itself). ``run_both.seen``
    keeps the counters of the shared side for tests that need more."""
    results = []
    for shared in (False, True):
        svc = engine(tmp_path, shared_prefix=shared, **options)
        tc = perturbed_client(svc)
        with counters.counting() as seen:
            if backward:
                out = tc.forward_backward(data, loss, auto_shift=auto_shift).result()
                grads = {k: p.grad.clone() for k, p in named(tc)}
                tc.optim_step(ADAM).result()
            else:
                out = tc.forward(data, loss, auto_shift=auto_shift).result()
                grads = {}
        if shared:
            assert seen["training_shared_groups"] >= 1, seen
            run_both.seen = seen
        else:
            assert seen["training_shared_groups"] == 0, seen
            assert seen["training_plain_batches"] >= 1, seen
        weights = {k: p.detach().clone() for k, p in named(tc)}
        results.append((out, grads, weights))
    return results


def named(tc):
    return tc._host.parameters(tc._adapter).items()


def assert_same(plain, shared, grads=True, loss_scale=0.1):
    """Equal to 1e-5 relative. ``loss_scale``: the size of the summed per-token
    losses, for a ``loss_sum`` that cancels to near zero."""
    (out_a, grads_a, w_a), (out_b, grads_b, w_b) = plain, shared
    assert out_a.metrics["token_count"] == out_b.metrics["token_count"]
    assert out_b.metrics["loss_sum"] == pytest.approx(
        out_a.metrics["loss_sum"], rel=1e-5, abs=1e-5 * loss_scale
    )
    for x, y in zip(out_a.loss_fn_outputs, out_b.loss_fn_outputs, strict=True):
        lx = torch.tensor(x["logprobs"].data)
        ly = torch.tensor(y["logprobs"].data)
        assert lx.shape == ly.shape
        assert rel_err(lx, ly) < 1e-5
    if grads:
        assert grads_a.keys() == grads_b.keys() and grads_a
        total = torch.cat([g.flatten() for g in grads_a.values()])
        other = torch.cat([grads_b[k].flatten() for k in grads_a])
        assert float(total.norm()) > 0
        # The whole gradient to 1e-5; one tensor at a time, float32 sums in another
        # order (the prefix's key/value gradient is summed over its expansions)
        # leave up to ~2e-5 on SmolLM2's 30 layers.
        assert rel_err(total, other) < 1e-5
        for k in grads_a:
            assert rel_err(grads_a[k], grads_b[k]) < 1e-4, k
        # After one Adam step. Adam divides each element by its own size, so an
        # element whose gradient is near eps turns small float differences into
        # larger step differences: the weights agree to 1e-5 as a whole, 1e-3 each.
        weights = torch.cat([w.flatten() for w in w_a.values()])
        assert rel_err(weights, torch.cat([w_b[k].flatten() for k in w_a])) < 1e-5
        for k in w_a:
            assert rel_err(w_a[k], w_b[k]) < 1e-3, k


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


# ------------------------------------------------------------------ shared = plain


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("layout", ["series", "demo"])
def test_shared_prefix_equals_plain_path(tmp_path, loss, layout):
    gen = torch.Generator().manual_seed(7)
    data = grpo_batch(layout, seed=len(loss))
    if loss == "cross_entropy":
        data = [as_cross_entropy(d, gen) for d in data]
    plain, shared = run_both(tmp_path, data, loss)
    assert_same(plain, shared)


@pytest.mark.parametrize("loss", LOSSES)
def test_shared_prefix_forward_without_backward(tmp_path, loss):
    plain, shared = run_both(tmp_path, grpo_batch("series"), loss, backward=False)
    assert_same(plain, shared, grads=False)


def test_shared_prefix_when_one_input_is_a_prefix_of_another(tmp_path):
    gen = torch.Generator().manual_seed(11)
    long = random_tokens(gen, 40)
    data = [
        trio.Datum(
            model_input=trio.ModelInput.from_ints(long[:n]),
            loss_fn_inputs={
                "target_tokens": long[1 : n + 1],
                "weights": torch.rand(n, generator=gen).tolist(),
            },
        )
        for n in (24, 30, 39, 39)
    ]
    plain, shared = run_both(tmp_path, data, "cross_entropy")
    assert_same(plain, shared)


def test_shared_prefix_with_auto_shift(tmp_path):
    gen = torch.Generator().manual_seed(5)
    prompt = random_tokens(gen, 25)
    sequences = [prompt + random_tokens(gen, n) for n in (3, 8, 1)]
    data = [
        trio.Datum(
            model_input=trio.ModelInput.from_ints(tokens),
            loss_fn_inputs={"target_tokens": tokens},
        )
        for tokens in sequences
    ]
    plain, shared = run_both(tmp_path, data, "cross_entropy", auto_shift=True)
    assert_same(plain, shared)


def test_shared_prefix_in_small_micro_batches(tmp_path):
    """Suffix chunks that do not fit one micro-batch accumulate the prefix's
    key/value gradients before the one backward through the prefix."""
    data = grpo_batch("series", seed=4, prompts=1, group=8)
    svc = engine(tmp_path, train_tokens_per_batch=24)
    tc = svc.create_lora_training_client(MODEL, rank=8, seed=0)
    job = tc._prepare(data, "importance_sampling", None, False)
    lengths = [s.input_length - 29 for s in job.samples]
    assert max(lengths) * 3 > 24  # so the 8 suffixes need several chunks
    plain, shared = run_both(
        tmp_path, data, "importance_sampling", train_tokens_per_batch=24
    )
    assert run_both.seen["training_shared_groups"] == 1  # one prompt, shared
    assert run_both.seen["training_shared_chunks"] > 1  # in several chunks
    assert_same(plain, shared)


def test_shared_prefix_computes_fewer_positions():
    data = grpo_batch("series", prompts=2, group=8)
    seqs = [d.model_input.to_ints() for d in data]
    plan = batch_plan.plan_shared_prefixes(seqs)
    assert sum(g.shared for g in plan) == 2
    assert batch_plan.positions_computed(seqs, plan) < 0.6 * sum(map(len, seqs))


# ------------------------------------------------------------------ merged sampler


def sample(sampler, prompt, n=3, **kw):
    kw.setdefault("max_tokens", 12)
    kw.setdefault("seed", 5)
    response = sampler.sample(
        trio.ModelInput.from_ints(prompt), n, trio.SamplingParams(**kw)
    ).result()
    return [(s.tokens, s.logprobs) for s in response.sequences]


def teacher_forced(tc, prompt, tokens):
    n = len(prompt) - 1
    datum = trio.Datum(
        model_input=trio.ModelInput.from_ints(prompt + tokens[:-1]),
        loss_fn_inputs={"target_tokens": [0] * n + tokens},
    )
    return tc.forward([datum]).result().loss_fn_outputs[0]["logprobs"].data[n:]


@pytest.mark.parametrize("merged", [True, False])
def test_sampled_logprobs_match_teacher_forcing(tmp_path, merged):
    svc = engine(tmp_path, merged_sampler=merged)
    tc = perturbed_client(svc, scale=0.05)
    prompt = random_tokens(torch.Generator().manual_seed(1), 20)
    for tokens, logprobs in sample(tc.save_weights_and_get_sampling_client(), prompt):
        np.testing.assert_allclose(
            teacher_forced(tc, prompt, tokens), logprobs, atol=1e-4
        )


def test_merged_and_plain_samplers_agree_greedily(tmp_path):
    prompts = [random_tokens(torch.Generator().manual_seed(s), 15) for s in (1, 2)]
    outputs = []
    for merged in (True, False):
        svc = engine(tmp_path, merged_sampler=merged)
        sc = perturbed_client(svc).save_weights_and_get_sampling_client()
        outputs.append([sample(sc, p, temperature=0.0) for p in prompts])
    for a, b in zip(*outputs, strict=True):
        for (ta, la), (tb, lb) in zip(a, b, strict=True):
            assert ta == tb
            np.testing.assert_allclose(la, lb, atol=1e-4)


def test_merged_sampler_uses_the_merged_decoder(tmp_path):
    svc = engine(tmp_path)
    tc = perturbed_client(svc)
    sample(tc.save_weights_and_get_sampling_client(), [5, 6, 7])
    decoder = tc._host._merged
    assert isinstance(decoder, MergedLlamaDecoder)
    # One merged copy per host, however many samplers: about the model's size.
    for _ in range(3):
        tc.forward_backward(grpo_batch("series", prompts=1), "importance_sampling")
        tc.optim_step(trio.AdamParams(learning_rate=1e-2))
        sample(tc.save_weights_and_get_sampling_client(), [5, 6, 7])
    assert tc._host._merged is decoder
    params = sum(p.numel() * p.element_size() for p in tc._host.model.parameters())
    assert decoder.nbytes() <= params


def test_samplers_are_isolated_snapshots(tmp_path):
    svc = engine(tmp_path)
    tc = perturbed_client(svc)
    prompt = [11, 12, 13, 14]
    old = tc.save_weights_and_get_sampling_client()
    before = sample(old, prompt)
    data = grpo_batch("series", prompts=1)
    for _ in range(3):
        tc.forward_backward(data, "importance_sampling")
        tc.optim_step(trio.AdamParams(learning_rate=5e-2)).result()
    new = tc.save_weights_and_get_sampling_client()
    after_new = sample(new, prompt)
    assert sample(old, prompt) == before  # training did not reach the old sampler
    assert after_new != before
    assert sample(new, prompt) == after_new  # alternating re-merges the right one
    base = svc.create_sampling_client(MODEL)
    plain_base = engine(tmp_path, merged_sampler=False).create_sampling_client(MODEL)
    greedy = {"temperature": 0.0}
    assert (
        sample(base, prompt, **greedy)[0][0]
        == sample(plain_base, prompt, **greedy)[0][0]
    )


def test_concurrent_samplers_of_different_weights(tmp_path):
    svc = engine(tmp_path)
    tc = perturbed_client(svc)
    first = tc.save_weights_and_get_sampling_client()
    tc.forward_backward(grpo_batch("series", prompts=1), "importance_sampling")
    tc.optim_step(trio.AdamParams(learning_rate=5e-2)).result()
    second = tc.save_weights_and_get_sampling_client()
    prompt = [21, 22, 23]
    alone = [sample(s, prompt) for s in (first, second)]

    async def both():
        params = trio.SamplingParams(max_tokens=12, seed=5)
        calls = [
            s.sample_async(trio.ModelInput.from_ints(prompt), 3, params)
            for s in (first, second, first)
        ]
        return await asyncio.gather(*calls)

    together = asyncio.run(both())
    # Batched with other rows, the arithmetic (not the weights) differs slightly.
    for response, want in zip(together, [alone[0], alone[1], alone[0]], strict=True):
        for seq, (tokens, logprobs) in zip(response.sequences, want, strict=True):
            assert seq.tokens == tokens
            np.testing.assert_allclose(seq.logprobs, logprobs, atol=1e-4)


def test_merged_decoder_refuses_models_it_cannot_run():
    class Config:
        model_type = "llama"
        attention_bias = True

    class Model:
        config = Config()

    assert not MergedLlamaDecoder.supports(Model())
    Config.attention_bias = False
    Config.model_type = "gpt2"
    assert not MergedLlamaDecoder.supports(Model())


# ------------------------------------------------------------------ PyTRIO fidelity


def test_checkpoint_names_are_scoped_per_training_client(tmp_path):
    svc = engine(tmp_path)
    a, b = perturbed_client(svc, seed=1), perturbed_client(svc, seed=2)
    paths = {}
    for name, tc in (("a", a), ("b", b)):
        paths[name] = (
            tc.save_weights_for_sampler("step-10").result().path,
            tc.save_state("step-10").result().path,
        )
    assert paths["a"][0] != paths["b"][0] and paths["a"][1] != paths["b"][1]
    # Each sampler opens its own client's weights: b did not overwrite a.
    prompt = [3, 4, 5]
    for name, tc in (("a", a), ("b", b)):
        reopened = svc.create_sampling_client(MODEL, model_path=paths[name][0])
        direct = tc.save_weights_and_get_sampling_client()
        greedy = {"temperature": 0.0}
        assert sample(reopened, prompt, **greedy) == sample(direct, prompt, **greedy)


def test_custom_loss_errors_are_raised_at_the_call(tmp_path):
    svc = engine(tmp_path)
    tc = perturbed_client(svc)
    data = grpo_batch("series", prompts=1, group=2)

    def broken(data, logprobs):
        raise RuntimeError("my loss is broken")

    with pytest.raises(RuntimeError, match="my loss is broken"):
        tc.forward_backward_custom(data, broken)

    async def call_async():
        return await tc.forward_backward_custom_async(data, broken)

    with pytest.raises(RuntimeError, match="my loss is broken"):
        asyncio.run(call_async())

    def fine(data, logprobs):
        return sum(-lp.sum() for lp in logprobs), {"custom": 1.0}

    out = tc.forward_backward_custom(data, fine).result()
    assert out.metrics["custom"] == 1.0 and "loss_sum" in out.metrics


# ------------------------------------------------------------------ SmolLM2


@pytest.mark.slow
def test_fast_paths_on_smollm2_with_series_datums(tmp_path):
    """One real series group on SmolLM2: the merged sampler's logprobs match
    teacher forcing, and shared-prefix training equals the plain path."""
    from grpo_helpers import arithmetic, data, prompts, rewards, rollout
    from grpo_helpers.local.models import SMOLLM2

    row = arithmetic.make_arithmetic_splits(4, 1, seed=0)[0][0]
    results = []
    for shared in (False, True):
        svc = engine(tmp_path, shared_prefix=shared)
        tc = svc.create_lora_training_client(SMOLLM2, rank=8, seed=0)
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, p in sorted(tc._host.parameters(tc._adapter).items()):
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=gen) * 2e-3)
        tok = tc.get_tokenizer()
        prompt = prompts.build_prompt(tok, row["question"])
        if not results:  # sample once, train both paths on the same datums
            group = rollout.run_rollout_group(
                tc.save_weights_and_get_sampling_client(),
                tok,
                prompt,
                data.extract_gsm8k_answer(row["answer"]),
                rollout.make_sampling_params(tok, 16, seed=3),
                4,
                rewards.shaped_reward,
            )
            for sample in group:
                np.testing.assert_allclose(
                    teacher_forced(tc, prompt, sample.tokens),
                    sample.logprobs,
                    atol=1e-4,
                )
            for i, sample in enumerate(group):
                sample.advantage = (i - 1.5) / 2  # a learning signal in any case
            datums = [build_grpo_datum(prompt, s) for s in group]
        with counters.counting() as seen:
            out = tc.forward_backward(datums, "importance_sampling").result()
        assert seen["training_shared_groups"] == (1 if shared else 0), seen
        grads = {k: p.grad.clone() for k, p in named(tc)}
        tc.optim_step(ADAM).result()
        weights = {k: p.detach().clone() for k, p in named(tc)}
        results.append((out, grads, weights))
    # At ratio 1, loss_sum = -sum(A_i * C_i): terms of about 1 that cancel.
    scale = sum(abs(s.advantage) * len(s.tokens) for s in group)
    assert_same(*results, loss_scale=scale)


@pytest.mark.parametrize("merged", [True, False])
def test_scoring_prompts_that_share_a_prefix(tmp_path, merged):
    """compute_logprobs of a group (prompt + completions, as the KL reference does)
    runs the shared prompt once: same numbers as scoring each alone, and as
    teacher forcing on the training client."""
    svc = engine(tmp_path, merged_sampler=merged)
    tc = perturbed_client(svc)
    sampler = tc.save_weights_and_get_sampling_client()
    gen = torch.Generator().manual_seed(9)
    prompt = random_tokens(gen, 30)
    sequences = [prompt + random_tokens(gen, n) for n in (1, 5, 9)]
    sequences.append(random_tokens(gen, 12))  # shares nothing
    with counters.counting() as seen_alone:
        alone = [
            sampler.compute_logprobs(trio.ModelInput.from_ints(s)).result()
            for s in sequences
        ]
    assert seen_alone["scoring_shared_groups"] == 0
    assert seen_alone["scoring_plain_prompts"] == len(sequences)
    scheduler = tc._host.scheduler
    with counters.counting() as seen:
        with scheduler.hold():  # all four in one batch: the shared path
            futures = [
                sampler.compute_logprobs(trio.ModelInput.from_ints(s))
                for s in sequences
            ]
        together = [f.result() for f in futures]
    # the three that share the prompt ran it once; the fourth on its own
    assert seen["scoring_shared_groups"] == 1 and seen["scoring_plain_prompts"] == 1
    for seq, a, b in zip(sequences, alone, together, strict=True):
        assert a[0] is None and b[0] is None and len(b) == len(seq)
        np.testing.assert_allclose(a[1:], b[1:], atol=1e-4)
        teacher = teacher_forced(tc, seq[:1], seq[1:])
        np.testing.assert_allclose(b[1:], teacher, atol=1e-4)


# ------------------------------------------------------- shared prompt prefix, sampling


def batched_samples(sampler, prompts, shared, **kw):
    """Sample every prompt in one batch (scheduler.hold); (tokens, logprobs) per
    completion, per prompt. ``shared``: whether that batch must prefill the
    prompts' common start once (checked with the engine's counters)."""
    scheduler = sampler._host.scheduler
    params = trio.SamplingParams(max_tokens=10, seed=7, **kw)
    batches = scheduler.batches
    with counters.counting() as seen:
        with scheduler.hold():
            futures = [
                sampler.sample(trio.ModelInput.from_ints(p), 2, params) for p in prompts
            ]
        responses = [f.result() for f in futures]
    assert scheduler.batches == batches + 1  # one batch: the path under test
    assert seen["sampling_shared_prefills"] == (1 if shared else 0), seen
    assert seen["sampling_plain_prefills"] == (0 if shared else 1), seen
    return [[(s.tokens, s.logprobs) for s in r.sequences] for r in responses]


def test_shared_prefix_length_rules():
    from grpo_helpers.local.prompt_cache import MIN_SHARED_PREFIX, shared_prefix_len
    from grpo_helpers.local.sampling import GenerationRequest

    def reqs(*prompts):
        params = trio.SamplingParams(max_tokens=4)
        return [GenerationRequest(list(p), 1, params) for p in prompts]

    head = list(range(100, 100 + MIN_SHARED_PREFIX + 4))
    assert shared_prefix_len(reqs(head + [1, 2], head + [3])) == len(head)
    # Each prompt keeps a token of its own; identical prompts share all but one.
    assert shared_prefix_len(reqs(head, head)) == len(head) - 1
    assert shared_prefix_len(reqs(head + [1], head[:-1])) == len(head) - 2
    # Too short to be worth a second forward pass, or one request alone: nothing.
    short = head[: MIN_SHARED_PREFIX - 1]
    assert shared_prefix_len(reqs(short + [1], short + [2])) == 0
    assert shared_prefix_len(reqs(head + [1])) == 0
    assert shared_prefix_len(reqs(head + [1], [7] + head)) == 0


@pytest.mark.parametrize("merged", [True, False])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_sampling_with_a_shared_prefix_equals_the_plain_path(
    tmp_path, merged, temperature
):
    """Prompts that start alike (an evaluation's few-shot prompt) prefill the common
    part once; completions and their logprobs are those of the plain prefill, and
    the logprobs equal teacher forcing."""
    svc = engine(tmp_path, merged_sampler=merged)
    tc = perturbed_client(svc)
    sampler = tc.save_weights_and_get_sampling_client()
    # The same weights, sampled as a service made with shared_prefix=False would.
    plain_sampler = type(sampler)(sampler._host, sampler._snapshot, None, merged, False)
    gen = torch.Generator().manual_seed(3)
    head = random_tokens(gen, 30)
    prompts = [head + random_tokens(gen, n) for n in (1, 4, 9)]
    plain = batched_samples(plain_sampler, prompts, False, temperature=temperature)
    shared = batched_samples(sampler, prompts, True, temperature=temperature)
    for prompt, a, b in zip(prompts, plain, shared, strict=True):
        for (ta, la), (tb, lb) in zip(a, b, strict=True):
            same = same_until_a_cdf_boundary(ta, tb, temperature)
            np.testing.assert_allclose(la[:same], lb[:same], atol=1e-4)
            np.testing.assert_allclose(teacher_forced(tc, prompt, ta), la, atol=1e-4)
            np.testing.assert_allclose(teacher_forced(tc, prompt, tb), lb, atol=1e-4)


def same_until_a_cdf_boundary(ta, tb, temperature):
    """How many leading tokens two samples of the same weights, seed and prompt share.

    Greedy decoding must agree everywhere. A draw (``sampling.draw``) inverts the
    cumulative sum of the probabilities over the vocabulary in id order, so logits that
    differ in their last bits (the shared and the plain prefill add up in different
    orders) change a token only when the uniform number falls on the border between
    two neighbours: the two tokens then differ by exactly one id. The tiny random
    model's near-uniform distribution over 49k tokens makes that border close (CI saw
    7876 against 7877 once in a while). Any other difference is a bug.
    """
    if ta == tb:
        return len(ta)
    assert temperature > 0, (ta, tb)
    first = next(
        (i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), None
    )
    assert first is not None, ("one stopped early", ta, tb)
    assert abs(ta[first] - tb[first]) == 1, (first, ta, tb)
    return first


# ------------------------------------------- packed products and the prompt memory


def sampler_and_decoder(tmp_path, monkeypatch, packing, memory):
    """A merged sampler of perturbed weights, its decoder's shortcuts set as asked
    (the host and its decoder serve the whole process: monkeypatch restores them)."""
    svc = engine(tmp_path)
    tc = perturbed_client(svc)
    sampler = tc.save_weights_and_get_sampling_client()
    sample(sampler, [5, 6, 7], n=1, max_tokens=1)  # builds the merged decoder
    decoder = tc._host._merged
    assert isinstance(decoder, MergedLlamaDecoder)
    monkeypatch.setattr(decoder, "packing", packing)
    monkeypatch.setattr(decoder, "memory", memory)
    return tc, sampler, decoder


def uneven_batch(sampler, prompts, **kw):
    """One batch whose requests stop at different lengths (16, 20, 26 tokens), so
    rows finish while others decode; (tokens, logprobs) per completion, and the
    counters the batch moved."""
    scheduler = sampler._host.scheduler
    with counters.counting() as seen:
        with scheduler.hold():
            futures = [
                sampler.sample(
                    trio.ModelInput.from_ints(p),
                    3,
                    trio.SamplingParams(max_tokens=n, seed=11 + n, **kw),
                )
                for p, n in zip(prompts, (16, 20, 26), strict=True)
            ]
        responses = [f.result() for f in futures]
    return [[(s.tokens, s.logprobs) for s in r.sequences] for r in responses], seen


def test_packed_products_give_the_plain_products_numbers():
    """MKL's packed product against the engine's plain one, at every packed row
    count, on the tiny model's weights (SmolLM2's: ``bench/packed_linear.py``)."""
    from grpo_helpers.local import decoder as dec_mod
    from grpo_helpers.local.models import load_model

    model, _ = load_model(MODEL)
    dec = MergedLlamaDecoder(model)
    if not dec.packing:
        pytest.skip("this torch build has no MKL packed products")
    gen = torch.Generator().manual_seed(0)
    for rows in (2, 8, 16):
        assert dec.prepare(rows, steps=dec_mod.MIN_PACKED_STEPS)
        for weight in dec.weights():
            x = torch.randn(rows, weight.shape[1], generator=gen)
            np.testing.assert_allclose(
                dec._mm(x, weight, True), dec_mod._linear(x, weight), atol=1e-5
            )
    # Not worth it: too few steps, one row, or more rows than PACKED_ROWS.
    assert not dec.prepare(4, steps=dec_mod.MIN_PACKED_STEPS - 1)
    assert not dec.prepare(1, steps=100)
    assert not dec.prepare(dec_mod.PACKED_ROWS[1] + 1, steps=100)
    # Other weights drop the packed copies: they held the old weights.
    assert dec._packed
    dec._fill(None)
    assert not dec._packed and not dec.prepare(16, steps=1)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_held_rows_and_packed_products_sample_what_the_plain_loop_samples(
    tmp_path, monkeypatch, temperature
):
    """Finished rows kept in the batch (fed padding) and packed products change no
    completion: tokens and logprobs are those of the shrinking batch on plain
    products, and the logprobs equal teacher forcing."""
    gen = torch.Generator().manual_seed(4)
    prompts = [random_tokens(gen, n) for n in (7, 12, 9)]
    tc, sampler, decoder = sampler_and_decoder(
        tmp_path, monkeypatch, packing=False, memory=False
    )
    plain, seen = uneven_batch(sampler, prompts, temperature=temperature)
    assert seen["sampling_shrinking_batches"] == 1, seen
    packing_on = packing_available(torch.device("cpu"), torch.float32)
    if packing_on:
        decoder.packing = True
    else:  # no MKL: keep the rows in the batch all the same, on plain products
        monkeypatch.setattr(decoder, "prepare", lambda rows, steps: True)
    held, seen = uneven_batch(sampler, prompts, temperature=temperature)
    assert seen["sampling_held_batches"] == 1, seen
    if packing_on:
        assert decoder._packed_rows == 9  # 3 requests x 3 samples
    for prompt, a, b in zip(prompts, plain, held, strict=True):
        for (ta, la), (tb, lb) in zip(a, b, strict=True):
            same = same_until_a_cdf_boundary(ta, tb, temperature)
            np.testing.assert_allclose(la[:same], lb[:same], atol=1e-4)
            np.testing.assert_allclose(teacher_forced(tc, prompt, tb), lb, atol=1e-4)
    assert [len(t) for t, _ in held[0]] == [16] * 3  # each request's own length
    # New weights at the same row count: packed again from them, not the old ones.
    tc.forward_backward(grpo_batch("series", prompts=1), "importance_sampling")
    tc.optim_step(trio.AdamParams(learning_rate=1e-2))
    again, seen = uneven_batch(
        tc.save_weights_and_get_sampling_client(), prompts, temperature=temperature
    )
    assert seen["sampling_held_batches"] == 1, seen
    for prompt, group in zip(prompts, again, strict=True):
        for tokens, logprobs in group:
            np.testing.assert_allclose(
                teacher_forced(tc, prompt, tokens), logprobs, atol=1e-4
            )


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_prompt_memory_samples_what_a_full_prefill_samples(
    tmp_path, monkeypatch, temperature
):
    """The sync loop's second prompt of a step reuses the first's few-shot start:
    the same completions as prefilling it whole, logprobs equal to teacher forcing;
    other weights remember nothing."""
    gen = torch.Generator().manual_seed(6)
    head = random_tokens(gen, 30)
    prompts = [head + random_tokens(gen, n) for n in (3, 6)]

    def one_by_one(sampler):
        outputs = []
        with counters.counting() as seen:
            for p in prompts:
                outputs.append(sample(sampler, p, temperature=temperature))
        return outputs, seen

    tc, sampler, decoder = sampler_and_decoder(
        tmp_path, monkeypatch, packing=False, memory=False
    )
    full, seen = one_by_one(sampler)
    assert seen["sampling_recalled_prefills"] == 0, seen
    decoder.memory = True
    sample(sampler, prompts[1])  # the last prompt run on these weights
    recalled, seen = one_by_one(sampler)
    assert seen["sampling_recalled_prefills"] == 2, seen
    for prompt, a, b in zip(prompts, full, recalled, strict=True):
        for (ta, la), (tb, lb) in zip(a, b, strict=True):
            same = same_until_a_cdf_boundary(ta, tb, temperature)
            np.testing.assert_allclose(la[:same], lb[:same], atol=1e-4)
            np.testing.assert_allclose(teacher_forced(tc, prompt, tb), lb, atol=1e-4)
    tc.forward_backward(grpo_batch("series", prompts=1), "importance_sampling")
    tc.optim_step(trio.AdamParams(learning_rate=1e-2))
    _, seen = one_by_one(tc.save_weights_and_get_sampling_client())
    assert seen["sampling_recalled_prefills"] == 1, seen  # the first is new


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_shared_start_from_memory_samples_what_the_plain_path_samples(
    tmp_path, temperature
):
    """Batches that share a start run it once and remember it; the next batch on the
    same weights takes it from memory, whole or in part (then runs the rest). Each
    samples what a plain prefill samples, with logprobs equal to teacher forcing."""
    svc = engine(tmp_path)
    tc = perturbed_client(svc)
    sampler = tc.save_weights_and_get_sampling_client()
    plain_sampler = type(sampler)(sampler._host, sampler._snapshot, None, True, False)
    gen = torch.Generator().manual_seed(8)
    head, more = random_tokens(gen, 30), random_tokens(gen, 10)
    batches = [  # start: nothing remembered, part of it remembered, all of it
        [head + random_tokens(gen, n) for n in (2, 5)],
        [head + more + random_tokens(gen, n) for n in (1, 4)],
        [head + random_tokens(gen, n) for n in (3, 6)],
    ]
    for prompts, recalled in zip(batches, (0, 1, 1), strict=True):
        with counters.counting() as seen:
            shared = batched_samples(sampler, prompts, True, temperature=temperature)
        assert seen["sampling_recalled_prefills"] == recalled, seen
        plain = batched_samples(plain_sampler, prompts, False, temperature=temperature)
        for prompt, a, b in zip(prompts, plain, shared, strict=True):
            for (ta, la), (tb, lb) in zip(a, b, strict=True):
                same = same_until_a_cdf_boundary(ta, tb, temperature)
                np.testing.assert_allclose(la[:same], lb[:same], atol=1e-4)
                np.testing.assert_allclose(
                    teacher_forced(tc, prompt, tb), lb, atol=1e-4
                )
