"""Evaluation: accuracy of a sampler on GSM8K, with intervals and per-question records.

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

4. a 95% Wilson interval on each accuracy (100 questions give intervals about
   +/- 8 points wide) and, for base vs trained, McNemar's exact test on the questions
   that flipped, because both models answer the *same* questions.

Everything here works with PyTRIO's ``SamplingClient`` and with the local engine's, and
from a plain script as well as from inside Jupyter (which already runs an event loop).

Introduced in: 07_base_vs_grpo_eval.ipynb
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd
import pytrio
from tqdm.auto import tqdm

from grpo_helpers import answers, data, prompts, rewards

__all__ = [
    "Comparison",
    "accuracy_rows",
    "EvalResult",
    "compare",
    "evaluate",
    "evaluate_async",
    "format_results_table",
    "k_curves",
    "maj_at_k",
    "majority_answer",
    "mcnemar_exact_p",
    "paired_bootstrap_ci",
    "pass_at_k",
    "run_coroutine",
    "summarize",
    "wilson_interval",
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


# --------------------------------------------------------------------------------------
# Statistics: pure functions over counts
# --------------------------------------------------------------------------------------


def wilson_interval(
    successes: int, n: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Wilson score interval for a proportion ``successes / n``.

    The textbook interval ``p +/- z * sqrt(p (1 - p) / n)`` collapses to a single
    point at 0% or 100% and can leave [0, 1]; Wilson's interval inverts the score
    test instead, so it stays inside [0, 1] and behaves well for small ``n`` and
    accuracies near 100% (exactly where a good model on 100 questions sits)::

        centre = (p + z^2 / 2n) / (1 + z^2 / n)
        half   = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2)

    Args:
        successes: number of correct answers, ``0 <= successes <= n``.
        n: number of questions, ``n >= 1``.
        confidence: coverage of the interval, strictly between 0 and 1; ``z`` is the
            normal quantile ``NormalDist().inv_cdf(1 - (1 - confidence) / 2)``
            (1.96 for 95%).

    Returns:
        ``(low, high)``, two proportions in [0, 1].

    Raises:
        ValueError: ``n < 1``, ``successes`` outside ``[0, n]`` or ``confidence``
            outside ``(0, 1)``.

    Example (the article's 79/100 and 95/100 on GSM8K test[:100]):

        >>> [round(x, 4) for x in wilson_interval(79, 100)]
        [0.7002, 0.8583]
        >>> [round(x, 4) for x in wilson_interval(95, 100)]
        [0.8882, 0.9785]
        >>> wilson_interval(0, 10)[0]
        0.0
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, n={n}], got {successes}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    p = successes / n
    z2n = z * z / n
    denominator = 1.0 + z2n
    centre = (p + z2n / 2.0) / denominator
    half = z / denominator * math.sqrt(p * (1.0 - p) / n + z2n / (4.0 * n))
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar test: did the flips go one way more than by chance?

    Two models answer the same questions. Questions both get right (or both get
    wrong) say nothing about which model is better; only the *discordant* pairs do:
    ``b`` questions went wrong -> right and ``c`` went right -> wrong. If the models
    were equally good, each flip would go either way with probability 1/2, so
    ``b ~ Binomial(b + c, 1/2)`` and the two-sided p-value is::

        p = min(1, 2 * sum_{i <= min(b, c)} C(b + c, i) / 2^(b + c))

    Args:
        b: questions wrong for the first model and right for the second (>= 0).
        c: questions right for the first model and wrong for the second (>= 0).

    Returns:
        The p-value in (0, 1]; 1.0 when there are no flips at all (``b + c == 0``).

    Raises:
        ValueError: a negative count.

    Example:

        >>> round(mcnemar_exact_p(10, 2), 4)
        0.0386
        >>> mcnemar_exact_p(5, 5), mcnemar_exact_p(0, 0)
        (1.0, 1.0)
    """
    if b < 0 or c < 0:
        raise ValueError(f"counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    # Integer numerator and denominator: exact until the final (rounded) division.
    return min(1.0, 2 * tail / (1 << n))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from ``n`` samples of which ``c`` are correct.

    pass@k is the chance that at least one of ``k`` samples is correct. Drawing
    exactly ``k`` samples and checking is noisy; Chen et al. (2021, the Codex paper)
    draw ``n >= k`` and average over all size-``k`` subsets::

        pass@k = 1 - C(n - c, k) / C(n, k)
               = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)     (stable product form)

    Args:
        n: samples drawn for the question (``n >= 1``).
        c: how many of them are correct (``0 <= c <= n``).
        k: the budget of attempts (``1 <= k <= n``).

    Returns:
        A probability in [0, 1]; 1.0 as soon as fewer than ``k`` samples are wrong.

    Raises:
        ValueError: counts out of range.

    Example:

        >>> round(pass_at_k(10, 3, 1), 4)  # pass@1 is the plain fraction correct
        0.3
        >>> round(pass_at_k(10, 3, 2), 4)  # 1 - C(7, 2) / C(10, 2) = 1 - 21/45
        0.5333
        >>> pass_at_k(5, 0, 3), pass_at_k(5, 3, 3)
        (0.0, 1.0)
    """
    if n < 1 or not 1 <= k <= n:
        raise ValueError(f"need n >= 1 and 1 <= k <= n, got n={n}, k={k}")
    if not 0 <= c <= n:
        raise ValueError(f"c must be in [0, n={n}], got {c}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def _vote_key(answer: str) -> tuple[str, Any]:
    # Numbers vote by value ("18" and "18.00" are one answer), the rest by text.
    value = rewards.parse_number(answer)
    if value is not None:
        return ("number", value)
    return ("text", rewards.normalize_answer(answer))


def majority_answer(answers: Iterable[str | None]) -> str | None:
    """The most common answer among ``answers`` (majority vote, "self-consistency").

    Numbers vote by value (``rewards.parse_number``), so ``"18"``, ``"18.00"`` and
    ``"$18"`` count as one answer; other answers vote by their normalised text.
    ``None`` (nothing extracted) does not vote. A tie goes to the answer that
    appeared first.

    Args:
        answers: extracted answers of the ``k`` samples of one question.

    Returns:
        The first-seen spelling of the winning answer, or ``None`` if nobody voted.

    Example:

        >>> majority_answer(["17", None, "18", "18", "17"])  # tie: 17 came first
        '17'
        >>> majority_answer(["18.00", "17", "$18"])  # one answer, two spellings
        '18.00'
        >>> majority_answer([None, None]) is None
        True
    """
    counts: dict[tuple[str, Any], int] = {}
    first_spelling: dict[tuple[str, Any], str] = {}
    for answer in answers:
        if answer is None:
            continue
        key = _vote_key(answer)
        counts[key] = counts.get(key, 0) + 1
        first_spelling.setdefault(key, answer)
    if not counts:
        return None
    best = max(counts.values())
    # dicts keep insertion order: the first key reaching ``best`` appeared first.
    winner = next(key for key, count in counts.items() if count == best)
    return first_spelling[winner]


def maj_at_k(answers: Sequence[str | None], gold: str) -> bool:
    """maj@k: is the majority-vote answer of ``k`` samples correct?

    DeepSeekMath (section 5.2) found that RL raises maj@k but not pass@k: it makes the
    model *more consistent* at what it could already sometimes do.

    Args:
        answers: the ``k`` extracted answers (``None`` where nothing was extracted).
        gold: the gold answer.

    Returns:
        ``True`` if the majority answer (see :func:`majority_answer`) matches ``gold``.

    Example:

        >>> maj_at_k(["18", "17", "18", None], "18")
        True
        >>> maj_at_k(["17", "18"], "18")  # tie goes to the first answer, 17
        False
    """
    winner = majority_answer(answers)
    return winner is not None and bool(rewards.answers_match(winner, gold))


# --------------------------------------------------------------------------------------
# Summaries of records
# --------------------------------------------------------------------------------------


def summarize(
    records: pd.DataFrame, *, confidence: float = 0.95, seconds: float | None = None
) -> dict[str, Any]:
    """Accuracies, intervals and token counts of a records DataFrame.

    Args:
        records: per-question records as made by :func:`evaluate` (one row per
            question; needs at least ``exact``, ``lenient`` and ``boxed``).
        confidence: coverage of the Wilson intervals.
        seconds: wall-clock time of the evaluation, stored as is.

    Returns:
        A dict with ``n``, ``exact_acc``, ``exact_ci`` (low, high), ``lenient_acc``,
        ``lenient_ci``, ``boxed_frac``, ``hit_max_tokens_frac``, ``prompt_tokens``,
        ``sampled_tokens``, ``total_tokens``, ``seconds`` and, when the records hold
        ``k > 1`` samples per question, ``k``, ``pass@1`` (mean fraction of correct
        samples), ``pass@k`` and ``maj@k``.

    Raises:
        ValueError: empty records.
    """
    n = len(records)
    if n == 0:
        raise ValueError("no records to summarize")
    n_exact = int(records["exact"].sum())
    n_lenient = int(records["lenient"].sum())
    prompt_tokens = (
        int(records["prompt_tokens"].sum()) if "prompt_tokens" in records else 0
    )
    if "sampled_tokens" in records:
        sampled_tokens = int(records["sampled_tokens"].sum())
    elif "completion_tokens" in records:
        sampled_tokens = int(records["completion_tokens"].sum())
    else:
        sampled_tokens = 0
    summary: dict[str, Any] = {
        "n": n,
        "exact_acc": n_exact / n,
        "exact_ci": wilson_interval(n_exact, n, confidence),
        "lenient_acc": n_lenient / n,
        "lenient_ci": wilson_interval(n_lenient, n, confidence),
        "boxed_frac": float(records["boxed"].mean()),
        "hit_max_tokens_frac": (
            float(records["hit_max_tokens"].mean())
            if "hit_max_tokens" in records
            else 0.0
        ),
        "prompt_tokens": prompt_tokens,
        "sampled_tokens": sampled_tokens,
        "total_tokens": prompt_tokens + sampled_tokens,
        "seconds": seconds,
        "confidence": confidence,
    }
    if "pass_at_k" in records:
        k = records.attrs.get("k")  # set by evaluate; lost if the frame was rebuilt
        summary["k"] = k
        summary["pass@k"] = float(records["pass_at_k"].mean())
        summary["maj@k"] = float(records["maj_at_k"].mean())
        if k:
            summary["pass@1"] = float((records["n_correct"] / k).mean())
    return summary


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _acc_ci(acc: float, ci: tuple[float, float]) -> str:
    return f"{_pct(acc)} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _summary_row(name: str, summary: Mapping[str, Any]) -> dict[str, Any]:
    level = round(100 * summary.get("confidence", 0.95))
    row = {
        "model": name,
        f"exact [{level}% CI]": _acc_ci(summary["exact_acc"], summary["exact_ci"]),
        f"lenient [{level}% CI]": _acc_ci(
            summary["lenient_acc"], summary["lenient_ci"]
        ),
        "boxed": _pct(summary["boxed_frac"]),
        "n": summary["n"],
    }
    if "pass@k" in summary:
        k = summary.get("k") or "k"
        row[f"pass@{k}"] = _pct(summary["pass@k"])
        row[f"maj@{k}"] = _pct(summary["maj@k"])
    return row


# --------------------------------------------------------------------------------------
# EvalResult
# --------------------------------------------------------------------------------------


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
        summary: see :func:`summarize`.
        name: label used in tables (``"base"``, ``"grpo step 50"``...).
        settings: the sampling settings the numbers were measured with.
    """

    records: pd.DataFrame
    summary: dict[str, Any]
    name: str = "model"
    settings: dict[str, Any] = field(default_factory=dict)

    def table(self) -> pd.DataFrame:
        """One-row table: model | exact [95% CI] | lenient [95% CI] | boxed | n."""
        return pd.DataFrame([_summary_row(self.name, self.summary)]).set_index("model")

    def __repr__(self) -> str:
        s = self.summary
        lines = [
            f"EvalResult({self.name!r}, n={s['n']})",
            format_results_table({self.name: self}),
            f"tokens: {s['prompt_tokens']:,} prompt + {s['sampled_tokens']:,} sampled"
            f" = {s['total_tokens']:,}"
            + (f" in {s['seconds']:.1f} s" if s.get("seconds") is not None else ""),
            f"hit max_tokens: {_pct(s['hit_max_tokens_frac'])}",
        ]
        return "\n".join(lines)

    def _repr_html_(self) -> str:  # Jupyter shows this instead of __repr__
        s = self.summary
        tokens = (
            f"<p>tokens: {s['prompt_tokens']:,} prompt + {s['sampled_tokens']:,}"
            f" sampled = {s['total_tokens']:,}; hit max_tokens:"
            f" {_pct(s['hit_max_tokens_frac'])}</p>"
        )
        return self.table().to_html() + tokens


