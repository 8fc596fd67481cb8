"""``bench/vs_trl.py --quick``: the local engine against TRL's GRPOTrainer, one step
each on tiny-random, in seconds. Its numbers are not checked here (timing claims
come from the bench itself, run on a quiet machine); that it compares like for
like is: TRL's loss trains on exactly the local side's completions, with the same
advantages (none forced to be non-zero), and each phase has its ratio."""

from __future__ import annotations

import math

from benches import bench_json
from needs_trl import import_trl

import_trl()


def test_vs_trl_quick_trains_both_sides_on_the_same_completions(tmp_path):
    """Both sides train on the same completions: what TRL's loss was given, read
    back from its batch (padding dropped), equals what the local engine sampled,
    so the swap from one side to the other loses and adds nothing."""
    result, out = bench_json("vs_trl", tmp_path, "--quick")
    last = out.strip().splitlines()[-1]
    assert last.startswith("RESULT sampling ") and "peak-trl" in last
    for phase in ("sampling", "training", "step"):
        ratio = result["ratio_trl_over_local"][phase]
        assert math.isfinite(ratio) and ratio > 0
    # 2 prompts x 2 completions of at most 4 tokens on each side
    assert result["config"]["group_size"] == 2 and result["config"]["max_tokens"] == 4
    for side in ("local", "TRL"):
        assert 0 < result["sampled_tokens"][side] <= 2 * 2 * 4
        assert math.isfinite(result["peak_mb"][side])
        assert result["sampling_seconds_per_token"][side] > 0
    # the same completions, prompts and advantages reached TRL's loss
    assert result["same_completions"] == [True]
    assert result["trained_tokens"]["TRL"] == result["trained_tokens"]["local"]
    assert "the same completions: True" in out
