"""grpo_helpers.presets: each named run is a valid run of ``GRPOConfig``, and the
GPU preset samples on the plain path and maps onto TRL."""

from __future__ import annotations

import pytest
import torch

from grpo_helpers import presets
from grpo_helpers.config import GRPOConfig
from grpo_helpers.local.decoder import choose_sampler


@pytest.mark.parametrize(
    "preset",
    [
        presets.NOTEBOOK,
        presets.DEMO,
        presets.PYTRIO,
        presets.GPU,
        presets.notebook_run(fast=True),
    ],
)
def test_every_preset_is_a_valid_run(preset):
    run = {k: v for k, v in preset.items() if k not in presets.EVAL_KEYS}
    GRPOConfig(backend="local", **run)


def test_the_gpu_preset_samples_on_the_plain_path_and_exports_to_trl():
    """presets.GPU (not yet measured on a GPU): a valid run, a model type the
    plain (unmerged) sampler runs in bfloat16, and the same run on TRL."""
    from grpo_helpers.trl import mapping

    settings = {k: v for k, v in presets.GPU.items() if not k.startswith("eval_")}
    config = GRPOConfig(backend="local", **settings)
    assert config.model_name == "Qwen/Qwen2.5-0.5B-Instruct"
    assert choose_sampler("cuda", torch.bfloat16, "qwen2") == "plain"
    assert mapping.refusals(config) == []
