"""The numbers in the prose are the recorded runs' numbers, in their sentences.

The notebooks, the README and ``docs/`` explain results in sentences, and a
sentence quotes numbers. ``grpo_helpers.results.facts`` recomputes each of them from the
recorded records (completions graded again from their text).

* The evaluation notebooks (08, 09) type no recorded number: a code cell prints each
  with ``facts.say(template)``, and their markdown says what the numbers show. Each
  template must name recorded facts; the markdown around them must hold no typed
  percentage, p-value or count; and what it says in words (the largest part of a
  gain, "no measurable change", "on every seed") is checked against the facts here.
* The README and ``docs/`` cite *templates*: a piece of the sentence with ``{fact}``
  where a number goes. The template, filled in with the recorded facts, must appear
  word for word in the page section that cites it, bounded by anything but a digit, a
  letter or a decimal point: so a fact is anchored to the words around it, "3%" never
  matches inside "43%", and two facts cannot swap places unnoticed. Where two
  citations of one place render the same text, that text must appear as often.

Re-record a run and this test names the sentences to rewrite (``python
bench/recorded_facts.py`` prints the facts).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from functools import cache
from pathlib import Path

import nbformat
import pytest

from grpo_helpers.results import facts

ROOT = Path(__file__).resolve().parents[2]


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
    "Against the baseline: {tempered loss (TRL) exact per seed}.",
    "Against the baseline at 30 steps: {dynamic sampling (DAPO) exact per seed}.",
    "its 30 steps sampled {dynamic sampling (DAPO): completions sampled} completions.",
    "it stands at {dynamic sampling (DAPO): at the baseline's budget} against the "
    "baseline's end",
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

cites(
    "docs/results.md",
    "## When the sampler is not the trainer, judged across seeds",
    "sampler",
    "In words: {sampler summary}.",
)

# ---------------------------------------------------------------- the README
cites(
    "README.md",
    "## Results",
    "ablation",
    "same seed: {knobs summary}.",
    "Dynamic sampling's steps sampled {dynamic sampling (DAPO): completions sampled} "
    "completions; at the baseline's sampling budget it stood at {dynamic sampling "
    "(DAPO): at the baseline's budget}: {dynamic sampling (DAPO): at the baseline's "
    "budget, verdict}.",
)
cites("README.md", "## Results", "sampler", "same seed: {sampler summary}.")


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
    """Two per-seed gains in two sentences: swap them, and the citation check names
    both sentences."""
    values = recorded()["ablation"]
    templates = [
        "The baseline's exact accuracy rose {baseline: exact points gained}.",
        "The KL penalty's rose {KL beta=0.2: exact points gained}.",
    ]
    text = " ".join(render(t, values) for t in templates)
    assert not missing_citations(text, templates, values)
    kl = values["KL beta=0.2: exact points gained"].split(" points")[0]
    base = values["baseline: exact points gained"].split(" points")[0]
    swapped = text.replace(kl, "\0").replace(base, kl).replace("\0", base)
    assert swapped != text
    assert len(missing_citations(swapped, templates, values)) == 2


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
    table = facts.seed_level_table(ablation.knob_results()).splitlines()
    missing = [line for line in table if line not in text]
    assert not missing, missing


def test_the_sampler_table_is_generated_from_the_ablation():
    """docs/results.md's table of notebook 11's variants, cell by cell, is what
    ``facts.seed_level_table`` makes of their records and the baseline's."""
    from grpo_helpers.results import ablation

    text = page_section(
        "docs/results.md", "## When the sampler is not the trainer, judged across seeds"
    )
    table = facts.seed_level_table(ablation.sampler_results()).splitlines()
    missing = [line for line in table if line not in text]
    assert not missing, missing


