"""Sentences of the learner text that state a number or another library's default,
each computed here from the notebook's own functions or the installed package.

* notebook 03 and ``docs/teaching.md``: the variance of the score-function estimate
  is a parabola in the baseline $b$; any $b$ between 0 and twice its minimiser
  lowers it, and $b = 1$ still cuts it by 17% on the notebook's example;
* notebooks 05 and 09: TRL 1.16's defaults as the text names them, read from the
  installed ``trl.GRPOConfig`` (no model is loaded).
"""

from __future__ import annotations

import dataclasses
import re
from functools import cache
from pathlib import Path

import nbformat
import numpy as np
import pytest
from needs_trl import import_trl

from grpo_helpers import settings

ROOT = Path(__file__).resolve().parents[2]


NOTEBOOKS = ROOT / "notebooks"


def notebook(stem: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)


def normal(text: str) -> str:
    """Whitespace collapsed, so that a phrase may wrap across lines."""
    return " ".join(text.split())


def markdown_with(stem: str, phrase: str) -> str:
    """The one markdown cell of a notebook that holds ``phrase``."""
    found = [
        normal(c.source)
        for c in notebook(stem).cells
        if c.cell_type == "markdown" and phrase in normal(c.source)
    ]
    assert len(found) == 1, f"{stem}: {len(found)} markdown cells hold {phrase!r}"
    return found[0]


# ------------------------------------------------------------ 03: the baseline


@cache
def section_1() -> dict:
    """Notebook 03's parameters and its ``teach`` cells (the by-hand functions)."""
    namespace: dict = {"np": np, "settings": settings}
    for cell in notebook("03_group_advantages").cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "code" and ({"parameters", "teach"} & set(tags)):
            exec(compile(cell.source, "<notebook 03>", "exec"), namespace)
    return namespace


def test_03_the_variance_is_a_parabola_in_the_baseline():
    """The exact variance, against a brute-force sum over the four answers, is
    lowest at ``best_baseline`` and equals the no-baseline variance at twice it."""
    ns = section_1()
    variance, best = ns["exact_variance"], ns["best_baseline"]
    rng = np.random.default_rng(0)
    for _ in range(20):
        logits, rewards = rng.normal(size=4), rng.uniform(0, 1, size=4)
        pi = ns["softmax"](logits)
        grad_log_pi = np.eye(4) - pi
        mean = ns["exact_gradient"](logits, rewards)
        for b in (0.0, 0.3, 1.0, 10.0):
            per_answer = (rewards - b)[:, None] * grad_log_pi
            brute = pi @ ((per_answer - mean) ** 2).sum(axis=1)
            assert variance(logits, rewards, b) == pytest.approx(brute, rel=1e-9)
        b_star = best(logits, rewards)
        grid = np.linspace(b_star - 1, b_star + 1, 201)
        assert min(variance(logits, rewards, b) for b in grid) == pytest.approx(
            variance(logits, rewards, b_star), rel=1e-9
        )
        assert variance(logits, rewards, 2 * b_star) == pytest.approx(
            variance(logits, rewards, 0.0), rel=1e-9
        )


def test_03_the_numbers_the_baseline_sentences_state():
    """On the notebook's own example: b = J varies about a third as much as no
    baseline, b = 10 about 200 times as much, b = 1 is 17% lower; b* is near J."""
    ns = section_1()
    logits, rewards = ns["policy_logits"], np.array(ns["example_rewards"])
    j = ns["softmax"](logits) @ rewards
    b_star = ns["best_baseline"](logits, rewards)

    def ratio(b):
        return ns["exact_variance"](logits, rewards, b) / ns["exact_variance"](
            logits, rewards, 0.0
        )

    assert 0.28 < ratio(j) < 0.39  # "about a third"
    assert 170 < ratio(10.0) < 250  # "about 200 times"
    assert round(100 * (1 - ratio(1.0))) == 17  # "b = 1 ... still cuts it by 17%"
    assert max(rewards) == 1.0 and 0 < 1.0 < 2 * b_star  # the largest reward, inside
    assert abs(b_star - j) < 0.1  # "near J"
    cell = markdown_with("03_group_advantages", "still cuts it by 17%")
    assert "any $b$ between 0 and $2b^*$ lowers it" in cell
    teaching = normal((ROOT / "docs" / "teaching.md").read_text())
    assert "$b = 1$ still cuts it by 17% there" in teaching
    assert "(about 200 times there)" in teaching


