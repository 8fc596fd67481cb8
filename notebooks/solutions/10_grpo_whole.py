"""Solutions to the exercises of 10_grpo_whole.ipynb.

tests/classroom/test_self_checks.py checks ``train_loop`` against
``training.train_sync`` and fails the named wrong loops.
"""

from __future__ import annotations

from grpo_helpers.classroom.loop_check import FORBIDDEN


def train_loop(service, run_config, train_rows):
    """Exercise 1: the sync GRPO loop of the demo scripts, from PyTRIO's client API.

    Every step: a sampler saved from the current weights; for each prompt of the
    step's batch (``data.batch_indices``, in the run's order), ``group_size``
    completions sampled with the prompt's own seed; rewards and advantages; the
    groups that teach (not degenerate) as one Datum per completion; one
    ``forward_backward`` and one ``optim_step``, each waited on; and a dict of
    metrics.

    Args:
        service: a ServiceClient (``engines.connect(...)``).
        run_config: the run's ``GRPOConfig``.
        train_rows: the training rows (``data.load_split(run_config, "train")``).

    Returns:
        One dict per step: ``step``, ``reward_mean``, ``accuracy``,
        ``frac_degenerate`` and ``datums``.
    """
    import numpy as np
    import pytrio as trio

    from grpo_helpers import advantages, data, datum, prompts, rewards, rollout
    from grpo_helpers.step_math import derive_seed

    training_client = service.create_lora_training_client(
        base_model=run_config.model_name,
        rank=run_config.lora_rank,
        seed=run_config.seed,
    )
    tokenizer = training_client.get_tokenizer()
    reward_fn = rewards.get_reward_fn(run_config.reward)
    history = []
    for step in range(run_config.steps):
        # 1. a sampler frozen at the current weights: on-policy
        sampling_client = training_client.save_weights_and_get_sampling_client()
        indices = data.batch_indices(
            len(train_rows), step, run_config.batch_size, all_data=False
        )
        datums, step_rewards, exact, degenerate = [], [], [], 0
        for i, index in enumerate(indices):
            # 2. one group of group_size completions for each prompt
            row = train_rows[index]
            prompt_tokens = prompts.build_prompt(tokenizer, row["question"])
            gold = data.extract_gsm8k_answer(row["answer"])
            params = rollout.make_sampling_params(
                tokenizer,
                run_config.max_tokens,
                run_config.temperature,
                run_config.top_p,
                seed=derive_seed(run_config.seed, step, i),
            )
            response = sampling_client.sample(
                prompt=trio.ModelInput.from_ints(prompt_tokens),
                num_samples=run_config.group_size,
                sampling_params=params,
            ).result()
            # 3. rewards and advantages; a degenerate group teaches nothing
            texts = [seq.text for seq in response.sequences]
            group_rewards = [float(reward_fn(text, gold)) for text in texts]
            step_rewards += group_rewards
            exact += [rewards.grade_answer(text, gold) for text in texts]
            if advantages.is_degenerate(group_rewards):
                degenerate += 1
                continue
            group_adv = advantages.group_advantages(
                group_rewards, run_config.advantage_scale
            )
            # 4. one Datum per completion (exercise 3: none for a cut-off one)
            for seq, text, reward, adv in zip(
                response.sequences, texts, group_rewards, group_adv, strict=True
            ):
                if run_config.mask_truncated and seq.stop_reason == "length":
                    continue
                sample = datum.RolloutSample(
                    list(seq.tokens), list(seq.logprobs), text, reward, adv
                )
                datums.append(datum.build_grpo_datum(prompt_tokens, sample))
        # 5. one update per step, each future waited on
        if datums:
            training_client.forward_backward(
                datums, loss_fn="importance_sampling"
            ).result()
            training_client.optim_step(run_config.adam_params).result()
        row = {
            "step": step,
            "reward_mean": float(np.mean(step_rewards)),
            "accuracy": float(np.mean(exact)),
            "frac_degenerate": degenerate / len(indices),
            "datums": len(datums),
        }
        print(
            f"step {step:3d} | reward {row['reward_mean']:.3f} | "
            f"acc {row['accuracy']:.0%} | degenerate {row['frac_degenerate']:.0%} | "
            f"datums {row['datums']}"
        )
        history.append(row)
    return history


