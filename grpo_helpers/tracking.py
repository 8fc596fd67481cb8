"""Experiment tracking with SwanLab, as the tutorial's demo scripts do, or trackio,
offline either way.

The demo scripts log to SwanLab (``--swanlab --swanlab-project
--swanlab-experiment-name``). Here the same flags (and the notebooks' ``tracker =
"swanlab"``) log every metric of a run, with no account and no network: in
``offline`` mode (the default) SwanLab writes its log under ``<run_dir>/swanlog``;
``local`` mode adds a dashboard (``pip install 'swanlab[dashboard]==0.10.3'``,
then ``swanlab watch runs/<name>/swanlog``); ``online`` needs ``swanlab login``.
The run directory's ``metrics.jsonl`` holds the same numbers either way.

trackio (``trackio=True``; the notebooks' ``tracker = "trackio"``) is Hugging
Face's local-first tracker, the one TRL's ``report_to="trackio"`` feeds: every run
of the series goes into one SQLite store, ``runs/trackio`` (``TRACKIO_DIR``), as a
run of the project ``grpo-notebooks`` named by its ``weights_name``; ``trackio show
--project grpo-notebooks`` (with ``TRACKIO_DIR=runs/trackio``) opens its dashboard
on this machine.

Introduced in: 05_sync_training_loop.ipynb
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

INSTALL_HINT = (
    "Install it with `pip install -e '.[swanlab]' -c constraints.txt` (SwanLab "
    "0.10.3; `make setup-all` does), or leave tracking off (swanlab=False, the "
    "default): the run directory's metrics.jsonl keeps every metric anyway."
)


def loggable(row: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a metrics row that SwanLab can plot: finite ints and floats
    (booleans as 0/1); the step is passed apart.

    Example::

        >>> loggable({"step": 3, "reward_mean": 0.5, "ok": True, "x": float("nan")})
        {'reward_mean': 0.5, 'ok': 1.0}
    """
    out = {}
    for key, value in row.items():
        if key == "step" or not isinstance(value, (bool, int, float)):
            continue
        number = float(value)
        if math.isfinite(number):
            out[key] = number
    return out


TRACKIO_PROJECT = "grpo-notebooks"
TRACKIO_HINT = (
    "Install it with `pip install -e '.[trackio]'` (trackio 0.43.0; `make "
    "setup-all` does), or leave it off (trackio=False, the default)."
)
#: The notebooks' ``tracker`` parameter: what each choice turns on.
TRACKERS = {
    "none": {"swanlab": False, "trackio": False},
    "swanlab": {"swanlab": True, "trackio": False},
    "trackio": {"swanlab": False, "trackio": True},
}


def tracker_settings(tracker: str) -> dict[str, bool]:
    """The ``GRPOConfig`` settings of a notebook's ``tracker`` parameter.

    Example::

        >>> tracker_settings("trackio")
        {'swanlab': False, 'trackio': True}
    """
    if tracker not in TRACKERS:
        raise ValueError(
            f"unknown tracker {tracker!r}; choose one of {', '.join(TRACKERS)}"
        )
    return dict(TRACKERS[tracker])


def start_trackio(*, name: str, config: Mapping[str, Any], directory: Path) -> Any:
    """``trackio.init`` for one run of the project :data:`TRACKIO_PROJECT`, stored
    under ``directory`` unless ``TRACKIO_DIR`` says otherwise (trackio reads it once,
    when it is first imported: the first run of a process chooses for all of them).
    No dashboard is started and nothing leaves the machine.

    Raises:
        ImportError: trackio is not installed; the message says how to install it.
    """
    import os

    os.environ.setdefault("TRACKIO_DIR", str(directory))
    try:
        import trackio
    except ImportError:
        raise ImportError(
            f"trackio=True but the trackio package is not installed. {TRACKIO_HINT}"
        ) from None
    return trackio.init(
        project=TRACKIO_PROJECT,
        name=name,
        config=dict(config),
        embed=False,
        auto_log_cpu=False,
        auto_log_gpu=False,
    )


def start_swanlab(
    *,
    project: str,
    experiment_name: str,
    config: Mapping[str, Any],
    mode: str = "offline",
    log_dir: str | Path,
) -> Any:
    """``swanlab.init`` with the demo scripts' project and experiment name.

    Raises:
        ImportError: SwanLab is not installed; the message says how to install it
            or how to leave tracking off.
    """
    try:
        import swanlab
    except ImportError:
        raise ImportError(
            f"swanlab=True but the swanlab package is not installed. {INSTALL_HINT}"
        ) from None
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    return swanlab.init(
        project=project,
        experiment_name=experiment_name,
        config=dict(config),
        mode=mode,
        log_dir=str(log_dir),
    )


__all__ = [
    "INSTALL_HINT",
    "TRACKERS",
    "loggable",
    "start_swanlab",
    "start_trackio",
    "tracker_settings",
]
