"""The sync and async GRPO loops end to end on the tiny-random model."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
from tiny import tiny

from grpo_helpers import run_files, training
from grpo_helpers.config import GRPOConfig
from grpo_helpers.engines import connect
from grpo_helpers.local import checkpoints

#: The tests' tiny run with 2 completions a group, the binary reward and a
#: checkpoint every step.
TINY = tiny(group_size=2, learning_rate=1e-3, reward="binary", save_every=1)

METRIC_COLUMNS = {
    "step",
    "reward_mean",
    "accuracy",
    "group_reward_std",
    "frac_degenerate",
    "valid_groups",
    "skipped_groups",
    "datums",
    "updated",
    "completion_tokens_mean",
    "completion_tokens_max",
    "hit_max_count",
    "hit_max_frac",
    "loss_sum",
    "loss_mean",
    "token_count",
    "grad_norm",
    "seconds_sampling",
    "seconds_training",
    "seconds_total",
    "prefill_tokens",
    "sampled_tokens",
    "trained_tokens",
    "cum_prefill_tokens",
    "cum_sampled_tokens",
    "cum_trained_tokens",
}


def shaped_always_varies(config: GRPOConfig) -> GRPOConfig:
    # tiny-random writes numbers (its bias channel) and the shaped reward pays for
    # numbers near the gold answer, so its groups differ: the loop really trains.
    config.reward = "shaped"
    return config


def lora_b_norm(weights_path: str) -> float:
    """Size of the LoRA B matrices of saved weights: 0 for an untrained adapter."""
    _, tensors, _ = checkpoints.load_checkpoint(weights_path)
    return math.sqrt(
        sum(float(t.square().sum()) for k, t in tensors.items() if "lora_B" in k)
    )


def assert_trained(result, config, record) -> None:
    """The loop made real updates: groups with different rewards, datums sent,
    and weights that moved away from the untrained adapter (B = 0)."""
    df = result.metrics
    assert (df["valid_groups"] > 0).any(), "no step had a non-degenerate group"
    updated = df[df["updated"]]
    assert len(updated) > 0
    assert (updated["datums"] == updated["valid_groups"] * config.group_size).all()
    assert (updated["grad_norm"] > 0).all()
    moved = lora_b_norm(result.weights_path)
    assert moved > 0
    record(
        f"{len(updated)}/{len(df)} steps updated, "
        f"{int(df['valid_groups'].sum())} non-degenerate groups, "
        f"|LoRA B| 0 -> {moved:.3g}"
    )


class CountingService:
    """Wraps a ServiceClient and counts the training calls its clients receive."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[str] = []

    def create_lora_training_client(self, **kwargs):
        tc = self.inner.create_lora_training_client(**kwargs)
        outer = self

        class Counting:
            def __getattr__(self, name):
                attr = getattr(tc, name)
                if name.startswith(("forward_backward", "optim_step")):
                    outer.calls.append(name)
                return attr

        return Counting()


@pytest.fixture
def service(tmp_path):
    return connect("local", run_dir=tmp_path / "engine")


def test_sync_loop_metrics_and_run_directory(tmp_path, service, training_evidence):
    config = shaped_always_varies(GRPOConfig(**TINY, run_dir=str(tmp_path / "run")))
    result = training.train_sync(config, service, progress=False)
    assert_trained(result, config, training_evidence("train_sync"))
    df = result.metrics
    assert list(df["step"]) == [0, 1]
    assert set(df.columns) >= METRIC_COLUMNS
    assert (df["completion_tokens_max"] <= config.max_tokens).all()
    assert ((df["reward_mean"] >= 0) & (df["reward_mean"] <= 1)).all()
    assert (df["valid_groups"] + df["skipped_groups"] == config.batch_size).all()
    assert (df["sampled_tokens"] > 0).all()
    assert list(df["cum_sampled_tokens"]) == list(df["sampled_tokens"].cumsum())
    updated = df[df["updated"]]
    assert updated["token_count"].notna().all()
    run = Path(result.run_dir)
    assert json.loads((run / "config.json").read_text())["steps"] == 2
    assert len(run_files.load_metrics(run)) == 2
    samples = run_files.load_samples(run)
    assert len(samples) == 2 * config.batch_size * config.group_size
    assert {"step", "question_index", "text", "reward", "advantage", "num_tokens"} <= (
        set(samples.columns)
    )
    weights = json.loads((run / "weights.json").read_text())
    assert weights["path"] == result.weights_path
    assert json.loads((run / "checkpoint.json").read_text())["step"] == 1


def test_async_loop_matches_the_sync_schema(tmp_path, service, training_evidence):
    config = shaped_always_varies(GRPOConfig(**TINY, run_dir=str(tmp_path / "run")))
    result = asyncio.run(training.train_async(config, service, progress=False))
    assert list(result.metrics["step"]) == [0, 1]
    assert set(result.metrics.columns) >= METRIC_COLUMNS
    assert_trained(result, config, training_evidence("train_async"))


def test_all_degenerate_batch_makes_no_training_call(tmp_path, service):
    # A random model never writes \boxed{the right answer}: with the binary reward
    # every group is all zeros, so no step has datums.
    counting = CountingService(service)
    config = GRPOConfig(**TINY, run_dir=str(tmp_path / "run"))  # binary
    result = training.train_sync(config, counting, progress=False)
    assert (result.metrics["frac_degenerate"] == 1.0).all()
    assert (result.metrics["datums"] == 0).all()
    assert not result.metrics["updated"].any()
    assert counting.calls == []


