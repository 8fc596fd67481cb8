"""The held-out comparison that the evaluation notebooks start from.

Notebook 07 builds it step by step: the trained weights (a checkpoint you name,
notebook 05's run, or a run of its own with the same code), the held-out questions
of a split no pilot scored, and both models' greedy answers to them. Notebook 08
starts from the same place in one call, :func:`compare`.

Example (with a ``service`` from ``engines.connect()`` and notebook 05's settings
as ``own_config``)::

    pair = heldout.compare(service, own_config, source_run="nb05-sync")
    pair.base.summary["exact_acc"], pair.trained.summary["exact_acc"]

Introduced in: 07_evaluating_a_trained_model.ipynb
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_helpers import data, run_files, training
from grpo_helpers.config import GRPOConfig
from grpo_helpers.results import evaluation
from grpo_helpers.settings import SETTINGS

__all__ = ["HeldOut", "compare", "held_out_questions", "trained_weights"]


def trained_weights(
    service: Any,
    own_config: GRPOConfig,
    source_run: str | Path | None = None,
    checkpoint_path: str | None = None,
) -> tuple[str, GRPOConfig, str]:
    """The weights to evaluate, their run's configuration, and where they came from.

    In this order: ``checkpoint_path`` when given (its split is ``own_config``'s
    seed and difficulty); the finished run ``source_run`` (a directory, or a name
    under the runs root) when it used the same engine, model and data
    (:func:`run_files.find_weights`); otherwise a run of ``own_config`` trained
    here with :func:`training.train_sync`, exactly as notebook 05 trains.
    """
    if checkpoint_path:
        return (
            checkpoint_path,
            own_config,
            "checkpoint_path (the split assumes this notebook's seed and difficulty)",
        )
    if source_run is not None:
        run_dir = Path(source_run)
        if not run_dir.is_absolute() and not run_dir.exists():
            run_dir = SETTINGS.runs_root / run_dir
        found = run_files.find_weights(run_dir, own_config)
        if found:
            return found[0], found[1], f"the finished run in {run_dir}"
        print(f"nothing to reuse in {run_dir}: training {own_config.steps} steps")
    result = training.train_sync(own_config, service, overwrite=True)
    assert result.weights_path is not None  # a finished loop saved its weights
    return result.weights_path, own_config, f"a run of its own in {own_config.run_path}"


def held_out_questions(config: GRPOConfig, split: str, n: int) -> Any:
    """The first ``n`` questions of ``split`` for this run's data (its seed and
    difficulty choose the arithmetic splits).

    Raises:
        ValueError: a held-out question is also a training question.
    """
    rows = data.load_split(config, split)
    questions = rows.select(range(min(n, len(rows))))
    train = set(data.load_split(config, "train")["question"])
    overlap = sum(q in train for q in questions["question"])
    if overlap:
        raise ValueError(
            f"{overlap} of the {len(questions)} {split} questions are training "
            "questions: held-out questions must not be trained on"
        )
    return questions


@dataclass
class HeldOut:
    """Both models' greedy answers to the same held-out questions.

    Attributes:
        config: the trained run's configuration.
        weights_path: the trained weights.
        origin: where they came from (:func:`trained_weights`).
        questions: the held-out rows.
        base, trained: ``evaluation.EvalResult`` of the two models.
        base_sampler, trained_sampler, tokenizer: to ask the models more.
        settings: the decoding settings both were evaluated with.
    """

    config: GRPOConfig
    weights_path: str
    origin: str
    questions: Any
    base: evaluation.EvalResult
    trained: evaluation.EvalResult
    base_sampler: Any
    trained_sampler: Any
    tokenizer: Any
    settings: dict[str, Any] = field(default_factory=dict)


def compare(
    service: Any,
    own_config: GRPOConfig,
    *,
    source_run: str | Path | None = None,
    checkpoint_path: str | None = None,
    split: str = "test",
    questions: int = 100,
    max_tokens: int = 64,
    concurrency: int = 64,
    reuse_base: evaluation.RecordedAnswers | None = None,
) -> HeldOut:
    """Notebook 07's sections 1-3 in one call: the trained weights, the held-out
    questions, and both models' greedy answers (the base model's read from
    ``reuse_base`` when it answers the same prompts with the same settings).
    """
    weights_path, config, origin = trained_weights(
        service, own_config, source_run, checkpoint_path
    )
    rows = held_out_questions(config, split, questions)
    base_sampler = service.create_sampling_client(base_model=config.model_name)
    trained_sampler = service.create_sampling_client(
        base_model=config.model_name, model_path=weights_path
    )
    tokenizer = base_sampler.get_tokenizer()
    settings: dict[str, Any] = {
        "temperature": 0.0,
        "max_tokens": max_tokens,
        "concurrency": concurrency,
    }
    base = evaluation.evaluate(
        base_sampler, tokenizer, rows, name="base", reuse=reuse_base, **settings
    )
    trained = evaluation.evaluate(
        trained_sampler, tokenizer, rows, name="GRPO", **settings
    )
    return HeldOut(
        config=config,
        weights_path=weights_path,
        origin=origin,
        questions=rows,
        base=base,
        trained=trained,
        base_sampler=base_sampler,
        trained_sampler=trained_sampler,
        tokenizer=tokenizer,
        settings=settings,
    )
