"""Tests of grpo_helpers.results.evaluation: grading, concurrency, several samples
per question, and the recorded base answers it reuses.

No model is needed: a fake sampling client answers with canned completions (real
``pytrio.types.SampleResponse`` objects) after random delays, so responses come back
out of order, and a character-level fake tokenizer turns text into token ids.
"""

from __future__ import annotations

import asyncio
import doctest
import random

import pandas as pd
import pytest
import pytrio
from pytrio.types import SampleResponse, SampleSequence

from grpo_helpers.results import evaluation, report, stats
from grpo_helpers.results.evaluation import evaluate, evaluate_async
from grpo_helpers.results.report import (
    accuracy_rows,
    compare,
    format_results_table,
)
from grpo_helpers.results.stats import wilson_interval
from grpo_helpers.settings import SMOLLM2

# --------------------------------------------------------------------------------------
# Fakes
# --------------------------------------------------------------------------------------


class CharTokenizer:
    """One token per character (its code point): enough to build and decode prompts."""

    eos_token = "<|im_end|>"
    eos_token_id = 0
    pad_token = "<|im_end|>"
    bos_token = None

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(ch) for ch in text]

    def decode(self, tokens, skip_special_tokens: bool = False) -> str:  # noqa: ANN001
        return "".join(chr(t) for t in tokens if t != 0 or not skip_special_tokens)

    def apply_chat_template(
        self,
        messages,  # noqa: ANN001
        tokenize: bool = True,
        add_generation_prompt: bool = False,
        **kwargs,  # noqa: ANN003
    ):  # noqa: ANN201
        text = "".join(f"<|{m['role']}|>{m['content']}\n" for m in messages)
        if add_generation_prompt:
            text += "<|assistant|>"
        return self.encode(text) if tokenize else text

    def __call__(self, text: str, add_special_tokens: bool = True, **kwargs):  # noqa: ANN003, ANN204
        return {"input_ids": self.encode(text)}

    def __len__(self) -> int:
        return 0x110000


class FakeSamplingClient:
    """Answers each prompt with canned completions after a random delay.

    Args:
        tokenizer: decodes the prompt to find which question it asks.
        completions: question text -> list of completions; sample ``i`` of a request
            gets ``completions[i % len]``.
        seed: seeds the delays (responses still finish in a shuffled order).
        text_none: questions whose sequences come back with ``text=None`` (the
            evaluator must decode the tokens itself).
    """

    def __init__(
        self,
        tokenizer: CharTokenizer,
        completions: dict[str, list[str]],
        seed: int = 0,
        max_delay: float = 0.01,
        text_none: set[str] | None = None,
        fail_on: str | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.completions = completions
        self.rng = random.Random(seed)
        self.max_delay = max_delay
        self.text_none = text_none or set()
        self.fail_on = fail_on
        self.in_flight = 0
        self.max_in_flight = 0
        self.finished: list[str] = []
        self.params: list[pytrio.SamplingParams] = []

    def _question_of(self, prompt_text: str) -> str:
        found = [
            (prompt_text.rfind(q), q) for q in self.completions if q in prompt_text
        ]
        assert found, f"unknown prompt: {prompt_text!r}"
        return max(found)[1]

    async def sample_async(
        self,
        prompt: pytrio.ModelInput,
        num_samples: int = 1,
        sampling_params: pytrio.SamplingParams | None = None,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        return_text: bool = True,
    ) -> SampleResponse:
        assert isinstance(prompt, pytrio.ModelInput)
        assert sampling_params is not None and sampling_params.max_tokens
        self.params.append(sampling_params)
        question = self._question_of(self.tokenizer.decode(prompt.to_ints()))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.rng.uniform(0.0, self.max_delay))
            if question == self.fail_on:
                raise RuntimeError("sampler failed")
        finally:
            self.in_flight -= 1
        canned = self.completions[question]
        sequences = []
        for i in range(num_samples):
            tokens = self.tokenizer.encode(
                canned[i % len(canned)], add_special_tokens=False
            )
            truncated = len(tokens) > sampling_params.max_tokens
            tokens = tokens[: sampling_params.max_tokens]
            text = None if question in self.text_none else self.tokenizer.decode(tokens)
            sequences.append(
                SampleSequence(
                    stop_reason="length" if truncated else "stop",
                    tokens=tokens,
                    text=text,
                    logprobs=[-0.5] * len(tokens),
                )
            )
        self.finished.append(question)
        return SampleResponse(
            sequences=sequences,
            input_tokens=prompt.length,
            output_tokens=sum(len(s.tokens) for s in sequences),
        )