def k_curves(
    records: pd.DataFrame, ks: Sequence[int] | None = None, max_subsets: int = 200
) -> pd.DataFrame:
    """pass@k and maj@k for every k up to the samples drawn per question.

    Args:
        records: records of :func:`evaluate` with ``num_samples = n > 1`` (they hold
            every sample's boxed ``answers`` and exact grades ``correct``).
        ks: the budgets to report (default ``1..n``).
        max_subsets: maj@k averages the majority vote over size-``k`` subsets of
            each question's samples: all of them, or this many drawn at random
            (seed 0) when there are more.

    Returns:
        One row per k: ``k``, ``pass@k`` (the unbiased estimator of
        :func:`pass_at_k`, averaged over questions) and ``maj@k``.

    Raises:
        ValueError: records of single samples.
    """
    import itertools
    import random

    if "answers" not in records:
        raise ValueError("k_curves needs records of evaluate(..., num_samples > 1)")
    n = min(len(a) for a in records["answers"])
    rng = random.Random(0)
    rows = []
    for k in ks or range(1, n + 1):
        passes, majors = [], []
        for sampled, gold, correct in zip(
            records["answers"], records["gold"], records["correct"], strict=True
        ):
            passes.append(pass_at_k(len(correct), int(sum(correct)), k))
            subsets = list(itertools.combinations(range(len(sampled)), k))
            if len(subsets) > max_subsets:
                subsets = rng.sample(subsets, max_subsets)
            votes = [maj_at_k([sampled[i] for i in subset], gold) for subset in subsets]
            majors.append(sum(votes) / len(votes))
        rows.append(
            {"k": k, "pass@k": float(np.mean(passes)), "maj@k": float(np.mean(majors))}
        )
    return pd.DataFrame(rows)


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


