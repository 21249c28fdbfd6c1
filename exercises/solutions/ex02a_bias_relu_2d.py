"""Solution to exercise 2a: ``out = max(x + bias, 0)`` over a strided 2-D view, one tile per program."""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def bias_relu_2d_kernel(
    x_ptr,  # *x [M, N], any strides
    bias_ptr,  # *bias [N], contiguous
    out_ptr,  # *out [M, N], any strides
    M,
    N,
    stride_xm,
    stride_xn,
    stride_om,
    stride_on,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N]
    mask = (rows[:, None] < M) & (cols[None, :] < N)  # [BLOCK_M, BLOCK_N]
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask).to(tl.float32)
    bias = tl.load(bias_ptr + cols, mask=cols < N).to(tl.float32)  # [BLOCK_N], one per column
    out = tl.maximum(x + bias[None, :], 0.0)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, out, mask=mask)
