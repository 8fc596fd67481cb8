"""``bench/vs_trl.py --quick``: the local engine against TRL's GRPOTrainer, one step
each on tiny-random, in seconds. Its numbers are not checked here (timing claims
come from the bench itself, run on a quiet machine); that it runs both sides on the
same work and prints its result line is."""

from __future__ import annotations

import math

from benches import load_bench
from needs_trl import import_trl

import_trl()


def test_vs_trl_quick_runs_both_sides_and_prints_its_result_line(capsys):
    bench = load_bench("vs_trl")
    result = bench.main(["--quick"])
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert last.startswith("RESULT sampling ") and "peak-trl" in last
    for phase in ("sampling", "training", "step"):
        ratio = result["ratio_trl_over_local"][phase]
        assert math.isfinite(ratio) and ratio > 0
    # the same work: 2 prompts x 2 completions of at most 4 tokens on each side
    assert result["config"]["group_size"] == 2 and result["config"]["max_tokens"] == 4
    for side in ("local", "TRL"):
        assert 0 < result["sampled_tokens"][side] <= 2 * 2 * 4
        assert math.isfinite(result["peak_mb"][side])
