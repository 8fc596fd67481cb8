"""``bench/vs_trl.py --quick``: the local engine against TRL's GRPOTrainer, one step
each on tiny-random, in seconds. Its numbers are not checked here (timing claims
come from the bench itself, run on a quiet machine); that it compares like for
like is: TRL's loss trains on exactly the local side's completions, with the same
advantages (none forced to be non-zero), and each phase has its ratio."""

from __future__ import annotations

import math

from benches import load_bench
from needs_trl import import_trl

import_trl()


def test_vs_trl_quick_trains_both_sides_on_the_same_completions(capsys):
    bench = load_bench("vs_trl")
    result = bench.main(["--quick"])
    out = capsys.readouterr().out
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


def test_trls_batch_holds_the_completions_it_is_given():
    """The swap from one side to the other loses and adds nothing: padding on the
    left of prompts and the right of completions, one advantage per completion."""
    bench = load_bench("vs_trl")
    shared = bench.Completions(
        prompts=[[5, 6, 7], [5, 6, 7], [8, 9]],
        completions=[[1], [2, 3, 4], [0, 0]],
        advantages=[0.5, -0.5, 0.0],
    )
    batch = bench.trl_batch(shared, pad=99)
    assert batch["prompt_ids"].tolist()[2] == [99, 8, 9]
    assert batch["completion_ids"].tolist()[0] == [1, 99, 99]
    assert int(batch["num_items_in_batch"]) == 6
    assert bench.trained_rows(batch).rows() == shared.rows()
