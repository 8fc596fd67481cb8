"""Evaluation: a sampler answers held-out questions, and each answer is graded.

Training curves tell us that the reward went up; evaluation tells us whether the model
got better at questions it never trained on. The recipe of the series (and of the
article's ``eval.py``) is deliberately plain:

1. the same prompts for every model (``prompts.build_prompt``), greedy decoding
   (``temperature=0``) and ``max_tokens=512``;
2. requests sent concurrently (``asyncio`` with a semaphore): concurrency changes the
   speed, never the score, because the records are put back in question order;
3. two graders, reported apart:

   * **exact**: the last ``\\boxed{...}`` answer matches the gold answer;
   * **lenient**: the boxed answer if there is one, else the last number of the
     completion, matches the gold answer. The article's ``eval.py`` scores this
     way, and calls the result "exact accuracy" (79% -> 95%): compare its numbers
     with our *lenient* column.

   The gap between them is the model's *format* error, not its arithmetic;

4. one record per question (:data:`RECORD_COLUMNS`), in question order, so that two
   models' records line up question by question.

:mod:`grpo_helpers.results.report` reads the records. Everything here works with
PyTRIO's ``SamplingClient`` and the local engine's, in a script and inside Jupyter.

The module stays whole (about 600 lines): the sync and async evaluation, the
grading of each answer and the reuse of recorded answers are one path a record
takes.

Introduced in: 07_evaluating_a_trained_model.ipynb
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd
import pytrio
from tqdm.auto import tqdm

from grpo_helpers import data, prompts, rewards
from grpo_helpers.config import EvalConfig
from grpo_helpers.engines import run_coroutine
from grpo_helpers.results import answers
from grpo_helpers.results.report import format_results_table, summarize, summary_row
from grpo_helpers.results.stats import maj_at_k, pass_at_k

__all__ = [
    "MULTI_SAMPLE_COLUMNS",
    "RECORD_COLUMNS",
    "EvalResult",
    "evaluate",
    "evaluate_async",
    "regrade",
]

#: Columns of the per-question records, in order (``num_samples == 1``).
RECORD_COLUMNS = [
    "index",
    "question",
    "gold",
    "operation",
    "completion",
    "extracted",
    "boxed",
    "answer_lenient",
    "exact",
    "lenient",
    "completion_tokens",
    "hit_max_tokens",
    "prompt_tokens",
]
#: Extra columns when each question is sampled ``k > 1`` times.
MULTI_SAMPLE_COLUMNS = [
    "n_correct",
    "pass_at_k",
    "maj_at_k",
    "sampled_tokens",
    "answers",
    "correct",
]


@dataclass
class EvalResult:
    """What :func:`evaluate` returns: one row per question plus a summary.

    Attributes:
        records: per-question DataFrame, in question order, with the columns
            ``index, question, gold, completion, extracted, boxed, answer_lenient,
            exact, lenient, completion_tokens, hit_max_tokens, prompt_tokens`` and,
            for ``k > 1`` samples per question, ``n_correct, pass_at_k, maj_at_k,
            sampled_tokens``. ``completion`` and the per-sample columns describe the
            first sample.
        summary: see :func:`grpo_helpers.results.report.summarize`.
        name: label used in tables (``"base"``, ``"grpo step 50"``...).
        settings: the sampling settings the numbers were measured with.
    """

    records: pd.DataFrame
    summary: dict[str, Any]
    name: str = "model"
    settings: dict[str, Any] = field(default_factory=dict)

    def table(self) -> pd.DataFrame:
        """One-row table: model | exact [95% CI] | lenient [95% CI] | boxed | n."""
        return pd.DataFrame([summary_row(self.name, self.summary)]).set_index("model")

    def __repr__(self) -> str:
        s = self.summary
        lines = [
            f"EvalResult({self.name!r}, n={s['n']})",
            format_results_table({self.name: self}),
            f"tokens: {s['prompt_tokens']:,} prompt + {s['sampled_tokens']:,} sampled"
            f" = {s['total_tokens']:,}"
            + (f" in {s['seconds']:.1f} s" if s.get("seconds") is not None else ""),
            f"hit max_tokens: {100 * s['hit_max_tokens_frac']:.1f}%",
        ]
        return "\n".join(lines)

    def _repr_html_(self) -> str:  # Jupyter shows this instead of __repr__
        s = self.summary
        tokens = (
            f"<p>tokens: {s['prompt_tokens']:,} prompt + {s['sampled_tokens']:,}"
            f" sampled = {s['total_tokens']:,}; hit max_tokens:"
            f" {100 * s['hit_max_tokens_frac']:.1f}%</p>"
        )
        return self.table().to_html() + tokens


# --------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------


def _question_rows(
    questions: Any, indices: Sequence[int] | None
) -> list[dict[str, Any]]:
    """Rows ``{index, question, gold}`` from a Dataset, DataFrame or list of dicts."""
    if isinstance(questions, pd.DataFrame):
        items = questions.to_dict("records")
    elif isinstance(questions, Mapping):
        # ``dataset[:100]`` gives columns ({"question": [...], "answer": [...]}).
        if not isinstance(questions.get("question"), (list, tuple)):
            raise TypeError("questions must be rows (dicts) or a dict of columns")
        columns = {key: list(values) for key, values in questions.items()}
        items = [
            dict(zip(columns, values, strict=True))
            for values in zip(*columns.values(), strict=True)
        ]
    else:
        items = [dict(row) for row in questions]
    if not items:
        raise ValueError("no questions to evaluate")
    if indices is None:
        if all("index" in row for row in items):
            indices = [row["index"] for row in items]
        else:
            indices = range(len(items))
    indices = [int(i) for i in indices]
    if len(indices) != len(items):
        raise ValueError(f"{len(indices)} indices for {len(items)} questions")
    if len(set(indices)) != len(indices):
        raise ValueError("indices must be unique")
    rows = []
    for index, row in zip(indices, items, strict=True):
        if "answer" in row:
            gold = data.extract_gsm8k_answer(row["answer"])
            operation = answers.solution_operation(row["answer"])
        elif "gold" in row:
            gold = str(row["gold"])
            operation = row.get("operation")
        else:
            raise KeyError("each question needs an 'answer' (GSM8K format) or 'gold'")
        rows.append(
            {
                "index": index,
                "question": row["question"],
                "gold": gold,
                "operation": operation,
            }
        )
    return rows


@dataclass(frozen=True)
class RecordedAnswers:
    """A base model's answers that a recorded command already got.

    ``evaluate(..., reuse=answers)`` returns these records instead of sampling when
    they answer exactly the prompts asked, with the same model and settings (see
    :func:`reuse_problem`). The base model's greedy answers to the same prompts are
    the same on every run, so notebook 07 reads the recorded run's instead of
    computing them again (minutes at full size). ``RecordedRun.answers(name)``
    builds one from a recorded run.

    Attributes:
        records: the per-question records, as :func:`evaluate` made them.
        model: the base model that answered.
        backend: the engine that ran it (only ``"local"`` answers are reused).
        max_tokens, temperature, num_samples: the settings they were made with.
        source: the command that recorded them (printed when they are read).
    """

    records: pd.DataFrame
    model: str
    backend: str
    max_tokens: int
    source: str
    temperature: float = 0.0
    num_samples: int = 1


def reuse_problem(
    reuse: RecordedAnswers,
    sampling_client: Any,
    rows: Sequence[Mapping[str, Any]],
    prompt_lengths: Sequence[int],
    *,
    temperature: float,
    max_tokens: int,
    num_samples: int,
) -> str | None:
    """Why recorded answers do not answer this evaluation, or None when they do.

    They do only when all of these hold: the sampler is the local engine's base
    model (no adapter: ``is_base``), the one that answered; greedy decoding, one
    sample and the same ``max_tokens``; the same questions and gold answers in the
    same order; and prompts of the same lengths in tokens (a different few-shot
    prefix or tokenizer changes them). The records keep no prompt text, so a prompt
    of exactly the same length with other words would pass: after changing the
    series' prompt, record the run again (``bench/cpu_grpo_demo.py --record``).
    """
    if reuse.backend != "local" or not getattr(sampling_client, "is_base", False):
        return "the sampler is not the local engine's base model"
    if getattr(sampling_client, "model_id", None) != reuse.model:
        model = getattr(sampling_client, "model_id", None)
        return f"the sampler's model is {model!r}, the recorded one {reuse.model!r}"
    mine = (temperature, max_tokens, num_samples)
    theirs = (reuse.temperature, reuse.max_tokens, reuse.num_samples)
    if mine != theirs:
        return f"(temperature, max_tokens, samples) {mine} here, {theirs} when recorded"
    if temperature != 0:
        return "sampled answers are never reused, only greedy ones"
    recorded = reuse.records
    if len(recorded) != len(rows):
        return f"{len(rows)} questions here, {len(recorded)} recorded"
    for column in ("question", "gold"):
        if [str(r[column]) for r in rows] != [str(v) for v in recorded[column]]:
            return f"the {column}s differ from the recorded ones"
    if [int(n) for n in prompt_lengths] != [int(n) for n in recorded["prompt_tokens"]]:
        return "the prompts differ from the recorded ones (another few-shot prefix?)"
    return None


def _reused(
    reuse: RecordedAnswers,
    rows: Sequence[Mapping[str, Any]],
    name: str,
    confidence: float,
    settings: dict[str, Any],
) -> EvalResult:
    graded = [
        {
            **{column: record.get(column) for column in RECORD_COLUMNS},
            **_grade_text(record["completion"], row["gold"]),
            "index": row["index"],
            "operation": row["operation"],
        }
        for record, row in zip(reuse.records.to_dict("records"), rows, strict=True)
    ]
    frame = _records_frame(graded, 1)
    print(f"eval {name}: {len(frame)} answers read from: {reuse.source}")
    summary = summarize(frame, confidence=confidence, seconds=0.0)
    settings = {**settings, "reused_from": reuse.source}
    return EvalResult(records=frame, summary=summary, name=name, settings=settings)


def _completion_text(sequence: Any, tokenizer: Any) -> str:
    if sequence.text is not None:
        return sequence.text
    return tokenizer.decode(list(sequence.tokens), skip_special_tokens=True)


def regrade(records: pd.DataFrame) -> pd.DataFrame:
    r"""The records with every grade (``extracted``, ``boxed``, ``answer_lenient``,
    ``exact``, ``lenient``) recomputed from each ``completion`` and its ``gold``.

    Example:
        >>> frame = pd.DataFrame({"completion": ["so \\boxed{7}", "it is 7"],
        ...                       "gold": ["7", "7"], "exact": [False, True]})
        >>> regrade(frame)[["exact", "lenient", "boxed"]].to_dict("list")
        {'exact': [True, False], 'lenient': [True, True], 'boxed': [True, False]}
    """
    graded = pd.DataFrame(
        [
            _grade_text(str(text), str(gold))
            for text, gold in zip(records["completion"], records["gold"], strict=True)
        ],
        index=records.index,
    )
    return records.assign(**{column: graded[column] for column in graded.columns})


def _grade_text(text: str, gold: str) -> dict[str, Any]:
    answer_lenient, boxed = rewards.read_answer(text)
    extracted = answer_lenient if boxed else None
    return {
        "extracted": extracted,
        "boxed": boxed,
        "answer_lenient": answer_lenient,
        "exact": boxed and bool(rewards.answers_match(extracted, gold)),
        "lenient": answer_lenient is not None
        and bool(rewards.answers_match(answer_lenient, gold)),
    }


def _record(
    row: Mapping[str, Any],
    prompt_tokens: int,
    response: Any,
    tokenizer: Any,
    max_tokens: int,
    num_samples: int,
) -> dict[str, Any]:
    sequences = list(response.sequences)
    if not sequences:
        raise RuntimeError(f"the sampler returned no sequences for question {row}")
    graded = []
    for sequence in sequences:
        text = _completion_text(sequence, tokenizer)
        grade = _grade_text(text, row["gold"])
        grade["completion"] = text
        grade["completion_tokens"] = len(sequence.tokens)
        grade["hit_max_tokens"] = (
            sequence.stop_reason == "length" or len(sequence.tokens) >= max_tokens
        )
        graded.append(grade)
    first = graded[0]
    record = {
        "index": row["index"],
        "question": row["question"],
        "gold": row["gold"],
        "operation": row["operation"],
        "completion": first["completion"],
        "extracted": first["extracted"],
        "boxed": first["boxed"],
        "answer_lenient": first["answer_lenient"],
        "exact": first["exact"],
        "lenient": first["lenient"],
        "completion_tokens": first["completion_tokens"],
        "hit_max_tokens": first["hit_max_tokens"],
        "prompt_tokens": prompt_tokens,
    }
    if num_samples > 1:
        n_correct = sum(g["exact"] for g in graded)
        record["n_correct"] = n_correct
        record["pass_at_k"] = pass_at_k(
            len(graded), n_correct, min(num_samples, len(graded))
        )
        record["maj_at_k"] = maj_at_k([g["extracted"] for g in graded], row["gold"])
        record["sampled_tokens"] = sum(g["completion_tokens"] for g in graded)
        record["answers"] = [g["extracted"] for g in graded]  # for k-curves
        record["correct"] = [bool(g["exact"]) for g in graded]
    return record


def _records_frame(records: list[dict[str, Any]], num_samples: int) -> pd.DataFrame:
    columns = RECORD_COLUMNS + (MULTI_SAMPLE_COLUMNS if num_samples > 1 else [])
    frame = pd.DataFrame(
        {
            # object columns keep None as None (pandas would otherwise turn it into NaN)
            column: pd.Series(
                [r[column] for r in records],
                dtype=object
                if column in ("extracted", "answer_lenient", "operation")
                else None,
            )
            for column in columns
        }
    )
    if num_samples > 1:
        frame.attrs["k"] = num_samples
    return frame


async def _sample_all(
    sampling_client: Any,
    prompt_tokens: list[list[int]],
    params: Any,
    *,
    num_samples: int,
    concurrency: int,
    bar: Any,
) -> list[Any]:
    """One sampling response per prompt, in the prompts' order.

    At most ``concurrency`` requests are in flight; ``bar`` (a tqdm bar) counts
    each response as it arrives. If one request fails, the others are cancelled
    and collected before the error goes on, so no task outlives the call.
    """
    semaphore = asyncio.Semaphore(concurrency)

    async def sample_one(position: int) -> tuple[int, Any]:
        async with semaphore:
            response = await sampling_client.sample_async(
                prompt=pytrio.ModelInput.from_ints(prompt_tokens[position]),
                num_samples=num_samples,
                sampling_params=params,
            )
        return position, response

    responses: list[Any] = [None] * len(prompt_tokens)
    tasks = [asyncio.ensure_future(sample_one(i)) for i in range(len(prompt_tokens))]
    try:
        with bar:
            # Responses arrive in any order; each goes back to its question's slot.
            for next_done in asyncio.as_completed(tasks):
                position, response = await next_done
                responses[position] = response
                bar.update(1)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return responses


def eval_settings(
    config: EvalConfig | None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    concurrency: int | None = None,
    num_samples: int | None = None,
) -> EvalConfig:
    """``config`` (default ``EvalConfig()``) with the keywords given instead of its
    values, validated by the knobs (``ValueError`` names a bad one). Evaluating
    reads four of its fields: ``temperature``, ``eval_max_tokens``,
    ``concurrency`` and ``num_samples``; which questions (``split``,
    ``eval_questions``) are the caller's choice of the rows it passes.

    Example::

        >>> eval_settings(None, max_tokens=32).eval_max_tokens
        32
    """
    given = {
        "temperature": temperature,
        "eval_max_tokens": max_tokens,
        "concurrency": concurrency,
        "num_samples": num_samples,
    }
    changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    return replace(config or EvalConfig(), **changes)


async def evaluate_async(
    sampling_client: Any,
    tokenizer: Any,
    questions: Any,
    *,
    config: EvalConfig | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    concurrency: int | None = None,
    num_samples: int | None = None,
    seed: int | None = None,
    progress: bool = True,
    indices: Sequence[int] | None = None,
    name: str = "model",
    confidence: float = 0.95,
    fewshot: Sequence[Mapping[str, str]] = prompts.FEWSHOT_PREFIX,
    reuse: RecordedAnswers | None = None,
) -> EvalResult:
    """Coroutine version of :func:`evaluate`: ``await evaluate_async(...)``.

    Use it where you already are inside ``async`` code; everywhere else (scripts and
    notebook cells) call :func:`evaluate`. Arguments and result are the same.
    """
    settings_ = eval_settings(config, temperature, max_tokens, concurrency, num_samples)
    temperature, max_tokens = settings_.temperature, settings_.eval_max_tokens
    concurrency, num_samples = settings_.concurrency, settings_.num_samples
    rows = _question_rows(questions, indices)
    prompt_tokens = [
        list(prompts.build_prompt(tokenizer, r["question"], fewshot)) for r in rows
    ]
    settings = {
        "temperature": temperature,
        "max_tokens": max_tokens,
        "num_samples": num_samples,
        "seed": seed,
        "concurrency": concurrency,
        "fewshot": [dict(turn) for turn in fewshot],
    }
    if reuse is not None:
        problem = reuse_problem(
            reuse,
            sampling_client,
            rows,
            [len(tokens) for tokens in prompt_tokens],
            temperature=temperature,
            max_tokens=max_tokens,
            num_samples=num_samples,
        )
        if problem is None:
            return _reused(reuse, rows, name, confidence, settings)
        print(f"eval {name}: computed here, not read: {problem}")
    params = pytrio.SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature,
        stop=prompts.get_stop_sequences(tokenizer),
        seed=seed,
    )
    start = time.perf_counter()
    responses = await _sample_all(
        sampling_client,
        prompt_tokens,
        params,
        num_samples=num_samples,
        concurrency=concurrency,
        bar=tqdm(total=len(rows), desc=f"eval {name}", unit="q", disable=not progress),
    )
    seconds = time.perf_counter() - start

    records = [
        _record(row, len(tokens), response, tokenizer, max_tokens, num_samples)
        for row, tokens, response in zip(rows, prompt_tokens, responses, strict=True)
    ]
    frame = _records_frame(records, num_samples)
    summary = summarize(frame, confidence=confidence, seconds=seconds)
    return EvalResult(records=frame, summary=summary, name=name, settings=settings)


def evaluate(
    sampling_client: Any,
    tokenizer: Any,
    questions: Any,
    *,
    config: EvalConfig | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    concurrency: int | None = None,
    num_samples: int | None = None,
    seed: int | None = None,
    progress: bool = True,
    indices: Sequence[int] | None = None,
    name: str = "model",
    confidence: float = 0.95,
    fewshot: Sequence[Mapping[str, str]] = prompts.FEWSHOT_PREFIX,
    reuse: RecordedAnswers | None = None,
) -> EvalResult:
    """Accuracy of a sampler on GSM8K questions, with one record per question.

    Each question becomes a prompt (``prompts.build_prompt``); all prompts are sent
    to ``sampling_client.sample_async`` at most ``concurrency`` at a time; each
    completion is graded exact (boxed answer) and lenient (boxed, else last number).

    Args:
        sampling_client: PyTRIO's ``SamplingClient`` or the local engine's (anything
            with ``async sample_async(prompt, num_samples, sampling_params)``).
        tokenizer: the model's tokenizer (builds prompts; decodes completions that
            came back without text).
        questions: GSM8K rows, a ``datasets.Dataset``, a DataFrame or a list of dicts
            with ``question`` and ``answer`` (the gold answer is the text after
            ``####``). An ``index`` column, if present, is kept as the question id.
        config: the evaluation's settings (``config.EvalConfig``; its defaults
            when None): the next four keywords, when given, replace its values.
        temperature: 0.0 is greedy decoding, the same answer every time.
        max_tokens: most tokens per completion (``eval_max_tokens``); a completion
            that reaches it is flagged ``hit_max_tokens`` (often it was cut before
            its answer).
        concurrency: requests in flight at once. Changes speed only, not the score.
        num_samples: ``k`` completions per question (one request each); with
            ``k > 1`` (use ``temperature > 0``) the records add pass@k and maj@k.
        seed: sampling seed sent with every request (engines that honour it repeat).
        progress: show a tqdm progress bar.
        indices: question ids (overrides an ``index`` column; default ``0..n-1``).
        name: label of this model in tables.
        confidence: coverage of the Wilson intervals in the summary.
        fewshot: the prompt's worked example (``prompts.PROMPT_EXAMPLES``): the
            series' strawberry example by default, ``[]`` for zero-shot.
        reuse: a base model's recorded answers (``RecordedRun.answers``): returned
            instead of sampling when they answer exactly these prompts with this
            model and these settings (:func:`reuse_problem`); otherwise the answers
            are computed. Either way one line says which, and why. Reused
            completions are graded again here, so a change to the graders applies
            to them too.

    Returns:
        An :class:`EvalResult` whose ``records`` are in question order and whose
        ``summary`` has the accuracies, their intervals and the token counts
        (prompt tokens count once per request, sampled tokens once per sample).

    Example (``sampler`` from ``engines.connect(...)``)::

        result = evaluate(sampler, tokenizer, data.load_gsm8k("test", limit=100))
        result.summary["exact_acc"], result.summary["exact_ci"]
    """
    return run_coroutine(
        evaluate_async(
            sampling_client,
            tokenizer,
            questions,
            config=config,
            temperature=temperature,
            max_tokens=max_tokens,
            concurrency=concurrency,
            num_samples=num_samples,
            seed=seed,
            progress=progress,
            indices=indices,
            name=name,
            confidence=confidence,
            fewshot=fewshot,
            reuse=reuse,
        )
    )
