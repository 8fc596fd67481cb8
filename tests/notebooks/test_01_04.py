"""Tests of notebooks 01-04 without running them end to end (``test_executed.py``
does that, once per session).

Three kinds of checks:

* structure: the house style's opening, one ``parameters`` cell, summary and
  exercises, stripped outputs, explicit imports;
* teaching: the functions a notebook writes out by hand (cells tagged ``teach``) agree
  with ``grpo_helpers``, and the numbers it quotes are right;
* exercises: one exercise cell (tagged ``exercise``) and one self-check cell (tagged
  ``self-check``) per exercise, and the solutions' functions give known answers.
  That the stubs make the checks print "not yet" and the solutions "ok" is checked
  on the session's one execution of each notebook (``test_executed.py``).

Cells are executed in a namespace made by the notebook's opening cell (its imports),
so the tests use exactly the code a learner sees.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import math
import re
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from notebook_kernel import without_guard
from strategies import boxy_strategy, boxy_texts

from grpo_helpers import advantages, data, datum, rewards

ROOT = Path(__file__).resolve().parents[2]


NOTEBOOKS = ROOT / "notebooks"


STEMS = (
    "01_gsm8k_dataset",
    "02_reward_design",
    "03_group_advantages",
    "04_datum_alignment",
)


#: The first heading of each notebook, as in the README's syllabus.
TITLES = {
    "01_gsm8k_dataset": "GSM8K dataset",
    "02_reward_design": "Reward design",
    "03_group_advantages": "Group advantages",
    "04_datum_alignment": "Datum alignment",
}


#: What each notebook's exercises define (the names its solutions module exports).
EXERCISE_NAMES = {
    "01_gsm8k_dataset": ("fraction_cut_off", "smallest_budget"),
    "02_reward_design": ("last_boxed", "gaming_completion"),
    "03_group_advantages": ("smallest_group_size", "success_advantage"),
    "04_datum_alignment": (
        "trained_target",
        "looks_aligned",
        "importance_sampling_loss",
        "grpo_step_by_hand",
    ),
}


# ----------------------------------------------------------------------------- helpers


@cache
def read_notebook(stem: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)


def code_cells(stem: str) -> list[nbformat.NotebookNode]:
    return [cell for cell in read_notebook(stem).cells if cell.cell_type == "code"]


def tagged(stem: str, tag: str) -> list[str]:
    """Sources of the code cells that carry ``tag``, in notebook order."""
    return [
        cell.source
        for cell in code_cells(stem)
        if tag in cell.get("metadata", {}).get("tags", [])
    ]


def run_cells(sources: list[str], namespace: dict[str, Any]) -> str:
    """Execute cell sources one after the other in ``namespace``; return stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for source in sources:
            exec(compile(source, "<notebook cell>", "exec"), namespace)
    return out.getvalue()


@cache
def _opening_namespace(stem: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"notebook_{stem}"}
    run_cells([code_cells(stem)[0].source], namespace)
    return namespace


def opening_namespace(stem: str) -> dict[str, Any]:
    """A fresh namespace holding what the notebook's opening cell imports."""
    return dict(_opening_namespace(stem))


@cache
def taught(stem: str) -> dict[str, Any]:
    """The namespace after the notebook's ``teach`` cells (its by-hand functions)."""
    namespace = opening_namespace(stem)
    run_cells(tagged(stem, "teach"), namespace)
    return namespace


