"""GRPO working on a CPU: train SmolLM2-135M, then score it on held-out problems.

End to end, on the local engine, in one process per seed:

1. evaluate the base model (greedy) on held-out arithmetic word problems;
2. train with GRPO on disjoint training problems;
3. evaluate the trained weights on the same held-out problems;
4. write the numbers (JSON), a plot (PNG) and, with ``--record``, a recorded run
   (``grpo_helpers.results.recorded_runs``) that notebooks 05-07 plot beside a
   learner's run;
5. print one line per seed, then a ``RESULT`` line: exact and lenient accuracy
   before -> after with McNemar's p, for every seed.

Two presets:

``--preset notebook``
    Notebook 05's full defaults exactly (the sync loop), evaluated as notebook 07
    does (100 held-out problems, greedy). What ``make series`` shows.
``--preset demo``
    Notebook 06's loop (async) at notebook 05's settings but 44 steps instead of
    30, completions of at most 32 tokens instead of 48, temperature 0.8 instead of
    0.6 and learning rate 4e-4 instead of 2e-4, scored on 200 held-out problems
    instead of 100; sized for 15 minutes per seed on 2 cores (each run prints its
    own time): the README's second results block. The evaluations run 64
    questions at a time and the few-shot prompt they share once
    (``bench/eval_speed.py``), which buys the extra steps; the learning rate moves
    the weak seed (seed 1) off its plateau (``bench/results/demo-lr-2e-4/``).

Run::

    python bench/cpu_grpo_demo.py --preset notebook --seeds 0 1 2
    python bench/cpu_grpo_demo.py --preset demo --seeds 0 1 2
    python bench/cpu_grpo_demo.py --preset notebook --seeds 0 \\
        --record data/reference_runs/notebook-defaults
    python bench/cpu_grpo_demo.py --quick     # tiny-random, seconds: a smoke run
    python bench/cpu_grpo_demo.py --table \\
        bench/results/cpu_grpo_demo-demo-seeds0-1-2.json  # the README's rows again

Every number printed is measured in this run; nothing is hard-coded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import common
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from grpo_helpers import data, plotting, presets, prompts, run_files, training  # noqa: E402
from grpo_helpers.config import GRPOConfig, add_arguments  # noqa: E402
from grpo_helpers.results import evaluation, facts, recorded_runs, report  # noqa: E402

ROOT = common.ROOT
#: Each preset is the package's run and scoring (``grpo_helpers.presets``), the loop
#: it trains in, and what else it scores: the prompt-only baselines, and the weights
#: after ``eval_at`` steps (None: only at the end).
PRESETS: dict[str, dict[str, Any]] = {
    "notebook": {
        **presets.NOTEBOOK,
        **presets.NOTEBOOK_EVAL,
        "mode": "sync",
        "prompt_baselines": True,
        "eval_at": 8,
    },
    "demo": {
        **presets.DEMO,
        **presets.DEMO_EVAL,
        "mode": "async",
        "prompt_baselines": False,
        "eval_at": None,
    },
    "quick": {
        **presets.notebook_run(fast=True),
        **presets.FAST_EVAL,
        "mode": "sync",
        "prompt_baselines": True,
        "eval_at": 1,
    },
}
#: The scoring flags: ``--eval-questions`` and the like override the preset's.
SCORING = {
    "eval_questions": int,
    "eval_max_tokens": int,
    "gsm8k_questions": int,
    "gsm8k_max_tokens": int,
    "prompt_baselines": int,
    "eval_at": int,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.parser(__doc__, model=False, quick="tiny-random, a smoke run")
    p.add_argument("--preset", choices=sorted(PRESETS), default="notebook")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    run_knobs = [k for k in PRESETS["notebook"] if k not in presets.EVAL_KEYS]
    add_arguments(p, suppress=True, only=["base_model", *run_knobs])
    for name, kind in SCORING.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None)
    p.add_argument("--mode", choices=("sync", "async"), default=None)
    p.add_argument(
        "--split",
        choices=("validation", "test"),
        default="test",
        help="held-out problems to score: 'validation' for pilots that choose "
        "settings, 'test' (the default) for reported results, which no pilot scores",
    )
    p.add_argument("--out", default="bench/results", help="JSON and PNG go here")
    p.add_argument("--runs", default="runs/cpu-grpo-demo", help="run directories")
    p.add_argument(
        "--record", default=None, help="write the first seed's recorded run here"
    )
    p.add_argument(
        "--table",
        metavar="RESULTS.json",
        nargs="+",
        default=None,
        help="print the README's rows of saved runs (JSON files this bench wrote, "
        "one per seed or one for several, in the order given); trains nothing, "
        "takes no other option",
    )
    args = p.parse_args(argv)
    if args.table is not None:
        args.results = _tables(p, args, sys.argv[1:] if argv is None else argv)
        return args
    if args.quick:
        args.preset = "quick"
    settings = dict(PRESETS[args.preset])
    for name in [*settings, "base_model"]:
        if getattr(args, name, None) is not None:
            settings[name] = getattr(args, name)
    args.base_model = settings.pop("base_model", None) or common.MODEL
    args.settings = settings
    return args


def _tables(
    p: argparse.ArgumentParser, args: argparse.Namespace, given: list[str]
) -> list[dict[str, Any]]:
    """The saved runs ``--table`` names, read; ``--table`` takes no other option."""
    alone = [["--table", *args.table]]
    if len(args.table) == 1:
        alone.append([f"--table={args.table[0]}"])
    if list(given) not in alone:
        p.error("--table takes no other option: it only re-prints saved runs")
    results: list[dict[str, Any]] = []
    for table in args.table:
        try:
            results += load_results(Path(table))
        except (OSError, ValueError, TypeError) as error:
            p.error(
                f"--table {table}: cannot read it as this bench's JSON "
                f"({error}); pass one it wrote, such as "
                "bench/results/cpu_grpo_demo-demo-seeds0-1-2.json"
            )
    return results


def run_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Train and evaluate one seed; returns its numbers (and writes its files).

    The steps: score the base model (and the prompt-only baselines), train (scoring
    the weights after ``eval_at`` steps on the way), score the trained weights (and
    both models on GSM8K), then write the numbers, a figure and the recorded run.
    """
    s = args.settings
    name = f"{args.preset}-seed{seed}"
    run_dir = ROOT / args.runs / name
    config = GRPOConfig(
        **{k: v for k, v in s.items() if k not in _NOT_RUN},
        base_model=args.base_model,
        backend="local",
        seed=seed,
        weights_name=name,
        run_dir=str(run_dir),
        save_every=0,
    )
    started = time.time()
    service = common.connect(run_dir=run_dir / "checkpoints")
    held_out = data.load_split(config, args.split).select(range(s["eval_questions"]))
    score = _Scorer(service, config, held_out, s["eval_max_tokens"])
    more = score.prompt_baselines() if s["prompt_baselines"] else {}
    t_train = time.time()
    result, early = _train(args, config, service, score)
    train_seconds = time.time() - t_train
    if early is not None:  # the early evaluation's minutes are not training
        train_seconds -= early.summary["seconds"] or 0.0
    trained_sampler = service.create_sampling_client(
        base_model=config.model_name, model_path=result.weights_path
    )
    trained = score(trained_sampler, "GRPO")
    if s["gsm8k_questions"]:  # GSM8K's own test questions, which the run never saw
        more |= score.gsm8k(trained_sampler, s)
    times = {
        "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.time() - started, 1),
    }
    scores = _Scores(score.base, trained, more, early)
    numbers = _numbers(args, seed, scores, times)
    _write(args, name, config, result, scores, times)
    path = ROOT / args.out / f"cpu_grpo_demo-{name}.json"
    path.write_text(json.dumps(numbers, indent=2))
    return numbers


