"""FlashAttention's backward (chapter 7): FlashAttention-2's three kernels
(:mod:`tritonforge.ops.attention_backward_kernels`), routed like every op: the kernels where they
can serve, else the hand-derived backward in PyTorch ops
(:func:`tritonforge.reference.flash_attention_bwd_ref`, ``Nq·Nk`` memory), a loud fallback with a
reason (warned once; an error in strict mode). ``tfg.last_path("flash_attention_backward")`` says
which ran.

Autograd: the forward (``tritonforge::flash_attention``) saves q, k, v, its outputs ``O`` and
``lse`` and the masks; :func:`backward` calls the backward operator
``tritonforge::flash_attention_backward``, or, when autograd builds a graph of the gradient
(``create_graph=True``), the differentiable reference itself (a routed fallback, reason
``autograd``), so that second derivatives are exact. Importing this module registers the autograd
(``tritonforge.ops`` imports it).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from tritonforge import hardware, launches, runtime
from tritonforge._triton import triton
from tritonforge.kernel_utils import acc_dtype, acc_torch_dtype, round_bf16_by_hand, split_float
from tritonforge.ops.attention import _unit_head_stride, flash_attention_op, refusal
from tritonforge.ops.attention_backward_kernels import _bwd_dkdv_kernel, _bwd_dq_kernel, _bwd_preprocess_kernel
from tritonforge.ops.attention_prefill import LOG2E
from tritonforge.reference import flash_attention_bwd_ref

BACKWARD_OP = "flash_attention_backward"
"""The name :func:`tritonforge.last_path` knows for the backward."""

_empty = torch.empty


# ----------------------------------------------------------------------------------------------
# Heuristics: the tiles
# ----------------------------------------------------------------------------------------------


class BackwardPlan(NamedTuple):
    """The tiles of one backward call. ``resident``: the rows a program owns (keys in dK/dV,
    queries in dQ and the preprocess); ``streamed``: the rows of one step of its walk."""

    resident: int
    streamed: int
    num_warps: int
    num_stages: int
    dq_atomic: bool = False  # dq added from the dK/dV loop with atomics, no dQ kernel (measured, not routed)


INTERPRETER_BLOCK = 16
"""The interpreter's tiles (``tl.dot``'s smallest): small tests cross block edges and the diagonal."""

BACKWARD_TILES = (
    # (resident, streamed, num_warps, num_stages), best first: the first that fits runs. On the H200
    # 64-key tiles over 4 warps were the fastest, about twice the 8-warp guess taken before any GPU
    # run; the smaller tiles serve less shared memory (a T4). Measured in benchmarks/NOTES.md,
    # "2026-12-05 (session 20), issue 28: the Hopper forward and the backward's tiles".
    (64, 64, 4, 2),
    (64, 32, 4, 3),
    (128, 64, 8, 2),
    (64, 32, 8, 2),
    (64, 16, 8, 2),
    (32, 32, 8, 2),
    (32, 16, 8, 2),
    (32, 16, 4, 2),
    (16, 16, 4, 1),
)

ACCUMULATOR_FLOATS_PER_THREAD = 128
"""Registers: dK/dV keeps two float32 ``[resident, HEAD_D]`` accumulators (and its k, v tiles); a
tile is taken only if the accumulators need at most this many registers a thread (half of the
255 a thread may hold: at D = 128 the fastest H200 tile, 64 keys over 4 warps, needs 128)."""


def backward_tile_bytes(resident: int, streamed: int, head_d: int, stages: int, element_size: int) -> int:
    """Shared memory of one dK/dV or dQ program, an upper bound fitted to what the compiled kernels
    ask for (``scripts/attention_backward_compile_probe.py``, Triton 3.9, sm_75 and sm_90): four
    ``[resident, HEAD_D]`` tiles and, per pipeline stage, two ``[streamed, HEAD_D]`` tiles. (On
    sm_75 the stages cost nothing: ``4 · resident + 2 · streamed`` rows measured exactly.)"""
    return (4 * resident + 2 * stages * streamed) * head_d * element_size


def backward_plan(head_d: int, element_size: int, shared: Optional[int]) -> Optional[BackwardPlan]:
    """The backward's tiles for a head dimension padded to ``head_d``: the first of
    :data:`BACKWARD_TILES` within the register budget and ``shared`` bytes (None: the interpreter's
    small tiles); ``None`` when none fits."""
    if shared is None:
        return BackwardPlan(INTERPRETER_BLOCK, INTERPRETER_BLOCK, 4, 1)
    for resident, streamed, warps, stages in BACKWARD_TILES:
        if 2 * resident * head_d > ACCUMULATOR_FLOATS_PER_THREAD * 32 * warps:
            continue
        if backward_tile_bytes(resident, streamed, head_d, stages, element_size) <= shared:
            return BackwardPlan(resident, streamed, warps, stages)
    return None


def plan(head_dim: int, dtype: torch.dtype, device: torch.device) -> Optional[BackwardPlan]:
    """The backward's tiles for this head dimension, dtype and device (``None``: none fits, the
    call takes the reference)."""
    interpreting = hardware.interpreting() or device.type != "cuda"
    shared = None if interpreting else hardware.shared_memory_per_block(device)
    return backward_plan(max(16, triton.next_power_of_2(head_dim)), dtype.itemsize, shared)


# ----------------------------------------------------------------------------------------------
# Launch, routing, the operator and autograd
# ----------------------------------------------------------------------------------------------


def flash_attention_bwd(do, dlse, q, k, v, o, lse, causal: bool, sm_scale: float, p: BackwardPlan, kv_lens=None, key_ids=None,
                        query_ids=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Launch the three kernels of plan ``p``: ``(dq, dk, dv)``, new contiguous tensors. ``o`` and
    ``lse`` are the forward's outputs; ``dlse`` may be None (the logsumexp has no gradient)."""
    q, k, v, o, do = (_unit_head_stride(t) for t in (q, k, v, o, do))
    kv_lens, key_ids, query_ids = (None if t is None else t.contiguous() for t in (kv_lens, key_ids, query_ids))
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    acc = acc_torch_dtype(q.dtype)
    lse = lse.to(acc).contiguous()
    dlse = None if dlse is None else dlse.to(acc).contiguous()
    delta = _empty(B, Hq, Nq, dtype=acc, device=q.device)
    lse2 = _empty(B, Hq, Nq, dtype=acc, device=q.device)
    dk = _empty(B, Hkv, Nk, D, dtype=k.dtype, device=k.device)
    dv = _empty(B, Hkv, Nk, D, dtype=v.dtype, device=v.device)
    head_d = max(16, triton.next_power_of_2(D))
    flags = dict(HEAD_D=head_d, ACC_DTYPE=acc_dtype(q.dtype), num_warps=p.num_warps)
    _bwd_preprocess_kernel[(triton.cdiv(Nq, p.resident), B * Hq)](
        o, do, lse, lse if dlse is None else dlse, delta, lse2, *o.stride()[:3], *do.stride()[:3], Hq, Nq, D, *split_float(LOG2E),
        HAS_DLSE=dlse is not None, BLOCK_M=p.resident, **flags)  # fmt: skip
    dq_acc = torch.zeros(B, Hq, Nq, head_d, dtype=acc, device=q.device) if p.dq_atomic else lse  # any pointer where off
    flags.update(HAS_LENS=kv_lens is not None, HAS_IDS=key_ids is not None, HAS_QIDS=query_ids is not None, CAUSAL=causal,
                 UPCAST=hardware.interpreting() and q.element_size() == 2, ROUND_BF16=round_bf16_by_hand(q.dtype),
                 IEEE_DOT=q.dtype == torch.float32, num_stages=p.num_stages)  # fmt: skip
    lens, kid, qid = (lse if t is None else t for t in (kv_lens, key_ids, query_ids))  # any pointer where off
    id_strides = (0 if key_ids is None else key_ids.stride(0), 0 if query_ids is None else query_ids.stride(0))
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3])
    scales = (*split_float(sm_scale * LOG2E), *split_float(sm_scale))
    _bwd_dkdv_kernel[(triton.cdiv(Nk, p.resident), B * Hkv)](
        q, k, v, do, dk, dv, dq_acc, lse2, delta, lens, kid, qid, *id_strides, *strides, Hq, Hkv, Hq // Hkv, Nq, Nk, D, *scales,
        BLOCK_M=p.streamed, BLOCK_N=p.resident, DQ_ATOMIC=p.dq_atomic, **flags)  # fmt: skip
    if p.dq_atomic:
        return (dq_acc[..., :D] * sm_scale).to(q.dtype), dk, dv
    dq = _empty(B, Hq, Nq, D, dtype=q.dtype, device=q.device)
    _bwd_dq_kernel[(triton.cdiv(Nq, p.resident), B * Hq)](
        q, k, v, do, dq, lse2, delta, lens, kid, qid, *id_strides, *strides, Hq, Hq // Hkv, Nq, Nk, D, *scales,
        BLOCK_M=p.resident, BLOCK_N=p.streamed, EVEN_D=head_d == D, **flags)  # fmt: skip
    return dq, dk, dv


