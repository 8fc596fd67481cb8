"""grpo_helpers.trl.mapping: every setting of ``GRPOConfig`` mapped onto TRL 1.16,
or refused by name.

A new field without a rule fails; notebook 05's run maps setting by setting; the
settings are TRL fields and build TRL's config; the GPU config generates with
``transformers`` and a second one with vLLM, at the vLLM range TRL's own extra
names; the GPU's precision is chosen where the script runs; notebook 09 says how
TRL differs.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from needs_trl import import_trl
from trl_runs import NOTEBOOK_05

from grpo_helpers import presets
from grpo_helpers.config import GRPOConfig
from grpo_helpers.trl import export, mapping

trl = import_trl()

ROOT = Path(__file__).resolve().parents[2]

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
    for target in mapping.TARGETS:
        # the GPU configs' bf16/fp16 "auto", chosen as train_grpo.py does
        settings = mapping.resolve_precision(mapping.trl_settings(config, target))
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
        ({"max_steps_off_policy": 1}, ["max_steps_off_policy"]),
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


def test_only_the_vllm_config_generates_with_vllm():
    """Issue 54: the GPU config is safe by default (``transformers`` generates,
    nothing to install); ``grpo_config_vllm.yaml`` turns TRL's colocated vLLM on."""
    trl = import_trl()
    fields = trl.GRPOConfig.__dataclass_fields__
    assert fields["use_vllm"].default is False  # TRL's own default: off
    assert "colocate" in str(fields["vllm_mode"].metadata.get("help", "")) or (
        fields["vllm_mode"].default == "colocate"
    )
    config = GRPOConfig(**NOTEBOOK_05)
    gpu, vllm, cpu = (mapping.trl_settings(config, t) for t in ("gpu", "vllm", "cpu"))
    assert gpu["use_vllm"] is False and "vllm_mode" not in gpu
    assert (vllm["use_vllm"], vllm["vllm_mode"]) == (True, "colocate")
    assert cpu["use_vllm"] is False and "vllm_mode" not in cpu
    # otherwise the same run
    assert {k: v for k, v in vllm.items() if k not in ("use_vllm", "vllm_mode")} == {
        k: v for k, v in gpu.items() if k != "use_vllm"
    }
    with pytest.raises(ValueError, match="target must be one of"):
        mapping.trl_settings(config, "tpu")


def test_the_vllm_install_is_the_range_trls_own_extra_names():
    """The vLLM the export installs is the range TRL's ``vllm`` extra requires,
    read from the installed TRL's metadata; with TRL pinned and the project's
    constraints (which hold torch), never a bare ``pip install vllm``."""
    import importlib.metadata

    from packaging.requirements import Requirement

    assert importlib.metadata.version("trl") == mapping.TRL_VERSION
    wanted = [
        Requirement(r)
        for r in importlib.metadata.requires("trl") or []
        if Requirement(r).name == "vllm"
        and Requirement(r).marker is not None
        and Requirement(r).marker.evaluate({"extra": "vllm"})
    ]
    assert len(wanted) == 1, wanted
    ours = Requirement(mapping.VLLM_REQUIREMENT)
    assert ours.name == "vllm" and ours.specifier == wanted[0].specifier
    install = mapping.VLLM_INSTALL
    assert f"'trl[vllm]=={mapping.TRL_VERSION}'" in install
    assert f"'{mapping.VLLM_REQUIREMENT}'" in install
    assert install.endswith(" -c constraints.txt")


class _Cuda:
    """torch.cuda as one machine reports it: a GPU or none, and bf16 natively
    (Ampere or newer) or only by emulation (a T4: torch's default answer is
    then True, and TRL's bf16 fails)."""

    def __init__(self, gpu: bool, native_bf16: bool) -> None:
        self.gpu, self.native = gpu, native_bf16

    def is_available(self) -> bool:
        return self.gpu

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return self.gpu and (self.native or including_emulation)


