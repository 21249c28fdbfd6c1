"""Solution to exercise 3c: RMSNorm of rows longer than one block, in two passes over the columns.

Pass 1 walks the row in blocks of ``BLOCK_N`` columns and adds up ``x**2`` in a float32 block
(the last block masked: its missing columns load as 0 and add nothing), then
``rstd = 1 / sqrt(sum / N + eps)``. Pass 2 walks the row again and stores ``x * rstd * w``, block by
block, in x's dtype. The row is read twice; nothing but the running sum stays in registers, so
any ``N`` fits.
"""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def rms_norm_long_rows_kernel(
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    w_ptr,  # *weight [N]
    y_ptr,  # *y [M, N]: out, row stride y_row_stride, x's dtype
    x_row_stride,
    y_row_stride,
    N,  # row length: any, larger or smaller than BLOCK_N
    eps,  # added to the mean square
    BLOCK_N: tl.constexpr,  # columns per step of the loop (fixed by the launcher)
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    # Pass 1: the sum of squares, block by block.
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N  # the last block is ragged unless BLOCK_N divides N
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)  # the mean over N columns, not BLOCK_N
    # Pass 2: normalize and store, block by block.
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + start + cols, x * rstd * w, mask=mask)
