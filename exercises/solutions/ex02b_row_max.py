"""Solution to exercise 2b: the maximum of each row, ``BLOCK_N`` columns at a time."""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def row_max_kernel(
    x_ptr,  # *x [M, N], row stride stride_xm, unit column stride
    out_ptr,  # *out [M]
    N,  # columns
    stride_xm,  # elements between the starts of two rows
    BLOCK_N: tl.constexpr,  # columns per step
):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = x_ptr + row * stride_xm
    cols = tl.arange(0, BLOCK_N)
    # -inf, not 0: the identity of max. A row of negative numbers must not come out as 0.
    acc = tl.full([BLOCK_N], float("-inf"), tl.float32)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(row_ptr + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        acc = tl.maximum(acc, x)
    tl.store(out_ptr + row, tl.max(acc, axis=0))
