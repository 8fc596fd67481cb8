"""``grpo_helpers.atomic_write``: the one atomic writer, for files and folders alike."""

from __future__ import annotations

import ast
import doctest
from pathlib import Path

import pytest

from grpo_helpers import atomic_write
from grpo_helpers.atomic_write import write_atomically, write_text_atomically

PACKAGE = Path(atomic_write.__file__).parent


def test_doctests_pass():
    result = doctest.testmod(atomic_write)
    assert result.failed == 0 and result.attempted > 0


def test_a_file_is_replaced_whole_or_not_at_all(tmp_path):
    path = tmp_path / "runs" / "config.json"
    write_text_atomically(path, "old")
    assert path.read_text() == "old"

    def torn(tmp: Path) -> None:
        tmp.write_text("half of the new")
        raise KeyboardInterrupt  # killed while writing

    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, torn)
    assert path.read_text() == "old"
    assert [p.name for p in path.parent.iterdir()] == ["config.json"]
    write_text_atomically(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in path.parent.iterdir()] == ["config.json"]


def _folder(text: str):
    def write(tmp: Path) -> None:
        tmp.mkdir()
        (tmp / "weights").write_text(text)

    return write


def test_a_folder_replaces_a_folder_and_an_error_keeps_the_old_one(tmp_path):
    final = tmp_path / "state" / "step-1"
    write_atomically(final, _folder("a"))
    write_atomically(final, _folder("b"))
    assert (final / "weights").read_text() == "b"

    def broken(tmp: Path) -> None:
        _folder("c")(tmp)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(final, broken)
    assert (final / "weights").read_text() == "b"
    assert [p.name for p in final.parent.iterdir()] == ["step-1"]  # no .tmp, .old


def test_replace_false_keeps_what_another_process_wrote_first(tmp_path):
    final = tmp_path / "cache" / "model"
    write_atomically(final, _folder("first"), replace=False)
    write_atomically(final, _folder("second"), replace=False)
    assert (final / "weights").read_text() == "first"
    assert [p.name for p in final.parent.iterdir()] == ["model"]


def test_no_other_module_renames_into_place():
    """One atomic writer: every other module writes through ``files``."""
    renames = []
    for path in PACKAGE.rglob("*.py"):
        if path == Path(atomic_write.__file__):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("replace", "rename")
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
            ):
                renames.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not renames, renames