#: The grader's hidden tests: other inputs than the notebook's visible check.
#: ``grpo_helpers.classroom.course`` computes the expected values with the function
#: above when it builds the student edition (this file never ships to students).
HIDDEN_CASES = {
    # Each case: the training rows' gold answers, steps, batch_size, group_size,
    # the reward, the seed and mask_truncated. A fake service samples completions
    # that depend on the prompt, the seed and how many updates the weights have had
    # (so a stale sampler sends other completions), answering 4, 5 or 6; some
    # groups agree (degenerate), the longest completions are cut off (sent: this is
    # exercise 1's grade, and exercise 3's masking is checked in its own cell). What is
    # projected is what loop_check compares, in the same shape: the training
    # clients' settings; per step, the sample calls keyed by their prompt (so the
    # order the prompts are visited in does not count) with their seed and the
    # sampler's age, and each update's Datums as a multiset, its forward_backward
    # calls and its learning rate; the metrics of loop_check.METRIC_KEYS.
    "train_loop": {
        "cases": [
            (["4", "5", "6", "4"], 3, 2, 3, "binary", 0, False),
            (["5", "5", "4"], 4, 2, 4, "binary", 1, False),
            (["6", "4", "5", "5", "6"], 3, 3, 3, "shaped", 2, False),
            (["4", "6", "5", "4"], 3, 2, 4, "shaped", 3, False),
        ],
        "tol": 1e-6,
        "forbid": list(FORBIDDEN),
        "setup": """
import inspect
from types import SimpleNamespace


class FakeFuture:
    def __init__(self, value):
        self.value = value

    def result(self, timeout=None):
        return self.value

    def done(self):
        return True


class FakeTokenizer:
    eos_token = "<|im_end|>"

    def apply_chat_template(self, messages, tokenize=False, **kwargs):
        return " | ".join(m["content"] for m in messages)

    def encode(self, text, add_special_tokens=False):
        # the whole text counts: a prompt for another question gives other tokens
        checksum = sum((i + 1) * ord(c) for i, c in enumerate(text))
        return [1 + (ord(c) % 40) for c in text[-12:]] + [2 + checksum % 47]

    def decode(self, tokens, skip_special_tokens=True):
        # a completion's tokens are its characters: decoding gives its text
        return "".join(chr(t) for t in tokens)


def bound(function, args, kwargs):
    # the call's arguments by name, however they were passed
    call = inspect.signature(function).bind(*args, **kwargs)
    call.apply_defaults()
    return call.arguments


class FakeSampler:
    def __init__(self, log, trainer, version):
        self.log, self.trainer, self.version = log, trainer, version

    def _sample(self, prompt, num_samples=1, sampling_params=None):
        tokens = prompt.to_ints() if hasattr(prompt, "to_ints") else list(prompt)
        seed = getattr(sampling_params, "seed", None)
        age = self.trainer.version - self.version
        self.log.append(["sample", list(tokens), num_samples, seed, age])
        base = sum(tokens) + 7 * (seed or 0) + 13 * self.version
        sequences = []
        for j in range(num_samples):
            answer = 4 if (base % 3 == 0) else 4 + (base + j) % 3
            pad = (base + j) % 3
            text = "so" + " " * pad + "\\\\boxed{%d}" % answer
            ids = [ord(c) for c in text]
            logprobs = [-0.1 * (1 + (base + t + k) % 7) for k, t in enumerate(ids)]
            sequences.append(
                SimpleNamespace(
                    tokens=ids,
                    logprobs=logprobs,
                    text=text,
                    stop_reason="length" if pad == 2 else "stop",
                )
            )
        return FakeFuture(SimpleNamespace(sequences=sequences))

    def sample(self, *args, **kwargs):
        return self._sample(**bound(self._sample, args, kwargs))


class FakeTrainingClient:
    def __init__(self, log):
        self.log, self.version, self.saved = log, 0, {}

    def get_tokenizer(self):
        return FakeTokenizer()

    def save_weights_and_get_sampling_client(self, name=None):
        return FakeSampler(self.log, self, self.version)

    def save_weights_for_sampler(self, name, ttl_seconds=None):
        path = "fake://weights/%s" % name
        self.saved[path] = self.version
        return FakeFuture(SimpleNamespace(path=path))

    def create_sampling_client(self, model_path):
        return FakeSampler(self.log, self, self.saved.get(model_path, -1))

    def _forward_backward(
        self, data, loss_fn="cross_entropy", loss_fn_config=None, auto_shift=False
    ):
        self.log.append(["forward_backward", str(loss_fn), [
            [
                [int(t) for t in d.model_input.to_ints()],
                [int(t) for t in d.loss_fn_inputs["target_tokens"].tolist()],
                [round(float(v), 6) for v in d.loss_fn_inputs["logprobs"].tolist()],
                [round(float(v), 6) for v in d.loss_fn_inputs["advantages"].tolist()],
            ]
            for d in data
        ]])
        return FakeFuture("forward_backward output")

    def forward_backward(self, *args, **kwargs):
        return self._forward_backward(**bound(self._forward_backward, args, kwargs))

    def optim_step(self, adam_params):
        self.version += 1
        self.log.append(["optim_step", float(adam_params.learning_rate)])
        return FakeFuture("optim_step output")


class FakeService:
    def __init__(self):
        self.log, self.trainer = [], None

    def _client(
        self,
        base_model,
        rank=32,
        seed=None,
        train_mlp=True,
        train_attn=True,
        train_unembed=True,
    ):
        self.log.append(["training client", base_model, rank, seed])
        self.trainer = FakeTrainingClient(self.log)
        return self.trainer

    def create_lora_training_client(self, *args, **kwargs):
        return self._client(**bound(self._client, args, kwargs))

    def create_sampling_client(self, base_model, model_path=None):
        return self.trainer.create_sampling_client(model_path)


def prepare(case):
    from grpo_helpers.config import GRPOConfig

    golds, steps, batch_size, group_size, reward, seed, masked = case
    rows = [
        {"question": f"question {i}: what is {g}?", "answer": f"#### {g}"}
        for i, g in enumerate(golds)
    ]
    config = GRPOConfig(
        base_model="tiny-random",
        backend="local",
        steps=steps,
        batch_size=batch_size,
        group_size=group_size,
        max_tokens=8,
        reward=reward,
        seed=seed,
        learning_rate=1e-3,
        advantage_scale="none",
        mask_truncated=masked,
    )
    return FakeService(), config, rows


def project(result, args):
    # what loop_check compares, in its shape: per step (the step of the last
    # sample before a call), the samples keyed by prompt and each update's Datums
    # as a multiset
    service, config = args[0], args[1]
    clients, steps, samples = [], {}, 0
    pending, calls, loss_fns = [], 0, []
    for event in service.log:
        step = steps.setdefault(max(samples - 1, 0) // config.batch_size, [[], []])
        if event[0] == "training client":
            clients.append(event[1:])
        elif event[0] == "sample":
            samples += 1
            at = (samples - 1) // config.batch_size
            steps.setdefault(at, [[], []])[0].append(event[1:])
        elif event[0] == "forward_backward":
            pending, calls = pending + event[2], calls + 1
            loss_fns.append(event[1])
        else:
            step[1].append([sorted(pending), calls, sorted(set(loss_fns)), event[1]])
            pending, calls, loss_fns = [], 0, []
    keys = ("reward_mean", "accuracy", "frac_degenerate", "datums")
    rows = result if isinstance(result, (list, tuple)) else []
    metrics = [
        [round(float(r.get(k, float("nan"))), 6) for k in keys]
        if isinstance(r, dict)
        else repr(r)
        for r in rows
    ]
    return {
        "clients": clients,
        "steps": [[sorted(steps[s][0]), steps[s][1]] for s in sorted(steps)],
        "never stepped": [sorted(pending), calls],
        "metrics": metrics,
    }
""",
    },
}