def load_solution(stem: str) -> ModuleType:
    path = NOTEBOOKS / "solutions" / f"{stem}.py"
    spec = importlib.util.spec_from_file_location(f"solutions_{stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- structure


def opening_text(nb: nbformat.NotebookNode) -> str:
    """The markdown cells before the first code cell: title to runtime."""
    text = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            break
        text.append(cell.source)
    return "\n\n".join(text)


def first_code_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return next(cell for cell in nb.cells if cell.cell_type == "code")


@pytest.mark.parametrize("stem", STEMS)
def test_opening_follows_the_house_style(stem: str) -> None:
    nb = read_notebook(stem)
    assert nb.cells[0].cell_type == "markdown"
    assert nb.cells[0].source.startswith(f"# {stem[:2]} {TITLES[stem]}\n")
    opening = opening_text(nb)
    for part in ("**You will learn**", "**Prerequisites**", "**Runtime**"):
        assert part in opening, f"{stem}: no {part} before the first code cell"
    runtime = opening.split("**Runtime**")[1].split("\n\n")[0]
    assert "fast" in runtime and "full" in runtime
    # issue 22: versions, engine and device in one helper call, a short first cell
    first = first_code_cell(nb).source
    assert "settings.environment_report(" in first, stem
    # after the guard that names `make lab` (test_kernel.py)
    assert len(without_guard(first).splitlines()) <= 15, stem


@pytest.mark.parametrize("stem", STEMS)
def test_markdown_cells_are_short_and_lines_fit(stem: str) -> None:
    """Issue 22: no wall of text (a markdown cell of at most about 200 words) and
    every line, markdown included, within 88 characters."""
    for index, cell in enumerate(read_notebook(stem).cells):
        if cell.cell_type == "markdown":
            assert len(cell.source.split()) <= 200, (stem, index)
        for line in cell.source.splitlines():
            assert len(line) <= 88, (stem, index, line)


#: Notebooks whose learner text follows issue 36 here: 01-04, and 06 (its other
#: tests live with 05's).
COURSE_TEXT = (*STEMS, "06_async_training_loop")


RUNTIME = re.compile(
    r"\*\*Runtime\*\*: fast \(`GRPO_FAST=1`\) about (?P<fast>[\d.]+ (?:s|min)); "
    r"full \([^)]*\) about (?P<full>[\d.]+ (?:s|min))(?: \((?P<same>\d+) s\))?, "
    r"measured by `python -m grpo_helpers series --only (?P<only>\d\d)`"
)


@pytest.mark.parametrize("stem", COURSE_TEXT)
def test_learner_text_says_what_holds_now(stem: str) -> None:
    """Issue 36: one fast and one full runtime and the command that measured them;
    no dates, pilots or earlier defaults; at most 45 cells; a "Why ..." paragraph of
    at most 80 words; only the three rewards the series teaches."""
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    assert len(nb.cells) <= 45, stem
    opening = " ".join(opening_text(nb).split())
    runtime = RUNTIME.search(opening)
    assert runtime, f"{stem}: no runtime line in the house form"
    assert runtime["only"] == stem[:2]
    assert len(re.findall(r"\d+(?:\.\d+)? (?:s|min)\b", opening)) == 2 + bool(
        runtime["same"]
    ), f"{stem}: more than one time per mode"
    for cell in nb.cells:
        text = cell.source
        if cell.cell_type == "markdown":
            assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), (stem, text[:80])
            assert not re.search(r"\bpilots?\b|\bearlier default", text), stem
            for paragraph in text.split("\n\n"):
                if paragraph.startswith("**Why"):
                    assert len(paragraph.split()) <= 80, (stem, paragraph[:60])
        for name in rewards.EARLIER_REWARDS:
            assert f"`{name}`" not in text and f'"{name}"' not in text, (stem, name)
        assert "right_answer_reward" not in text and "worked_reward" not in text


@pytest.mark.parametrize("stem", STEMS)
def test_title_matches_the_readme_syllabus(stem: str) -> None:
    readme = (ROOT / "README.md").read_text()
    assert f"[{TITLES[stem]}](notebooks/{stem}.ipynb)" in readme


@pytest.mark.parametrize("stem", STEMS)
def test_one_parameters_cell_one_knob_per_line(stem: str) -> None:
    parameters = tagged(stem, "parameters")
    assert len(parameters) == 1
    lines = [line for line in parameters[0].splitlines() if line.strip()]
    assert lines
    for line in lines:
        assert re.match(r"^\w+ = .+  # \S", line), f"{stem}: not a knob: {line!r}"


