"""Solutions to the exercises of 06_async_training_loop.ipynb.

tests/test_notebooks_05_07.py checks these functions on the local engine.
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