def _completion_text(sequence: Any, tokenizer: Any) -> str:
    if sequence.text is not None:
        return sequence.text
    return tokenizer.decode(list(sequence.tokens), skip_special_tokens=True)


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


async def evaluate_async(
    sampling_client: Any,
    tokenizer: Any,
    questions: Any,
    *,
    temperature: float = 0.0,
    max_tokens: int = 512,
    concurrency: int = 8,
    num_samples: int = 1,
    seed: int | None = None,
    progress: bool = True,
    indices: Sequence[int] | None = None,
    name: str = "model",
    confidence: float = 0.95,
    fewshot: Sequence[Mapping[str, str]] = prompts.FEWSHOT_PREFIX,
) -> EvalResult:
    """Coroutine version of :func:`evaluate`: ``await evaluate_async(...)``.

    Use it where you already are inside ``async`` code; everywhere else (scripts and
    notebook cells) call :func:`evaluate`. Arguments and result are the same.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    rows = _question_rows(questions, indices)
    prompt_tokens = [
        list(prompts.build_prompt(tokenizer, r["question"], fewshot)) for r in rows
    ]
    params = pytrio.SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature,
        stop=prompts.get_stop_sequences(tokenizer),
        seed=seed,
    )
    semaphore = asyncio.Semaphore(concurrency)

    async def sample_one(position: int) -> tuple[int, Any]:
        async with semaphore:  # at most ``concurrency`` requests in flight
            response = await sampling_client.sample_async(
                prompt=pytrio.ModelInput.from_ints(prompt_tokens[position]),
                num_samples=num_samples,
                sampling_params=params,
            )
        return position, response

    start = time.perf_counter()
    responses: list[Any] = [None] * len(rows)
    tasks = [asyncio.ensure_future(sample_one(i)) for i in range(len(rows))]
    try:
        with tqdm(
            total=len(rows), desc=f"eval {name}", unit="q", disable=not progress
        ) as bar:
            # Responses arrive in any order; each goes back to its question's slot.
            for next_done in asyncio.as_completed(tasks):
                position, response = await next_done
                responses[position] = response
                bar.update(1)
    finally:
        # After a failure, stop the requests still waiting and collect them all, so
        # no task outlives this call or leaves an unretrieved exception behind.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    seconds = time.perf_counter() - start

    records = [
        _record(row, len(tokens), response, tokenizer, max_tokens, num_samples)
        for row, tokens, response in zip(rows, prompt_tokens, responses, strict=True)
    ]
    frame = _records_frame(records, num_samples)
    settings = {
        "temperature": temperature,
        "max_tokens": max_tokens,
        "num_samples": num_samples,
        "seed": seed,
        "concurrency": concurrency,
        "fewshot": [dict(turn) for turn in fewshot],
    }
    summary = summarize(frame, confidence=confidence, seconds=seconds)
    return EvalResult(records=frame, summary=summary, name=name, settings=settings)


def run_coroutine(coroutine: Any) -> Any:
    """Run a coroutine to the end from sync code, inside Jupyter or not.

    A plain script has no running event loop, so ``asyncio.run`` does the job. A
    Jupyter cell already runs inside one, where ``asyncio.run`` refuses to start a
    second; there the coroutine runs in a worker thread with its own loop, and this
    thread waits for it.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def evaluate(
    sampling_client: Any,
    tokenizer: Any,
    questions: Any,
    *,
    temperature: float = 0.0,
    max_tokens: int = 512,
    concurrency: int = 8,
    num_samples: int = 1,
    seed: int | None = None,
    progress: bool = True,
    indices: Sequence[int] | None = None,
    name: str = "model",
    confidence: float = 0.95,
    fewshot: Sequence[Mapping[str, str]] = prompts.FEWSHOT_PREFIX,
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
        temperature: 0.0 is greedy decoding, the same answer every time.
        max_tokens: most tokens per completion; a completion that reaches it is
            flagged ``hit_max_tokens`` (often it was cut before its answer).
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
        )
    )


