"""Every number the prose cites from the recorded runs, recomputed from the records.

A sentence that explains a result quotes numbers. The notebooks, the README and
``docs/`` quote them as they come from here: each fact is a short phrase, keyed by
name, recomputed from the recorded per-question records (their completions graded
again from the text, :func:`evaluation.regrade`, never a stored grade) or from the
recorded ablation. The notebooks print their sentences with :func:`say`, so their
numbers are never typed; ``tests/project/test_claims.py`` holds every sentence the
README and ``docs/`` cite to these phrases; ``python bench/recorded_facts.py`` prints
them all.

* :func:`run_facts`: one recorded run (the evaluation notebooks, the README);
* :func:`shaped_facts`: the shaped-reward run against the default one;
* :func:`ablation_facts`: the knobs, judged across seeds (:mod:`ablation`);
* :func:`sampler_facts`: notebook 11's variants, judged by the same rule;
* :func:`noise_pair_facts`: two runs of one configuration that parted;
* :func:`say`: a sentence with ``{fact}`` placeholders, filled in from one family
  (what the evaluation notebooks print);
* :func:`load_seed_results`, :func:`seed_table`, :func:`seed_summary`: the
  final-split seeds of notebook 05's defaults, as the README and
  ``docs/results.md`` tabulate them.

The module stays whole (about 620 lines): every family is read by one claims test
through :data:`FAMILIES`, and the families share their phrasing helpers (points,
seeds, lists), so a number is worded the same way wherever it is cited.

Introduced in: the README (results)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from grpo_helpers import prompts
from grpo_helpers.results import (
    ablation,
    answers,
    evaluation,
    recorded_runs,
    report,
    stats,
)

__all__ = [
    "BARS",
    "FAMILIES",
    "SEED_KEYS",
    "ablation_facts",
    "all_facts",
    "family",
    "front_table",
    "load_seed_results",
    "noise_pair_facts",
    "run_facts",
    "say",
    "seed_summary",
    "seed_level_table",
    "seed_table",
    "shaped_facts",
]


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _p(p: float) -> str:
    return f"p = {p:.2g}"


def _points(x: float) -> str:
    return f"{100 * x:+.0f}"


def _listed(items: Sequence[str]) -> str:
    """``a`` or ``a and b`` or ``a, b and c``."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def _seeds(seeds: Sequence[int]) -> str:
    """``seed 2`` or ``seeds 0 and 1`` or ``seeds 0, 1 and 3``."""
    return ("seed " if len(seeds) == 1 else "seeds ") + _listed([str(s) for s in seeds])


def _no_expression(records: pd.DataFrame) -> str:
    """How many answers write no ``a op b = c`` expression, as "k of n"."""
    count = sum(
        answers.deciding_operation(c, None) is None for c in records["completion"]
    )
    return f"{count} of {len(records)}"


def _compare(before: pd.DataFrame, after: pd.DataFrame, grade: str) -> str:
    c = report.compare(before, after, grade, n_bootstrap=0)
    return f"{_pct(c.base_acc)} -> {_pct(c.trained_acc)} ({_p(c.p_value)})"


def _regraded(run: recorded_runs.RecordedRun) -> recorded_runs.RecordedRun:
    """The run with every evaluation's grades recomputed from its completions."""
    run.base = evaluation.regrade(run.base)
    run.trained = evaluation.regrade(run.trained)
    if run.early is not None:
        run.early = evaluation.regrade(run.early)
    run.evals = {name: evaluation.regrade(r) for name, r in run.evals.items()}
    return run