def _simple_prompt(tokenizer, question: str, fewshot=()) -> list[int]:  # noqa: ANN001
    return tokenizer.encode(f"Question: {question}\nAnswer:")


@pytest.fixture
def simple_prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the series' prompt by a short one: these tests are about evaluation."""
    monkeypatch.setattr(evaluation.prompts, "build_prompt", _simple_prompt)
    monkeypatch.setattr(
        evaluation.prompts, "get_stop_sequences", lambda tokenizer: ["<|im_end|>"]
    )


def _gsm8k_row(question: str, gold: str) -> dict[str, str]:
    return {"question": question, "answer": f"Some working.\n#### {gold}"}


# Crafted completions: (question, gold, completion, exact, lenient, boxed).
CASES = [
    ("q0: Janet sells 9 eggs at $2. Income?", "18", r"9 * 2 = 18. \boxed{18}", 1, 1, 1),
    ("q1: box wrong, last right", "18", r"\boxed{17}. Check: 9*2 = 18", 0, 0, 1),
    ("q2: unboxed right", "18", "So she makes 18 dollars.", 0, 1, 0),
    ("q3: nothing", "18", "I am not sure.", 0, 0, 0),
    ("q4: boxed right with commas", "1000", r"Total \boxed{1,000}", 1, 1, 1),
    ("q5: boxed wrong and unboxed", "7", r"\boxed{8}", 0, 0, 1),
]


def _cases_setup():  # noqa: ANN202
    tokenizer = CharTokenizer()
    questions = [_gsm8k_row(q, gold) for q, gold, *_ in CASES]
    completions = {q: [completion] for q, _, completion, *_ in CASES}
    return tokenizer, questions, completions


@pytest.mark.parametrize(
    "module", [evaluation, report, stats], ids=lambda m: m.__name__
)
def test_module_doctests(module) -> None:
    failures, tried = doctest.testmod(module, verbose=False)[:2]
    assert failures == 0
    assert tried > 10 or module is not stats


# --------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------


def test_exact_and_lenient_on_crafted_completions(simple_prompts: None) -> None:
    tokenizer, questions, completions = _cases_setup()
    client = FakeSamplingClient(tokenizer, completions)
    result = evaluate(client, tokenizer, questions, progress=False)
    records = result.records
    assert list(records.columns) == evaluation.RECORD_COLUMNS
    assert records["index"].tolist() == list(range(len(CASES)))
    assert records["question"].tolist() == [case[0] for case in CASES]
    assert records["exact"].tolist() == [bool(case[3]) for case in CASES]
    assert records["lenient"].tolist() == [bool(case[4]) for case in CASES]
    assert records["boxed"].tolist() == [bool(case[5]) for case in CASES]
    assert records["extracted"].tolist() == ["18", "17", None, None, "1,000", "8"]
    assert records["answer_lenient"].tolist() == ["18", "17", "18", None, "1,000", "8"]
    assert records["gold"].tolist() == ["18", "18", "18", "18", "1000", "7"]
    assert records["completion"].tolist() == [case[2] for case in CASES]

    summary = result.summary
    assert summary["n"] == 6
    assert summary["exact_acc"] == pytest.approx(2 / 6)
    assert summary["lenient_acc"] == pytest.approx(3 / 6)
    assert summary["boxed_frac"] == pytest.approx(4 / 6)
    assert summary["exact_ci"] == wilson_interval(2, 6)
    assert summary["lenient_ci"] == wilson_interval(3, 6)
    assert summary["seconds"] >= 0.0

    # The request: greedy, 512 tokens, the stop strings of the prompt module.
    params = client.params[0]
    assert params.temperature == 0.0
    assert params.max_tokens == 512
    assert list(params.stop) == ["<|im_end|>"]


