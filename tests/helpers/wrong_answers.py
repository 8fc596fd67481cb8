"""The wrong answers of every exercise, exercise by exercise.

Each table maps a named slip a learner makes to the wrong answer it gives (a
function or a value); ``tests/classroom/test_self_checks.py`` holds each against
its exercise's check, which must fail it. The wrong training loops of notebook 10
are in ``wrong_loops.py``, the wrong async steps of notebook 06 in
``wrong_async_steps.py``.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytrio as trio
import torch
from wrong_async_steps import WRONG_TRAIN_STEPS

from grpo_helpers import datum
from grpo_helpers.results import answers, stats

# ----------------------------------------------------------------------------------
# The wrong answers, exercise by exercise
# ----------------------------------------------------------------------------------


# gain_by_source(flips): each wrong answer bends one part of the right one, whose
# table of what each class lacked is the package's.
def _gain(
    flips, sign=-1, side=("before", "after"), lacked=answers.SOURCES, losses=True
):
    totals = {"the box": 0, "answering, in time": 0, "arithmetic": 0}
    for row in flips.to_dict("records"):
        gained = row["flip"] == "wrong -> right"
        if not gained and not losses:
            continue
        wrong = row[side[0]] if gained else row[side[1]]
        totals[lacked.get(wrong, "arithmetic")] += 1 if gained else sign
    return totals


GAIN_BY_SOURCE = {
    "a right -> wrong flip counted as a gain": lambda flips: _gain(flips, sign=1),
    "the class after a gain, before a loss (the right side)": lambda flips: _gain(
        flips, side=("after", "before")
    ),
    "right, unboxed read as answering in time": lambda flips: _gain(
        flips, lacked=answers.SOURCES | {"right, unboxed": "answering, in time"}
    ),
    "the losses left out": lambda flips: _gain(flips, losses=False),
}

# fraction_cut_off(token_counts, max_tokens)
FRACTION_CUT_OFF = {
    "a completion of exactly max_tokens counted as cut off": lambda counts, m: float(
        np.mean(np.asarray(counts) >= m)
    ),
    "the fraction that fits": lambda counts, m: float(np.mean(np.asarray(counts) <= m)),
    "the count, not the fraction": lambda counts, m: int(
        np.sum(np.asarray(counts) > m)
    ),
    "the distinct lengths, not the completions": lambda counts, m: float(
        np.mean(np.unique(counts) > m)
    ),
}


def _budget(counts, coverage, budgets=tuple(64 * 2**i for i in range(8)), op=">="):
    counts = np.asarray(counts)
    for budget in budgets:
        share = np.mean(counts <= budget)
        if share > coverage if op == ">" else share >= coverage:
            return budget
    return None


# smallest_budget(token_counts, coverage)
SMALLEST_BUDGET = {
    "stops its search at 4096": lambda counts, coverage: _budget(
        counts, coverage, tuple(64 * 2**i for i in range(7))
    ),
    "more than coverage, not at least": lambda counts, coverage: _budget(
        counts, coverage, op=">"
    ),
    "starts at 128": lambda counts, coverage: _budget(
        counts, coverage, tuple(128 * 2**i for i in range(7))
    ),
    "one budget too large": lambda counts, coverage: (
        None if (b := _budget(counts, coverage)) is None else min(2 * b, 8192)
    ),
}


def _demo_regex(text):
    match = re.search(r"\\boxed\{([^}]+)\}", text)
    return match.group(1).strip() if match else None


def _first_box(text):
    for match in re.finditer(r"\\boxed\{", text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[start:i].strip() or None
    return None


def _last_box_start(text, strip=True):
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 1, start + len("\\boxed{")
    for i in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            content = text[begin:i]
            return content.strip() if strip else content
    return None


# last_boxed(text)
LAST_BOXED = {
    "the demo scripts' regex": _demo_regex,
    "the first box, not the last": _first_box,
    "gives up when the last box is unclosed or empty": _last_box_start,
    "no strip": lambda text: _last_box_start(text, strip=False),
}

# gaming_completion (a value)
GAMING_COMPLETION = {
    "the right answer, boxed": r"\boxed{72}",
    "a near miss without the box": "70",
    "a near miss with room for reasoning": r"She sold 70 clips. \boxed{70}",
    "a guess too far off": r"\boxed{7}",
}


def _group_size(p, target, start=2, strict=False, formula=None):
    formula = formula or (lambda p, g: p**g + (1 - p) ** g)
    g = start
    while not (formula(p, g) < target if strict else formula(p, g) <= target):
        g += 1
    return g


# smallest_group_size(pass_rate, max_degenerate)
SMALLEST_GROUP_SIZE = {
    "one too many": lambda p, t: _group_size(p, t) + 1,
    "below the target, not at most": lambda p, t: _group_size(p, t, strict=True),
    "only the all-wrong groups": lambda p, t: _group_size(
        p, t, formula=lambda p, g: (1 - p) ** g
    ),
    "only the larger of the two terms": lambda p, t: _group_size(
        p, t, formula=lambda p, g: max(p, 1 - p) ** g
    ),
}

# success_advantage(group_size, num_successes, scale)
SUCCESS_ADVANTAGE = {
    "the scale ignored": lambda g, k, scale="none": 1 - k / g,
    "TRL's std (Bessel's G - 1)": lambda g, k, scale="none": (
        (1 - k / g) / math.sqrt(k * (g - k) / (g * (g - 1)))
        if scale == "group"
        else 1 - k / g
    ),
    "sqrt(G - 1) whatever k": lambda g, k, scale="none": (
        math.sqrt(g - 1) if scale == "group" else 1 - k / g
    ),
    "the failure's advantage": lambda g, k, scale="none": (
        -math.sqrt(k / (g - k)) if scale == "group" else -k / g
    ),
}

# trained_target(prompt_tokens, completion_tokens, position)
TRAINED_TARGET = {
    "trained from position P, not P - 1": lambda p, c, i: (
        None if i < len(p) else c[i - len(p)]
    ),
    "the token read, not the next one": lambda p, c, i: (
        None if i < len(p) - 1 else (p + c)[i]
    ),
    "every position trained": lambda p, c, i: (p + c)[i + 1],
    "the prompt's last position left out": lambda p, c, i: (
        None if i < len(p) else (p + c)[i + 1]
    ),
}


def _aligned(model_input, targets, n, first=None, length=True, shift=1, last=True):
    if length and len(model_input) != len(targets):
        return False
    first = n - 1 if first is None else first
    end = len(model_input) - 1 if last else len(model_input)
    return all(
        targets[i] == model_input[i + shift]
        for i in range(first, end)
        if i + shift < len(model_input)
    )


# looks_aligned(model_input, target_tokens, num_prompt_tokens)
LOOKS_ALIGNED = {
    "starts comparing at num_prompt_tokens (issue 36)": lambda i, t, n: _aligned(
        i, t, n, first=n
    ),
    "no length check": lambda i, t, n: _aligned(i, t, n, length=False),
    "compares each target with the token read (no shift)": lambda i, t, n: _aligned(
        i, t, n, shift=0
    ),
    "checks the whole sequence, prompt included": lambda i, t, n: _aligned(
        i, t, n, first=0
    ),
}


# importance_sampling_loss(logprobs, old_logprobs, advantages, mask)
def _is(lp, old, adv, mask, sign=1.0, masked=True, ratio=None):
    r = torch.exp(lp - old) if ratio is None else ratio(lp, old)
    terms = -sign * r * adv
    return torch.where(mask, terms, 0.0).sum() if masked else terms.sum()


IMPORTANCE_SAMPLING_LOSS = {
    "no mask": lambda lp, old, adv, mask: _is(lp, old, adv, mask, masked=False),
    "sign flipped": lambda lp, old, adv, mask: _is(lp, old, adv, mask, sign=-1.0),
    "ratio detached": lambda lp, old, adv, mask: _is(
        lp, old, adv, mask, ratio=lambda lp, old: torch.exp(lp - old).detach()
    ),
    "the log-ratio, not the ratio": lambda lp, old, adv, mask: _is(
        lp, old, adv, mask, ratio=lambda lp, old: lp - old
    ),
}


# ppo_clipped_loss(logprobs, old_logprobs, advantages, mask, clip_low, clip_high)
def _ppo(lp, old, adv, mask, low, high, pick=torch.minimum, bounds=None, sign=1.0):
    ratio = torch.exp(lp - old)
    low, high = bounds(low, high) if bounds else (low, high)
    clipped = ratio.clamp(low, high) * adv
    return torch.where(mask, -sign * pick(ratio * adv, clipped), 0.0).sum()


PPO_CLIPPED_LOSS = {
    "max for min": lambda *a: _ppo(*a, pick=torch.maximum),
    "one epsilon for both bounds": lambda *a: _ppo(
        *a, bounds=lambda low, high: (low, 2 - low)
    ),
    "never clipped": lambda *a: _ppo(*a, pick=lambda unclipped, clipped: unclipped),
    "always clipped": lambda *a: _ppo(*a, pick=lambda unclipped, clipped: clipped),
    "sign flipped": lambda *a: _ppo(*a, sign=-1.0),
}


# grpo_step(training_client, prompts, responses, rewards, adam_params)
def _grpo_step(
    sign=1.0, skip=True, shift=False, per_group=False, step_each=False, scale=False
):
    def step(training_client, prompt_list, responses, rewards, adam_params):
        batches = []
        for prompt, response, group_rewards in zip(
            prompt_list, responses, rewards, strict=True
        ):
            if skip and max(group_rewards) == min(group_rewards):
                continue
            r = np.asarray(group_rewards, dtype=float)
            adv = r - r.mean()
            if scale:
                adv = adv / (r.std() + 1e-4)
            datums = []
            for seq, a in zip(response.sequences, adv.tolist(), strict=True):
                tokens, logprobs = list(seq.tokens), list(seq.logprobs)
                sample = datum.RolloutSample(tokens, logprobs, "", 0.0, sign * a)
                built = datum.build_grpo_datum(prompt, sample)
                if shift:
                    pad = len(prompt) - 1
                    targets = [0] * pad + [prompt[-1]] + tokens[:-1]
                    built = trio.Datum(
                        model_input=built.model_input,
                        loss_fn_inputs={
                            **built.loss_fn_inputs,
                            "target_tokens": np.asarray(targets, np.int64),
                        },
                    )
                datums.append(built)
            batches.append(datums)
        if not batches:
            return None
        if not (per_group or step_each):
            batches = [[d for b in batches for d in b]]
        outputs, optim = [], None
        for datums in batches:
            fb = training_client.forward_backward(datums, loss_fn="importance_sampling")
            if step_each:
                optim = training_client.optim_step(adam_params)
            outputs.append(fb.result())
        if optim is None:
            optim = training_client.optim_step(adam_params)
        first = outputs if per_group else outputs[-1]
        return first, optim.result()

    return step


GRPO_STEP = {
    "advantages with the wrong sign": _grpo_step(sign=-1.0),
    "degenerate groups trained": _grpo_step(skip=False),
    "targets off by one": _grpo_step(shift=True),
    "one optim_step per group (two updates)": _grpo_step(step_each=True),
    "std-scaled advantages": _grpo_step(scale=True),
}


GRPO_STEP_RIGHT = {
    "one forward_backward per group, then one optim_step": _grpo_step(per_group=True),
    "the same, written by hand in one call": _grpo_step(),
}


# step_summary(samples, step)
def _summary(samples, step, degenerate=None, whole_run=False, accuracy=None):
    rows = samples[samples["step"] == step]
    pool = rows
    if whole_run:  # a question's rows from every step
        pool = samples[samples["question_index"].isin(rows["question_index"])]
    grouped = pool.groupby("question_index")["reward"]
    test = degenerate or (lambda r: r.max() == r.min())
    return {
        "reward_mean": float(rows["reward"].mean()),
        "accuracy": float(
            (rows["reward"] == 1.0).mean() if accuracy else rows["exact"].mean()
        ),
        "frac_degenerate": float(grouped.agg(test).mean()),
    }


STEP_SUMMARY = {
    "only all-zero groups degenerate (issue 36)": lambda samples, step: _summary(
        samples, step, degenerate=lambda r: (r == 0).all()
    ),
    "groups across the whole run, not within the step": lambda samples, step: _summary(
        samples, step, whole_run=True
    ),
    "accuracy read from the reward": lambda samples, step: _summary(
        samples, step, accuracy="reward"
    ),
    "degenerate only when 0 or 1 everywhere": lambda samples, step: _summary(
        samples,
        step,
        degenerate=lambda r: r.isin([0.0, 1.0]).all() and r.nunique() == 1,
    ),
}


# grpo_step_by_hand(model, lora_params, batches, adam_params)
def _plain_step(
    shift=True,
    masked=True,
    temperature=False,
    normalization=True,
    sign=1.0,
    optimizer="adamw",
    reduce="sum",
    zero=True,
    fresh_each=False,
):
    def make(params, adam):
        if optimizer == "adamw":
            return torch.optim.AdamW(
                params,
                lr=adam.learning_rate,
                betas=(adam.beta1, adam.beta2),
                eps=adam.eps,
                weight_decay=adam.weight_decay,
            )
        if optimizer == "adamw-defaults":  # issue 44: passed the one-step check
            return torch.optim.AdamW(params, lr=adam.learning_rate)
        if optimizer == "adam-no-decay":
            return torch.optim.Adam(
                params,
                lr=adam.learning_rate,
                betas=(adam.beta1, adam.beta2),
                eps=adam.eps,
            )
        if optimizer == "sgd":
            return torch.optim.SGD(params, lr=adam.learning_rate)
        return None

    def loss_of(model, batch):
        logits = model(input_ids=batch.tokens, attention_mask=batch.attention_mask)
        logits = logits.logits.float()
        if temperature:
            logits = logits / batch.temperature
        if shift:
            logprobs = torch.log_softmax(logits[:, :-1], dim=-1)
            targets, old, first = batch.tokens[:, 1:], batch.old_logprobs[:, 1:], 1
        else:
            logprobs = torch.log_softmax(logits, dim=-1)
            targets, old, first = batch.tokens, batch.old_logprobs, 0
        chosen = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        position = torch.arange(first, first + chosen.shape[1])[None]
        start = batch.prompt_lengths[:, None]
        mask = (position >= start) & (
            position < start + batch.completion_lengths[:, None]
        )
        if not masked:
            mask = torch.ones_like(mask)
        lengths = batch.completion_lengths.float()
        scale = torch.ones_like(lengths)
        if normalization and batch.normalization == "sequence_mean":
            scale = 1.0 / lengths
        elif normalization and batch.normalization == "constant":
            scale = scale / batch.max_tokens
        terms = -sign * torch.exp(chosen - old) * (batch.advantages * scale)[:, None]
        terms = torch.where(mask, terms, 0.0)
        return terms.sum() if reduce == "sum" else terms[mask].mean()

    def steps(model, lora_params, batches, adam_params):
        opt = make(lora_params, adam_params)
        losses = []
        for batch in batches:
            if fresh_each:
                opt = make(lora_params, adam_params)
            loss = loss_of(model, batch)
            loss.backward()
            if optimizer == "sign-sgd":  # issue 44: passed the one-step check
                with torch.no_grad():
                    for p in lora_params:
                        p -= adam_params.learning_rate * p.grad.sign()
            elif opt is not None:
                opt.step()
            if zero:
                for p in lora_params:
                    p.grad = None
            losses.append(loss.detach())
        return losses

    return steps


GRPO_STEP_BY_HAND = {
    "no shift": _plain_step(shift=False),
    "no mask": _plain_step(masked=False),
    "logits divided by the sampling temperature": _plain_step(temperature=True),
    "the normalisation ignored": _plain_step(normalization=False),
    "the sign flipped": _plain_step(sign=-1.0),
    "a mean over the tokens, not a sum": _plain_step(reduce="mean"),
    "a plain gradient step, not Adam": _plain_step(optimizer="sgd"),
    "sign-SGD (one Adam step from zero moments)": _plain_step(optimizer="sign-sgd"),
    "AdamW(params, lr=lr) with torch's defaults": _plain_step(
        optimizer="adamw-defaults"
    ),
    "Adam without weight decay": _plain_step(optimizer="adam-no-decay"),
    "a new optimiser for each batch (moments lost)": _plain_step(fresh_each=True),
    "the gradients not zeroed between batches": _plain_step(zero=False),
    "no optimiser step": _plain_step(optimizer=None),
}


# sample_submitted_first(sampling_client, prompt_tokens_list, params_list, group_size)
def _sample(sampling_client, tokens_list, params_list, group_size, wait_each=False):
    futures, responses = [], []
    for tokens, params in zip(tokens_list, params_list, strict=True):
        future = sampling_client.sample(
            prompt=trio.ModelInput.from_ints(tokens),
            num_samples=group_size,
            sampling_params=params,
        )
        if wait_each:
            responses.append(future.result())
        futures.append(future)
    return responses if wait_each else [f.result() for f in futures]


SAMPLE_SUBMITTED_FIRST = {
    "waits on each before the next": lambda client, tokens, params, g: _sample(
        client, tokens, params, g, wait_each=True
    ),
    "the first prompt's params for all": lambda client, tokens, params, g: _sample(
        client, tokens, [params[0]] * len(params), g
    ),
    "responses in reverse order": lambda client, tokens, params, g: _sample(
        client, tokens, params, g
    )[::-1],
    "one completion per prompt": lambda client, tokens, params, g: _sample(
        client, tokens, params, 1
    ),
}


# train_step_async(training_client, datums, adam_params)
TRAIN_STEP_ASYNC = WRONG_TRAIN_STEPS


# wilson_by_hand(successes, n, z=1.96)
def _wald(k, n, z=1.96):
    p = k / n
    half = z * math.sqrt(p * (1 - p) / n)
    return max(0.0, p - half), min(1.0, p + half)


def _wilson(k, n, z=1.96, last_term=True, swap=False):
    p = k / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    extra = z * z / (4 * n * n) if last_term else 0.0
    half = z / denominator * math.sqrt(p * (1 - p) / n + extra)
    interval = max(0.0, centre - half), min(1.0, centre + half)
    return interval[::-1] if swap else interval


WILSON_BY_HAND = {
    "Wald's interval": _wald,
    "without the z^2 / 4n^2 term": lambda k, n, z=1.96: _wilson(k, n, z, False),
    "(high, low)": lambda k, n, z=1.96: _wilson(k, n, z, swap=True),
    "a 90% interval (z = 1.645)": lambda k, n, z=1.96: _wilson(k, n, 1.645),
}


# flips_and_p(base_records, trained_records)
def _flips(base, trained, cap=True, none=1.0, sides=2, by_position=False):
    if by_position:
        before = list(base["exact"].astype(bool))
        after = list(trained["exact"].astype(bool))
    else:
        merged = base.merge(trained, on="index", suffixes=("_b", "_t"))
        before = list(merged["exact_b"].astype(bool))
        after = list(merged["exact_t"].astype(bool))
    b = sum(1 for x, y in zip(before, after, strict=True) if not x and y)
    c = sum(1 for x, y in zip(before, after, strict=True) if x and not y)
    if b + c == 0 and none is not None:
        return b, c, none
    tail = sum(math.comb(b + c, i) for i in range(min(b, c) + 1)) / 2 ** (b + c)
    p = sides * tail
    return b, c, min(1.0, p) if cap else p


FLIPS_AND_P = {
    "no min(1, .) cap (issue 36)": lambda base, trained: _flips(
        base, trained, cap=False
    ),
    "no flips gives 0.0, not 1.0 (issue 36)": lambda base, trained: _flips(
        base, trained, none=0.0
    ),
    "one-sided (no factor 2)": lambda base, trained: _flips(base, trained, sides=1),
    "rows matched by position, not by index": lambda base, trained: _flips(
        base, trained, by_position=True
    ),
}


# questions_needed(accuracy, half_width)
def _needed(accuracy, half_width, interval=None, top=None, plus=0, p=None):
    interval = interval or stats.wilson_interval
    n = 1
    while True:
        low, high = interval(round((accuracy if p is None else p) * n), n)
        if (high - low) / 2 <= half_width:
            return n + plus
        if top is not None and n >= top:
            return top
        n += 1


QUESTIONS_NEEDED = {
    "one too many": lambda a, h: _needed(a, h, plus=1),
    "Wald's interval": lambda a, h: _needed(a, h, interval=_wald),
    "the worst case p = 0.5, whatever the accuracy": lambda a, h: _needed(a, h, p=0.5),
    "stops its search at 1000 questions": lambda a, h: _needed(a, h, top=1000),
}

# token_weights(lengths, mode, max_tokens)
TOKEN_WEIGHTS = {
    "sequence_mean divides by max_tokens": lambda lengths, mode, top: [
        {"sequence_mean": 1.0 / top, "token_mean": 1.0 / sum(lengths)}.get(
            mode, 1.0 / top if mode == "constant" else 1.0
        )
        for _ in lengths
    ],
    "token_mean per completion (1 / |o_i|)": lambda lengths, mode, top: [
        {
            "sequence_mean": 1.0 / n,
            "token_mean": 1.0 / n,
            "constant": 1.0 / top,
        }.get(mode, 1.0)
        for n in lengths
    ],
    "constant divides by the group's tokens": lambda lengths, mode, top: [
        {
            "sequence_mean": 1.0 / n,
            "token_mean": 1.0 / sum(lengths),
            "constant": 1.0 / sum(lengths),
        }.get(mode, 1.0)
        for n in lengths
    ],
    "the weight of a whole completion, not a token": lambda lengths, mode, top: [
        {
            "sequence_mean": 1.0,
            "token_mean": n / sum(lengths),
            "constant": n / top,
        }.get(mode, float(n))
        for n in lengths
    ],
}


# k3_estimate(sampled, reference)
def _k3(sampled, reference, flip=False, per_row=False, k1=False, total=False):
    rows = [
        [(r - s if flip else s - r) for s, r in zip(rs, rr, strict=True)]
        for rs, rr in zip(sampled, reference, strict=True)
    ]

    def term(d):
        return d if k1 else math.exp(-d) + d - 1

    if per_row:
        return float(np.mean([np.mean([term(d) for d in row]) for row in rows]))
    flat = [term(d) for row in rows for d in row]
    return float(sum(flat)) if total else float(np.mean(flat))


K3_ESTIMATE = {
    "d = reference - sampled": lambda s, r: _k3(s, r, flip=True),
    "the mean of each completion's mean": lambda s, r: _k3(s, r, per_row=True),
    "k1, the mean of d": lambda s, r: _k3(s, r, k1=True),
    "a sum, not a mean": lambda s, r: _k3(s, r, total=True),
}


def _weights(log_r, mode, c, ratio=None, seq=None, cut=None):
    log_r = np.asarray(log_r, dtype=float)
    ratio = ratio or np.exp
    if mode.startswith("sequence"):
        r = np.full(log_r.shape, float(ratio(np.asarray((seq or np.sum)(log_r)))))
    else:
        r = ratio(log_r)
    if mode.endswith("truncate"):
        return np.minimum(r, c)
    return (cut or (lambda r, c: np.where(r > c, 0.0, r)))(r, c)


# correction_weights(log_ratios, mode, clip_max) (notebook 11)
CORRECTION_WEIGHTS = {
    "the sequence's ratio as its tokens' geometric mean (GSPO's)": (
        lambda r, m, c: _weights(r, m, c, seq=np.mean)
    ),
    "the ratio upside down (sampler / trainer)": lambda r, m, c: _weights(
        r, m, c, ratio=lambda x: np.exp(-x)
    ),
    "the mask caps at C instead of zeroing": lambda r, m, c: _weights(
        r, m, c, cut=np.minimum
    ),
    "the log ratio truncated at C": lambda r, m, c: (
        np.exp(np.minimum(np.asarray(r, dtype=float), c))
        if m == "token_truncate"
        else _weights(r, m, c)
    ),
}
