"""The hidden tests of every exercise, run in this process (no nbgrader: quick).

Each hidden block runs as the grader runs it, in the kernel, and is then judged
against the key (``hidden_tests.judge``):

* every exercise of every notebook has a hidden test; it passes the solutions and
  fails a stub, a typical wrong answer (:data:`WRONG`), an answer that hard-codes
  the visible cases (01, 03: their inputs differ), an answer that delegates to a
  package function the exercise rules out (:data:`DELEGATES`) and one that calls
  the teacher's loader; an endless loop is stopped, and the forbidden function
  works again after the test;
* issue 38: a forbidden function reached however it is reached fails the case (a
  copy of the module loaded before or in the call, a function rebuilt from its
  code, a re-import, a decoy module in ``sys.modules``, a thread, a pool thread, a
  process, a result computed after the call, the profiler switched off); no graded
  cell holds an expected value and a stack walk finds none; an alarm swallowed,
  cancelled or replaced fails the case; each case's deadline is written for the
  grader; ``judge`` wants one set of right results; an audit hook that refuses
  the watch fails the test.

The same attacks, handed in as notebooks and graded by nbgrader in the sandbox:
``test_grading.py``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import importlib.util
import inspect
import io
import json
import numbers
import re
import signal
import subprocess
import sys
import time
import types

import nbformat
import numpy as np
import pytest
from grading_runs import LIGHT_IMPORTS, NOTEBOOK, practically_endless, tagged
from wrong_loops import WRONG_LOOPS

from grpo_helpers import advantages, rewards, training
from grpo_helpers.classroom import course, hidden_tests
from grpo_helpers.results import answers, stats

# ----------------------------------------------------------------------------------
# Every exercise's hidden test: solutions, stubs, wrong answers, delegates
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
    "correction_weights": lambda r, m, c: np.minimum(  # the mask caps instead
        np.exp(np.sum(r)) * np.ones(len(r)) if m.startswith("seq") else np.exp(r), c
    ),
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
    assert len(names) == len(set(names)) == 23


def test_hidden_tests_pass_the_solutions(blocks):
    for stem, name, block, key in blocks:
        answer = getattr(course._load_solutions(stem), name)
        assert _passes(block, name, answer, key) == "", (stem, name)


def test_hidden_tests_fail_stubs_and_wrong_answers(blocks):
    for stem, name, block, key in blocks:
        namespace = {}
        nb = nbformat.read(course.NOTEBOOKS / f"{stem}.ipynb", as_version=4)
        stubs = "\n\n".join(c.source for c in tagged(nb, "exercise"))
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
    names = [course._exercise_name(c.source) for c in tagged(nb, "exercise")]
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
    for cell in tagged(nb, "self-check"):
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


def test_hidden_tests_stop_an_endless_loop(blocks, monkeypatch):
    monkeypatch.setenv("GRPO_CHECK_SECONDS", "0.5")
    block, key = _block(blocks, "smallest_group_size")

    def endless(pass_rate, max_degenerate):
        return practically_endless(20)

    started = time.perf_counter()
    assert "took longer than 0.5 s" in _passes(
        block, "smallest_group_size", endless, key
    )
    assert time.perf_counter() - started < 5


def test_a_forbidden_function_works_again_after_the_hidden_test(blocks):
    block, key = _block(blocks, "smallest_group_size")
    _passes(block, "smallest_group_size", DELEGATES["smallest_group_size"], key)
    assert advantages.degenerate_probability(0.5, 2) == pytest.approx(0.5)


# ----------------------------------------------------------------------------------
# Issue 38: a forbidden function however it is reached, the key, the alarm
# ----------------------------------------------------------------------------------

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
    test_grading.py's ``test_a_loop_that_swallows_or_cancels_the_alarm_is_killed``)."""
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