@dataclass(frozen=True)
class _Scores:
    """A seed's evaluations: the base model, the trained weights, the others
    (prompt-only baselines, GSM8K) by name, and the weights after ``eval_at``
    steps (None: not scored)."""

    base: Any
    trained: Any
    more: dict[str, Any]
    early: Any


#: Keys of a preset that are not ``GRPOConfig`` fields.
_NOT_RUN = {*presets.EVAL_KEYS, "mode", "prompt_baselines", "eval_at"}


class _Scorer:
    """Greedy evaluations on one run's held-out problems (the base model first)."""

    def __init__(
        self, service: Any, config: GRPOConfig, held_out: Any, max_tokens: int
    ) -> None:
        self.held_out = held_out
        self.kwargs = dict(
            temperature=0.0, max_tokens=max_tokens, concurrency=64, progress=False
        )
        self.sampler = service.create_sampling_client(base_model=config.model_name)
        self.tokenizer = self.sampler.get_tokenizer()
        self.base = self(self.sampler, "base")

    def __call__(self, sampler: Any, name: str, **kwargs: Any) -> Any:
        return evaluation.evaluate(
            sampler, self.tokenizer, self.held_out, name=name, **self.kwargs, **kwargs
        )

    def prompt_baselines(self) -> dict[str, Any]:
        """The base model on the same questions, graded the same way, with another
        worked example or none (notebook 08, section 2)."""
        return {
            prompt: self(self.sampler, prompt, fewshot=prompts.PROMPT_EXAMPLES[prompt])
            for prompt in ("zero-shot", "arithmetic example")
        }

    def gsm8k(self, trained_sampler: Any, s: dict[str, Any]) -> dict[str, Any]:
        """Both models on GSM8K's first test questions."""
        gsm8k = data.load_gsm8k("test", limit=s["gsm8k_questions"])
        kwargs = {**self.kwargs, "max_tokens": s["gsm8k_max_tokens"]}
        return {
            f"gsm8k {model}": evaluation.evaluate(
                sampler, self.tokenizer, gsm8k, name=f"GSM8K {model}", **kwargs
            )
            for model, sampler in (("base", self.sampler), ("trained", trained_sampler))
        }


