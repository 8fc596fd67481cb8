"""grpo_helpers.classroom.grade_settings: the grade command's settings are declared
once. Its flags are generated from ``GradeConfig`` (none written by hand), the
sandbox's limits are its defaults, and ``grading.grade`` takes it."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest

from grpo_helpers import cli
from grpo_helpers.classroom import grading
from grpo_helpers.classroom.grade_settings import GradeConfig
from grpo_helpers.classroom.sandbox import Limits
from grpo_helpers.config import from_arguments


def _grade_parser():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices["grade"]


def test_every_flag_of_grade_is_a_field_of_grade_config():
    flags = {a.dest for a in _grade_parser()._actions if a.dest != "help"}
    assert flags == {f.name for f in fields(GradeConfig)}


def test_the_flags_parse_into_a_grade_config():
    args = _grade_parser().parse_args(
        ["subs", "--no-sandbox", "--memory-mb", "512", "--workers", "2"]
    )
    config = from_arguments(args, GradeConfig)
    assert (config.sandbox, config.memory_mb, config.workers) == (False, 512, 2)
    assert args.submissions == "subs"
    assert from_arguments(_grade_parser().parse_args([]), GradeConfig) == GradeConfig()


def test_the_limits_are_written_once():
    """The sandbox's limits are GradeConfig's defaults, and grading.grade holds
    no default of its own: it takes a GradeConfig or changes to one."""
    config = GradeConfig()
    assert (config.memory_mb, config.max_processes) == (
        Limits.memory_mb,
        Limits.processes,
    )
    parameters = inspect.signature(grading.grade).parameters
    assert list(parameters) == ["submissions", "course_dir", "settings", "changes"]


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"workers": 0}, "workers must be >= 1"),
        ({"memory_mb": 10}, "memory_mb must be >= 64"),
        ({"function_seconds": 0}, "function_seconds must be > 0"),
    ],
)
def test_a_bad_setting_is_refused_by_name(changes, words):
    with pytest.raises(ValueError, match=words):
        GradeConfig(**changes)


def test_grade_refuses_an_unknown_setting(tmp_path):
    with pytest.raises(TypeError, match="seconds"):
        grading.grade(tmp_path, tmp_path, seconds=5)
