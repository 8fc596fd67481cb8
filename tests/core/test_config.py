"""Each knob is written once: the field of ``GRPOConfig`` and its metadata.

The command line's flags, the validation and the TRL export's rules are built from
the fields (``config.add_arguments``, ``GRPOConfig.validate``,
with the TRL rules in ``trl.mapping.FIELD_RULES`` by field name). A made-up knob,
added as one field of a subclass, gets a flag with its help and its range refused
by name; the TRL mapping names it until its rule is added. Every float setting
refuses ``inf`` and ``nan`` by name; a bad setting fails before any model work.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, fields

import pytest
from tiny import tiny

from grpo_helpers.cli import build_parser
from grpo_helpers.config import (
    GRPOConfig,
    add_arguments,
    from_arguments,
    knob,
    knob_of,
    knobs,
)
from grpo_helpers.trl.mapping import unmapped

FLOAT_SETTINGS = [f.name for f in dataclasses.fields(GRPOConfig) if f.type == "float"]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("setting", FLOAT_SETTINGS)
def test_every_float_setting_refuses_inf_and_nan_by_name(setting, value):
    """Issue 38: ``inf`` passed ``>= 0`` checks (kl_coef, learning_rate,
    temperature, clip_high)."""
    with pytest.raises(ValueError, match=f"{setting} must be a finite number"):
        GRPOConfig(**{setting: value})


def test_the_float_settings_are_the_objectives_and_the_samplers():
    assert sorted(FLOAT_SETTINGS) == sorted(
        [
            "temperature",
            "top_p",
            "learning_rate",
            "beta1",
            "beta2",
            "clip_low",
            "clip_high",
            "kl_coef",
            "grad_clip_norm",
            "is_clip_max",
        ]
    )


#: The tests' tiny run with 2 completions a group, the binary reward and a
#: checkpoint every step.
TINY = tiny(group_size=2, learning_rate=1e-3, reward="binary", save_every=1)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("group_size", 1, "group_size must be >= 2"),
        ("batch_size", 0, "batch_size must be >= 1"),
        ("max_tokens", 0, "max_tokens must be >= 1"),
        ("reward", "accuracy", "unknown reward 'accuracy'"),
        ("lora_rank", 128, "lora_rank must be in [4, 64]"),
    ],
)
def test_bad_config_fails_before_any_model_work(field, value, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        GRPOConfig(**{**TINY, field: value})


@dataclass
class WithWarmup(GRPOConfig):
    """The series' run with two made-up knobs, each written once."""

    warmup_steps: int = knob(
        0,
        "steps of linear learning-rate warm-up",
        at_least=0,
    )
    entropy_coef: float = knob(
        0.0,
        "weight of an entropy bonus",
        at_least=0,
        below=1,
        group="objective",
    )


def parser_for(cls: type) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpo")
    add_arguments(parser, cls)
    return parser


def test_a_new_knob_is_one_field_flag_help_and_default_included():
    parser = parser_for(WithWarmup)
    helptext = parser.format_help()
    assert "--warmup-steps" in helptext and "linear learning-rate warm-up" in helptext
    assert "--entropy-coef" in helptext
    config = from_arguments(parser.parse_args([]), WithWarmup)
    assert (config.warmup_steps, config.entropy_coef) == (0, 0.0)
    args = parser.parse_args(["--warmup-steps", "5", "--entropy-coef", "0.01"])
    config = from_arguments(args, WithWarmup)
    assert (config.warmup_steps, config.entropy_coef) == (5, 0.01)
    assert WithWarmup.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"warmup_steps": -1}, "warmup_steps must be >= 0, got -1"),
        ({"warmup_steps": 1.5}, "warmup_steps must be an integer, got 1.5"),
        ({"entropy_coef": 1.0}, r"entropy_coef must be in \[0, 1\), got 1.0"),
        ({"entropy_coef": math.inf}, "entropy_coef must be a finite number, got inf"),
        ({"entropy_coef": math.nan}, "entropy_coef must be a finite number, got nan"),
    ],
)
def test_a_new_knob_is_validated_by_its_metadata(values, message):
    with pytest.raises(ValueError, match=message):
        WithWarmup(backend="local", **values)


def test_a_new_knob_without_its_trl_rule_is_named():
    """The TRL rules live in the TRL wing, by field name: a knob added here and not
    there is named (``trl/test_mapping.py`` holds that the series' has none)."""
    assert unmapped(WithWarmup) == ["warmup_steps", "entropy_coef"]
    assert unmapped(GRPOConfig) == []


