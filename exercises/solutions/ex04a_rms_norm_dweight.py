"""Solution to exercise 4a: RMSNorm's weight gradient as per-program partial sums.

Program ``p`` owns rows ``[p * rows_per_program, min((p + 1) * rows_per_program, M))`` and writes
``sum over its rows of dy * x * rstd`` as row ``p`` of a float32 ``[P, N]`` buffer (zeros if it
owns no rows); the launcher adds the ``P`` rows with ``.sum(0)``. No atomics: every addition
happens in an order fixed by the code, so the result is the same on every run.
"""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def rms_norm_dweight_kernel(
    dy_ptr,  # *dy [M, N]: row stride dy_row_stride, unit column stride
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    rstd_ptr,  # *rstd [M], float32: 1 / sqrt(mean(x**2) + eps), saved by the forward
    partial_ptr,  # *partial [P, N], float32, row stride partial_row_stride: one row per program
    dy_row_stride,
    x_row_stride,
    partial_row_stride,
    M,  # rows
    N,  # row length
    rows_per_program,  # cdiv(M, P)
    BLOCK_N: tl.constexpr,  # next power of two >= N
):
    pid = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, M)  # the last group may be short, or empty
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in range(row_start, row_end):  # no iterations when row_start >= M
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + row)
        acc += dy * (x * rstd)  # dy * x_hat
    # Always store, even with no rows: the buffer is not zeroed, and .sum(0) reads every row.
    tl.store(partial_ptr + pid * partial_row_stride + cols, acc, mask=mask)
