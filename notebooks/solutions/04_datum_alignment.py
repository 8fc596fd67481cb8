"""Solutions to the exercises of 04_datum_alignment.ipynb.

tests/notebooks/test_01_04.py runs the notebook's self-check cells on these.
"""


def trained_target(prompt_tokens, completion_tokens, position):
    """Token id trained at position (0 <= position <= P + C - 2), or None.

    Position i predicts token i + 1 of prompt + completion. Positions before P - 1
    predict prompt tokens and are not trained; position P - 1 + j predicts
    completion token j.

    >>> [trained_target([5, 6, 7], [8, 2], i) for i in range(4)]
    [None, None, 8, 2]
    """
    first_trained = len(prompt_tokens) - 1
    if position < first_trained:
        return None
    return completion_tokens[position - first_trained]


def looks_aligned(model_input, target_tokens, num_prompt_tokens):
    """Same length, and target[i] == model_input[i + 1] on trained positions.

    The last position's target (the completion's last token) is never an input, so
    it cannot be checked this way.

    >>> looks_aligned([5, 6, 7, 8], [0, 0, 8, 2], 3)
    True
    >>> looks_aligned([5, 6, 7, 8], [0, 0, 7, 8], 3)
    False
    """
    if len(model_input) != len(target_tokens):
        return False
    last = len(model_input) - 1
    return all(
        target_tokens[i] == model_input[i + 1]
        for i in range(num_prompt_tokens - 1, last)
    )


def importance_sampling_loss(logprobs, old_logprobs, advantages, mask):
    """The engine's ``importance_sampling`` loss on a padded batch.

    Each trained token contributes ``-ratio * advantage`` with ``ratio =
    exp(logprobs - old_logprobs)``; only the positions where ``mask`` is True count
    (the completion tokens: the prompt positions and the padding hold numbers that
    are not trained). The sum keeps the gradient: at ratio 1 it is
    ``-advantage * grad logprobs``, the policy gradient of notebook 03.

    Args:
        logprobs: ``[B, T]`` the learner's logprob of each target token (with grad).
        old_logprobs: ``[B, T]`` the sampler's logprobs of the same tokens.
        advantages: ``[B, T]`` each token's advantage.
        mask: ``[B, T]`` bool, True where a position is trained.

    Returns:
        A scalar tensor: the engine's ``loss_sum``.
    """
    import torch

    ratio = torch.exp(logprobs - old_logprobs)
    return torch.where(mask, -ratio * advantages, 0.0).sum()


def grpo_step_by_hand(model, lora_params, batches, adam_params):
    """GRPO steps in plain PyTorch: the engine's ``forward_backward`` +
    ``optim_step`` on each padded batch of ``batches``, in turn.

    One AdamW optimiser for ``lora_params``, made once with every setting of
    ``adam_params`` (its moments carry from one step to the next); then per batch:

    1. Logits ``[B, L, V]``; position t predicts token t + 1, so the logprob of
       each next token is ``log_softmax(logits[:, :-1])`` gathered at
       ``tokens[:, 1:]`` (the sampler recorded its logprobs at temperature 1,
       whatever it sampled at, and so does this: no division by the temperature).
    2. The mask: the completion tokens ``P .. P + C - 1`` of each row, in the
       shifted frame positions ``1 .. L - 1``.
    3. The loss: the sum over them of ``-ratio * A * s``, with ``s`` the row's
       normalisation factor (1, 1 / C or 1 / max_tokens).
    4. ``loss.backward()``, one AdamW step, and the gradients zeroed.

    Returns:
        The losses, one per batch, each before its step.
    """
    import torch

    optimizer = torch.optim.AdamW(
        lora_params,
        lr=adam_params.learning_rate,
        betas=(adam_params.beta1, adam_params.beta2),
        eps=adam_params.eps,
        weight_decay=adam_params.weight_decay,
    )
    losses = []
    for batch in batches:
        logits = model(
            input_ids=batch.tokens, attention_mask=batch.attention_mask
        ).logits
        logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        targets = batch.tokens[:, 1:]
        token_logprobs = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        position = torch.arange(1, batch.tokens.shape[1])[None]  # token predicted
        start = batch.prompt_lengths[:, None]
        ends = start + batch.completion_lengths[:, None]
        mask = (position >= start) & (position < ends)
        lengths = batch.completion_lengths.float()
        if batch.normalization == "sequence_mean":
            scale = 1.0 / lengths
        elif batch.normalization == "constant":
            scale = torch.full_like(lengths, 1.0 / batch.max_tokens)
        else:  # "token_sum"
            scale = torch.ones_like(lengths)
        ratio = torch.exp(token_logprobs - batch.old_logprobs[:, 1:])
        weight = (batch.advantages * scale)[:, None]
        loss = torch.where(mask, -ratio * weight, 0.0).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    return losses


