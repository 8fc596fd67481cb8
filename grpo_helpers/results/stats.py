"""Statistics of an evaluation: intervals, paired tests, pass@k and maj@k.

Pure functions over counts and per-question outcomes, with no sampler in sight:

* :func:`wilson_interval`: a 95% interval on one accuracy (100 questions give
  intervals about +/- 8 points wide);
* :func:`mcnemar_exact_p`: did the questions that flipped between two models flip
  one way more than chance would (both models answer the *same* questions);
* :func:`paired_bootstrap_ci`: an interval on the difference of two accuracies,
  resampling questions with both outcomes together;
* :func:`pass_at_k`, :func:`maj_at_k`, :func:`majority_answer` and
  :func:`k_curves`: with ``k`` samples per question, is one of them right, and is
  their majority vote right (DeepSeekMath: RL raises maj@k, not pass@k);
* :func:`t_interval`, :func:`sign_flip_p` and :func:`detectable_difference`: one
  number per *seed* (a training run), for comparing two trained configurations,
  where the run-to-run noise of training is the noise that counts.

:mod:`grpo_helpers.results.report` applies them to an evaluation's records; notebook 07
teaches them as their own idea.

Introduced in: 07_evaluating_a_trained_model.ipynb
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from grpo_helpers import data, rewards

__all__ = [
    "detectable_difference",
    "k_curves",
    "maj_at_k",
    "majority_answer",
    "mcnemar_exact_p",
    "paired_bootstrap_ci",
    "pass_at_k",
    "sign_flip_p",
    "prediction_interval",
    "t_interval",
    "wilson_interval",
]


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
    return ("text", data.normalize_answer(answer))


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


def k_curves(
    records: pd.DataFrame, ks: Sequence[int] | None = None, max_subsets: int = 200
) -> pd.DataFrame:
    """pass@k and maj@k for every k up to the samples drawn per question.

    Args:
        records: records of ``evaluation.evaluate`` with ``num_samples = n > 1``
            (they hold every sample's boxed ``answers`` and exact grades
            ``correct``).
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


# ------------------------------------------------------------- across seeds
# Between two trained configurations the unit is the seed: each seed is one
# training run, and the run-to-run noise of training is what a knob's effect must
# stand out from. These three functions read one number per seed.


def t_interval(
    values: Sequence[float], confidence: float = 0.95
) -> tuple[float, float, float]:
    """Mean of per-seed values with Student's t interval over the seeds.

    ``mean +/- t_{n-1} * sd / sqrt(n)``, with ``sd`` the sample standard deviation
    (divided by ``n - 1``): the interval for the mean of the population the seeds
    were drawn from, assuming the values are roughly normal. With few seeds ``t``
    is large (4.30 for 3 seeds, 2.78 for 5), so a few seeds give a wide interval.

    Args:
        values: one number per seed, at least two.
        confidence: coverage of the interval.

    Returns:
        ``(mean, low, high)``.

    Raises:
        ValueError: fewer than two values, or a value that is not finite.

    Example:
        >>> [round(x, 3) for x in t_interval([0.30, 0.38, 0.44])]
        [0.373, 0.199, 0.548]
    """
    from scipy import stats as scipy_stats

    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or len(x) < 2 or not np.isfinite(x).all():
        raise ValueError(
            f"t_interval needs two or more finite values (one per seed), got {values!r}"
        )
    mean = float(x.mean())
    half = float(
        scipy_stats.t.ppf(1 - (1 - confidence) / 2, len(x) - 1)
        * x.std(ddof=1)
        / math.sqrt(len(x))
    )
    return mean, mean - half, mean + half


def prediction_interval(
    values: Sequence[float], confidence: float = 0.95
) -> tuple[float, float, float]:
    """Mean of per-seed values with Student's t interval for *one new seed*.

    ``mean +/- t_{n-1} * sd * sqrt(1 + 1/n)``: where one more run's value should
    fall, which is wider than :func:`t_interval` (where the mean of all runs
    lies) by ``sqrt(n + 1)``. This is what a learner's own run is, one new seed.

    Raises:
        ValueError: fewer than two values, or a value that is not finite.

    Example:
        >>> [round(x, 3) for x in prediction_interval([0.30, 0.38, 0.44])]
        [0.373, 0.024, 0.722]
    """
    mean, low, _ = t_interval(values, confidence)
    n = len(values)
    half = (mean - low) * math.sqrt(n) * math.sqrt(1 + 1 / n)
    return mean, mean - half, mean + half


def sign_flip_p(values: Sequence[float]) -> float:
    """Exact two-sided p of a paired sign-flip (permutation) test on per-seed
    differences.

    Under "the knob changes nothing", each seed's difference is as likely to have
    either sign, so all ``2**n`` sign patterns of the observed magnitudes are
    equally likely; p is the share of them whose mean is at least as far from zero
    as the observed mean. It assumes no normality, but with ``n`` seeds it cannot
    go below ``2 / 2**n``: 0.25 for 3 seeds, 0.0625 for 5.

    Example:
        >>> sign_flip_p([0.1, 0.2, 0.3])  # every seed up: the most extreme pattern
        0.25
        >>> sign_flip_p([0.1, -0.1])
        1.0
    """
    import itertools

    x = np.abs(np.asarray(values, dtype=float))
    if x.ndim != 1 or len(x) < 1 or not np.isfinite(x).all():
        raise ValueError(f"sign_flip_p needs finite per-seed values, got {values!r}")
    observed = abs(float(np.mean(values)))
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(x))))
    means = np.abs((signs * x).mean(axis=1))
    return float(np.mean(means >= observed - 1e-12))


def detectable_difference(
    sd: float, n: int, *, alpha: float = 0.05, power: float = 0.8
) -> float:
    """The smallest true mean difference that a two-sided paired t-test over ``n``
    seeds detects at level ``alpha`` with probability ``power``, when the per-seed
    differences have standard deviation ``sd``.

    Solved exactly with the noncentral t distribution: at a true difference
    ``delta`` the t statistic has ``n - 1`` degrees of freedom and noncentrality
    ``s = delta * sqrt(n) / sd``, and the power is ``P(|T| > t_crit)``.

    Example:
        >>> round(detectable_difference(0.10, 5), 3)
        0.168
    """
    from scipy import optimize
    from scipy import stats as scipy_stats

    if n < 2 or not sd > 0 or not math.isfinite(sd):
        raise ValueError(f"need n >= 2 seeds and a positive sd, got n={n}, sd={sd}")
    df = n - 1
    critical = scipy_stats.t.ppf(1 - alpha / 2, df)

    def shortfall(shift: float) -> float:
        upper = scipy_stats.nct.sf(critical, df, shift)
        lower = scipy_stats.nct.cdf(-critical, df, shift)  # NaN where it is ~0
        return float(upper + np.nan_to_num(lower)) - power

    shift = optimize.brentq(shortfall, 1e-6, 60.0, xtol=1e-10)
    return float(shift * sd / math.sqrt(n))