def test_token_accounting(simple_prompts: None) -> None:
    tokenizer, questions, completions = _cases_setup()
    client = FakeSamplingClient(tokenizer, completions)
    result = evaluate(client, tokenizer, questions, progress=False)
    prompt_lengths = [len(_simple_prompt(tokenizer, q["question"])) for q in questions]
    completion_lengths = [len(case[2]) for case in CASES]
    assert result.records["prompt_tokens"].tolist() == prompt_lengths
    assert result.records["completion_tokens"].tolist() == completion_lengths
    assert result.summary["prompt_tokens"] == sum(prompt_lengths)
    assert result.summary["sampled_tokens"] == sum(completion_lengths)
    assert result.summary["total_tokens"] == sum(prompt_lengths) + sum(
        completion_lengths
    )


def test_text_none_is_decoded_from_tokens(simple_prompts: None) -> None:
    tokenizer, questions, completions = _cases_setup()
    client = FakeSamplingClient(tokenizer, completions, text_none=set(completions))
    result = evaluate(client, tokenizer, questions, progress=False)
    assert result.records["completion"].tolist() == [case[2] for case in CASES]
    assert result.records["exact"].tolist() == [bool(case[3]) for case in CASES]


def test_hit_max_tokens(simple_prompts: None) -> None:
    tokenizer = CharTokenizer()
    long_answer = "Let me think step by step. " * 5 + r"\boxed{18}"
    questions = [_gsm8k_row("long one", "18"), _gsm8k_row("short one", "18")]
    completions = {"long one": [long_answer], "short one": [r"\boxed{18}"]}
    client = FakeSamplingClient(tokenizer, completions)
    result = evaluate(client, tokenizer, questions, max_tokens=40, progress=False)
    assert result.records["hit_max_tokens"].tolist() == [True, False]
    assert result.records["exact"].tolist() == [False, True]  # cut before its box
    assert result.records["completion_tokens"].tolist() == [40, 10]
    assert result.summary["hit_max_tokens_frac"] == 0.5


def _many_questions(n: int = 24):  # noqa: ANN202
    rng = random.Random(1)
    questions, completions = [], {}
    for i in range(n):
        gold = str(rng.randint(1, 99))
        q = f"item {i:02d}: how many?"
        questions.append(_gsm8k_row(q, gold))
        options = [
            rf"\boxed{{{gold}}}",
            rf"\boxed{{{int(gold) + 1}}}",
            f"It is {gold}.",
        ]
        completions[q] = [options[i % 3]]
    return questions, completions


def test_uses_the_series_prompt() -> None:
    """No monkeypatching: evaluate builds prompts with ``prompts.build_prompt``."""
    tokenizer, questions, completions = _cases_setup()
    client = FakeSamplingClient(tokenizer, completions)
    result = evaluate(client, tokenizer, questions, progress=False)
    expected = [len(evaluation.prompts.build_prompt(tokenizer, q)) for q, *_ in CASES]
    assert result.records["prompt_tokens"].tolist() == expected
    assert result.records["exact"].tolist() == [bool(case[3]) for case in CASES]
    stops = evaluation.prompts.get_stop_sequences(tokenizer)
    assert list(client.params[0].stop) == stops


def _real_tokenizer():  # noqa: ANN202
    # ``make setup`` installs the model package: failing to load it is a failure
    from grpo_helpers.local.models import load_tokenizer

    return load_tokenizer()


def test_with_the_real_smollm2_tokenizer() -> None:
    """Real prompt tokens and real decoding (``text=None`` from the sampler)."""
    tokenizer = _real_tokenizer()
    _, questions, completions = _cases_setup()
    client = FakeSamplingClient(tokenizer, completions, text_none=set(completions))
    result = evaluate(client, tokenizer, questions, progress=False, concurrency=4)
    assert result.records["exact"].tolist() == [bool(case[3]) for case in CASES]
    assert result.records["lenient"].tolist() == [bool(case[4]) for case in CASES]
    assert result.records["completion"].tolist() == [case[2] for case in CASES]
    expected = [len(evaluation.prompts.build_prompt(tokenizer, q)) for q, *_ in CASES]
    assert result.records["prompt_tokens"].tolist() == expected


