"""Solution to exercise 7e: dk and dv of one block of keys, FlashAttention-2's backward loop (not causal).

A program owns ``BLOCK_N`` keys of one head: it loads their k and v once, keeps the two
accumulators ``dk`` and ``dv`` in registers, and walks every block of ``BLOCK_M`` queries. Each
step recomputes its tile of probabilities from the forward's logsumexp instead of storing ``P``:
in the transposed orientation (keys are the rows, queries the columns, so that the sums over the
queries are the tile's matrix products)

    s  = k qᵀ · qk_scale                 (qk_scale = sm_scale · log2(e): base-2 units, like lse2)
    P  = exp2(s − lse2[None, :])          (each column, a query, has its own lse2)
    dv += P dO
    dP = v dOᵀ
    dS = P ⊙ (dP − δ[None, :])
    dk += dS q

and after the loop ``dk *= sm_scale`` (``S = sm_scale · q kᵀ``; the ``log2(e)`` in ``qk_scale``
belongs to the exponent only). Query rows past ``Nq`` load as 0 with ``lse2 = +inf``: their
``P`` is 0, so they add nothing.
"""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def attention_dkdv_kernel(
    q_ptr,  # *q [B, H, Nq, D]: strides (stride_qb, stride_qh, stride_qm, 1)
    k_ptr,  # *k [B, H, Nk, D]
    v_ptr,  # *v [B, H, Nk, D]
    do_ptr,  # *dO [B, H, Nq, D]
    lse2_ptr,  # *lse2 [B, H, Nq] float32 (exercise 7d): head b·H + h's row starts at (b·H + h)·stride_lh
    delta_ptr,  # *δ [B, H, Nq] float32, the same layout
    dk_ptr,  # *dk [B, H, Nk, D]: k's dtype
    dv_ptr,  # *dv [B, H, Nk, D]: v's dtype
    stride_qb,
    stride_qh,
    stride_qm,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_dob,
    stride_doh,
    stride_dom,
    stride_dkb,
    stride_dkh,
    stride_dkn,
    stride_dvb,
    stride_dvh,
    stride_dvn,
    stride_lh,
    H,  # heads: program_id(1) = b·H + h
    Nq,  # queries
    Nk,  # keys
    sm_scale,  # 1/√D
    HEAD_DIM: tl.constexpr,  # D, a power of two ≥ 16
    BLOCK_M: tl.constexpr,  # queries per step of the loop (16)
    BLOCK_N: tl.constexpr,  # keys per program (16)
):
    # Given: one program per (block of BLOCK_N keys, b·H + h); its k and v tiles, the accumulators.
    start_n = tl.program_id(0) * BLOCK_N
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    offs_n = start_n + tl.arange(0, BLOCK_N)  # this program's keys
    offs_d = tl.arange(0, HEAD_DIM)
    kv_mask = offs_n[:, None] < Nk
    k = tl.load(k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
    k = k.to(tl.float32)
    v = v.to(tl.float32)
    dk = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)  # dSᵀ q so far
    dv = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)  # Pᵀ dO so far
    qk_scale = sm_scale * 1.4426950408889634  # scores in base-2 units, like lse2
    q_base = q_ptr + b * stride_qb + h * stride_qh
    do_base = do_ptr + b * stride_dob + h * stride_doh
    stats = tl.program_id(1) * stride_lh  # this head's row of lse2 and δ
    for start_m in range(0, Nq, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        m_mask = offs_m < Nq
        q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=m_mask[:, None], other=0.0)
        do = tl.load(do_base + offs_m[:, None] * stride_dom + offs_d[None, :], mask=m_mask[:, None], other=0.0)
        q = q.to(tl.float32)
        do = do.to(tl.float32)
        lse2 = tl.load(lse2_ptr + stats + offs_m, mask=m_mask, other=float("inf"))  # P = 0 past Nq
        delta = tl.load(delta_ptr + stats + offs_m, mask=m_mask, other=0.0)
        # The transposed tile, [BLOCK_N keys, BLOCK_M queries]: each column's statistics are rows.
        s = tl.dot(k, tl.trans(q), input_precision="ieee") * qk_scale
        p = tl.exp2(s - lse2[None, :])
        dv += tl.dot(p, do, input_precision="ieee")
        dp = tl.dot(v, tl.trans(do), input_precision="ieee")
        ds = p * (dp - delta[None, :])
        dk += tl.dot(ds, q, input_precision="ieee")
    # S = sm_scale · q kᵀ: the chain rule's factor, once (log2(e) was the exponent's only).
    dk = dk * sm_scale
    out_k = dk_ptr + b * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :]
    out_v = dv_ptr + b * stride_dvb + h * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :]
    tl.store(out_k, dk.to(dk_ptr.dtype.element_ty), mask=kv_mask)
    tl.store(out_v, dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)
