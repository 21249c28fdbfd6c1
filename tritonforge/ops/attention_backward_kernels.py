r"""FlashAttention-2's backward kernels (chapter 7): the gradients without the ``Nq x Nk`` matrices.

Math. For one (batch, query head), ``S = c q kᵀ``, ``P = exp(S - lse)`` (recomputed tile by tile
from the forward's saved ``lse``, never stored), ``O = P v``; given ``dO`` (and ``dlse``, when the
logsumexp the forward returned has a gradient too):

.. math::

    dv = P^\top dO, \quad dP = dO\, v^\top, \quad
    dS = P \odot (dP - \delta), \quad \delta_i = \textstyle\sum_d dO_{id} O_{id} - dlse_i, \quad
    dq = c\, dS\, k, \quad dk = c\, dS^\top q.

The ``- dlse`` term: ``lse_i = log sum_j exp(S_ij)`` has ``d lse_i / d S_ij = P_ij``, so a gradient
``dlse`` adds ``P ⊙ dlse`` to ``dS``, which is the same as subtracting it from ``δ``.

Three kernels, FlashAttention-2's split of the work (no atomics):

- :func:`_bwd_preprocess_kernel`, a program per (query block, batch · query head): ``δ`` and
  ``lse`` in log2 units (``+inf`` for a query that sees no key, so that its ``P`` is 0);
- :func:`_bwd_dkdv_kernel`, a program per (key block, batch · KV head): it keeps its ``k, v`` tile
  and the ``dk, dv`` accumulators in registers and walks the query blocks of every query head of
  its group (grouped-query attention: the group's sum, with no copy of k or v);
- :func:`_bwd_dq_kernel`, a program per (query block, batch · query head): it keeps ``q, dO`` and
  the ``dq`` accumulator and walks the key blocks, the forward's loop.

FlashAttention-2's paper instead adds each step's piece of ``dq`` from the dK/dV loop into a float32
buffer with atomics (five matmuls instead of seven, the additions in the L2 cache, the sum's order
left to the hardware): ``DQ_ATOMIC``, a plan's choice (``BackwardPlan.dq_atomic``) for measuring the
two orders against each other; the package's routed plans use the dQ kernel.

Causal block skipping as in the forward (bottom-right diagonal, ``shift = Nk - Nq``): the dK/dV
program starts at the first query block that sees its keys and masks only the blocks the diagonal
crosses; the dQ program stops at its last visible key block. Masks beyond causal mirror the forward
(:mod:`tritonforge.ops.attention_prefill`): ``kv_lens`` (the row's ``Nk``, loaded on the device),
key ids (a negative id: padding; its k and v are never loaded) and query ids. Arithmetic as the
forward's: float32 (float64 for float64) accumulators, ``P`` and ``dS`` rounded to the input dtype
before their ``tl.dot`` (the tensor cores'), IEEE dots for float32 inputs.
"""

from __future__ import annotations

from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import cast_for_store


