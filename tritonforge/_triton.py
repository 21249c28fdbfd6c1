"""Import Triton the one way that works everywhere.

Triton's interpreter (``TRITON_INTERPRET=1``) must be switched on *before* ``import triton``:
set later, kernels that call ``tl.sum`` or ``tl.max`` fail, and kernels decorated before the
flag take the GPU path and die with "0 active drivers". So this module, imported first by
``tritonforge/__init__.py``, decides the flag and then imports Triton once.

The decision: if the user set ``TRITON_INTERPRET`` we leave it alone; otherwise, on a machine
with no CUDA GPU, we set it to ``"1"`` so every kernel in the package runs on CPU tensors
through the interpreter. This is the only work the package does at import time.

If Triton is not installed (macOS, Windows, a minimal environment), ``triton`` is ``None`` and
``tl`` is a stand-in whose attributes exist, so the kernel *definitions* still import; every
call then routes to the PyTorch reference with a warning (see ``tritonforge.runtime``).
"""

from __future__ import annotations

import os
import sys

import torch

TRITON_ALREADY_IMPORTED = "triton" in sys.modules
"""True if something imported Triton before tritonforge: the interpreter flag may be too late."""

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") == "1"
"""Whether Triton kernels run in the CPU interpreter (fixed when Triton is imported)."""

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
    TRITON_IMPORT_ERROR: str | None = None
except ImportError as exc:  # Triton ships Linux wheels only
    HAVE_TRITON = False
    TRITON_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

    class _Stand_in:
        """Answers any attribute so that annotations like ``tl.constexpr`` still evaluate."""

        def __getattr__(self, name: str) -> _Stand_in:
            return self

        def __call__(self, *args, **kwargs):
            # Used as a decorator (``@triton.jit``) it returns the function unchanged; the
            # routing layer never launches it because HAVE_TRITON is False.
            if len(args) == 1 and callable(args[0]) and not kwargs:
                return args[0]
            return self

    triton = _Stand_in()  # type: ignore[assignment]
    tl = _Stand_in()  # type: ignore[assignment]

__all__ = ["triton", "tl", "HAVE_TRITON", "INTERPRETING", "TRITON_IMPORT_ERROR", "TRITON_ALREADY_IMPORTED"]
