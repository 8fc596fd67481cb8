"""How ``python -m grpo_helpers grade`` grades: its settings, declared once.

Each setting is a knob (:func:`grpo_helpers.config.knob`), as a run's are: the
grade command's flags are generated from :class:`GradeConfig`
(``config.add_arguments``), ``grading.grade`` takes its defaults from it, and the
sandbox's limits (``sandbox.Limits``) are the defaults of its ``memory_mb`` and
``max_processes``: each limit is written once.

Introduced in: docs/teaching.md (grading a class)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from grpo_helpers.classroom.sandbox import Limits
from grpo_helpers.knobs import field_problems, knob, raise_problems

__all__ = ["GradeConfig"]


def _course() -> str:
    from grpo_helpers.classroom.course import COURSE  # the student command's too

    return str(COURSE)


@dataclass
class GradeConfig:
    """The grade command's settings (everything but the folder of submissions).

    Example::

        >>> GradeConfig().memory_mb == Limits().memory_mb
        True
        >>> GradeConfig(workers=0)
        Traceback (most recent call last):
        ...
        ValueError: Bad grading settings: workers must be >= 1, got 0
    """

    submissions: str | None = knob(
        None,
        "a folder with one sub-folder per student (each with its notebooks)",
        positional=True,
    )
    check_sandbox: bool = knob(
        False,
        "say which bubblewrap grading uses and whether its sandbox works here, then "
        "stop (exit code 1 when it does not)",
    )
    sandbox: bool = knob(
        True,
        "run each kernel in a sandbox (bubblewrap); --no-sandbox runs the "
        "submissions as your user, where they can read, write and reach what you "
        "can: only inside a container or a machine that holds nothing else (it "
        "warns on every run)",
    )
    memory_mb: int = knob(
        Limits.memory_mb,
        "private memory of each process of a kernel, in MiB",
        at_least=64,
    )
    max_processes: int = knob(
        Limits.processes,
        "processes (in the sandbox, and threads) one kernel may run",
        at_least=1,
    )
    course: str = knob(
        help="the course directory of `student` (default build/grading); "
        "grades.csv, autograded/ and feedback/ are written there",
        default_factory=_course,
    )
    feedback: bool = knob(
        False,
        "write each student's feedback notebook as HTML to "
        "<course>/feedback/<student>/ (nbgrader's generate_feedback)",
    )
    function_seconds: float = knob(
        60.0,
        "seconds the learner's code gets in each check and each call of a hidden test",
        above=0,
    )
    cell_seconds: int = knob(
        900, "seconds a cell may run before it is interrupted", at_least=1
    )
    notebook_seconds: float = knob(
        1800.0, "seconds one notebook may run in all", above=0
    )
    total_seconds: float = knob(
        3600.0, "seconds for all of one student's notebooks", above=0
    )
    workers: int = knob(
        1, "students graded at the same time, one process each", at_least=1
    )

    def __post_init__(self) -> None:
        raise_problems("Bad grading settings", field_problems(self))

    def grade_kwargs(self) -> dict[str, Any]:
        """The keywords of ``grading.grade`` (all but ``submissions``,
        ``check_sandbox`` and ``course``, which the command reads itself)."""
        values = asdict(self)
        del values["submissions"], values["check_sandbox"], values["course"]
        return values
