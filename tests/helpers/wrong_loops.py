"""Notebook 10's loop written many ways: the wrong loops that
``loop_check.train_loop_check`` and the hidden grader must fail, each with the hint
for its own slip, and the right loops written otherwise that both must pass
(``tests/classroom/test_loop_check.py``; ``tests/classroom/test_self_checks.py``).

``loop(**choices)`` is the reference solution, with each choice changing one thing:
a slip (the sampler made once, degenerate groups sent, std-scaled advantages, no
``optim_step``, one per group, the prompts' seeds by the order visited, another
reward) or a right variant (the Datums or the prompts in another order, tinker's
``save_weights_for_sampler`` idiom, futures waited on late, every sample submitted
before the first ``.result()``, one ``forward_backward`` per group before one
``optim_step``, positional arguments, the texts decoded by the loop itself, no
``step`` in the metrics). One forward_backward per group before one ``optim_step``
is the same algorithm but not the same computation: both refuse it, saying why.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytrio as trio

from grpo_helpers import advantages, data, datum, prompts, rewards, rollout, step_math


def _params(tokenizer, run_config, step, i):
    return rollout.make_sampling_params(
        tokenizer,
        run_config.max_tokens,
        run_config.temperature,
        run_config.top_p,
        seed=step_math.derive_seed(run_config.seed, step, i),
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


def loop(
    stale: bool = False,
    send_degenerate: bool = False,
    scale: str | None = None,
    optim: str = "step",
    reverse: bool = False,
    seeds_by_visit: bool = False,
    reward: str | None = None,
    shuffle_datums: bool = False,
    save_for_sampler: bool = False,
    late_waits: bool = False,
    concurrent: bool = False,
    split_forward_backward: bool = False,
    positional: bool = False,
    decode: bool = False,
    with_step: bool = True,
    masks: bool = True,
    datums_counted: str = "datums",
    seed_offset: int = 0,
) -> Any:
    """The loop with the choices made; ``optim``: "step" (right), "group" or
    "none"; ``reward``: a reward name instead of the run's, or "grade_answer"."""

    def train_loop(service, run_config, train_rows):
        if positional:
            tc = service.create_lora_training_client(
                run_config.model_name, run_config.lora_rank, run_config.seed
            )
        else:
            tc = service.create_lora_training_client(
                base_model=run_config.model_name,
                rank=run_config.lora_rank,
                seed=run_config.seed + seed_offset,
            )
        tokenizer = tc.get_tokenizer()
        if reward == "grade_answer":
            reward_fn = rewards.grade_answer
        else:
            reward_fn = rewards.get_reward_fn(reward or run_config.reward)

        def fresh_sampler(step):
            if save_for_sampler:
                path = tc.save_weights_for_sampler(f"step-{step}").result().path
                return service.create_sampling_client(
                    base_model=run_config.model_name, model_path=path
                )
            return tc.save_weights_and_get_sampling_client()

        sampler = fresh_sampler(0) if stale else None
        history = []
        for step in range(run_config.steps):
            if not stale:
                sampler = fresh_sampler(step)
            indices = data.batch_indices(
                len(train_rows), step, run_config.batch_size, all_data=False
            )
            places = list(enumerate(indices))
            if reverse:
                places.reverse()
            if seeds_by_visit:  # the seed of the place visited, not of the prompt
                places = [(v, index) for v, (_, index) in enumerate(places)]
            # 1. submit the samples (all of them first, when concurrent)
            submitted = []
            for i, index in places:
                row = train_rows[index]
                tokens = prompts.build_prompt(tokenizer, row["question"])
                prompt = trio.ModelInput.from_ints(tokens)
                params = _params(tokenizer, run_config, step, i)
                if positional:
                    future = sampler.sample(prompt, run_config.group_size, params)
                else:
                    future = sampler.sample(
                        prompt=prompt,
                        num_samples=run_config.group_size,
                        sampling_params=params,
                    )
                gold = data.extract_gsm8k_answer(row["answer"])
                if not concurrent:
                    future = future.result()
                submitted.append((tokens, gold, future))
            # 2. rewards, advantages and Datums
            batch, step_rewards, exact, degenerate = [], [], [], 0
            for tokens, gold, future in submitted:
                response = future.result() if concurrent else future
                if decode:
                    texts = [
                        tokenizer.decode(s.tokens, skip_special_tokens=True)
                        for s in response.sequences
                    ]
                else:
                    texts = [s.text for s in response.sequences]
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
                        run_config.mask_truncated and masks,
                    )
                )
            # 3. the update
            datums = [d for group in batch for d in group]
            if shuffle_datums:
                datums = datums[::-1]
            if optim == "group":
                updates = [[g] for g in batch if g]
            elif split_forward_backward:
                updates = [[g for g in batch if g]]
            else:
                updates = [[datums]] if datums else []
            for calls in updates:
                if not calls:
                    continue
                futures = [
                    tc.forward_backward(d, loss_fn="importance_sampling") for d in calls
                ]
                if not late_waits:
                    for future in futures:
                        future.result()
                if optim != "none":
                    futures.append(tc.optim_step(run_config.adam_params))
                for future in futures:
                    future.result()
            row = {
                "reward_mean": float(np.mean(step_rewards)),
                "accuracy": float(np.mean(exact)),
                "frac_degenerate": degenerate / len(indices),
                "datums": sum(len(g) for g in batch)
                if datums_counted == "datums"
                else len(batch),
            }
            history.append(({"step": step} if with_step else {}) | row)
        return history

    return train_loop


