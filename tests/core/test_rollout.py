"""grpo_helpers.rollout: a sampler's response read into the series' samples.

The groups a rollout draws are checked through the loops that draw them
(``tests/core/test_training.py``) and notebook 05's hand-made group
(``tests/notebooks/test_05_09.py``).
"""

from __future__ import annotations


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
