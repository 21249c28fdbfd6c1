"""Solution to exercise 2c: ``out = x.T`` into a new tensor, one 16 × 8 tile of ``x`` per program."""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def transpose_kernel(
    x_ptr,  # *x [M, N], any strides
    out_ptr,  # *out [N, M], any strides
    M,
    N,
    stride_xm,
    stride_xn,
    stride_om,
    stride_on,
    BLOCK_M: tl.constexpr,  # rows of x per tile (columns of out)
    BLOCK_N: tl.constexpr,  # columns of x per tile (rows of out)
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M], rows of x
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N], columns of x
    mask = (rows[:, None] < M) & (cols[None, :] < N)  # [BLOCK_M, BLOCK_N]
    tile = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask)
    # x[i, j] goes to out[j, i]: row index j times out's row stride, column index i times its column stride.
    # The tile keeps its [BLOCK_M, BLOCK_N] shape; only the addresses are transposed (the same mask fits).
    tl.store(out_ptr + cols[None, :] * stride_om + rows[:, None] * stride_on, tile, mask=mask)