def _reference(do, dlse, q, k, v, causal, sm_scale, kv_lens=None, key_ids=None, query_ids=None):
    grads = flash_attention_bwd_ref(do, q, k, v, causal, sm_scale, dlse=dlse, kv_lens=kv_lens, key_ids=key_ids, query_ids=query_ids)
    return tuple(g.contiguous() for g in grads)


def _backward_routed(do, dlse, q, k, v, o, lse, causal, sm_scale, kv_lens=None, key_ids=None, query_ids=None):
    if q.numel() == 0 or k.numel() == 0:  # no query, no key or D = 0: every gradient is 0
        runtime.record_empty(BACKWARD_OP)
        return torch.zeros(q.shape, dtype=q.dtype, device=q.device), torch.zeros_like(k), torch.zeros_like(v)
    p = plan(q.shape[-1], q.dtype, q.device)
    unsupported = refusal(q, p, "the kernels keep [rows, D] tiles in registers", "no backward tile fits")
    return runtime.dispatch(
        BACKWARD_OP, device=q.device, dtype=q.dtype,
        kernel=lambda: flash_attention_bwd(do, dlse, q, k, v, o, lse, causal, sm_scale, p, kv_lens, key_ids, query_ids),
        reference=lambda: _reference(do, dlse, q, k, v, causal, sm_scale, kv_lens, key_ids, query_ids),
        unsupported=unsupported)  # fmt: skip


