"""The local engine's tests share one service per test module, on tiny-random.

``svc`` is a local ``ServiceClient`` with its own run folder; ``tok`` its
tokenizer; ``base`` a sampler of the base model; ``tc`` a rank-4 training client
(the validation tests call it, and nothing they send reaches its worker).
"""

from __future__ import annotations

import pytest
from local_engine import MODEL

from grpo_helpers.engines import connect


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    return connect("local", run_dir=tmp_path_factory.mktemp("engine-run"))


@pytest.fixture(scope="module")
def tok(svc):
    return svc.create_sampling_client(MODEL).get_tokenizer()


@pytest.fixture(scope="module")
def base(svc):
    return svc.create_sampling_client(MODEL)


@pytest.fixture(scope="module")
def tc(svc):
    return svc.create_lora_training_client(MODEL, rank=4, seed=0)
