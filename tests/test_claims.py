"""The numbers in the prose are the recorded runs' numbers, in their sentences.

The notebooks, the README and ``docs/`` explain results in sentences, and a
sentence quotes numbers. ``grpo_helpers.results.facts`` recomputes each of them from the
recorded records (completions graded again from their text). Every citation below
is a *template*: a piece of the sentence with ``{fact}`` where a number goes. The
template, filled in with the recorded facts, must appear word for word in the cell
or page section that cites it, bounded by anything but a digit, a letter or a
decimal point: so a fact is anchored to the words around it, "3%" never matches
inside "43%", and two facts cannot swap places unnoticed. Where two citations of one
place render the same text, that text must appear as often. Re-record a run and this
test names the sentences to rewrite (``python bench/recorded_facts.py`` prints the
facts).
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from pathlib import Path

import nbformat
import pytest

from grpo_helpers.results import facts

ROOT = Path(__file__).resolve().parent.parent
NB08 = "08_what_grpo_learned"
NB09 = "09_what_the_knobs_do"


@cache
def recorded() -> dict[str, dict[str, str]]:
    return facts.all_facts()


def markdown_cell(stem: str, start: str) -> str:
    """The markdown cell of a notebook that starts with ``start``."""
    nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", 4)
    found = [
        c.source
        for c in nb.cells
        if c.cell_type == "markdown" and c.source.startswith(start)
    ]
    assert len(found) == 1, f"{stem}: {len(found)} markdown cells start with {start!r}"
    return found[0]


def page_section(path: str, title: str) -> str:
    """The section of a markdown page under the heading ``title``, up to the next
    heading of the same or a higher level."""
    text = (ROOT / path).read_text()
    start = text.index(f"\n{title}\n")
    level = len(title) - len(title.lstrip("#"))
    following = re.compile(rf"\n#{{1,{level}}} ")
    found = following.search(text, start + 1)
    return text[start : found.start() if found else None]


def text_of(where: str, start: str) -> str:
    if where.endswith(".md"):
        return page_section(where, start)
    return markdown_cell(where, start)


def _normal(text: str) -> str:
    """Whitespace collapsed, and markdown's emphasis marks dropped."""
    return " ".join(text.replace("**", "").replace("*", "").split())


def render(template: str, values: dict[str, str]) -> str:
    """The template with each ``{key}`` replaced by its fact.

    Raises:
        KeyError: a key that names no recorded fact.
    """
    keys = re.findall(r"\{([^{}]+)\}", template)
    out = template
    for key in keys:
        out = out.replace("{" + key + "}", values[key])
    return _normal(out)


def occurrences(text: str, piece: str) -> int:
    """How often ``piece`` occurs in ``text`` bounded by no digit, letter or
    decimal part on either side (so "3%" does not occur in "43%", nor "3" in
    "3.5"); a full stop that ends the sentence is fine."""
    pattern = rf"(?<![\w.]){re.escape(piece)}(?!\w|\.\d)"
    return len(re.findall(pattern, text))


def missing_citations(
    text: str, templates: list[str], values: dict[str, str]
) -> list[str]:
    """The rendered templates that ``text`` lacks (or holds fewer times than the
    templates ask for it)."""
    text = _normal(text)
    wanted = Counter(render(t, values) for t in templates)
    return [
        f"{piece!r} (needed {count}x, found {occurrences(text, piece)}x)"
        for piece, count in wanted.items()
        if occurrences(text, piece) < count
    ]


#: (where, the start of the cell or the page heading, which facts, templates).
CITED: list[tuple[str, str, str, list[str]]] = []


def cites(where: str, start: str, source: str, *templates: str) -> None:
    CITED.append((where, start, source, list(templates)))


# --------------------------------------------------------------- notebook 08
cites(
    NB08,
    "**Reading it.** In the recorded run",
    "run",
    "the net exact gain is {gain sources}.",
    "{base: copied the example} base answers copied the strawberry example and "
    "{base: cut off} others were cut off",
    "only {base: right, unboxed} base answers had the right number without it",
    "{trained: right operation, wrong result} use the right operation and get a "
    "wrong result, {trained: wrong operation} the wrong operation",
    "{trained: repeats the example's words} trained answers open with the "
    "example's words",
)
cites(
    NB08,
    "**Reading it.** Neither prompt",
    "run",
    "the base model boxes nothing (exact {zero-shot exact}) and {zero-shot: cut off} "
    "answers are cut off",
    "it boxes {arithmetic example boxed} of its answers, but "
    "{arithmetic example: writes no expression} are a bare boxed number",
    "exact accuracy stays at {arithmetic example exact}",
    "The best prompt against the trained model, exact: {beyond prompting exact}; "
    "lenient: {beyond prompting lenient}.",
    "its answers write their expression ({trained: writes no expression} do not",
)
cites(
    NB08,
    "**Reading it.** On GSM8K",
    "run",
    "the recorded run goes exact {gsm8k exact} and lenient {gsm8k lenient}",
    "cut off {gsm8k cut off base} of the base model's answers and "
    "{gsm8k cut off trained} of the trained model's",
)
cites(
    NB08,
    "## Summary",
    "run",
    "In the recorded run: {gain sources}.",
    "buys the box ({arithmetic example boxed} of answers)",
    "GRPO against that best prompt, exact: {beyond prompting exact}.",
    "the recorded run shows no measurable change (exact {gsm8k exact}).",
)
cites(
    NB08,
    "**Reading it.** Read the shaped rows first.",
    "shaped",
    "After 8 steps the shaped run boxes {boxed early} of its answers while its exact "
    "accuracy goes {exact early};",
    "By step 30 it has learned some arithmetic too, exact {exact}.",
)
cites(
    NB08,
    "**Reading it.** Read the shaped rows first.",
    "run",
    "the default run boxes {boxed early} at that point.",
)

