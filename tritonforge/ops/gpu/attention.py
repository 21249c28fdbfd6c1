r"""FlashAttention-2's prefill forward on Hopper (sm_90): the same algorithm as
:mod:`tritonforge.ops.attention_prefill` (chapter 7), with its tiles moved by the copy engine.

What changes from the portable kernel, and why (chapter 7b, "What Hopper changes"):

- **Tiles arrive through tensor descriptors** (``tl.make_tensor_descriptor``, one per program and
  tensor: the ``[N, D]`` rows of its (batch, head)). On sm_90 Triton lowers a descriptor's load to
  the tensor memory accelerator (TMA): one thread asks for a whole ``[BLOCK_N, D]`` tile, the
  copy engine writes it into shared memory and signals a barrier, and no registers or address
  arithmetic are spent on it. Rows past the end read as zeros and stores past it are dropped, so
  any ``N`` works with the masks of the scores alone.
- **The loop is pipelined by Triton's ``tl.range``** (``num_stages`` tiles in flight), and may
  be **warp-specialized** (``warp_specialize=True``: a producer warp issues the copies, the others
  compute), the plan's choice from a recorded sweep.
- **One fused multiply-add per score**: the row maximum is taken on the raw scores and scaled
  once, so the exponent's argument ``s · c·log2(e) − m`` is one FMA instead of a multiply and a
  subtract (the softmax's arithmetic, not the matmuls, limits attention on Hopper).

Everything else is the portable kernel's: causal block skipping with unmasked whole blocks, the
bottom-right causal alignment, grouped-query heads read without copies, ``kv_lens`` and key/query
ids, ``O = 0`` and ``lse = -inf`` for a query that sees no key. 16-bit inputs, head dims 64 and
128, and strides the copy engine accepts (16-byte aligned rows) only: everything else takes the
portable kernel (:func:`eligible`).
"""

from __future__ import annotations

from typing import Optional

import torch

from tritonforge import hardware, launches
from tritonforge._triton import tl, triton
from tritonforge.ops.attention_prefill import Plan, _finish_rows

HEAD_DIMS = (64, 128)
"""Head dims the Hopper kernel can serve (a tile's row is one TMA box of 128 or 256 bytes); the
plan routes to it only those in :data:`HOPPER_TILES`."""