@pytest.mark.parametrize("stem", STEMS)
def test_stripped_explicit_and_complete(stem: str) -> None:
    nb = read_notebook(stem)
    for cell in code_cells(stem):
        assert cell.outputs == [] and cell.execution_count is None
        assert "import *" not in cell.source
    headings = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert any(h.startswith("## Summary") for h in headings)
    assert any("## Exercises" in h for h in headings)
    # one stub per code exercise, each followed by its self-check; the check helper
    # is the package's (self_checks.self_check), not a copy in every notebook
    assert len(tagged(stem, "exercise")) == len(EXERCISE_NAMES[stem])
    assert len(tagged(stem, "self-check")) == len(EXERCISE_NAMES[stem])
    assert not any("def self_check" in cell.source for cell in code_cells(stem))
    # reference answers come from notebooks/solutions/, not from the check cells
    for source in tagged(stem, "self-check"):
        assert "_reference(" not in source


# --------------------------------------------------------------------------- exercises


def test_solutions_directly() -> None:
    s01 = load_solution("01_gsm8k_dataset")
    assert s01.fraction_cut_off([64, 65], 64) == 0.5
    assert s01.smallest_budget([9000], 0.5) is None
    s02 = load_solution("02_reward_design")
    assert s02.last_boxed(r"\boxed{\boxed{5}}") == "5"
    assert rewards.grade_answer(s02.gaming_completion, "72") == 0.0
    assert rewards.shaped_reward(s02.gaming_completion, "72") >= 0.5
    s03 = load_solution("03_group_advantages")
    assert s03.smallest_group_size(0.9, 0.2) == 16
    for g in (2, 4, 16, 64):
        assert s03.success_advantage(g, 1, "group") == pytest.approx(math.sqrt(g - 1))
    s04 = load_solution("04_datum_alignment")
    assert s04.trained_target([1, 2, 3], [7, 8], 1) is None
    assert s04.trained_target([1, 2, 3], [7, 8], 3) == 8
    import torch

    lp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    mask = torch.tensor([[False, True, True]])
    loss = s04.importance_sampling_loss(lp, lp.detach(), torch.full((1, 3), 2.0), mask)
    assert float(loss.detach()) == pytest.approx(-4.0)  # ratio 1: -A per token
    (grad,) = torch.autograd.grad(loss, lp)
    assert grad.tolist() == [[0.0, -2.0, -2.0]]


# Texts for comparing the exercise's last_boxed with extract_boxed, built from pieces:
# drawn one character at a time they almost never spell \boxed{ and both sides
# would just agree on None.
_BOXED_MAX_PIECES = 16


_BOXED_TEXTS = boxy_strategy(_BOXED_MAX_PIECES)


def test_boxed_texts_reach_a_box_and_a_skipped_box() -> None:
    texts = boxy_texts(500, _BOXED_MAX_PIECES)
    found = [(t, rewards.extract_boxed(t)) for t in texts]
    found = [(text, answer) for text, answer in found if answer is not None]
    assert len(found) >= 0.3 * len(texts)
    # often the answer is not what follows the last \boxed{ (an unclosed or empty
    # box was skipped): the case where the exercise's backwards search must go on
    after_last_box = [text.rsplit("\\boxed{", 1)[1].lstrip() for text, _ in found]
    skipped = [
        answer
        for rest, (_, answer) in zip(after_last_box, found, strict=True)
        if not rest.startswith(answer)
    ]
    assert len(skipped) >= 0.1 * len(texts)


@given(text=_BOXED_TEXTS)
@settings(max_examples=300, deadline=None)
def test_last_boxed_solution_matches_extract_boxed(text: str) -> None:
    solution = load_solution("02_reward_design")
    assert solution.last_boxed(text) == rewards.extract_boxed(text)


# ------------------------------------------------------------ 01: taught vs package


def test_01_gold_answer_by_hand_agrees_on_every_row() -> None:
    by_hand = taught("01_gsm8k_dataset")["gold_answer_by_hand"]
    for split in ("train", "test"):
        for answer_text in data.load_gsm8k(split)["answer"]:
            assert by_hand(answer_text) == data.extract_gsm8k_answer(answer_text)