def _train(
    args: argparse.Namespace, config: GRPOConfig, service: Any, score: _Scorer
) -> tuple[Any, Any]:
    """Train the run; with ``eval_at``, stop after that many steps, score the
    weights, then resume to the end (the same run, checkpointed)."""
    s = args.settings
    train = training.train_sync if s["mode"] == "sync" else training.train_async
    eval_at = s["eval_at"]
    if not (eval_at and 0 < eval_at < config.steps):
        return _run(train, config, service, overwrite=True), None
    first = _run(train, replace(config, steps=eval_at), service, overwrite=True)
    early_sampler = service.create_sampling_client(
        base_model=config.model_name, model_path=first.weights_path
    )
    early = score(early_sampler, "early")
    return _run(train, config, service, resume=True), early


def _numbers(
    args: argparse.Namespace, seed: int, scores: _Scores, times: dict[str, float]
) -> dict[str, Any]:
    """One seed's numbers, as the JSON files and the README's tables hold them."""
    s = args.settings
    base, trained, more, early = scores.base, scores.trained, scores.more, scores.early
    numbers = {
        "preset": args.preset,
        "seed": seed,
        "split": args.split,
        "settings": {**s, "base_model": args.base_model},
        "summary": recorded_runs.summarize_records(base.records, trained.records),
        "base": _eval_numbers(base.summary),
        "trained": _eval_numbers(trained.summary),
        **times,
        "seconds_per_step": round(times["train_seconds"] / max(s["steps"], 1), 1),
    }
    if more:
        numbers["more"] = more_numbers(base, trained, more)
    if early is not None:
        numbers["early"] = {
            "step": s["eval_at"],
            **_eval_numbers(early.summary),
            "vs_base": recorded_runs.summarize_records(base.records, early.records),
        }
    return numbers


