"""Every command line in the README's and docs/' shell blocks runs as written.

A ``grpo`` line (``.venv/bin/grpo``, ``grpo``, ``python -m grpo_helpers``) is parsed
by the command line's own parser (``cli.build_parser``), without running it; a
``make`` line names a target of the Makefile. Renamed flags keep their old names as
aliases that warn (``grpo eval --limit``).
"""

from __future__ import annotations

import argparse
import re
import shlex
import warnings
from pathlib import Path

import pytest

from grpo_helpers import cli

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
GRPO = re.compile(
    r"^(?:\S+=\S+\s+)*(?:\.venv/bin/grpo|grpo|\S*python3? -m grpo_helpers)\s"
)
MAKE = re.compile(r"^(?:\S+=\S+\s+)*make\s")
TARGETS = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))


def documented() -> list[tuple[str, str]]:
    """``(file, line)`` of each command line in a shell block."""
    found = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]:
        for lang, body in FENCE.findall(md.read_text()):
            if lang not in ("", "bash", "sh", "shell", "console"):
                continue
            for line in re.sub(r"\\\n\s*", " ", body).splitlines():
                line = line.strip().removeprefix("$ ")
                if GRPO.match(line) or MAKE.match(line):
                    found.append((str(md.relative_to(ROOT)), line))
    return found


COMMANDS = documented()


def _words(line: str) -> list[str]:
    words = shlex.split(line, comments=True)
    while "=" in words[0]:
        words.pop(0)
    return [w for w in words if w != "..."]


def test_the_docs_have_commands_to_check():
    assert sum(GRPO.match(line) is not None for _, line in COMMANDS) >= 8
    assert sum(MAKE.match(line) is not None for _, line in COMMANDS) >= 3


@pytest.mark.parametrize("where, line", COMMANDS, ids=lambda x: x[:60])
def test_a_documented_command_parses(where, line):
    words = _words(line)
    if words[0] == "make":
        targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        assert set(targets) <= TARGETS, (where, line, set(targets) - TARGETS)
        return
    start = 3 if words[1] == "-m" else 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # no documented old name
        try:
            cli.build_parser().parse_args(words[start:])
        except SystemExit as stop:
            pytest.fail(f"{where}: {line!r} does not parse (exit {stop.code})")


@pytest.mark.parametrize(
    "old, new, value",
    [("--limit", "eval_questions", "7"), ("--max-tokens", "eval_max_tokens", "64")],
)
def test_renamed_eval_flags_still_work_and_warn(old, new, value):
    with pytest.warns(FutureWarning, match=f"{old} was renamed"):
        args = cli.build_parser().parse_args(["eval", old, value])
    assert getattr(args, new) == int(value)


def test_the_old_names_are_accepted_not_offered():
    sub = next(
        a
        for a in cli.build_parser()._actions
        if isinstance(a, argparse._SubParsersAction)
    )
    helps = sub.choices["eval"].format_help()
    assert "--eval-questions" in helps and "--limit" not in helps
