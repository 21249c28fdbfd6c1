"""Solution to exercise 6b: merge two partial softmax states, one row per program.

Each half ``j`` of a row comes as ``(m_j, s_j, o_j)``: its max, ``s_j = Σ exp(x − m_j)`` over the
half, and its normalized output ``o_j`` (a weighted average of value rows). The whole row's max is
``m = max(m1, m2)``; each half's sum counts from its own max, so its weight in the whole row is
``w_j = s_j·exp(m_j − m)`` (≤ s_j: the half with the smaller max shrinks). Then ``s = w1 + w2`` and
``o = (w1·o1 + w2·o2) / s``. An empty half, ``(−inf, 0, 0)``, has weight 0; when both are empty,
``m = −inf`` and ``exp(−inf − (−inf))`` would be NaN, so the shift is 0 there and ``o`` is divided
only where ``s > 0``: the merged state is empty too, ``(−inf, 0, 0)``.
"""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def merge_states_kernel(
    m1_ptr,  # *m1 [M] float32: the first half's max (−inf if it is empty)
    s1_ptr,  # *s1 [M] float32: Σ exp(x − m1) over the first half (0 if empty)
    o1_ptr,  # *o1 [M, D]: the first half's normalized output, row stride o1_row_stride
    m2_ptr,  # *m2 [M] float32: the same for the second half
    s2_ptr,  # *s2 [M] float32
    o2_ptr,  # *o2 [M, D]: o1's dtype
    m_ptr,  # *m [M] float32: out, the whole row's max
    s_ptr,  # *s [M] float32: out, Σ exp(x − m) over the whole row
    o_ptr,  # *o [M, D]: out, the whole row's normalized output, o1's dtype
    o1_row_stride,
    o2_row_stride,
    o_row_stride,
    D,  # row length of o
    BLOCK_D: tl.constexpr,  # a power of two ≥ D (the launcher's)
):
    row = tl.program_id(0).to(tl.int64)
    m1 = tl.load(m1_ptr + row)
    s1 = tl.load(s1_ptr + row)
    m2 = tl.load(m2_ptr + row)
    s2 = tl.load(s2_ptr + row)
    m = tl.maximum(m1, m2)
    shift = tl.where(m == float("-inf"), 0.0, m)  # both halves empty: exp(−inf − 0) = 0, not NaN
    w1 = s1 * tl.exp(m1 - shift)
    w2 = s2 * tl.exp(m2 - shift)
    s = w1 + w2
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    o1 = tl.load(o1_ptr + row * o1_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    o2 = tl.load(o2_ptr + row * o2_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    o = (w1 * o1 + w2 * o2) / tl.where(s > 0, s, 1.0)  # an empty row stays o = 0
    tl.store(m_ptr + row, m)
    tl.store(s_ptr + row, s)
    tl.store(o_ptr + row * o_row_stride + cols, o, mask=mask)