def test_concurrency_changes_speed_not_records(simple_prompts: None) -> None:
    tokenizer = CharTokenizer()
    questions, completions = _many_questions()
    frames = {}
    for concurrency in (1, 8):
        client = FakeSamplingClient(tokenizer, completions, seed=concurrency)
        result = evaluate(
            client, tokenizer, questions, concurrency=concurrency, progress=False
        )
        assert client.max_in_flight <= concurrency
        frames[concurrency] = result.records
        if concurrency > 1:
            assert client.max_in_flight > 1  # requests really overlapped
            # ...and came back out of order, yet the records are in question order
            order = [q["question"] for q in questions]
            assert client.finished != order
    pd.testing.assert_frame_equal(frames[1], frames[8])
    assert frames[8]["index"].tolist() == list(range(len(questions)))


def test_evaluate_inside_a_running_event_loop(simple_prompts: None) -> None:
    tokenizer, questions, completions = _cases_setup()

    async def notebook_cell() -> evaluation.EvalResult:
        asyncio.get_running_loop()  # like Jupyter: a loop is already running
        client = FakeSamplingClient(tokenizer, completions)
        return evaluate(client, tokenizer, questions, progress=False)

    result = asyncio.run(notebook_cell())
    assert result.records["exact"].tolist() == [bool(case[3]) for case in CASES]


def test_evaluate_async(simple_prompts: None) -> None:
    tokenizer, questions, completions = _cases_setup()
    client = FakeSamplingClient(tokenizer, completions)
    result = asyncio.run(
        evaluate_async(client, tokenizer, questions, concurrency=3, progress=False)
    )
    assert result.records["lenient"].tolist() == [bool(case[4]) for case in CASES]
    assert client.max_in_flight <= 3


def test_question_formats_and_indices(simple_prompts: None) -> None:
    import datasets  # a dependency of grpo_helpers: never skipped

    tokenizer, questions, completions = _cases_setup()
    client = FakeSamplingClient(tokenizer, completions)
    expected = [bool(case[3]) for case in CASES]

    dataset = datasets.Dataset.from_list(questions)
    from_dataset = evaluate(client, tokenizer, dataset, progress=False)
    assert from_dataset.records["exact"].tolist() == expected

    columns = dataset[:3]  # slicing a Dataset gives a dict of columns
    from_columns = evaluate(client, tokenizer, columns, progress=False)
    assert from_columns.records["exact"].tolist() == expected[:3]

    frame = pd.DataFrame(questions)
    from_frame = evaluate(client, tokenizer, frame, progress=False)
    assert from_frame.records["exact"].tolist() == expected

    ids = [100 + 7 * i for i in range(len(questions))]
    with_indices = evaluate(client, tokenizer, questions, indices=ids, progress=False)
    assert with_indices.records["index"].tolist() == ids
    with_column = evaluate(
        client,
        tokenizer,
        [dict(q, index=i) for q, i in zip(questions, ids, strict=True)],
        progress=False,
    )
    assert with_column.records["index"].tolist() == ids

    with pytest.raises(ValueError):
        evaluate(client, tokenizer, questions, indices=[1, 2], progress=False)
    with pytest.raises(ValueError):
        evaluate(client, tokenizer, questions, indices=[0] * 6, progress=False)
    with pytest.raises(ValueError):
        evaluate(client, tokenizer, [], progress=False)
    with pytest.raises(ValueError):
        evaluate(client, tokenizer, questions, concurrency=0, progress=False)


def test_sampler_errors_propagate(simple_prompts: None) -> None:
    tokenizer, questions, completions = _cases_setup()
    client = FakeSamplingClient(tokenizer, completions, fail_on=CASES[2][0])
    with pytest.raises(RuntimeError, match="sampler failed"):
        evaluate(client, tokenizer, questions, progress=False)
    assert client.in_flight == 0  # the other requests were stopped, not left behind