def _write(
    args: argparse.Namespace,
    name: str,
    config: GRPOConfig,
    result: Any,
    scores: _Scores,
    times: dict[str, float],
) -> None:
    """The seed's JSON, its figure, and its recorded run (every graded answer, so
    what it learned can be read again without training); ``--record`` also writes
    the first seed's where the notebooks read it."""
    s = args.settings
    base, trained, more, early = scores.base, scores.trained, scores.more, scores.early
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
    plotting.plot_training_curves(result.metrics, ax=axes[0])
    plotting.plot_accuracy_comparison(report.accuracy_rows([base, trained]), ax=axes[1])
    axes[1].set_title(f"Held-out arithmetic problems (n={s['eval_questions']}), greedy")
    fig.savefig(out / f"cpu_grpo_demo-{name}.png", dpi=100)
    plt.close(fig)
    command = "python bench/cpu_grpo_demo.py " + " ".join(
        shlex.quote(a) for a in (args.argv or [])
    )
    targets = [out / name]
    if args.record and config.seed == args.seeds[0]:
        targets.append(ROOT / args.record)
    for target in targets:
        recorded_runs.write_run(
            target,
            command=command.strip(),
            settings={**config.to_dict(), **s, "split": args.split},
            metrics=result.metrics,
            samples=run_files.load_samples(config.run_path),
            base=base.records,
            trained=trained.records,
            early=None if early is None else (s["eval_at"], early.records),
            evals={name: result.records for name, result in more.items()},
            extra=times,
        )


def _run(train: Any, config: GRPOConfig, service: Any, **kwargs: Any) -> Any:
    """``train_sync`` or ``train_async`` (then in its own event loop)."""
    if asyncio.iscoroutinefunction(train):
        return asyncio.run(train(config, service, progress=False, **kwargs))
    return train(config, service, progress=False, **kwargs)