def test_the_readme_table_is_generated_from_the_seed_records():
    """Every line of the README's results table is what ``facts.front_table``
    prints for the six unused final seeds, and the summary quotes
    ``facts.seed_summary`` over them: the t-interval of the mean and the
    prediction interval for one new seed."""
    results = seed_results("worked-v2", UNUSED_SEEDS)
    assert all(r["split"] == "test" for r in results)
    text = page_section("README.md", "## Results")
    missing = [
        line for line in facts.front_table(results).splitlines() if line not in text
    ]
    assert not missing, missing
    for low, high in (("low", "high"), ("next_low", "next_high")):
        parts = []
        for grade in ("exact", "lenient"):
            s = facts.seed_summary(results, grade)
            parts.append(
                f"{grade} {100 * s['mean']:+.0f} points [{100 * s[low]:+.0f}, "
                f"{100 * s[high]:+.0f}]"
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


# ------------------------------------------------ the evaluation notebooks (08, 09)
#: Where the notebooks' recorded numbers are printed: every ``facts.say`` call.
SAY = "say"


def say_calls(stem: str) -> list[tuple[str, str]]:
    """Every ``facts.say(template[, family])`` of a notebook's code cells, and each
    template of a loop ``for line in (...): print(facts.say(line, family))``."""
    nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", 4)
    calls = []
    for cell in nb.cells:
        if cell.cell_type != "code" or f"facts.{SAY}(" not in cell.source:
            continue
        tree = ast.parse(cell.source)
        loops = {  # loops over a tuple of strings: the templates they print
            node.target.id: [e.value for e in node.iter.elts]
            for node in ast.walk(tree)
            if isinstance(node, ast.For)
            and isinstance(node.target, ast.Name)
            and isinstance(node.iter, ast.Tuple)
            and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str)
                for e in node.iter.elts
            )
        }
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == SAY
            ):
                continue
            first, *rest = node.args
            family = ast.literal_eval(rest[0]) if rest else "run"
            if isinstance(first, ast.Name):
                calls += [(template, family) for template in loops[first.id]]
            else:
                calls.append((ast.literal_eval(first), family))
    return calls


@pytest.mark.parametrize("stem", [NB08, NB09])
def test_the_notebooks_print_recorded_facts(stem):
    """Each template a notebook prints names facts of its family (``facts.say``
    raises on one that names none), and fills in to a sentence with no braces."""
    calls = say_calls(stem)
    assert calls, stem
    for template, family in calls:
        assert facts.PLACEHOLDER.search(template), template
        out = render(template, recorded()[family])
        assert "{" not in out and "}" not in out, out


#: Where the markdown explains recorded numbers that a code cell prints.
READINGS = {
    NB08: ("**Reading it.**", "## Summary"),
    NB09: ("**Reading it.**", "## What this ablation supports", "**How much these"),
}


#: A typed recorded number: a percentage, a p-value, "k of n", a signed count.
TYPED = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?%|\bp = \d|\b\d+ of \d+\b|[+-]\d+ (?:points|questions)"
)


#: Percentages that are conventions, not records.
CONVENTIONS = ("80% of the time", "95% t-interval")


@pytest.mark.parametrize("stem", [NB08, NB09])
def test_the_readings_type_no_recorded_number(stem):
    nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", 4)
    cells = [
        c.source
        for c in nb.cells
        if c.cell_type == "markdown" and c.source.startswith(READINGS[stem])
    ]
    assert len(cells) >= 3, stem
    for text in cells:
        for convention in CONVENTIONS:
            text = text.replace(convention, "")
        assert not TYPED.findall(_normal(text)), (stem, TYPED.findall(text))


def _count(phrase: str) -> int:
    """``"30 of 100"`` -> 30."""
    return int(phrase.split(" of ")[0])


def _accuracy(phrase: str) -> tuple[int, int, float]:
    """``"8% -> 38% (p = 1.4e-06)"`` -> (8, 38, 1.4e-06)."""
    before, after, p = re.fullmatch(
        r"(\d+)% -> (\d+)% \(p = ([^)]+)\)", phrase
    ).groups()
    return int(before), int(after), float(p)


def _p(phrase: str) -> float:
    return float(re.search(r"p = ([0-9.e+-]+)", phrase).group(1))


def _pct(phrase: str) -> int:
    return int(phrase.rstrip("%"))


