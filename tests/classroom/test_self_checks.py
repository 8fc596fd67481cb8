"""Every exercise's check catches its wrong answers (issue 36, section 5).

For every code exercise of the series, named by the function (or value) the learner
writes, never by its notebook's file name (notebooks get renumbered): the reference
solution passes the check, and at least three named wrong answers fail it, in
strict mode (``GRPO_STRICT_CHECKS=1``: a failed check raises ``AssertionError``;
here ``self_checks.SETTINGS`` is patched to it, since the environment is read once).

Which check: where a notebook's self-check cell needs nothing but its notebook's
opening imports, that cell itself, found after the exercise cell that defines the
name in whichever notebook holds it; the package's check otherwise
(``grpo_helpers.classroom.self_checks`` and ``grpo_helpers.classroom.against_engine``),
called as the notebooks' one-line self-check cells call it. No notebook is executed
here; the engine checks run the local engine on the tiny-random model.

The wrong answers are the slips a learner makes, among them those issue 36 found
passing: ``looks_aligned`` starting at ``num_prompt_tokens``, ``flips_and_p``
without the ``min(1, .)`` cap or without "no flips gives 1.0", ``step_summary``
counting only all-zero groups as degenerate, ``smallest_budget`` stopping at 4096;
and a right answer that was rejected, ``grpo_step`` with one ``forward_backward``
per group, passes. Notebook 10's ``train_loop`` is held against ``train_sync`` by
``loop_check``; its wrong loops (``tests/helpers/wrong_loops.py``) are issue 44's.
A property check's hint names the property, never the answer; a check stops an
endless loop when a time limit is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import nbformat
import pytest
import pytrio as trio
from grading_runs import practically_endless
from wrong_answers import (
    CORRECTION_WEIGHTS,
    FLIPS_AND_P,
    FRACTION_CUT_OFF,
    GAIN_BY_SOURCE,
    GAMING_COMPLETION,
    GRPO_STEP,
    GRPO_STEP_BY_HAND,
    GRPO_STEP_RIGHT,
    IMPORTANCE_SAMPLING_LOSS,
    K3_ESTIMATE,
    LAST_BOXED,
    LOOKS_ALIGNED,
    PPO_CLIPPED_LOSS,
    QUESTIONS_NEEDED,
    SAMPLE_SUBMITTED_FIRST,
    SMALLEST_BUDGET,
    SMALLEST_GROUP_SIZE,
    STEP_SUMMARY,
    SUCCESS_ADVANTAGE,
    TOKEN_WEIGHTS,
    TRAIN_STEP_ASYNC,
    TRAINED_TARGET,
    WILSON_BY_HAND,
)
from wrong_loops import RIGHT_LOOPS, WRONG_HINTS, WRONG_LOOPS

from grpo_helpers import (
    data,
    datum,
    prompts,
)
from grpo_helpers.classroom import against_engine, course, loop_check, self_checks
from grpo_helpers.config import GRPOConfig
from grpo_helpers.engines import connect

ROOT = Path(__file__).resolve().parents[2]


NOTEBOOKS = ROOT / "notebooks"


TINY = "tiny-random"


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    """Strict mode, as under ``GRPO_STRICT_CHECKS=1``: a failed check raises."""
    strict_settings = dataclasses.replace(self_checks.SETTINGS, strict_checks=True)
    monkeypatch.setattr(self_checks, "SETTINGS", strict_settings)


# ----------------------------------------------------------------------------------
# Finding an exercise by its name: its solution, its notebook's own check cell
# ----------------------------------------------------------------------------------


@cache
def solution(name: str) -> Any:
    """The reference solution of exercise ``name``, from whichever solutions file
    defines it."""
    for path in sorted((NOTEBOOKS / "solutions").glob("*.py")):
        if not re.search(
            rf"^(async def|def) {name}\(|^{name} = ", path.read_text(), re.M
        ):
            continue
        spec = importlib.util.spec_from_file_location(f"solutions_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return getattr(module, name)
    raise LookupError(f"no solutions file defines {name}")


def _tags(cell: Any) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


@cache
def _cell_check_source(name: str) -> tuple[str, str]:
    """(the notebook's opening cell, the self-check cell of exercise ``name``)."""
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        code = [c for c in cells if c.cell_type == "code"]
        for i, cell in enumerate(code):
            if "exercise" in _tags(cell) and course._exercise_name(cell.source) == name:
                check = next(c for c in code[i + 1 :] if "self-check" in _tags(c))
                return code[0].source, check.source
    raise LookupError(f"no notebook has an exercise {name}")


@cache
def _opening(source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source, "<opening cell>", "exec"), namespace)
    return namespace


