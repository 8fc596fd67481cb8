"""Moved: the local engine's three clients have a module each (issue 24).

* ``LocalServiceClient``, ``default_run_dir``: :mod:`grpo_helpers.local.service`;
* ``LocalTrainingClient``: :mod:`grpo_helpers.local.training_client` (its forward
  and backward passes: :mod:`grpo_helpers.local.forward`);
* ``LocalSamplingClient``: :mod:`grpo_helpers.local.sampling_client`.

This module re-exports them for one release; import them from their new homes (or
from :mod:`grpo_helpers.local`, or connect with ``grpo_helpers.engines.connect``).
"""

from grpo_helpers.local.sampling_client import LocalSamplingClient
from grpo_helpers.local.service import LocalServiceClient, default_run_dir
from grpo_helpers.local.training_client import LocalTrainingClient

__all__ = [
    "LocalSamplingClient",
    "LocalServiceClient",
    "LocalTrainingClient",
    "default_run_dir",
]
