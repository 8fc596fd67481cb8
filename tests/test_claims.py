"""The numbers in the prose are the recorded runs' numbers.

Notebooks 07 and 08 and the README explain results in sentences, and a sentence
quotes numbers. ``bench/recorded_facts.py`` recomputes each of them from the
recorded per-question records; here every quoted fact must appear word for word in
the cell (or README section) that cites it. Re-record a run and this test names
the sentences to rewrite.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import nbformat
import pytest
from benches import load_bench

ROOT = Path(__file__).resolve().parent.parent


#: ``bench/<name>.py``, imported once per session.
bench_module = cache(load_bench)


@cache
def facts() -> dict[str, dict[str, str]]:
    module = bench_module("recorded_facts")
    return {
        "run": module.run_facts(),
        "shaped": module.shaped_facts(),
        "ablation": module.ablation_facts(),
    }


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


def readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n{title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


NB07 = "07_base_vs_grpo_eval"
NB08 = "08_what_the_knobs_do"

#: (where, the start of the cell or the README heading, which facts, keys quoted).
CITED: list[tuple[str, str, str, list[str]]] = []


def cites(where: str, start: str, source: str, *keys: str) -> None:
    CITED.append((where, start, source, list(keys)))


cites(
    NB07,
    "**Reading it.** In the recorded run",
    "run",
    "gain sources",
    "base: copied the example",
    "base: cut off",
    "base: right, unboxed",
    "trained: right operation, wrong result",
    "trained: wrong operation",
    "trained: repeats the example's words",
)
cites(
    NB07,
    "**Reading it.** Neither prompt",
    "run",
    "zero-shot exact",
    "zero-shot: cut off",
    "arithmetic example boxed",
    "arithmetic example: writes no expression",
    "arithmetic example exact",
    "beyond prompting exact",
    "beyond prompting lenient",
    "trained: writes no expression",
)
cites(
    NB07,
    "**Reading it.** On GSM8K",
    "run",
    "gsm8k exact",
    "gsm8k lenient",
    "gsm8k cut off base",
    "gsm8k cut off trained",
)
cites(
    NB07,
    "## Summary",
    "run",
    "gain sources",
    "arithmetic example boxed",
    "beyond prompting exact",
    "gsm8k exact",
)

cites(
    NB07,
    "**Reading it.** Read the shaped rows first.",
    "shaped",
    "boxed early",
    "exact early",
    "exact",
    "shaped vs defaults exact",
)
cites(
    NB07,
    "**Reading it.** Read the shaped rows first.",
    "run",
    "boxed early",
)
#: The baseline of the ablation on every recorded seed, quoted both in notebook 08
#: and in the README.
ABLATION_SEEDS = tuple(f"baseline seed {seed}" for seed in (0, 1, 2))
cites(
    NB08,
    "## 7. What this ablation supports",
    "ablation",
    "seeds read",
    "seeds left out",
    *ABLATION_SEEDS,
)
cites(
    NB08,
    "- **A KL penalty",
    "ablation",
    "KL beta=0.2: exact points gained",
    "baseline: exact points gained",
    "KL beta=0.2: KL to base (k3)",
    "baseline: KL to base (k3)",
    "KL beta=0.2 exact",
    "KL beta=0.2 lenient",
    "KL beta=0.2: boxed",
    "baseline: boxed",
)
cites(
    NB08,
    "- **The binary reward**",
    "ablation",
    "binary reward: steps with the baseline's reward",
    "binary reward exact",
    "binary reward lenient",
    "binary reward: boxed",
    "baseline: boxed",
)
cites(
    NB08,
    "- **Std-scaled advantages**",
    "ablation",
    "std-scaled advantages exact",
    "constant (Dr. GRPO): first step off 1/max_tokens",
    "constant (Dr. GRPO): steps with the baseline's reward",
    "constant (Dr. GRPO): test answers unlike the baseline's",
    "constant (Dr. GRPO) exact",
)
cites(
    NB08,
    "- **PPO with $\\mu = 2$**",
    "ablation",
    "ppo, mu=2: clip fraction",
    "ppo, mu=2 exact",
    "sequence-mean: gradient norm / baseline's",
    "sequence-mean: steps with the baseline's reward",
    "sequence-mean exact",
)

cites(
    "README",
    "## Results",
    "run",
    "gain sources",
    "exact early",
    "lenient early",
    "gsm8k exact",
    "gsm8k lenient",
    "arithmetic example: writes no expression",
    "arithmetic example boxed",
    "gsm8k cut off base",
)
cites("README", "## Results", "shaped", "exact", "lenient", "boxed early")
cites(
    "README",
    "### The recorded run",
    "ablation",
    *ABLATION_SEEDS,
    "KL beta=0.2 exact",
)


def text_of(where: str, start: str) -> str:
    return readme_section(start) if where == "README" else markdown_cell(where, start)


@pytest.mark.parametrize(
    "where,start,source,keys", CITED, ids=[f"{w}:{s[:30]}:{f}" for w, s, f, _ in CITED]
)
def test_the_prose_quotes_the_recorded_numbers(where, start, source, keys):
    text = " ".join(text_of(where, start).split())
    missing = [
        f"{key}: {facts()[source][key]!r}"
        for key in keys
        if " ".join(facts()[source][key].split()) not in text
    ]
    assert not missing, (
        f"{where} ({start!r}) does not quote, word for word, what "
        f"bench/recorded_facts.py computes: {missing}"
    )


#: The final-split runs of notebook 05's defaults, one JSON per seed.
FINAL_SEEDS = ROOT / "bench" / "results" / "notebook-final"
#: The final-split runs of the same settings with the worked reward.
WORKED_SEEDS = ROOT / "bench" / "results" / "worked-final"
#: The same with worked_v2; its validation seeds (2, 9) share the folder.
WORKED_V2_SEEDS = ROOT / "bench" / "results" / "worked-v2"


@pytest.mark.parametrize(
    "directory", [FINAL_SEEDS, WORKED_SEEDS, WORKED_V2_SEEDS], ids=lambda p: p.name
)
def test_the_readme_seed_table_is_the_bench_table(directory):
    """The README's rows for the final-split seeds are what ``bench/cpu_grpo_demo.py
    --table`` prints for every test-split seed file recorded, word for word (the
    summary line that counts the seeds included), for the defaults, the worked
    reward and worked_v2."""
    bench = bench_module("cpu_grpo_demo")
    files = sorted(
        directory.glob("cpu_grpo_demo-notebook-seed[0-9]*.json"),
        key=lambda p: int(p.stem.rsplit("seed", 1)[1]),
    )
    results = [r for path in files for r in bench.load_results(path)]
    if directory != WORKED_V2_SEEDS:  # only worked-v2 holds validation seeds too
        assert all(r["split"] == "test" for r in results)
    results = [r for r in results if r["split"] == "test"]
    assert len(results) >= 3, files
    table = bench.markdown_table(results)
    text = readme_section("## Results")
    missing = [line for line in table.splitlines() if line and line not in text]
    seeds = " ".join(f.stem.rsplit("-", 1)[1] for f in files)
    assert not missing, (
        f"README's ## Results lacks these lines of `python bench/cpu_grpo_demo.py "
        f"--table` over {seeds} (paste the table again): {missing}"
    )


def test_ablation_step_facts_count_every_recorded_seed(tmp_path):
    """A variant's step and gradient facts pool its seeds, not the last one read:
    a second seed identical to the first doubles the steps counted."""
    import json

    source = ROOT / "data" / "reference_runs" / "ablation"
    single, double = tmp_path / "one", tmp_path / "two"
    single.mkdir(), double.mkdir()
    for stem in ("baseline-seed0", "constant--dr--grpo-seed0"):
        record = json.loads((source / f"{stem}.json").read_text())
        for folder in (single, double):
            (folder / f"{stem}.json").write_text(json.dumps(record))
        record["seed"] = 1
        (double / f"{stem[:-1]}1.json").write_text(json.dumps(record))
    one = bench_module("recorded_facts").ablation_facts(single)
    two = bench_module("recorded_facts").ablation_facts(double)
    assert two["seeds read"] == "seeds 0 and 1"
    key = "constant (Dr. GRPO): steps with the baseline's reward"
    same, _, total, _ = one[key].split()
    assert two[key] == f"{2 * int(same)} of {2 * int(total)} steps"
    key = "constant (Dr. GRPO): gradient norm / baseline's"
    assert two[key] == one[key]
