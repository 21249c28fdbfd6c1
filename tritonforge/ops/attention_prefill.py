r"""FlashAttention-2's prefill path (chapter 7): a program per block of queries, the online softmax
in registers, causal block skipping, grouped-query heads. Its inner loop (:func:`_attend_key_blocks`)
serves the decode path too (:mod:`tritonforge.ops.attention_decode`); the op that chooses between the
two paths, and the public function, are :mod:`tritonforge.ops.attention`.

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

Arithmetic: scores, the online state and ``acc`` in float32 (float64 for float64 inputs, the
interpreter's gradcheck-grade path); ``tl.dot`` in IEEE float32 for float32 inputs, not TF32; ``P``
is rounded to the input dtype before ``P @ v`` (as every FlashAttention does, for the tensor cores);
``O`` in q's dtype, ``lse`` in the accumulator's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Optional

import torch

from tritonforge import hardware, launches
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, acc_torch_dtype, cast_for_store, round_bf16_by_hand, split_float

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


# ----------------------------------------------------------------------------------------------
# Heuristics: the prefill tiles
# ----------------------------------------------------------------------------------------------

INTERPRETER_BLOCK = 16
"""The interpreter's tile edge (``tl.dot``'s smallest): small blocks, so that tests at small sizes
still cross block edges, key tails and the causal diagonal."""


class Plan(NamedTuple):
    """How one call runs: ``strategy`` is "prefill" (a program per query block) or "decode" (split
    KV, :mod:`tritonforge.ops.attention_decode`)."""

    strategy: str
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    splits: int = 1
    chunk: int = 0


PREFILL_TILES = (
    # (BLOCK_M, BLOCK_N, num_warps, num_stages), best first; the first that fits shared memory runs.
    # On the H200 (D = 128, bf16) 128 x 128 measured the best or within 1% of it, unmasked and causal
    # (benchmarks/NOTES.md, "2026-12-04 (session 17), issue 31", its attention and SwiGLU numbers).
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


def prefill_plan(head_d: int, element_size: int, shared: Optional[int]) -> Optional[Plan]:
    """The prefill tiles for a head dimension padded to ``head_d``: the first of :data:`PREFILL_TILES`
    whose buffers fit ``shared`` bytes of shared memory (None: the interpreter, its small tile);
    ``None`` when none fits."""
    if shared is None:
        return Plan("prefill", INTERPRETER_BLOCK, INTERPRETER_BLOCK, 4, 1)
    for block_m, block_n, warps, stages in PREFILL_TILES:
        if head_d > 128 and block_m * head_d > 64 * 128:  # registers: acc is BLOCK_M x HEAD_D float32
            continue
        if _tile_bytes(block_m, block_n, head_d, stages, element_size) <= shared:
            return Plan("prefill", block_m, block_n, warps, stages)
    return None


# ----------------------------------------------------------------------------------------------
# Launch
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


class KernelArgs(NamedTuple):
    """What the kernels of either path take from one call signature, decided once: the
    constexprs and launch options, q's, k's and v's (batch, head, row) strides, the id tensors' row
    strides, ``sm_scale · log2(e)`` as two float32 halves, and the allocator of ``(O, lse)``."""

    flags: dict
    strides: tuple
    id_strides: tuple
    qk_scale: tuple
    outputs: Callable


def kernel_args(q, k, v, causal: bool, sm_scale: float, p: Plan, kv_lens=None, key_ids=None, query_ids=None) -> KernelArgs:
    """The :class:`KernelArgs` of plan ``p`` for tensors of these shapes, strides, dtypes and device."""
    B, Hq, Nq, D = q.shape
    acc = acc_torch_dtype(q.dtype)
    head_d = max(16, triton.next_power_of_2(D))
    flags = dict(CAUSAL=causal, BLOCK_M=p.block_m, BLOCK_N=p.block_n, HEAD_D=head_d, EVEN_D=head_d == D,
                 UPCAST=hardware.interpreting() and q.element_size() == 2, ROUND_BF16=round_bf16_by_hand(q.dtype),
                 IEEE_DOT=q.dtype == torch.float32, ACC_DTYPE=acc_dtype(q.dtype), num_warps=p.num_warps,
                 num_stages=p.num_stages, HAS_LENS=kv_lens is not None, HAS_IDS=key_ids is not None,
                 HAS_QIDS=query_ids is not None)  # fmt: skip
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3])
    id_strides = (0 if key_ids is None else key_ids.stride(0), 0 if query_ids is None else query_ids.stride(0))
    qk_scale = split_float(sm_scale * LOG2E)  # (hi, lo): float64 keeps both halves
    heads_inner, dtype, device = _heads_inner(q), q.dtype, q.device

    def outputs():
        o = _empty(B, Nq, Hq, D, dtype=dtype, device=device).transpose(1, 2) if heads_inner else _empty(B, Hq, Nq, D, dtype=dtype, device=device)
        return o, _empty(B, Hq, Nq, dtype=acc, device=device)

    return KernelArgs(flags, strides, id_strides, qk_scale, outputs)


def prefill_launcher(q, k, p: Plan, args: KernelArgs):
    """The prefill launch of plan ``p``: a function of ``(q, k, v, kv_lens, key_ids, query_ids)``
    that allocates ``(O, lse)`` and launches one program per (query block, batch · query head)."""
    B, Hq, Nq, D = q.shape
    Nk, group = k.shape[2], q.shape[1] // k.shape[1]
    outputs, strides, id_strides, qk_scale = args.outputs, args.strides, args.id_strides, args.qk_scale
    prefill = launches.bound_launch(_flash_attn_fwd_kernel, (triton.cdiv(Nq, p.block_m), B * Hq), **args.flags)

    def launch(q, k, v, kv_lens=None, key_ids=None, query_ids=None):
        o, lse = outputs()
        lens, kid, qid = (lse if t is None else t for t in (kv_lens, key_ids, query_ids))  # any pointer where off
        prefill(q, k, v, o, lse, lens, kid, qid, *id_strides, *strides, *o.stride()[:3], Hq, group, Nq, Nk, D, *qk_scale)
        return o, lse

    return launch
