"""Float32 tensors that should be equal up to the order of their sums.

Two paths to one result (one call or two, micro-batches or one batch, a shared
prefix or none) sum the same float32 numbers in another order, and another CPU's
kernels (AVX-512 against AVX2) pick another order again. Entry by entry the gap
grows with the entries: the tiny random model's gradients reach about 10, so a
fixed ``atol`` of 1e-5 sits at float32's own rounding. The gap is measured against
the tensor's norm instead; a path that misses a Datum or counts one twice is off
by a third or more.
"""

from __future__ import annotations

import torch


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """``|a - b| / |a|`` in the 2-norm of all the entries."""
    scale = max(float(a.norm()), 1e-30)
    return float((a - b).norm()) / scale