def cell_check(name: str) -> Callable[[Any], Any]:
    """Run the notebook's own self-check cell of ``name`` with ``answer`` as the
    learner's function (or value)."""

    def run(answer: Any) -> None:
        opening, check = _cell_check_source(name)
        namespace = {**_opening(opening), name: answer}
        exec(compile(check, f"<self-check of {name}>", "exec"), namespace)

    return run


@dataclass
class Exercise:
    """How to check one exercise, and the answers it must tell apart."""

    check: Callable[..., Any]  # (answer, *fixtures) -> None; raises when wrong
    wrong: dict[str, Any]
    right: dict[str, Any] = field(default_factory=dict)  # besides the solution
    fixtures: tuple[str, ...] = ()


# ----------------------------------------------------------------------------------
# The engine (tiny-random) for the checks that run it
# ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    return connect("local", run_dir=tmp_path_factory.mktemp("wrong-answers"))


@pytest.fixture(scope="module")
def client(service):
    return service.create_lora_training_client(base_model=TINY, rank=4, seed=0)


@pytest.fixture(scope="module")
def prompt_batch(client):
    """Three prompts' token ids and one sampling params per prompt."""
    tokenizer = client.get_tokenizer()
    config = GRPOConfig(base_model=TINY, dataset="arithmetic", backend="local")
    rows = data.load_split(config, "train")
    tokens = [prompts.build_prompt(tokenizer, rows[i]["question"]) for i in range(3)]
    base = trio.SamplingParams(max_tokens=6, temperature=1.0)
    params = [base.model_copy(update={"seed": 10 + i}) for i in range(3)]
    return tokens, params


@pytest.fixture(scope="module")
def response(client, prompt_batch):
    tokens, params = prompt_batch
    sampler = client.save_weights_and_get_sampling_client()
    return sampler.sample(
        prompt=trio.ModelInput.from_ints(tokens[0]),
        num_samples=4,
        sampling_params=params[0],
    ).result()


@pytest.fixture(scope="module")
def loss_groups(prompt_batch, response):
    """Two groups with completions of different lengths, for the loss checks."""
    tokens, _ = prompt_batch
    samples = [
        datum.RolloutSample(list(s.tokens), list(s.logprobs), s.text, 0.0, 0.0)
        for s in response.sequences
    ]
    shorter = [
        datum.RolloutSample(s.tokens[:3], s.logprobs[:3], "", 0.0, 0.0)
        for s in samples[:2]
    ]
    return [(tokens[0], samples), (tokens[1], shorter)]


def _loss_check(loss_fn, **bounds):
    def run(answer, client, loss_groups):
        against_engine.loss_check(
            "exercise", answer, client, loss_groups, loss_fn=loss_fn, **bounds
        )

    return run


def _grpo_step_check(answer, service, prompt_batch, response):
    fresh = service.create_lora_training_client(base_model=TINY, rank=4, seed=1)
    against_engine.grpo_step_check(
        "exercise",
        answer,
        fresh,
        prompt_batch[0][0],
        response,
        trio.AdamParams(learning_rate=1e-4),
    )


def _plain_step_check(answer, service, prompt_batch):
    against_engine.plain_step_check(
        "exercise", answer, service, TINY, prompt_batch[0][0]
    )


def _submitted_first_check(answer, client, prompt_batch):
    sampler = client.save_weights_and_get_sampling_client()
    tokens, params = prompt_batch
    against_engine.submitted_first_check("exercise", answer, sampler, tokens, params, 4)


def _two_await_check(answer, service, prompt_batch, response):
    fresh = service.create_lora_training_client(base_model=TINY, rank=4, seed=2)
    datums = [
        datum.build_grpo_datum(
            prompt_batch[0][0],
            datum.RolloutSample(list(s.tokens), list(s.logprobs), "", 0.0, a),
        )
        for s, a in zip(response.sequences, [0.5, -0.5, 0.25, -0.25], strict=True)
    ]
    asyncio.run(
        against_engine.two_await_check(
            "exercise", answer, fresh, datums, trio.AdamParams(learning_rate=1e-4)
        )
    )


# ----------------------------------------------------------------------------------
# Every exercise, by the name the learner defines
# ----------------------------------------------------------------------------------