# --------------------------------------------------------------------------------------
# Base vs trained
# --------------------------------------------------------------------------------------


def _records_of(result: EvalResult | pd.DataFrame) -> pd.DataFrame:
    return result.records if isinstance(result, EvalResult) else result


def _name_of(result: EvalResult | pd.DataFrame, default: str) -> str:
    return result.name if isinstance(result, EvalResult) else default


@dataclass
class Comparison:
    """Two models on the same questions: accuracies, difference, flips, p-value.

    Attributes:
        names: the two model labels, ``(base, trained)``.
        metric: ``"exact"`` or ``"lenient"``: the grader the difference is about.
        n: number of (shared) questions.
        base_acc, trained_acc: accuracies under ``metric``.
        difference: ``trained_acc - base_acc`` (a proportion; x100 for points).
        wrong_to_right: ``b``, questions the trained model fixed.
        right_to_wrong: ``c``, questions the trained model broke.
        p_value: two-sided exact McNemar p-value of ``b`` vs ``c``.
        difference_ci: paired bootstrap interval of ``difference``, or ``None``.
        improved: the ``b`` questions (wrong -> right) with both completions.
        regressed: the ``c`` questions (right -> wrong) with both completions.
        base_summary, trained_summary: :func:`summarize` of each side.
    """

    names: tuple[str, str]
    metric: str
    n: int
    base_acc: float
    trained_acc: float
    difference: float
    wrong_to_right: int
    right_to_wrong: int
    p_value: float
    difference_ci: tuple[float, float] | None
    improved: pd.DataFrame
    regressed: pd.DataFrame
    base_summary: dict[str, Any]
    trained_summary: dict[str, Any]
    confidence: float = 0.95

    def table(self) -> pd.DataFrame:
        """One row per model: exact and lenient accuracy with CI, difference, p."""
        rows = [
            _summary_row(self.names[0], self.base_summary),
            _summary_row(self.names[1], self.trained_summary),
        ]
        rows[0][f"difference ({self.metric})"] = ""
        rows[0]["p (McNemar)"] = ""
        rows[1][f"difference ({self.metric})"] = _points(self.difference)
        rows[1]["p (McNemar)"] = _p_text(self.p_value)
        return pd.DataFrame(rows).set_index("model")

    def accuracy_rows(self) -> pd.DataFrame:
        """Both models' accuracies and interval bounds (see :func:`accuracy_rows`)."""
        return accuracy_rows(
            {self.names[0]: self.base_summary, self.names[1]: self.trained_summary}
        )

    def summary_line(self) -> str:
        """One sentence: the difference, its interval, the flips and the p-value."""
        text = f"difference ({self.names[1]} - {self.names[0]}, {self.metric}): "
        text += _points(self.difference)
        if self.difference_ci is not None:
            low, high = self.difference_ci
            level = round(100 * self.confidence)
            text += f" [{level}% CI {100 * low:+.1f}, {100 * high:+.1f}]"
        text += (
            f"; flips: {self.wrong_to_right} wrong->right,"
            f" {self.right_to_wrong} right->wrong;"
            f" McNemar exact p = {_p_text(self.p_value)}"
        )
        return text

    def __repr__(self) -> str:
        return format_results_table(
            {self.names[0]: self.base_summary, self.names[1]: self.trained_summary},
            comparison=self,
        )

    def _repr_html_(self) -> str:  # Jupyter shows this instead of __repr__
        return self.table().to_html() + f"<p>{self.summary_line()}</p>"


