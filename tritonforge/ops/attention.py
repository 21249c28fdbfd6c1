r"""FlashAttention-2 forward: tiled attention with the online softmax in registers, causal block
skipping, grouped-query heads, and a split-KV (Flash-Decoding) path for a few queries.

Math. For one (batch, query head), with ``q [Nq, D]``, ``k, v [Nk, D]`` and ``c = sm_scale``
(``D ** -0.5`` by default):

.. math:: S = c\, q k^\top, \qquad P = \operatorname{softmax}_{\text{row}}(S), \qquad O = P v.

The naive way writes ``S`` and ``P`` (``Nq·Nk`` each) to memory. FlashAttention never does: a
program owns ``BLOCK_M`` query rows and walks the keys in blocks of ``BLOCK_N``, keeping, per
row, chapter 6's online state (running max ``m``, running sum ``l``) and an unnormalized output
``acc = sum_j exp(S_j - m) v_j``. A new block with scores ``S_b`` updates

.. math::

    m' = \max(m, \max_j S_{b,j}), \quad \alpha = e^{m - m'}, \quad
    l' = \alpha\, l + \textstyle\sum_j e^{S_{b,j} - m'}, \quad
    acc' = \alpha\, acc + e^{S_b - m'}\, v_b,

and at the end ``O = acc / l`` and ``lse = m + log l`` (the row's logsumexp, which a backward
needs and which merges partial results). The exponentials use ``exp2`` with ``log2(e)`` folded
into the scale (one multiply fewer per score).

FlashAttention-2's loop order: the *outer* loop is over query blocks (one program each, in
parallel), the inner over key blocks; ``acc`` stays in registers and is divided by ``l`` once at
the end. (FlashAttention-1 looped over key blocks outside and rewrote the output every step.)

Causal masking aligns the last query with the last key (bottom-right, the FlashAttention-2
convention): query ``i`` sees key ``j`` iff ``j <= i + Nk - Nq``; so ``Nq < Nk`` (new queries on
top of a KV cache) works. Key blocks entirely above the diagonal are never loaded; blocks
entirely below it run without a mask; only the blocks the diagonal (or the key tail) crosses
are masked. A query that sees no key (causal with ``Nq > Nk``) gets ``O = 0`` and
``lse = -inf``, as FlashAttention-2 does.

Grouped-query attention: ``Hq = GROUP · Hkv``; query head ``h`` reads key/value head
``h // GROUP``. No key or value is copied or repeated.

Decode (:func:`plan` picks it for ``Nq <= DECODE_MAX_QUERIES``): one query block per head would
leave most of the GPU idle while it streams the whole KV cache. So the keys are split into
``splits`` chunks, one program per (chunk, batch, KV head); the program packs the ``GROUP · Nq``
query rows that share that KV head into one tile (each key is read once for all of them), writes
its normalized partial output and its ``lse``, and a second kernel merges a row's partials with
chapter 6's rule (``lse = log sum_s e^{lse_s}``, ``O = sum_s e^{lse_s - lse} O_s``).

A preallocated KV cache (``kv_lens``): batch row b holds ``kv_lens[b]`` valid keys at the front of
a longer buffer. Both kernels load the length on the device and treat it as that row's ``Nk``
(key tail masked, causal diagonal ending at the last valid key; a decode split past the length
walks nothing). No shape depends on the length, so a decode step over a fixed buffer can be
replayed from a CUDA graph while the length grows (chapter 9).

Dtypes: float16 and bfloat16 (bf16 from compute capability 8.0), float32 (``tl.dot`` in IEEE
float32, not TF32); float64 on the interpreter (a GPU routes it to the reference). Scores, the
online state and ``acc`` in float32 (float64 for float64); ``P`` is rounded to the input dtype
before ``P @ v`` (as every FlashAttention does, for the tensor cores); ``O`` in q's dtype,
``lse`` in the accumulator's. Layouts: any strides with a unit-stride head dimension (else copied), so
``[B, H, N, D]`` and ``[B, N, H, D]`` (``x.transpose(1, 2)``) memory are both read in place; the
output takes q's layout when q is one of these two, else ``[B, Hq, Nq, D]`` contiguous.

Backward: not a kernel here. The gradient is the hand-derived FlashAttention backward written in
PyTorch ops (:func:`tritonforge.reference.flash_attention_bwd_ref`: recomputes ``P`` from the
saved ``lse``), a routed fallback (warned; an error in strict mode) with ``Nq·Nk`` memory.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import NamedTuple, Optional

import torch

from tritonforge import runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, acc_torch_dtype, cast_for_store, round_bf16_by_hand, split_float
from tritonforge.reference import flash_attention_bwd_ref, flash_attention_ref

ATTENTION_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
LOG2E = 1.4426950408889634


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _attend_key_blocks(
    acc,  # [BLOCK_M, HEAD_D] float32: sum_j exp2(s_j - m) v_j so far
    l_i,  # [BLOCK_M] float32: sum_j exp2(s_j - m) so far
    m_i,  # [BLOCK_M] float32: the running max of the scores (log2 units); -inf before any key
    q,  # [BLOCK_M, HEAD_D] the query tile (float32 when UPCAST)
    k_head,  # pointer to key 0 of this (batch, KV head)
    v_head,
    k_row_stride,
    v_row_stride,
    query_pos,  # [BLOCK_M] each row's query index in [0, Nq): the causal mask compares with it
    lo,  # the key range [lo, hi) this call walks, lo a multiple of BLOCK_N
    hi,
    Nk,
    D,
    causal_shift,  # Nk - Nq: query i sees keys j <= i + causal_shift
    qk_scale,  # sm_scale * log2(e), rounded to float32
    qk_scale_lo,  # the rounding's remainder (used for float64 only: the interpreter passes float32)
    key_ids,  # pointer to key 0's id in this batch row (HAS_IDS)
    query_ids,  # [BLOCK_M] int32: each row's query id (HAS_IDS; 0 without query ids)
    HAS_IDS: tl.constexpr,  # a key is seen only by queries of its id; a negative id is padding, seen by none
    BLOCK_N: tl.constexpr,
    HEAD_D: tl.constexpr,  # D rounded up to a power of two >= 16
    EVEN_D: tl.constexpr,  # D == HEAD_D: no mask along the head dimension
    MASK: tl.constexpr,  # False: every block of [lo, hi) is whole and fully visible
    CAUSAL: tl.constexpr,
    UPCAST: tl.constexpr,  # interpreter + 16-bit: dots on float32 upcasts (its 16-bit dot is wrong)
    ROUND_BF16: tl.constexpr,
    IEEE_DOT: tl.constexpr,  # float32 inputs: tl.dot in IEEE float32, not TF32
    ACC_DTYPE: tl.constexpr,  # float32; float64 for float64 inputs (the interpreter's gradcheck-grade path)
):
    """The inner loop of FlashAttention-2: fold key blocks ``[lo, hi)`` into ``(acc, l, m)``."""
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
        if HAS_IDS:
            kid = tl.load(key_ids + keys, mask=keys < Nk, other=-1)
            v = tl.where((kid >= 0)[:, None], v, 0.0)  # 0 * NaN is NaN: a padded value must not reach acc
        if IEEE_DOT:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        if ACC_DTYPE == tl.float64:
            s = s * qk_scale + s * qk_scale_lo
        else:
            s = s * qk_scale  # [BLOCK_M, BLOCK_N], log2 units
        if MASK:
            visible = (keys < Nk)[None, :]
            if CAUSAL:
                visible = visible & (keys[None, :] <= query_pos[:, None] + causal_shift)
            s = tl.where(visible, s, -float("inf"))
        if HAS_IDS:
            s = tl.where((kid[None, :] == query_ids[:, None]) & (kid >= 0)[None, :], s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # A row that has seen no key yet keeps m = -inf: subtract 0 there, not -inf (NaN).
        m_ref = tl.where(m_new == -float("inf"), 0.0, m_new)
        p = tl.exp2(s - m_ref[:, None])
        alpha = tl.exp2(m_i - m_ref)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        if UPCAST:  # round P as the GPU does (to the input dtype), keep float32 for the dot
            p_in = cast_for_store(p, v_head.dtype.element_ty, ROUND_BF16).to(tl.float32)
        else:
            p_in = p.to(v.dtype)
        if IEEE_DOT:
            acc = tl.dot(p_in, v, acc, input_precision="ieee")
        else:
            acc = tl.dot(p_in, v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _finish_rows(acc, l_i, m_i):
    """``O = acc / l`` and ``lse = (m + log2 l) · ln 2``; a row with no key: ``O = 0``, ``lse = -inf``."""
    seen = l_i > 0.0
    inv_l = tl.where(seen, 1.0 / tl.where(seen, l_i, 1.0), 0.0)
    ln2 = tl.log(tl.full(l_i.shape, 2.0, l_i.dtype))  # in the state's dtype (a literal would be float32)
    lse = tl.where(seen, (m_i + tl.log2(tl.where(seen, l_i, 1.0))) * ln2, -float("inf"))
    return acc * inv_l[:, None], lse


@triton.jit
def _flash_attn_fwd_kernel(
    q_ptr,  # *q [B, Hq, Nq, D] with strides (q_sb, q_sh, q_sn, 1)
    k_ptr,  # *k [B, Hkv, Nk, D] with strides (k_sb, k_sh, k_sn, 1)
    v_ptr,  # *v like k
    o_ptr,  # *O [B, Hq, Nq, D] with strides (o_sb, o_sh, o_sn, 1), q's dtype
    lse_ptr,  # *lse [B, Hq, Nq] float32, contiguous
    kv_lens_ptr,  # *[B] int32/int64 (HAS_LENS): batch b's keys are its first kv_lens[b]
    kid_ptr,  # *key ids [B, Nk] int32 with row stride kid_sb (HAS_IDS)
    qid_ptr,  # *query ids [B, Nq] int32 with row stride qid_sb (HAS_QIDS)
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
    o_sb,
    o_sh,
    o_sn,  # fmt: skip
    Hq,
    GROUP,  # Hq // Hkv
    Nq,
    Nk,
    D,
    qk_scale,  # sm_scale * log2(e), as two float32 halves (see _attend_key_blocks)
    qk_scale_lo,
    HAS_LENS: tl.constexpr,
    HAS_IDS: tl.constexpr,
    HAS_QIDS: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_D: tl.constexpr,
    EVEN_D: tl.constexpr,
    UPCAST: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    IEEE_DOT: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
):
    """Program (query block, batch · query head): BLOCK_M rows of O and lse."""
    block = tl.program_id(0)
    if CAUSAL:  # the last query blocks see the most keys: start them first (programs start in id order)
        block = tl.num_programs(0) - 1 - block
    start_m = block * BLOCK_M
    bh = tl.program_id(1)
    b = (bh // Hq).to(tl.int64)
    h = bh % Hq
    kv_h = h // GROUP
    if HAS_LENS:  # a static KV cache: only the first kv_lens[b] keys exist (clamped to the buffer)
        Nk = tl.minimum(tl.maximum(tl.load(kv_lens_ptr + b).to(tl.int32), 0), Nk)
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_D)
    row_ok = rows < Nq
    q = tl.load(q_ptr + b * q_sb + h * q_sh + rows[:, None] * q_sn + dims[None, :],
                mask=row_ok[:, None] & (dims < D)[None, :], other=0.0)  # fmt: skip
    if UPCAST:
        q = q.to(tl.float32)
    if HAS_QIDS:
        q_ids = tl.load(qid_ptr + b * qid_sb + rows, mask=row_ok, other=0)
    else:
        q_ids = tl.zeros([BLOCK_M], dtype=tl.int32)
    k_ids = kid_ptr + b * kid_sb
    k_head = k_ptr + b * k_sb + kv_h * k_sh
    v_head = v_ptr + b * v_sb + kv_h * v_sh
    acc = tl.zeros([BLOCK_M, HEAD_D], dtype=ACC_DTYPE)
    l_i = tl.zeros([BLOCK_M], dtype=ACC_DTYPE)
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=ACC_DTYPE)
    causal_shift = Nk - Nq
    whole = (Nk // BLOCK_N) * BLOCK_N  # keys in whole blocks
    if CAUSAL:
        # Keys below the block's first row's diagonal are visible to every row: whole blocks there
        # run unmasked; the blocks the diagonal crosses are masked; blocks above it never load.
        hi = tl.minimum(tl.maximum(start_m + BLOCK_M + causal_shift, 0), Nk)
        unmasked = tl.minimum((tl.maximum(start_m + causal_shift + 1, 0) // BLOCK_N) * BLOCK_N, whole)
    else:
        hi = Nk
        unmasked = whole
    acc, l_i, m_i = _attend_key_blocks(acc, l_i, m_i, q, k_head, v_head, k_sn, v_sn, rows, 0, unmasked, Nk, D,
                                       causal_shift, qk_scale, qk_scale_lo, k_ids, q_ids, HAS_IDS, BLOCK_N, HEAD_D, EVEN_D,
                                       False, CAUSAL, UPCAST,
                                       ROUND_BF16, IEEE_DOT, ACC_DTYPE)  # fmt: skip
    acc, l_i, m_i = _attend_key_blocks(acc, l_i, m_i, q, k_head, v_head, k_sn, v_sn, rows, unmasked, hi, Nk, D,
                                       causal_shift, qk_scale, qk_scale_lo, k_ids, q_ids, HAS_IDS, BLOCK_N, HEAD_D, EVEN_D,
                                       True, CAUSAL, UPCAST,
                                       ROUND_BF16, IEEE_DOT, ACC_DTYPE)  # fmt: skip
    o, lse = _finish_rows(acc, l_i, m_i)
    tl.store(o_ptr + b * o_sb + h * o_sh + rows[:, None] * o_sn + dims[None, :],
             cast_for_store(o, o_ptr.dtype.element_ty, ROUND_BF16), mask=row_ok[:, None] & (dims < D)[None, :])  # fmt: skip
    tl.store(lse_ptr + bh.to(tl.int64) * Nq + rows, lse, mask=row_ok)


@triton.jit
def _flash_decode_split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,  # *partial O [B, Hq, Nq, SPLITS, D] float32 contiguous; SPLITS == 1: O itself (strides below)
    lse_ptr,  # *partial lse [B, Hq, Nq, SPLITS] float32 contiguous (SPLITS == 1: lse [B, Hq, Nq])
    q_sb,
    q_sh,
    q_sn,
    k_sb,
    k_sh,
    k_sn,
    v_sb,
    v_sh,
    v_sn,
    o_sb,
    o_sh,
    o_sn,  # fmt: skip
    kv_lens_ptr,  # *[B] (HAS_LENS): batch b's keys are its first kv_lens[b]
    kid_ptr,  # *key ids [B, Nk] (HAS_IDS), as in the prefill kernel
    qid_ptr,  # *query ids [B, Nq] (HAS_QIDS)
    kid_sb,
    qid_sb,
    Hq,
    Hkv,
    GROUP,
    Nq,
    Nk,
    D,
    chunk,  # keys per split, a multiple of BLOCK_N
    qk_scale,
    qk_scale_lo,
    HAS_LENS: tl.constexpr,
    HAS_IDS: tl.constexpr,
    HAS_QIDS: tl.constexpr,
    SPLITS: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,  # >= GROUP * Nq: every query row that reads this KV head
    BLOCK_N: tl.constexpr,
    HEAD_D: tl.constexpr,
    EVEN_D: tl.constexpr,
    UPCAST: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    IEEE_DOT: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
):
    """Program (split, batch · KV head): the GROUP · Nq query rows of one KV head against one chunk
    of the keys; writes each row's normalized partial output and lse for that chunk."""
    split = tl.program_id(0)
    bkv = tl.program_id(1)
    b = (bkv // Hkv).to(tl.int64)
    kv_h = bkv % Hkv
    if HAS_LENS:  # splits past the filled keys walk nothing (lse = -inf: the merge weighs them 0)
        Nk = tl.minimum(tl.maximum(tl.load(kv_lens_ptr + b).to(tl.int32), 0), Nk)
    r = tl.arange(0, BLOCK_M)  # row r: query head kv_h * GROUP + r // Nq, query r % Nq
    h = kv_h * GROUP + r // Nq
    query = r % Nq
    row_ok = r < GROUP * Nq
    dims = tl.arange(0, HEAD_D)
    io_ok = row_ok[:, None] & (dims < D)[None, :]
    q = tl.load(q_ptr + b * q_sb + h[:, None] * q_sh + query[:, None] * q_sn + dims[None, :], mask=io_ok, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    if HAS_QIDS:
        q_ids = tl.load(qid_ptr + b * qid_sb + query, mask=row_ok, other=0)
    else:
        q_ids = tl.zeros([BLOCK_M], dtype=tl.int32)
    acc = tl.zeros([BLOCK_M, HEAD_D], dtype=ACC_DTYPE)
    l_i = tl.zeros([BLOCK_M], dtype=ACC_DTYPE)
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=ACC_DTYPE)
    causal_shift = Nk - Nq
    lo = split * chunk  # causal or not, the last query sees every key: each split walks its whole chunk
    acc, l_i, m_i = _attend_key_blocks(acc, l_i, m_i, q, k_ptr + b * k_sb + kv_h * k_sh, v_ptr + b * v_sb + kv_h * v_sh,
                                       k_sn, v_sn, query, lo, tl.minimum(lo + chunk, Nk), Nk, D, causal_shift, qk_scale,
                                       qk_scale_lo, kid_ptr + b * kid_sb, q_ids, HAS_IDS, BLOCK_N, HEAD_D, EVEN_D, True, CAUSAL,
                                       UPCAST, ROUND_BF16, IEEE_DOT, ACC_DTYPE)  # fmt: skip
    o, lse = _finish_rows(acc, l_i, m_i)
    # SPLITS == 1: straight into O (its strides, its dtype); else into the float32 partials.
    row = (b * Hq + h) * Nq + query
    if SPLITS == 1:
        o_rows = o_ptr + b * o_sb + h[:, None] * o_sh + query[:, None] * o_sn
        tl.store(o_rows + dims[None, :], cast_for_store(o, o_ptr.dtype.element_ty, ROUND_BF16), mask=io_ok)
        tl.store(lse_ptr + row, lse, mask=row_ok)
    else:
        tl.store(o_ptr + (row[:, None] * SPLITS + split) * D + dims[None, :], o, mask=io_ok)
        tl.store(lse_ptr + row * SPLITS + split, lse, mask=row_ok)


@triton.jit
def _flash_decode_merge_kernel(
    part_o_ptr,  # *[B, Hq, Nq, SPLITS, D] float32: each split's normalized output
    part_lse_ptr,  # *[B, Hq, Nq, SPLITS] float32: each split's lse (-inf: the split saw no key)
    o_ptr,  # *O [B, Hq, Nq, D] with strides (o_sb, o_sh, o_sn, 1)
    lse_ptr,  # *lse [B, Hq, Nq] float32
    o_sb,
    o_sh,
    o_sn,  # fmt: skip
    Hq,
    Nq,
    D,
    SPLITS: tl.constexpr,
    SPLITS_P2: tl.constexpr,  # SPLITS rounded up to a power of two
    HEAD_D: tl.constexpr,
    ROUND_BF16: tl.constexpr,
):
    """Program per query row: chapter 6's merge of the SPLITS partial states of that row."""
    row = tl.program_id(0).to(tl.int64)  # (b * Hq + h) * Nq + query
    query = row % Nq
    bh = row // Nq
    b = bh // Hq
    h = bh % Hq
    parts = tl.arange(0, SPLITS_P2)
    dims = tl.arange(0, HEAD_D)
    lse_s = tl.load(part_lse_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=-float("inf"))
    m = tl.max(lse_s, axis=0)
    m_ref = tl.where(m == -float("inf"), 0.0, m)
    w = tl.exp(lse_s - m_ref)  # a split with no key: exp(-inf) = 0
    total = tl.sum(w, axis=0)
    o_s = tl.load(part_o_ptr + (row * SPLITS + parts[:, None]) * D + dims[None, :],
                  mask=(parts < SPLITS)[:, None] & (dims < D)[None, :], other=0.0)  # fmt: skip
    seen = total > 0.0
    o = tl.sum(o_s * w[:, None], axis=0) * tl.where(seen, 1.0 / tl.where(seen, total, 1.0), 0.0)
    tl.store(o_ptr + b * o_sb + h * o_sh + query * o_sn + dims, cast_for_store(o, o_ptr.dtype.element_ty, ROUND_BF16), mask=dims < D)
    tl.store(lse_ptr + row, tl.where(seen, m_ref + tl.log(tl.where(seen, total, 1.0)), -float("inf")))


@triton.jit
def _fp64_dot_probe_kernel(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :])
    tl.store(x_ptr + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :], tl.dot(x, x))


