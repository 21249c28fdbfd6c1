"""Solution to exercise 7d: the FlashAttention-2 backward's preprocess, δ and lse2 for every query row.

Before the dK/dV and dQ kernels run, one pass over the rows computes the two statistics they read
per query: ``δ_i = Σ_d dO_id · O_id − dlse_i`` (the row sum of ``dS = P ⊙ (dP − δ)``, taken over
``D`` instead of ``Nk`` because ``P v = O``; the ``− dlse`` is the gradient of the logsumexp the
forward returned) and ``lse2_i = lse_i · log2(e)``, the logsumexp in base-2 units, so that the
other kernels recompute ``P = 2^(s · qk_scale − lse2)`` with one ``exp2`` per score. A query that
sees no key has ``lse = −inf``; its ``lse2`` is ``+inf``, so that its ``P`` is 0 (``−inf`` would
make ``2^(s + inf)`` infinite).
"""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def attention_bwd_preprocess_kernel(
    o_ptr,  # *O [B, H, Nq, D]: strides (stride_ob, stride_oh, stride_om, 1)
    do_ptr,  # *dO [B, H, Nq, D]: strides (stride_dob, stride_doh, stride_dom, 1)
    lse_ptr,  # *lse [B, H, Nq] float32: head b·H + h's row starts at (b·H + h)·stride_lh
    dlse_ptr,  # *dlse, the same layout
    delta_ptr,  # *δ, output, the same layout
    lse2_ptr,  # *lse2, output, the same layout
    stride_ob,
    stride_oh,
    stride_om,
    stride_dob,
    stride_doh,
    stride_dom,
    stride_lh,
    H,  # heads: program_id(1) = b·H + h
    Nq,  # query rows
    HEAD_DIM: tl.constexpr,  # D, a power of two ≥ 16
    BLOCK_M: tl.constexpr,  # query rows per program (16)
):
    # Given: one program per (block of BLOCK_M query rows, b·H + h).
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows < Nq
    stats = tl.program_id(1) * stride_lh + rows  # this block's entries of lse, dlse, δ and lse2
    LOG2E = 1.4426950408889634
    # δ: the two tiles in float32 (rows past Nq read as 0 and are not stored), a sum over D.
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :], mask=row_ok[:, None], other=0.0)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + rows[:, None] * stride_dom + dims[None, :], mask=row_ok[:, None], other=0.0)
    dlse = tl.load(dlse_ptr + stats, mask=row_ok, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1) - dlse
    # lse2: base 2; +inf where no key was seen (lse = −inf), so that P = 2^(s − lse2) = 0 there.
    lse = tl.load(lse_ptr + stats, mask=row_ok, other=0.0)
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * LOG2E)
    tl.store(delta_ptr + stats, delta, mask=row_ok)
    tl.store(lse2_ptr + stats, lse2, mask=row_ok)
