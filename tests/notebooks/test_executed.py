"""Every notebook executed top to bottom in fast mode, once per session.

``tests/helpers/notebook_runs.py`` executes each notebook once (the ``notebook_runs``
fixture) with the solutions' self-checks added at its end. From that one execution:

* the notebook runs without an error (the training notebooks assert in their own
  cells that their fast-mode loop updated the policy);
* the committed stubs make every self-check print "not yet", with a hint that
  never shows the wanted value;
* the solutions make every self-check print "ok";
* notebook 07 evaluates the run it was given (``source_run``), made by a fixture,
  whatever ran before it.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from notebook_runs import NOTEBOOKS, SOURCE_RUN, STEMS

pytestmark = [pytest.mark.notebook, pytest.mark.timeout(1800)]


def exercises(stem: str) -> int:
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    return sum("exercise" in c.metadata.get("tags", []) for c in nb.cells)


def test_the_series_has_eleven_notebooks():
    assert [s[:2] for s in STEMS] == [f"{i:02d}" for i in range(1, 12)]


@pytest.mark.parametrize("stem", STEMS)
def test_notebook_runs_top_to_bottom_in_fast_mode(notebook_runs, stem):
    run = notebook_runs.get(stem)
    assert run.ok, run.error
    nb = nbformat.read(run.path, as_version=4)
    assert nb.metadata["grpo"]["fast"] is True
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "a cell did not run"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors


@pytest.mark.parametrize("stem", STEMS)
def test_stubs_say_not_yet_with_a_hint_that_hides_the_answer(notebook_runs, stem):
    run = notebook_runs.get(stem)
    assert run.ok, run.error
    verdicts = [line for line in run.stub_checks if line.startswith("exercise")]
    assert verdicts == [f"exercise {n}: not yet" for n in range(1, exercises(stem) + 1)]
    hints = [line for line in run.stub_checks if line.startswith("    ")]
    assert len(hints) == len(verdicts)
    assert all("want" not in hint for hint in hints), hints
    # no value a check compared with shows in a hint (issue 38)
    assert run.wants or not any(".self_check(" in c for c in _check_sources(stem))
    for hint in hints:
        assert not shown_values(hint, run.wants), (hint, shown_values(hint, run.wants))


def _check_sources(stem: str) -> list[str]:
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    return [c.source for c in nb.cells if "self-check" in c.metadata.get("tags", [])]


def shown_values(hint: str, wants: list[str]) -> list[str]:
    """The telling values of ``wants`` (``repr`` of what checks compared with:
    numbers with a fraction or three digits, strings of three characters or
    more) that ``hint`` shows, outside the input it names."""
    hint = re.sub(r"\(input: .*\)$", "", hint)
    values = set()
    for want in wants:
        values |= set(re.findall(r"-?\d+\.\d+(?:e-?\d+)?|-?\d{3,}", want))
        values |= set(re.findall(r"'([^']{3,})'", want))
    return sorted(
        v for v in values if re.search(rf"(?<![\w.]){re.escape(v)}(?![\w])", hint)
    )


@pytest.mark.parametrize("stem", STEMS)
def test_solutions_pass_every_self_check_in_the_notebook(notebook_runs, stem):
    run = notebook_runs.get(stem)
    assert run.ok, run.error
    verdicts = [line for line in run.solution_checks if line.startswith("exercise")]
    want = [f"exercise {n}: ok" for n in range(1, exercises(stem) + 1)]
    assert verdicts == want, "\n".join(run.solution_checks)


@pytest.mark.parametrize(
    ("stem", "origin"),
    [
        ("07_evaluating_a_trained_model", "notebook 05's run in"),
        ("08_what_grpo_learned", "the finished run in"),
    ],
)
def test_07_and_08_evaluate_the_source_run_they_were_given(notebook_runs, stem, origin):
    run = notebook_runs.get(stem)
    assert run.ok, run.error
    source = Path(run.runs_dir) / "fast" / SOURCE_RUN
    assert f"from: {origin} {source}" in run.text()
    assert "nothing to reuse" not in run.text()
    # it trained no run of its own, and saw no other notebook's runs
    assert sorted(p.name for p in source.parent.iterdir()) == [SOURCE_RUN]


def test_each_notebook_writes_its_runs_under_its_own_root(notebook_runs):
    for stem, name in [
        ("05_sync_training_loop", "nb05-sync"),
        ("06_async_training_loop", "nb06-async"),
    ]:
        run = notebook_runs.get(stem)
        assert run.ok, run.error
        fast = Path(run.runs_dir) / "fast"
        assert sorted(p.name for p in fast.iterdir()) == [name], stem
        assert (fast / name / "weights.json").is_file()
