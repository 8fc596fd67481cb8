"""Recorded runs: the shipped ones load, follow the bench's schema, and reproduce
their own numbers; the bench writes that schema; the notebooks plot them, labelled.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import pytest
from benches import bench_json, run_bench

from grpo_helpers import data, presets, provenance, rewards
from grpo_helpers.results import evaluation, recorded_runs
from grpo_helpers.settings import SMOLLM2

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_run_loads_and_reproduces_its_numbers():
    run = recorded_runs.load_run()  # raises on any schema problem
    assert recorded_runs.check_run(run) == []
    summary = run.summary()
    for grade in ("exact", "lenient"):
        recomputed = float(run.trained[grade].mean())
        assert recomputed == pytest.approx(run.meta["summary"][grade]["after"])
        assert float(run.base[grade].mean()) == pytest.approx(summary[grade]["before"])
    assert run.meta["command"].startswith("python bench/cpu_grpo_demo.py")
    assert len(run.metrics) == run.meta["settings"]["steps"]
    assert sum(p.stat().st_size for p in run.path.iterdir()) < 1_000_000


def test_the_shipped_run_is_notebook_05s_defaults():
    """The recorded run plotted beside a learner's run used the same settings."""
    nb = nbformat.read(ROOT / "notebooks" / "05_sync_training_loop.ipynb", 4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    values = {}
    for node in ast.parse(cell.source).body:
        name = node.targets[0].id
        value = node.value
        if isinstance(value, ast.Call):  # settings.full_or_fast(full, fast): full
            value = value.args[0]
        if isinstance(value, ast.Constant):  # base_model names settings.SMOLLM2
            values[name] = value.value
    preset = presets.NOTEBOOK  # what bench/cpu_grpo_demo.py --preset notebook runs
    for key in (
        "steps",
        "batch_size",
        "group_size",
        "max_tokens",
        "lora_rank",
        "learning_rate",
        "reward",
        "temperature",
        "difficulty",
    ):
        assert values[key] == preset[key], key
    # the recorded run was made with every setting of the preset, max_tokens and
    # temperature included
    settings = recorded_runs.load_run().meta["settings"]
    assert set(preset) <= set(settings), set(preset) - set(settings)
    for key, value in preset.items():
        if key == "reward":  # recorded under an earlier name of the same function
            assert rewards.canonical_reward(settings[key]) == value
            continue
        assert settings[key] == value, key


def test_the_shaped_reward_run_differs_from_the_defaults_in_its_reward_only():
    """Notebook 08's labelled experiment: the same settings, the article's reward."""
    defaults = recorded_runs.load_run()
    shaped = recorded_runs.load_run("shaped-reward")
    assert recorded_runs.check_run(shaped) == []
    assert shaped.meta["settings"]["reward"] == "shaped"
    reward = defaults.meta["settings"]["reward"]
    assert rewards.canonical_reward(reward) == presets.NOTEBOOK["reward"]
    ours, theirs = defaults.meta["settings"], shaped.meta["settings"]
    # what was scored besides the held-out questions, and where its files went,
    # are not how it trained
    elsewhere = {"gsm8k_n", "gsm8k_max_tokens", "prompt_baselines", "run_dir"}
    differ = {k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)}
    assert differ - elsewhere == {"reward"}
    # both were scored on the same held-out questions, after the same early step
    assert list(shaped.base["question"]) == list(defaults.base["question"])
    assert shaped.meta["early_step"] == defaults.meta["early_step"]
    assert shaped.early is not None and defaults.early is not None
    # its command gives today's preset with the shaped reward: the same settings
    assert "--preset notebook --reward shaped" in shaped.meta["command"]
    assert "shaped-reward" in shaped.meta["command"]
    command = shaped.meta["command"].split()
    assert command[:2] == ["python", "bench/cpu_grpo_demo.py"]
    settings = {**presets.NOTEBOOK, **presets.NOTEBOOK_EVAL, "reward": "shaped"}
    for key, value in settings.items():
        if key in theirs:
            assert theirs[key] == value, key


def test_a_damaged_run_is_refused(tmp_path):
    run = recorded_runs.load_run()
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in run.path.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    meta = json.loads((copy / "meta.json").read_text())
    meta["summary"]["exact"]["after"] += 0.01
    (copy / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="the records give"):
        recorded_runs.load_run(copy)
    (copy / "metrics.jsonl").unlink()
    with pytest.raises(ValueError, match="missing metrics.jsonl"):
        recorded_runs.load_run(copy)
    with pytest.raises(FileNotFoundError, match="shipped runs"):
        recorded_runs.load_run("no-such-run")


