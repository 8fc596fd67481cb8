"""Graded exercises: a student edition that holds no answers, hidden tests, and a
grader that cannot be gamed.

* the student edition (built once for the module) ships no solution, hidden test
  or path to either, and its graded cells hold only the learners' checks; no graded
  cell holds an expected value (the key stays with the grader);
* no cell of any notebook loads the reference solutions (issue 22);
* the hidden tests of every exercise of every notebook pass the solutions and fail
  a stub, a typical wrong answer, an answer that hard-codes the visible cases and
  an answer that delegates to a package function the exercise rules out, however
  it reaches it (in this process, no nbgrader: quick; each run as the grader does,
  in the kernel, then judged against the key);
* nbgrader grades notebook 03 handed in by eighteen students, each kernel in its
  sandbox (one grading run, two students at a time, shared by the tests below it
  and by the session's xdist workers, each test asserting its own student's
  rows): the solutions get full marks; delegating to the solutions,
  reading the solution files, patching ``checks``, hard-coding the visible
  examples, calling the package's own function and each attack of issue 38 (a
  fresh copy, a rebuilt function, a re-import, a hunt for the expected values,
  IPython's hooks, a swallowed or cancelled alarm, a process left running) score
  zero; an endless loop is stopped and reported while the notebook goes on; a
  correct submission with a cell slower than the function limit (a slow import on
  a loaded machine) gets full marks; the submissions run where the solutions are
  not; each attack of issue 47 scores zero and changes nothing (the snooper, the
  vandal, the caller, the signaller, the lingerer, the threader, the hog: the
  course directory's hashes, a listener at 127.0.0.1, a process of the teacher's
  and the processes left are recorded around the run); the grades file has a row
  per exercise and a total per student; ``--feedback`` writes each student's
  feedback;
* the sandbox: a command in it sees, writes and reaches only what it is given;
  ``grade --check-sandbox`` says whether it works; ``grade`` stops and says why
  where none works, and ``--no-sandbox`` warns and grades;
* around the kernel (stand-in processes, no nbgrader): the per-student time budget
  stops a grading process that hangs, a daemon left by a kernel is adopted and
  killed, the watchdog kills past a deadline or a cell's budget.
"""

from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import importlib
import importlib.util
import inspect
import io
import json
import numbers
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import types
import uuid
from dataclasses import dataclass
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import psutil
import pytest
from wrong_loops import WRONG_LOOPS

from grpo_helpers import advantages, cli, rewards, training
from grpo_helpers.classroom import course, grading, hidden_tests, self_checks
from grpo_helpers.results import answers, stats

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "03_group_advantages"  # two pure-numpy exercises: quick to grade
FUNCTION_SECONDS = 2  # the graded function's limit in the grading run below
SLOW_CELL_SECONDS = 4  # fay's slow cell: longer than the function limit
#: What a lean submission imports (it may delete the notebook's other cells).
LIGHT_IMPORTS = """import math

import numpy as np

from grpo_helpers import advantages, datum, rewards
from grpo_helpers.classroom import self_checks
from grpo_helpers.results import evaluation
"""


# ----------------------------------------------------------------------------------
# The student edition
# ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    base = tmp_path_factory.mktemp("edition")
    out, course_dir = base / "student", base / "course"
    notebooks = course.build_student(out, course_dir)
    return out, notebooks, course_dir


def _tagged(nb, tag):
    return [c for c in nb.cells if tag in c.metadata.get("tags", [])]


def test_the_student_edition_ships_no_answers(edition):
    out, notebooks, course_dir = edition
    assert sorted(p.relative_to(out).parts[0] for p in out.iterdir()) == [
        "README.md",
        "notebooks",
    ]
    assert sorted(p.name for p in notebooks.iterdir()) == [
        p.name for p in course.notebook_paths()
    ]
    for path in notebooks.glob("*.ipynb"):
        text = path.read_text()
        for marker in ("SOLUTION", "HIDDEN TESTS", "solutions/", "_load_solutions"):
            assert marker not in text, (path.name, marker)
        assert "self_checks.solution" not in text
        nb = nbformat.read(path, as_version=4)
        original = nbformat.read(course.NOTEBOOKS / path.name, as_version=4)
        # the exercises are the stubs, the graded cells the learners' own checks
        for tag in ("exercise", "self-check"):
            assert [c.source.strip() for c in _tagged(nb, tag)] == [
                c.source.strip() for c in _tagged(original, tag)
            ]
        graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
        assert len(graded) == len(_tagged(original, "exercise"))
        # where the teacher's notebook names its solutions file, the edition says
        # instead that they are not part of it
        named = any("solutions/" in c.source for c in original.cells)
        assert (course.NO_SOLUTIONS in text) == named, path.name
    # the teacher's side has what the edition lacks
    source = course_dir / "source" / course.ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    assert "### BEGIN HIDDEN TESTS" in source.read_text()
    assert "### BEGIN SOLUTION" in source.read_text()


def test_no_cell_of_any_notebook_loads_the_solutions():
    """Issue 22: check cells bound the reference solutions to a name
    (``solutions = self_checks.solution(...)``); no cell may load them."""
    loaders = {"solution", "_load_solutions", "spec_from_file_location", "run_path"}
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT  # notebook 06 awaits
    for path in course.notebook_paths():
        nb = nbformat.read(path, as_version=4)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            where = f"{path.name} cell {index}"
            tree = compile(cell.source, where, "exec", flags=flags)
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    callee = node.func
                    name = getattr(callee, "attr", getattr(callee, "id", ""))
                    assert name not in loaders, f"{where} calls {name}"
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    assert "solutions/" not in node.value, f"{where}: {node.value!r}"
                if isinstance(node, ast.Name) and "self-check" in cell.metadata.get(
                    "tags", []
                ):
                    assert "solution" not in node.id.lower(), f"{where}: {node.id}"
    assert not hasattr(self_checks, "solution")


# ----------------------------------------------------------------------------------
# Hidden tests of every exercise, in this process
# ----------------------------------------------------------------------------------


def _hidden_blocks():
    """``(notebook, exercise name, hidden block, key)`` of every graded cell."""
    blocks = []
    for path in course.notebook_paths():
        key = {}
        for cell in course.source_notebook(path, key).cells:
            grader = cell.metadata.get("nbgrader", {})
            if grader.get("grade"):
                block = cell.source[cell.source.index(hidden_tests.BEGIN) :]
                name = re.search(r"Hidden tests of (\w+)", block).group(1)
                blocks.append((path.stem, name, block, key[grader["grade_id"]]))
    return blocks


@pytest.fixture(scope="module")
def blocks():
    return _hidden_blocks()


def _run(block, name, answer):
    """Run a hidden block on ``answer`` as a graded cell would: ``(what it
    printed, the AssertionError's message or "")``."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(block, {name: answer})
    except AssertionError as error:
        return printed.getvalue(), str(error)
    return printed.getvalue(), ""


def _block(blocks, name):
    """The hidden block and key of exercise ``name``."""
    return next((b, k) for _, n, b, k in blocks if n == name)


def _passes(block, name, answer, key):
    """``""`` when the hidden test passes ``answer``, as the grader judges it
    (in the kernel, then against the key); else why not."""
    printed, raised = _run(block, name, answer)
    return raised or hidden_tests.judge(printed, key)


def _sequential_sampling(sampling_client, prompt_tokens_list, params_list, group_size):
    import pytrio as trio

    return [
        sampling_client.sample(
            prompt=trio.ModelInput.from_ints(tokens),
            num_samples=group_size,
            sampling_params=params,
        ).result()
        for tokens, params in zip(prompt_tokens_list, params_list, strict=True)
    ]


async def _awaits_before_submitting(training_client, datums, adam_params):
    fb = await training_client.forward_backward_async(
        datums, loss_fn="importance_sampling"
    )
    fb_output = await fb
    optim = await training_client.optim_step_async(adam_params)
    return fb_output, await optim


def _trains_degenerate_groups(training_client, prompts, responses, rewards, adam):
    """A GRPO step that forgets to skip the groups whose rewards are all equal."""
    from grpo_helpers import datum

    datums = []
    for prompt, response, group_rewards in zip(
        prompts, responses, rewards, strict=True
    ):
        mean = sum(group_rewards) / len(group_rewards)
        for seq, reward in zip(response.sequences, group_rewards, strict=True):
            sample = datum.RolloutSample(
                list(seq.tokens), list(seq.logprobs), "", reward, reward - mean
            )
            datums.append(datum.build_grpo_datum(prompt, sample))
    fb = training_client.forward_backward(datums, loss_fn="importance_sampling")
    optim = training_client.optim_step(adam)
    return fb.result(), optim.result()


def _engine_loss(name):
    """An answer that calls the engine's own loss function."""

    def loss(logprobs, old, adv, mask, low=0.8, high=1.2):
        from grpo_helpers.local import losses

        config = {"clip_low_threshold": low, "clip_high_threshold": high}
        return losses.loss_sum(name, logprobs, old, adv, None, config, mask)

    return loss


def _step_without_shift(model, lora_params, batches, adam_params):
    """Plain-PyTorch GRPO steps that read each token's logprob at its own
    position (no shift), then take the right Adam steps."""
    import torch

    optimizer = torch.optim.AdamW(
        lora_params,
        lr=adam_params.learning_rate,
        betas=(adam_params.beta1, adam_params.beta2),
        eps=adam_params.eps,
        weight_decay=adam_params.weight_decay,
    )
    losses = []
    for batch in batches:
        out = model(input_ids=batch.tokens, attention_mask=batch.attention_mask)
        logprobs = torch.log_softmax(out.logits.float(), dim=-1)
        chosen = logprobs.gather(-1, batch.tokens.unsqueeze(-1)).squeeze(-1)
        position = torch.arange(batch.tokens.shape[1])[None]
        start = batch.prompt_lengths[:, None]
        ends = start + batch.completion_lengths[:, None]
        mask = (position >= start) & (position < ends)
        ratio = torch.exp(chosen - batch.old_logprobs)
        loss = torch.where(mask, -ratio * batch.advantages[:, None], 0.0).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    return losses


def _wald(successes, n, z=1.96):
    p = successes / n
    half = z * np.sqrt(p * (1 - p) / n)
    return max(0.0, p - half), min(1.0, p + half)


def _positional_flips(base_records, trained_records):
    base = list(base_records["exact"])
    trained = list(trained_records["exact"])
    b = sum(1 for x, y in zip(base, trained, strict=True) if not x and y)
    c = sum(1 for x, y in zip(base, trained, strict=True) if x and not y)
    return b, c, stats.mcnemar_exact_p(b, c) if b + c else 1.0