EXERCISES = {
    "fraction_cut_off": Exercise(cell_check("fraction_cut_off"), FRACTION_CUT_OFF),
    "smallest_budget": Exercise(cell_check("smallest_budget"), SMALLEST_BUDGET),
    "correction_weights": Exercise(
        cell_check("correction_weights"), CORRECTION_WEIGHTS
    ),
    "last_boxed": Exercise(cell_check("last_boxed"), LAST_BOXED),
    "gaming_completion": Exercise(cell_check("gaming_completion"), GAMING_COMPLETION),
    "smallest_group_size": Exercise(
        cell_check("smallest_group_size"), SMALLEST_GROUP_SIZE
    ),
    "success_advantage": Exercise(cell_check("success_advantage"), SUCCESS_ADVANTAGE),
    "trained_target": Exercise(cell_check("trained_target"), TRAINED_TARGET),
    "looks_aligned": Exercise(cell_check("looks_aligned"), LOOKS_ALIGNED),
    "importance_sampling_loss": Exercise(
        _loss_check("importance_sampling"),
        IMPORTANCE_SAMPLING_LOSS,
        fixtures=("client", "loss_groups"),
    ),
    "grpo_step_by_hand": Exercise(
        _plain_step_check, GRPO_STEP_BY_HAND, fixtures=("service", "prompt_batch")
    ),
    "ppo_clipped_loss": Exercise(
        _loss_check("ppo", clip_low=0.8, clip_high=1.28),
        PPO_CLIPPED_LOSS,
        fixtures=("client", "loss_groups"),
    ),
    "grpo_step": Exercise(
        _grpo_step_check,
        GRPO_STEP,
        right=GRPO_STEP_RIGHT,
        fixtures=("service", "prompt_batch", "response"),
    ),
    "step_summary": Exercise(
        lambda answer: self_checks.step_summary_check("exercise", answer), STEP_SUMMARY
    ),
    "sample_submitted_first": Exercise(
        _submitted_first_check,
        SAMPLE_SUBMITTED_FIRST,
        fixtures=("client", "prompt_batch"),
    ),
    "train_step_async": Exercise(
        _two_await_check,
        TRAIN_STEP_ASYNC,
        fixtures=("service", "prompt_batch", "response"),
    ),
    "train_loop": Exercise(
        lambda answer: loop_check.train_loop_check("exercise", answer),
        WRONG_LOOPS,
        right=RIGHT_LOOPS,
    ),
    "gain_by_source": Exercise(
        lambda answer: self_checks.gain_by_source_check("exercise", answer),
        GAIN_BY_SOURCE,
    ),
    "wilson_by_hand": Exercise(
        lambda answer: self_checks.wilson_by_hand_check("exercise", answer),
        WILSON_BY_HAND,
    ),
    "flips_and_p": Exercise(
        lambda answer: self_checks.flips_and_p_check("exercise", answer), FLIPS_AND_P
    ),
    "questions_needed": Exercise(
        lambda answer: self_checks.questions_needed_check("exercise", answer),
        QUESTIONS_NEEDED,
    ),
    "token_weights": Exercise(
        lambda answer: self_checks.token_weights_check("exercise", answer),
        TOKEN_WEIGHTS,
    ),
    "k3_estimate": Exercise(
        lambda answer: self_checks.k3_estimate_check("exercise", answer), K3_ESTIMATE
    ),
}

WRONG = [(name, label) for name, ex in EXERCISES.items() for label in ex.wrong]


RIGHT = [("solution", name) for name in EXERCISES] + [
    (label, name) for name, ex in EXERCISES.items() for label in ex.right
]


def _run(request, name: str, answer: Any) -> None:
    exercise = EXERCISES[name]
    values = [request.getfixturevalue(f) for f in exercise.fixtures]
    with contextlib.redirect_stdout(io.StringIO()):
        exercise.check(answer, *values)


def test_every_exercise_of_the_series_is_here():
    """Every exercise cell of every notebook, and every exercise of the solutions
    files (notebooks 05, 07 and 09 check theirs with the package), has its
    wrong answers here: at least three each."""
    in_notebooks = {
        course._exercise_name(cell.source)
        for path in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")
        for cell in nbformat.read(path, as_version=4).cells
        if "exercise" in _tags(cell)
    }
    in_solutions = {
        name
        for path in (NOTEBOOKS / "solutions").glob("*.py")
        for name in course._load_solutions(path.stem).HIDDEN_CASES
    }
    assert in_notebooks <= set(EXERCISES), in_notebooks - set(EXERCISES)
    assert in_solutions == set(EXERCISES), in_solutions ^ set(EXERCISES)
    assert all(len(ex.wrong) >= 3 for ex in EXERCISES.values())


