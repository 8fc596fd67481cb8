"""Names that moved to another module keep working from their old one for a release.

Issue 24 split the package by idea (README, "How the code is organised"). Every
name that moved is re-exported by its old module for one release, so code written
against the old layout still runs; the notebooks, the CLI and the benches import
the new homes. Each row: old module, name there, new module, name there.
"""

from __future__ import annotations

import importlib

import pytest

MOVED = [
    # the run's rows: grpo_helpers.data
    ("training", "load_split", "data", "load_split"),
    ("training", "SPLITS", "data", "RUN_SPLITS"),
    # one step's arithmetic: grpo_helpers.step_math
    *[
        ("training", name, "step_math", name)
        for name in (
            "OBJECTIVE_METRICS",
            "PromptGroup",
            "build_step_datums",
            "derive_seed",
            "format_step_line",
            "kl_terms",
            "ratio_metrics",
            "reference_inputs",
            "sample_records",
            "step_metrics",
            "trained_samples",
        )
    ],
    # the run directory: grpo_helpers.run_files
    *[
        ("training", name, "run_files", name)
        for name in (
            "DRIFT_DROP",
            "DRIFT_STEPS",
            "RESUME_MUTABLE_FIELDS",
            "SAME_DATA_KEYS",
            "TOKEN_COUNTERS",
            "RunDirectory",
            "box_drift",
            "find_weights",
            "load_metrics",
            "load_samples",
            "read_jsonl",
        )
    ],
    ("training", "build_grpo_datum", "datum", "build_grpo_datum"),
    ("training", "RolloutSample", "datum", "RolloutSample"),
    # the statistics: grpo_helpers.stats
    *[
        ("evaluation", name, "stats", name)
        for name in (
            "k_curves",
            "maj_at_k",
            "majority_answer",
            "mcnemar_exact_p",
            "paired_bootstrap_ci",
            "pass_at_k",
            "wilson_interval",
        )
    ],
    # what the records say: grpo_helpers.report
    *[
        ("evaluation", name, "report", name)
        for name in (
            "Comparison",
            "accuracy_rows",
            "compare",
            "format_results_table",
            "summarize",
        )
    ],
    # the arithmetic track: grpo_helpers.arithmetic
    *[
        ("data", name, "arithmetic", name)
        for name in (
            "ARITHMETIC_ROWS",
            "DIFFICULTIES",
            "arithmetic_split",
            "make_arithmetic_problems",
            "make_arithmetic_splits",
        )
    ],
    # the mapping onto TRL: grpo_helpers.trl_mapping
    *[
        ("export", name, "trl_mapping", name)
        for name in (
            "ADAM",
            "FIELD_RULES",
            "INSTALL_HINT",
            "KNOWN_DIFFERENCES",
            "LOSS_TYPES",
            "TRL_VERSION",
            "Difference",
            "ExportRefused",
            "FieldRule",
            "field_names",
            "loss_scale",
            "refusals",
            "reward_names",
            "trl_missing",
            "trl_settings",
            "trl_version",
        )
    ],
    # LoRA adapters as data: grpo_helpers.local.adapters
    *[
        ("local.host", name, "local.adapters", name)
        for name in ("LORA_ALPHA", "AdapterSnapshot", "LoraSpec", "linear_groups")
    ],
    # one module per client of the local engine
    ("local.engine", "LocalServiceClient", "local.service", "LocalServiceClient"),
    ("local.engine", "default_run_dir", "local.service", "default_run_dir"),
    (
        "local.engine",
        "LocalTrainingClient",
        "local.training_client",
        "LocalTrainingClient",
    ),
    (
        "local.engine",
        "LocalSamplingClient",
        "local.sampling_client",
        "LocalSamplingClient",
    ),
    *[
        ("local", name, f"local.{module}", name)
        for name, module in (
            ("LocalServiceClient", "service"),
            ("LocalTrainingClient", "training_client"),
            ("LocalSamplingClient", "sampling_client"),
        )
    ],
]


@pytest.mark.parametrize(
    ("old", "name", "new", "new_name"),
    MOVED,
    ids=[f"{old}.{name}" for old, name, _, _ in MOVED],
)
def test_the_old_import_path_still_gives_the_same_object(old, name, new, new_name):
    old_module = importlib.import_module(f"grpo_helpers.{old}")
    new_module = importlib.import_module(f"grpo_helpers.{new}")
    assert getattr(old_module, name) is getattr(new_module, new_name)
    # ``from grpo_helpers.<old> import <name>`` works too
    namespace: dict[str, object] = {}
    exec(f"from grpo_helpers.{old} import {name}", namespace)
    assert namespace[name] is getattr(new_module, new_name)


def test_the_new_homes_define_what_they_hold():
    """A moved name is defined in its new module, not re-exported from the old."""
    for old, _, new, new_name in MOVED:
        obj = getattr(importlib.import_module(f"grpo_helpers.{new}"), new_name)
        home = getattr(obj, "__module__", None)
        if home is not None and home.startswith("grpo_helpers"):
            assert home != f"grpo_helpers.{old}", (new, new_name)
