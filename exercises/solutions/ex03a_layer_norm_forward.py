"""Solution to exercise 3a: LayerNorm forward, one row per program, the row in one block.

``y = (x - mean) / sqrt(var + eps) * w + b`` with ``mean = sum(x) / N`` and the biased variance
``var = sum((x - mean)**2) / N``, all in float32; one rounding, at the store.
"""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def layer_norm_fwd_kernel(
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    w_ptr,  # *weight [N], x's dtype
    b_ptr,  # *bias [N], x's dtype
    y_ptr,  # *y [M, N]: row stride y_row_stride, x's dtype
    x_row_stride,  # elements between the starts of two rows of x
    y_row_stride,  # elements between the starts of two rows of y
    N,  # row length
    eps,  # added to the variance
    BLOCK_N: tl.constexpr,  # next power of two >= N: the whole row in one block
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N  # masked lanes are 0: they add nothing; divide by N, not BLOCK_N
    # Centered: subtract the mean first. The masked lanes would become -mean, so zero them again.
    centered = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centered * centered, axis=0) / N  # biased variance (divide by N)
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, centered * rstd * w + b, mask=mask)