#: The wrong loops, and the words the hint for each must hold.
WRONG_LOOPS = {
    "the sampler made once, before the loop (a stale policy)": loop(stale=True),
    "a degenerate group sent": loop(send_degenerate=True),
    "std-scaled advantages where the run is mean-only": loop(scale="group"),
    "no optim_step": loop(optim="none"),
    "one optim_step per group": loop(optim="group"),
    "the prompts' seeds by the order visited": loop(reverse=True, seeds_by_visit=True),
    "the exact-answer reward where the run's is another": loop(reward="grade_answer"),
    "notebook 05's shown_work where the run's reward is another": loop(
        reward="shown_work"
    ),
    "the datums metric counts the groups sent": loop(datums_counted="groups"),
    "the policy made with another seed": loop(seed_offset=1),
}


def _interleaved(service, run_config, train_rows):
    """One group at a time: sample, then forward_backward and optim_step, then the
    next group (the natural 'one optim_step per group')."""
    tc = service.create_lora_training_client(
        base_model=run_config.model_name,
        rank=run_config.lora_rank,
        seed=run_config.seed,
    )
    tokenizer = tc.get_tokenizer()
    reward_fn = rewards.get_reward_fn(run_config.reward)
    history = []
    for step in range(run_config.steps):
        sampler = tc.save_weights_and_get_sampling_client()
        indices = data.batch_indices(
            len(train_rows), step, run_config.batch_size, all_data=False
        )
        for i, index in enumerate(indices):
            row = train_rows[index]
            tokens = prompts.build_prompt(tokenizer, row["question"])
            response = sampler.sample(
                prompt=trio.ModelInput.from_ints(tokens),
                num_samples=run_config.group_size,
                sampling_params=_params(tokenizer, run_config, step, i),
            ).result()
            texts = [s.text for s in response.sequences]
            gold = data.extract_gsm8k_answer(row["answer"])
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
        return loop()(service, run_config, train_rows)
    finally:
        step_math.derive_seed = real


WRONG_LOOPS["one group at a time, an optim_step after each"] = _interleaved
WRONG_LOOPS["every prompt sampled with the run's seed"] = _wrong_seed
#: The same algorithm, refused with its reason (``loop_check.SPLIT_UPDATE``): the
#: split sum's last bits flip a sampled token a step later.
WRONG_LOOPS["one forward_backward per group, then one optim_step"] = loop(
    split_forward_backward=True
)

#: Exercise 1's loop before exercise 3: right for exercise 1, wrong for exercise 3.
UNMASKED = loop(masks=False)

#: What the notebook check's hint says for each wrong loop (a part of it).
WRONG_HINTS = {
    "the sampler made once, before the loop (a stale policy)": "stale policy",
    "a degenerate group sent": "is degenerate",
    "std-scaled advantages where the run is mean-only": "by a factor",
    "no optim_step": "not followed by optim_step",
    "one optim_step per group": "one optim_step per step",
    "the prompts' seeds by the order visited": "sampling seed is not its own",
    "the exact-answer reward where the run's is another": "the run's reward is",
    "notebook 05's shown_work where the run's reward is another": "the run's reward is",
    "one group at a time, an optim_step after each": "middle of the step",
    "every prompt sampled with the run's seed": "sampling seed is not its own",
    "one forward_backward per group, then one optim_step": "split into 2",
    "the datums metric counts the groups sent": "datums differs from train_sync's",
    "the policy made with another seed": "(its seed differs)",
}

#: Right loops written otherwise (the Datums in another order would fail a check that
#: compared them as a list; the prompts in another order, one that compared the
#: samples in the order called).
RIGHT_LOOPS = {
    "the solution's loop, written again": loop(),
    "the same Datums in another order": loop(shuffle_datums=True),
    "the prompts in another order, each with its own seed": loop(reverse=True),
    "save_weights_for_sampler, then create_sampling_client": loop(
        save_for_sampler=True
    ),
    "futures waited on after both calls": loop(late_waits=True),
    "every sample submitted before the first result": loop(concurrent=True),
    "positional arguments": loop(positional=True),
    "the texts decoded from the tokens": loop(decode=True),
    "no step in the metrics": loop(with_step=False),
}