#: A typical wrong answer to every exercise.
WRONG = {
    "fraction_cut_off": lambda counts, m: float(np.mean(np.asarray(counts) >= m)),
    "smallest_budget": lambda counts, coverage: next(
        (
            b
            for b in (64, 128, 256, 512, 1024, 2048, 4096, 8192)
            if np.mean(np.asarray(counts) <= b) > coverage
        ),
        None,
    ),
    "last_boxed": lambda text: (
        (m := re.search(r"\\boxed\{([^}]*)\}", text)) and m.group(1).strip()
    ),
    "gaming_completion": r"\boxed{7}",
    "smallest_group_size": lambda p, t: next(  # one too many
        g + 1 for g in range(2, 10**6) if p**g + (1 - p) ** g <= t
    ),
    "success_advantage": lambda g, k, scale="none": 1 - k / g,
    "trained_target": lambda p, c, i: None if i < len(p) else c[i - len(p)],
    "looks_aligned": lambda inputs, targets, n: all(
        t == i for t, i in zip(targets[n - 1 : -1], inputs[n:], strict=False)
    ),
    "importance_sampling_loss": lambda logprobs, old, adv, mask: (  # no mask
        -(logprobs - old).exp() * adv
    ).sum(),
    "grpo_step_by_hand": _step_without_shift,
    "ppo_clipped_loss": lambda logprobs, old, adv, mask, low, high: (
        -((logprobs - old).exp() * adv)
        .maximum((logprobs - old).exp().clamp(low, high) * adv)[mask]
        .sum()
    ),
    "grpo_step": lambda *args: _trains_degenerate_groups(*args),
    "train_loop": WRONG_LOOPS["a degenerate group sent"],
    "gain_by_source": lambda flips: {  # every flip counted as a gain of the box
        "the box": len(flips),
        "answering, in time": 0,
        "arithmetic": 0,
    },
    "step_summary": lambda samples, step: {
        "reward_mean": float(samples[samples["step"] == step]["reward"].mean()),
        "accuracy": float(samples[samples["step"] == step]["exact"].mean()),
        "frac_degenerate": float(
            samples.groupby("question_index")["reward"]
            .agg(lambda r: r.max() == r.min())
            .mean()
        ),
    },
    "sample_submitted_first": _sequential_sampling,
    "train_step_async": _awaits_before_submitting,
    "wilson_by_hand": _wald,
    "flips_and_p": _positional_flips,
    "questions_needed": lambda accuracy, half_width: (
        next(
            n
            for n in range(2, 100_000)
            if np.diff(stats.wilson_interval(round(accuracy * n), n))[0] / 2
            < half_width
        )
        + 1
    ),
    "token_weights": lambda lengths, mode, max_tokens: [
        1.0 / max_tokens if mode == "sequence_mean" else 1.0 for _ in lengths
    ],
    "k3_estimate": lambda sampled, reference: float(  # d = reference - sampled
        np.mean(
            [
                np.exp(s - r) + (r - s) - 1
                for row_s, row_r in zip(sampled, reference, strict=True)
                for s, r in zip(row_s, row_r, strict=True)
            ]
        )
    ),
}


def _package_step(training_client, prompts, responses, rewards, adam):
    """A GRPO step that calls the loop's own Datum builder."""
    from grpo_helpers import datum, step_math

    groups = []
    for prompt, response, group_rewards in zip(
        prompts, responses, rewards, strict=True
    ):
        adv = advantages.group_advantages(group_rewards)
        samples = [
            datum.RolloutSample(list(s.tokens), list(s.logprobs), "", r, a)
            for s, r, a in zip(response.sequences, group_rewards, adv, strict=True)
        ]
        groups.append(step_math.PromptGroup(0, prompt, "", samples))
    datums = step_math.build_step_datums(groups)
    if not datums:
        return None
    fb = training_client.forward_backward(datums, loss_fn="importance_sampling")
    return fb.result(), training_client.optim_step(adam).result()


def _delegate_questions(accuracy, half_width):
    return next(
        n
        for n in range(1, 100_000)
        if np.diff(stats.wilson_interval(round(accuracy * n), n))[0] / 2 <= half_width
    )


#: Answers that call the package function the exercise rules out.
DELEGATES = {
    "last_boxed": lambda text: rewards.extract_boxed(text),
    "smallest_group_size": lambda p, t: next(
        g for g in range(2, 10**6) if advantages.degenerate_probability(p, g) <= t
    ),
    "success_advantage": lambda g, k, scale="none": advantages.group_advantages(
        [1.0] * k + [0.0] * (g - k), scale=scale
    )[0],
    "wilson_by_hand": lambda k, n, z=1.96: stats.wilson_interval(k, n),
    "flips_and_p": lambda base, trained: (
        lambda merged: (
            b := int((~merged["exact_x"] & merged["exact_y"]).sum()),
            c := int((merged["exact_x"] & ~merged["exact_y"]).sum()),
            stats.mcnemar_exact_p(b, c),
        )
    )(base.merge(trained, on="index")),
    "token_weights": lambda lengths, mode, max_tokens: advantages.length_scales(
        lengths, mode, max_tokens
    ),
    "gain_by_source": lambda flips: answers.gain_sources(flips).to_dict(),
    "importance_sampling_loss": _engine_loss("importance_sampling"),
    "ppo_clipped_loss": _engine_loss("ppo"),
    "grpo_step": lambda client, prompts, responses, rewards, adam: _package_step(
        client, prompts, responses, rewards, adam
    ),
    "train_loop": lambda service, config, rows: training.train_sync(
        config, service, progress=False
    ).metrics.to_dict("records"),
    "k3_estimate": lambda sampled, reference: advantages.kl_penalty(
        sampled, reference, 0.0
    )[1]["kl_k3"],
}


def test_every_exercise_has_a_hidden_test(blocks):
    names = [name for _, name, _, _ in blocks]
    assert set(names) == set(WRONG)
    assert len(names) == len(set(names)) == 22


def test_hidden_tests_pass_the_solutions(blocks):
    for stem, name, block, key in blocks:
        answer = getattr(course._load_solutions(stem), name)
        assert _passes(block, name, answer, key) == "", (stem, name)


def test_hidden_tests_fail_stubs_and_wrong_answers(blocks):
    for stem, name, block, key in blocks:
        namespace = {}
        nb = nbformat.read(course.NOTEBOOKS / f"{stem}.ipynb", as_version=4)
        stubs = "\n\n".join(c.source for c in _tagged(nb, "exercise"))
        exec(stubs, namespace)
        assert "hidden test" in _passes(block, name, namespace[name], key), (
            name,
            "stub",
        )
        assert "hidden test" in _passes(block, name, WRONG[name], key), (
            name,
            "wrong",
        )


def test_hidden_tests_fail_answers_that_call_the_package(blocks):
    for stem, name, block, key in blocks:
        if name in DELEGATES:
            # the package's function gives the right values outside the test ...
            solution = getattr(course._load_solutions(stem), name)
            cases = course._load_solutions(stem).HIDDEN_CASES[name]
            if "setup" not in cases:
                case = cases["cases"][0]
                got, want = DELEGATES[name](*case), solution(*case)
                if isinstance(want, str):
                    assert got == want
                else:
                    assert got == pytest.approx(want, abs=5e-3)
            # ... and raises inside it
            assert "asks you to write it without" in _passes(
                block, name, DELEGATES[name], key
            ), name


def test_hidden_tests_fail_answers_that_load_the_solutions(blocks):
    """Here the solutions exist (the teacher's checkout); the hidden test still
    makes the teacher's loader raise."""
    for stem, name, block, key in blocks:
        if name == "gaming_completion":
            continue  # a value: nothing is called while the test runs

        def delegate(*args, stem=stem, name=name):
            return getattr(course._load_solutions(stem), name)(*args)

        assert "_load_solutions" in _passes(block, name, delegate, key), name


