"""Solution to exercise 6a: log-softmax of rows longer than one block, one row per program.

Pass 1 walks the row in blocks of ``BLOCK_N`` columns with the online normalizer (Milakov &
Gimelshein): a running max ``m`` and a running sum ``s = Σ exp(x − m)``; when a block raises the
max from ``m`` to ``m_new``, the sum so far is rescaled by ``exp(m − m_new)``. Masked lanes load as
``−inf``: they never win the max and add ``exp(−inf) = 0`` to the sum. A block of ``−inf`` only
(masked columns at the start of a row) leaves ``m = −inf``, where ``exp(−inf − (−inf))`` would be
NaN: the shift is 0 until the row has a finite value. Pass 2 walks the row again and stores
``(x − m) − log(s)`` (``x − m`` is exact; ``m + log(s)`` would round to float32's step at ``m``). Everything in float32, rounded once at each store.
"""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def log_softmax_kernel(
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    out_ptr,  # *out [M, N]: log_softmax(x) along each row, x's dtype
    x_row_stride,
    out_row_stride,
    N,  # row length: any, larger or smaller than BLOCK_N
    BLOCK_N: tl.constexpr,  # columns per step of the loop (fixed by the launcher)
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    # Pass 1: the running max m and the running sum s = Σ exp(x − m).
    m = float("-inf")
    s = 0.0
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N  # the last block is ragged unless BLOCK_N divides N
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # no finite value yet: nothing to rescale
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new
    log_s = tl.log(s)
    # Pass 2: out = (x − m) − log(s), block by block. Not x − (m + log(s)): for x near 10⁴,
    # m + log(s) rounds to float32's step there (0.001); x − m is exact.
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * out_row_stride + start + cols, (x - m) - log_s, mask=mask)