@triton.jit
def _hopper_key_blocks(acc, l_i, m_i, q, k_desc, v_desc, query_pos, lo, hi, Nk, causal_shift, qk_scale, key_ids, query_ids,
                       HAS_IDS: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr,
                       STAGES: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):  # fmt: skip
    """Fold key blocks ``[lo, hi)`` into ``(acc, l, m)``; ``m`` in log2 units of the scaled scores."""
    cols = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, num_stages=STAGES, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        keys = start_n + cols
        k = k_desc.load([start_n, 0])
        s = tl.dot(q, k.T)  # raw scores; scaled inside the exponent's FMA
        if MASK:
            visible = (keys < Nk)[None, :]
            if CAUSAL:
                visible = visible & (keys[None, :] <= query_pos[:, None] + causal_shift)
            s = tl.where(visible, s, -float("inf"))
        if HAS_IDS:
            kid = tl.load(key_ids + keys, mask=keys < Nk, other=-1)
            s = tl.where((kid[None, :] == query_ids[:, None]) & (kid >= 0)[None, :], s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
        if MASK or HAS_IDS:  # a row that has seen no key yet keeps m = -inf: subtract 0 there
            m_ref = tl.where(m_new == -float("inf"), 0.0, m_new)
        else:
            m_ref = m_new
        p = tl.exp2(s * qk_scale - m_ref[:, None])
        alpha = tl.exp2(m_i - m_ref)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        v = v_desc.load([start_n, 0])
        if HAS_IDS:
            v = tl.where((kid >= 0)[:, None], v, 0.0)  # 0 * NaN is NaN: a padded value must not reach acc
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _flash_attn_fwd_hopper_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, kv_lens_ptr, kid_ptr, qid_ptr, kid_sb, qid_sb, q_sb, q_sh, q_sn,
                                  k_sb, k_sh, k_sn, v_sb, v_sh, v_sn, o_sb, o_sh, o_sn, Hq, GROUP, Nq, Nk, qk_scale,
                                  HAS_LENS: tl.constexpr, HAS_IDS: tl.constexpr, HAS_QIDS: tl.constexpr, CAUSAL: tl.constexpr,
                                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr, STAGES: tl.constexpr,
                                  WARP_SPECIALIZE: tl.constexpr):  # fmt: skip
    """Program (query block, batch · query head): BLOCK_M rows of O and lse, as the portable kernel."""
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
    q_desc = tl.make_tensor_descriptor(q_ptr + b * q_sb + h * q_sh, [Nq, HEAD_D], [q_sn, 1], [BLOCK_M, HEAD_D])
    keys = tl.maximum(Nk, 1)  # a descriptor's extent is at least 1 (with Nk = 0 no key block loads)
    k_desc = tl.make_tensor_descriptor(k_ptr + b * k_sb + kv_h * k_sh, [keys, HEAD_D], [k_sn, 1], [BLOCK_N, HEAD_D])
    v_desc = tl.make_tensor_descriptor(v_ptr + b * v_sb + kv_h * v_sh, [keys, HEAD_D], [v_sn, 1], [BLOCK_N, HEAD_D])
    o_desc = tl.make_tensor_descriptor(o_ptr + b * o_sb + h * o_sh, [Nq, HEAD_D], [o_sn, 1], [BLOCK_M, HEAD_D])
    rows = start_m + tl.arange(0, BLOCK_M)
    q = q_desc.load([start_m, 0])
    if HAS_QIDS:
        q_ids = tl.load(qid_ptr + b * qid_sb + rows, mask=rows < Nq, other=0)
    else:
        q_ids = tl.zeros([BLOCK_M], dtype=tl.int32)
    k_ids = kid_ptr + b * kid_sb
    acc = tl.zeros([BLOCK_M, HEAD_D], dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    causal_shift = Nk - Nq
    whole = (Nk // BLOCK_N) * BLOCK_N
    if CAUSAL:
        hi = tl.minimum(tl.maximum(start_m + BLOCK_M + causal_shift, 0), Nk)
        unmasked = tl.minimum((tl.maximum(start_m + causal_shift + 1, 0) // BLOCK_N) * BLOCK_N, whole)
    else:
        hi = Nk
        unmasked = whole
    acc, l_i, m_i = _hopper_key_blocks(acc, l_i, m_i, q, k_desc, v_desc, rows, 0, unmasked, Nk, causal_shift, qk_scale, k_ids,
                                       q_ids, HAS_IDS, BLOCK_N, False, CAUSAL, STAGES, WARP_SPECIALIZE)  # fmt: skip
    acc, l_i, m_i = _hopper_key_blocks(acc, l_i, m_i, q, k_desc, v_desc, rows, unmasked, hi, Nk, causal_shift, qk_scale, k_ids,
                                       q_ids, HAS_IDS, BLOCK_N, True, CAUSAL, STAGES, False)  # fmt: skip
    o, lse = _finish_rows(acc, l_i, m_i)
    o_desc.store([start_m, 0], o.to(o_ptr.dtype.element_ty))
    tl.store(lse_ptr + bh.to(tl.int64) * Nq + rows, lse, mask=rows < Nq)


# ----------------------------------------------------------------------------------------------
# When it serves a call, and how it launches
# ----------------------------------------------------------------------------------------------


HOPPER_TILES = {
    # head dim: (strategy, BLOCK_M, BLOCK_N, num_warps, num_stages), the best of the sweep
    # (benchmarks/NOTES.md, "2026-12-05 (session 20), issue 28: the Hopper forward and the backward's tiles").
    # D = 128 is absent: there the portable kernel was as fast or faster at every shape measured.
    64: ("hopper", 64, 128, 4, 2),
}


def hopper_plan(head_dim: int) -> Optional[Plan]:
    """The Hopper kernel's plan for this head dim, or None where the portable kernel measured as fast."""
    tiles = HOPPER_TILES.get(head_dim)
    return None if tiles is None else Plan(*tiles)


def available(device: torch.device) -> bool:
    """A Hopper GPU (compute capability 9.x) with a Triton that has device-side tensor descriptors."""
    if hardware.interpreting() or device.type != "cuda" or not hasattr(tl, "make_tensor_descriptor"):
        return False
    capability = hardware.device_capability(device)
    return capability is not None and capability[0] == 9


def eligible(*tensors: torch.Tensor) -> bool:
    """Whether the copy engine can read these ``[B, H, N, D]`` tensors: 16-bit, ``D`` in
    :data:`HEAD_DIMS`, unit stride along ``D``, 16-byte aligned base and strides."""
    for t in tensors:
        if t.element_size() != 2 or t.shape[-1] not in HEAD_DIMS or t.stride(-1) != 1 or t.data_ptr() % 16:
            return False
        if any((s * 2) % 16 for s in t.stride()[:3]):
            return False
    return True


def _scratch(size: int, alignment: int, stream: Optional[int]) -> torch.Tensor:
    """Global memory for the kernel's tensor descriptors (Triton asks at each launch)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _ensure_allocator() -> None:
    """Give Triton an allocator for the descriptors' scratch, unless the caller already set one
    (``triton.set_allocator`` holds it per thread context, so each launching thread checks)."""
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(_scratch)


def hopper_launcher(q, k, p, args):
    """The Hopper launch of plan ``p`` (``attention_prefill.Plan``, strategy "hopper", or
    "hopper-ws" for the warp-specialized loop), with the
    portable launcher's :class:`~tritonforge.ops.attention_prefill.KernelArgs`: a function of
    ``(q, k, v, kv_lens, key_ids, query_ids)`` returning ``(O, lse)``."""
    B, Hq, Nq, D = q.shape
    Nk, group = k.shape[2], q.shape[1] // k.shape[1]
    flags = {name: args.flags[name] for name in ("CAUSAL", "HAS_LENS", "HAS_IDS", "HAS_QIDS")}
    kernel = launches.bound_launch(_flash_attn_fwd_hopper_kernel, (triton.cdiv(Nq, p.block_m), B * Hq), BLOCK_M=p.block_m,
                                   BLOCK_N=p.block_n, HEAD_D=D, STAGES=p.num_stages, WARP_SPECIALIZE=p.strategy == "hopper-ws",
                                   num_warps=p.num_warps, **flags)  # fmt: skip
    outputs, strides, id_strides, qk_scale = args.outputs, args.strides, args.id_strides, args.qk_scale[0]

    def launch(q, k, v, kv_lens=None, key_ids=None, query_ids=None):
        _ensure_allocator()
        o, lse = outputs()
        lens, kid, qid = (lse if t is None else t for t in (kv_lens, key_ids, query_ids))
        kernel(q, k, v, o, lse, lens, kid, qid, *id_strides, *strides, *o.stride()[:3], Hq, group, Nq, Nk, qk_scale)
        return o, lse

    return launch