def _visible_calls(stem):
    """``{exercise name: [(repr, argument tuple)]}`` that the notebook's own checks
    pass to the learner's functions (checks that need no earlier cell)."""
    nb = nbformat.read(course.NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    solutions = course._load_solutions(stem)
    names = [course._exercise_name(c.source) for c in _tagged(nb, "exercise")]
    calls = {name: [] for name in names}
    namespace = {}
    exec(LIGHT_IMPORTS, namespace)

    def recorder(name):
        def record(*args):
            calls[name].append((repr(args), args))
            return getattr(solutions, name)(*args)

        return record

    for name in names:
        namespace[name] = recorder(name)
    for cell in _tagged(nb, "self-check"):
        exec(cell.source, namespace)
    return calls


@pytest.mark.parametrize("stem", ["01_gsm8k_dataset", "03_group_advantages"])
def test_hidden_tests_fail_answers_that_hard_code_the_visible_cases(blocks, stem):
    solutions = course._load_solutions(stem)
    for name, visible in _visible_calls(stem).items():
        assert visible, name
        block, key = next((b, k) for s, n, b, k in blocks if (s, n) == (stem, name))
        hidden = {repr(tuple(c)) for c in solutions.HIDDEN_CASES[name]["cases"]}
        assert not hidden & {key for key, _ in visible}, name
        memo = {key: getattr(solutions, name)(*args) for key, args in visible}

        def hard_coded(*args, memo=memo):
            return memo.get(repr(args))

        assert hard_coded(*visible[0][1]) is not None
        assert "hidden test" in _passes(block, name, hard_coded, key), name


def _practically_endless(seconds):
    """A busy loop that gives up after ``seconds`` (so that a broken limit fails
    the test instead of hanging it), swallowing exceptions as it goes."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            pass
        except Exception:  # noqa: BLE001 - a loop that swallows exceptions
            continue
    return 2


def test_hidden_tests_stop_an_endless_loop(blocks, monkeypatch):
    monkeypatch.setenv("GRPO_CHECK_SECONDS", "0.5")
    block, key = _block(blocks, "smallest_group_size")

    def endless(pass_rate, max_degenerate):
        return _practically_endless(20)

    started = time.perf_counter()
    assert "took longer than 0.5 s" in _passes(
        block, "smallest_group_size", endless, key
    )
    assert time.perf_counter() - started < 5


def test_a_forbidden_function_works_again_after_the_hidden_test(blocks):
    block, key = _block(blocks, "smallest_group_size")
    _passes(block, "smallest_group_size", DELEGATES["smallest_group_size"], key)
    assert advantages.degenerate_probability(0.5, 2) == pytest.approx(0.5)


#: The solution of smallest_group_size, loaded before any hidden test forbids the
#: teacher's loader.
SMALLEST = course._load_solutions(NOTEBOOK).smallest_group_size


def _fresh_advantages():
    """A second copy of ``grpo_helpers.advantages``, loaded from its file."""
    spec = importlib.util.spec_from_file_location("_copy", advantages.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _smallest(probability):
    """An answer to smallest_group_size that calls ``probability(p, g)``."""

    def smallest_group_size(pass_rate, max_degenerate):
        group_size = 2
        while probability(pass_rate, group_size) > max_degenerate:
            group_size += 1
        return group_size

    return smallest_group_size


def _copy_in_the_call(pass_rate, max_degenerate):
    return _smallest(_fresh_advantages().degenerate_probability)(
        pass_rate, max_degenerate
    )


def _re_imported(pass_rate, max_degenerate):
    kept = sys.modules.pop("grpo_helpers.advantages")
    try:
        again = importlib.import_module("grpo_helpers.advantages")
    finally:
        sys.modules["grpo_helpers.advantages"] = kept
    return _smallest(again.degenerate_probability)(pass_rate, max_degenerate)


def _in_a_thread(pass_rate, max_degenerate):
    copy = _fresh_advantages().degenerate_probability
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(_smallest(copy), pass_rate, max_degenerate).result()


def _on_a_pool_thread(answer):
    def run(pass_rate, max_degenerate):
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(answer, pass_rate, max_degenerate).result()

    return run


def _in_a_process(pass_rate, max_degenerate):
    code = (
        "from grpo_helpers import advantages as a; import sys; p, t = "
        f"{pass_rate}, {max_degenerate}; print(next(g for g in range(2, 999) "
        "if a.degenerate_probability(p, g) <= t))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return int(done.stdout)


class _Lazy:
    """A number computed when the test reads it, after the call returned."""

    def __init__(self, pass_rate, max_degenerate):
        self.args = pass_rate, max_degenerate

    def __index__(self):
        return _smallest(advantages.degenerate_probability)(*self.args)

    __int__ = __index__


numbers.Integral.register(_Lazy)


def _watch_switched_off(pass_rate, max_degenerate):
    watch = sys.getprofile()
    sys.setprofile(None)
    try:
        return _smallest(_fresh_advantages().degenerate_probability)(
            pass_rate, max_degenerate
        )
    finally:
        sys.setprofile(watch)


@pytest.mark.parametrize(
    "answer",
    [
        "a copy loaded before",
        "a copy loaded in the call",
        "a function rebuilt before",
        "a re-import",
        "a module swapped in sys.modules",
        "a copy run on a new thread",
        "a copy loaded before, run on a pool thread",
        "a process",
        "a lazy result",
        "the watch switched off",
    ],
)
def test_a_forbidden_function_stays_forbidden_however_it_is_reached(
    blocks, answer, monkeypatch
):
    """Issue 38: a second copy of the module, a rebuilt function, a re-import,
    a decoy module, a thread, a process, or a result computed after the call all
    fail the case; the same answer with the package's function outside the test
    is right (so it fails for what it reached)."""
    block, key = _block(blocks, "smallest_group_size")
    function = advantages.degenerate_probability
    rebuilt = types.FunctionType(function.__code__, function.__globals__, "mine")
    answers = {
        "a copy loaded before": _smallest(_fresh_advantages().degenerate_probability),
        "a copy loaded in the call": _copy_in_the_call,
        "a function rebuilt before": _smallest(rebuilt),
        "a re-import": _re_imported,
        "a module swapped in sys.modules": _smallest(function),
        "a copy run on a new thread": _in_a_thread,
        # issue 48: only the watch set on new threads sees this one
        "a copy loaded before, run on a pool thread": _on_a_pool_thread(
            _smallest(_fresh_advantages().degenerate_probability)
        ),
        "a process": _in_a_process,
        "a lazy result": _Lazy,
        "the watch switched off": _watch_switched_off,
    }
    if answer == "a module swapped in sys.modules":
        decoy = types.ModuleType("grpo_helpers.advantages")
        decoy.degenerate_probability = lambda p, g: p**g + (1 - p) ** g
        monkeypatch.setitem(sys.modules, "grpo_helpers.advantages", decoy)
    verdict = _passes(block, "smallest_group_size", answers[answer], key)
    assert verdict.startswith("hidden test of smallest_group_size, case 1 of 7")
    forbidden = "advantages.degenerate_probability" in verdict and "without" in verdict
    assert forbidden or "started a process" in verdict, verdict
    monkeypatch.undo()
    outside = answers[answer](0.8, 0.3)
    assert int(outside) == course._load_solutions(NOTEBOOK).smallest_group_size(
        0.8, 0.3
    )


def test_no_graded_cell_holds_an_expected_value(blocks):
    """The hidden blocks carry the cases; the expected values stay in the key."""
    for _, name, block, key in blocks:
        assert "expected" not in block.replace("expected value", ""), name
        shown = [
            repr(value)
            for value in key["expected"]
            if isinstance(value, float) and len(repr(value)) > 6
        ]
        assert not [text for text in shown if text in block], name


def test_a_stack_walk_finds_no_expected_value(blocks):
    def peek(*args):
        frame = sys._getframe(1)
        while frame is not None:
            for local in frame.f_locals.values():
                floats = isinstance(local, list) and len(local) == 8
                if floats and all(isinstance(v, float) for v in local):
                    return local[0]
            frame = frame.f_back
        return None

    block, key = _block(blocks, "success_advantage")
    assert "returned None" in _passes(block, "success_advantage", peek, key)


def _swallows(seconds):
    """A loop that swallows every alarm, then returns the right answer."""

    def smallest_group_size(pass_rate, max_degenerate):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                time.sleep(0.01)
            except BaseException:  # noqa: BLE001 - the attack
                continue
        return SMALLEST(pass_rate, max_degenerate)

    return smallest_group_size


def _cancels(pass_rate, max_degenerate):
    signal.setitimer(signal.ITIMER_REAL, 0)
    return SMALLEST(pass_rate, max_degenerate)


def _replaces_the_handler(pass_rate, max_degenerate):
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    return SMALLEST(pass_rate, max_degenerate)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (_swallows(1.0), "took longer than 0.3 s"),
        (_cancels, "stopped the hidden test's time limit"),
        (_replaces_the_handler, "changed the hidden test's alarm"),
    ],
    ids=["swallows", "cancels", "replaces-the-handler"],
)
def test_an_alarm_swallowed_or_cancelled_still_fails_the_case(
    blocks, monkeypatch, answer, said
):
    """In the kernel: a right answer that swallowed the alarm, cancelled it or
    replaced its handler fails (an endless one is killed from outside: see
    ``test_a_loop_that_swallows_or_cancels_the_alarm_is_killed``)."""
    monkeypatch.setenv("GRPO_CHECK_SECONDS", "0.3")
    block, key = _block(blocks, "smallest_group_size")
    assert said in _passes(block, "smallest_group_size", answer, key)
    assert signal.getsignal(signal.SIGALRM) is not signal.SIG_IGN
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_the_hidden_test_tells_the_grader_each_deadline(blocks, monkeypatch, tmp_path):
    watch = tmp_path / "watch"
    monkeypatch.setenv("GRPO_GRADING_WATCH", str(watch))
    monkeypatch.setenv("GRPO_CHECK_SECONDS", "7")
    seen = []

    def looks(pass_rate, max_degenerate):
        seen.append(watch.read_text())
        return SMALLEST(pass_rate, max_degenerate)

    block, key = _block(blocks, "smallest_group_size")
    started = time.time()
    assert _passes(block, "smallest_group_size", looks, key) == ""
    assert len(seen) == 7
    deadline, _, where = seen[0].partition(" ")
    assert started + 7 <= float(deadline) <= time.time() + 7
    assert where == "hidden test of smallest_group_size, case 1 of 7 ((0.8, 0.3))"
    assert watch.read_text() == ""  # no case runs


def test_judge_wants_one_set_of_right_results(blocks):
    block, key = _block(blocks, "smallest_group_size")
    printed, raised = _run(block, "smallest_group_size", SMALLEST)
    assert raised == ""
    assert hidden_tests.judge(printed, key) == ""
    (line,) = printed.splitlines()
    assert "2 sets of results" in hidden_tests.judge(printed + printed, key)
    assert "no results were printed" in hidden_tests.judge("", key)
    forged = line.replace('["value", 6]', '["value", 9]')
    assert forged != line
    assert "case 1 of 7 ((0.8, 0.3)): wrong result 9" in hidden_tests.judge(forged, key)
    short = hidden_tests.RESULT + json.dumps(
        {"exercise": "smallest_group_size", "outcomes": [["value", 6]]}
    )
    assert hidden_tests.judge(short, key).endswith(": not run")
    # the runtime, copied into the cells, prints what RESULT names
    assert hidden_tests.RESULT in inspect.getsource(hidden_tests.run_hidden_tests)


def test_a_hook_that_refuses_the_watch_fails_the_test(blocks):
    """An audit hook of the notebook that stops the hidden test's own from being
    added (it cannot be removed later: it stays idle after this test)."""
    refusing = [True]

    def refuse(event, args):
        if refusing[0] and event == "sys.addaudithook":
            raise RuntimeError("no")

    sys.addaudithook(refuse)
    try:
        block, key = _block(blocks, "smallest_group_size")
        verdict = _passes(block, "smallest_group_size", SMALLEST, key)
    finally:
        refusing[0] = False
    assert "could not watch it" in verdict


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
        "loop", lambda: _practically_endless(10), 1, strict=False
    )
    assert "took longer than 0.3 s" in capsys.readouterr().out


# ----------------------------------------------------------------------------------
# nbgrader grades notebook 03 handed in by eighteen students
# ----------------------------------------------------------------------------------


def _submission(notebooks: Path, answers: list[str], lean: bool = True, slow=""):
    """The student edition of notebook 03 with its exercise cells replaced by
    ``answers``. ``lean``: only light imports, the exercises and their graded
    cells (a student may delete cells; the graded ones are restored anyway).
    ``slow``: code run before the imports, in the same cell (the imports, which
    everything after needs, finish only after it)."""
    nb = nbformat.read(notebooks / f"{NOTEBOOK}.ipynb", as_version=4)
    for cell, answer in zip(_tagged(nb, "exercise"), answers, strict=True):
        cell.source = answer
    if lean:
        kept = [
            c
            for c in nb.cells
            if "exercise" in c.metadata.get("tags", [])
            or c.metadata.get("nbgrader", {}).get("grade")
        ]
        imports = nbformat.v4.new_code_cell(slow + LIGHT_IMPORTS)
        nb.cells = [imports, *kept]
    return nb


def _solution(name):
    return course._solution_block(NOTEBOOK, name)


def _visible_success_advantages():
    solution = course._load_solutions(NOTEBOOK).success_advantage
    cases = [
        (g, k, s) for g in (2, 4, 8, 16) for k in range(1, g) for s in ("none", "group")
    ]
    return {case: solution(*case) for case in cases}


CHEATS = {
    "carl": [  # delegates to the teacher's loader; reads the solution file
        textwrap.dedent("""
            from grpo_helpers.classroom import course


            def smallest_group_size(pass_rate, max_degenerate):
                solutions = course._load_solutions("03_group_advantages")
                return solutions.smallest_group_size(pass_rate, max_degenerate)
        """),
        textwrap.dedent("""
            from grpo_helpers.settings import SETTINGS

            path = SETTINGS.project_root / "notebooks/solutions/03_group_advantages.py"
            exec(path.read_text())  # defines success_advantage
        """),
    ],
    "dora": [  # patches checks (the stub stays); hard-codes the visible examples
        textwrap.dedent("""
            from grpo_helpers.classroom import self_checks


            def always_ok(exercise, *args, **kwargs):
                print(f"{exercise}: ok")
                return True


            self_checks.self_check = self_checks.property_check = always_ok


            def smallest_group_size(pass_rate, max_degenerate):
                return None
        """),
        None,  # filled in by the fixture: the visible cases' values, literally
    ],
}

#: eve's second answer calls the package's own function, which the exercise rules
#: out (her first one never ends).
PACKAGE_CALL = textwrap.dedent("""
    def success_advantage(group_size, num_successes, scale="none"):
        rewards = [1.0] * num_successes + [0.0] * (group_size - num_successes)
        return advantages.group_advantages(rewards, scale=scale)[0]
""")


# The attacks of issue 38, each a student who must score zero. Each exercise cell
# below is what the student hands in; what the grader stops is in the comment.

#: A second copy of the module, loaded from its file; a function rebuilt from the
#: original's code before the hidden test swaps it.
FRESH_COPY = textwrap.dedent("""
    import importlib.util

    from grpo_helpers import advantages

    _spec = importlib.util.spec_from_file_location("_copy", advantages.__file__)
    _copy = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_copy)


    def smallest_group_size(pass_rate, max_degenerate):
        group_size = 2
        while _copy.degenerate_probability(pass_rate, group_size) > max_degenerate:
            group_size += 1
        return group_size