@functools.cache
def fp64_dot_supported() -> bool:
    """Whether this Triton's interpreter takes a float64 ``tl.dot`` (3.9's does; 3.3's asserts):
    asked once, by running a 16 x 16 product."""
    x = torch.eye(16, dtype=torch.float64)
    try:
        _fp64_dot_probe_kernel[(1,)](x)
    except Exception:  # noqa: BLE001 - any failure means: not supported here
        return False
    return bool((x == torch.eye(16, dtype=torch.float64)).all())


# ----------------------------------------------------------------------------------------------
# Heuristics: prefill or decode, tiles, splits
# ----------------------------------------------------------------------------------------------

DECODE_MAX_QUERIES = 16
"""Up to this many queries per head, the split-KV decode path runs (when its packed tile fits)."""

DECODE_MAX_ROWS = 128
"""The decode tile packs ``GROUP · Nq`` rows (every query head of one KV head); at most this many."""

MAX_SPLITS = 128
"""Most chunks the keys are split into on the decode path."""

DECODE_WIDE_MIN_CHUNK = 512
"""Keys per decode program from which its key blocks are 128 wide (not 64) where 3 stages of them
fit shared memory. H200, bf16, 32 query over 8 KV heads, D = 128, device time, same splits
(benchmarks/experiments/attention-decode-wide-nvidia-h200-2026-12-01.json): B = 64 at 1K / 4K /
32K keys 69.7 / 266.9 / 2135.6 us with 64, 66.9 / 237.6 / 1847.4 with 128 (cuDNN 64.6 / 237.1 /
1852.9); B = 8 at 1K and 32K 11.5 and 253.6 -> 10.0 and 237.4; B = 1 at 8K 11.9 -> 10.3. Shorter
chunks keep 64 (the 2026-11-30 sweep: chunks of 128 keys, B = 1, 4K: 8.2 us with 64, 9.8 with 128)."""