@triton.jit
def _dot(a, b, acc, IEEE_DOT: tl.constexpr):
    """``a @ b (+ acc)``; in IEEE float32 (not TF32) for float32 inputs."""
    if IEEE_DOT:
        return tl.dot(a, b, acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def _scaled(x, hi, lo, ACC_DTYPE: tl.constexpr):
    """``x · (hi + lo)``: a float64 scalar travels as two float32 halves (``split_float``)."""
    if ACC_DTYPE == tl.float64:
        return x * hi + x * lo
    return x * hi


@triton.jit
def _to_dot_input(x, DTYPE: tl.constexpr, UPCAST: tl.constexpr, ROUND_BF16: tl.constexpr):
    """``P`` or ``dS`` rounded to the input dtype for the next dot (float32 again when UPCAST)."""
    if UPCAST:
        return cast_for_store(x, DTYPE, ROUND_BF16).to(tl.float32)
    return x.to(DTYPE)


@triton.jit
def _bwd_preprocess_kernel(
    o_ptr,  # *O [B, Hq, Nq, D], strides (o_sb, o_sh, o_sn, 1)
    do_ptr,  # *dO, strides (do_sb, do_sh, do_sn, 1)
    lse_ptr,  # *lse [B, Hq, Nq] contiguous, ACC_DTYPE (the forward's)
    dlse_ptr,  # *dlse like lse (HAS_DLSE)
    delta_ptr,  # *δ [B, Hq, Nq] ACC_DTYPE: rowsum(dO ⊙ O) - dlse
    lse2_ptr,  # *lse · log2(e) [B, Hq, Nq] ACC_DTYPE; +inf where a query sees no key
    o_sb,
    o_sh,
    o_sn,
    do_sb,
    do_sh,
    do_sn,
    Hq,
    Nq,
    D,
    log2e,  # log2(e) as two float32 halves (float64 uses both)
    log2e_lo,
    HAS_DLSE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    HEAD_D: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
):
    """Program (query block, batch · query head): δ and lse in log2 units for BLOCK_M rows."""
    bh = tl.program_id(1).to(tl.int64)
    b = bh // Hq
    h = bh % Hq
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_D)
    row_ok = rows < Nq
    tile_ok = row_ok[:, None] & (dims < D)[None, :]
    o = tl.load(o_ptr + b * o_sb + h * o_sh + rows[:, None] * o_sn + dims[None, :], mask=tile_ok, other=0.0).to(ACC_DTYPE)
    do = tl.load(do_ptr + b * do_sb + h * do_sh + rows[:, None] * do_sn + dims[None, :], mask=tile_ok, other=0.0).to(ACC_DTYPE)
    delta = tl.sum(o * do, axis=1)
    if HAS_DLSE:
        delta -= tl.load(dlse_ptr + bh * Nq + rows, mask=row_ok, other=0.0).to(ACC_DTYPE)
    lse = tl.load(lse_ptr + bh * Nq + rows, mask=row_ok, other=0.0)
    lse2 = tl.where(lse == -float("inf"), float("inf"), _scaled(lse, log2e, log2e_lo, ACC_DTYPE))
    tl.store(delta_ptr + bh * Nq + rows, delta, mask=row_ok)
    tl.store(lse2_ptr + bh * Nq + rows, lse2, mask=row_ok)


