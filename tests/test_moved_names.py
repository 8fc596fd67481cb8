"""Names that moved to another module keep working from their old one for a release.

Issue 24 split the package by idea (README, "How the code is organised"). Every
name that moved is re-exported by its old module for one release, so code written
against the old layout still runs; the notebooks, the CLI and the benches import
the new homes. Each row: old module, name there, new module, name there.
"""

from __future__ import annotations

import importlib

import pytest

#: Old module: {new module: the names that moved there}. A name that changed on
#: the way is in RENAMED.
HOMES = {
    "training": {
        "data": "load_split",
        "step_math": "OBJECTIVE_METRICS PromptGroup build_step_datums derive_seed "
        "format_step_line kl_terms ratio_metrics reference_inputs sample_records "
        "step_metrics trained_samples",
        "run_files": "DRIFT_DROP DRIFT_STEPS RESUME_MUTABLE_FIELDS SAME_DATA_KEYS "
        "TOKEN_COUNTERS RunDirectory box_drift find_weights load_metrics "
        "load_samples read_jsonl",
        "datum": "build_grpo_datum RolloutSample",  # only imported there, once
    },
    "evaluation": {
        "stats": "k_curves maj_at_k majority_answer mcnemar_exact_p "
        "paired_bootstrap_ci pass_at_k wilson_interval",
        "report": "Comparison accuracy_rows compare format_results_table summarize",
    },
    "data": {
        "arithmetic": "ARITHMETIC_ROWS DIFFICULTIES arithmetic_split "
        "make_arithmetic_problems make_arithmetic_splits",
    },
    "export": {
        "trl_mapping": "ADAM FIELD_RULES INSTALL_HINT KNOWN_DIFFERENCES LOSS_TYPES "
        "TRL_VERSION Difference ExportRefused FieldRule field_names loss_scale "
        "refusals reward_names trl_missing trl_settings trl_version",
    },
    "local.host": {
        "local.adapters": "LORA_ALPHA AdapterSnapshot LoraSpec linear_groups",
    },
    "local.sampling": {
        "local.prefill": "MIN_SHARED_PREFIX pad_rows shared_prefix_len",
    },
    "local.engine": {
        "local.service": "LocalServiceClient default_run_dir",
        "local.training_client": "LocalTrainingClient",
        "local.sampling_client": "LocalSamplingClient",
    },
    # the package's lazy names, from the modules that hold them
    "local": {
        "local.service": "LocalServiceClient",
        "local.training_client": "LocalTrainingClient",
        "local.sampling_client": "LocalSamplingClient",
    },
}
RENAMED = [("training", "SPLITS", "data", "RUN_SPLITS")]
MOVED = [
    (old, name, new, name)
    for old, homes in HOMES.items()
    for new, names in homes.items()
    for name in names.split()
] + RENAMED


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
