"""The runs the TRL tests map and export: notebook 05's at its full defaults, and
one small enough for tiny-random on the CPU in seconds.
"""

from __future__ import annotations

from tiny import tiny

from grpo_helpers import presets
from grpo_helpers.settings import SMOLLM2

#: Notebook 05's run at its full defaults (``presets.NOTEBOOK``, its parameters cell).
NOTEBOOK_05 = dict(
    presets.NOTEBOOK,
    backend="local",
    base_model=SMOLLM2,
    seed=0,
    weights_name="nb05-sync",
    run_dir="runs/nb05-sync",
    save_every=0,
)

#: A run small enough for tiny-random on the CPU in seconds.
TINY = tiny(
    max_tokens=8, learning_rate=1e-2, temperature=1.0, seed=0, weights_name="tiny-trl"
)
