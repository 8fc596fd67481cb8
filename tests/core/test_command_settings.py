"""grpo_helpers.command_settings: every flag of the command line comes from a
declaration. ``cli.py`` calls no ``add_argument`` itself; each option of each
command is a field of ``GRPOConfig``, ``EvalConfig``, ``GradeConfig`` or one of
the commands' own dataclasses, or a renamed flag kept as an alias."""

from __future__ import annotations

import argparse
import ast
from dataclasses import fields
from pathlib import Path

from grpo_helpers import cli, command_settings
from grpo_helpers.classroom.grade_settings import GradeConfig
from grpo_helpers.config import EvalConfig, GRPOConfig


def _parsers(parser: argparse.ArgumentParser, name: str = "") -> dict:
    """Every command's parser by its words (``export peft``)."""
    found = {name: parser} if name else {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, sub in action.choices.items():
                found |= _parsers(sub, f"{name} {word}".strip())
    return found


def test_cli_writes_no_flag_by_hand():
    tree = ast.parse(Path(cli.__file__).read_text())
    calls = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "add_argument"
    ]
    assert not calls, f"cli.py adds arguments by hand at lines {calls}"


def test_every_option_of_every_command_is_a_declared_field():
    declared = {
        f.name
        for cls in (GRPOConfig, EvalConfig, GradeConfig)
        + tuple(getattr(command_settings, n) for n in command_settings.__all__)
        for f in fields(cls)
    }
    undeclared = {}
    for name, parser in _parsers(cli.build_parser()).items():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) or action.dest in (
                "help",
                "target",
                "command",
            ):
                continue
            if action.help == argparse.SUPPRESS:  # a renamed flag's alias
                continue
            if action.dest not in declared:
                undeclared.setdefault(name, []).append(action.dest)
    assert not undeclared, undeclared


def test_the_series_flags_parse_as_declared():
    parser = _parsers(cli.build_parser())["series"]
    args = parser.parse_args(["--record-times", "--only", "01"])
    assert args.record_times and args.only == "01"
    assert args.times_file.endswith("bench/results/notebook-times.json")


def test_a_required_setting_is_named_when_missing(capsys):
    assert cli.main(["export", "peft"]) == 2
    assert "export peft needs --from" in capsys.readouterr().err
    assert cli.main(["export", "base"]) == 2
    assert "export base needs --out" in capsys.readouterr().err