# --------------------------------------------------------------- notebook 09
cites(
    NB09,
    "**Reading it.** The two runs share",
    "noise pair",
    "The two runs share their rewards for {steps shared from the start}, then part: "
    "{steps with the same reward} share the reward.",
    "They end at {final exact} exact: {flips}.",
)

cites(
    NB09,
    "## What this ablation supports",
    "ablation",
    "over {seeds}.",
    "The baseline learns on {baseline learned} (both grades up, p < 0.01): "
    "its exact accuracy rose {baseline: exact points gained}.",
    "over the last five steps its k3 estimate averages {KL beta=0.2: KL to base (k3)}, "
    "against {baseline: KL to base (k3)} for the baseline, and its exact accuracy rose "
    "{KL beta=0.2: exact points gained}. Against the baseline: {KL beta=0.2 exact}.",
    "its runs had the baseline's reward at "
    "{constant (Dr. GRPO): steps with the baseline's reward}. Against the baseline: "
    "{constant (Dr. GRPO) exact}.",
)
cites(
    NB09,
    "- **Sequence-mean normalisation**",
    "ablation",
    "its gradient is {sequence-mean: gradient norm / baseline's} of the baseline's, so "
    "Adam cannot divide it out. Against the baseline: {sequence-mean exact}.",
    "a clip fraction of {ppo, mu=2: clip fraction} of its tokens over the run). "
    "Against the baseline: {ppo, mu=2 exact}.",
    "Std-scaled advantages against the baseline: {std-scaled advantages exact}.",
)
cites(
    NB09,
    "- **The binary reward**",
    "ablation",
    "its runs had the baseline's reward at "
    "{binary reward: steps with the baseline's reward}, and went "
    "{binary reward exact per seed} against it. Against the baseline: "
    "{binary reward exact}.",
    "the per-seed differences spread by {noise sd exact} (pooled over the variants), "
    "so these seeds would detect a true difference of {detectable exact} 80% of the "
    "time.",
)

# ------------------------------------------------------------ docs/results.md
cites(
    "docs/results.md",
    "## The knobs, judged across seeds",
    "ablation",
    "Recorded: {seeds}.",
    "In words: {knobs summary}. The baseline learned on {baseline learned}.",
    "The per-seed differences spread by {noise sd exact} (their standard deviation, "
    "pooled over the variants), so these seeds would detect a true difference of "
    "{detectable exact} 80% of the time",
)
cites(
    "docs/results.md",
    "## Why one configuration gave two results",
    "noise pair",
    "The two runs share their rewards for {steps shared from the start}, then part: "
    "{steps with the same reward} share the reward.",
    "They end at {final exact} exact on the same 100 test questions: {flips}.",
    "Their first update's gradient norms already differ: "
    "{first update's gradient norms}.",
)

# ------------------------------------------------------------ docs/teaching.md
cites(
    "docs/teaching.md",
    "## Model answers to the discussion questions",
    "ablation",
    "The recorded ablation ({seeds}) supports one kind of verdict with a direction, "
    "and no winner: {knobs summary}.",
    "would detect a true difference of about {detectable exact} 80% of the time.",
    "with the per-seed spread of {noise sd exact}, `stats.detectable_difference` says "
    "a 10-point difference needs about {seeds for 10 points exact}.",
)

# ---------------------------------------------------------------- the README
cites("README.md", "## Results", "ablation", "same seed: {knobs summary}.")
cites(
    "README.md",
    "## Results",
    "run",
    "Seed 0, the recorded run that the notebooks plot, went exact {exact}.",
    "What was learned (seed 0, notebook 08): {gain sources}.",
    "exact {beyond prompting exact}.",
    "exact {gsm8k exact}.",
)


@pytest.mark.parametrize(
    "where,start,source,templates",
    CITED,
    ids=[f"{w}:{s[:30]}:{f}" for w, s, f, _ in CITED],
)
def test_the_prose_quotes_the_recorded_numbers(where, start, source, templates):
    missing = missing_citations(text_of(where, start), templates, recorded()[source])
    assert not missing, (
        f"{where} ({start!r}) lacks these sentences as bench/recorded_facts.py "
        f"computes them: {missing}"
    )


