"""Does the learner's loop retrace the recorded run? Notebook 10's solution loop at
notebook 10's settings, step by step against ``recorded_runs.load_run()``.

Notebook 10 trains the learner's ``train_loop`` once its check passes and says
(``classroom.own_run.retrace``) whether its 30 steps equal the recorded run's. This
bench runs the solution's loop (``notebooks/solutions/10_grpo_whole.py``) the same
way, so the claim that a right loop retraces the recording is measured, not assumed.
A retrace needs the recording's CPU kernel path and thread count (one torch thread:
run it with ``OMP_NUM_THREADS=1``); elsewhere it parts at some step, and says which.

Run::

    OMP_NUM_THREADS=1 python bench/loop_retrace.py   # SmolLM2, 30 steps (~10 min)
    python bench/loop_retrace.py --quick             # tiny-random: nothing to retrace
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from pathlib import Path

import common

from grpo_helpers import config, data, engines, presets, settings
from grpo_helpers.classroom import own_run
from grpo_helpers.results import recorded_runs

SOLUTIONS = Path(__file__).resolve().parents[1] / "notebooks" / "solutions"


def _solution_loop():
    spec = importlib.util.spec_from_file_location(
        "nb10_solutions", SOLUTIONS / "10_grpo_whole.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.train_loop


def main(argv: list[str] | None = None) -> dict:
    p = common.parser(__doc__, model=False, quick="tiny-random, 2 steps (seconds)")
    args = p.parse_args(argv)
    run = presets.notebook_run(fast=args.quick) | {"seed": 0}
    with tempfile.TemporaryDirectory(prefix="loop-retrace-") as folder:
        run_config = config.GRPOConfig(
            backend="local", weights_name="nb10-loop", run_dir=f"{folder}/nb10", **run
        )
        service = engines.connect("local", run_dir=run_config.run_path / "checkpoints")
        rows = data.load_split(run_config, "train")
        started = time.perf_counter()
        history = own_run.history_frame(_solution_loop()(service, run_config, rows))
        seconds = time.perf_counter() - started
    said = own_run.retrace(history, run_config, recorded_runs.load_run())
    print(said)
    print(f"{len(history)} steps in {seconds:.0f} s, {settings.environment_report()}")
    return common.write_json(args, {"retrace": said, "steps": len(history)})


if __name__ == "__main__":
    main()