def test_01_reference_solutions_as_completions_earn_full_reward() -> None:
    as_completion = taught("01_gsm8k_dataset")["as_completion"]
    for answer_text in data.load_gsm8k("train")["answer"]:
        completion = as_completion(answer_text)
        assert "<<" not in completion and "####" not in completion
        gold = data.extract_gsm8k_answer(answer_text)
        assert rewards.grade_answer(completion, gold) == 1.0


# ------------------------------------------------------------ 02: taught vs package

_PIECES = (
    "\\boxed{",
    "}",
    "{",
    "72",
    "74",
    "-3",
    "1,000",
    "0.5",
    "\\frac{144}{2}",
    "$",
    " ",
    "clips",
    ".",
    "48 / 2 = 24",
)


@given(
    pieces=st.lists(st.sampled_from(_PIECES), max_size=8),
    gold=st.sampled_from(["72", "-3", "1000", "0", "0.5", "24"]),
)
@settings(max_examples=400, deadline=None)
def test_02_shaped_reward_by_hand_agrees(pieces: list[str], gold: str) -> None:
    by_hand = taught("02_reward_design")["shaped_reward_by_hand"]
    text = "".join(pieces)
    assert by_hand(text, gold) == pytest.approx(rewards.shaped_reward(text, gold))


def test_02_quoted_numbers() -> None:
    # the gaming example: a bare guess beats reasoning that boxes a wrong step
    assert rewards.shaped_reward(r"\boxed{48}", "72") == pytest.approx(0.4)
    assert rewards.shaped_reward(r"24 clips. \boxed{24}", "72") == pytest.approx(0.25)
    # the demo regex cuts nested braces, extract_boxed does not
    assert rewards.extract_boxed_demo(r"\boxed{\frac{144}{2}}") == "\\frac{144"
    assert rewards.grade_answer(r"\boxed{\frac{144}{2}}", "72") == 1.0


def test_02_what_shown_work_pays() -> None:
    """Sections 1, 4 and 6: shown_work pays a right answer only with its
    calculation written `a op b = c` (labels in brackets read), not a bare box, a
    \\frac, working in words, a box where the result should be or an `x` for times."""
    paid = {
        r"She sold 48 + 24 = 72 clips. \boxed{72}": 1.0,
        r"She sold 48 (April) + 24 (May) = 72 clips. \boxed{72}": 1.0,
        r"She sold 48, then half as many, 24: 72 in all. \boxed{72}": 0.0,
        r"\boxed{72}": 0.0,
        r"She sold 48 + 48 / 2 clips: \boxed{\frac{144}{2}}": 0.0,
        r"May: \boxed{24}. Both months: 48 + 24 = \boxed{72}": 0.0,
    }
    for text, want in paid.items():
        assert rewards.shown_work_reward(text, "72") == want, text
        assert rewards.grade_answer(text, "72") == 1.0, text
    assert rewards.shown_work_reward(r"she earned 0.2 x 50 = 10. \boxed{10}", "10") == 0
    assert set(rewards.REWARD_FUNCTIONS) == {"binary", "shaped", "shown_work"}


def test_02_a_boxed_guess_earns_what_the_notebook_says() -> None:
    """Section 5: a boxed guess from the question's numbers earns binary's 1.0
    about once in 100 questions, shaped about 0.2 per question, shown_work
    nothing."""
    rows = data.load_gsm8k("train")
    golds = [data.extract_gsm8k_answer(text) for text in rows["answer"]]
    numbers = [
        [float(n.replace(",", "")) for n in re.findall(r"\d+(?:,\d{3})*(?:\.\d+)?", q)]
        or [0.0]
        for q in rows["question"]
    ]
    for guess in (max, sum, lambda found: found[-1]):
        texts = [
            "\\boxed{" + (f"{v:.0f}" if v == int(v) else f"{v}") + "}"
            for v in (guess(found) for found in numbers)
        ]
        pairs = list(zip(texts, golds, strict=True))
        assert 0.005 < np.mean([rewards.grade_answer(t, g) for t, g in pairs]) < 0.02
        assert 0.18 < np.mean([rewards.shaped_reward(t, g) for t, g in pairs]) < 0.23
        assert not any(rewards.shown_work_reward(t, g) for t, g in pairs)


