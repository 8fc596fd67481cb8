"""The time limits the unit tests used to assert, measured here instead.

The tests check *what* these calls return; *how long* they take depends on the
machine, so it is measured by this script, in one run, on the tests' inputs:

1. ``extract_boxed`` on five adversarial 1 MB texts (unclosed boxes, a million
   unclosed braces, deep nesting...): each under 1.0 s, a linear scan with no
   backtracking (tests/core/test_rewards.py,
   ``test_extract_boxed_on_adversarial_megabyte``).
2. ``extract_boxed`` on 500 texts made of tests/helpers/strategies.py's ``BOXY_PIECES``:
   the slowest under 0.5 s.
3. Both reward functions and ``extract_last_number`` on five adversarial 1 MB
   texts: under 1.0 s per text (``test_rewards_on_adversarial_megabyte``).
4. ``load_gsm8k(source="hub")`` with the Hub on a closed port: ConnectionError
   within 5 s; with a Hub that accepts connections but never answers (probe
   timeout 0.5 s): within 3 s (tests/core/test_data.py, ``test_hub_*``).
5. ``connect("pytrio")`` in a fresh interpreter, offline: without a key (twice)
   within 5 s each, with a bad key and ``retry_timeout_seconds=1`` within 30 s,
   the whole subprocess within 90 s (tests/core/test_engines.py). It needs no network:
   what it measures is how fast the failure comes.

Run::

    python bench/timing_limits.py                 # all of it
    python bench/timing_limits.py --skip-pytrio   # without part 5

It prints one line per measurement (seconds, limit, ok or OVER) and ends with a
line ``RESULT k/n under their limits ...``. The exit status is 0 either way: a
busy machine may go over a limit, and the RESULT line says so.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from typing import Any

from common import ROOT

sys.path.insert(0, str(ROOT / "tests"))  # the property tests' texts

from strategies import boxy_texts  # noqa: E402

from grpo_helpers import data  # noqa: E402
from grpo_helpers.rewards import (  # noqa: E402
    REWARD_FUNCTIONS,
    extract_boxed,
    extract_last_number,
)

# The inputs of tests/core/test_rewards.py, copied: there they sit in decorators.
BOXED_MEGABYTES = {
    "unclosed-boxes": "\\boxed{" * 150_000,
    "unclosed-braces": "\\boxed{" + "{" * 1_000_000,
    "deep-nesting": "\\boxed{" * 70_000 + "x" + "}" * 70_000,
    "stray-close": "}" * 500_000 + "\\boxed{" * 70_000,
    "long": "\\boxed{1}" + "a" * 1_000_000 + "\\boxed{" * 10,
}
REWARD_MEGABYTES = {
    "unclosed-boxes": "\\boxed{" * 150_000,
    "commas": "1," * 500_000,
    "minus-run": "-" * 500_000 + "1",
    "dots": "1.1." * 250_000,
    "digits": "9" * 1_000_000,
}
BOXY_MAX_PIECES = 24

# The script of tests/core/test_engines.py, with a clock around each call.
PYTRIO_SCRIPT = textwrap.dedent(
    """
    import json, time
    from grpo_helpers.engines import connect
    results = []
    for kwargs in ({}, {"run_dir": "/tmp/x"},
                   {"api_key": "not-a-key", "retry_timeout_seconds": 1}):
        t = time.perf_counter()
        try:
            connect(**kwargs)
            results.append(["connected", "", time.perf_counter() - t])
        except Exception as e:
            results.append([type(e).__name__, str(e), time.perf_counter() - t])
    print(json.dumps(results))
    """
)
PYTRIO_CALLS = ("no key", "no key, run_dir", "bad key, retry 1 s")
PYTRIO_LIMITS = (5.0, 5.0, 30.0)
PYTRIO_TOTAL_LIMIT = 90.0
PROXY_VARIABLES = (
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "all_proxy",
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
)


class Limits:
    """Measurements against their limits, printed as they come."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float]] = []

    def record(self, name: str, seconds: float, limit: float, note: str = "") -> None:
        self.rows.append((name, seconds, limit))
        verdict = "ok" if seconds < limit else "OVER"
        extra = f"  ({note})" if note else ""
        print(f"{name:<44} {seconds:9.4f} s  limit {limit:5.1f} s  {verdict}{extra}")

    def time(self, name: str, limit: float, fn: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        result = fn()
        self.record(name, time.perf_counter() - start, limit)
        return result

    def summary(self) -> dict[str, Any]:
        under = sum(seconds < limit for _, seconds, limit in self.rows)
        name, seconds, limit = max(self.rows, key=lambda row: row[1] / row[2])
        return {
            "under": under,
            "total": len(self.rows),
            "closest": name,
            "closest_seconds": seconds,
            "closest_limit": limit,
        }


def bench_rewards(limits: Limits) -> None:
    for name, text in BOXED_MEGABYTES.items():
        limits.time(f"extract_boxed {name}", 1.0, lambda t=text: extract_boxed(t))
    slowest = 0.0
    for text in boxy_texts(500, BOXY_MAX_PIECES):
        start = time.perf_counter()
        extract_boxed(text)
        slowest = max(slowest, time.perf_counter() - start)
    limits.record("extract_boxed slowest of 500 boxy texts", slowest, 0.5)

    def all_rewards(text: str) -> None:
        for reward_fn in REWARD_FUNCTIONS.values():
            reward_fn(text, "72")
        extract_last_number(text)

    for name, text in REWARD_MEGABYTES.items():
        limits.time(f"rewards + last number {name}", 1.0, lambda t=text: all_rewards(t))


def _hub_failure(endpoint: str) -> float:
    """Seconds until ``load_gsm8k(source="hub")`` at ``endpoint`` raises."""
    os.environ["HF_ENDPOINT"] = endpoint
    start = time.perf_counter()
    try:
        data.load_gsm8k("test", source="hub")
    except ConnectionError:
        return time.perf_counter() - start
    raise RuntimeError(f"load_gsm8k reached a Hub at {endpoint}")


def bench_hub(limits: Limits) -> None:
    saved = {name: os.environ.get(name) for name in (*PROXY_VARIABLES, "HF_ENDPOINT")}
    saved_timeout = data.HUB_PROBE_TIMEOUT_S
    for name in PROXY_VARIABLES:
        os.environ.pop(name, None)
    try:
        with socket.socket() as sock:  # a port nobody listens on once closed
            sock.bind(("127.0.0.1", 0))
            closed_port = sock.getsockname()[1]
        seconds = _hub_failure(f"http://127.0.0.1:{closed_port}")
        limits.record("load_gsm8k hub on a closed port", seconds, 5.0)
        with socket.socket() as server:  # listens, never accepts: HTTP never answers
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            data.HUB_PROBE_TIMEOUT_S = 0.5
            seconds = _hub_failure(f"http://127.0.0.1:{server.getsockname()[1]}")
        limits.record("load_gsm8k hub that never answers", seconds, 3.0)
    finally:
        data.HUB_PROBE_TIMEOUT_S = saved_timeout
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def bench_pytrio(limits: Limits) -> None:
    with tempfile.TemporaryDirectory() as home:
        env = {
            **os.environ,
            "HOME": home,
            "PYTRIO_API_KEY": "",
            "GRPO_BACKEND": "pytrio",
            "PYTRIO_BASE_URL": "https://pytrio.invalid",
        }
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, "-c", PYTRIO_SCRIPT],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=2 * PYTRIO_TOTAL_LIMIT,
            )
        except subprocess.TimeoutExpired:
            seconds = time.perf_counter() - start
            limits.record("connect('pytrio') subprocess", seconds, PYTRIO_TOTAL_LIMIT)
            return
        total = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"the connect('pytrio') script failed:\n{proc.stderr}")
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for call, limit, (error, _, seconds) in zip(
        PYTRIO_CALLS, PYTRIO_LIMITS, results, strict=True
    ):
        limits.record(f"connect('pytrio') {call}", seconds, limit, note=error)
    limits.record("connect('pytrio') subprocess", total, PYTRIO_TOTAL_LIMIT)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--skip-pytrio", action="store_true", help="leave out connect('pytrio')"
    )
    args = parser.parse_args(argv)
    limits = Limits()
    bench_rewards(limits)
    bench_hub(limits)
    if not args.skip_pytrio:
        bench_pytrio(limits)
    result = limits.summary()
    share = result["closest_seconds"] / result["closest_limit"]
    print(
        f"RESULT {result['under']}/{result['total']} under their limits; closest: "
        f"{result['closest']} {result['closest_seconds']:.3f} s of "
        f"{result['closest_limit']:g} s ({share:.0%})"
    )
    return result


if __name__ == "__main__":
    main()
