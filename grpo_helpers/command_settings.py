"""The command line's own settings, declared as knobs like a run's.

``python -m grpo_helpers`` has a command per task; what a command takes beside a
run's settings (``GRPOConfig``), an evaluation's (``EvalConfig``) or grading's
(``classroom.grade_settings.GradeConfig``) is declared here, one dataclass per
command, each field a :func:`grpo_helpers.knobs.knob`. ``cli.py`` generates every
flag from these declarations and writes none by hand.

Introduced in: README.md (the commands)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from grpo_helpers.config import MODES
from grpo_helpers.knobs import knob

__all__ = [
    "BookCommand",
    "EvalCommand",
    "ExportBaseCommand",
    "ExportPeftCommand",
    "ExportTrlCommand",
    "LoopCommand",
    "SeriesCommand",
    "StudentCommand",
    "TrainCommand",
]


def _course_path(name: str) -> Callable[[], str]:
    """The default of a folder the course module names (``course.BOOK``...), read
    when a command's settings are made: the course module loads only then."""

    def default() -> str:
        from grpo_helpers.classroom import course

        return str(getattr(course, name))

    return default


@dataclass
class LoopCommand:
    """Which loop trains the run (``train`` and ``export trl``)."""

    mode: str = knob(
        "sync",
        "the loop: sync (notebook 05) or async (notebook 06)",
        choices=MODES,
    )


@dataclass
class TrainCommand:
    """``train``, beside the run's settings."""

    resume: bool = knob(False, "continue an interrupted run")
    overwrite: bool = knob(False, "start again in an existing run dir")


@dataclass
class ExportTrlCommand:
    """``export trl``, beside the run's settings."""

    from_config: str | None = knob(
        None, "a run's config.json (runs/<name>/config.json)", flag="--from"
    )
    out: str | None = knob(None, "default: exports/<weights-name>-trl")
    overwrite: bool = knob(False, "replace an export")


@dataclass
class ExportPeftCommand:
    """``export peft``: a finished run's adapter, or the model merged."""

    from_run: str | None = knob(
        None, "the run directory (runs/<name>); required", flag="--from"
    )
    merged: bool = knob(False, "a merged transformers model folder")
    out: str | None = knob(None, "default: exports/<weights-name>-peft (or -merged)")
    overwrite: bool = knob(False, "replace an export")
    base_model: str | None = knob(
        None, "the base model the export is for (refused unless it is the run's)"
    )
    eval_questions: int | None = knob(
        None,
        "held-out questions evaluated for the model card (default: notebook 07's, "
        "100; 0: none)",
        at_least=0,
    )
    eval_max_tokens: int | None = knob(
        None, "tokens per held-out answer (default: notebook 07's, 64)", at_least=1
    )


@dataclass
class ExportBaseCommand:
    """``export base``: the exact base model a run trained on."""

    model: str | None = knob(
        None, "the base model (default: the local engine's, SmolLM2-135M-Instruct)"
    )
    out: str | None = knob(None, "the folder to write; required")
    overwrite: bool = knob(False, "replace the folder")


@dataclass
class EvalCommand:
    """``eval``, beside the run's model and the evaluation's settings."""

    checkpoint_path: str | None = knob(None, "weights path to compare")
    out: str | None = knob(None, "records file (.jsonl or .csv)")


@dataclass
class SeriesCommand:
    """``series``: execute the notebooks."""

    notebooks: str = knob(
        help="the notebooks' folder",
        default_factory=_course_path("NOTEBOOKS"),
    )
    out: str = knob(
        help="where the executed copies go",
        default_factory=_course_path("EXECUTED"),
    )
    only: str = knob("", "comma-separated prefixes, e.g. 01,02 (default: all)")
    timeout: int = knob(1800, "seconds per cell", at_least=1)
    record_times: bool = knob(
        False,
        "write each notebook's time, by mode (fast or full), into --times-file: "
        "the README's syllabus and the notebooks' runtime lines quote it",
    )
    times_file: str = knob(
        help="where --record-times writes",
        default_factory=_course_path("TIMES"),
    )


@dataclass
class BookCommand:
    """``book``: the course site."""

    out: str = knob(help="the site's folder", default_factory=_course_path("BOOK"))


@dataclass
class StudentCommand:
    """``student``: the student edition and the teacher's course directory."""

    out: str = knob(
        help="the student edition: hand out all of it (default build/student)",
        default_factory=_course_path("STUDENT"),
    )
    course: str = knob(
        help="the teacher's course directory: keep it (default build/grading)",
        default_factory=_course_path("COURSE"),
    )