def run_facts(name: str = recorded_runs.DEFAULT_RUN) -> dict[str, str]:
    """Facts of one recorded run: accuracies before -> after with McNemar's p, the
    answer classes, the gain split by source, the prompt-only baselines and GSM8K.
    """
    run = _regraded(recorded_runs.load_run(name))
    facts: dict[str, str] = {}
    for grade in ("exact", "lenient"):
        facts[f"{grade}"] = _compare(run.base, run.trained, grade)
        if run.early is not None:
            facts[f"{grade} early"] = _compare(run.base, run.early, grade)
    stages = {"base": run.base, "trained": run.trained}
    if run.early is not None:
        stages["early"] = run.early
    for stage, records in stages.items():
        facts[f"boxed {stage}"] = _pct(records["boxed"].mean())
    classes = {k: answers.classify_records(v) for k, v in stages.items()}
    for stage, records in stages.items():  # the example's words, copied or not
        repeats = sum(answers.copies_example(c) for c in records["completion"])
        facts[f"{stage}: repeats the example's words"] = f"{repeats} of {len(records)}"
        facts[f"{stage}: writes no expression"] = _no_expression(records)
    for stage, cls in classes.items():
        counts = cls.value_counts()
        for label in answers.CLASSES:
            facts[f"{stage}: {label}"] = f"{int(counts.get(label, 0))} of {len(cls)}"
    flips = answers.flip_breakdown(
        run.base, run.trained, classes["base"], classes["trained"]
    )
    sources = answers.gain_sources(flips)
    net = int(run.trained["exact"].sum() - run.base["exact"].sum())
    box, in_time, arithmetic = (int(x) for x in sources.values)
    facts["gain sources"] = (
        f"{net:+d} questions: {box:+d} from the box, {in_time:+d} from answering "
        f"in time and {arithmetic:+d} from the arithmetic"
    )
    if run.evals:
        prompt_records = {"strawberry example (base)": run.base}
        for prompt in ("zero-shot", "arithmetic example"):
            if prompt in run.evals:
                prompt_records[prompt] = run.evals[prompt]
                for grade in ("exact", "lenient", "boxed"):
                    acc = run.evals[prompt][grade].mean()
                    facts[f"{prompt} {grade}"] = _pct(acc)
                facts[f"{prompt}: writes no expression"] = _no_expression(
                    run.evals[prompt]
                )
                cls = answers.classify_records(
                    run.evals[prompt], prompts.PROMPT_EXAMPLES[prompt]
                )
                for label, count in cls.value_counts().items():
                    facts[f"{prompt}: {label}"] = f"{count} of {len(cls)}"
        best = max(prompt_records, key=lambda k: prompt_records[k]["exact"].mean())
        facts["best prompt"] = best
        for grade in ("exact", "lenient"):
            c = report.compare(prompt_records[best], run.trained, grade)
            facts[f"beyond prompting {grade}"] = (
                f"{_pct(c.base_acc)} -> {_pct(c.trained_acc)}, "
                f"{100 * c.difference:+.0f} points, McNemar {_p(c.p_value)}"
            )
        if "gsm8k base" in run.evals:
            base, trained = run.evals["gsm8k base"], run.evals["gsm8k trained"]
            for grade in ("exact", "lenient"):
                facts[f"gsm8k {grade}"] = _compare(base, trained, grade)
            for stage, records in (("base", base), ("trained", trained)):
                cut = records["completion_tokens"] >= run.meta["settings"].get(
                    "gsm8k_max_tokens", 128
                )
                facts[f"gsm8k cut off {stage}"] = _pct(cut.mean())
    return facts


def shaped_facts() -> dict[str, str]:
    """Facts of the shaped-reward run, with its trained model against the default
    run's on the same questions."""
    facts = run_facts("shaped-reward")
    defaults = _regraded(recorded_runs.load_run())
    shaped = _regraded(recorded_runs.load_run("shaped-reward"))
    for grade in ("exact", "lenient"):
        c = report.compare(defaults.trained, shaped.trained, grade)
        facts[f"shaped vs defaults {grade}"] = (
            f"{_pct(c.base_acc)} -> {_pct(c.trained_acc)}, "
            f"{100 * c.difference:+.0f} points, McNemar {_p(c.p_value)}"
        )
    return facts


def _learning(row: Mapping[str, Any]) -> str:
    """One run's held-out accuracy before -> after, with p, on both grades (a row
    of ``ablation.baseline_learning``)."""
    return ", ".join(
        f"{grade} {_pct(row[f'{grade} before'])} -> {_pct(row[f'{grade} after'])} "
        f"({_p(row[f'{grade} p'])})"
        for grade in ("exact", "lenient")
    )