""")
REBUILT = textwrap.dedent("""
    import types

    from grpo_helpers import advantages

    _original = advantages.group_advantages
    _rebuilt = types.FunctionType(
        _original.__code__, _original.__globals__, "mine", _original.__defaults__
    )
    _rebuilt.__kwdefaults__ = _original.__kwdefaults__


    def success_advantage(group_size, num_successes, scale="none"):
        rewards = [1.0] * num_successes + [0.0] * (group_size - num_successes)
        return float(_rebuilt(rewards, scale=scale)[0])
""")
#: A re-import, with the module the package had put back where it was.
REIMPORT = textwrap.dedent("""
    import importlib
    import sys

    import grpo_helpers

    _kept = sys.modules.pop("grpo_helpers.advantages")
    _again = importlib.import_module("grpo_helpers.advantages")
    sys.modules["grpo_helpers.advantages"] = grpo_helpers.advantages = _kept


    def smallest_group_size(pass_rate, max_degenerate):
        group_size = 2
        while _again.degenerate_probability(pass_rate, group_size) > max_degenerate:
            group_size += 1
        return group_size
""")
#: Looks for the expected values wherever the kernel could hold them: the stack
#: (the hidden test's frames), IPython's history, the line cache, any database
#: in or under the working folder (the gradebook); the visible cases, literally.
HUNT = textwrap.dedent("""
    import ast
    import glob
    import linecache
    import os
    import re
    import sqlite3
    import sys

    VISIBLE = {visible!r}


    def _texts():
        texts = [str(t) for t in get_ipython().user_ns.get("In", [])]
        texts += ["".join(e[2]) for e in list(linecache.cache.values()) if len(e) > 2]
        for top in {{os.getcwd(), os.environ.get("PWD", ".")}}:
            for path in glob.glob(os.path.join(top, "**", "*.db"), recursive=True):
                try:
                    db = sqlite3.connect(path)
                    names = db.execute("select name from sqlite_master")
                    for table in [r[0] for r in names]:
                        for row in db.execute(f"select * from '{{table}}'"):
                            texts += [v for v in row if isinstance(v, str)]
                except Exception:
                    pass
        return texts


    def _hunt(args):
        frame = sys._getframe(1)
        while frame is not None:
            found = frame.f_locals
            if "want" in found and "case" in found:
                return found["want"]
            frame = frame.f_back
        for text in _texts():
            found = r"cases=(\\[.*?\\]),\\s*expected=(\\[.*?\\])"
            for cases, expected in re.findall(found, text, re.S):
                try:
                    cases = ast.literal_eval(cases)
                    expected = ast.literal_eval(expected)
                except (ValueError, SyntaxError):
                    continue
                for case, want in zip(cases, expected):
                    if tuple(case) == tuple(args):
                        return want
        return None


    def success_advantage(group_size, num_successes, scale="none"):
        args = (group_size, num_successes, scale)
        return VISIBLE[args] if args in VISIBLE else _hunt(args)
""")
#: Installed by an earlier cell: an input transformer that empties exercise 1's
#: forbid list, an AST transformer that empties exercise 2's; the answers call
#: the forbidden functions.
INPUT_TRANSFORMER = textwrap.dedent("""
    import re

    from grpo_helpers import advantages


    def _open_up(lines):
        text = "".join(lines)
        if "Hidden tests of smallest_group_size" in text:
            text = re.sub(r"forbid=\\[.*?\\],\\n", "forbid=[],\\n", text, flags=re.S)
            marks = r"fingerprints=\\{.*?\\},\\n"
            text = re.sub(marks, "fingerprints={},\\n", text, flags=re.S)
        return text.splitlines(keepends=True)


    get_ipython().input_transformers_cleanup.append(_open_up)


    def smallest_group_size(pass_rate, max_degenerate):
        group_size = 2
        while advantages.degenerate_probability(pass_rate, group_size) > max_degenerate:
            group_size += 1
        return group_size
""")
AST_TRANSFORMER = textwrap.dedent("""
    import ast

    from grpo_helpers import advantages


    class _OpenUp(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if getattr(node.func, "id", "") == "run_hidden_tests":
                for keyword in node.keywords:
                    if keyword.arg == "forbid":
                        keyword.value = ast.List(elts=[], ctx=ast.Load())
                    if keyword.arg == "fingerprints":
                        keyword.value = ast.Dict(keys=[], values=[])
            return node


    get_ipython().ast_transformers.append(_OpenUp())


    def success_advantage(group_size, num_successes, scale="none"):
        rewards = [1.0] * num_successes + [0.0] * (group_size - num_successes)
        return float(advantages.group_advantages(rewards, scale=scale)[0])
""")
#: A custom exception handler that silences every error, stubs for answers.
CUSTOM_EXC = textwrap.dedent("""
    def _quiet(shell, etype, value, tb, tb_offset=None):
        return None


    get_ipython().set_custom_exc((BaseException,), _quiet)


    def smallest_group_size(pass_rate, max_degenerate):
        return None
""")
STUB_2 = textwrap.dedent("""
    def success_advantage(group_size, num_successes, scale="none"):
        return None
""")
#: Endless loops that swallow the alarm, or cancel it (they wait rather than
#: spin, to leave the cores to the other students).
SWALLOWS = textwrap.dedent("""
    import time


    def smallest_group_size(pass_rate, max_degenerate):
        while True:
            try:
                time.sleep(1)
            except BaseException:  # the alarm too
                continue
""")
CANCELS = textwrap.dedent("""
    import signal
    import time


    def smallest_group_size(pass_rate, max_degenerate):
        signal.setitimer(signal.ITIMER_REAL, 0)  # no alarm
        while True:
            time.sleep(1)
""")
#: A process in a session of its own that outlives the notebook and rewrites
#: the grades: this student's results file, then the grades file. It marks its
#: own folder (``kit-canary``) to show that it ran.
LEFTOVER = textwrap.dedent('''
    import os
    import subprocess
    import sys
    import time

    FORGE = """
    import json, pathlib, time
    course, canary = pathlib.Path({course!r}), pathlib.Path("kit-canary")
    grades = {{"exercise-1": [1.0, 1.0], "exercise-2": [1.0, 1.0]}}
    forged = {{"notebooks": {{"{notebook}": {{"grades": grades, "errors": {{}}}}}}}}
    for _ in range(900):
        time.sleep(0.1)
        with open(canary, "a") as out:
            out.write(".")
        if (course / "results").is_dir():
            (course / "results" / "kit.json").write_text(json.dumps(forged))
        if (course / "grades.csv").is_file():
            with open(course / "grades.csv", "a") as out:
                out.write("kit,forged\\\\n")
    """
    subprocess.Popen(
        [sys.executable, "-c", FORGE, {marker!r}],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):  # until it runs (a loaded machine starts it slowly)
        if os.path.exists("kit-canary"):
            break
        time.sleep(0.1)
    print("kit's forger runs:", os.path.exists("kit-canary"))


    def smallest_group_size(pass_rate, max_degenerate):
        return None
''')

# The students of issue 47, who attack the machine or the watch. Each cell starts
# with the constants the test gives it (``TARGETS``: absolute paths it should not
# reach; ``VISIBLE``: the visible cases' values); each prints what it got, and
# answers with whatever it found (so that anything found would earn points).

#: Reads the key, the solutions and another student's submission: by the
#: absolute paths it was given, and wherever walking up from the package's file,
#: its working folder (the notebook's) and the Python installation leads.
SNOOPER_1 = textwrap.dedent("""
    import json
    import os
    import stat
    import sys
    from pathlib import Path

    import grpo_helpers

    LOOK_FOR = [
        "notebooks/solutions/03_group_advantages.py",
        "build/grading/hidden_key.json",
        "hidden_key.json",
        "gradebook.db",
        "grpo-grader-*/gradebook.db",
        "grpo-grader-*/nbgrader/submitted/*/*/*.ipynb",
        "*/ada/03_group_advantages.ipynb",
    ]
    found = list(TARGETS)
    for start in (grpo_helpers.__file__, os.getcwd(), sys.prefix):
        for folder in Path(start).resolve().parents:
            for pattern in LOOK_FOR:
                found += [str(path) for path in folder.glob(pattern)]
    READ = {}
    for path in found:
        try:
            READ[path] = Path(path).read_bytes()
        except OSError:
            pass
    print("the snooper read:", json.dumps(sorted(READ)))
    HELD = set()  # files open in the sandbox: its own and its init's
    for pid in ("self", "1"):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if stat.S_ISREG(os.stat(f"/proc/{pid}/fd/{fd}").st_mode):
                    HELD.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
    print("the snooper holds:", json.dumps(sorted(HELD)))
    KEYS = []
    for path, text in READ.items():
        if path.endswith(".json"):
            KEYS += [entry for nb in json.loads(text).values() for entry in nb.values()]
        if path.endswith(".py"):
            exec(text.decode())  # the solutions: smallest_group_size among them
    if "smallest_group_size" not in globals():

        def smallest_group_size(pass_rate, max_degenerate):
            return None
""")
SNOOPER_2 = textwrap.dedent("""
    def success_advantage(group_size, num_successes, scale="none"):
        case = (group_size, num_successes, scale)
        if case in VISIBLE:
            return VISIBLE[case]
        for entry in KEYS:  # the key, had it been read
            shown = entry["shown"]
            if entry["exercise"] == "success_advantage" and repr(case) in shown:
                return entry["expected"][shown.index(repr(case))]
        return None
""")
#: Writes into the gradebook, the key, another submission, the source notebooks
#: (appends to them) and the project's notebooks folder (a new file); makes the
#: grader's watch file a link to the key.
VANDAL = textwrap.dedent("""
    import os
    from pathlib import Path

    import grpo_helpers

    found = list(TARGETS)
    for start in (grpo_helpers.__file__, os.getcwd()):
        for folder in Path(start).resolve().parents:
            for pattern in ("grpo-grader-*/gradebook.db", "grpo-grader-*/*.json"):
                found += [str(path) for path in folder.glob(pattern)]
    WROTE = []
    for path in found:
        try:
            with open(path, "ab") as out:
                out.write(b"the vandal was here")
            WROTE.append(path)
        except OSError:
            pass
    for path in NEW_FILES:
        try:
            Path(path).write_text("the vandal was here")
            WROTE.append(path)
        except OSError:
            pass
    print("the vandal wrote:", sorted(WROTE))
    # the grader's watch file, in the kernel's folder, made a link to the key:
    # a grader that writes it would write the key
    WATCH = os.environ.get("GRPO_GRADING_WATCH", "")
    if os.path.lexists(WATCH):
        os.unlink(WATCH)
    os.symlink(TARGETS[1], WATCH)
    print("the vandal linked:", WATCH, "->", os.readlink(WATCH))


    def smallest_group_size(pass_rate, max_degenerate):
        return None
""")
#: Connects to a port the test listens on at 127.0.0.1; resolves a host name.
CALLER = textwrap.dedent("""
    import socket

    GOT = []
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=5) as line:
            line.sendall(b"the caller was here")
        GOT.append("connected")
    except OSError as error:
        GOT.append(f"no connection: {error}")
    try:
        GOT.append(f"resolved: {socket.getaddrinfo('pypi.org', 443)[0][4]}")
    except OSError as error:
        GOT.append(f"no name resolution: {error}")
    print("the caller got:", GOT)


    def smallest_group_size(pass_rate, max_degenerate):
        return None