@torch.library.custom_op("tritonforge::flash_attention_backward", mutates_args=())
def flash_attention_backward_op(do: torch.Tensor, dlse: Optional[torch.Tensor], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                o: torch.Tensor, lse: torch.Tensor, causal: bool, sm_scale: float,
                                kv_lens: Optional[torch.Tensor] = None, key_ids: Optional[torch.Tensor] = None,
                                query_ids: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(dq, dk, dv)``, routed: the kernels, or the reference backward."""
    return _backward_routed(do, dlse, q, k, v, o, lse, causal, sm_scale, kv_lens, key_ids, query_ids)


@flash_attention_backward_op.register_fake
def _(do, dlse, q, k, v, o, lse, causal, sm_scale, kv_lens=None, key_ids=None, query_ids=None):
    return torch.empty_like(q, memory_format=torch.contiguous_format), k.new_empty(k.shape), v.new_empty(v.shape)


def setup_context(ctx, inputs, output):
    """The backward needs q, k, v, the masks and the forward's outputs (``lse`` spares it a pass
    over the keys; ``O`` gives ``δ = rowsum(dO ⊙ O)`` in one sum over D)."""
    q, k, v, causal, sm_scale, kv_lens, key_ids, query_ids = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, kv_lens, key_ids, query_ids)
    ctx.causal, ctx.sm_scale = causal, sm_scale


def backward(ctx, do, dlse):
    """dq, dk, dv from the backward operator, or from the differentiable reference under ``create_graph``."""
    q, k, v, o, lse, kv_lens, key_ids, query_ids = ctx.saved_tensors
    do = torch.zeros_like(o) if do is None else do
    dq, dk, dv = launches.backward_or_reference(
        BACKWARD_OP,
        lambda: flash_attention_backward_op(do, dlse, q, k, v, o, lse, ctx.causal, ctx.sm_scale, kv_lens, key_ids, query_ids),
        lambda: flash_attention_bwd_ref(do, q, k, v, ctx.causal, ctx.sm_scale, dlse=dlse, kv_lens=kv_lens, key_ids=key_ids,
                                        query_ids=query_ids))  # fmt: skip
    return dq, dk, dv, None, None, None, None, None


flash_attention_op.register_autograd(backward, setup_context=setup_context)
