r"""FlashAttention's decode path (chapter 7): split-KV (Flash-Decoding) for a few queries per head.

:func:`tritonforge.ops.attention.plan` takes this path for ``Nq <= DECODE_MAX_QUERIES`` (when the
packed tile fits, :func:`is_decode`). One query block per head would leave most of the GPU idle
while it streams the whole KV cache. So the keys are split into ``splits`` chunks, one program per
(chunk, batch, KV head); the program packs the ``GROUP · Nq`` query rows that share that KV head
into one tile (each key is read once for all of them), folds its chunk's key blocks into the
online state with the prefill's inner loop (:func:`tritonforge.ops.attention_prefill._attend_key_blocks`),
writes its normalized partial output and its ``lse``, and a second kernel merges a row's partials
with chapter 6's rule:

.. math::

    \operatorname{lse} = \log \textstyle\sum_s e^{\operatorname{lse}_s}, \qquad
    O = \textstyle\sum_s e^{\operatorname{lse}_s - \operatorname{lse}}\, O_s.

A split past a preallocated KV cache's length (``kv_lens``) walks nothing: its ``lse`` is ``-inf``
and the merge weighs it 0. With one split, the program writes O and lse itself (no merge).
"""

from __future__ import annotations

from typing import Optional

import torch

from tritonforge import launches
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_torch_dtype, cast_for_store
from tritonforge.ops.attention_prefill import INTERPRETER_BLOCK, KernelArgs, Plan, _attend_key_blocks, _finish_rows, _tile_bytes

# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# Heuristics: when to split, tiles, splits
# ----------------------------------------------------------------------------------------------

DECODE_MAX_QUERIES = 16
"""Up to this many queries per head, the split-KV decode path runs (when its packed tile fits)."""

DECODE_MAX_ROWS = 128
"""The decode tile packs ``GROUP · Nq`` rows (every query head of one KV head); at most this many."""

MAX_SPLITS = 128
"""Most chunks the keys are split into on the decode path."""

DECODE_WIDE_MIN_CHUNK = 512
"""Keys per decode program from which its key blocks are 128 wide (not 64) where 3 stages of them
fit shared memory: with that many keys a program's wider blocks measured faster on the H200 at
every batch size, shorter chunks faster with 64 (benchmarks/NOTES.md, "2026-12-04 (session 17), issue 31",
its attention and SwiGLU numbers)."""


def is_decode(Nq: int, rows: int) -> bool:
    """Whether a call of ``Nq`` queries per head, ``rows = GROUP · Nq`` query rows per KV head,
    takes the decode path."""
    return Nq <= DECODE_MAX_QUERIES and rows <= DECODE_MAX_ROWS


def decode_plan(heads: int, rows: int, Nk: int, head_d: int, element_size: int, shared: Optional[int], sms: int) -> Optional[Plan]:
    """The decode plan for ``heads = B · Hkv`` programs per split, each packing ``rows`` query rows,
    over ``Nk`` keys with a head dimension padded to ``head_d``; ``shared`` bytes of shared memory
    per block (None: the interpreter). ``None`` when no tile fits."""
    block_m = max(16, triton.next_power_of_2(rows))
    if shared is None:
        block_n, warps, stages = INTERPRETER_BLOCK, 4, 1
    else:
        block_n, warps, stages = (64, 4, 3) if head_d <= 128 else (32, 4, 2)
        while block_n > 16 and _tile_bytes(block_m, block_n, head_d, stages, element_size) > shared:
            block_n //= 2
        if _tile_bytes(block_m, block_n, head_d, stages, element_size) > shared:
            return None
    splits, chunk = _decode_splits(heads, triton.cdiv(max(Nk, 1), block_n), sms)
    chunk *= block_n  # in keys
    wide = 2 * block_n
    if block_n == 64 and chunk >= DECODE_WIDE_MIN_CHUNK and _tile_bytes(block_m, wide, head_d, stages, element_size) <= shared:
        chunk = triton.cdiv(chunk, wide) * wide
        block_n, splits = wide, triton.cdiv(max(Nk, 1), chunk)
    return Plan("decode", block_m, block_n, warps, stages, splits, chunk)


def _decode_splits(heads: int, blocks: int, sms: int) -> tuple[int, int]:
    """``(splits, chunk)`` of the decode path for ``heads = B · Hkv`` programs per split over
    ``blocks`` key blocks, ``chunk`` in blocks. Memory-bound programs of equal work: the time is
    set by the busiest SM, so the programs should make whole waves over the SMs. With at least
    one program per SM already, one split (more only add partials to write and merge). Otherwise
    the fewest splits whose programs fill their waves to 95%: one program too many leaves a few SMs
    with two while the rest idle (the measurements: benchmarks/NOTES.md, "2026-12-04 (session 17), issue 31",
    its attention and SwiGLU numbers)."""
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


# ----------------------------------------------------------------------------------------------
# Launch
# ----------------------------------------------------------------------------------------------

_empty = torch.empty


def decode_launcher(q, k, p: Plan, args: KernelArgs):
    """The decode launches of plan ``p``: a function of ``(q, k, v, kv_lens, key_ids, query_ids)``
    that allocates ``(O, lse)`` and launches the split kernel, then (more than one split) the merge."""
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    acc, device = acc_torch_dtype(q.dtype), q.device
    sizes = (Hq, Hkv, Hq // Hkv, Nq, Nk, D)
    outputs, strides, id_strides, qk_scale = args.outputs, args.strides, args.id_strides, args.qk_scale
    split = launches.bound_launch(_flash_decode_split_kernel, (p.splits, B * Hkv), SPLITS=p.splits, **args.flags)
    if p.splits == 1:

        def launch(q, k, v, kv_lens=None, key_ids=None, query_ids=None):
            o, lse = outputs()
            lens, kid, qid = (lse if t is None else t for t in (kv_lens, key_ids, query_ids))
            split(q, k, v, o, lse, *strides, *o.stride()[:3], lens, kid, qid, *id_strides, *sizes, p.chunk, *qk_scale)
            return o, lse

        return launch
    merge = launches.bound_launch(_flash_decode_merge_kernel, (B * Hq * Nq,), SPLITS=p.splits, SPLITS_P2=triton.next_power_of_2(p.splits),
                                 HEAD_D=args.flags["HEAD_D"], ROUND_BF16=args.flags["ROUND_BF16"], num_warps=4)  # fmt: skip

    def launch(q, k, v, kv_lens=None, key_ids=None, query_ids=None):
        o, lse = outputs()
        part_o = _empty(B, Hq, Nq, p.splits, D, dtype=acc, device=device)
        part_lse = _empty(B, Hq, Nq, p.splits, dtype=acc, device=device)
        lens, kid, qid = (lse if t is None else t for t in (kv_lens, key_ids, query_ids))
        split(q, k, v, part_o, part_lse, *strides, 0, 0, 0, lens, kid, qid, *id_strides, *sizes, p.chunk, *qk_scale)
        merge(part_o, part_lse, o, lse, *o.stride()[:3], Hq, Nq, D)
        return o, lse

    return launch