@pytest.mark.parametrize(("label", "name"), RIGHT)
def test_a_right_answer_passes(request, label, name):
    answer = solution(name) if label == "solution" else EXERCISES[name].right[label]
    _run(request, name, answer)  # strict: a failed check would raise


@pytest.mark.parametrize(("name", "label"), WRONG)
def test_a_named_wrong_answer_fails(request, name, label):
    with pytest.raises(AssertionError) as failed:
        _run(request, name, EXERCISES[name].wrong[label])
    # it failed on what it computed, not because the wrong answer itself crashed
    assert ": raised " not in str(failed.value), str(failed.value)
    if name == "train_loop":  # the hint names the first step and its own slip
        assert re.match(r"exercise: step \d+: ", str(failed.value)), failed.value
        assert WRONG_HINTS[label] in str(failed.value), failed.value


def test_the_package_checks_also_take_the_learners_own_run(tmp_path):
    """The notebooks pass their own run to the package's checks (its samples and
    metrics, its two evaluations, its logprobs): the solutions pass on them too,
    and an answer right on the constructed cases only fails on the run's."""
    from notebook_runs import make_source_run

    from grpo_helpers import run_files

    run_dir = make_source_run(tmp_path)  # notebook 05's settings, fast: tiny-random
    samples, metrics = run_files.load_samples(run_dir), run_files.load_metrics(run_dir)
    constructed = set(self_checks.summary_samples().columns)
    right = solution("step_summary")

    def right_on_constructed_only(frame, step):
        summary = right(frame, step)
        if set(frame.columns) != constructed:  # the run's samples.jsonl
            summary = {**summary, "reward_mean": summary["reward_mean"] + 0.5}
        return summary

    with contextlib.redirect_stdout(io.StringIO()):
        assert self_checks.step_summary_check("exercise", right, samples, metrics)
        assert self_checks.step_summary_check("exercise", right_on_constructed_only)
        with pytest.raises(AssertionError):
            self_checks.step_summary_check(
                "exercise", right_on_constructed_only, samples, metrics
            )
        base, trained = self_checks.flip_records("0110100111", "1110011101", seed=3)
        assert self_checks.flips_and_p_check(
            "exercise", solution("flips_and_p"), base, trained
        )
        sampled = [[-0.3, -1.2, -0.8], [-2.0]]
        reference = [[-0.4, -1.0, -0.8], [-1.1]]
        assert self_checks.k3_estimate_check(
            "exercise", solution("k3_estimate"), sampled, reference
        )


def test_self_check_compares_ragged_lists_element_by_element():
    """Notebook 09's exercise 1 returns lists of different lengths: no array form."""
    want = [[1.0, 0.5], [0.25, 0.25, 0.25], [1.0]]
    assert self_checks.self_check(
        "ragged", lambda: [list(w) for w in want], want, tol=1e-9
    )
    wrong = [[1.0, 0.5], [0.25, 0.3, 0.25], [1.0]]
    assert not self_checks.self_check(
        "ragged", lambda: wrong, want, tol=1e-9, strict=False
    )
    short = [[1.0, 0.5], [0.25, 0.25], [1.0]]
    assert not self_checks.self_check(
        "ragged", lambda: short, want, tol=1e-9, strict=False
    )


# ----------------------------------------------------------------------------------
# A property check's hint, and the checks' time limit
# ----------------------------------------------------------------------------------


def test_property_check_hints_without_the_answer(capsys):
    ok = self_checks.property_check(
        "demo",
        lambda: [3, 4],
        {"every value is even": lambda got: all(v % 2 == 0 for v in got)},
        strict=False,
    )
    assert not ok
    assert capsys.readouterr().out == "demo: not yet\n    every value is even\n"
    with pytest.raises(AssertionError, match="still the stub"):
        self_checks.property_check("demo", lambda: [None], {}, strict=True)


def test_checks_stop_an_endless_loop_when_a_limit_is_set(monkeypatch, capsys):
    from dataclasses import replace

    monkeypatch.setattr(
        self_checks, "SETTINGS", replace(self_checks.SETTINGS, check_seconds=0.3)
    )
    assert not self_checks.self_check(
        "loop", lambda: practically_endless(10), 1, strict=False
    )
    assert "took longer than 0.3 s" in capsys.readouterr().out