# ------------------------------------------------------------ 03: taught vs package


def test_03_worked_example() -> None:
    by_hand = taught("03_group_advantages")["group_advantages_by_hand"]
    example = [1.0, 1.0, 0.2, 0.0]
    expected = [0.45, 0.45, -0.35, -0.55]
    assert np.allclose(by_hand(example), expected)
    assert np.allclose(advantages.group_advantages(example), expected)


@given(
    group=st.lists(st.sampled_from([0.0, 0.1, 0.2, 0.5, 1.0]), min_size=2, max_size=16),
    scale=st.sampled_from(["none", "group"]),
)
@settings(max_examples=300, deadline=None)
def test_03_advantages_by_hand_agree(group: list[float], scale: str) -> None:
    by_hand = taught("03_group_advantages")["group_advantages_by_hand"]
    assert np.allclose(
        by_hand(group, scale=scale), advantages.group_advantages(group, scale=scale)
    )


def test_03_simulation_agrees_with_the_formula() -> None:
    simulate = taught("03_group_advantages")["degenerate_fraction_simulated"]
    rng = np.random.default_rng(0)
    num_groups = 20_000
    for group_size in (2, 4, 8, 16):
        for pass_rate in (0.02, 0.1, 0.5, 0.9, 0.98):
            formula = advantages.degenerate_probability(pass_rate, group_size)
            observed = simulate(pass_rate, group_size, num_groups, rng)
            std_error = math.sqrt(max(formula * (1 - formula), 1e-6) / num_groups)
            assert abs(observed - formula) < 5 * std_error


def test_03_exact_policy_gradient_is_the_derivative_of_j() -> None:
    """The notebook's exact gradient against finite differences of J, and its
    score-function estimate within four standard errors of it, with and without a
    baseline, on several policies."""
    ns = taught("03_group_advantages")
    softmax, exact = ns["softmax"], ns["exact_gradient"]
    sampled = ns["score_function_samples"]
    rng = np.random.default_rng(1)
    for _ in range(5):
        logits = rng.normal(size=5)
        rewards_ = rng.uniform(0, 1, size=5)

        def j(theta, rewards_=rewards_):
            return softmax(theta) @ rewards_

        step = 1e-6
        numeric = [
            (j(logits + step * e) - j(logits - step * e)) / (2 * step)
            for e in np.eye(5)
        ]
        assert np.allclose(exact(logits, rewards_), numeric, atol=1e-8)
        for baseline in (0.0, j(logits)):
            samples = sampled(logits, rewards_, 50_000, rng, baseline=baseline)
            error = samples.std(axis=0, ddof=1) / math.sqrt(len(samples))
            assert np.all(
                np.abs(samples.mean(axis=0) - exact(logits, rewards_)) <= 4 * error
            )


def test_03_a_baseline_keeps_the_mean_and_lowers_the_variance_below_2_b_star() -> None:
    """Section 1's numbers: with b = J one sample's estimate varies about a third as
    much as with no baseline, with b = 10 about 200 times as much; the mean stays."""
    ns = taught("03_group_advantages")
    sampled, softmax = ns["score_function_samples"], ns["softmax"]
    logits, rewards_ = np.array([0.5, -0.5, 1.0, 0.0]), np.array([1.0, 1.0, 0.2, 0.0])
    j = softmax(logits) @ rewards_
    runs = {
        b: sampled(logits, rewards_, 200_000, np.random.default_rng(0), b)
        for b in (0.0, j, 10.0)
    }
    spread = {b: samples.var(axis=0).sum() for b, samples in runs.items()}
    assert 0.28 < spread[j] / spread[0.0] < 0.39  # "about a third"
    assert 170 < spread[10.0] / spread[0.0] < 250  # "about 200 times"
    exact = ns["exact_gradient"](logits, rewards_)
    for samples in runs.values():
        error = samples.std(axis=0) / math.sqrt(len(samples))
        assert np.all(np.abs(samples.mean(axis=0) - exact) < 5 * error)
    # sixteen numbers each within four standard errors: "about once in a thousand"
    outside = 16 * math.erfc(4 / math.sqrt(2))
    assert 0.0008 < outside < 0.0012