@pytest.mark.parametrize(
    ("machine", "gpu", "native", "want"),
    [
        ("an A100", True, True, (True, False)),
        ("a T4", True, False, (False, True)),
        ("no GPU", False, False, (False, False)),
    ],
)
def test_the_gpu_configs_precision_is_chosen_where_the_script_runs(
    monkeypatch, machine, gpu, native, want
):
    """Issue 54: not ``bf16: true`` (it fails on pre-Ampere GPUs such as Colab's
    T4): the GPU configs write ``auto``, and ``resolve_precision`` (called by
    train_grpo.py) picks bf16 where the GPU has it natively, fp16 on an older
    GPU, float32 without one. A value written in the file is kept."""
    import torch

    monkeypatch.setattr(torch, "cuda", _Cuda(gpu, native))
    config = GRPOConfig(**NOTEBOOK_05)
    for target in ("gpu", "vllm"):
        settings = mapping.trl_settings(config, target)
        assert settings["bf16"] == settings["fp16"] == mapping.PRECISION_AUTO
        chosen = mapping.resolve_precision(settings)
        assert (chosen["bf16"], chosen["fp16"]) == want, machine
        assert chosen == settings | dict(zip(("bf16", "fp16"), want, strict=True))
    assert mapping.gpu_precision(gpu, native) == dict(
        zip(("bf16", "fp16"), want, strict=True)
    )
    cpu = mapping.trl_settings(config, "cpu")
    assert mapping.resolve_precision(cpu) == cpu  # nothing to choose
    auto = mapping.PRECISION_AUTO
    assert mapping.resolve_precision({"bf16": False, "fp16": auto})["fp16"] is gpu
    assert mapping.resolve_precision({"bf16": auto, "fp16": True})["bf16"] is False
    assert mapping.resolve_precision({"bf16": True, "fp16": auto})["fp16"] is False


def test_the_corrections_and_their_bounds_are_trls_read_from_trl():
    """The series' correction knobs keep TRL's names and default bound: C = 3,
    no lower bound; TRL's default mode (sequence_mask) is named in notebook 11."""
    from grpo_helpers.config import IS_CORRECTIONS, RATIO_LEVELS

    defaults = {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}
    ours = GRPOConfig(backend="local")
    assert ours.is_clip_max == defaults["vllm_importance_sampling_clip_max"] == 3.0
    assert ours.is_clip_min is defaults["vllm_importance_sampling_clip_min"] is None
    assert defaults["vllm_importance_sampling_mode"] == "sequence_mask"
    assert defaults["vllm_importance_sampling_mode"] in IS_CORRECTIONS
    assert defaults["importance_sampling_level"] == RATIO_LEVELS[0] == "token"
    settings = mapping.trl_settings(
        dataclasses.replace(
            GRPOConfig(**NOTEBOOK_05),
            is_correction="token_mask",
            ratio_level="token",
        ),
        "cpu",
    )
    trl.GRPOConfig(**settings)  # TRL takes every name
    assert settings["vllm_importance_sampling_mode"] == "token_mask"


def test_the_tempered_gradient_per_logit_is_the_sentences():
    """``run_notes``' temperature sentence: d log softmax(z / T)_y / dz is
    (e_y - pi_T) / T, the series' d log softmax(z)_y / dz is e_y - pi, and the
    two are not multiples of each other (autograd, on random logits)."""
    import torch

    t, y = 0.6, 2
    z = torch.randn(7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    z.requires_grad_(True)
    (tempered,) = torch.autograd.grad(torch.log_softmax(z / t, -1)[y], z)
    (plain,) = torch.autograd.grad(torch.log_softmax(z, -1)[y], z)
    e_y = torch.nn.functional.one_hot(torch.tensor(y), 7).double()
    detached = z.detach()
    assert torch.allclose(tempered, (e_y - torch.softmax(detached / t, -1)) / t)
    assert torch.allclose(plain, e_y - torch.softmax(detached, -1))
    ratio = tempered / plain
    assert not torch.allclose(ratio, ratio[0].expand_as(ratio))
    note = dict(mapping.run_notes(GRPOConfig(temperature=t)))["temperature"]
    assert "(e_y - pi_T) / T" in note and "not a multiple" in note
