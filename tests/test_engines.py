"""``engines.connect``: local by default, PyTRIO on request, fast clear failures."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grpo_helpers import engines
from grpo_helpers.local.engine import LocalServiceClient

ROOT = Path(__file__).resolve().parent.parent


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


def test_pytrio_without_credentials_fails_fast_with_login_hint(tmp_path):
    """No key: PyTRIO's AuthError at once. A key but no server: ControlAPIError
    after the short retry window, not PyTRIO's 15 minutes. Both say `trio login`.
    ``GRPO_BACKEND=pytrio`` picks PyTRIO when connect() names no backend."""
    script = textwrap.dedent(
        """
        import json, time
        from grpo_helpers.engines import connect
        results = []
        for kwargs in ({}, {"run_dir": "/tmp/x"},
                       {"api_key": "not-a-key", "retry_timeout_seconds": 1}):
            t = time.perf_counter()
            try:
                connect(**kwargs)
                results.append(["connected"])
            except Exception as e:
                results.append([type(e).__name__, str(e), time.perf_counter() - t])
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
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, message, seconds in results[:2]:
        assert name == "AuthError"
        assert "API key cannot be empty" in message and "trio login" in message
        assert seconds < 5
    name, message, seconds = results[2]
    assert name in {"ControlAPIError", "AuthError"}
    assert "trio login" in message and seconds < 30
    assert time.perf_counter() - start < 90