MAX_HEAD_DIM = 256

INTERPRETER_BLOCK = 16
"""The interpreter's tile edge (``tl.dot``'s smallest): small blocks, so that tests at small sizes
still cross block edges, key tails and the causal diagonal."""

INTERPRETER_SMS = 4


class Plan(NamedTuple):
    """How one call runs: ``strategy`` is "prefill" (a program per query block) or "decode" (split KV)."""

    strategy: str
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    splits: int = 1
    chunk: int = 0


PREFILL_TILES = (
    # (BLOCK_M, BLOCK_N, num_warps, num_stages), best first; the first that fits shared memory runs.
    # H200, D = 128, bf16 (benchmarks/experiments/attention-tiles-nvidia-h200-2026-11-30.json):
    # 128 x 128 ran at 461-492 TFLOP/s unmasked and 367-478 causal, the best or within 1% of it.
    (128, 128, 8, 3),
    (128, 64, 8, 3),
    (128, 64, 4, 3),
    (64, 64, 4, 3),
    (64, 64, 4, 2),
    (64, 32, 4, 2),
    (32, 32, 4, 2),
    (16, 16, 4, 1),
)


def _tile_bytes(block_m: int, block_n: int, head_d: int, stages: int, element_size: int) -> int:
    """Shared memory of one program: the q tile, and ``stages`` copies of a k and a v tile (the
    software pipeline's buffers)."""
    return (block_m + 2 * stages * block_n) * head_d * element_size


