"""PyTorch references: one per op, in one place.

Each function here is three things at once: the oracle the tests compare kernels against, the
``torch`` fallback the router runs when a kernel cannot, and the "naive" cell a chapter shows
before writing the kernel. ``upcast=True`` computes in float64 (the tests' oracle); the default
follows the kernel's own arithmetic (float32 math for 16-bit inputs, result in the input dtype)
so that the fallback returns what the kernel would.
"""

from __future__ import annotations

import torch


def _compute_dtype(dtype: torch.dtype, upcast: bool) -> torch.dtype:
    if upcast:
        return torch.float64
    return torch.float64 if dtype == torch.float64 else torch.float32


def axpy_ref(alpha: float, x: torch.Tensor, y: torch.Tensor, *, upcast: bool = False) -> torch.Tensor:
    """``alpha * x + y``, computed in float32 (float64 with ``upcast``), returned in x's dtype."""
    ct = _compute_dtype(x.dtype, upcast)
    out = alpha * x.to(ct) + y.to(ct)
    return out if upcast else out.to(x.dtype)
