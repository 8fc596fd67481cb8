"""Are the recorded base-model answers the ones this machine computes? One run.

Notebooks 07 and 08 read the base model's greedy answers from the recorded run
(``evaluate(..., reuse=recorded.answers(name))``) instead of computing them again,
when the model, the settings, the questions and the prompts match. This script
computes each of those evaluations here, with the same code path as the notebooks
(the local engine's base sampler, ``concurrency=64``), and prints per evaluation:
how many completions are identical to the recorded ones, how many grades differ,
the accuracies both ways, the seconds it took and the seconds reading took.

Greedy decoding repeats itself up to float noise: a different thread count or
batch can flip a near tie between two tokens, and the completion goes another way
from there. The count of differing completions says how often that happened.

Run (nothing else running; about five minutes on 2 CPU cores)::

    python bench/recorded_answers.py
    python bench/recorded_answers.py --out bench/results/recorded_answers.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import common
import torch

from grpo_helpers import data, prompts, provenance
from grpo_helpers.config import GRPOConfig
from grpo_helpers.results import evaluation, recorded_runs

NAMES = ("base", "zero-shot", "arithmetic example", "gsm8k base")


def questions_for(run: recorded_runs.RecordedRun, name: str) -> object:
    """The questions the recorded run asked for one evaluation (as notebook 07)."""
    s = run.meta["settings"]
    if name == "gsm8k base":  # recorded before the presets' names: gsm8k_n
        return data.load_gsm8k("test", limit=s.get("gsm8k_questions", s.get("gsm8k_n")))
    config = GRPOConfig(
        base_model=s["base_model"],
        dataset=s["dataset"],
        difficulty=s["difficulty"],
        seed=s["seed"],
    )
    n = s.get("eval_questions", s.get("eval_n"))  # eval_n: recorded before
    return data.load_split(config, s["split"]).select(range(n))


def main() -> None:
    parser = common.parser(__doc__, model=False, json_out=False)
    parser.add_argument("--run", default=recorded_runs.DEFAULT_RUN)
    parser.add_argument("--only", nargs="*", choices=NAMES, default=list(NAMES))
    parser.add_argument("--out", type=Path, help="also write the numbers as JSON")
    args = parser.parse_args()

    run = recorded_runs.load_run(args.run)
    service = common.connect()
    sampler = service.create_sampling_client(
        base_model=run.meta["settings"]["base_model"]
    )
    tokenizer = sampler.get_tokenizer()
    rows = []
    for name in args.only:
        recorded = run.answers(name)
        questions = questions_for(run, name)
        fewshot = prompts.PROMPT_EXAMPLES.get(name, prompts.FEWSHOT_PREFIX)
        settings = {
            "temperature": 0.0,
            "max_tokens": recorded.max_tokens,
            "concurrency": 64,
            "fewshot": fewshot,
            "progress": False,
        }
        started = time.perf_counter()
        read = evaluation.evaluate(
            sampler, tokenizer, questions, name=name, reuse=recorded, **settings
        )
        read_seconds = time.perf_counter() - started
        if "reused_from" not in read.settings:
            raise SystemExit(f"{name}: the recorded answers were not reused (above)")
        started = time.perf_counter()
        fresh = evaluation.evaluate(
            sampler, tokenizer, questions, name=name, **settings
        )
        seconds = time.perf_counter() - started
        same = (fresh.records["completion"] == read.records["completion"]).sum()
        grades = {
            grade: int((fresh.records[grade] != read.records[grade]).sum())
            for grade in ("exact", "lenient", "boxed")
        }
        rows.append(
            {
                "evaluation": name,
                "questions": len(fresh.records),
                "identical_completions": int(same),
                "grades_differing": grades,
                "exact_recorded": read.summary["exact_acc"],
                "exact_here": fresh.summary["exact_acc"],
                "lenient_recorded": read.summary["lenient_acc"],
                "lenient_here": fresh.summary["lenient_acc"],
                "seconds_computing": round(seconds, 1),
                "seconds_reading": round(read_seconds, 2),
            }
        )
        r = rows[-1]
        print(
            f"{name:<20} {r['identical_completions']}/{r['questions']} completions "
            f"identical; grades differing {grades}; exact {r['exact_recorded']:.0%} "
            f"recorded, {r['exact_here']:.0%} here; lenient "
            f"{r['lenient_recorded']:.0%} / {r['lenient_here']:.0%}; computing "
            f"{seconds:.1f} s, reading {read_seconds:.2f} s",
            flush=True,
        )
    total = sum(r["seconds_computing"] for r in rows)
    print(f"computing all: {total:.0f} s; torch threads {torch.get_num_threads()}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        result = {
            "command": "python bench/recorded_answers.py " + " ".join(sys.argv[1:]),
            "run": run.caption,
            "hardware": provenance.hardware(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rows": rows,
        }
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
