"""Every number that the prose of notebooks 07 and 08 and the README cites from the
recorded runs, recomputed from their per-question records.

A sentence that explains a result quotes numbers; this script is where they come
from, and ``tests/test_claims.py`` checks that each phrase below appears, word for
word, where the text cites it. Re-record a run and the test says which sentences
to rewrite.

Usage::

    python bench/recorded_facts.py          # every fact, one per line
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from grpo_helpers import ablation, answers, prompts, reference, report


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _p(p: float) -> str:
    return f"p = {p:.2g}"


def _no_expression(records: pd.DataFrame) -> str:
    """How many answers write no ``a op b = c`` expression, as "k of n"."""
    count = sum(
        answers.deciding_operation(c, None) is None for c in records["completion"]
    )
    return f"{count} of {len(records)}"


def _compare(before: pd.DataFrame, after: pd.DataFrame, grade: str) -> str:
    c = report.compare(before, after, grade, n_bootstrap=0)
    return f"{_pct(c.base_acc)} -> {_pct(c.trained_acc)} ({_p(c.p_value)})"


def run_facts(name: str = reference.DEFAULT_RUN) -> dict[str, str]:
    """Facts of one recorded run (notebook 07 and the README)."""
    run = reference.load_run(name)
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
        for c in answers.CLASSES:
            facts[f"{stage}: {c}"] = f"{int(counts.get(c, 0))} of {len(cls)}"
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
                for c, count in cls.value_counts().items():
                    facts[f"{prompt}: {c}"] = f"{count} of {len(cls)}"
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
    """Facts of the shaped-reward run (notebook 07, section 11), with its trained
    model against the default run's on the same questions."""
    facts = run_facts("shaped-reward")
    defaults, shaped = reference.load_run(), reference.load_run("shaped-reward")
    for grade in ("exact", "lenient"):
        c = report.compare(defaults.trained, shaped.trained, grade)
        facts[f"shaped vs defaults {grade}"] = (
            f"{_pct(c.base_acc)} -> {_pct(c.trained_acc)}, "
            f"{100 * c.difference:+.0f} points, McNemar {_p(c.p_value)}"
        )
    return facts


def _learning(row: pd.Series) -> str:
    """One run's held-out accuracy before -> after, with p, on both grades (a row
    of ``ablation.baseline_learning``)."""
    return ", ".join(
        f"{grade} {_pct(row[f'{grade} before'])} -> {_pct(row[f'{grade} after'])} "
        f"({_p(row[f'{grade} p'])})"
        for grade in ("exact", "lenient")
    )


def _listed(items: list[str]) -> str:
    """``a`` or ``a and b`` or ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def _seeds(seeds: list[int]) -> str:
    """``seed 2`` or ``seeds 0 and 1`` or ``seeds 0, 1 and 3``."""
    return ("seed " if len(seeds) == 1 else "seeds ") + _listed(list(map(str, seeds)))


def ablation_facts(directory: Path = ablation.ABLATION_DIR) -> dict[str, str]:
    """Facts of the recorded ablation (notebook 08, section 7).

    The baseline's learning is given for every recorded seed; the rest reads only
    the seeds whose baseline learned (``ablation.learned_seeds``), as notebook 08
    does. A variant's step and gradient facts cover every such seed recorded for
    it and for the baseline: the steps whose reward equals the baseline's are
    counted over all of them, and the gradient ratio spans the lowest to the
    highest of any step.
    """
    recorded = ablation.load_results(directory)
    facts: dict[str, str] = {}
    if not recorded:
        return facts
    for _, row in ablation.baseline_learning(recorded).iterrows():
        facts[f"baseline seed {row['seed']}"] = _learning(row)
    # everything below reads the seeds whose baseline learned, as notebook 08 does
    read = ablation.learned_seeds(recorded)
    left = sorted({r["seed"] for r in recorded} - set(read))
    facts["seeds read"] = _seeds(read)
    facts["seeds left out"] = _seeds(left) if left else "none"
    # what each variant did on a seed left out (no baseline to measure it against)
    for seed in left:
        on_seed = [r for r in recorded if r["seed"] == seed]
        for variant in ablation.VARIANTS:
            if variant == "baseline":
                continue
            table = ablation.baseline_learning(on_seed, variant)
            if not table.empty:
                facts[f"{variant} seed {seed}"] = _learning(table.iloc[0])
    results = ablation.on_learned_seeds(recorded)
    # how far each variant moved from its own base model, seed by seed
    for variant in ablation.VARIANTS:
        table = ablation.baseline_learning(results, variant)
        if not table.empty:
            gains = _listed(
                [
                    f"{100 * (row['exact after'] - row['exact before']):+.0f}"
                    for _, row in table.iterrows()
                ]
            )
            facts[f"{variant}: exact points gained"] = (
                f"{gains} points on {_seeds(list(table['seed']))}"
            )
    for grade in ("exact", "lenient"):
        table = ablation.paired_outcomes(results, grade)
        for row in table.itertuples():
            facts[f"{row.variant} {grade}"] = (
                f"{100 * row.difference:+.0f} points "
                f"[{100 * row.ci_low:+.0f}, {100 * row.ci_high:+.0f}], "
                f"{row.b} up, {row.c} down, {_p(row.p_value)}"
            )
    by_key = {(r["variant"], r["seed"]): pd.DataFrame(r["metrics"]) for r in results}
    same: dict[str, list[pd.Series]] = {}
    ratios: dict[str, list[pd.Series]] = {}
    for (variant, seed), metrics in by_key.items():
        base = by_key.get(("baseline", seed))
        if base is None or variant == "baseline":
            continue
        equal = metrics["reward_mean"] == base["reward_mean"]
        same.setdefault(variant, []).append(equal)
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
    # Dr. GRPO's constant: a gradient 1/max_tokens of the baseline's, until it is not
    records = {(r["variant"], r["seed"]): r for r in results}
    for variant, changes in ablation.VARIANTS.items():
        if changes.get("normalization") != "constant":
            continue
        off, unlike = [], []
        for seed in sorted(s for v, s in records if v == variant):
            metrics, base = by_key[(variant, seed)], by_key[("baseline", seed)]
            max_tokens = records[(variant, seed)]["settings"]["max_tokens"]
            scaled = metrics["grad_norm"] / base["grad_norm"] * max_tokens
            drift = metrics["step"][(scaled - 1).abs() > 1e-3]
            off.append(
                f"step {int(drift.iloc[0])} on seed {seed}"
                if len(drift)
                else f"none on seed {seed}"
            )
            mine, theirs = (
                records[(v, seed)]["held_out"][-1]["exact_by_question"]
                for v in (variant, "baseline")
            )
            unlike.append(
                f"{sum(a != b for a, b in zip(mine, theirs, strict=True))} "
                f"on seed {seed}"
            )
        facts[f"{variant}: first step off 1/max_tokens"] = _listed(off)
        facts[f"{variant}: test answers unlike the baseline's"] = _listed(unlike)
    mechanism = ablation.mechanism_table(results).groupby("variant", sort=False).mean()
    for variant, row in mechanism.iterrows():
        for name in ablation.MECHANISMS:
            value = row[name]
            if not (isinstance(value, float) and math.isnan(value)):
                facts[f"{variant}: {name}"] = f"{value:.3g}"
    return facts


def main() -> None:
    for title, facts in (("recorded run", run_facts()), ("ablation", ablation_facts())):
        print(f"# {title}")
        for key, value in facts.items():
            print(f"{key}: {value}")
    print("# shaped-reward run")
    for key, value in shaped_facts().items():
        if not key.startswith(("base:", "early:", "trained:")):
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
