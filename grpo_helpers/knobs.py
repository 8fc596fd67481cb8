"""Knobs: a setting declared once, as a dataclass field with its rules.

A knob (:func:`knob`) is a field whose metadata holds a :class:`Knob`: its help
text, the values it allows and its group of flags (how a run's setting becomes a
TRL setting is the TRL wing's: ``grpo_helpers.trl.mapping.FIELD_RULES``).
Everything else is generated from the fields: the validation
of every config class built of knobs (:func:`field_problems`), and the command
line's flags (:func:`add_arguments`, ``--group-size`` for ``group_size``; renamed
flags kept as aliases that warn, :func:`add_renamed`). ``GRPOConfig`` and
``EvalConfig`` (:mod:`grpo_helpers.config`) and the grade command's
``GradeConfig`` are built of them.

Example::

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Demo:
    ...     steps: int = knob(3, "steps to run", at_least=1)
    >>> field_problems(Demo(steps=0))
    ['steps must be >= 1, got 0']

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import argparse
import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

__all__ = [
    "GROUPS",
    "Knob",
    "add_arguments",
    "check",
    "add_renamed",
    "default_of",
    "field_problems",
    "from_arguments",
    "knob",
    "knob_of",
    "knobs",
    "raise_problems",
]

GROUPS = {
    "run": "the run",
    "objective": "the objective's knobs (notebook 09; the defaults are the demo "
    "scripts')",
}


@dataclass(frozen=True)
class Knob:
    """What a field of :class:`GRPOConfig` says about itself (``metadata["knob"]``).

    Attributes:
        help: one line for ``--help`` and the docs.
        at_least, at_most: the smallest and largest value allowed (None: no bound).
        above, below: the open bounds (the value must be greater, or smaller).
        choices: the values a learner may choose; ``accepted``: values accepted but not
            offered (the names of earlier recorded runs' rewards).
        why: said after the bound when a value is refused.
        group: the command line's group of flags (:data:`GROUPS`).
        flag: the flag when it is not the field's name (``--from`` for
            ``from_run``); ``positional``: an argument, not a flag (optional when
            it has a default).
    """

    help: str
    at_least: float | None = None
    at_most: float | None = None
    above: float | None = None
    below: float | None = None
    choices: tuple[Any, ...] = ()
    accepted: tuple[Any, ...] = ()
    why: str = ""
    group: str = "run"
    flag: str = ""
    positional: bool = False

    def problem(self, name: str, value: Any, kind: str, optional: bool) -> str | None:
        """Why ``value`` is not allowed for the knob ``name`` (None: it is).

        Example:
            >>> Knob("", at_least=1).problem("steps", 0, "int", False)
            'steps must be >= 1, got 0'
        """
        if value is None:
            return None if optional else f"{name} must be set, got None"
        if kind == "bool":
            return None if isinstance(value, bool) else self._is(name, value, "bool")
        if kind in ("int", "float"):
            wanted = numbers.Integral if kind == "int" else numbers.Real
            if isinstance(value, bool) or not isinstance(value, wanted):
                return self._is(name, value, kind)
            if kind == "float" and not math.isfinite(value):
                return f"{name} must be a finite number, got {value}"
        elif not isinstance(value, str):
            return self._is(name, value, kind)
        if self.choices and value not in self.choices + self.accepted:
            offered = ", ".join(str(c) for c in self.choices)
            if kind == "str":
                return f"unknown {name} {value!r}; choose one of {offered}"
            return f"{name} must be one of {offered}, got {value!r}"
        if kind == "str" and not value.strip():
            return f"{name} must not be empty"
        if kind in ("int", "float") and not self._in_range(value):
            reason = f" ({self.why})" if self.why else ""
            none = " or None" if optional else ""
            return f"{name} must be {self.range_text()}{none}{reason}, got {value}"
        return None

    def _in_range(self, value: float) -> bool:
        return not (
            (self.at_least is not None and value < self.at_least)
            or (self.at_most is not None and value > self.at_most)
            or (self.above is not None and value <= self.above)
            or (self.below is not None and value >= self.below)
        )

    def range_text(self) -> str:
        """The allowed range in words: ``>= 1``, ``in [4, 64]``, ``in (0, 1]``.

        Example:
            >>> Knob("", above=0, at_most=1).range_text()
            'in (0, 1]'
        """
        low = self.at_least if self.at_least is not None else self.above
        high = self.at_most if self.at_most is not None else self.below
        if low is not None and high is not None:
            left = "[" if self.at_least is not None else "("
            right = "]" if self.at_most is not None else ")"
            return f"in {left}{low:g}, {high:g}{right}"
        if low is not None:
            return f"{'>=' if self.at_least is not None else '>'} {low:g}"
        if high is not None:
            return f"{'<=' if self.at_most is not None else '<'} {high:g}"
        return "any value"

    @staticmethod
    def _is(name: str, value: Any, kind: str) -> str:
        words = {"bool": "True or False", "int": "an integer", "float": "a number"}
        return f"{name} must be {words.get(kind, 'a string')}, got {value!r}"


def check(name: str, value: Any, kind: str = "int", **rules: Any) -> Any:
    """``value`` when the :class:`Knob` rules ``rules`` allow it; else ValueError
    naming ``name``, the value and what is allowed. The data functions' plain
    arguments are checked as a config's knobs are.

    Example::

        >>> check("steps", 3, at_least=0)
        3
        >>> check("steps", -1, at_least=0)
        Traceback (most recent call last):
        ...
        ValueError: steps must be >= 0, got -1
        >>> check("split", "dev", "str", choices=("train", "test"))
        Traceback (most recent call last):
        ...
        ValueError: unknown split 'dev'; choose one of train, test
    """
    problem = Knob("", **rules).problem(name, value, kind, optional=False)
    if problem is not None:
        raise ValueError(problem)
    return value


def knob(
    default: Any = MISSING,
    help: str = "",  # noqa: A002 - the word argparse and TRL use
    *,
    default_factory: Callable[[], Any] | Any = MISSING,
    **rules: Any,
) -> Any:
    """A field of :class:`GRPOConfig` with its :class:`Knob` in the metadata.

    Args:
        default: the default value (or ``default_factory``, called per config).
        help: one line for ``--help``.
        **rules: the other :class:`Knob` attributes: the range, the choices, the
            group of flags.

    Example:
        >>> knob(4, "prompts per step", at_least=1).metadata["knob"].at_least
        1
    """
    metadata = {"knob": Knob(help=help, **rules)}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def field_problems(config: Any) -> list[str]:
    """What is wrong with each field of a config dataclass, by its :class:`Knob`
    (the one validation of :class:`GRPOConfig` and :class:`EvalConfig`)."""
    return [
        problem
        for f in knobs(type(config))
        if (problem := _problem(f, getattr(config, f.name))) is not None
    ]


def raise_problems(what: str, problems: Sequence[str]) -> None:
    """Raise ``ValueError("<what>: ...")`` naming every problem (a config's
    :func:`field_problems`, and any of its own); nothing when there is none."""
    if problems:
        raise ValueError(f"{what}: " + "; ".join(problems))


def _kind(f: Field) -> tuple[str, bool]:
    """A field's type as ``(name, optional)``: ``("int", True)`` for ``int | None``."""
    text = f.type if isinstance(f.type, str) else f.type.__name__
    parts = [p.strip() for p in text.split("|")]
    optional = "None" in parts
    return next(p for p in parts if p != "None"), optional