def more_numbers(
    base: Any, trained: Any, more: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The prompt-only baselines against the base model and against GRPO, and the
    GSM8K row (trained against base), each as McNemar's test on one set of
    questions."""
    out: dict[str, dict[str, Any]] = {}
    for name, result in more.items():
        entry = _eval_numbers(result.summary)
        entry["hit_max_tokens_frac"] = result.summary["hit_max_tokens_frac"]
        if name.startswith("gsm8k"):
            out[name] = entry
            continue
        entry["vs_base"] = recorded_runs.summarize_records(base.records, result.records)
        entry["grpo_vs_this"] = recorded_runs.summarize_records(
            result.records, trained.records
        )
        out[name] = entry
    if "gsm8k base" in more and "gsm8k trained" in more:
        out["gsm8k"] = recorded_runs.summarize_records(
            more["gsm8k base"].records, more["gsm8k trained"].records
        )
    return out


def _eval_numbers(summary: dict[str, Any]) -> dict[str, Any]:
    keys = ("n", "exact_acc", "exact_ci", "lenient_acc", "lenient_ci", "boxed_frac")
    return {k: summary[k] for k in keys}


def line(numbers: dict[str, Any]) -> str:
    s = numbers["summary"]
    e, le = s["exact"], s["lenient"]
    return (
        f"seed {numbers['seed']}: exact {e['before']:.0%} -> {e['after']:.0%} "
        f"(p = {e['p_value']:.2g}); lenient {le['before']:.0%} -> "
        f"{le['after']:.0%} (p = {le['p_value']:.2g}); training "
        f"{numbers['train_seconds'] / 60:.1f} min, total "
        f"{numbers['total_seconds'] / 60:.1f} min"
    )


#: The issue's bar for the longer run: exact and lenient gains, in points.
BARS = facts.BARS
load_results = facts.load_seed_results
markdown_table = facts.seed_table


def _pct(x: float) -> str:
    return f"{x:.0%}" if abs(x * 100 - round(x * 100)) < 1e-9 else f"{x:.1%}"


def _best_prompt(more: dict[str, Any], base: dict[str, Any]) -> tuple[str, float]:
    """The prompt with the highest exact accuracy among the series' own (the base
    row) and the prompt-only baselines, on the same questions."""
    scores = {"strawberry example": base["exact_acc"]}
    scores |= {k: v["exact_acc"] for k, v in more.items() if "vs_base" in v}
    best = max(scores, key=lambda k: scores[k])
    return best, scores[best]


def more_table(results: list[dict[str, Any]]) -> str:
    """The README's rows on what prompting alone buys and on GSM8K, per seed: the
    base model's exact accuracy with each prompt, GRPO against the best prompt
    (paired, exact and lenient), and GSM8K ``test[:n]`` before -> after."""
    lines = [
        "| seed | base, strawberry / zero-shot / arithmetic example (exact) "
        "| GRPO vs the best prompt: exact (p) | lenient (p) "
        "| GSM8K exact: before -> after (p) | GSM8K lenient (p) | GSM8K cut off |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in results:
        more = n.get("more")
        if not more:
            continue
        prompts_ = [n["base"]["exact_acc"]] + [
            more[k]["exact_acc"] for k in ("zero-shot", "arithmetic example")
        ]
        best, _ = _best_prompt(more, n["base"])
        cells = []
        for grade in ("exact", "lenient"):
            if best == "strawberry example":
                g = n["summary"][grade]
            else:
                g = more[best]["grpo_vs_this"][grade]
            cells.append(
                f"{_pct(g['before'])} -> {_pct(g['after'])} (p = {g['p_value']:.2g})"
            )
        gsm = more.get("gsm8k")
        gsm_cells = ["", "", ""]
        if gsm:
            for i, grade in enumerate(("exact", "lenient")):
                g = gsm[grade]
                gsm_cells[i] = (
                    f"{_pct(g['before'])} -> {_pct(g['after'])} "
                    f"(p = {g['p_value']:.2g})"
                )
            gsm_cells[2] = (
                f"{_pct(more['gsm8k base']['hit_max_tokens_frac'])} / "
                f"{_pct(more['gsm8k trained']['hit_max_tokens_frac'])}"
            )
        lines.append(
            f"| seed {n['seed']} | {' / '.join(_pct(x) for x in prompts_)} "
            f"| {best}: {cells[0]} | {cells[1]} | {' | '.join(gsm_cells)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    if argv is None:
        argv = sys.argv[1:]
    args = parse_args(argv)
    if args.table is not None:  # re-print a saved run's rows; trains nothing
        print(markdown_table(args.results))
        if any("more" in n for n in args.results):
            print()
            print(more_table(args.results))
        return args.results
    args.argv = list(argv)
    print(f"preset {args.preset}: {json.dumps(args.settings)}", flush=True)
    results = []
    for seed in args.seeds:
        numbers = run_seed(args, seed)
        results.append(numbers)
        print(line(numbers), flush=True)
    out = ROOT / args.out
    seeds = "-".join(str(s) for s in args.seeds)
    (out / f"cpu_grpo_demo-{args.preset}-seeds{seeds}.json").write_text(
        json.dumps(results, indent=2)
    )
    parts = []
    for n in results:
        e, le = n["summary"]["exact"], n["summary"]["lenient"]
        parts.append(
            f"seed {n['seed']} exact {e['before']:.0%}->{e['after']:.0%} "
            f"p={e['p_value']:.1g} lenient {le['before']:.0%}->{le['after']:.0%} "
            f"p={le['p_value']:.1g}"
        )
    print(markdown_table(results))
    if any("more" in n for n in results):
        print()
        print(more_table(results))
    print("RESULT " + "; ".join(parts))
    return common.write_json(args, results)


if __name__ == "__main__":
    main()