""")
#: Prints 25 MB, past what a notebook may print (20 MB).
FLOOD = textwrap.dedent("""
    print("x" * 25 * 2**20)


    def success_advantage(group_size, num_successes, scale="none"):
        return None
""")
#: Stops and kills its parent, a process of the teacher's (``BYSTANDER``) and
#: every process it can list (outside a sandbox, where it lists the machine's,
#: only the first two: a broken sandbox fails the test, not the machine).
SIGNALLER = textwrap.dedent("""
    import os
    import signal

    listed = {int(entry) for entry in os.listdir("/proc") if entry.isdigit()}
    targets = {os.getppid(), BYSTANDER, *listed} - {os.getpid()}
    if len(listed) > 50:
        targets = {os.getppid(), BYSTANDER}
    SENT = []
    for pid in sorted(targets):
        for number in (signal.SIGSTOP, signal.SIGKILL):
            try:
                os.kill(pid, number)
                SENT.append(f"{number.name} {pid}")
            except OSError:
                pass
    print("the signaller sent:", SENT)


    def smallest_group_size(pass_rate, max_degenerate):
        return None
""")
#: Leaves a detached process that waits, then writes into the course directory
#: again and again.
LINGERER = textwrap.dedent('''
    import subprocess
    import sys

    LINGER = f"""
    import time
    time.sleep(3)  # until its notebook has ended
    for _ in range(600):
        for path in {TARGETS!r}:
            try:
                with open(path, "a") as out:
                    out.write("the lingerer was here\\\\n")
            except OSError:
                pass
        time.sleep(0.1)
    """
    subprocess.Popen(
        [sys.executable, "-c", LINGER, MARKER],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    print("the lingerer left a process")


    def smallest_group_size(pass_rate, max_degenerate):
        return None
''')
#: A copy of the module loaded before the hidden test, called from a thread the
#: answer starts (only the watch the hidden test sets on new threads sees it).
ON_A_NEW_THREAD = textwrap.dedent("""
    import importlib.util
    import threading

    from grpo_helpers import advantages

    _spec = importlib.util.spec_from_file_location("_copy", advantages.__file__)
    _copy = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_copy)


    def smallest_group_size(pass_rate, max_degenerate):
        got = []

        def search():
            group_size = 2
            while _copy.degenerate_probability(pass_rate, group_size) > max_degenerate:
                group_size += 1
            got.append(group_size)

        thread = threading.Thread(target=search)
        thread.start()
        thread.join()
        return got[0] if got else None
""")
#: The package's function, run by a process pool whose worker was started
#: before the hidden test (no process starts during it).
IN_A_PROCESS_POOL = textwrap.dedent("""
    import concurrent.futures
    import multiprocessing

    from grpo_helpers import advantages

    POOL = concurrent.futures.ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("fork")
    )
    POOL.submit(int, 0).result()  # its worker runs from here on


    def success_advantage(group_size, num_successes, scale="none"):
        rewards = [1.0] * num_successes + [0.0] * (group_size - num_successes)
        done = POOL.submit(advantages.group_advantages, rewards, scale=scale)
        return float(done.result()[0])
""")
#: Asks for 16 GiB (numpy's zeros: pages untouched, so no harm where it is
#: allowed); then forks until refused (at most 2000 times).
MEMORY_HOG = textwrap.dedent("""
    import numpy as np

    try:
        HOG = np.zeros(16 * 2**30, dtype=np.uint8)
        print("the hog got 16 GiB")
    except MemoryError as error:
        print(f"the hog was refused memory: {error}")
        raise


    def smallest_group_size(pass_rate, max_degenerate):
        return None
""")
FORK_HOG = textwrap.dedent("""
    import os
    import time

    forked = 0
    try:
        for _ in range(2000):
            if os.fork() == 0:
                time.sleep(600)
                os._exit(0)
            forked += 1
        print(f"the hog forked {forked} processes, never refused")
    except OSError as error:
        print(f"the hog was refused after {forked} processes: {error}")
        raise


    def success_advantage(group_size, num_successes, scale="none"):
        return None
""")


#: Processes the grading run's kernels start may use at once (the fork hog's
#: limit; an honest kernel runs a few).
MAX_PROCESSES = 64
#: In the command line of every process the attacks leave (to look for survivors).
MARKER = f"grpo-attack-{uuid.uuid4().hex}"
#: The grading run's outputs in the course directory: what changes legitimately.
OUTPUTS = ("grades.csv", "autograded", "feedback", "results")


class _Listener:
    """A TCP server at 127.0.0.1 that records every connection it gets."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.heard: list[str] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._done.is_set():
            try:
                line, _ = self.server.accept()
            except OSError:
                continue
            with line:
                line.settimeout(2)
                try:
                    self.heard.append(line.recv(100).decode(errors="replace"))
                except OSError:
                    self.heard.append("(a connection)")

    def close(self) -> list[str]:
        self._done.set()
        self._thread.join()
        self.server.close()
        return self.heard


