"""Writing a file or a folder so that a crash never leaves half of it.

:func:`write_atomically` is the package's one atomic writer: it writes under a
temporary name beside the final path, then renames the result into place in one
step, so a reader (or a resumed run) sees the old version or the new one, never a
torn one. An error or an interrupt while writing leaves the final path as it was
and no temporary file behind. The run directory's JSON files
(:mod:`grpo_helpers.run_files`), the local engine's checkpoints
(:mod:`grpo_helpers.local.checkpoints`) and its cache of converted models
(:mod:`grpo_helpers.local.models`) all write through it.

Introduced in: 05_sync_training_loop.ipynb (the run directory a run resumes from)
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

__all__ = ["write_atomically", "write_text_atomically"]


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def write_atomically(
    final: str | Path, write: Callable[[Path], object], *, replace: bool = True
) -> Path:
    """Call ``write(tmp)``, then move what it wrote at ``tmp`` to ``final`` at once.

    Args:
        final: where the file or the folder ends up; its parent is created.
        write: creates ``tmp``, a fresh path beside ``final``: a file, or a folder
            and what it holds.
        replace: replace an existing ``final`` (a folder is moved aside, the new one
            renamed into place, then the old one removed). False keeps an existing
            ``final`` and drops what ``write`` wrote: another process wrote the same
            thing first (a cache).

    Returns:
        ``final``.

    Example::

        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "config.json"
        >>> _ = write_text_atomically(path, "{}")
        >>> path.read_text(), sorted(p.name for p in path.parent.iterdir())
        ('{}', ['config.json'])
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    old = None
    try:
        write(tmp)
        if not replace:
            try:
                os.rename(tmp, final)
            except OSError:
                if not final.exists():
                    raise
        elif tmp.is_dir() and final.exists():
            old = final.parent / f".old-{final.name}-{uuid.uuid4().hex[:8]}"
            os.rename(final, old)
            os.rename(tmp, final)
        else:
            os.replace(tmp, final)
    finally:
        for leftover in (tmp, old):
            if leftover is not None and (leftover.exists() or leftover.is_symlink()):
                _remove(leftover)
    return final


def write_text_atomically(path: str | Path, text: str) -> Path:
    """Replace the file at ``path`` by ``text`` at once (:func:`write_atomically`)."""
    return write_atomically(path, lambda tmp: tmp.write_text(text))