def test_a_fact_never_matches_inside_another_number():
    values = {"a": "3%", "b": "0%"}
    assert missing_citations("exact 43% after", ["{a}"], values)
    assert missing_citations("went 10% -> 38%", ["{b}"], values)
    assert not missing_citations("exact 3% after and 0% before", ["{a}", "{b}"], values)
    assert missing_citations("exact 3.5%", ["{a}"], {"a": "3"})  # not inside 3.5


def test_two_facts_with_one_value_need_two_occurrences():
    values = {"exact": "1% -> 2% (p = 1)", "lenient": "1% -> 2% (p = 1)"}
    once = "On GSM8K: 1% -> 2% (p = 1) on both grades."
    assert missing_citations(once, ["{exact}", "{lenient}"], values)
    twice = "exact 1% -> 2% (p = 1) and lenient 1% -> 2% (p = 1)"
    assert not missing_citations(twice, ["{exact}", "{lenient}"], values)


def test_swapping_two_numbers_between_sentences_fails():
    """The knobs notebook's seed-level bullets: swap the KL penalty's per-seed
    gains with the baseline's, and the citation check names both sentences."""
    text = markdown_cell(NB09, "## What this ablation supports")
    values = recorded()["ablation"]
    kl = values["KL beta=0.2: exact points gained"].split(" points")[0]
    base = values["baseline: exact points gained"].split(" points")[0]
    templates = [
        t for w, s, f, ts in CITED if w == NB09 and f == "ablation" for t in ts
    ]
    templates = [t for t in templates if "exact points gained" in t]
    assert templates and not missing_citations(text, templates, values)
    swapped = text.replace(kl, "\0").replace(base, kl).replace("\0", base)
    assert swapped != text
    assert missing_citations(swapped, templates, values)


def test_the_facts_regrade_the_completions(monkeypatch):
    """A stored grade is never trusted: flipping every stored ``exact`` of the
    recorded run changes no fact."""
    from grpo_helpers.results import recorded_runs

    load = recorded_runs.load_run

    def tampered(name=recorded_runs.DEFAULT_RUN):
        run = load(name)
        run.trained = run.trained.assign(exact=~run.trained["exact"].astype(bool))
        run.base = run.base.assign(exact=~run.base["exact"].astype(bool))
        return run

    monkeypatch.setattr(recorded_runs, "load_run", tampered)
    assert facts.run_facts() == recorded()["run"]


# ------------------------------------------------------------ the seed tables
SEED_TABLES = ROOT / "bench" / "results"


def seed_results(folder: str, seeds: tuple[int, ...]) -> list[dict]:
    return [
        r
        for seed in seeds
        for r in facts.load_seed_results(
            SEED_TABLES / folder / f"cpu_grpo_demo-notebook-seed{seed}.json"
        )
    ]


#: The final-split seeds of notebook 05's defaults that no run had used (README).
UNUSED_SEEDS = (18, 19, 20, 21, 22, 23)


def test_the_knobs_table_is_generated_from_the_ablation():
    """docs/results.md's table of the knobs, cell by cell, is what
    ``facts.seed_level_table`` makes of the recorded ablation."""
    from grpo_helpers.results import ablation

    text = page_section("docs/results.md", "## The knobs, judged across seeds")
    table = facts.seed_level_table(ablation.load_results()).splitlines()
    missing = [line for line in table if line not in text]
    assert not missing, missing


def test_the_readme_table_is_generated_from_the_seed_records():
    """Every line of the README's results table is what ``facts.front_table``
    prints for the six unused final seeds, and the summary quotes
    ``facts.seed_summary`` over them."""
    results = seed_results("worked-v2", UNUSED_SEEDS)
    assert all(r["split"] == "test" for r in results)
    text = page_section("README.md", "## Results")
    missing = [
        line for line in facts.front_table(results).splitlines() if line not in text
    ]
    assert not missing, missing
    parts = []
    for grade in ("exact", "lenient"):
        s = facts.seed_summary(results, grade)
        parts.append(
            f"{grade} {100 * s['mean']:+.0f} points [{100 * s['low']:+.0f}, "
            f"{100 * s['high']:+.0f}]"
        )
    assert occurrences(_normal(text), " and ".join(parts)), parts


@pytest.mark.parametrize(
    ("folder", "seeds"),
    [
        ("notebook-final", (0, 1, 3, 5, 6, 7, 8, 9, 10, 11)),
        ("worked-final", (12, 13, 14, 15, 16, 17)),
        ("worked-v2", (0, *UNUSED_SEEDS)),
    ],
)
def test_the_results_page_tables_are_generated(folder, seeds):
    """docs/results.md's seed tables, cell by cell, are what ``facts.seed_table``
    prints from the seed records (``python bench/cpu_grpo_demo.py --table ...``)."""
    results = seed_results(folder, seeds)
    assert all(r["split"] == "test" for r in results)
    text = (ROOT / "docs" / "results.md").read_text()
    table = facts.seed_table(results)
    missing = [line for line in table.splitlines() if line and line not in text]
    assert not missing, (
        f"docs/results.md lacks these lines of `python bench/cpu_grpo_demo.py "
        f"--table` over {folder} seeds {seeds}: {missing}"
    )