def test_notebook_08_says_what_the_recorded_run_shows():
    """The words of notebook 08's readings and summary, against the facts."""
    run, shaped = recorded()["run"], recorded()["shaped"]
    box, in_time, arithmetic = (
        int(x)
        for x in re.search(
            r"([+-]\d+) from the box, ([+-]\d+) from answering in time and "
            r"([+-]\d+) from the arithmetic",
            run["gain sources"],
        ).groups()
    )
    # section 1: answering in time the largest part, the box the least
    assert in_time > arithmetic > box
    assert _count(run["base: copied the example"]) + _count(run["base: cut off"]) >= 25
    assert _count(run["trained: copied the example"]) == 0  # "does neither"
    assert _count(run["trained: cut off"]) == 0
    assert _count(run["base: right, unboxed"]) <= 10  # "few"
    n = int(run["trained: right, boxed"].split(" of ")[1])
    arithmetic_wrong = _count(run["trained: right operation, wrong result"]) + _count(
        run["trained: wrong operation"]
    )
    assert _count(run["trained: right, boxed"]) + arithmetic_wrong == n  # "all"
    assert _count(run["trained: repeats the example's words"]) == n  # "every"
    # section 2: the prompts
    assert run["zero-shot boxed"] == "0%"  # "boxes nothing"
    assert _count(run["zero-shot: cut off"]) >= 25  # "many"
    assert _pct(run["arithmetic example boxed"]) >= 90  # "almost every answer"
    assert _count(run["arithmetic example: writes no expression"]) > n / 2  # "most"
    base_exact, trained_exact, _ = _accuracy(run["exact"])
    assert abs(_pct(run["arithmetic example exact"]) - base_exact) <= 5
    assert run["best prompt"] == "arithmetic example"  # "that best prompt"
    for grade in ("exact", "lenient"):
        assert "+" in run[f"beyond prompting {grade}"]
        assert _p(run[f"beyond prompting {grade}"]) < 0.01
    assert _count(run["trained: writes no expression"]) == 0  # "every answer"
    # section 3: GSM8K
    for grade in ("exact", "lenient"):
        assert _accuracy(run[f"gsm8k {grade}"])[2] >= 0.05  # "no measurable change"
    assert _pct(run["gsm8k cut off base"]) >= 25  # "many"
    assert _pct(run["gsm8k cut off trained"]) <= 10  # "few"
    # section 4: the shaped reward, after 8 of 30 steps
    from grpo_helpers.results import recorded_runs

    shaped_run = recorded_runs.load_run("shaped-reward")
    assert shaped_run.meta["early_step"] == 8 and len(shaped_run.metrics) == 30
    assert _pct(shaped["boxed early"]) >= 90  # "almost every answer"
    assert _pct(shaped["boxed early"]) >= _pct(run["boxed early"]) + 20  # "far more"
    before, after, _ = _accuracy(shaped["exact early"])
    assert after < before  # "its exact accuracy fell"
    before, after, p = _accuracy(shaped["exact"])
    assert after > before and p < 0.01  # "some arithmetic too (p < 0.01)"


def _signed(phrase: str) -> list[int]:
    """``"+11, -29 and +0 points on seeds ..."`` -> [11, -29, 0]."""
    return [int(x) for x in re.findall(r"[+-]\d+", phrase.split(" points")[0])]


def test_notebook_09_says_what_the_records_show():
    """The words of notebook 09's readings, its opening and its summary (and
    ``docs/teaching.md``'s "20 points apart"), against the facts."""
    ablation_facts, pair = recorded()["ablation"], recorded()["noise pair"]
    # section 7: one configuration, two runs
    first, second = (int(x) for x in re.findall(r"(\d+)%", pair["final exact"]))
    assert first - second == 20  # "can end 20 points apart"
    assert _p(pair["flips"]) < 0.001  # "different at p < 0.001"
    nb = nbformat.read(ROOT / "notebooks" / f"{NB09}.ipynb", 4)
    texts = [_normal(c.source) for c in nb.cells] + [
        _normal((ROOT / "docs" / "teaching.md").read_text())
    ]
    assert sum("20 points apart" in t for t in texts) >= 3
    # what this ablation supports
    learned, seeds = ablation_facts["baseline learned"].split(" seeds")[0].split(" of ")
    assert learned == seeds  # "on every seed"
    kl, base = (
        float(ablation_facts[f"{v}: KL to base (k3)"])
        for v in ("KL beta=0.2", "baseline")
    )
    assert kl < base / 2  # "far below the baseline's"
    assert all(d < 0 for d in _signed(ablation_facts["KL beta=0.2 exact per seed"]))
    shared = ablation_facts["constant (Dr. GRPO): steps with the baseline's reward"]
    k, n = (int(x) for x in shared.split(" steps")[0].split(" of "))
    assert k >= 0.9 * n  # "almost every step"
    low, high = (
        float(x)
        for x in ablation_facts["sequence-mean: gradient norm / baseline's"].split(
            " to "
        )
    )
    assert high > 2 * low  # "changes from step to step"
    clip = {
        key.split(": ")[0]: float(value)
        for key, value in ablation_facts.items()
        if key.endswith(": clip fraction")
    }
    assert [v for v, fraction in clip.items() if fraction > 0] == ["ppo, mu=2"]
    shared = ablation_facts["binary reward: steps with the baseline's reward"]
    k, n = (int(x) for x in shared.split(" steps")[0].split(" of "))
    assert k < n / 2  # "fewer than half of their steps"
