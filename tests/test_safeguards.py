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

from grpo_helpers import cli, run_files, step_math, training
from grpo_helpers.config import GRPOConfig, from_arguments
from grpo_helpers.datum import RolloutSample
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


def test_build_step_datums_masks_truncated_completions_and_renormalises():
    prompt = [5, 6, 7]
    samples = [
        RolloutSample([8, 9], [-0.1, -0.2], "a", 1.0, 0.5, truncated=False),
        RolloutSample([8, 9, 10, 11], [-0.3] * 4, "b", 0.0, -0.5, truncated=True),
        RolloutSample([12, 13, 14], [-0.4] * 3, "c", 0.5, 0.0, truncated=False),
    ]
    group = step_math.PromptGroup(0, prompt, "1", samples)
    assert len(step_math.build_step_datums([group])) == 3
    masked = step_math.build_step_datums([group], mask_truncated=True)
    assert [d.model_input.to_ints() for d in masked] == [
        prompt + [8],
        prompt + [12, 13],
    ]
    # token_mean divides by the tokens that are trained: 2 + 3, not 2 + 4 + 3
    token_mean = step_math.build_step_datums([group], "token_mean", mask_truncated=True)
    first = token_mean[0].loss_fn_inputs["advantages"].tolist()
    assert first[-1] == pytest.approx(0.5 / 5)


def test_samples_from_response_marks_the_completions_cut_off():
    from types import SimpleNamespace

    from grpo_helpers import rollout

    response = SimpleNamespace(
        sequences=[
            SimpleNamespace(tokens=[1], logprobs=[-0.1], text="7", stop_reason="stop"),
            SimpleNamespace(
                tokens=[1, 2], logprobs=[-0.1, -0.2], text="7", stop_reason="length"
            ),
        ]
    )
    samples = rollout.samples_from_response(response, None, "7")
    assert [s.truncated for s in samples] == [False, True]


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


def test_each_completions_kl_change_reaches_its_own_datum_when_one_is_masked():
    """Issue 48's mutation: the KL changes come one per completion of the groups
    that teach, truncated ones included; with ``mask_truncated`` the truncated
    completion sends no Datum but must still use up its change, or every later
    completion gets its neighbour's (the issue's [-0.4, 0.7] for [-0.3, 0.8])."""
    from grpo_helpers.datum import RolloutSample
    from grpo_helpers.step_math import PromptGroup, build_step_datums

    group = PromptGroup(
        0,
        [1, 2, 3],
        "4",
        [
            RolloutSample([5, 6], [-0.1, -0.2], "cut", 0.0, 0.0, truncated=True),
            RolloutSample([7, 8], [-0.3, -0.4], "wrong", 0.0, -0.5),
            RolloutSample([9, 10], [-0.5, -0.6], "right", 1.0, 0.5),
        ],
    )
    changes = [[0.1, 0.1], [0.2, 0.2], [0.3, 0.3]]
    datums = build_step_datums([group], kl_changes=changes, mask_truncated=True)
    sent = [v for d in datums for v in d.loss_fn_inputs["advantages"].tolist()[2:]]
    assert len(datums) == 2
    assert sent == pytest.approx([-0.3, -0.3, 0.8, 0.8])