def test_progress_bar(simple_prompts: None, capsys: pytest.CaptureFixture) -> None:
    tokenizer, questions, completions = _cases_setup()
    client = FakeSamplingClient(tokenizer, completions)
    evaluate(client, tokenizer, questions, progress=True, name="base")
    assert "eval base" in capsys.readouterr().err


def test_several_samples_per_question(simple_prompts: None) -> None:
    tokenizer = CharTokenizer()
    right, wrong, unboxed = r"\boxed{18}", r"\boxed{17}", "It is 18."
    completions = {
        "a: 3 of 4 right": [right, wrong, right, right],
        "b: 1 of 4 right, majority wrong": [wrong, wrong, right, unboxed],
        "c: none boxed": [unboxed, unboxed, unboxed, unboxed],
        "d: tie 2-2, wrong first": [wrong, right, wrong, right],
    }
    questions = [_gsm8k_row(q, "18") for q in completions]
    client = FakeSamplingClient(tokenizer, completions)
    result = evaluate(
        client, tokenizer, questions, num_samples=4, temperature=1.0, progress=False
    )
    records = result.records
    assert list(records.columns) == (
        evaluation.RECORD_COLUMNS + evaluation.MULTI_SAMPLE_COLUMNS
    )
    assert records["n_correct"].tolist() == [3, 1, 0, 2]
    assert records["pass_at_k"].tolist() == [1.0, 1.0, 0.0, 1.0]
    assert records["maj_at_k"].tolist() == [True, False, False, False]
    assert records["exact"].tolist() == [True, False, False, False]  # first sample
    lengths = {c: len(c) for c in (right, wrong, unboxed)}
    sampled = [sum(lengths[c] for c in completions[q]) for q in completions]
    assert records["sampled_tokens"].tolist() == sampled
    summary = result.summary
    assert summary["k"] == 4
    assert summary["pass@k"] == pytest.approx(0.75)
    assert summary["maj@k"] == pytest.approx(0.25)
    assert summary["pass@1"] == pytest.approx(6 / 16)
    assert summary["sampled_tokens"] == sum(sampled)
    assert client.params[0].temperature == 1.0


def test_eval_result_reads_well(simple_prompts: None) -> None:
    tokenizer, questions, completions = _cases_setup()
    client = FakeSamplingClient(tokenizer, completions)
    result = evaluate(client, tokenizer, questions, progress=False, name="base")
    table = result.table()
    assert list(table.index) == ["base"]
    assert table.loc["base", "n"] == 6
    low, high = wilson_interval(2, 6)
    assert table.loc["base", "exact [95% CI]"] == (
        f"33.3% [{100 * low:.1f}, {100 * high:.1f}]"
    )
    text = repr(result)
    assert "base" in text and "exact [95% CI]" in text and "tokens:" in text
    assert "<table" in result._repr_html_()


