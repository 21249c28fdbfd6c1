"""Solution to exercise 8b: route a row softmax whose kernel has limits of its own.

The given kernel holds a whole row in one block (rows of 1 to 1024 elements) and computes in
float32 (float16, bfloat16, float32; no float64). The op decides, before routing, what its kernel
cannot serve and says so in ``unsupported=``: ``runtime.dispatch`` then takes the reference without
launching (warned once, recorded ``torch (unsupported)`` with that sentence, ``FallbackError``
under strict routing). ``dtype=`` still lets dispatch refuse bf16 below sm_80. An empty input is
no fallback: nothing to compute, recorded by ``runtime.record_empty``. An integer tensor is bad
input: a ``TypeError`` naming ``x``, before any routing.
"""

import torch

from tritonforge import checks, exercise, runtime

OP_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def make_row_softmax(op_name: str, launch):
    """Return the public function ``row_softmax(x)``: softmax over the last dimension, routed
    under ``op_name`` between ``launch(x)`` and ``exercise.row_softmax_ref(x)``."""

    def row_softmax(x):
        checks.check_tensor("x", x, dtypes=OP_DTYPES, ndim_min=1)  # bad input: an error, never a fallback
        if x.numel() == 0:  # nothing to compute: recorded, not a fallback (fine under strict routing)
            runtime.record_empty(op_name)
            return torch.empty(x.shape, dtype=x.dtype, device=x.device)
        n = x.shape[-1]
        unsupported = None  # None: the kernel can serve it (dispatch still checks bf16 by dtype)
        if n > exercise.ROW_SOFTMAX_MAX_N:
            unsupported = f"rows of {n} elements: the kernel holds a row in one block of at most {exercise.ROW_SOFTMAX_MAX_N}"
        elif x.dtype == torch.float64:
            unsupported = "float64: the kernel computes in float32 (float16, bfloat16 and float32 only)"
        return runtime.dispatch(
            op_name,
            device=x.device,
            dtype=x.dtype,
            unsupported=unsupported,
            kernel=lambda: launch(x),
            reference=lambda: exercise.row_softmax_ref(x),
        )

    return row_softmax