def test_03_quoted_numbers() -> None:
    assert round(advantages.degenerate_probability(0.9, 4), 3) == 0.656
    assert round(advantages.degenerate_probability(0.9, 16), 3) == 0.185
    for g in (2, 4, 8, 16, 64):
        group = [1.0] + [0.0] * (g - 1)
        success = advantages.group_advantages(group, scale="group")
        # the population std (this series): sqrt(G - 1)
        assert success[0] == pytest.approx(math.sqrt(g - 1), rel=1e-3)
        # TRL: the Bessel-corrected std plus 1e-4: (G - 1) / sqrt(G)
        trl = (1 - 1 / g) / (np.std(group, ddof=1) + 1e-4)
        assert trl == pytest.approx((g - 1) / math.sqrt(g), rel=1e-3)
        assert trl / success[0] == pytest.approx(math.sqrt((g - 1) / g), rel=1e-3)
    # "3.9 for G = 16, 7.9 for G = 64 ...; with TRL's std, 3.75 and 7.9"
    assert [round(math.sqrt(g - 1), 1) for g in (16, 64)] == [3.9, 7.9]
    assert [round((g - 1) / math.sqrt(g), 2) for g in (16, 64)] == [3.75, 7.88]
    assert round(63 / math.sqrt(64), 1) == 7.9


# ------------------------------------------------------------ 04: taught vs package


@given(
    prompt=st.lists(st.integers(0, 49151), min_size=1, max_size=20),
    completion=st.lists(st.integers(0, 49151), min_size=1, max_size=20),
    advantage=st.floats(-2, 2),
)
@settings(max_examples=200, deadline=None)
def test_04_datum_by_hand_agrees(
    prompt: list[int], completion: list[int], advantage: float
) -> None:
    by_hand = taught("04_datum_alignment")["datum_by_hand"]
    logprobs = [-0.5 - 0.01 * i for i in range(len(completion))]
    lists = by_hand(prompt, completion, logprobs, advantage)
    sample = datum.RolloutSample(completion, logprobs, "", 0.0, advantage)
    built = datum.build_grpo_datum(prompt, sample)
    assert built.model_input.to_ints() == lists["model_input"]
    inputs = built.loss_fn_inputs
    assert inputs["target_tokens"].tolist() == lists["target_tokens"]
    assert np.allclose(inputs["logprobs"].tolist(), lists["logprobs"], atol=1e-6)
    assert np.allclose(inputs["advantages"].tolist(), lists["advantages"], atol=1e-6)
    assert len(lists["model_input"]) == len(prompt) + len(completion) - 1


def test_04_misaligned_datums(tmp_path: Path) -> None:
    """The length error is raised at the call; the shifted Datum passes silently."""
    import pytrio as trio

    from grpo_helpers import engines

    prompt, completion = [5, 6, 7], [8, 9, 2]
    sample = datum.RolloutSample(completion, [-0.5, -0.5, -0.5], "", 1.0, 0.5)
    good = datum.build_grpo_datum(prompt, sample)
    too_long = trio.Datum(
        model_input=trio.ModelInput.from_ints(prompt + completion),
        loss_fn_inputs=dict(good.loss_fn_inputs),
    )
    shifted = trio.Datum(
        model_input=good.model_input,
        loss_fn_inputs={
            **good.loss_fn_inputs,
            "target_tokens": np.array([0, 0, 7, 8, 9], dtype=np.int64),
        },
    )
    service = engines.connect("local", run_dir=tmp_path, device="cpu")
    client = service.create_lora_training_client("tiny-random", rank=4, seed=0)
    with pytest.raises(ValueError, match="must have shape"):
        client.forward([too_long], "importance_sampling")
    output = client.forward([good, shifted], "importance_sampling").result()
    assert len(output.loss_fn_outputs) == 2