def test_article_shaped_run_on_bundled_gsm8k(monkeypatch: pytest.MonkeyPatch) -> None:
    """GSM8K test[:100], a base sampler right on 79 and a trained one on 95.

    The trained one fixes 18 questions and breaks 2 (b=18, c=2): the intervals are
    the article's 79% [70.0, 85.8] and 95% [88.8, 97.8], and McNemar's p is
    scipy's ``binomtest(2, 20).pvalue`` = 0.000402...
    """
    from grpo_helpers import data

    rows = data.load_gsm8k("test", limit=100)
    tokenizer = CharTokenizer()
    golds = [data.extract_gsm8k_answer(row["answer"]) for row in rows]
    base_right = set(range(79))
    trained_right = (base_right - {0, 1}) | set(range(79, 97))
    assert len(trained_right) == 95

    def completions(right: set[int]) -> dict[str, list[str]]:
        return {
            row["question"]: [rf"\boxed{{{gold if i in right else 'no idea'}}}"]
            for i, (row, gold) in enumerate(zip(rows, golds, strict=True))
        }

    # Few-shot examples in the prompt are not test questions, but keep it short.
    monkeypatch.setattr(evaluation.prompts, "build_prompt", _simple_prompt)
    base = evaluate(
        FakeSamplingClient(tokenizer, completions(base_right), max_delay=0.002),
        tokenizer,
        rows,
        name="base",
        progress=False,
    )
    trained = evaluate(
        FakeSamplingClient(tokenizer, completions(trained_right), max_delay=0.002),
        tokenizer,
        rows,
        name="grpo",
        progress=False,
    )
    assert base.summary["exact_acc"] == pytest.approx(0.79)
    assert trained.summary["exact_acc"] == pytest.approx(0.95)
    assert base.summary["exact_ci"] == pytest.approx((0.7002003, 0.8583435), abs=1e-6)
    assert trained.summary["exact_ci"] == pytest.approx(
        (0.8882495, 0.9784563), abs=1e-6
    )
    comparison = compare(base, trained)
    assert comparison.names == ("base", "grpo")
    assert (comparison.wrong_to_right, comparison.right_to_wrong) == (18, 2)
    assert comparison.p_value == pytest.approx(0.0004024505615234375, rel=1e-12)
    assert comparison.improved["index"].tolist() == list(range(79, 97))
    assert comparison.regressed["index"].tolist() == [0, 1]
    rows = accuracy_rows([base, trained])
    assert rows["model"].tolist() == ["base", "grpo"]
    assert rows["exact_low"].tolist() == pytest.approx([0.7002003, 0.8882495], abs=1e-6)
    pd.testing.assert_frame_equal(rows, comparison.accuracy_rows())
    text = format_results_table([base, trained], comparison)
    assert "79.0% [70.0, 85.8]" in text and "95.0% [88.8, 97.8]" in text


# --------------------------------------------------------------------------------------
# Reusing a base model's recorded answers
# --------------------------------------------------------------------------------------


def _base_client(completions, model: str = "tiny"):  # noqa: ANN001, ANN202
    client = FakeSamplingClient(CharTokenizer(), completions)
    client.is_base, client.model_id = True, model
    return client


def _recorded(records: pd.DataFrame, **changes) -> evaluation.RecordedAnswers:  # noqa: ANN003
    fields = {
        "records": records,
        "model": "tiny",
        "backend": "local",
        "max_tokens": 512,
        "source": "a test's own evaluation",
    } | changes
    return evaluation.RecordedAnswers(**fields)


def test_reused_answers_are_the_recorded_ones_graded_again(
    simple_prompts: None, capsys: pytest.CaptureFixture
) -> None:
    tokenizer, questions, completions = _cases_setup()
    first = evaluate(_base_client(completions), tokenizer, questions, progress=False)
    stale = first.records.copy()
    stale["exact"] = stale["lenient"] = False  # graded by an older grader
    client = _base_client(completions)
    again = evaluate(client, tokenizer, questions, reuse=_recorded(stale), name="b")
    assert client.params == []  # nothing was sampled
    pd.testing.assert_frame_equal(again.records, first.records)
    assert again.summary["exact_acc"] == first.summary["exact_acc"]
    assert again.settings["reused_from"] == "a test's own evaluation"
    assert "6 answers read from: a test's own evaluation" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"model": "other"}, "the sampler's model is 'tiny', the recorded one 'other'"),
        ({"backend": "pytrio"}, "not the local engine's base model"),
        ({"max_tokens": 64}, "(0.0, 512, 1) here, (0.0, 64, 1) when recorded"),
        ({"records": "fewer"}, "6 questions here, 5 recorded"),
        ({"records": "other golds"}, "the golds differ"),
        ({"records": "other prompts"}, "the prompts differ"),
    ],
)
def test_recorded_answers_that_differ_are_computed(
    simple_prompts: None, capsys: pytest.CaptureFixture, change: dict, why: str
) -> None:
    tokenizer, questions, completions = _cases_setup()
    first = evaluate(_base_client(completions), tokenizer, questions, progress=False)
    records = first.records.copy()
    if change.get("records") == "fewer":
        change = {"records": records.iloc[:5]}
    elif change.get("records") == "other golds":
        records.loc[0, "gold"] = "19"
        change = {"records": records}
    elif change.get("records") == "other prompts":  # another few-shot prefix
        records["prompt_tokens"] = records["prompt_tokens"] + 1
        change = {"records": records}
    client = _base_client(completions)
    recorded = _recorded(**({"records": records} | change))
    again = evaluate(client, tokenizer, questions, reuse=recorded)
    assert len(client.params) == len(questions)  # every question was sampled
    pd.testing.assert_frame_equal(again.records, first.records)
    assert "reused_from" not in again.settings
    out = capsys.readouterr().out
    assert "computed here, not read" in out and why in out


