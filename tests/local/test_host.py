"""grpo_helpers.local.host: one base model, many adapters. A dropped training
client releases its adapter; a bfloat16 host samples with the adapter unmerged and
agrees with its trainer; a sampling batch that fails fails every request in it."""

from __future__ import annotations

import numpy as np
import pytest
import pytrio as trio
import torch
from local_engine import (
    MODEL,
    encode,
    new_client,
    params,
    perturbed_client,
    teacher_forced,
)

from grpo_helpers.engines import connect
from grpo_helpers.local.decoder import HFDecoder


def test_dropped_training_clients_release_their_adapter(svc, tok):
    import gc

    tc = new_client(svc)
    host, name = tc._host, tc._adapter
    assert name in host.peft.peft_config
    del tc
    gc.collect()
    svc.create_sampling_client(MODEL).sample(encode(tok, "gc"), 1, params()).result()
    assert name not in host.peft.peft_config


def test_a_bfloat16_host_samples_unmerged_and_agrees_with_its_trainer(tmp_path):
    svc = connect("local", run_dir=tmp_path, dtype=torch.bfloat16)
    tc = perturbed_client(svc, rank=4)
    host = tc._host
    assert next(host.model.parameters()).dtype == torch.bfloat16
    assert host.sampler_kind == "plain"
    sampler = tc.save_weights_and_get_sampling_client()
    prompt = [11, 12, 13, 14, 15]
    response = sampler.sample(
        trio.ModelInput.from_ints(prompt), 2, trio.SamplingParams(max_tokens=6, seed=3)
    ).result()
    assert host._merged is None  # no merged copy was built
    with host.using(sampler._snapshot) as decoder:
        assert isinstance(decoder, HFDecoder)
    for seq in response.sequences:
        trained = teacher_forced(tc, prompt, seq.tokens)
        # bfloat16 on both sides: agreement to its precision, not float32's
        np.testing.assert_allclose(trained, seq.logprobs, atol=5e-2)


def test_a_failed_sampling_batch_fails_every_request_in_it(base, tok, monkeypatch):
    """Three requests decoded in one batch that raises: each caller's future gets
    the error, none waits forever; the next batch samples again."""
    from grpo_helpers.local import host as host_module

    def broken(*args, **kwargs):
        raise RuntimeError("the batch broke")

    scheduler = base._host.scheduler
    monkeypatch.setattr(host_module, "generate", broken)
    with scheduler.hold():  # all three in one batch
        futures = [
            base.sample(encode(tok, text), 2, params(seed=1))
            for text in ("one", "two", "three")
        ]
    for future in futures:
        with pytest.raises(RuntimeError, match="the batch broke"):
            future.result(timeout=20)  # a TimeoutError: it never heard
    monkeypatch.undo()
    assert base.sample(encode(tok, "four"), 1, params()).result(timeout=120).sequences
