"""Argument checks whose message names the argument, its bad value and what is
allowed: shared by the data modules (:mod:`grpo_helpers.data`,
:mod:`grpo_helpers.arithmetic`), which take plain arguments rather than a
``GRPOConfig`` (whose knobs check themselves: :mod:`grpo_helpers.config`).

Example::

    >>> check_int("steps", 3, 0)
    3
    >>> check_int("steps", -1, 0)
    Traceback (most recent call last):
    ...
    ValueError: steps must be an integer >= 0, got -1

Introduced in: 01_gsm8k_dataset.ipynb
"""

from __future__ import annotations

__all__ = ["check_choice", "check_int"]


def check_choice(name: str, value: object, valid: tuple[str, ...]) -> None:
    """ValueError naming ``name``, the bad ``value`` and every valid one."""
    if value not in valid:
        raise ValueError(
            f"Unknown {name} {value!r}; valid: " + ", ".join(repr(v) for v in valid)
        )


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` when it is an integer >= ``minimum`` (not a bool), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value
