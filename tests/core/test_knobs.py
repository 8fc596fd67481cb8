"""grpo_helpers.knobs: a setting declared once. Any dataclass built of knobs checks
its values by its knobs' rules and gets its command line's flags from them, as
``GRPOConfig``, ``EvalConfig`` and the grade command's ``GradeConfig`` do."""

from __future__ import annotations

import argparse
import warnings
from dataclasses import dataclass

import pytest

from grpo_helpers import knobs
from grpo_helpers.knobs import knob


@dataclass
class Demo:
    steps: int = knob(3, "steps to run", at_least=1)
    rate: float = knob(0.5, "a rate", above=0, below=1)
    mode: str = knob("a", "a mode", choices=("a", "b"))
    quiet: bool = knob(False, "say less")
    name: str | None = knob(None, "a name")


def test_a_dataclass_of_knobs_is_checked_by_its_rules():
    assert knobs.field_problems(Demo()) == []
    problems = knobs.field_problems(Demo(steps=0, rate=1.5, mode="c"))
    assert len(problems) == 3
    assert problems[0] == "steps must be >= 1, got 0"
    assert "rate" in problems[1] and "mode" in problems[2]


def test_its_flags_are_generated_and_parse_back_into_it():
    parser = argparse.ArgumentParser()
    knobs.add_arguments(parser, Demo)
    args = parser.parse_args(["--steps", "5", "--mode", "b", "--quiet"])
    assert knobs.from_arguments(args, Demo) == Demo(steps=5, mode="b", quiet=True)
    assert knobs.from_arguments(parser.parse_args([]), Demo) == Demo()
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "c"])


def test_a_renamed_flag_still_works_and_warns():
    parser = argparse.ArgumentParser()
    knobs.add_arguments(parser, Demo)
    knobs.add_renamed(parser, {"--count": "--steps"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert parser.parse_args(["--count", "7"]).steps == 7
    assert "renamed --steps" in str(caught[0].message)


def test_knob_of_a_name_needs_its_class():
    assert knobs.knob_of("steps", Demo).at_least == 1
    with pytest.raises(TypeError, match="needs the config class"):
        knobs.knob_of("steps")