def test_the_command_line_has_one_flag_per_field_and_nothing_else_per_knob():
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    flags = {a.dest for a in train._actions}
    names = [f.name for f in fields(GRPOConfig)]
    assert set(names) <= flags
    # the rest is how to run, not what the run is
    assert flags - set(names) == {"help", "mode", "resume", "overwrite"}
    for f in knobs():
        action = next(a for a in train._actions if a.dest == f.name)
        assert action.help == knob_of(f).help and knob_of(f).help, f.name
        if knob_of(f).choices:
            spec = knob_of(f)
            assert tuple(action.choices) == spec.choices + spec.accepted, f.name
            assert action.metavar == "{" + ",".join(map(str, spec.choices)) + "}"


def test_every_knob_has_help_a_trl_rule_and_a_default_that_validates():
    """The TRL rule is the TRL wing's, by the field's name (trl/mapping.py)."""
    from grpo_helpers.trl.mapping import FIELD_RULES

    assert set(FIELD_RULES) == {f.name for f in fields(GRPOConfig)}
    for f in fields(GRPOConfig):
        assert knob_of(f).help and FIELD_RULES[f.name].how, f.name
    GRPOConfig()  # the defaults pass their own rules


@pytest.mark.parametrize("setting", [f.name for f in knobs() if f.type == "float"])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_every_float_knob_refuses_inf_and_nan_by_name(setting, value):
    with pytest.raises(ValueError, match=f"{setting} must be a finite number"):
        GRPOConfig(backend="local", **{setting: value})


def test_a_retired_knob_in_a_saved_config_is_dropped_and_a_typo_refused():
    """Issue 48: ``eval_limit`` was read by no loop and is gone; configs saved
    before (recorded runs, run directories) still load, and any other unknown name
    is still refused by name."""
    from grpo_helpers.config import RETIRED_FIELDS

    saved = GRPOConfig(backend="local").to_dict()
    assert not set(RETIRED_FIELDS) & set(saved)
    assert GRPOConfig.from_dict(saved | {"eval_limit": 0}) == GRPOConfig.from_dict(
        saved
    )
    with pytest.raises(ValueError, match="Unknown GRPOConfig fields: eval_limt"):
        GRPOConfig.from_dict(saved | {"eval_limt": 0})


def test_cli_eval_takes_its_flags_from_the_eval_config():
    """Issue 48: every flag of ``eval`` is a field of ``EvalConfig`` (how a model is
    scored) or of ``GRPOConfig`` (which model and data), besides the command's own
    two; each field's flag carries its default and help; a setting is validated
    by its knob, one way."""
    import re
    from dataclasses import fields as dataclass_fields

    from grpo_helpers import cli, presets
    from grpo_helpers.config import EvalConfig, knob_of

    parser = argparse.ArgumentParser()
    cli._eval_parser(parser.add_subparsers())
    (eval_parser,) = parser._subparsers._group_actions[0].choices.values()
    renamed = set(cli.EVAL_RENAMED)  # old names: aliases of the fields' flags
    flags = {
        a.dest: a
        for a in eval_parser._actions
        if a.option_strings and a.dest != "help" and not renamed & {*a.option_strings}
    }
    eval_fields = {f.name for f in dataclass_fields(EvalConfig)}
    run_fields = {f.name for f in knobs()}
    own = {"checkpoint_path", "out"}
    strays = set(flags) - eval_fields - run_fields - own
    assert not strays, strays
    for name in cli.EVAL_FLAGS:
        assert flags[name].help == knob_of(name, EvalConfig).help
        assert f"--{name.replace('_', '-')}" in flags[name].option_strings
    help_text = eval_parser.format_help()
    assert "--limit" not in help_text and "--eval-questions" in help_text
    assert re.search(r"--max-tokens\b", help_text) is None
    # every preset's evaluation part is a valid EvalConfig
    for preset in (presets.NOTEBOOK_EVAL, presets.DEMO_EVAL, presets.FAST_EVAL):
        EvalConfig(**{k: v for k, v in preset.items() if k in presets.EVAL_KEYS})
    pytrio = {k: v for k, v in presets.PYTRIO.items() if k in presets.EVAL_KEYS}
    assert EvalConfig(**pytrio).eval_max_tokens == 512
    with pytest.raises(ValueError, match="eval_max_tokens must be >= 1"):
        EvalConfig(eval_max_tokens=0)