def _problem(f: Field, value: Any) -> str | None:
    kind, optional = _kind(f)
    return knob_of(f).problem(f.name, value, kind, optional)


def knobs(cls: type) -> list[Field]:
    """The fields of a config class that are knobs."""
    return [f for f in fields(cls) if "knob" in f.metadata]


def knob_of(name_or_field: str | Field, cls: type | None = None) -> Knob:
    """The :class:`Knob` of a field, by name or by the field itself."""
    if isinstance(name_or_field, str):
        if cls is None:
            raise TypeError(f"knob_of({name_or_field!r}) needs the config class")
        name_or_field = next(f for f in fields(cls) if f.name == name_or_field)
    return name_or_field.metadata["knob"]


def default_of(f: Field) -> Any:
    """A field's default, its factory called (``backend``: ``GRPO_BACKEND``)."""
    if f.default_factory is not MISSING:
        return f.default_factory()
    return f.default


def add_arguments(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    suppress: bool = False,
    only: Iterable[str] | None = None,
    defaults: dict[str, Any] | None = None,
) -> None:
    """Add a flag per knob of ``cls``: ``--group-size`` for ``group_size``.

    Args:
        parser: the command's parser.
        cls: the config class whose fields become flags.
        suppress: a flag not given stays out of the parsed namespace
            (``argparse.SUPPRESS``), so the given ones can override a saved config.
        only: the knobs to add (default: all).
        defaults: other defaults than the fields' (a command's own).

    Example:
        >>> from grpo_helpers.config import GRPOConfig
        >>> p = argparse.ArgumentParser()
        >>> add_arguments(p, GRPOConfig)
        >>> p.parse_args(["--group-size", "8", "--mask-truncated"]).group_size
        8
    """
    groups: dict[str, Any] = {"run": parser}
    wanted = None if only is None else set(only)
    for f in knobs(cls):
        if wanted is not None and f.name not in wanted:
            continue
        spec = knob_of(f)
        kind, _ = _kind(f)
        default = (defaults or {}).get(f.name, default_of(f))
        options: dict[str, Any] = {
            "default": argparse.SUPPRESS if suppress else default,
            "help": spec.help,
        }
        if kind == "bool":
            options["action"] = argparse.BooleanOptionalAction
        elif spec.choices:  # earlier names (``accepted``) are accepted, not offered
            options["choices"] = spec.choices + spec.accepted
            options["metavar"] = "{" + ",".join(map(str, spec.choices)) + "}"
            options["type"] = {"int": int, "float": float}.get(kind, str)
        elif kind in ("int", "float"):
            options["type"] = int if kind == "int" else float
        if spec.group not in groups:
            groups[spec.group] = parser.add_argument_group(GROUPS[spec.group])
        if spec.positional:
            options["nargs"] = "?"
            options.pop("action", None)
            groups[spec.group].add_argument(f.name, **options)
            continue
        flag = spec.flag or f"--{f.name.replace('_', '-')}"
        groups[spec.group].add_argument(flag, dest=f.name, **options)