def plan(q_shape, k_shape, dtype: torch.dtype, device: torch.device) -> Optional[Plan]:
    """The path and tiles for ``q [B, Hq, Nq, D]`` against ``k [B, Hkv, Nk, D]``; ``None`` when no
    tile fits the device's shared memory (the call then takes the reference)."""
    B, Hq, Nq, D = q_shape
    Hkv, Nk = k_shape[1], k_shape[2]
    interpreting = runtime.interpreting() or device.type != "cuda"
    shared = None if interpreting else runtime.shared_memory_per_block(device)
    sms = runtime.gpu_sm_count(device) or INTERPRETER_SMS
    return _plan_cached(B, Hq, Nq, D, Hkv, Nk, dtype.itemsize, shared, sms)


@functools.lru_cache(maxsize=4096)
def _plan_cached(B, Hq, Nq, D, Hkv, Nk, element_size, shared, sms) -> Optional[Plan]:
    head_d = max(16, triton.next_power_of_2(D))
    rows = (Hq // Hkv) * Nq
    if Nq <= DECODE_MAX_QUERIES and rows <= DECODE_MAX_ROWS:
        block_m = max(16, triton.next_power_of_2(rows))
        if shared is None:
            block_n, warps, stages = INTERPRETER_BLOCK, 4, 1
        else:
            block_n, warps, stages = (64, 4, 3) if head_d <= 128 else (32, 4, 2)
            while block_n > 16 and _tile_bytes(block_m, block_n, head_d, stages, element_size) > shared:
                block_n //= 2
            if _tile_bytes(block_m, block_n, head_d, stages, element_size) > shared:
                return None
        splits, chunk = _decode_splits(B * Hkv, triton.cdiv(max(Nk, 1), block_n), sms)
        chunk *= block_n  # in keys
        wide = 2 * block_n
        if block_n == 64 and chunk >= DECODE_WIDE_MIN_CHUNK and _tile_bytes(block_m, wide, head_d, stages, element_size) <= shared:
            chunk = triton.cdiv(chunk, wide) * wide
            block_n, splits = wide, triton.cdiv(max(Nk, 1), chunk)
        return Plan("decode", block_m, block_n, warps, stages, splits, chunk)
    if shared is None:
        return Plan("prefill", INTERPRETER_BLOCK, INTERPRETER_BLOCK, 4, 1)
    for block_m, block_n, warps, stages in PREFILL_TILES:
        if head_d > 128 and block_m * head_d > 64 * 128:  # registers: acc is BLOCK_M x HEAD_D float32
            continue
        if _tile_bytes(block_m, block_n, head_d, stages, element_size) <= shared:
            return Plan("prefill", block_m, block_n, warps, stages)
    return None


def _decode_splits(heads: int, blocks: int, sms: int) -> tuple[int, int]:
    """``(splits, chunk)`` of the decode path for ``heads = B · Hkv`` programs per split over
    ``blocks`` key blocks, ``chunk`` in blocks. Memory-bound programs of equal work: the time is
    set by the busiest SM, so the programs should make whole waves over the SMs. With at least
    one program per SM already, one split (more only add partials to write and merge: H200,
    B = 32 and 8 KV heads, 256 programs: one split 123 us, two 140 us at Nk = 4096). Otherwise
    the fewest splits whose programs fill their waves to 95% (8 heads: 16 splits, 128 programs;
    the earlier rule's 17 made 136 programs, 4 SMs with two: 43.2 us where 16 take 38.4 at
    Nk = 32768; benchmarks/results/superseded/ and the attention-decode record)."""
    if heads >= sms:
        return 1, blocks
    best = (0.0, 1, blocks)
    for wanted in range(1, min(MAX_SPLITS, blocks) + 1):
        chunk = triton.cdiv(blocks, wanted)
        splits = triton.cdiv(blocks, chunk)  # no empty trailing split
        programs = splits * heads
        fill = programs / (sms * triton.cdiv(programs, sms))
        if fill >= 0.95:
            return splits, chunk
        best = max(best, (fill, splits, chunk))
    return best[1], best[2]


_LAST_PLAN: dict = {}


def last_plan() -> Optional[Plan]:
    """The plan of the latest call served by a kernel (``None`` before any)."""
    return _LAST_PLAN.get("plan")


# ----------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------

_empty = torch.empty


def _heads_inner(q: torch.Tensor) -> bool:
    """Whether q is a ``[B, Nq, Hq, D]`` buffer seen through ``transpose(1, 2)`` (heads inner to the
    sequence): O then takes that layout too (the kernel and the fake agree through this)."""
    return q.stride(1) < q.stride(2) and q.shape[1] > 1 and q.shape[2] > 1


def _new_output(q: torch.Tensor, empty=None) -> torch.Tensor:
    """O in q's layout when q is ``[B, Hq, Nq, D]`` memory or a ``[B, Nq, Hq, D]`` buffer seen
    through ``transpose(1, 2)``; otherwise ``[B, Hq, Nq, D]`` contiguous. ``empty`` allocates
    (default: the module's ``_empty``; the fake passes ``q.new_empty``)."""
    B, Hq, Nq, D = q.shape
    empty = empty or (lambda *shape: _empty(*shape, dtype=q.dtype, device=q.device))
    if _heads_inner(q):
        return empty(B, Nq, Hq, D).transpose(1, 2)
    return empty(B, Hq, Nq, D)


def _unit_head_stride(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def flash_attention_fwd(q, k, v, causal: bool, sm_scale: float, p: Plan, kv_lens=None, key_ids=None,
                        query_ids=None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Launch the forward for plan ``p``: ``(O, lse)``; ``kv_lens [B]``: batch b attends to its
    first ``kv_lens[b]`` keys only (None: all ``Nk``); ``key_ids [B, Nk]`` and ``query_ids [B, Nq]``
    (int32, unit stride along the sequence): query i sees key j only where their ids are equal
    (no query ids: 0), and a negative key id is padding, seen by no query."""
    q, k, v = (_unit_head_stride(t) for t in (q, k, v))
    kv_lens, key_ids, query_ids = (None if t is None else t.contiguous() for t in (kv_lens, key_ids, query_ids))
    return launcher(q, k, v, causal, sm_scale, p, kv_lens, key_ids, query_ids)(q, k, v, kv_lens, key_ids, query_ids)


def launcher(q, k, v, causal: bool, sm_scale: float, p: Plan, kv_lens=None, key_ids=None, query_ids=None):
    """The launches of plan ``p`` for tensors of these shapes, strides, dtypes and device (unit
    stride along the head dimension), every decision taken now: a function of ``(q, k, v, kv_lens,
    key_ids, query_ids)`` that allocates the outputs and launches the kernels. Eager inference
    keeps it for the next call of the same signature (:func:`attend`)."""
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    acc = acc_torch_dtype(q.dtype)
    head_d = max(16, triton.next_power_of_2(D))
    flags = dict(CAUSAL=causal, BLOCK_M=p.block_m, BLOCK_N=p.block_n, HEAD_D=head_d, EVEN_D=head_d == D,
                 UPCAST=runtime.interpreting() and q.element_size() == 2, ROUND_BF16=round_bf16_by_hand(q.dtype),
                 IEEE_DOT=q.dtype == torch.float32, ACC_DTYPE=acc_dtype(q.dtype), num_warps=p.num_warps,
                 num_stages=p.num_stages, HAS_LENS=kv_lens is not None, HAS_IDS=key_ids is not None,
                 HAS_QIDS=query_ids is not None)  # fmt: skip
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3])
    id_strides = (0 if key_ids is None else key_ids.stride(0), 0 if query_ids is None else query_ids.stride(0))
    qk_scale = split_float(sm_scale * LOG2E)  # (hi, lo): float64 keeps both halves
    heads_inner, dtype, device = _heads_inner(q), q.dtype, q.device
    sizes = (Hq, Hkv, Hq // Hkv, Nq, Nk, D)

    def outputs():
        o = _empty(B, Nq, Hq, D, dtype=dtype, device=device).transpose(1, 2) if heads_inner else _empty(B, Hq, Nq, D, dtype=dtype, device=device)
        return o, _empty(B, Hq, Nq, dtype=acc, device=device)

    if p.strategy == "prefill":
        prefill = _flash_attn_fwd_kernel[(triton.cdiv(Nq, p.block_m), B * Hq)]

        def launch(q, k, v, kv_lens=None, key_ids=None, query_ids=None):
            o, lse = outputs()
            lens, kid, qid = (lse if t is None else t for t in (kv_lens, key_ids, query_ids))  # any pointer where off
            prefill(q, k, v, o, lse, lens, kid, qid, *id_strides, *strides, *o.stride()[:3], Hq, sizes[2], Nq, Nk, D, *qk_scale,
                    **flags)  # fmt: skip
            return o, lse

        return launch
    split = _flash_decode_split_kernel[(p.splits, B * Hkv)]
    if p.splits == 1:

        def launch(q, k, v, kv_lens=None, key_ids=None, query_ids=None):
            o, lse = outputs()
            lens, kid, qid = (lse if t is None else t for t in (kv_lens, key_ids, query_ids))
            split(q, k, v, o, lse, *strides, *o.stride()[:3], lens, kid, qid, *id_strides, *sizes, p.chunk, *qk_scale, SPLITS=1,
                  **flags)  # fmt: skip
            return o, lse

        return launch
    merge = _flash_decode_merge_kernel[(B * Hq * Nq,)]
    merge_flags = dict(SPLITS=p.splits, SPLITS_P2=triton.next_power_of_2(p.splits), HEAD_D=head_d, ROUND_BF16=flags["ROUND_BF16"],
                       num_warps=4)  # fmt: skip

    def launch(q, k, v, kv_lens=None, key_ids=None, query_ids=None):
        o, lse = outputs()
        part_o = _empty(B, Hq, Nq, p.splits, D, dtype=acc, device=device)
        part_lse = _empty(B, Hq, Nq, p.splits, dtype=acc, device=device)
        lens, kid, qid = (lse if t is None else t for t in (kv_lens, key_ids, query_ids))
        split(q, k, v, part_o, part_lse, *strides, 0, 0, 0, lens, kid, qid, *id_strides, *sizes, p.chunk, *qk_scale,
              SPLITS=p.splits, **flags)  # fmt: skip
        merge(part_o, part_lse, o, lse, *o.stride()[:3], Hq, Nq, D, **merge_flags)
        return o, lse

    return launch


# ----------------------------------------------------------------------------------------------
# Routing
# ----------------------------------------------------------------------------------------------

OP = "flash_attention"
BACKWARD_OP = "flash_attention_backward"


def _reference(q, k, v, causal, sm_scale, kv_lens=None, key_ids=None, query_ids=None):
    o, lse = flash_attention_ref(q, k, v, causal, sm_scale, kv_lens=kv_lens, key_ids=key_ids, query_ids=query_ids)
    out = _new_output(q) if q.numel() else torch.empty_like(q)
    out.copy_(o)
    return out, lse.to(acc_torch_dtype(q.dtype))


def _forward_routed(q, k, v, causal: bool, sm_scale: float, kv_lens=None, key_ids=None, query_ids=None):
    if q.numel() == 0 or k.shape[2] == 0:
        runtime.record_empty(OP)
        return _reference(q, k, v, causal, sm_scale, kv_lens, key_ids, query_ids)
    p = plan(q.shape, k.shape, q.dtype, q.device)
    unsupported = None
    if q.dtype == torch.float64 and (q.device.type != "cpu" or not runtime.interpreting()):
        unsupported = "float64 attention runs on the interpreter only (its tests' oracle path); on a GPU, the reference"
    elif q.dtype == torch.float64 and not fp64_dot_supported():
        unsupported = f"this Triton ({triton.__version__}) has no float64 tl.dot in its interpreter"
    elif q.shape[-1] > MAX_HEAD_DIM:
        unsupported = f"head dim {q.shape[-1]} > {MAX_HEAD_DIM}: the kernel keeps a [BLOCK_M, D] tile in registers"
    elif p is None:
        unsupported = f"no tile fits this device's shared memory for head dim {q.shape[-1]}"

    def kernel():
        out = flash_attention_fwd(q, k, v, causal, sm_scale, p, kv_lens, key_ids, query_ids)
        _LAST_PLAN["plan"] = p
        return out

    return runtime.dispatch(OP, device=q.device, dtype=q.dtype, kernel=kernel,
                            reference=lambda: _reference(q, k, v, causal, sm_scale, kv_lens, key_ids, query_ids),
                            unsupported=unsupported)  # fmt: skip


def _backward_reference(do, dlse, q, k, v, causal, sm_scale, kv_lens=None, key_ids=None, query_ids=None):
    return runtime.dispatch_reference(
        BACKWARD_OP, "no-kernel", "FlashAttention's backward has no Triton kernel here: the hand-derived "
        "backward in PyTorch ops recomputes P from lse (memory B*Hq*Nq*Nk)",
        lambda: flash_attention_bwd_ref(do, q, k, v, causal, sm_scale, dlse=dlse, kv_lens=kv_lens, key_ids=key_ids,
                                        query_ids=query_ids),
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# The PyTorch operators
# ----------------------------------------------------------------------------------------------


@torch.library.custom_op("tritonforge::flash_attention", mutates_args=())
def flash_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float,
                       kv_lens: Optional[torch.Tensor] = None, key_ids: Optional[torch.Tensor] = None,
                       query_ids: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(O, lse)``, routed; differentiable through :func:`backward`."""
    return _forward_routed(q, k, v, causal, sm_scale, kv_lens, key_ids, query_ids)


@flash_attention_op.register_fake
def _(q, k, v, causal, sm_scale, kv_lens=None, key_ids=None, query_ids=None):
    B, Hq, Nq, D = q.shape
    return _new_output(q, q.new_empty), q.new_empty(B, Hq, Nq, dtype=acc_torch_dtype(q.dtype))


@torch.library.custom_op("tritonforge::flash_attention_backward", mutates_args=())
def flash_attention_backward_op(do: torch.Tensor, dlse: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                causal: bool, sm_scale: float,
                                kv_lens: Optional[torch.Tensor] = None, key_ids: Optional[torch.Tensor] = None,
                                query_ids: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(dq, dk, dv)``, through the routed reference backward."""
    return tuple(g.contiguous() for g in _backward_reference(do, dlse, q, k, v, causal, sm_scale, kv_lens, key_ids, query_ids))


@flash_attention_backward_op.register_fake
def _(do, dlse, q, k, v, causal, sm_scale, kv_lens=None, key_ids=None, query_ids=None):
    return torch.empty_like(q, memory_format=torch.contiguous_format), k.new_empty(k.shape), v.new_empty(v.shape)


def setup_context(ctx, inputs, output):
    q, k, v, causal, sm_scale, kv_lens, key_ids, query_ids = inputs
    ctx.save_for_backward(q, k, v, kv_lens, key_ids, query_ids)
    ctx.causal, ctx.sm_scale = causal, sm_scale


def backward(ctx, do, dlse):
    q, k, v, *masks = ctx.saved_tensors
    do = torch.zeros_like(q) if do is None else do
    dlse = torch.zeros(q.shape[:3], dtype=acc_torch_dtype(q.dtype), device=q.device) if dlse is None else dlse
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():  # create_graph: differentiable ops
        dq, dk, dv = _backward_reference(do, dlse, q, k, v, ctx.causal, ctx.sm_scale, *masks)
    else:
        dq, dk, dv = flash_attention_backward_op(do, dlse, q, k, v, ctx.causal, ctx.sm_scale, *masks)
    return dq, dk, dv, None, None, None, None, None


flash_attention_op.register_autograd(backward, setup_context=setup_context)


def _vmap_rule(info, in_dims, q, k, v, causal, sm_scale, kv_lens=None, key_ids=None, query_ids=None):
    """``vmap``: the mapped dimension joins the batch dimension."""
    size = info.batch_size

    def fold(t, dim):
        t = t.unsqueeze(0).expand(size, *t.shape) if dim is None else t.movedim(dim, 0)
        return t.reshape(size * t.shape[1], *t.shape[2:])

    masks = [None if t is None else fold(t, dim) for t, dim in zip((kv_lens, key_ids, query_ids), in_dims[5:])]
    o, lse = flash_attention_op(fold(q, in_dims[0]), fold(k, in_dims[1]), fold(v, in_dims[2]), causal, sm_scale, *masks)
    return (o.reshape(size, -1, *o.shape[1:]), lse.reshape(size, -1, *lse.shape[1:])), (0, 0)


flash_attention_op.register_vmap(_vmap_rule)


# ----------------------------------------------------------------------------------------------
# The public function
# ----------------------------------------------------------------------------------------------


def _check_kv_lens(kv_lens, q, k) -> None:
    """``kv_lens``: a 1-D integer tensor of q's batch size on q's device, each value in
    ``[0, Nk]``. The values are checked on the host (one sync) except while compiling, capturing a
    CUDA graph or under a functorch transform, where reading them is impossible; the kernels
    clamp them to ``[0, Nk]`` so that no access leaves the buffer."""
    if not isinstance(kv_lens, torch.Tensor):
        raise TypeError(f"kv_lens must be a tensor or None, got {type(kv_lens).__name__}")
    if kv_lens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"kv_lens must be int32 or int64, got {kv_lens.dtype}")
    if tuple(kv_lens.shape) != (q.shape[0],):
        raise ValueError(f"kv_lens must have shape [B] = [{q.shape[0]}] (one length per batch row), got {tuple(kv_lens.shape)}")
    if kv_lens.device != q.device:
        raise ValueError(f"kv_lens is on {kv_lens.device} but q is on {q.device}")
    if torch.compiler.is_compiling() or torch._C._functorch.peek_interpreter_stack() is not None:
        return  # (first: Dynamo cannot trace is_current_stream_capturing)
    if kv_lens.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    if kv_lens.numel() and not bool(((kv_lens >= 0) & (kv_lens <= k.shape[2])).all()):
        bad = kv_lens[(kv_lens < 0) | (kv_lens > k.shape[2])]
        raise ValueError(f"kv_lens must lie in [0, {k.shape[2]}] (the keys k holds), got {bad[:4].tolist()}")


def _check(q, k, v, causal, sm_scale, return_lse) -> float:
    for name, t in (("q", q), ("k", k), ("v", v)):
        runtime.check_tensor(name, t, dtypes=ATTENTION_DTYPES)
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [B, H, N, D], got shape {tuple(t.shape)}")
    runtime.check_same_device(q=q, k=k, v=v)
    runtime.check_same_dtype(q=q, k=k, v=v)
    runtime.check_same_shape(k=k, v=v)
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"q has batch {q.shape[0]} but k has batch {k.shape[0]}")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"q has head dim {q.shape[3]} but k and v have {k.shape[3]}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"q has {q.shape[1]} heads and k {k.shape[1]}: the KV heads must divide the query heads (GQA)")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__}")
    if sm_scale is None:
        return q.shape[3] ** -0.5 if q.shape[3] else 1.0
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, numbers.Real):
        raise TypeError(f"sm_scale must be a real number or None, got {type(sm_scale).__name__}")
    if not math.isfinite(sm_scale):
        raise ValueError(f"sm_scale must be finite, got {sm_scale}")
    return float(sm_scale)


def _check_mask_args(key_padding_mask, segment_ids, q, k) -> None:
    """``key_padding_mask [B, Nk]`` bool and ``segment_ids [B, N]`` int32/int64 (``Nq == Nk == N``),
    on q's device. Only shapes, dtypes and devices are checked: nothing is read on the host."""
    B, Nq, Nk = q.shape[0], q.shape[2], k.shape[2]
    if key_padding_mask is not None:
        if not isinstance(key_padding_mask, torch.Tensor):
            raise TypeError(f"key_padding_mask must be a tensor or None, got {type(key_padding_mask).__name__}")
        if key_padding_mask.dtype != torch.bool:
            raise TypeError(f"key_padding_mask must be bool (True: the key may be attended), got {key_padding_mask.dtype}")
        if tuple(key_padding_mask.shape) != (B, Nk):
            raise ValueError(f"key_padding_mask must have shape [B, Nk] = [{B}, {Nk}], got {tuple(key_padding_mask.shape)}")
        if key_padding_mask.device != q.device:
            raise ValueError(f"key_padding_mask is on {key_padding_mask.device} but q is on {q.device}")
    if segment_ids is not None:
        if not isinstance(segment_ids, torch.Tensor):
            raise TypeError(f"segment_ids must be a tensor or None, got {type(segment_ids).__name__}")
        if segment_ids.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"segment_ids must be int32 or int64, got {segment_ids.dtype}")
        if Nq != Nk:
            raise ValueError(f"segment_ids needs as many queries as keys (packed sequences), got Nq = {Nq} and Nk = {Nk}")
        if tuple(segment_ids.shape) != (B, Nq):
            raise ValueError(f"segment_ids must have shape [B, N] = [{B}, {Nq}], got {tuple(segment_ids.shape)}")
        if segment_ids.device != q.device:
            raise ValueError(f"segment_ids is on {segment_ids.device} but q is on {q.device}")


def mask_ids(key_padding_mask=None, segment_ids=None):
    """``(key_ids, query_ids)``, the kernels' form of a key-padding mask and of packed sequences'
    segment ids (int32, each ``None`` when not needed): query i sees key j only where
    ``key_ids[b, j] == query_ids[b, i]`` (no query ids: 0) and ``key_ids[b, j] >= 0``."""
    ids = None if segment_ids is None else segment_ids.to(torch.int32)
    if key_padding_mask is None:
        return ids, ids
    key_ids = torch.where(key_padding_mask, 0 if ids is None else ids, -1).to(torch.int32)
    return key_ids, ids


def attend(q, k, v, causal: bool, scale: float, kv_lens=None, key_ids=None, query_ids=None):
    """``(O, lse)`` for checked arguments: the routed op (a custom op under autograd, compile and
    functorch; the routed kernel directly in eager inference). :func:`flash_attention` calls it
    after its checks; ``tritonforge.models.hf`` calls it with masks it built itself."""
    masks = (kv_lens, key_ids, query_ids)
    key = _signature(q, k, v, causal, scale, masks) if runtime.eager_fast_path() else None
    out = runtime.run_remembered(key, q, k, v, *masks)  # this signature, served by the kernels before
    if out is not runtime.MISS:
        return out
    if torch.compiler.is_compiling():
        return flash_attention_op(q, k, v, causal, scale, *masks)
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    mode = runtime.autograd_mode_unsupported(q, k, v, vmap_ok=not needs_grad)
    if mode is not None:
        return runtime.dispatch_reference(OP, "autograd", mode, lambda: _reference_graph(q, k, v, causal, scale, *masks))
    if needs_grad or torch._C._functorch.peek_interpreter_stack() is not None:
        return flash_attention_op(q, k, v, causal, scale, *masks)
    out = _forward_routed(q, k, v, causal, scale, *masks)  # eager inference: skip the dispatcher
    runtime.remember_served(OP, key, lambda: _remembered_launch(q, k, v, causal, scale, masks))
    return out


def _signature(q, k, v, causal, scale, masks):
    """What decides an eager inference call (shapes, strides, dtypes, devices, the flags; the masks'
    layouts, not their values); ``None`` for arguments that are not tensors."""
    try:
        return (OP, q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device, v.shape, v.stride(), v.dtype,
                v.device, causal, scale,
                *(None if t is None else (t.shape, t.stride(), t.dtype, t.device) for t in masks))  # fmt: skip
    except (AttributeError, TypeError):
        return None


def _remembered_launch(q, k, v, causal, scale, masks):
    """:func:`launcher` for this signature, or ``None`` where a call needs more than the launch (a
    copy of an input, a mask that is not contiguous)."""
    if any(t.stride(-1) != 1 and t.shape[-1] != 1 for t in (q, k, v)):
        return None
    if any(t is not None and not t.is_contiguous() for t in masks):
        return None
    p = plan(q.shape, k.shape, q.dtype, q.device)
    if p is None:
        return None
    launch = launcher(q, k, v, causal, scale, p, *masks)

    def remembered(*args):
        out = launch(*args)
        _LAST_PLAN["plan"] = p
        return out

    return remembered


def _reference_graph(q, k, v, causal, scale, kv_lens, key_ids, query_ids):
    return flash_attention_ref(q, k, v, causal, scale, kv_lens=kv_lens, key_ids=key_ids, query_ids=query_ids)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    sm_scale: Optional[float] = None, *, return_lse: bool = False,
                    kv_lens: Optional[torch.Tensor] = None, key_padding_mask: Optional[torch.Tensor] = None,
                    segment_ids: Optional[torch.Tensor] = None):  # fmt: skip
    """Attention without the ``Nq x Nk`` score matrix in memory: ``softmax(q k^T * sm_scale) v``.

    Causal masking aligns the last query with the last key (query ``i`` sees key ``j`` iff
    ``j <= i + Nk - Nq``); a query that sees no key gets zeros. Grouped-query and multi-query
    attention read key/value head ``h // (Hq // Hkv)`` for query head ``h``. Up to
    ``DECODE_MAX_QUERIES`` queries per head take the split-KV decode path (:func:`plan`;
    :func:`last_plan` says which ran). Usable under ``torch.compile(fullgraph=True)``, CUDA graphs
    and ``torch.func.vmap``; differentiable through the PyTorch backward (a routed fallback: no
    backward kernel yet).

    Args:
        q: ``[B, Hq, Nq, D]`` float16, bfloat16, float32 (float64: interpreter); any strides with a unit-stride last
            dimension (a ``[B, Nq, Hq, D]`` tensor's ``transpose(1, 2)`` is read in place).
        k: ``[B, Hkv, Nk, D]``, q's dtype and device, ``Hkv`` dividing ``Hq``.
        v: like k.
        causal: bottom-right causal mask.
        sm_scale: the score scale; ``D ** -0.5`` when None.
        return_lse: also return ``lse [B, Hq, Nq]`` (float32; float64 for float64), each row's logsumexp of the scaled
            scores (``-inf`` for a row with no key).
        kv_lens: ``[B]`` int32/int64 on q's device, or None: batch row b has only its first ``kv_lens[b]`` keys (a
            preallocated KV cache; the causal diagonal ends at the last of them). The lengths live on the device, so a
            decode step over a fixed-size cache keeps its shapes and can be captured in a CUDA graph.
        key_padding_mask: ``[B, Nk]`` bool on q's device, or None: key j of batch row b is attended only where True
            (left or right padding, a hole anywhere). The causal diagonal does not move. A padded key's value is
            never read into the output, NaN included; a query that sees no key gets zeros.
        segment_ids: ``[B, N]`` int32/int64 with ``Nq == Nk == N``, or None: packed sequences, query i sees key j only
            where their segment ids are equal (a negative id: padding, seen by no query).

    Returns:
        ``O [B, Hq, Nq, D]`` in q's dtype (in q's memory layout when q is ``[B, H, N, D]`` or
        ``[B, N, H, D]`` memory), or ``(O, lse)``. ``tfg.last_path("flash_attention")`` tells which
        path computed it.
    """
    plain = kv_lens is None and key_padding_mask is None and segment_ids is None
    key = None
    if plain and runtime.eager_fast_path():  # no mask: the signature decides everything, checks included
        signature = _signature(q, k, v, causal, sm_scale, (None, None, None))
        key = None if signature is None else (OP, "public", return_lse, signature)
        out = runtime.run_remembered(key, q, k, v)
        if out is not runtime.MISS:
            return out
    scale = _check(q, k, v, causal, sm_scale, return_lse)
    if kv_lens is not None:
        _check_kv_lens(kv_lens, q, k)
    key_ids = query_ids = None
    if key_padding_mask is not None or segment_ids is not None:
        _check_mask_args(key_padding_mask, segment_ids, q, k)
        key_ids, query_ids = mask_ids(key_padding_mask, segment_ids)
    o, lse = attend(q, k, v, causal, scale, kv_lens, key_ids, query_ids)
    if key is not None:
        runtime.remember_served(OP, key, lambda: _public_launch(q, k, v, causal, scale, return_lse))
    return (o, lse) if return_lse else o


def _public_launch(q, k, v, causal, scale, return_lse):
    launch = _remembered_launch(q, k, v, causal, scale, (None, None, None))
    if launch is None:
        return None
    if return_lse:
        return launch
    return lambda q, k, v: launch(q, k, v)[0]
