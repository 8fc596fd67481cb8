"""Shared test fixtures, and a report of what fast-mode training did.

The loop tests train tiny-random for real (its groups earn different rewards).
Each records one line of evidence (steps updated, non-degenerate groups, how far
the LoRA weights moved from zero); ``make test`` prints them in a section of its
own at the end, so the run's output shows that a GRPO update went through the loop.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

_EVIDENCE: list[str] = []


@pytest.fixture
def training_evidence(request) -> Callable[[str], Callable[[str], None]]:
    """``training_evidence(label)(line)`` records a line for the final report."""

    def for_label(label: str) -> Callable[[str], None]:
        def record(line: str) -> None:
            _EVIDENCE.append(f"{request.node.name} [{label}]: {line}")

        return record

    return for_label


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    if _EVIDENCE:
        terminalreporter.section("fast-mode training updated the policy")
        for line in _EVIDENCE:
            terminalreporter.write_line(line)
