"""Wrong answers to notebook 06's ``train_step_async(training_client, datums,
adam_params)``, shared by the engine-check tests and the wrong-answers tests.

Each submits ``forward_backward_async`` and ``optim_step_async`` the wrong way:
awaiting the first before submitting the second, one await too few, the optimiser
first, or the default loss.
"""

from __future__ import annotations


async def awaits_first(training_client, datums, adam_params):
    fb = await training_client.forward_backward_async(datums, "importance_sampling")
    fb_output = await fb
    optim = await training_client.optim_step_async(adam_params)
    return fb_output, await optim


async def one_await(training_client, datums, adam_params):
    fb = await training_client.forward_backward_async(datums, "importance_sampling")
    optim = await training_client.optim_step_async(adam_params)
    return fb, optim


async def optim_first(training_client, datums, adam_params):
    optim = await training_client.optim_step_async(adam_params)
    fb = await training_client.forward_backward_async(datums, "importance_sampling")
    return await fb, await optim


async def default_loss(training_client, datums, adam_params):
    fb = await training_client.forward_backward_async(datums)
    optim = await training_client.optim_step_async(adam_params)
    return await fb, await optim


#: Each wrong answer by the mistake it makes.
WRONG_TRAIN_STEPS = {
    "awaits forward_backward before submitting optim_step": awaits_first,
    "one await too few": one_await,
    "optim_step submitted first": optim_first,
    "the default loss (cross_entropy)": default_loss,
}
