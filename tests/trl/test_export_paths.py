"""grpo_helpers.trl.export_paths: how an exported file writes a path of the
machine that wrote it. The exports' own files are searched for such paths in
``test_export.py`` (TRL) and ``test_export_peft.py`` (the weights)."""

from __future__ import annotations

import doctest
from pathlib import Path

from grpo_helpers.trl import export_paths
from grpo_helpers.trl.export_paths import portable_path, without_machine_paths


def test_doctests_pass():
    assert doctest.testmod(export_paths).failed == 0


def test_a_path_is_written_relative_to_the_current_or_home_folder_or_by_name(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert portable_path(tmp_path / "runs" / "a") == "runs/a"
    assert portable_path(tmp_path) == "."
    assert portable_path(Path.home() / "x" / "y") in ("~/x/y", "x/y")
    assert portable_path("/nowhere/else/run") == "run"
    assert portable_path("runs/b") == "runs/b"  # relative: as it is


def test_the_paths_of_a_text_are_replaced_whole_and_the_longest_first(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    run, export = "/data/7/run", "/data/7/run/exports/peft"
    text = (
        f"--from {run} into {export}; {run}2 is another; "
        f"local://{run}/checkpoints/w; {tmp_path}/here; {Path.home()}/there"
    )
    clean = without_machine_paths({"a": [text], "n": 1}, [run, export, "relative"])
    assert clean == {
        "a": [
            "--from run into peft; /data/7/run2 is another; "
            "local://run/checkpoints/w; ./here; ~/there"
        ],
        "n": 1,
    }
