"""grpo_helpers.classroom.loop_check: the run a learner's loop is held to holds
every case a wrong loop changes (the loops themselves run through the notebook
check in ``test_self_checks.py``, ``train_loop``); the hidden grader gives every
right and wrong loop of ``tests/helpers/wrong_loops.py`` the notebook check's
verdict, and both rule out the same functions."""

from __future__ import annotations

import contextlib
import io

import nbformat
import pytest
from wrong_loops import RIGHT_LOOPS, UNMASKED, WRONG_LOOPS

from grpo_helpers.classroom import course, hidden_tests, loop_check


def test_the_loop_checks_run_holds_every_case_a_wrong_loop_needs(tmp_path):
    """The check's run (``loop_check.CHECK_RUN``) must hold what each wrong loop
    changes: an update before a later step's samples (a stale sampler), a
    degenerate group beside a teaching one (sent or skipped), a step with two
    teaching groups (one optim_step per group), and group rewards whose spread is
    not 1 (std scaling changes them)."""
    from grpo_helpers import run_files, training

    config = loop_check.check_config(tmp_path / "run")
    metrics = training.train_sync(config, progress=False).metrics
    assert metrics["updated"].iloc[:-1].any()
    mixed = metrics[(metrics["skipped_groups"] > 0) & (metrics["valid_groups"] > 0)]
    assert len(mixed), "no step has a degenerate group beside a teaching one"
    assert (metrics["valid_groups"] >= 2).any(), "no step has two teaching groups"
    samples = run_files.load_samples(tmp_path / "run")
    spread = samples.groupby(["step", "question_index"])["reward"].std(ddof=0)
    assert ((spread > 0) & ((spread - 1).abs() > 0.1)).any()


# ----------------------------------------------------------------------------------
# The notebook check and the hidden grader agree
# ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def grader():
    """Notebook 10's hidden block of ``train_loop`` and its key: ``grade(loop)``
    is ``""`` when the hidden grader passes the loop, else why not."""
    key: dict = {}
    notebook = course.source_notebook(course.NOTEBOOKS / "10_grpo_whole.ipynb", key)
    cell = next(c for c in notebook.cells if hidden_tests.BEGIN in c.source)
    block = cell.source[cell.source.index(hidden_tests.BEGIN) :]
    (entry,) = key.values()

    def grade(loop) -> str:
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                exec(block, {"train_loop": loop})
        except AssertionError as error:
            return str(error)
        return hidden_tests.judge(printed.getvalue(), entry)

    return grade


@pytest.mark.parametrize("label", RIGHT_LOOPS)
def test_the_hidden_grader_passes_every_right_loop(grader, label):
    """The notebook check passes them too (``test_self_checks``,
    ``test_a_right_answer_passes[...-train_loop]``)."""
    assert grader(RIGHT_LOOPS[label]) == ""


@pytest.mark.parametrize("label", WRONG_LOOPS)
def test_the_hidden_grader_fails_every_wrong_loop(grader, label):
    """The notebook check fails them too, each with its own hint
    (``test_self_checks``, ``test_a_named_wrong_answer_fails[train_loop-...]``)."""
    assert "hidden test of train_loop" in grader(WRONG_LOOPS[label])


def test_the_hidden_grader_passes_exercise_1s_loop_before_exercise_3(grader):
    """A loop that ignores ``mask_truncated`` is right for exercise 1, which is the
    graded cell: the grader passes it, as the notebook check does."""
    assert grader(UNMASKED) == ""


def test_both_forbid_the_same_functions_and_the_notebook_names_them():
    """What the hidden grader forbids is what the notebook check refuses and what
    the exercise's "Do not call" names."""
    hidden = course._load_solutions("10_grpo_whole").HIDDEN_CASES["train_loop"]
    assert tuple(hidden["forbid"]) == loop_check.FORBIDDEN
    notebook = nbformat.read(course.NOTEBOOKS / "10_grpo_whole.ipynb", as_version=4)
    exercise = " ".join(c.source for c in notebook.cells if "Do not call" in c.source)
    text = " ".join(exercise.split())
    for dotted in loop_check.FORBIDDEN:
        assert f"`{dotted.removeprefix('grpo_helpers.')}`" in text, dotted


def test_the_notebook_check_refuses_a_loop_that_calls_train_sync(capsys):
    from grpo_helpers import training

    def delegate(service, run_config, train_rows):
        return training.train_sync(run_config, service, progress=False)

    assert not loop_check.train_loop_check("exercise", delegate, strict=False)
    assert "asks you to write the loop without it" in capsys.readouterr().out


def test_exercise_3_checks_the_masking_and_exercise_1_does_not(capsys):
    """A loop that ignores ``mask_truncated`` is right for exercise 1 and fails
    exercise 3's check with the masking hint; the solution passes both."""
    solution = course._load_solutions("10_grpo_whole").train_loop
    assert loop_check.train_loop_check("exercise 1", UNMASKED, strict=False)
    assert loop_check.train_loop_check(
        "exercise 3", solution, strict=False, mask_truncated=True
    )
    capsys.readouterr()
    assert not loop_check.train_loop_check(
        "exercise 3", UNMASKED, strict=False, mask_truncated=True
    )
    hint = capsys.readouterr().out
    assert "with run_config.mask_truncated=True" in hint
    assert "cut off at max_tokens" in hint


def test_the_weights_after_an_update_are_compared_through_a_forward():
    """The update layer reads the weights as the logprobs a ``forward`` gives on
    the probe text: a gap past float32's reach is named, one within it is not."""
    import numpy as np

    probe = np.array([-1.0, -2.0, -0.5])
    ref = loop_check._Reference(
        loop_check.check_config("unused"),
        loop_check._Log(updates=[loop_check._Update([], probe, "adam", 1)]),
        [],
        [],
    )

    def hint(shift: float) -> str:
        mine = loop_check._Update([], probe + shift, "adam", 1)
        return loop_check._updates_hint(0, [mine], ref, loop_check._Log())

    assert hint(1e-7) == ""
    assert "weights after optim_step differ" in hint(1e-3)