def _hashes(*folders: Path) -> dict[str, str]:
    """``{path: sha256}`` of every file under ``folders``, the grading run's
    outputs in a course directory left out."""
    import hashlib

    hashes = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.relative_to(folder).parts[0] in OUTPUTS or not path.is_file():
                continue
            hashes[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes


def _changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(
        p for p in before.keys() | after.keys() if before.get(p) != after.get(p)
    )


def _alive(pid: int) -> str:
    """The status of process ``pid`` ("running", "sleeping", "stopped"...)."""
    import psutil

    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return "gone"


def _survivors() -> list[str]:
    """Command lines of the processes whose command line holds :data:`MARKER`."""
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if MARKER in line:
            found.append(line[-200:])
    return found


def _students(notebooks: Path, course_dir: Path, port: int, bystander: int):
    """``{student: notebook}``: the honest students, the cheats of issue 22, the
    attacks of issue 38 and those of issue 47."""
    solutions = [_solution("smallest_group_size"), _solution("success_advantage")]
    visible = _visible_success_advantages()
    cheats = dict(CHEATS)
    cheats["dora"] = [
        CHEATS["dora"][0],
        f"VISIBLE = {visible!r}\n\n\n"
        "def success_advantage(group_size, num_successes, scale='none'):\n"
        "    return VISIBLE.get((group_size, num_successes, scale))\n",
    ]
    endless = (
        "def smallest_group_size(pass_rate, max_degenerate):\n"
        "    while True:\n"
        "        pass\n"
    )
    slow = textwrap.dedent(f"""
        import json
        import os
        import time

        import grpo_helpers
        from grpo_helpers.settings import SETTINGS

        time.sleep({SLOW_CELL_SECONDS})  # a slow import on a loaded machine
        seen = {{
            "package": grpo_helpers.__file__,
            "project_root": str(SETTINGS.project_root),
            "solutions_exist": (SETTINGS.project_root / "notebooks/solutions").exists(),
            "cwd": os.getcwd(),
        }}
        print("fay saw:", json.dumps(seen))

    """)
    leftover = LEFTOVER.format(course=str(course_dir), notebook=NOTEBOOK, marker=MARKER)
    key = course_dir / course.KEY
    ada = course_dir.parent / "submissions" / "ada" / f"{NOTEBOOK}.ipynb"
    sources = sorted((course_dir / "source" / course.ASSIGNMENT).glob("*.ipynb"))
    solutions_file = course.SOLUTIONS / f"{NOTEBOOK}.py"
    gradebook = course_dir / "gradebook.db"

    def given(**constants):
        return "".join(f"{k} = {v!r}\n" for k, v in constants.items()) + "\n\n"

    snooped = [str(key), str(solutions_file), str(ada), str(gradebook)]
    vandalised = [str(p) for p in (gradebook, key, ada, *sources)]
    new_files = [
        str(ROOT / "notebooks" / "vandal-was-here.txt"),
        str(course_dir / "vandal-was-here.txt"),
    ]
    lingered = [
        str(course_dir / "lingerer-was-here.txt"),
        str(course_dir / "grades.csv"),
    ]
    attacks = {
        "gus": [FRESH_COPY, REBUILT],
        "hal": [REIMPORT, HUNT.format(visible=visible)],
        "ivy": [INPUT_TRANSFORMER, AST_TRANSFORMER],
        "kit": [CUSTOM_EXC + leftover, STUB_2],
        "kim": [SWALLOWS, solutions[1]],
        "lee": [CANCELS, solutions[1]],
        # issue 47
        "sam": [given(TARGETS=snooped, VISIBLE=visible) + SNOOPER_1, SNOOPER_2],
        "val": [given(TARGETS=vandalised, NEW_FILES=new_files) + VANDAL, STUB_2],
        "cal": [given(PORT=port) + CALLER, FLOOD],
        "sid": [given(BYSTANDER=bystander) + SIGNALLER, STUB_2],
        "lin": [given(TARGETS=lingered, MARKER=MARKER) + LINGERER, STUB_2],
        "tom": [ON_A_NEW_THREAD, IN_A_PROCESS_POOL],
        "ezra": [MEMORY_HOG, FORK_HOG],
    }
    return {
        "ada": _submission(notebooks, solutions, lean=False),
        **{name: _submission(notebooks, answers) for name, answers in cheats.items()},
        "eve": _submission(notebooks, [endless, PACKAGE_CALL]),
        "fay": _submission(notebooks, solutions, slow=slow),
        **{name: _submission(notebooks, answers) for name, answers in attacks.items()},
    }


def _grade_everyone(shared: Path) -> dict:
    """Build the edition in ``shared``, grade every student there (the CLI, with
    --feedback, two at a time) and return what the run left besides the grades."""
    import psutil

    out, course_dir = shared / "student", shared / "course"
    notebooks = course.build_student(out, course_dir)
    folder = shared / "submissions"
    listener = _Listener()
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        students = _students(notebooks, course_dir, listener.port, bystander.pid)
        for name, nb in students.items():
            (folder / name).mkdir(parents=True)
            nbformat.write(nb, folder / name / f"{NOTEBOOK}.ipynb")
        project = ROOT / "notebooks"
        before = _hashes(course_dir, folder, project)
        code = cli.main(
            [
                "grade",
                str(folder),
                "--course",
                str(course_dir),
                "--feedback",
                "--function-seconds",
                str(FUNCTION_SECONDS),
                "--max-processes",
                str(MAX_PROCESSES),
                "--workers",
                "2",
            ]
        )
        left = [
            " ".join(p.cmdline())[-200:]
            for p in psutil.Process().children(recursive=True)
            if p.pid != bystander.pid and _living(p)
        ]
        seen = {
            "code": code,
            "changed": _changed(before, _hashes(course_dir, folder, project)),
            "heard": listener.close(),
            "bystander": _alive(bystander.pid),
            "survivors": _survivors(),
            "left": left,
        }
    finally:
        listener.close()
        bystander.kill()
        bystander.wait()
        (ROOT / "notebooks" / "vandal-was-here.txt").unlink(missing_ok=True)
    return seen


def _living(process) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@dataclass
class Graded:
    """One grading run of every student: the grades file, the course directory
    and what the run left (recorded by the worker that ran it)."""

    grades: pd.DataFrame
    course_dir: Path
    seen: dict

    def printed(self, student: str) -> str:
        """What ``student``'s graded notebook printed (its stream outputs)."""
        path = self.course_dir / "autograded" / student / f"{NOTEBOOK}.ipynb"
        nb = nbformat.read(path, as_version=4)
        return "".join(
            o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
        )


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One grading run (the CLI, with --feedback) of eighteen students, shared by
    the session's xdist workers: the first to need it grades, the other waits."""
    from filelock import FileLock

    if not sys.platform.startswith("linux"):
        pytest.skip("grade runs each kernel in a sandbox, which is Linux's")
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # one folder for every worker of this session
    shared = base / "graded-notebook-03"
    record = shared / "seen.json"
    with FileLock(str(base / "graded-notebook-03.lock")):
        if not record.is_file():
            shutil.rmtree(shared, ignore_errors=True)
            shared.mkdir()
            record.write_text(json.dumps(_grade_everyone(shared)))
    seen = json.loads(record.read_text())
    assert seen["code"] == 0
    course_dir = shared / "course"
    grades = pd.read_csv(course_dir / "grades.csv", keep_default_na=False)
    return Graded(grades, course_dir, seen)


def _rows(grades, student):
    mine = grades[(grades["student"] == student) & (grades["exercise"] != "TOTAL")]
    return mine.set_index("exercise")


@pytest.mark.notebook
def test_the_solutions_get_full_marks(graded):
    grades = graded.grades
    ada = _rows(grades, "ada")
    assert list(ada["points"]) == [1.0, 1.0]
    assert list(ada["error"]) == ["", ""]


@pytest.mark.notebook
def test_delegating_to_the_solutions_scores_zero(graded):
    carl = _rows(graded.grades, "carl")
    assert carl.loc["exercise-1", "points"] == 0
    assert "FileNotFoundError: No solutions" in carl.loc["exercise-1", "error"]


@pytest.mark.notebook
def test_reading_the_solution_files_scores_zero(graded):
    carl = _rows(graded.grades, "carl")
    assert carl.loc["exercise-2", "points"] == 0
    error = carl.loc["exercise-2", "error"]
    assert "NameError: name 'success_advantage' is not defined" in error
    assert "FileNotFoundError" in error  # the earlier error: the file is not there


@pytest.mark.notebook
def test_patching_checks_scores_zero(graded):
    dora = _rows(graded.grades, "dora")
    assert dora.loc["exercise-1", "points"] == 0
    assert "hidden test of smallest_group_size" in dora.loc["exercise-1", "error"]
    assert "still the stub" in dora.loc["exercise-1", "error"]


@pytest.mark.notebook
def test_hard_coding_the_visible_examples_scores_zero(graded):
    dora = _rows(graded.grades, "dora")
    assert dora.loc["exercise-2", "points"] == 0
    assert "hidden test of success_advantage" in dora.loc["exercise-2", "error"]


@pytest.mark.notebook
def test_calling_the_package_function_the_exercise_rules_out_scores_zero(graded):
    eve = _rows(graded.grades, "eve")
    assert eve.loc["exercise-2", "points"] == 0
    assert (
        "without grpo_helpers.advantages.group_advantages"
        in (eve.loc["exercise-2", "error"])
    )


@pytest.mark.notebook
def test_an_endless_loop_is_stopped_and_reported(graded):
    eve = _rows(graded.grades, "eve")
    assert eve.loc["exercise-1", "points"] == 0
    assert f"took longer than {FUNCTION_SECONDS} s" in eve.loc["exercise-1", "error"]
    # the notebook went on: exercise 2 was graded (it fails for its own reason)
    assert "hidden test of success_advantage" in eve.loc["exercise-2", "error"]


@pytest.mark.notebook
def test_a_correct_submission_with_a_slow_cell_gets_full_marks(graded):
    """fay's import cell takes longer than the graded function's limit (a torch
    import on a loaded machine), and every later cell needs it; only the graded
    function is timed."""
    fay = _rows(graded.grades, "fay")
    assert list(fay["points"]) == [1.0, 1.0]
    assert SLOW_CELL_SECONDS > FUNCTION_SECONDS


@pytest.mark.notebook
def test_submissions_run_where_the_solutions_are_not(graded):
    (line,) = [t for t in graded.printed("fay").splitlines() if t.startswith("fay saw")]
    seen = json.loads(line.partition(":")[2])
    assert not seen["solutions_exist"]
    for key in ("package", "project_root", "cwd"):
        assert not Path(seen[key]).resolve().is_relative_to(ROOT), key


#: The students of issue 38's attacks (built in ``graded``).
ATTACKERS = ["gus", "hal", "ivy", "kim", "kit", "lee"]
FORBIDDEN = "which this exercise asks you to write without"


@pytest.mark.notebook
def test_a_fresh_copy_or_a_rebuilt_forbidden_function_scores_zero(graded):
    gus = _rows(graded.grades, "gus")
    assert list(gus["points"]) == [0.0, 0.0]
    for exercise, function in [
        ("exercise-1", "degenerate_probability"),
        ("exercise-2", "group_advantages"),
    ]:
        error = gus.loc[exercise, "error"]
        assert f"reached grpo_helpers.advantages.{function}" in error, error
        assert FORBIDDEN in error


@pytest.mark.notebook
def test_a_re_import_of_a_forbidden_function_scores_zero(graded):
    hal = _rows(graded.grades, "hal")
    assert hal.loc["exercise-1", "points"] == 0
    error = hal.loc["exercise-1", "error"]
    assert "reached grpo_helpers.advantages.degenerate_probability" in error


@pytest.mark.notebook
def test_hunting_for_the_expected_values_finds_none_and_scores_zero(graded):
    """hal looks for them on the stack, in IPython's history and line cache and in
    every database under the working folder: none holds one, so the hidden cases
    get None (the visible ones, hard-coded, pass)."""
    hal = _rows(graded.grades, "hal")
    assert hal.loc["exercise-2", "points"] == 0
    error = hal.loc["exercise-2", "error"]
    assert "hidden test of success_advantage, case 1 of 8" in error
    assert "returned None" in error


@pytest.mark.notebook
def test_transformers_of_an_earlier_cell_do_not_change_the_graded_cells(graded):
    """ivy's input transformer (exercise 1) and AST transformer (exercise 2)
    empty the forbid lists of the graded cells: they are not applied there."""
    ivy = _rows(graded.grades, "ivy")
    assert list(ivy["points"]) == [0.0, 0.0]
    assert (
        "without grpo_helpers.advantages.degenerate_probability"
        in (ivy.loc["exercise-1", "error"])
    )
    assert (
        "without grpo_helpers.advantages.group_advantages"
        in (ivy.loc["exercise-2", "error"])
    )


@pytest.mark.notebook
def test_a_custom_exception_handler_does_not_silence_the_graded_cells(graded):
    """kit's first cell silences every error (``set_custom_exc``); the answers
    are stubs, so every check fails, graded cells included."""
    kit = _rows(graded.grades, "kit")
    assert list(kit["points"]) == [0.0, 0.0]
    for exercise in ("exercise-1", "exercise-2"):
        assert "still the stub" in kit.loc[exercise, "error"]


@pytest.mark.notebook
@pytest.mark.parametrize("student", ["kim", "lee"])
def test_a_loop_that_swallows_or_cancels_the_alarm_is_killed(graded, student):
    """kim's loop catches BaseException, lee's cancels the timer: the grading
    process kills the kernel a few seconds past the limit (not after the cell's
    900 s or the student's hour); the notebook scores nothing after it."""
    rows = _rows(graded.grades, student)
    assert list(rows["points"]) == [0.0, 0.0]
    for exercise in ("exercise-1", "exercise-2"):
        error = rows.loc[exercise, "error"]
        assert "stopped: a self-check ran past its time limit" in error, error
        assert "its kernel was killed" in error


@pytest.mark.notebook
def test_a_process_left_running_cannot_rewrite_the_grades(graded):
    """kit's notebook also starts a process in a session of its own that
    rewrites kit's results file and appends to the grades file, again and again:
    it is killed when the notebook's execution ends."""
    assert list(_rows(graded.grades, "kit")["points"]) == [0.0, 0.0]
    assert "kit's forger runs: True" in graded.printed("kit")  # it ran
    assert graded.seen["survivors"] == []
    assert "forged" not in (graded.course_dir / "grades.csv").read_text()


# ----------------------------------------------------------------------------------
# Issue 47: students who attack the machine or the watch, in the same run
# ----------------------------------------------------------------------------------

#: The students of issue 47's attacks (built in ``graded``).
INTRUDERS = ["cal", "ezra", "lin", "sam", "sid", "tom", "val"]


def _said(graded, student, opening):
    """The value ``student`` printed after ``opening`` (a Python literal)."""
    lines = [t for t in graded.printed(student).splitlines() if t.startswith(opening)]
    assert len(lines) == 1, (student, graded.printed(student)[-2000:])
    return ast.literal_eval(lines[0][len(opening) :].strip())


@pytest.mark.notebook
def test_the_snooper_reads_nothing_outside_its_folder_and_scores_zero(graded):
    """sam reads the key, the solutions file, the gradebook and ada's submission
    by their absolute paths, and looks for them walking up from the package, its
    working folder and the Python installation; it would answer with what it
    read. Nothing is there, and no file it holds open leads out."""
    assert _said(graded, "sam", "the snooper read:") == []
    # the only file open in its sandbox is its kernel's own output (not the
    # grading process's log, which it could read back through /proc/self/fd)
    held = _said(graded, "sam", "the snooper holds:")
    assert held and all(Path(h).name == "kernel.log" for h in held), held
    assert list(_rows(graded.grades, "sam")["points"]) == [0.0, 0.0]


@pytest.mark.notebook
def test_the_vandal_changes_nothing_and_scores_zero(graded):
    """val appends to the gradebook, the key, ada's submission and the source
    notebooks, writes a new file into the course directory and the project's
    notebooks, and makes the grader's watch file (in its kernel's folder) a link
    to the key: every file of the course directory, the submissions and the
    project's notebooks is byte for byte what it was (its hash)."""
    assert _said(graded, "val", "the vandal wrote:") == []
    assert "the vandal linked:" in graded.printed("val")
    assert graded.seen["changed"] == []
    assert list(_rows(graded.grades, "val")["points"]) == [0.0, 0.0]


@pytest.mark.notebook
def test_the_caller_reaches_no_network_and_scores_zero(graded):
    """cal connects to a port the test listens on at 127.0.0.1 and resolves a
    host name: the listener hears nothing, no name resolves."""
    got = _said(graded, "cal", "the caller got:")
    assert got[0].startswith("no connection"), got
    assert got[1].startswith("no name resolution"), got
    assert graded.seen["heard"] == []
    assert list(_rows(graded.grades, "cal")["points"]) == [0.0, 0.0]


@pytest.mark.notebook
def test_a_notebook_that_prints_too_much_is_stopped(graded):
    """cal's second cell prints 25 MB: its kernel is killed, nothing of it is kept
    and the rest of the notebook scores 0."""
    cal = _rows(graded.grades, "cal")
    error = cal.loc["exercise-2", "error"]
    assert "the notebook printed more than 20 MB" in error, error
    notebook = graded.course_dir / "autograded" / "cal" / f"{NOTEBOOK}.ipynb"
    assert notebook.stat().st_size < 2**20


@pytest.mark.notebook
def test_the_signaller_reaches_no_process_of_the_teacher_and_scores_zero(graded):
    """sid stops and kills its parent, a process of the teacher's (given by its
    PID) and every process it can list: it lists only its own sandbox (its
    parent there is the sandbox's init, which ignores it), the teacher's process
    runs on, and grading completed."""
    sent = _said(graded, "sid", "the signaller sent:")
    assert {int(s.split()[1]) for s in sent} <= {1}, sent
    assert graded.seen["bystander"] in ("sleeping", "running")
    assert list(_rows(graded.grades, "sid")["points"]) == [0.0, 0.0]


@pytest.mark.notebook
def test_the_lingerer_leaves_no_process_and_writes_nothing(graded):
    """lin starts a detached process that waits 3 s, then writes into the course
    directory again and again: nothing is written, and no process that an
    attack started (nor any process of the grading) is left."""
    assert "the lingerer left a process" in graded.printed("lin")
    assert not (graded.course_dir / "lingerer-was-here.txt").exists()
    assert "lingerer" not in (graded.course_dir / "grades.csv").read_text()
    assert graded.seen["survivors"] == []
    assert graded.seen["left"] == []
    assert list(_rows(graded.grades, "lin")["points"]) == [0.0, 0.0]


@pytest.mark.notebook
def test_the_threader_gets_nothing_from_a_thread_or_a_process_pool(graded):
    """tom runs a copy of the forbidden function, loaded before the hidden test,
    on a thread his answer starts (only the watch set on new threads sees it);
    and the package's own function in a process pool whose worker started
    before the hidden test (which no process start reveals)."""
    tom = _rows(graded.grades, "tom")
    assert list(tom["points"]) == [0.0, 0.0]
    error = tom.loc["exercise-1", "error"]
    assert "reached grpo_helpers.advantages.degenerate_probability" in error, error
    error = tom.loc["exercise-2", "error"]
    assert "other process(es) of the notebook were running" in error, error


@pytest.mark.notebook
def test_the_hog_is_stopped_and_the_next_student_graded(graded):
    """ezra asks for 16 GiB (past the 4 GiB limit), then forks until refused
    (the sandbox's process limit, or the watchdog's count where that does not
    bind, as for root); both cells score 0, and fay, graded next, gets full
    marks."""
    ezra = _rows(graded.grades, "ezra")
    assert list(ezra["points"]) == [0.0, 0.0]
    assert "the hog was refused memory" in graded.printed("ezra")
    assert "MemoryError" in ezra.loc["exercise-1", "error"]
    error = ezra.loc["exercise-2", "error"]
    refused = "the hog was refused after" in graded.printed("ezra")
    stopped = f"it ran more than {MAX_PROCESSES} processes" in error
    assert refused or stopped, error
    assert "never refused" not in graded.printed("ezra")
    assert list(_rows(graded.grades, "fay")["points"]) == [1.0, 1.0]


@pytest.mark.notebook
def test_the_grades_file_has_a_row_per_exercise_and_a_total_per_student(graded):
    grades = graded.grades
    assert list(grades.columns) == grading.COLUMNS
    students = sorted(["ada", "carl", "dora", "eve", "fay", *ATTACKERS, *INTRUDERS])
    assert sorted(set(grades["student"])) == students
    for student in students:
        mine = grades[grades["student"] == student]
        assert list(mine["exercise"]) == ["exercise-1", "exercise-2", "TOTAL"]
        total = mine.iloc[-1]
        assert total["points"] == mine.iloc[:2]["points"].sum()
        assert total["max_points"] == 2.0
    totals = grades[grades["exercise"] == "TOTAL"].set_index("student")["points"]
    assert totals.to_dict() == {
        "ada": 2.0,
        "carl": 0.0,
        "dora": 0.0,
        "eve": 0.0,
        "fay": 2.0,
        **dict.fromkeys(ATTACKERS + INTRUDERS, 0.0),
    }


@pytest.mark.notebook
def test_feedback_is_written_for_every_student(graded):
    grades, course_dir = graded.grades, graded.course_dir
    for student, points in [("ada", "2.0 / 2.0"), ("eve", "0.0 / 2.0")]:
        html = course_dir / "feedback" / student / f"{NOTEBOOK}.html"
        text = html.read_text()
        assert f"Score: {points}" in text
    assert sorted(p.name for p in (course_dir / "feedback").iterdir()) == sorted(
        set(grades["student"])
    )


# ----------------------------------------------------------------------------------
# The sandbox itself, and grade where none works
# ----------------------------------------------------------------------------------

LINUX = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandbox is Linux's (bubblewrap)"
)
#: What a sandboxed command reports of the world it sees.
PROBE = """
import json, os, resource, socket, sys
port, mine, shared, hidden = sys.argv[1:]


def writes(path):
    try:
        with open(path, "a"):
            return True
    except OSError:
        return False


try:
    socket.create_connection(("127.0.0.1", int(port)), timeout=2).close()
    network = True
except OSError:
    network = False
print(json.dumps({
    "pid": os.getpid(),
    "writes its folder": writes(mine + "/file"),
    "writes the read-only one": writes(shared + "/file"),
    "sees the other": os.path.exists(hidden),
    "network": network,
    "environment": sorted(os.environ),
    "memory": resource.getrlimit(resource.RLIMIT_DATA)[0] // 2**20,
    "processes": resource.getrlimit(resource.RLIMIT_NPROC)[0],
}))
"""