@pytest.mark.parametrize("name", ["notebook-defaults", "shaped-reward"])
def test_the_shipped_runs_say_they_used_the_dequantised_gguf(name):
    """The recorded runs keep the GGUF, and say so: in their caption (under every
    figure that shows them) and in words."""
    run = recorded_runs.load_run(name)
    assert run.meta["settings"]["base_model"] == SMOLLM2
    assert run.caption.endswith(", SmolLM2-135M-Instruct (4-bit GGUF, dequantised)")
    assert "4-bit (Q4_1) GGUF" in run.model and "dequantised" in run.model
    assert "not compared with the original weights" in run.model


def test_write_run_records_the_model_in_words_and_its_files_hash(tmp_path):
    run = recorded_runs.load_run()
    settings = {**run.meta["settings"], "base_model": SMOLLM2}
    recorded_runs.write_run(
        tmp_path / "copy",
        command="python bench/cpu_grpo_demo.py --test",
        settings=settings,
        metrics=run.metrics,
        samples=run.samples,
        base=run.base,
        trained=run.trained,
    )
    meta = json.loads((tmp_path / "copy" / "meta.json").read_text())
    assert meta["model"] == provenance.model_words(SMOLLM2)
    assert len(meta["provenance"]["model_file"]["sha256"]) == 64
    assert recorded_runs.load_run(tmp_path / "copy").model == meta["model"]


@pytest.mark.parametrize(
    "stem",
    [
        "05_sync_training_loop",
        "06_async_training_loop",
        "07_evaluating_a_trained_model",
        "08_what_grpo_learned",
    ],
)
def test_the_training_notebooks_plot_the_recorded_run(stem):
    nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", 4)
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "recorded_runs.load_run()" in source
    assert "recorded.label" in source


def test_the_bench_writes_a_recorded_run(tmp_path):
    """The smoke mode of the bench writes the schema the notebooks read."""
    target = tmp_path / "recorded"
    run_bench(
        "cpu_grpo_demo",
        *["--quick", "--out", str(tmp_path / "results")],
        *["--runs", str(tmp_path / "runs"), "--record", str(target)],
    )
    run = recorded_runs.load_run(target)
    assert recorded_runs.check_run(run) == []
    assert run.meta["command"].startswith("python bench/cpu_grpo_demo.py --quick")
    assert len(run.base) == presets.FAST_EVAL["eval_questions"]
    # the run was scored after its first step too, then resumed to the end
    assert run.meta["early_step"] == 1 and len(run.early) == len(run.base)
    steps = presets.FAST_NOTEBOOK["steps"]
    assert list(run.metrics["step"]) == list(range(steps))
    # the prompt-only baselines: the same questions as the base row, graded alike
    for prompt in ("zero-shot", "arithmetic example"):
        records = run.evals[prompt]
        assert list(records["question"]) == list(run.base["question"])
        assert list(records["gold"]) == list(run.base["gold"])
        regraded = [
            evaluation._grade_text(text, gold)["exact"]
            for text, gold in zip(records["completion"], records["gold"], strict=True)
        ]
        assert list(records["exact"]) == regraded
    # and both models on GSM8K's own test questions
    gsm8k = data.load_gsm8k("test", limit=presets.FAST_EVAL["gsm8k_questions"])
    for model in ("base", "trained"):
        assert list(run.evals[f"gsm8k {model}"]["question"]) == gsm8k["question"]
    # every seed's run is kept beside its JSON, as the --record copy
    kept = recorded_runs.load_run(tmp_path / "results" / "quick-seed0")
    assert list(kept.trained["completion"]) == list(run.trained["completion"])


def test_paired_runs_counts_flips_and_refuses_other_questions(tmp_path):
    worked = ROOT / "bench/results/worked-final"
    seed12 = worked / "notebook-seed12"
    same, out = bench_json(
        "paired_runs", tmp_path, "--a", str(seed12), "--b", str(seed12)
    )
    assert same["exact"] == {"a_only": 0, "b_only": 0, "p": 1.0}
    assert out.strip().splitlines()[-1].startswith("RESULT exact")
    with pytest.raises(ValueError, match="same questions"):  # seed 16's differ
        recorded_runs.paired_flips([seed12], [worked / "notebook-seed16"])
    with pytest.raises(ValueError, match="as many --a runs"):
        recorded_runs.paired_flips([seed12], [])
    # the trained model against the base model of the same run: the flips are the
    # run's own McNemar counts
    (tmp_path / "eval_trained.jsonl").write_text(
        (seed12 / "eval_base.jsonl").read_text()
    )
    flips = recorded_runs.paired_flips([seed12], [tmp_path])
    summary = json.loads((worked / "cpu_grpo_demo-notebook-seed12.json").read_text())
    for grade in ("exact", "lenient"):
        assert flips[grade]["a_only"] == summary["summary"][grade]["wrong_to_right"]
        assert flips[grade]["b_only"] == summary["summary"][grade]["right_to_wrong"]
        assert flips[grade]["p"] == pytest.approx(summary["summary"][grade]["p_value"])
