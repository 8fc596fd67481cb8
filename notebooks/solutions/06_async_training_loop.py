"""Solutions to the exercises of 06_async_training_loop.ipynb.

tests/notebooks/test_05_09.py checks these functions on the local engine.
"""

from __future__ import annotations

import pytrio as trio


def sample_submitted_first(
    sampling_client, prompt_tokens_list, params_list, group_size
):
    """Exercise 1: every request in flight before the first wait, sync calls only.

    ``sample`` returns an ``APIFuture`` as soon as the request is submitted, so a
    list comprehension of ``sample`` calls puts every prompt in flight at once; the
    ``.result()`` calls come after. The engine sees the requests together and batches
    them, so this runs about as fast as ``asyncio.gather`` of ``sample_async``: the
    speed-up comes from having many requests in flight, not from the ``async``
    keyword.

    Args:
        sampling_client: a ``SamplingClient`` (PyTRIO's or the local engine's).
        prompt_tokens_list: one list of prompt token ids per prompt.
        params_list: one ``SamplingParams`` per prompt.
        group_size: completions per prompt.

    Returns:
        One ``SampleResponse`` per prompt, in prompt order.
    """
    futures = [
        sampling_client.sample(
            prompt=trio.ModelInput.from_ints(tokens),
            num_samples=group_size,
            sampling_params=params,
        )
        for tokens, params in zip(prompt_tokens_list, params_list, strict=True)
    ]
    return [future.result() for future in futures]


async def train_step_async(training_client, datums, adam_params):
    """Exercise 2: one update, both requests submitted before either is awaited.

    The first ``await`` of each ``*_async`` call submits it and returns an
    ``APIFuture``; the second ``await`` waits for its result. Requests on one
    training client run in submission order, so ``optim_step`` runs right after
    ``forward_backward``, on its gradients.

    Returns:
        ``(ForwardBackwardOutput, OptimStepResponse)``.
    """
    fb_future = await training_client.forward_backward_async(
        datums, loss_fn="importance_sampling"
    )
    optim_future = await training_client.optim_step_async(adam_params)
    return await fb_future, await optim_future


#: The grader's hidden tests: other inputs than the notebook's visible checks.
#: ``grpo_helpers.classroom.course`` computes the expected values with the functions
#: above when it builds the student edition and writes them into the graded cells
#: as literals (nbgrader keeps them out of the student edition). ``setup`` builds the
#: arguments from literal data in the graded cell (``prepare``) and turns what the
#: function returns into literals (``project``). This file never ships to students.
HIDDEN_CASES = {
    # A fake sampling client that logs when each request is submitted and when its
    # result is waited for: the expected values say that every request was in
    # flight before the first wait, which the notebook's own check cannot see.
    "sample_submitted_first": {
        "cases": [
            ([[5, 6, 7], [8, 9], [10]], ["a", "b", "c"], 3),
            ([[1, 2]], ["only"], 2),
            ([[4], [4, 4], [4, 4, 4], [3]], ["p0", "p1", "p2", "p3"], 5),
        ],
        "setup": """
class FakeFuture:
    def __init__(self, log, index, value):
        self.log, self.index, self.value = log, index, value

    def result(self, timeout=None):
        self.log.append(("wait", self.index))
        return self.value


class FakeSamplingClient:
    def __init__(self):
        self.log = []

    def sample(self, prompt, num_samples=1, sampling_params=None, **kwargs):
        from types import SimpleNamespace

        index = sum(1 for kind, _ in self.log if kind == "submit")
        self.log.append(("submit", index))
        tokens = prompt.to_ints() if hasattr(prompt, "to_ints") else list(prompt)
        response = SimpleNamespace(
            prompt=list(tokens),
            num_samples=num_samples,
            params=getattr(sampling_params, "name", None),
            sequences=[SimpleNamespace(tokens=[], logprobs=[])] * num_samples,
            input_tokens=len(tokens),
        )
        return FakeFuture(self.log, index, response)

    async def sample_async(self, *args, **kwargs):
        raise RuntimeError("this exercise asks for sync calls only")


def prepare(case):
    from types import SimpleNamespace

    prompts, names, group_size = case
    params = [SimpleNamespace(name=name) for name in names]
    return FakeSamplingClient(), prompts, params, group_size


def project(result, args):
    log = args[0].log
    kinds = [kind for kind, _ in log]
    first_wait = kinds.index("wait") if "wait" in kinds else len(kinds)
    return {
        "responses": [[r.prompt, r.num_samples, r.params] for r in result],
        "submitted_before_first_wait": kinds[:first_wait].count("submit"),
        "waits": sorted(index for kind, index in log if kind == "wait"),
    }
""",
    },
    # A fake training client: both requests must be submitted before either is
    # awaited, with the importance_sampling loss, and both results returned.
    "train_step_async": {
        "cases": [
            (["datum 1", "datum 2"], {"learning_rate": 1e-4}),
            (["datum 3"], {"learning_rate": 4e-5}),
        ],
        "setup": """
class FakeAPIFuture:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def __await__(self):
        self.log.append(("wait", self.name))
        return f"{self.name} output"
        yield  # a generator: awaiting it returns at once

    def result(self, timeout=None):
        self.log.append(("wait", self.name))
        return f"{self.name} output"


class FakeTrainingClient:
    def __init__(self):
        self.log, self.calls = [], {}

    async def forward_backward_async(self, data, loss_fn=None, loss_fn_config=None):
        self.log.append(("submit", "forward_backward"))
        self.calls["forward_backward"] = (data, loss_fn)
        return FakeAPIFuture(self.log, "forward_backward")

    async def optim_step_async(self, adam_params):
        self.log.append(("submit", "optim_step"))
        self.calls["optim_step"] = adam_params
        return FakeAPIFuture(self.log, "optim_step")


def prepare(case):
    from types import SimpleNamespace

    datums, adam = case
    return FakeTrainingClient(), [SimpleNamespace(name=d) for d in datums], adam


def project(result, args):
    client, datums, adam = args
    kinds = [kind for kind, _ in client.log]
    first_wait = kinds.index("wait") if "wait" in kinds else len(kinds)
    data, loss_fn = client.calls.get("forward_backward", (None, None))
    return {
        "returned": list(result) if isinstance(result, (tuple, list)) else None,
        "submitted": [name for kind, name in client.log if kind == "submit"],
        "submitted_before_first_wait": kinds[:first_wait].count("submit"),
        "waited": sorted(name for kind, name in client.log if kind == "wait"),
        "loss_fn": loss_fn,
        "datums": [getattr(d, "name", None) for d in data] if data is datums else None,
        "adam_params": client.calls.get("optim_step"),
    }
""",
    },
}


# Exercise 3 (discussion). The Datums of step k+1 would carry the *sampler's*
# logprobs, computed with the weights before step k's update, while the learner
# computes its logprobs with the weights after it. The tokens, rewards and
# advantages are fine (they describe what was sampled); the stale numbers are the
# "old" logprobs, and the ratio rho = pi_theta / pi_old is no longer 1. The
# importance_sampling loss -rho * A is the correction for that: its gradient
# rho * A * grad log pi_theta reweights each sampled token by how much more (or
# less) likely the current policy makes it. It is still a surrogate, not an
# unbiased policy gradient of the current policy (the advantages were measured
# under the old one, and the states were visited by it), but its bias is small
# while the two policies stay close (one step apart, with a small learning rate,
# rho stays near 1). When they drift further (several steps of lag, a large
# learning rate), a few tokens get large ratios and dominate the gradient; the
# clipped ppo loss stops pushing a token once its ratio leaves [1 - eps, 1 + eps],
# which bounds that.