@LINUX
def test_a_sandboxed_command_sees_only_what_it_is_given(tmp_path):
    """sandbox.command: its folder writable, a bound one read-only, an unbound
    one absent, no network (a listener at 127.0.0.1 hears nothing), its own PID
    namespace, only the environment it is given, the limits set."""
    from grpo_helpers.classroom import sandbox

    mine, shared, hidden = (tmp_path / name for name in ("mine", "shared", "hidden"))
    for folder in (mine, shared, hidden):
        folder.mkdir()
        (folder / "file").write_text("")
    listener = _Listener()
    try:
        argv = [sys.executable, "-c", PROBE, str(listener.port)]
        line = sandbox.command(
            sandbox.find()[0],
            [*argv, str(mine), str(shared), str(hidden)],
            writable=[mine],
            read_only=[shared],
            chdir=mine,
            env={"PATH": "/usr/bin:/bin", "ONLY": "this"},
            limits=sandbox.Limits(memory_mb=512, processes=32),
        )
        done = subprocess.run(line, capture_output=True, text=True, timeout=60)
    finally:
        heard = listener.close()
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    # bubblewrap sets PWD, Python's locale coercion LC_CTYPE; nothing else comes
    environment = set(seen.pop("environment")) - {"PWD", "LC_CTYPE"}
    assert environment == {"ONLY", "PATH"}
    assert seen == {
        "pid": 2,  # 1 is bubblewrap's init
        "writes its folder": True,
        "writes the read-only one": False,
        "sees the other": False,
        "network": False,
        "memory": 512,
        "processes": 32,
    }
    assert heard == []