def _learning_facts(recorded: list[dict[str, Any]]) -> dict[str, str]:
    """Each baseline seed's gain over its base model, and each variant's per seed."""
    facts: dict[str, str] = {}
    learning = ablation.baseline_learning(recorded)
    for row in learning.to_dict("records"):
        facts[f"baseline seed {row['seed']}"] = _learning(row)
    learned = learning[
        (learning["exact after"] > learning["exact before"])
        & (learning["exact p"] < 0.01)
        & (learning["lenient after"] > learning["lenient before"])
        & (learning["lenient p"] < 0.01)
    ]
    facts["baseline learned"] = f"{len(learned)} of {len(learning)} seeds"
    for variant in ablation.VARIANTS:
        table = ablation.baseline_learning(recorded, variant)
        if table.empty:
            continue
        gains = [
            _points(row["exact after"] - row["exact before"])
            for row in table.to_dict("records")
        ]
        facts[f"{variant}: exact points gained"] = (
            f"{_listed(gains)} points on {_seeds(list(table['seed']))}"
        )
    return facts


def _verdict_facts(recorded: list[dict[str, Any]], grade: str) -> dict[str, str]:
    """Each variant's seed-level verdict in one grade, and what the seeds can detect."""
    facts: dict[str, str] = {}
    table = ablation.seed_level(recorded, grade)
    for row, line in zip(
        table.to_dict("records"), ablation.verdicts(table), strict=True
    ):
        variant = row["variant"]
        facts[f"{variant} {grade}"] = line.split(": ", 1)[1]
        facts[f"{variant} {grade} verdict"] = ablation.verdict(row)
        facts[f"{variant} {grade} per seed"] = (
            f"{_listed([_points(d) for d in row['differences']])} points on "
            f"{_seeds(row['seed_list'])}"
        )
    if table.empty:
        return facts
    noise_sd = table.iloc[0]["noise_sd"]
    facts[f"noise sd {grade}"] = f"{100 * noise_sd:.0f} points"
    n = int(table["seeds"].min())
    facts[f"detectable {grade}"] = (
        f"{100 * stats.detectable_difference(noise_sd, n):.0f} points with {n} seeds"
    )
    needed = next(
        k for k in range(2, 1000) if stats.detectable_difference(noise_sd, k) <= 0.10
    )
    facts[f"seeds for 10 points {grade}"] = f"{needed} seeds"
    return facts


def _budget_facts(recorded: list[dict[str, Any]]) -> dict[str, str]:
    """A variant that samples more per step, at the baseline's sampling budget
    (``ablation.budget_level``): the difference per seed and over the seeds, and
    the completions its whole run sampled against the baseline's."""
    facts: dict[str, str] = {}
    for row in ablation.budget_level(recorded).to_dict("records"):
        variant = row["variant"]
        interval = (
            f" [{_points(row['ci_low'])}, {_points(row['ci_high'])}]"
            if row["seeds"] > 1
            else ""
        )
        facts[f"{variant}: at the baseline's budget"] = (
            f"{_points(row['mean'])} points{interval} "
            f"({_listed([_points(d) for d in row['differences']])} per seed, at "
            f"steps {_listed([str(s) for s in row['budget_steps']])})"
        )
        facts[f"{variant}: completions sampled"] = (
            f"{row['samples_ratio']:.1f} times the baseline's"
        )
        facts[f"{variant}: at the baseline's budget, verdict"] = ablation.verdict(row)
    return facts


def _knobs_summary(recorded: list[dict[str, Any]]) -> str:
    """One sentence: how many variants the seeds tell apart from the baseline."""
    exact = ablation.seed_level(recorded, "exact")
    apart = [
        f"{row['variant']} ({ablation.verdict(row).split(' than')[0]})"
        for row in exact.to_dict("records")
        if "distinguishable" not in ablation.verdict(row)
    ]
    n = int(exact["seeds"].min()) if not exact.empty else 0
    return (
        f"over {n} seeds, {len(apart)} of the {len(exact)} variants "
        + ("ends" if len(apart) == 1 else "end")
        + " distinguishable from the baseline in exact accuracy"
        + (f": {_listed(apart)}" if apart else "")
    )