def test_only_the_base_model_and_greedy_answers_are_reused(
    simple_prompts: None,
) -> None:
    tokenizer, questions, completions = _cases_setup()
    records = evaluate(
        _base_client(completions), tokenizer, questions, progress=False
    ).records
    recorded = _recorded(records)
    rows = evaluation._question_rows(questions, None)
    lengths = records["prompt_tokens"].tolist()
    greedy = {"temperature": 0.0, "max_tokens": 512, "num_samples": 1}
    assert (
        evaluation.reuse_problem(recorded, _base_client({}), rows, lengths, **greedy)
        is None
    )
    trained = _base_client({})
    trained.is_base = False  # a sampler with an adapter
    assert "not the local engine's base model" in evaluation.reuse_problem(
        recorded, trained, rows, lengths, **greedy
    )
    sampled = {**greedy, "temperature": 1.0}
    assert "(1.0, 512, 1) here" in evaluation.reuse_problem(
        recorded, _base_client({}), rows, lengths, **sampled
    )
    hot = _recorded(records, temperature=1.0)
    assert "only greedy" in evaluation.reuse_problem(
        hot, _base_client({}), rows, lengths, **sampled
    )


def test_the_recorded_run_offers_its_base_answers() -> None:
    from grpo_helpers.results import recorded_runs

    run = recorded_runs.load_run()
    base = run.answers()
    assert base.records is run.base
    assert base.model == run.meta["settings"]["base_model"]
    assert base.max_tokens == run.meta["settings"]["eval_max_tokens"]
    assert (
        run.answers("gsm8k base").max_tokens == run.meta["settings"]["gsm8k_max_tokens"]
    )
    assert run.answers("zero-shot").records is run.evals["zero-shot"]
    assert run.meta["command"] in base.source
    with pytest.raises(KeyError, match="'base', 'zero-shot'"):
        run.answers("gsm8k trained")  # other weights answer differently


@pytest.mark.parametrize(
    "name", ["base", "zero-shot", "arithmetic example", "gsm8k base"]
)
def test_notebook_07_at_full_size_reads_the_recorded_base_answers(name: str) -> None:
    """Notebook 07's full-size defaults ask the prompts the recorded run answered,
    so ``reuse`` applies there (with the real tokenizer, as the notebook builds
    them); anything else would make the notebook compute them, minutes each."""
    from grpo_helpers import data, presets, prompts
    from grpo_helpers.config import GRPOConfig
    from grpo_helpers.results import recorded_runs

    run = recorded_runs.load_run()
    recorded = run.answers(name)
    nb07 = presets.notebook_eval(fast=False)
    if name == "gsm8k base":
        questions, max_tokens = data.load_gsm8k("test", limit=100), 128  # nb07's
    else:
        config = GRPOConfig(**presets.notebook_run(fast=False), seed=0)
        test_rows = data.load_split(config, "test")
        questions = test_rows.select(range(nb07["eval_questions"]))
        max_tokens = nb07["eval_max_tokens"]
    tokenizer = _real_tokenizer()
    fewshot = prompts.PROMPT_EXAMPLES.get(name, prompts.FEWSHOT_PREFIX)
    rows = evaluation._question_rows(questions, None)
    lengths = [
        len(prompts.build_prompt(tokenizer, row["question"], fewshot)) for row in rows
    ]
    sampler = _base_client({}, model=SMOLLM2)
    greedy = {"temperature": 0.0, "max_tokens": max_tokens, "num_samples": 1}
    assert evaluation.reuse_problem(recorded, sampler, rows, lengths, **greedy) is None
