"""The one tiny run the tests train: tiny-random on arithmetic problems, in seconds.

``tiny(**changes)`` is its settings (``GRPOConfig`` fields) with some changed;
``tiny_flags(**changes)`` the same run as ``train``'s flags. The ``tiny_config``
fixture (``conftest.py``) builds the config with its run directory in the test's
own folder.
"""

from __future__ import annotations

from typing import Any

#: Two steps of 2 prompts x 4 completions of at most 6 tokens, rank 4, the shaped
#: reward (tiny-random's groups then earn different rewards), no checkpoint but the
#: last.
TINY: dict[str, Any] = {
    "base_model": "tiny-random",
    "backend": "local",
    "dataset": "arithmetic",
    "steps": 2,
    "batch_size": 2,
    "group_size": 4,
    "max_tokens": 6,
    "lora_rank": 4,
    "reward": "shaped",
    "save_every": 0,
}


def tiny(**changes: Any) -> dict[str, Any]:
    """The tiny run's settings, with ``changes``."""
    return {**TINY, **changes}


def tiny_flags(**changes: Any) -> list[str]:
    """The tiny run as ``train``'s flags (``--group-size 4`` ...), with ``changes``."""
    flags = []
    for name, value in tiny(**changes).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + flag[2:])
        elif value is not None:
            flags += [flag, str(value)]
    return flags