#: The grader's hidden tests: other inputs than the notebook's visible checks.
#: ``grpo_helpers.classroom.course`` computes the expected values with the functions
#: above when it builds the student edition and writes them into the graded cells
#: as literals (nbgrader keeps them out of the student edition). This file never ships
#: to students.
HIDDEN_CASES = {
    "trained_target": {
        "cases": [
            ([9, 8], [7, 6, 5], 0),
            ([9, 8], [7, 6, 5], 1),
            ([9, 8], [7, 6, 5], 3),
            ([4, 4, 4, 4], [1], 2),
            ([4, 4, 4, 4], [1], 3),
            ([3], [2], 0),
            ([11, 12, 13], [14, 15], 1),
            ([11, 12, 13], [14, 15], 2),
        ],
    },
    # Each case: logprobs, old logprobs, advantages and mask, [B, T]. The
    # expected value is the loss and its gradient with respect to logprobs.
    "importance_sampling_loss": {
        "cases": [
            (
                [[-0.5, -1.0, -2.0, -0.7], [-0.2, -0.9, -3.0, -3.0]],
                [[0.0, -1.3, -1.5, -9.0], [0.0, -0.4, -1.0, -1.0]],
                [[0.5, 0.5, 0.5, 0.5], [-1.0, -1.0, -1.0, -1.0]],
                [[False, True, True, False], [False, True, False, False]],
            ),
            (
                [[-1.0, -2.0, -0.1]],
                [[-0.5, -2.5, -0.1]],
                [[2.0, -0.5, 1.5]],
                [[True, True, True]],
            ),
            (
                [[-0.3, -0.6], [-1.2, -0.05], [-4.0, -4.0]],
                [[-0.6, -0.6], [-1.0, -0.15], [-1.0, -1.0]],
                [[1.0, 1.0], [0.25, 0.25], [3.0, 3.0]],
                [[False, True], [True, True], [False, False]],
            ),
        ],
        "tol": 1e-5,
        "forbid": [
            "grpo_helpers.local.losses.token_loss",
            "grpo_helpers.local.losses.loss_sum",
        ],
        "setup": """
def prepare(case):
    import torch

    logprobs, old, advantages, mask = case
    return (
        torch.tensor(logprobs, requires_grad=True),
        torch.tensor(old),
        torch.tensor(advantages),
        torch.tensor(mask),
    )


def project(result, args):
    import torch

    (gradient,) = torch.autograd.grad(result.reshape(()), args[0])
    return [float(result.detach()), gradient.tolist()]
""",
    },
    # Each case: a padded batch (tokens, prompt and completion lengths, the old
    # logprobs with junk outside the completions, advantages), a normalisation,
    # max_tokens and the sampling temperature. The model is a toy causal model
    # built in the graded cell (each position's logits from the mean embedding of
    # the tokens so far, through an output layer with a rank-2 LoRA); the expected
    # value is the loss and the LoRA weights after the step.
    "grpo_step_by_hand": {
        "cases": [
            (
                [[1, 2, 3, 4, 5, 0], [2, 3, 6, 1, 0, 0]],
                [2, 3],
                [3, 1],
                [
                    [-12.0, -12.0, -1.2, -2.0, -1.7, -12.0],
                    [-12.0] * 3 + [-0.8] + [-12.0] * 2,
                ],
                [0.5, -1.0],
                "token_sum",
                8,
                0.7,
            ),
            (
                [[4, 4, 1, 2, 0], [5, 1, 6, 3, 2], [3, 6, 5, 0, 0]],
                [2, 1, 2],
                [2, 4, 1],
                [
                    [-12.0, -12.0, -2.2, -0.4, -12.0],
                    [-12.0, -1.1, -3.0, -0.9, -1.6],
                    [-12.0, -12.0, -2.5, -12.0, -12.0],
                ],
                [1.25, -0.75, 0.5],
                "sequence_mean",
                4,
                0.5,
            ),
            (
                [[6, 5, 4, 3, 2, 1], [1, 1, 2, 0, 0, 0]],
                [1, 2],
                [5, 1],
                [
                    [-12.0, -1.5, -0.6, -2.4, -1.9, -1.1],
                    [-12.0, -12.0, -1.3] + [-12.0] * 3,
                ],
                [-0.5, 2.0],
                "constant",
                6,
                1.0,
            ),
        ],
        "tol": 1e-5,
        "forbid": [
            "grpo_helpers.local.losses.token_loss",
            "grpo_helpers.local.losses.loss_sum",
            "grpo_helpers.advantages.length_scales",
            "grpo_helpers.classroom.plain_step._loss",
        ],
        "setup": """
def prepare(case):
    import types

    import torch

    tokens, prompts, completions, old, advantages, normalization, top, t = case

    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            vocab, dim, rank = 7, 5, 2
            grid = torch.arange(vocab * dim, dtype=torch.float32).reshape(vocab, dim)
            self.embed = torch.sin(grid)
            self.head = torch.cos(1.3 * grid)
            a = torch.arange(rank * dim, dtype=torch.float32).reshape(rank, dim)
            b = torch.arange(vocab * rank, dtype=torch.float32).reshape(vocab, rank)
            self.lora_a = torch.nn.Parameter(0.5 * torch.sin(0.7 * a + 0.3))
            self.lora_b = torch.nn.Parameter(0.5 * torch.cos(0.9 * b + 0.1))

        def forward(self, input_ids, attention_mask=None):
            steps = torch.arange(1, input_ids.shape[1] + 1, dtype=torch.float32)
            hidden = self.embed[input_ids].cumsum(1) / steps[None, :, None]
            weight = self.head + self.lora_b @ self.lora_a
            return types.SimpleNamespace(logits=hidden @ weight.T)

    model = TinyLM()
    tokens = torch.tensor(tokens)
    prompt_lengths = torch.tensor(prompts)
    completion_lengths = torch.tensor(completions)
    ends = (prompt_lengths + completion_lengths)[:, None]
    batch = types.SimpleNamespace(
        tokens=tokens,
        attention_mask=(torch.arange(tokens.shape[1])[None] < ends).long(),
        prompt_lengths=prompt_lengths,
        completion_lengths=completion_lengths,
        old_logprobs=torch.tensor(old),
        advantages=torch.tensor(advantages),
        normalization=normalization,
        max_tokens=top,
        temperature=t,
    )
    # a second batch: the same rows, other advantages (both signs)
    second = types.SimpleNamespace(**vars(batch))
    second.advantages = -0.5 * torch.tensor(advantages).flip(0)
    adam = types.SimpleNamespace(
        learning_rate=0.01, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.5
    )
    return model, [model.lora_a, model.lora_b], [batch, second], adam


def project(result, args):
    import torch

    model = args[0]
    losses = [
        float(r.detach()) if torch.is_tensor(r) else float(r)
        for r in (result if isinstance(result, (list, tuple)) else [result])
    ]
    return [losses, model.lora_a.detach().tolist(), model.lora_b.detach().tolist()]
""",
    },
    "looks_aligned": {
        "cases": [
            ([3, 4, 5, 6], [0, 5, 6, 7], 2),
            ([3, 4, 5, 6], [0, 5, 6, 9], 2),
            ([3, 4, 5, 6], [9, 5, 6, 7], 2),
            ([3, 4, 5, 6], [0, 4, 5, 6], 2),
            ([3, 4, 5, 6], [0, 6, 7, 0], 2),
            ([3, 4, 5, 6, 7], [0, 5, 6, 7], 2),
            ([8], [2], 1),
            ([1, 2, 3, 4, 5], [0, 3, 4, 5, 6], 2),
            ([1, 2, 3, 4, 5], [0, 3, 4, 0, 6], 2),
            # wrong only at position P - 1, the first trained one
            ([3, 4, 5, 6], [0, 9, 6, 7], 2),
            ([7, 8, 9, 1, 2], [0, 0, 4, 2, 6], 3),
        ],
    },
}


# Exercise 5 (discussion). On the first P - 1 positions all four lists agree across
# the group: model_input holds the same prompt tokens, target_tokens is padding 0,
# and the sampler logprobs and advantages are 0.0. Each of those positions' loss
# terms is -rho * A with A = 0, so they add exactly nothing to the gradient (the
# target 0 is never trained towards). That does not take the prompt out of the
# update: every completion token attends to the prompt's keys and values, so the
# gradient of the completion positions' losses flows back through attention into
# the prompt positions' activations, and the LoRA weights applied there change how
# the prompt is read. The prompt is trained on as context, never as a target.