def add_renamed(parser: argparse.ArgumentParser, renamed: dict[str, str]) -> None:
    """Keep each old flag of ``parser`` as an alias of its new one that warns.

    The command line is a public interface: a script written for an earlier
    version still runs, and says what to write instead; ``--help`` offers only
    the new names.

    Args:
        parser: the command's parser, its new flags already added.
        renamed: old flag -> new flag, e.g. ``{"--limit": "--eval-questions"}``.

    Example:
        >>> p = argparse.ArgumentParser()
        >>> _ = p.add_argument("--eval-questions", type=int)
        >>> add_renamed(p, {"--limit": "--eval-questions"})
        >>> import warnings
        >>> with warnings.catch_warnings(record=True):
        ...     p.parse_args(["--limit", "5"]).eval_questions
        5
    """
    by_flag = {o: a for a in parser._actions for o in a.option_strings}
    for old, new in renamed.items():
        target = by_flag[new]

        class Renamed(argparse.Action):
            old_flag: str = old
            new_flag: str = new

            def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001
                import warnings

                warnings.warn(
                    f"{self.old_flag} was renamed {self.new_flag}: it still works, "
                    "for now",
                    FutureWarning,
                    stacklevel=2,
                )
                setattr(namespace, self.dest, values)

        parser.add_argument(
            old,
            dest=target.dest,
            type=target.type or str,
            choices=target.choices,
            default=argparse.SUPPRESS,
            action=Renamed,
            help=argparse.SUPPRESS,  # accepted, not offered
        )


def from_arguments(args: argparse.Namespace, cls: type) -> Any:
    """The config that parsed flags describe (the knobs among ``args``)."""
    names = {f.name for f in knobs(cls)}
    return cls(**{k: v for k, v in vars(args).items() if k in names})