def _points(difference: float) -> str:
    return f"{100 * difference:+.1f} pts"


def _p_text(p: float) -> str:
    return f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}"


def _flips(merged: pd.DataFrame, mask: pd.Series, answer: str) -> pd.DataFrame:
    columns = {
        "index": "index",
        "question": "question",
        "gold": "gold",
        f"{answer}_base": "base_answer",
        f"{answer}_trained": "trained_answer",
        "completion_base": "base_completion",
        "completion_trained": "trained_completion",
    }
    return (
        merged.loc[mask, list(columns)].rename(columns=columns).reset_index(drop=True)
    )


def paired_bootstrap_ci(
    base_correct: Sequence[bool] | np.ndarray,
    trained_correct: Sequence[bool] | np.ndarray,
    *,
    n_bootstrap: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(trained) - mean(base)``, paired.

    Resamples *questions* (with replacement), keeping each question's pair of
    outcomes together, so the interval reflects that both models saw the same
    questions: easy questions are easy for both.

    Args:
        base_correct, trained_correct: per-question outcomes, same order and length.
        n_bootstrap: number of resamples.
        confidence: coverage of the interval.
        seed: seed of the resampling (the same seed gives the same interval).

    Returns:
        ``(low, high)`` difference in accuracy (proportions, may be negative).

    Example:

        >>> low, high = paired_bootstrap_ci([0, 1] * 50, [1, 1] * 50, seed=0)
        >>> low < 0.5 < high
        True
    """
    base = np.asarray(base_correct, dtype=float)
    trained = np.asarray(trained_correct, dtype=float)
    if base.shape != trained.shape or base.ndim != 1 or len(base) == 0:
        raise ValueError("need two non-empty 1-d outcome arrays of the same length")
    if n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be >= 1, got {n_bootstrap}")
    rng = np.random.default_rng(seed)
    samples = rng.integers(0, len(base), size=(n_bootstrap, len(base)))
    differences = (trained - base)[samples].mean(axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(differences, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def compare(
    base_records: EvalResult | pd.DataFrame,
    trained_records: EvalResult | pd.DataFrame,
    metric: str = "exact",
    *,
    n_bootstrap: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    names: tuple[str, str] | None = None,
) -> Comparison:
    """Compare two evaluations of the same questions (base vs trained).

    Questions are matched on their ``index``. Because both models answer the same
    questions, the test that fits is McNemar's: it looks only at the questions that
    *flipped* (``b`` wrong -> right, ``c`` right -> wrong), which is far more
    sensitive than comparing two independent intervals.

    Args:
        base_records, trained_records: :class:`EvalResult` objects or their
            ``records`` DataFrames.
        metric: ``"exact"`` or ``"lenient"``.
        n_bootstrap: resamples for the paired bootstrap interval of the difference;
            0 skips it.
        seed: seed of the bootstrap.
        confidence: coverage of the intervals.
        names: labels of the two models (default: the results' names, else
            ``("base", "trained")``).

    Returns:
        A :class:`Comparison`; ``print`` it or call ``.table()``.

    Raises:
        ValueError: an unknown metric, duplicate indices, or question sets that
            differ (the comparison would not be paired).
    """
    if metric not in ("exact", "lenient"):
        raise ValueError(f"metric must be 'exact' or 'lenient', got {metric!r}")
    base = _records_of(base_records)
    trained = _records_of(trained_records)
    for label, frame in (("base", base), ("trained", trained)):
        if frame["index"].duplicated().any():
            raise ValueError(f"{label} records have duplicate question indices")
    base_ids, trained_ids = set(base["index"]), set(trained["index"])
    if base_ids != trained_ids:
        only_base = sorted(base_ids - trained_ids)[:5]
        only_trained = sorted(trained_ids - base_ids)[:5]
        raise ValueError(
            "the two evaluations cover different questions "
            f"(only in base, first 5: {only_base}; "
            f"only in trained, first 5: {only_trained})"
        )
    if names is None:
        names = (_name_of(base_records, "base"), _name_of(trained_records, "trained"))
        if names[0] == names[1]:
            names = ("base", "trained")
    merged = base.merge(
        trained.drop(columns=["question", "gold"], errors="ignore"),
        on="index",
        suffixes=("_base", "_trained"),
    ).sort_values("index", ignore_index=True)
    base_ok = merged[f"{metric}_base"].astype(bool)
    trained_ok = merged[f"{metric}_trained"].astype(bool)
    b = int((~base_ok & trained_ok).sum())
    c = int((base_ok & ~trained_ok).sum())
    n = len(merged)
    difference_ci = None
    if n_bootstrap > 0:
        difference_ci = paired_bootstrap_ci(
            base_ok.to_numpy(),
            trained_ok.to_numpy(),
            n_bootstrap=n_bootstrap,
            confidence=confidence,
            seed=seed,
        )
    answer = "extracted" if metric == "exact" else "answer_lenient"
    return Comparison(
        names=tuple(names),
        metric=metric,
        n=n,
        base_acc=float(base_ok.mean()),
        trained_acc=float(trained_ok.mean()),
        difference=float(trained_ok.mean() - base_ok.mean()),
        wrong_to_right=b,
        right_to_wrong=c,
        p_value=mcnemar_exact_p(b, c),
        difference_ci=difference_ci,
        improved=_flips(merged, ~base_ok & trained_ok, answer),
        regressed=_flips(merged, base_ok & ~trained_ok, answer),
        base_summary=summarize(base, confidence=confidence),
        trained_summary=summarize(trained, confidence=confidence),
        confidence=confidence,
    )


def format_results_table(
    results: Mapping[str, EvalResult | Mapping[str, Any]] | Sequence[EvalResult],
    comparison: Comparison | None = None,
) -> str:
    """The plain-text results table the CLI prints.

    Args:
        results: ``{name: EvalResult or summary dict}``, or a list of EvalResults
            (labelled by their ``name``).
        comparison: if given, a last line with the difference and McNemar p-value.

    Returns:
        Lines like::

            model   | exact [95% CI]     | lenient [95% CI]   | boxed  | n
            base    | 79.0% [70.0, 85.8] | 81.0% [72.2, 87.5] | 96.0%  | 100
            trained | 95.0% [88.8, 97.8] | 95.0% [88.8, 97.8] | 100.0% | 100
            difference (trained - base, exact): +16.0 pts [...]; ... p = 0.0004
    """
    if isinstance(results, Mapping):
        items = list(results.items())
    else:
        items = [(result.name, result) for result in results]
    rows = []
    for name, result in items:
        summary = result.summary if isinstance(result, EvalResult) else result
        rows.append(
            {key: str(value) for key, value in _summary_row(name, summary).items()}
        )
    header = list(rows[0]) if rows else ["model"]
    for row in rows[1:]:
        header += [key for key in row if key not in header]
    widths = {
        key: max(len(key), *(len(row.get(key, "")) for row in rows)) for key in header
    }
    lines = [" | ".join(key.ljust(widths[key]) for key in header).rstrip()]
    for row in rows:
        cells = [row.get(key, "").ljust(widths[key]) for key in header]
        lines.append(" | ".join(cells).rstrip())
    if comparison is not None:
        lines.append(comparison.summary_line())
    return "\n".join(lines)


def accuracy_rows(
    results: Mapping[str, EvalResult | Mapping[str, Any]] | Sequence[EvalResult],
) -> pd.DataFrame:
    """Numbers behind the results table, one row per model, ready to plot.

    Args:
        results: ``{name: EvalResult or summary dict}``, or a list of EvalResults.

    Returns:
        Columns ``model, n, exact, exact_low, exact_high, lenient, lenient_low,
        lenient_high, boxed`` (proportions), the input of
        ``plotting.plot_accuracy_comparison``.
    """
    if isinstance(results, Mapping):
        items = list(results.items())
    else:
        items = [(result.name, result) for result in results]
    rows = []
    for name, result in items:
        summary = result.summary if isinstance(result, EvalResult) else result
        rows.append(
            {
                "model": name,
                "n": summary["n"],
                "exact": summary["exact_acc"],
                "exact_low": summary["exact_ci"][0],
                "exact_high": summary["exact_ci"][1],
                "lenient": summary["lenient_acc"],
                "lenient_low": summary["lenient_ci"][0],
                "lenient_high": summary["lenient_ci"][1],
                "boxed": summary["boxed_frac"],
            }
        )
    return pd.DataFrame(rows)