def test_03_no_sentence_says_only_a_baseline_near_j_helps():
    pages = [ROOT / "docs" / "teaching.md"]
    texts = [normal(p.read_text()) for p in pages] + [
        normal(c.source) for c in notebook("03_group_advantages").cells
    ]
    for text in texts:
        assert "variance only" not in text and "only near the" not in text


# ------------------------------------------------------------ TRL's defaults


def trl_defaults() -> dict:
    trl = import_trl()
    assert trl.__version__.startswith("1.16"), trl.__version__
    return {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}


def test_trl_defaults_as_notebook_09_names_them():
    """No KL term, std-scaled advantages, the ratio on the KL term and the
    ``dapo`` loss: TRL 1.16's defaults, as notebook 09 states them."""
    defaults = trl_defaults()
    assert defaults["beta"] == 0.0
    assert defaults["scale_rewards"] == "group"
    assert defaults["use_bias_correction_kl"] is True
    assert defaults["loss_type"] == "dapo"
    cell = markdown_with("09_what_the_knobs_do", "**The same knobs in TRL.**")
    for phrase in (
        "`beta = 0.0`, no KL term",
        '`scale_rewards = "group"`, std-scaled advantages',
        "(`use_bias_correction_kl=True`, 1.16's default)",
        "its default, `dapo`",
    ):
        assert phrase in cell, phrase


def test_trl_clips_the_gradient_at_1_by_default():
    """Notebook 05: "TRL clips at 1 by default"."""
    assert trl_defaults()["max_grad_norm"] == 1.0
    cell = markdown_with("05_sync_training_loop", "**Gradient clipping**")
    assert "TRL clips at 1 by default" in cell


# ------------------------------------------------------------ corrected sentences


@pytest.mark.parametrize(
    ("stem", "wrong"),
    [
        ("03_group_advantages", r"Importance sampling corrects"),
        ("05_sync_training_loop", r"unusually large for its run"),
        ("05_sync_training_loop", r"\$\\rho = 1\$ still holds at the update"),
        ("09_what_the_knobs_do", r"makes \$\\mu > 1\$ safe\)"),
        ("07_evaluating_a_trained_model", r"before the learning rate was settled"),
        ("09_what_the_knobs_do", r"in two sessions"),
    ],
)
def test_a_corrected_sentence_stays_corrected(stem, wrong):
    for cell in notebook(stem).cells:
        if cell.cell_type == "markdown":
            assert not re.search(wrong, normal(cell.source)), (stem, wrong)


def test_on_policy_is_said_for_one_update_per_batch():
    cell = markdown_with("05_sync_training_loop", "GRPO is *on-policy*")
    before = cell.split("GRPO is *on-policy*")[0]
    assert "$= \\mu = 1$" in before


def test_notebook_05_names_the_train_temperature_knob():
    cell = markdown_with("05_sync_training_loop", "**One mismatch to know.**")
    for phrase in (
        '`GRPOConfig.train_temperature = "1"`',
        '`train_temperature = "sampling"`',
        "not documented",
        "$[0.8, 1.2]$",  # the check of the next cell
    ):
        assert phrase in cell, phrase
    from grpo_helpers.config import GRPOConfig

    assert GRPOConfig().train_temperature == "1"
    with pytest.raises(ValueError, match="PyTRIO's losses have no temperature"):
        GRPOConfig(backend="pytrio", temperature=0.6, train_temperature="sampling")