def _mechanism_facts(recorded: list[dict[str, Any]]) -> dict[str, str]:
    """How each variant acts, step by step, whatever its outcome.

    The steps whose mean reward equals the baseline's (same seed), the range of
    its gradient norm over the baseline's, and the mean of every mechanism
    (``ablation.MECHANISMS``).
    """
    facts: dict[str, str] = {}
    by_key = {(r["variant"], r["seed"]): pd.DataFrame(r["metrics"]) for r in recorded}
    same: dict[str, list[pd.Series]] = {}
    ratios: dict[str, list[pd.Series]] = {}
    for (variant, seed), metrics in by_key.items():
        base = by_key.get(("baseline", seed))
        if base is None or variant == "baseline":
            continue
        same.setdefault(variant, []).append(
            metrics["reward_mean"] == base["reward_mean"]
        )
        ratios.setdefault(variant, []).append(metrics["grad_norm"] / base["grad_norm"])
    for variant, steps in same.items():
        equal = pd.concat(steps)
        facts[f"{variant}: steps with the baseline's reward"] = (
            f"{int(equal.sum())} of {len(equal)} steps"
        )
        ratio = pd.concat(ratios[variant])
        facts[f"{variant}: gradient norm / baseline's"] = (
            f"{ratio.min():.4f} to {ratio.max():.4f}"
        )
    mechanism = ablation.mechanism_table(recorded).groupby("variant", sort=False)
    for variant, row in mechanism.mean(numeric_only=True).iterrows():
        for name in ablation.MECHANISMS:
            value = row.get(name, math.nan)
            if not (isinstance(value, float) and math.isnan(value)):
                facts[f"{variant}: {name}"] = f"{value:.3g}"
    return facts


def ablation_facts(directory: Path = ablation.ABLATION_DIR) -> dict[str, str]:
    """Facts of the recorded ablation, judged across seeds.

    For every variant: its verdict sentence (``ablation.verdicts``, both grades),
    the per-seed differences from the baseline in points, its own gain over its
    base model per seed, and its mechanisms (``ablation.mechanism_table``). For the
    ablation as a whole: the seeds, the spread of the per-seed differences and the
    smallest difference that many seeds can detect.
    """
    recorded = ablation.knob_results(directory)
    if not recorded:
        return {}
    seeds = sorted({r["seed"] for r in recorded if r["variant"] == "baseline"})
    facts = {"seeds": _seeds(seeds), "seed count": str(len(seeds))}
    facts |= _learning_facts(recorded)
    for grade in ("exact", "lenient"):
        facts |= _verdict_facts(recorded, grade)
    facts["knobs summary"] = _knobs_summary(recorded)
    facts |= _budget_facts(recorded)
    facts |= _mechanism_facts(recorded)
    return facts


def noise_pair_facts() -> dict[str, str]:
    """Facts of :data:`ablation.NOISE_PAIR`: two runs of one configuration."""
    first, second = ablation.load_noise_pair()
    facts: dict[str, str] = {}
    differ = ablation.same_settings(first, second)
    facts["settings that differ"] = ", ".join(differ) if differ else "none"
    a, b = (pd.DataFrame(r["metrics"]) for r in (first, second))
    equal = (a["reward_mean"] == b["reward_mean"]).to_numpy()
    shared = int(np.argmin(equal)) if not equal.all() else len(equal)
    facts["steps shared from the start"] = f"the first {shared} steps"
    facts["steps with the same reward"] = f"{int(equal.sum())} of {len(equal)} steps"
    grads = a["grad_norm"].notna() & b["grad_norm"].notna()
    step = int(a.loc[grads, "step"].iloc[0])
    facts["first update's gradient norms"] = (
        f"{a.loc[a['step'] == step, 'grad_norm'].iloc[0]:.2f} and "
        f"{b.loc[b['step'] == step, 'grad_norm'].iloc[0]:.2f} at step {step}"
    )
    mine = np.asarray(first["held_out"][-1]["exact_by_question"], dtype=bool)
    theirs = np.asarray(second["held_out"][-1]["exact_by_question"], dtype=bool)
    only_first, only_second = int(np.sum(mine & ~theirs)), int(np.sum(theirs & ~mine))
    facts["final exact"] = f"{_pct(mine.mean())} and {_pct(theirs.mean())}"
    facts["flips"] = (
        f"{only_first} questions right only in the first, {only_second} only in "
        f"the second, McNemar {_p(stats.mcnemar_exact_p(only_first, only_second))}"
    )
    return facts


# ---------------------------------------------------------------- the seed tables

#: The bars the seed tables mark in bold: exact and lenient gains, in points, that
#: also have p < 0.01.
BARS = {"exact": 30.0, "lenient": 10.0}
#: What :func:`seed_table` reads of each seed's numbers.
SEED_KEYS = ("seed", "summary", "base", "trained", "train_seconds", "total_seconds")


def _table_pct(x: float) -> str:
    return f"{x:.0%}" if abs(x * 100 - round(x * 100)) < 1e-9 else f"{x:.1%}"


