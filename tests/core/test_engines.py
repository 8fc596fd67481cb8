"""``engines.connect``: local by default, PyTRIO on request, fast clear failures."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grpo_helpers import engines
from grpo_helpers.local.service import LocalServiceClient

ROOT = Path(__file__).resolve().parents[2]


def test_local_is_the_default(monkeypatch, tmp_path):
    local = dataclasses.replace(engines.SETTINGS, backend="local")
    monkeypatch.setattr(engines, "SETTINGS", local)
    svc = engines.connect(run_dir=tmp_path, device="cpu")
    assert isinstance(svc, LocalServiceClient)
    assert svc.run_dir == tmp_path.resolve() and svc.device == "cpu"
    assert isinstance(engines.connect("LOCAL"), LocalServiceClient)


def test_unknown_backend():
    with pytest.raises(ValueError, match="Unknown backend 'tinker'"):
        engines.connect("tinker")


def test_pytrio_rejects_unknown_options():
    with pytest.raises(TypeError, match="unexpected options"):
        engines.connect("pytrio", colour="blue")


def test_pytrio_without_credentials_fails_with_login_hint(tmp_path):
    """No key: PyTRIO's AuthError. A key but no server: ControlAPIError once the
    control retry window is over, a window connect() shortens from PyTRIO's 15
    minutes to ``retry_timeout_seconds``. Both say `trio login`.
    ``GRPO_BACKEND=pytrio`` picks PyTRIO when connect() names no backend.

    How fast each call fails is measured by bench/timing_limits.py, not here."""
    script = textwrap.dedent(
        """
        import json
        from pytrio.config.config import configuration
        from grpo_helpers.engines import connect
        results = []
        for kwargs in ({}, {"run_dir": "/tmp/x"},
                       {"api_key": "not-a-key", "retry_timeout_seconds": 1}):
            try:
                connect(**kwargs)
                results.append(["connected"])
            except Exception as e:
                window = configuration.control_retry_timeout_seconds
                results.append([type(e).__name__, str(e), window])
        print(json.dumps(results))
        """
    )
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "PYTRIO_API_KEY": "",
        "GRPO_BACKEND": "pytrio",
        "PYTRIO_BASE_URL": "https://pytrio.invalid",
    }
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,  # a guard against a hang, not a claim about speed
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, message, window in results[:2]:
        assert name == "AuthError"
        assert "API key cannot be empty" in message and "trio login" in message
        assert window == 10.0  # connect()'s default, not PyTRIO's 900 s
    name, message, window = results[2]
    assert name in {"ControlAPIError", "AuthError"}
    assert "trio login" in message
    assert window == 1  # the retry_timeout_seconds the caller asked for