def test_step_callback_sees_every_step(tmp_path, service):
    seen: list[int] = []
    config = GRPOConfig(**TINY, run_dir=str(tmp_path / "run"))
    training.train_sync(
        config, service, progress=False, on_step=lambda df: seen.append(len(df))
    )
    assert seen == [1, 2]


def test_unknown_base_model_is_a_clear_error(tmp_path, service):
    config = GRPOConfig(
        **{**TINY, "base_model": "no-such/model-anywhere"},
        run_dir=str(tmp_path / "run"),
    )
    with pytest.raises(Exception, match="no-such/model-anywhere") as info:
        training.train_sync(config, service, progress=False)
    assert "Traceback" not in str(info.value)
    assert not (tmp_path / "run" / "config.json").exists()


def test_existing_run_needs_resume_or_overwrite(tmp_path, service):
    config = GRPOConfig(**{**TINY, "steps": 1}, run_dir=str(tmp_path / "run"))
    training.train_sync(config, service, progress=False)
    with pytest.raises(FileExistsError, match="resume=True"):
        training.train_sync(config, service, progress=False)
    again = training.train_sync(config, service, progress=False, overwrite=True)
    assert list(again.metrics["step"]) == [0]


def test_resume_with_a_different_config_is_refused(tmp_path, service):
    config = GRPOConfig(**{**TINY, "steps": 1}, run_dir=str(tmp_path / "run"))
    training.train_sync(config, service, progress=False)
    other = GRPOConfig(
        **{**TINY, "steps": 1, "group_size": 3}, run_dir=str(tmp_path / "run")
    )
    with pytest.raises(ValueError, match="group_size: run has 2, you asked for 3"):
        training.train_sync(other, service, progress=False, resume=True)


def test_a_new_run_records_its_model_and_provenance(tmp_path, service):
    """runs/<name>/provenance.json: the model in words, which file it loaded (none
    for tiny-random, built in code), the commit and the numeric path."""
    config = GRPOConfig(**{**TINY, "steps": 1}, run_dir=str(tmp_path / "run"))
    training.train_sync(config, service, progress=False)
    saved = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert saved["model"].startswith("tiny-random")
    assert saved["model_file"] == {"model": "tiny-random", "kind": "tiny-random"}
    assert "commit" in saved and "torch_threads" in saved["numeric"]


@pytest.mark.slow
def test_a_new_smollm2_run_records_the_model_files_hash(tmp_path, service):
    """One step of SmolLM2 (4 tokens): its record names the GGUF and its SHA-256,
    the file that was loaded, and says it is the dequantised 4-bit model."""
    from grpo_helpers import provenance
    from grpo_helpers.local import models

    config = GRPOConfig(
        **{**TINY, "steps": 1, "batch_size": 1, "max_tokens": 4},
        run_dir=str(tmp_path / "run"),
    )
    config.base_model = models.SMOLLM2
    training.train_sync(config, service, progress=False)
    saved = json.loads((tmp_path / "run" / "provenance.json").read_text())
    gguf = models.resolve_model(models.SMOLLM2).location
    assert saved["model_file"]["kind"] == "gguf"
    assert saved["model_file"]["file"] == Path(gguf).name
    assert saved["model_file"]["sha256"] == provenance.file_sha256(gguf)
    assert len(saved["model_file"]["sha256"]) == 64
    assert "4-bit (Q4_1) GGUF" in saved["model"] and "dequantised" in saved["model"]


def test_resume_on_another_model_file_is_refused(tmp_path, service):
    config = GRPOConfig(**{**TINY, "steps": 2}, run_dir=str(tmp_path / "run"))
    training.train_sync(config, service, progress=False)
    path = tmp_path / "run" / "provenance.json"
    saved = json.loads(path.read_text())
    saved["model_file"] = {"file": "other.gguf", "sha256": "0" * 64}
    path.write_text(json.dumps(saved))
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match="other weights"):
        training.train_sync(config, service, progress=False, resume=True)
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == metrics


def test_the_runs_seed_seeds_the_sampling(tmp_path):
    """Issue 48's mutation: every prompt's sampling seed derives from the run's
    seed (``derive_seed(config.seed, step, prompt)``). On GSM8K, where the seed does
    not choose the questions, two seeds must sample other completions of the same
    questions, and one seed the same ones again (at step 0 the adapter is still
    zero, so only the sampling seeds differ)."""
    texts = {}
    for name, seed in (("a", 0), ("b", 5), ("again", 0)):
        config = GRPOConfig(
            **tiny(
                dataset="gsm8k",
                steps=1,
                batch_size=1,
                seed=seed,
                run_dir=str(tmp_path / name),
                weights_name=name,
            )
        )
        training.train_sync(config, progress=False)
        samples = run_files.load_samples(tmp_path / name)
        texts[name] = (samples["question_index"].tolist(), samples["text"].tolist())
    assert texts["a"][0] == texts["b"][0]  # the same questions
    assert texts["a"][1] != texts["b"][1]
    assert texts["a"] == texts["again"]
