"""Solution to exercise 7c: FlashAttention-2 forward with a sliding window (local attention), causal.

Query ``i`` sits at key ``î = i + Nk − Nq`` and sees the ``window`` keys ``î − window < j ≤ î``
(fewer where the window starts before key 0). A program's queries see keys from
``start_m + Nk − Nq − window + 1`` (its first query's first) to ``start_m + BLOCK_M − 1 + Nk − Nq``
(its last query's last): the loop runs over the blocks that hold those keys only, so the work per
program is ``O(window + BLOCK_M)`` keys however long the sequence; the mask trims the boundary
blocks. A row can meet a block with no key of its window (its window starts in the next one): its
running max is still −inf after it, so the shift is 0 there.
"""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def sliding_window_attention_kernel(
    q_ptr,  # *q [B, H, Nq, D]: strides (stride_qb, stride_qh, stride_qm, 1)
    k_ptr,  # *k [B, H, Nk, D]
    v_ptr,  # *v [B, H, Nk, D]
    out_ptr,  # *out [B, H, Nq, D]: q's dtype
    stride_qb,
    stride_qh,
    stride_qm,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_ob,
    stride_oh,
    stride_om,
    H,  # heads: program_id(1) = b·H + h
    Nq,  # queries
    Nk,  # keys
    sm_scale,  # 1/√D
    window,  # keys each query sees: î − window < j ≤ î
    HEAD_DIM: tl.constexpr,  # D, a power of two ≥ 16
    BLOCK_M: tl.constexpr,  # queries per program (16)
    BLOCK_N: tl.constexpr,  # keys per step of the loop (16)
):
    # Given: plain FlashAttention-2 forward, one program per (query block, b·H + h).
    start_m = tl.program_id(0) * BLOCK_M
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    offs_m = start_m + tl.arange(0, BLOCK_M)  # this program's queries
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = q_ptr + b * stride_qb + h * stride_qh
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    q_mask = offs_m[:, None] < Nq
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=q_mask, other=0.0)
    q = q.to(tl.float32)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running max
    l_i = tl.zeros((BLOCK_M,), tl.float32)  # running sum
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)  # unnormalized output
    # Causal (bottom right): query i sits at key i + Nk - Nq; keys past the
    # block's last query are skipped whole.
    hi = tl.minimum(Nk, start_m + BLOCK_M + Nk - Nq)
    # The window of the block's first query starts at key start_m + Nk − Nq − window + 1 (later
    # queries' start later): every block before the one that holds it is skipped whole. Clamped
    # at 0 for the rows whose window starts before key 0.
    lo = tl.maximum(start_m + Nk - Nq - window + 1, 0) // BLOCK_N * BLOCK_N
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = offs_n[:, None] < Nk
        k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
        k = k.to(tl.float32)
        v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * sm_scale
        i_hat = offs_m[:, None] + Nk - Nq
        visible = (offs_n[None, :] <= i_hat) & (offs_n[None, :] < Nk)
        visible = visible & (offs_n[None, :] > i_hat - window)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # A row can see no key of a whole block (its window starts in a later one): its max is
        # still −inf, and exp(−inf − (−inf)) would be NaN. Shift by 0 there: exp(−inf) = 0.
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - shift)  # rescales what came before
        p = tl.exp(s - shift[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    out_base = out_ptr + b * stride_ob + h * stride_oh
    out_ptrs = out_base + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=q_mask)
