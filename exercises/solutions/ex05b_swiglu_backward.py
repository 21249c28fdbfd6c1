"""Solution to exercise 5b: SwiGLU's backward, ``dgate`` and ``dup`` of ``y = silu(gate) * up`` in
one kernel, one block of 32 columns of one row per program.

With ``s = sigmoid(g) = 1 / (1 + exp(-g))``, recomputed here rather than saved by the forward
(one ``exp`` per element costs less than writing ``s`` and reading it back):
``dgate = dy * up * s * (1 + g * (1 - s))`` (the derivative of ``silu(g) = g * s`` is
``s + g * s * (1 - s)``) and ``dup = dy * g * s``. ``1 / (1 + exp(-g))`` cannot give NaN: for
very negative ``g``, ``exp(-g)`` is inf and ``s`` is 0. Everything in float32, rounded once at
each store.
"""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def swiglu_bwd_kernel(
    gate_ptr,  # *gate [M, N]: the forward's input, row stride gate_row_stride, unit column stride
    up_ptr,  # *up [M, N]: the forward's other input, gate's dtype
    dy_ptr,  # *dy [M, N]: dL/dy, gate's dtype
    dgate_ptr,  # *dgate [M, N]: out, dL/dgate, gate's dtype
    dup_ptr,  # *dup [M, N]: out, dL/dup, gate's dtype
    gate_row_stride,
    up_row_stride,
    dy_row_stride,
    dgate_row_stride,
    dup_row_stride,
    N,  # row length
    BLOCK_N: tl.constexpr,  # columns per program (32)
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    g = tl.load(gate_ptr + row * gate_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(up_ptr + row * up_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    s = 1.0 / (1.0 + tl.exp(-g))  # sigmoid, recomputed: exp(-g) = inf gives 0, never NaN
    silu = g * s
    dgate = dy * up * s * (1.0 + g * (1.0 - s))  # dy * up * silu'(g)
    dup = dy * silu
    tl.store(dgate_ptr + row * dgate_row_stride + cols, dgate, mask=mask)
    tl.store(dup_ptr + row * dup_row_stride + cols, dup, mask=mask)
