"""Notebook 10's loop written wrong, once: the named wrong loops that
``loop_check.train_loop_check`` must fail (``tests/classroom/test_self_checks.py``).

``wrong_loop(**slip)`` is the reference solution with one slip: the sampler made
once before the loop, degenerate groups sent, std-scaled advantages, no
``optim_step``, one ``optim_step`` per group, the batch's prompts in reverse order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytrio as trio

from grpo_helpers import advantages, data, datum, prompts, rewards, rollout, step_math


def _sample_group(sampler, tokenizer, run_config, row, step, i):
    """One prompt's group, as the right loop samples it: (prompt tokens, gold
    answer, response, texts)."""
    tokens = prompts.build_prompt(tokenizer, row["question"])
    gold = data.extract_gsm8k_answer(row["answer"])
    params = rollout.make_sampling_params(
        tokenizer,
        run_config.max_tokens,
        run_config.temperature,
        run_config.top_p,
        seed=step_math.derive_seed(run_config.seed, step, i),
    )
    response = sampler.sample(
        prompt=trio.ModelInput.from_ints(tokens),
        num_samples=run_config.group_size,
        sampling_params=params,
    ).result()
    return tokens, gold, response, [s.text for s in response.sequences]


def _policy(service, run_config):
    """The run's LoRA policy, as the right loop makes it."""
    return service.create_lora_training_client(
        base_model=run_config.model_name,
        rank=run_config.lora_rank,
        seed=run_config.seed,
    )


def _group_datums(tokens, response, texts, group_rewards, scale, mask=False):
    """One Datum per completion of a group, with its advantage under ``scale``
    (none for a completion cut off at ``max_tokens`` when ``mask``)."""
    adv = advantages.group_advantages(group_rewards, scale)
    return [
        datum.build_grpo_datum(
            tokens, datum.RolloutSample(list(s.tokens), list(s.logprobs), t, r, a)
        )
        for s, t, r, a in zip(
            response.sequences, texts, group_rewards, adv, strict=True
        )
        if not (mask and s.stop_reason == "length")
    ]


def wrong_loop(
    stale: bool = False,
    send_degenerate: bool = False,
    scale: str | None = None,
    optim: str = "step",
    reverse: bool = False,
) -> Any:
    """The loop with one slip; ``optim``: "step" (right), "group" or "none"."""

    def train_loop(service, run_config, train_rows):
        tc = _policy(service, run_config)
        tokenizer = tc.get_tokenizer()
        reward_fn = rewards.get_reward_fn(run_config.reward)
        sampler = tc.save_weights_and_get_sampling_client() if stale else None
        history = []
        for step in range(run_config.steps):
            if not stale:
                sampler = tc.save_weights_and_get_sampling_client()
            indices = data.batch_indices(
                len(train_rows), step, run_config.batch_size, all_data=False
            )
            order = list(reversed(indices)) if reverse else indices
            batch, step_rewards, exact, degenerate = [], [], [], 0
            for i, index in enumerate(order):
                tokens, gold, response, texts = _sample_group(
                    sampler, tokenizer, run_config, train_rows[index], step, i
                )
                group_rewards = [float(reward_fn(t, gold)) for t in texts]
                step_rewards += group_rewards
                exact += [rewards.grade_answer(t, gold) for t in texts]
                if advantages.is_degenerate(group_rewards):
                    degenerate += 1
                    if not send_degenerate:
                        continue
                batch.append(
                    _group_datums(
                        tokens,
                        response,
                        texts,
                        group_rewards,
                        scale or run_config.advantage_scale,
                        run_config.mask_truncated,
                    )
                )
            groups = batch if optim == "group" else [[d for g in batch for d in g]]
            for datums in groups:
                if not datums:
                    continue
                tc.forward_backward(datums, loss_fn="importance_sampling").result()
                if optim != "none":
                    tc.optim_step(run_config.adam_params).result()
            history.append(
                {
                    "step": step,
                    "reward_mean": float(np.mean(step_rewards)),
                    "accuracy": float(np.mean(exact)),
                    "frac_degenerate": degenerate / len(indices),
                    "datums": sum(len(g) for g in batch),
                }
            )
        return history

    return train_loop


#: The wrong loops by name, as ``tests/classroom/test_self_checks.py`` lists them.
WRONG_LOOPS = {
    "the sampler made once, before the loop (a stale policy)": wrong_loop(stale=True),
    "a degenerate group sent": wrong_loop(send_degenerate=True),
    "std-scaled advantages where the run is mean-only": wrong_loop(scale="group"),
    "no optim_step": wrong_loop(optim="none"),
    "one optim_step per group": wrong_loop(optim="group"),
    "the batch's prompts in another order": wrong_loop(reverse=True),
}
#: Right loops written otherwise: the slips' factory with none.
RIGHT_LOOPS = {"the solution's loop, written again": wrong_loop()}


def _interleaved(service, run_config, train_rows):
    """One group at a time: sample, then forward_backward and optim_step, then the
    next group (the natural 'one optim_step per group')."""
    tc = _policy(service, run_config)
    tokenizer = tc.get_tokenizer()
    reward_fn = rewards.get_reward_fn(run_config.reward)
    history = []
    for step in range(run_config.steps):
        sampler = tc.save_weights_and_get_sampling_client()
        indices = data.batch_indices(
            len(train_rows), step, run_config.batch_size, all_data=False
        )
        for i, index in enumerate(indices):
            tokens, gold, response, texts = _sample_group(
                sampler, tokenizer, run_config, train_rows[index], step, i
            )
            group_rewards = [float(reward_fn(t, gold)) for t in texts]
            if advantages.is_degenerate(group_rewards):
                continue
            datums = _group_datums(tokens, response, texts, group_rewards, "none")
            tc.forward_backward(datums, loss_fn="importance_sampling").result()
            tc.optim_step(run_config.adam_params).result()
        history.append({"step": step})
    return history


def _wrong_seed(service, run_config, train_rows):
    """The right loop with every prompt sampled at the run's seed alone."""
    real = step_math.derive_seed
    try:
        step_math.derive_seed = lambda seed, step, prompt: seed
        return wrong_loop()(service, run_config, train_rows)
    finally:
        step_math.derive_seed = real


WRONG_LOOPS["one group at a time, an optim_step after each"] = _interleaved
WRONG_LOOPS["every prompt sampled with the run's seed"] = _wrong_seed
