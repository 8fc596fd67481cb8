"""No path of the training machine in an exported file.

An export (``export trl``, ``export peft``) is read on another machine: a path of
the one that wrote it means nothing there, and names its user and folders. Every
text an export writes goes through :func:`without_machine_paths`, which writes
each path of the run (its directory, the export folder, a base model's folder)
as :func:`portable_path` does: relative to the current folder when it lies in
it (``runs/nb05-sync``), ``~/...`` under the home folder, its name otherwise;
and any other mention of the current or the home folder as ``.`` or ``~``.

Introduced in: docs/beyond-the-laptop.md (after notebook 09)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["portable_path", "without_machine_paths"]

#: Characters that continue a path's last name: ``/tmp/run`` is not in ``/tmp/run2``.
_NAME_GOES_ON = r"(?![\w.-])"


def _machine_folders() -> list[tuple[Path, str]]:
    """The current folder and the home folder, with what stands for each; the
    root (a container's home or working folder) is no prefix worth writing."""
    out = []
    for folder, short in ((Path.cwd(), "."), (Path.home(), "~")):
        if folder != Path(folder.anchor):
            out.append((folder, short))
    return out


def portable_path(path: str | Path) -> str:
    """``path`` as an exported file writes it.

    Args:
        path: a path of this machine.

    Returns:
        A relative path as it is; an absolute one relative to the current folder
        when it lies in it, ``~/...`` when it lies in the home folder, and its
        last name otherwise.

    Example:
        >>> portable_path(Path.home() / "runs" / "a")
        '~/runs/a'
        >>> portable_path("/somewhere/else/run")
        'run'
        >>> portable_path("runs/nb05-sync")
        'runs/nb05-sync'
    """
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    for candidate in dict.fromkeys((p, p.resolve())):
        for folder, short in _machine_folders():
            for base in dict.fromkeys((folder, folder.resolve())):
                if candidate.is_relative_to(base):
                    rest = candidate.relative_to(base).as_posix()
                    if short == ".":
                        return rest
                    return short if rest == "." else f"{short}/{rest}"
    return p.name or p.as_posix()


def without_machine_paths(value: Any, paths: Iterable[str | Path] = ()) -> Any:
    """``value`` (text, or a JSON-like dict or list of them) with no path of
    this machine: each of ``paths`` written as :func:`portable_path` writes it
    (the longest first, so a folder inside another keeps its own name), then
    the current folder as ``.`` and the home folder as ``~``.

    Args:
        value: what an export writes.
        paths: the absolute paths it may hold (relative ones are left alone).

    Example:
        >>> without_machine_paths({"a": [str(Path.home() / "x")]})
        {'a': ['~/x']}
        >>> without_machine_paths("--from /data/7/run", ["/data/7/run"])
        '--from run'
    """
    replacements: dict[str, str] = {}
    for path in paths:
        p = Path(path)
        if p.is_absolute() and p != Path(p.anchor):
            for form in (str(p), p.as_posix(), str(p.resolve())):
                replacements.setdefault(form, portable_path(p))
    for folder, short in _machine_folders():
        for form in (str(folder), str(folder.resolve())):
            replacements.setdefault(form, short)
    if not replacements:
        return value
    pattern = re.compile(
        "|".join(
            re.escape(form) + _NAME_GOES_ON
            for form in sorted(replacements, key=len, reverse=True)
        )
    )

    def clean(item: Any) -> Any:
        if isinstance(item, str):
            return pattern.sub(lambda m: replacements[m.group(0)], item)
        if isinstance(item, dict):
            return {k: clean(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [clean(v) for v in item]
        return item

    return clean(value)
