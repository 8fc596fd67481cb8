"""grpo_helpers.local.checkpoints: saved weights reload in a fresh process, a
resume with the optimizer state equals an uninterrupted run, and checkpoint names
follow PyTRIO's rules, scoped per training client."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import pytrio as trio
import torch
from local_engine import (
    MODEL,
    adapter_tensors,
    encode,
    engine,
    new_client,
    params,
    perturbed_client,
    sample,
)
from pytrio.errors.base import ValidationError

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------- checkpoints


def test_saved_weights_reload_in_a_fresh_process(svc, tok, tmp_path):
    tc = new_client(svc)
    tc.forward_backward(
        [
            trio.Datum(
                model_input=encode(tok, "x y z"),
                loss_fn_inputs={"target_tokens": tok.encode("x y z")},
            )
        ]
    )
    tc.optim_step(trio.AdamParams(learning_rate=1e-2))
    saved = tc.save_weights_for_sampler("reload-me").result()
    assert saved.path.startswith("local://") and saved.size > 0 and saved.model == MODEL
    here = svc.create_sampling_client(MODEL, model_path=saved.path)
    prompt = tok.encode("Reload:")
    mine = here.sample(
        trio.ModelInput.from_ints(prompt), 2, params(temperature=0.0)
    ).result()
    script = textwrap.dedent(
        f"""
        import json, pytrio as trio
        from grpo_helpers.engines import connect
        sc = connect("local", run_dir={str(tmp_path)!r}).create_sampling_client(
            {MODEL!r}, model_path={saved.path!r})
        r = sc.sample(trio.ModelInput.from_ints({prompt!r}), 2,
                      trio.SamplingParams(max_tokens=8, temperature=0.0)).result()
        print(json.dumps([[s.tokens, s.logprobs] for s in r.sequences]))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    for (tokens, lps), seq in zip(theirs, mine.sequences, strict=True):
        assert tokens == seq.tokens
        assert lps == pytest.approx(seq.logprobs, abs=1e-5)
    # The checkpoint is a peft adapter directory too.
    path = Path(saved.path.removeprefix("local://"))
    assert {"adapter_model.safetensors", "adapter_config.json"} <= {
        f.name for f in path.iterdir()
    }
    # And differs from the base model.
    base_seq = (
        svc.create_sampling_client(MODEL)
        .sample(trio.ModelInput.from_ints(prompt), 1, params(temperature=0.0))
        .result()
    )
    assert base_seq.sequences[0].logprobs != pytest.approx(
        mine.sequences[0].logprobs, abs=1e-4
    )


def test_resume_with_optimizer_equals_uninterrupted(svc, tok):
    data = [
        trio.Datum(
            model_input=trio.ModelInput.from_ints(tok.encode(t)[:-1]),
            loss_fn_inputs={"target_tokens": tok.encode(t)[1:]},
        )
        for t in ["resume test one", "and a second sequence"]
    ]
    adam = trio.AdamParams(learning_rate=1e-2)

    def step(tc, i):
        tc.forward_backward([data[i % 2]])
        return tc.optim_step(adam).result()

    straight = new_client(svc, seed=9)
    for i in range(4):
        step(straight, i)
    first = new_client(svc, seed=9)
    for i in range(2):
        step(first, i)
    saved = first.save_state("resume-point").result()
    assert saved.type == "save-checkpoint"
    resumed = new_client(svc, seed=123)  # different init: load_state must overwrite it
    resumed.load_state_with_optimizer(saved.path).result()
    assert resumed.step == 2
    for i in range(2, 4):
        step(resumed, i)
    a, b = adapter_tensors(straight), adapter_tensors(resumed)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    # Weights only (fresh Adam) gives a different trajectory.
    weights_only = new_client(svc, seed=9)
    weights_only.load_state(saved.path).result()
    for i in range(2, 4):
        step(weights_only, i)
    c = adapter_tensors(weights_only)
    assert not all(torch.allclose(a[k], c[k], atol=1e-6) for k in a)
    from_state = svc.create_training_client_from_state_with_optimizer(saved.path)
    assert from_state.step == 2 and from_state.lora.rank == 8


def test_save_state_refuses_to_overwrite_unless_asked(svc):
    tc = new_client(svc)
    tc.save_state("twice").result()
    with pytest.raises(trio.PyTrioError, match="already exists"):
        tc.save_state("twice").result()
    assert tc.save_state("twice", overwrite=True).result().path.endswith("/state/twice")


def test_load_state_checks_config_and_timing(svc, tok):
    tc = new_client(svc, rank=8)
    path = tc.save_state("rank-8").result().path
    other = new_client(svc, rank=16)
    with pytest.raises(trio.PyTrioError, match="lora_rank"):
        other.load_state(path)
    with pytest.raises(trio.PyTrioError, match="cannot be called after training"):
        tc.load_state(path)
    with pytest.raises(trio.PyTrioError, match="not a local-engine checkpoint"):
        svc.create_sampling_client(MODEL, model_path="trio://run/weights/x")
    with pytest.raises(trio.PyTrioError, match="No local-engine checkpoint"):
        svc.create_sampling_client(MODEL, model_path="local:///nonexistent/ckpt")


@pytest.mark.parametrize("name", ["-starts-with-dash", "ends.", "bad/slash", ""])
def test_checkpoint_names(tc, name):
    with pytest.raises(ValidationError, match="checkpoint name must match"):
        tc.save_weights_for_sampler(name)


def test_checkpoint_name_spaces_become_dashes(tc):
    assert (
        tc.save_weights_for_sampler("with space").result().path.endswith("with-space")
    )


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