@LINUX
def test_check_sandbox_says_which_bwrap_and_whether_it_works(capsys, monkeypatch):
    assert cli.main(["grade", "--check-sandbox"]) == 0
    said = capsys.readouterr().out
    assert "sandbox: bubblewrap" in said and "it works" in said, said
    monkeypatch.setenv("GRPO_BWRAP", "/bin/false")
    assert cli.main(["grade", "--check-sandbox"]) == 1
    said = capsys.readouterr().out
    assert "/bin/false (from GRPO_BWRAP)" in said
    assert "it does not work: false failed" in said


def _broken_bwrap(tmp_path):
    """A bwrap that fails as it does where user namespaces are not allowed."""
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    return fake


def test_grade_without_a_working_sandbox_stops_and_says_why(
    tmp_path, monkeypatch, capsys
):
    """No grading starts; the message says what failed, why, and what to do."""
    monkeypatch.setenv("GRPO_BWRAP", str(_broken_bwrap(tmp_path)))
    (tmp_path / "submissions" / "ada").mkdir(parents=True)
    course_dir = tmp_path / "course"
    code = cli.main(
        ["grade", str(tmp_path / "submissions"), "--course", str(course_dir)]
    )
    assert code == 2
    said = capsys.readouterr().err
    assert "grade runs each submission in a sandbox, and no sandbox works here" in said
    if sys.platform.startswith("linux"):
        assert "setting up uid map: Permission denied" in said
    assert "Install bubblewrap" in said and "--no-sandbox" in said
    assert not course_dir.exists()  # nothing built, nothing graded


def test_grade_with_no_sandbox_warns_and_grades(edition, tmp_path, monkeypatch, capfd):
    """--no-sandbox grades where no sandbox works, and says what that means."""
    _, notebooks, course_dir = edition
    monkeypatch.setenv("GRPO_BWRAP", str(_broken_bwrap(tmp_path)))
    folder = tmp_path / "submissions"
    (folder / "ada").mkdir(parents=True)
    solutions = [_solution("smallest_group_size"), _solution("success_advantage")]
    nbformat.write(
        _submission(notebooks, solutions), folder / "ada" / f"{NOTEBOOK}.ipynb"
    )
    argv = ["grade", str(folder), "--course", str(course_dir), "--no-sandbox"]
    assert cli.main(argv) == 0
    assert grading.NO_SANDBOX in capfd.readouterr().err
    grades = pd.read_csv(course_dir / "grades.csv", keep_default_na=False)
    assert list(_rows(grades, "ada")["points"]) == [1.0, 1.0]


# ----------------------------------------------------------------------------------
# The per-student time budget (a stand-in for the grading process)
# ----------------------------------------------------------------------------------

HANGS = """
import json, os, sys, time
from pathlib import Path
spec = json.loads(sys.stdin.read())
results = Path(spec["course"]) / "results"
(results / (spec["students"][0] + ".started")).write_text(str(os.getpid()))
time.sleep(10)  # long past the total (bounded: a watchdog that fails, fails the test)
"""


def test_a_student_past_the_total_is_stopped_and_the_next_graded(tmp_path, monkeypatch):
    results = tmp_path / "results"
    results.mkdir()
    command = [sys.executable, "-c", HANGS]
    monkeypatch.setattr(grading, "DRIVER", command)
    spec = {"students": ["x", "y"], "course": str(tmp_path)}
    started = time.perf_counter()
    grading._run_drivers(spec, results, total_seconds=0.5)
    for student in ("x", "y"):
        outcome = json.loads((results / f"{student}.json").read_text())
        assert "longer than 0.5 s in total" in outcome["stopped"]
    assert time.perf_counter() - started < 30


# ----------------------------------------------------------------------------------
# Around the kernel: leftovers and the watchdog (stand-in processes, no nbgrader)
# ----------------------------------------------------------------------------------

#: A process that writes to a file every 0.05 s for a minute.
WRITER = (
    "import sys, time\n"
    "for _ in range(1200):\n"
    "    open(sys.argv[1], 'a').write('.')\n"
    "    time.sleep(0.05)\n"
)


def _still_writing(path, seconds=0.6):
    before = path.stat().st_size if path.exists() else 0
    time.sleep(seconds)
    return (path.stat().st_size if path.exists() else 0) > before


def test_a_daemon_left_by_a_kernel_is_adopted_and_killed(tmp_path):
    """A stand-in grading process adopts orphans (Linux's subreaper); a kernel
    starts a writer in a session of its own and exits: kill_descendants ends the
    writer."""
    canary = tmp_path / "canary"
    grading_process = textwrap.dedent(f"""
        import pathlib, subprocess, sys, time
        sys.path.insert(0, {str(ROOT / "grpo_helpers" / "classroom")!r})
        import grading_guard
        assert grading_guard.become_subreaper()
        kernel = (
            "import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
            + repr({WRITER!r}) + ", {str(canary)!r}], start_new_session=True)"
        )
        subprocess.run([sys.executable, "-c", kernel], timeout=30)
        for _ in range(300):  # the writer runs; the kernel is gone
            if pathlib.Path({str(canary)!r}).exists():
                break
            time.sleep(0.1)
        time.sleep(0.2)
        print(grading_guard.kill_descendants())
    """)
    if not sys.platform.startswith("linux"):
        pytest.skip("the subreaper is Linux's")
    done = subprocess.run(
        [sys.executable, "-c", grading_process],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1"]  # the writer, adopted, then killed
    assert canary.stat().st_size > 0  # it ran
    assert not _still_writing(canary)


def test_the_watchdog_kills_past_a_deadline_it_was_told_or_a_cell_budget(
    tmp_path, monkeypatch
):
    from grpo_helpers.classroom import grading_guard

    monkeypatch.setattr(grading_guard, "GRACE", 0.2)
    for how in ("case", "cell"):
        canary = tmp_path / f"canary-{how}"
        # a stand-in for the grading process (root) whose child writes
        root = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import subprocess, sys, time\n"
                f"subprocess.Popen([sys.executable, '-c', {WRITER!r}, sys.argv[1]])\n"
                "time.sleep(60)\n",
                str(canary),
            ]
        )
        try:
            watchdog = grading_guard.Watchdog(tmp_path / "watch", root=root.pid)
            watchdog.begin_notebook("03_x")
            for _ in range(300):  # until the writer runs
                if canary.exists():
                    break
                time.sleep(0.05)
            assert _still_writing(canary, 0.3)
            if how == "case":  # what a hidden test writes: due now
                (tmp_path / "watch").write_text(f"{time.time():.3f} case 1 of 7")
            else:
                watchdog.begin_cell(0.1, "cell 4 ran past 0.1 s")
            time.sleep(1.0)
            assert not _still_writing(canary, 0.4)
            assert root.poll() is None  # only what is below it
            reason = watchdog.stopped["03_x"]
            assert reason.startswith(
                "stopped: case 1 of 7 ran past" if how == "case" else "stopped: cell 4"
            )
            assert reason.endswith("its kernel was killed")
            watchdog.close()
        finally:
            root.kill()
            root.wait()


def test_the_watchdog_kills_past_a_notebook_budget_or_too_many_processes(tmp_path):
    """A notebook's budget (begin_notebook), and more processes below the grading
    process than ``max_processes`` allows (a fork bomb where the sandbox's own
    limit does not bind), stop the kernel too."""
    from grpo_helpers.classroom import grading_guard

    sleeper = "import signal, subprocess, sys, time\n" + (
        "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"  # no zombies to wait for
        "for _ in range(int(sys.argv[1])):\n"
        "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )
    for how, children in (("notebook", 1), ("processes", 6)):
        root = subprocess.Popen([sys.executable, "-c", sleeper, str(children)])
        watchdog = None
        try:
            for _ in range(300):  # until its children run
                if len(psutil.Process(root.pid).children()) == children:
                    break
                time.sleep(0.05)
            limit = 3 if how == "processes" else None
            watchdog = grading_guard.Watchdog(
                tmp_path / "watch", root=root.pid, every=0.05, max_processes=limit
            )
            watchdog.begin_notebook("03_x", 0.1 if how == "notebook" else None)
            for _ in range(100):
                if "03_x" in watchdog.stopped:
                    break
                time.sleep(0.05)
            reason = watchdog.stopped["03_x"]
            assert reason.startswith(
                "stopped: the notebook ran past 0.1 s"
                if how == "notebook"
                else "stopped: it ran more than 3 processes"
            ), reason
            for _ in range(100):  # SIGKILL sent; the children exit
                if not psutil.Process(root.pid).children():
                    break
                time.sleep(0.05)
            assert psutil.Process(root.pid).children() == []
        finally:
            if watchdog is not None:
                watchdog.close()
            root.kill()
            root.wait()
