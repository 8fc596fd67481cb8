"""grpo_helpers.settings: where runs go (fast runs apart from full ones, the
project's ``runs/`` unless ``GRPO_RUNS_ROOT`` moves it), and this test session
writing none into the project."""

from __future__ import annotations

import pytest

from grpo_helpers import settings


@pytest.mark.parametrize("fast", [False, True])
def test_fast_runs_never_share_a_directory_with_full_runs(fast):
    """``make test`` (fast mode) must not overwrite the full-size run of notebook 05
    that notebook 07 evaluates: fast runs live under ``runs/fast/``."""
    import dataclasses

    from grpo_helpers.settings import SETTINGS

    settings = dataclasses.replace(SETTINGS, fast=fast)
    runs = settings.runs_dir
    assert settings.runs_root == (runs / "fast" if fast else runs)


def test_runs_root_is_the_project_runs_folder_unless_moved(monkeypatch, tmp_path):
    monkeypatch.delenv("GRPO_RUNS_ROOT", raising=False)
    assert settings._read_settings().runs_dir == settings.SETTINGS.project_root / "runs"
    monkeypatch.setenv("GRPO_RUNS_ROOT", str(tmp_path / "elsewhere"))
    assert settings._read_settings().runs_dir == tmp_path / "elsewhere"


def test_this_session_writes_no_run_into_the_project(session_runs_dir):
    """tests/conftest.py moved every default run folder to a temporary one."""
    from grpo_helpers.local.service import default_run_dir
    from grpo_helpers.settings import SETTINGS

    project_runs = SETTINGS.project_root / "runs"
    assert SETTINGS.runs_dir == session_runs_dir.resolve()
    for path in (SETTINGS.runs_root, default_run_dir()):
        assert not path.is_relative_to(project_runs), path
        assert path.is_relative_to(session_runs_dir.resolve()), path
