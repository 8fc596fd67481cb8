"""The two safeguards of ``GRPOConfig``: truncation masking and gradient clipping.

``mask_truncated`` (DAPO's overlong filtering, TRL's ``mask_truncated_completions``)
leaves the completions that ``max_tokens`` cut off out of the loss;
``grad_clip_norm`` clips the gradient's global norm before Adam. Each is checked on
what the engine *received*: the spy of ``tests/helpers/spies.py`` records the Datums of
every ``forward_backward`` and the ``AdamParams`` of every ``optim_step`` that the
loop sent, so a loop that computes the right thing but sends something else fails.
Also: validation, the command line, and the TRL mapping (without TRL installed).
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from spies import EngineSpy
from tiny import tiny

from grpo_helpers import cli, run_files, training
from grpo_helpers.config import GRPOConfig, from_arguments
from grpo_helpers.engines import connect
from grpo_helpers.trl import mapping

TINY = tiny(steps=1)


# ----------------------------------------------------------------------------------
# What the loop sent, from a sampler whose completions partly stop by themselves
# ----------------------------------------------------------------------------------


class _StopEvenSequences:
    """A sampler whose responses say that every other completion stopped by itself
    (``stop_reason="stop"``): tiny-random never writes the end of its turn within a
    few tokens, so without this every completion would be truncated."""

    def __init__(self, inner):
        self._inner = inner

    @staticmethod
    def _relabel(response):
        sequences = [
            seq.model_copy(update={"stop_reason": "stop" if i % 2 == 0 else "length"})
            for i, seq in enumerate(response.sequences)
        ]
        return response.model_copy(update={"sequences": sequences})

    def sample(self, *args, **kwargs):
        return self._inner.sample(*args, **kwargs).map(self._relabel)

    async def sample_async(self, *args, **kwargs):
        return self._relabel(await self._inner.sample_async(*args, **kwargs))

    def __getattr__(self, name):
        return getattr(self._inner, name)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    return connect("local", run_dir=tmp_path_factory.mktemp("engine"))


def _sent(service, config, mode="sync"):
    """What the engine received from one run of the loop (``tests/helpers/spies.py``),
    its sampler relabelled by :class:`_StopEvenSequences`."""
    spy = EngineSpy(service, wrap_sampler=_StopEvenSequences)
    if mode == "sync":
        training.train_sync(config, spy, progress=False)
    else:
        asyncio.run(training.train_async(config, spy, progress=False))
    return spy.calls


def _step_zero_datums(calls):
    sent = [c for c in calls if c.name == "forward_backward"]
    assert len(sent) == 1, "one step, one update"
    return sent[0].datums


# ----------------------------------------------------------------------------------
# mask_truncated
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_mask_truncated_sends_only_the_completions_that_ended(tmp_path, service, mode):
    """The same step with and without masking: the masked run's forward_backward
    gets exactly the Datums of the completions that stopped by themselves (the even
    ones), and the unmasked run gets every completion of the same groups."""
    config = GRPOConfig(**TINY, run_dir=str(tmp_path / "off"))
    every = _step_zero_datums(_sent(service, config, mode))
    samples = run_files.load_samples(tmp_path / "off")
    assert len(every) % TINY["group_size"] == 0 and every  # whole groups
    masked_config = dataclasses.replace(
        config, mask_truncated=True, run_dir=str(tmp_path / "on")
    )
    masked = _step_zero_datums(_sent(service, masked_config, mode))
    # the same samples (same seed, same untrained weights), the odd ones left out
    assert run_files.load_samples(tmp_path / "on").equals(samples)
    kept = [d for i, d in enumerate(every) if i % TINY["group_size"] % 2 == 0]
    assert len(masked) == len(every) // 2
    for got, want in zip(masked, kept, strict=True):
        assert got.model_input.to_ints() == want.model_input.to_ints()
        for key in ("target_tokens", "logprobs", "advantages"):
            assert got.loss_fn_inputs[key].tolist() == want.loss_fn_inputs[key].tolist()


def test_mask_truncated_with_every_completion_cut_off_makes_no_update(
    tmp_path, service
):
    """Without the spy's relabelling tiny-random's completions are all cut off:
    masked, the loop sends nothing and makes no update."""
    config = GRPOConfig(**TINY, mask_truncated=True, run_dir=str(tmp_path / "run"))
    metrics = training.train_sync(config, service, progress=False).metrics
    assert (metrics["hit_max_frac"] == 1.0).all()
    assert not metrics["updated"].any() and (metrics["datums"] == 0).all()


# ----------------------------------------------------------------------------------
# grad_clip_norm
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_grad_clip_norm_reaches_every_optim_step(tmp_path, service, mode):
    for clip, name in ((0.0, "off"), (0.25, "on")):
        config = GRPOConfig(
            **TINY, grad_clip_norm=clip, run_dir=str(tmp_path / f"{mode}-{name}")
        )
        steps = [c for c in _sent(service, config, mode) if c.name == "optim_step"]
        assert steps, "the step made no update"
        for call in steps:
            adam = call.adam_params
            assert adam.grad_clip_norm == clip
            assert adam.learning_rate == config.learning_rate
            assert (adam.beta1, adam.beta2) == (config.beta1, config.beta2)


# ----------------------------------------------------------------------------------
# Validation, command line, TRL mapping
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("grad_clip_norm", -1.0),
        ("grad_clip_norm", float("inf")),
        ("grad_clip_norm", float("nan")),
        ("grad_clip_norm", "1"),
        ("mask_truncated", 1),
        ("mask_truncated", "yes"),
    ],
)
def test_bad_values_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        GRPOConfig(**{field: value}, backend="local")


def test_the_command_line_sets_both():
    parser = cli.build_parser()
    args = parser.parse_args(["train", "--mask-truncated", "--grad-clip-norm", "1.5"])
    config = from_arguments(args)
    assert config.mask_truncated is True and config.grad_clip_norm == 1.5
    default = from_arguments(parser.parse_args(["train"]))
    assert default.mask_truncated is False and default.grad_clip_norm == 0.0


def test_trl_mapping():
    base = GRPOConfig(
        batch_size=2, group_size=8, max_tokens=48, temperature=0.6, backend="local"
    )
    settings = mapping.trl_settings(base, "cpu")
    assert settings["mask_truncated_completions"] is False
    assert settings["max_grad_norm"] == 0.0
    on = dataclasses.replace(base, mask_truncated=True, grad_clip_norm=2.0)
    settings = mapping.trl_settings(on, "cpu")
    assert settings["mask_truncated_completions"] is True
    # TRL's loss is the series' divided by c: it clips its gradient at 2 / c
    assert settings["max_grad_norm"] == pytest.approx(2.0 / mapping.loss_scale(on))
    mean = dataclasses.replace(on, normalization="sequence_mean")
    assert mapping.trl_settings(mean, "cpu")["max_grad_norm"] == pytest.approx(2 / 16)
    assert mapping.FIELD_RULES["mask_truncated"].trl == ("mask_truncated_completions",)
    assert mapping.FIELD_RULES["grad_clip_norm"].trl == ("max_grad_norm",)