def _ci(interval: Sequence[float]) -> str:
    return f"[{interval[0] * 100:.1f}, {interval[1] * 100:.1f}]"


def load_seed_results(path: Path) -> list[dict[str, Any]]:
    """The numbers ``bench/cpu_grpo_demo.py`` wrote for one seed (``...-seedN.json``)
    or several (``...-seedsA-B.json``).

    Raises:
        ValueError: a seed lacks what :func:`seed_table` reads.
    """
    results = json.loads(Path(path).read_text())
    results = [results] if isinstance(results, dict) else results
    for numbers in results:
        missing = [key for key in SEED_KEYS if key not in numbers]
        if missing:
            raise ValueError(f"{path}: a seed without {', '.join(missing)}")
    return results


def seed_table(results: Sequence[Mapping[str, Any]]) -> str:
    """The rows of a seed table, from the numbers ``bench/cpu_grpo_demo.py`` wrote.

    Bold marks p < 0.01, and an accuracy whose gain also clears :data:`BARS`; each
    p is followed by the change in points. The last line counts the seeds that
    gained with p < 0.01, those that clear both bars and those that ran within 15
    minutes.
    """
    lines = [
        "| seed | training / total | held-out | exact: before -> after (p; points)"
        " | lenient: before -> after (p; points) | answers boxed |",
        "|---|---|---|---|---|---|",
    ]
    clear = significant = within = 0
    for n in results:
        cells, cleared = [], []
        for grade in ("exact", "lenient"):
            g, b, t = n["summary"][grade], n["base"], n["trained"]
            points = (g["after"] - g["before"]) * 100
            ok = g["p_value"] < 0.01 and points >= BARS[grade]
            cleared.append(ok)
            after = _table_pct(t[f"{grade}_acc"])
            p = f"p = {g['p_value']:.2g}"
            cells.append(
                f"{_table_pct(b[f'{grade}_acc'])} {_ci(b[f'{grade}_ci'])} -> "
                + (f"**{after}**" if ok else after)
                + f" {_ci(t[f'{grade}_ci'])} ("
                + (f"**{p}**" if g["p_value"] < 0.01 else p)
                + f"; {points:+.1f})"
            )
        clear += all(cleared)
        significant += all(
            n["summary"][grade]["p_value"] < 0.01
            and n["summary"][grade]["after"] > n["summary"][grade]["before"]
            for grade in ("exact", "lenient")
        )
        within += n["total_seconds"] <= 15 * 60
        split = n.get("split", "validation")  # runs before the splits: validation
        lines.append(
            f"| seed {n['seed']} | {n['train_seconds'] / 60:.1f} min / "
            f"{n['total_seconds'] / 60:.1f} min | {n['base']['n']} arithmetic "
            f"({split}) | "
            f"{cells[0]} | {cells[1]} | {_table_pct(n['base']['boxed_frac'])} -> "
            f"{_table_pct(n['trained']['boxed_frac'])} |"
        )
    lines.append("")
    lines.append(
        f"{significant} of {len(results)} seeds gain in exact and lenient accuracy, "
        "each with p < 0.01; "
        f"{clear} of {len(results)} clear both bars (exact "
        f"+{BARS['exact']:.0f}, lenient +{BARS['lenient']:.0f} points, p < 0.01); "
        f"{within} of {len(results)} ran within 15 minutes."
    )
    return "\n".join(lines)


def front_table(results: Sequence[Mapping[str, Any]]) -> str:
    """The README's short table: per seed, exact and lenient accuracy before ->
    after with 95% Wilson intervals and McNemar's p on the same questions."""
    lines = [
        "| seed | exact: before -> after (p) | lenient: before -> after (p) |",
        "|---|---|---|",
    ]
    for n in results:
        cells = []
        for grade in ("exact", "lenient"):
            b, t = n["base"], n["trained"]
            p = n["summary"][grade]["p_value"]
            cells.append(
                f"{_table_pct(b[f'{grade}_acc'])} {_ci(b[f'{grade}_ci'])} -> "
                f"{_table_pct(t[f'{grade}_acc'])} {_ci(t[f'{grade}_ci'])} "
                f"(p = {p:.2g})"
            )
        lines.append(f"| {n['seed']} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def seed_summary(
    results: Sequence[Mapping[str, Any]], grade: str = "exact"
) -> dict[str, Any]:
    """The mean gain (after - before, in accuracy) over seeds, with its t-interval
    over the seeds (where the mean of all runs lies), and the prediction interval
    for one new seed (where a learner's own run should fall).

    Returns:
        ``{"seeds": [...], "gains": [...], "mean": m, "low": l, "high": h,
        "next_low": l1, "next_high": h1}``.
    """
    gains = [
        n["summary"][grade]["after"] - n["summary"][grade]["before"] for n in results
    ]
    mean, low, high = stats.t_interval(gains)
    _, next_low, next_high = stats.prediction_interval(gains)
    return {
        "seeds": [int(n["seed"]) for n in results],
        "gains": gains,
        "mean": mean,
        "low": low,
        "high": high,
        "next_low": next_low,
        "next_high": next_high,
    }