@triton.jit
def _dkdv_query_blocks(
    dk,  # [BLOCK_N, HEAD_D] ACC_DTYPE: dSᵀ q so far (c applied at the end)
    dv,  # [BLOCK_N, HEAD_D] ACC_DTYPE: Pᵀ dO so far
    k,  # [BLOCK_N, HEAD_D] this program's key tile (0 where a key does not exist)
    v,  # and its value tile
    keys,  # [BLOCK_N] their key indices
    kid,  # [BLOCK_N] int32 their ids (HAS_IDS)
    q_head,  # pointer to query 0 of this (batch, query head)
    do_head,  # and to its dO row 0
    q_sn,
    do_sn,
    lse2_row,  # pointer to this (batch, query head)'s row 0 of lse2
    delta_row,  # and of δ
    qid_row,  # pointer to this batch row's query 0 id (HAS_QIDS)
    dq_head,  # pointer to row 0 of this (batch, query head)'s float dq accumulator [Nq, HEAD_D] (DQ_ATOMIC)
    lo,  # the query range [lo, hi) walked, lo a multiple of BLOCK_M
    hi,
    Nq,
    D,
    causal_shift,
    qk_scale,
    qk_scale_lo,
    HAS_IDS: tl.constexpr,
    HAS_QIDS: tl.constexpr,
    MASK: tl.constexpr,  # the causal diagonal crosses these blocks
    BLOCK_M: tl.constexpr,
    HEAD_D: tl.constexpr,
    UPCAST: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    IEEE_DOT: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    DQ_ATOMIC: tl.constexpr = False,  # also add dS k into dq_head with atomics (FlashAttention-2's order)
):
    """Fold query blocks ``[lo, hi)`` of one query head into ``dk, dv`` (transposed tiles: keys are
    the rows). A query row past ``Nq`` loads zeros and ``lse2 = +inf``: its ``P`` is 0."""
    dims = tl.arange(0, HEAD_D)
    dim_ok = dims < D
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        row_ok = rows < Nq
        tile_ok = row_ok[:, None] & dim_ok[None, :]
        q = tl.load(q_head + rows[:, None] * q_sn + dims[None, :], mask=tile_ok, other=0.0)
        do = tl.load(do_head + rows[:, None] * do_sn + dims[None, :], mask=tile_ok, other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
            do = do.to(tl.float32)
        lse2 = tl.load(lse2_row + rows, mask=row_ok, other=float("inf"))
        delta = tl.load(delta_row + rows, mask=row_ok, other=0.0)
        s_t = _scaled(_dot(k, tl.trans(q), None, IEEE_DOT), qk_scale, qk_scale_lo, ACC_DTYPE)  # [BLOCK_N, BLOCK_M], log2 units
        if MASK:
            s_t = tl.where(keys[:, None] <= rows[None, :] + causal_shift, s_t, -float("inf"))
        if HAS_IDS:
            if HAS_QIDS:
                qid = tl.load(qid_row + rows, mask=row_ok, other=0)
            else:
                qid = tl.zeros([BLOCK_M], dtype=tl.int32)
            s_t = tl.where(kid[:, None] == qid[None, :], s_t, -float("inf"))
        p_t = tl.exp2(s_t - lse2[None, :])
        p_in = _to_dot_input(p_t, do_head.dtype.element_ty, UPCAST, ROUND_BF16)
        dv = _dot(p_in, do, dv, IEEE_DOT)
        dp_t = _dot(v, tl.trans(do), None, IEEE_DOT)
        ds_t = _to_dot_input(p_t * (dp_t - delta[None, :]), q_head.dtype.element_ty, UPCAST, ROUND_BF16)
        dk = _dot(ds_t, q, dk, IEEE_DOT)
        if DQ_ATOMIC:  # this key block's piece of dq = dS k (c applied when the sum is cast)
            tl.atomic_add(dq_head + rows[:, None] * HEAD_D + dims[None, :], _dot(tl.trans(ds_t), k, None, IEEE_DOT),
                          mask=tile_ok, sem="relaxed")  # fmt: skip
    return dk, dv


@triton.jit
def _bwd_dkdv_kernel(
    q_ptr,  # q, k, v and dO as the forward reads them (unit-stride head dim)
    k_ptr,
    v_ptr,
    do_ptr,
    dk_ptr,  # *dk [B, Hkv, Nk, D] contiguous, k's dtype
    dv_ptr,  # *dv likewise
    dq_acc_ptr,  # *dq accumulator [B, Hq, Nq, HEAD_D] ACC_DTYPE, zeros (DQ_ATOMIC)
    lse2_ptr,  # the preprocess kernel's outputs [B, Hq, Nq]
    delta_ptr,
    kv_lens_ptr,  # the forward's masks (HAS_LENS, HAS_IDS, HAS_QIDS)
    kid_ptr,
    qid_ptr,
    kid_sb,
    qid_sb,
    q_sb,
    q_sh,
    q_sn,
    k_sb,
    k_sh,
    k_sn,
    v_sb,
    v_sh,
    v_sn,
    do_sb,
    do_sh,
    do_sn,
    Hq,
    Hkv,
    GROUP,
    Nq,
    Nk,
    D,
    qk_scale,
    qk_scale_lo,
    sm_scale,
    sm_scale_lo,
    HAS_LENS: tl.constexpr,
    HAS_IDS: tl.constexpr,
    HAS_QIDS: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,  # query rows per step of the walk
    BLOCK_N: tl.constexpr,  # keys this program owns
    HEAD_D: tl.constexpr,
    UPCAST: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    IEEE_DOT: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    DQ_ATOMIC: tl.constexpr = False,
):
    """Program (key block, batch · KV head): BLOCK_N rows of dk and dv, summed over the group's
    query heads. A key past the row's length or with a negative id gets 0 (its k, v are not loaded)."""
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b = (bh // Hkv).to(tl.int64)
    kv_h = bh % Hkv
    buffer_keys = Nk
    if HAS_LENS:
        Nk = tl.minimum(tl.maximum(tl.load(kv_lens_ptr + b).to(tl.int32), 0), Nk)
    keys = start_n + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_D)
    dim_ok = dims < D
    key_ok = keys < Nk
    if HAS_IDS:
        kid = tl.load(kid_ptr + b * kid_sb + keys, mask=key_ok, other=-1)
        key_ok = key_ok & (kid >= 0)
    else:
        kid = tl.zeros([BLOCK_N], dtype=tl.int32)
    kv_ok = key_ok[:, None] & dim_ok[None, :]
    k = tl.load(k_ptr + b * k_sb + kv_h * k_sh + keys[:, None] * k_sn + dims[None, :], mask=kv_ok, other=0.0)
    v = tl.load(v_ptr + b * v_sb + kv_h * v_sh + keys[:, None] * v_sn + dims[None, :], mask=kv_ok, other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    dk = tl.zeros([BLOCK_N, HEAD_D], dtype=ACC_DTYPE)
    dv = tl.zeros([BLOCK_N, HEAD_D], dtype=ACC_DTYPE)
    causal_shift = Nk - Nq
    q_end = tl.cdiv(Nq, BLOCK_M) * BLOCK_M
    if CAUSAL:
        # Query i sees key j iff j <= i + shift: blocks before the first query that sees key start_n
        # are skipped; from the first query that sees the block's last key on, no mask.
        lo = tl.minimum((tl.maximum(start_n - causal_shift, 0) // BLOCK_M) * BLOCK_M, q_end)
        mid = tl.minimum(tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - causal_shift, 0), BLOCK_M) * BLOCK_M, q_end)
    else:
        lo = 0
        mid = 0
    empty = start_n >= Nk  # no key of this block exists: nothing to walk, zeros
    lo = tl.where(empty, q_end, lo)
    mid = tl.where(empty, q_end, mid)
    qid_row = qid_ptr + b * qid_sb
    for g in range(0, GROUP):
        h = kv_h * GROUP + g
        q_head = q_ptr + b * q_sb + h * q_sh
        do_head = do_ptr + b * do_sb + h * do_sh
        row0 = (b * Hq + h) * Nq
        dq_head = dq_acc_ptr + row0 * HEAD_D
        dk, dv = _dkdv_query_blocks(dk, dv, k, v, keys, kid, q_head, do_head, q_sn, do_sn, lse2_ptr + row0, delta_ptr + row0, qid_row,
                                    dq_head, lo, mid, Nq, D, causal_shift, qk_scale, qk_scale_lo, HAS_IDS, HAS_QIDS, True, BLOCK_M,
                                    HEAD_D, UPCAST, ROUND_BF16, IEEE_DOT, ACC_DTYPE, DQ_ATOMIC)  # fmt: skip
        dk, dv = _dkdv_query_blocks(dk, dv, k, v, keys, kid, q_head, do_head, q_sn, do_sn, lse2_ptr + row0, delta_ptr + row0, qid_row,
                                    dq_head, mid, q_end, Nq, D, causal_shift, qk_scale, qk_scale_lo, HAS_IDS, HAS_QIDS, False, BLOCK_M,
                                    HEAD_D, UPCAST, ROUND_BF16, IEEE_DOT, ACC_DTYPE, DQ_ATOMIC)  # fmt: skip
    # A key that does not exist saw P = exp2(0 - lse2) from its zero k (inf if lse2 < -128): only its own row, dropped here.
    dk = tl.where(key_ok[:, None], _scaled(dk, sm_scale, sm_scale_lo, ACC_DTYPE), 0.0)
    dv = tl.where(key_ok[:, None], dv, 0.0)
    out = (b * Hkv + kv_h) * buffer_keys * D + keys[:, None] * D + dims[None, :]
    store_ok = (keys < buffer_keys)[:, None] & dim_ok[None, :]
    tl.store(dk_ptr + out, cast_for_store(dk, dk_ptr.dtype.element_ty, ROUND_BF16), mask=store_ok)
    tl.store(dv_ptr + out, cast_for_store(dv, dv_ptr.dtype.element_ty, ROUND_BF16), mask=store_ok)


@triton.jit
def _dq_key_blocks(
    dq,  # [BLOCK_M, HEAD_D] ACC_DTYPE: dS k so far (c applied at the end)
    q,  # [BLOCK_M, HEAD_D] this program's query tile
    do,  # and its dO tile
    lse2,  # [BLOCK_M] their rows of lse2
    delta,  # and of δ
    rows,  # [BLOCK_M] their query indices
    query_ids,  # [BLOCK_M] int32 (HAS_IDS)
    k_head,
    v_head,
    k_row_stride,
    v_row_stride,
    key_ids,
    lo,
    hi,
    Nk,
    D,
    causal_shift,
    qk_scale,
    qk_scale_lo,
    HAS_IDS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_D: tl.constexpr,
    EVEN_D: tl.constexpr,
    MASK: tl.constexpr,  # False: every block of [lo, hi) is whole and fully visible
    CAUSAL: tl.constexpr,
    UPCAST: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    IEEE_DOT: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
):
    """Fold key blocks ``[lo, hi)`` into ``dq`` (the forward's walk, :func:`_attend_key_blocks`)."""
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_D)
    dim_ok = dims < D
    for start_n in range(lo, hi, BLOCK_N):
        keys = start_n + cols
        k_ptrs = k_head + keys[:, None] * k_row_stride + dims[None, :]
        v_ptrs = v_head + keys[:, None] * v_row_stride + dims[None, :]
        if MASK or not EVEN_D:
            kv_ok = (keys < Nk)[:, None] & dim_ok[None, :]
            k = tl.load(k_ptrs, mask=kv_ok, other=0.0)
            v = tl.load(v_ptrs, mask=kv_ok, other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        if HAS_IDS:  # a padded key's k and v may hold anything (NaN): 0 * NaN would reach dq
            kid = tl.load(key_ids + keys, mask=keys < Nk, other=-1)
            k = tl.where((kid >= 0)[:, None], k, 0.0)
            v = tl.where((kid >= 0)[:, None], v, 0.0)
        dp = _dot(do, tl.trans(v), None, IEEE_DOT)
        s = _scaled(_dot(q, tl.trans(k), None, IEEE_DOT), qk_scale, qk_scale_lo, ACC_DTYPE)
        if MASK:
            visible = (keys < Nk)[None, :]
            if CAUSAL:
                visible = visible & (keys[None, :] <= rows[:, None] + causal_shift)
            s = tl.where(visible, s, -float("inf"))
        if HAS_IDS:
            s = tl.where((kid[None, :] == query_ids[:, None]) & (kid >= 0)[None, :], s, -float("inf"))
        p = tl.exp2(s - lse2[:, None])
        ds = _to_dot_input(p * (dp - delta[:, None]), k_head.dtype.element_ty, UPCAST, ROUND_BF16)
        dq = _dot(ds, k, dq, IEEE_DOT)
    return dq


@triton.jit
def _bwd_dq_kernel(
    q_ptr,  # as in _bwd_dkdv_kernel
    k_ptr,
    v_ptr,
    do_ptr,
    dq_ptr,  # *dq [B, Hq, Nq, D] contiguous, q's dtype
    lse2_ptr,
    delta_ptr,
    kv_lens_ptr,
    kid_ptr,
    qid_ptr,
    kid_sb,
    qid_sb,
    q_sb,
    q_sh,
    q_sn,
    k_sb,
    k_sh,
    k_sn,
    v_sb,
    v_sh,
    v_sn,
    do_sb,
    do_sh,
    do_sn,
    Hq,
    GROUP,
    Nq,
    Nk,
    D,
    qk_scale,
    qk_scale_lo,
    sm_scale,
    sm_scale_lo,
    HAS_LENS: tl.constexpr,
    HAS_IDS: tl.constexpr,
    HAS_QIDS: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,  # query rows this program owns
    BLOCK_N: tl.constexpr,  # keys per step of the walk
    HEAD_D: tl.constexpr,
    EVEN_D: tl.constexpr,
    UPCAST: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    IEEE_DOT: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
):
    """Program (query block, batch · query head): BLOCK_M rows of dq, the keys walked as the forward does."""
    block = tl.program_id(0)
    if CAUSAL:  # the last query blocks see the most keys: start them first
        block = tl.num_programs(0) - 1 - block
    start_m = block * BLOCK_M
    bh = tl.program_id(1)
    b = (bh // Hq).to(tl.int64)
    h = bh % Hq
    kv_h = h // GROUP
    if HAS_LENS:
        Nk = tl.minimum(tl.maximum(tl.load(kv_lens_ptr + b).to(tl.int32), 0), Nk)
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_D)
    row_ok = rows < Nq
    tile_ok = row_ok[:, None] & (dims < D)[None, :]
    q = tl.load(q_ptr + b * q_sb + h * q_sh + rows[:, None] * q_sn + dims[None, :], mask=tile_ok, other=0.0)
    do = tl.load(do_ptr + b * do_sb + h * do_sh + rows[:, None] * do_sn + dims[None, :], mask=tile_ok, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    row0 = (b * Hq + h) * Nq
    lse2 = tl.load(lse2_ptr + row0 + rows, mask=row_ok, other=float("inf"))
    delta = tl.load(delta_ptr + row0 + rows, mask=row_ok, other=0.0)
    if HAS_QIDS:
        q_ids = tl.load(qid_ptr + b * qid_sb + rows, mask=row_ok, other=0)
    else:
        q_ids = tl.zeros([BLOCK_M], dtype=tl.int32)
    k_head = k_ptr + b * k_sb + kv_h * k_sh
    v_head = v_ptr + b * v_sb + kv_h * v_sh
    dq = tl.zeros([BLOCK_M, HEAD_D], dtype=ACC_DTYPE)
    causal_shift = Nk - Nq
    whole = (Nk // BLOCK_N) * BLOCK_N
    if CAUSAL:  # the forward's bounds: unmasked whole blocks below the diagonal, masked across it, none above
        hi = tl.minimum(tl.maximum(start_m + BLOCK_M + causal_shift, 0), Nk)
        unmasked = tl.minimum((tl.maximum(start_m + causal_shift + 1, 0) // BLOCK_N) * BLOCK_N, whole)
    else:
        hi = Nk
        unmasked = whole
    dq = _dq_key_blocks(dq, q, do, lse2, delta, rows, q_ids, k_head, v_head, k_sn, v_sn, kid_ptr + b * kid_sb, 0, unmasked, Nk, D,
                        causal_shift, qk_scale, qk_scale_lo, HAS_IDS, BLOCK_N, HEAD_D, EVEN_D, False, CAUSAL, UPCAST, ROUND_BF16,
                        IEEE_DOT, ACC_DTYPE)  # fmt: skip
    dq = _dq_key_blocks(dq, q, do, lse2, delta, rows, q_ids, k_head, v_head, k_sn, v_sn, kid_ptr + b * kid_sb, unmasked, hi, Nk, D,
                        causal_shift, qk_scale, qk_scale_lo, HAS_IDS, BLOCK_N, HEAD_D, EVEN_D, True, CAUSAL, UPCAST, ROUND_BF16,
                        IEEE_DOT, ACC_DTYPE)  # fmt: skip
    dq = _scaled(dq, sm_scale, sm_scale_lo, ACC_DTYPE)
    out = (b * Hq + h) * Nq * D + rows[:, None] * D + dims[None, :]
    tl.store(dq_ptr + out, cast_for_store(dq, dq_ptr.dtype.element_ty, ROUND_BF16), mask=tile_ok)