def seed_level_table(results: Sequence[Mapping[str, Any]], grade: str = "exact") -> str:
    """``docs/results.md``'s table of the knobs judged across seeds: per variant,
    the per-seed differences from the baseline, their mean with a 95% t-interval,
    the signs, the sign-flip p and the verdict (``ablation.seed_level``)."""
    lines = [
        "| variant | per seed (points) | mean [95% t-interval] | up / down / tied "
        "| sign-flip p | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for row in ablation.seed_level(results, grade).to_dict("records"):
        per_seed = ", ".join(
            f"{seed}: {_points(d)}"
            for seed, d in zip(row["seed_list"], row["differences"], strict=True)
        )
        interval = (
            f"[{_points(row['ci_low'])}, {_points(row['ci_high'])}]"
            if row["seeds"] > 1
            else ""
        )
        lines.append(
            f"| {row['variant']} | {per_seed} | {_points(row['mean'])} {interval} | "
            f"{row['up']} / {row['down']} / {row['tied']} | {row['sign_p']:.2g} | "
            f"{ablation.verdict(row)} |"
        )
    return "\n".join(lines)


#: Every family of facts, by name, and the function that computes it.
def sampler_facts(directory: Path = ablation.ABLATION_DIR) -> dict[str, str]:
    """Facts of notebook 11's variants (``ablation.SAMPLER_VARIANTS``), judged
    across seeds by the knobs' rule: each verdict sentence (both grades), the
    per-seed differences, the seeds recorded per variant and one summary sentence.
    Empty while none of them is recorded."""
    recorded = ablation.sampler_results(directory)
    if not any(r["variant"] != "baseline" for r in recorded):
        return {}
    facts: dict[str, str] = {}
    for grade in ("exact", "lenient"):
        facts |= _verdict_facts(recorded, grade)
    facts["sampler summary"] = _knobs_summary(recorded)
    for variant in ablation.SAMPLER_VARIANTS:
        seeds = sorted(r["seed"] for r in recorded if r["variant"] == variant)
        facts[f"{variant} seeds"] = _seeds(seeds) if seeds else "none"
    return facts


FAMILIES: dict[str, Callable[[], dict[str, str]]] = {
    "run": run_facts,
    "shaped": shaped_facts,
    "ablation": ablation_facts,
    "sampler": sampler_facts,
    "noise pair": noise_pair_facts,
}


def all_facts() -> dict[str, dict[str, str]]:
    """Every family of facts, by name (what the claims test and the CLI read)."""
    return {name: compute() for name, compute in FAMILIES.items()}


@cache
def family(name: str) -> dict[str, str]:
    """One family of :data:`FAMILIES`, computed once per session (the records do not
    change while a notebook runs)."""
    if name not in FAMILIES:
        raise KeyError(f"unknown family {name!r}; choose one of {', '.join(FAMILIES)}")
    return FAMILIES[name]()


#: A placeholder of :func:`say`: the name of a fact between braces.
PLACEHOLDER = re.compile(r"\{([^{}]+)\}")


def say(template: str, source: str = "run") -> str:
    """``template`` with each ``{fact}`` replaced by that fact of the family
    ``source`` (a key of :data:`FAMILIES`), recomputed from the records.

    Raises:
        KeyError: a placeholder that names no fact of the family.

    Example:
        >>> say("the best prompt-only baseline is the {best prompt}")
        'the best prompt-only baseline is the arithmetic example'
    """
    values = family(source)

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"no fact {key!r} in the {source!r} facts")
        return values[key]

    return PLACEHOLDER.sub(fill, template)
