"""Queries and keys rotated in one launch (chapter 9): what an attention layer applies, Hugging
Face's ``apply_rotary_pos_emb(q, k, cos, sin)``.

Math: :mod:`tritonforge.ops.rope`'s rotation (the block kernel
:func:`~tritonforge.ops.rotary.rotate_block`), applied to q's heads and then k's in one grid; the
two share the cos and sin of their positions. The table may be one per batch row (``[B, N, D]``:
under left padding each row's positions differ), read through a batch stride of zero when it is
one table for all. The backward is the transposed rotation, the same kernel with ``BACKWARD``.
"""

from __future__ import annotations

import torch

from tritonforge import checks, launches, runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, round_bf16_by_hand
from tritonforge.ops.rotary import ROPE_DTYPES, TILE_ELEMENTS, rotate_block
from tritonforge.reference import rope_bwd_ref, rope_ref

QK_OP = "rope_qk"
QK_BACKWARD_OP = "rope_qk_backward"


@triton.jit
def _rope_qk_kernel(
    q_ptr,  # *q [B, Hq, N, D] with strides (q_sb, q_sh, q_sn, 1)
    k_ptr,  # *k [B, Hk, N, D] with strides (k_sb, k_sh, k_sn, 1)
    cos_ptr,  # *cos [B or 1, N, D] with strides (c_sb, c_sn, 1)
    sin_ptr,
    yq_ptr,  # *[B, Hq, N, D] contiguous
    yk_ptr,  # *[B, Hk, N, D] contiguous
    Hq,
    Hk,
    N,
    HALF,
    q_sb,
    q_sh,
    q_sn,
    k_sb,
    k_sh,
    k_sn,
    c_sb,
    c_sn,
    s_sb,
    s_sn,
    BLOCK_N: tl.constexpr,
    HALF_P2: tl.constexpr,
    BACKWARD: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
):
    """Program (block of positions, batch · (Hq + Hk) heads): the query heads, then the key heads,
    in one launch (the two rotations share the cos and sin of their positions)."""
    bh = tl.program_id(1)
    b = (bh // (Hq + Hk)).to(tl.int64)
    h = bh % (Hq + Hk)
    if h < Hq:
        rotate_block(q_ptr, yq_ptr, cos_ptr, sin_ptr, b, h, Hq, N, HALF, q_sb, q_sh, q_sn, c_sb, c_sn, s_sb, s_sn, BLOCK_N, HALF_P2,
                BACKWARD, ACC_DTYPE, ROUND_BF16)  # fmt: skip
    else:
        rotate_block(k_ptr, yk_ptr, cos_ptr, sin_ptr, b, h - Hq, Hk, N, HALF, k_sb, k_sh, k_sn, c_sb, c_sn, s_sb, s_sn, BLOCK_N,
                HALF_P2, BACKWARD, ACC_DTYPE, ROUND_BF16)  # fmt: skip


_empty = torch.empty


QK_BACKWARD_OP = "rope_qk_backward"


def _table(t: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """``(t, batch stride, row stride)`` of a ``[N, D]``, ``[1, N, D]`` or ``[B, N, D]`` table with a
    unit-stride last dimension (batch stride 0: one table for every batch row)."""
    t = t if t.stride(-1) == 1 else t.contiguous()
    if t.dim() == 2 or t.shape[0] == 1:
        return t, 0, t.stride(-2)
    return t, t.stride(0), t.stride(1)


def qk_launcher(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, backward: bool = False):
    """The launch for tensors of these shapes, strides, dtypes and device (unit stride along the
    head dimension), every decision taken now: a function of ``(q, k, cos, sin)`` that allocates
    the two outputs (contiguous ``[B, H, N, D]``) and launches the kernel once."""
    B, Hq, N, D = q.shape
    Hk = k.shape[1]
    half = D // 2
    half_p2 = triton.next_power_of_2(half)
    block_n = min(triton.next_power_of_2(N), max(1, TILE_ELEMENTS // half_p2))
    kernel = launches.bound_launch(_rope_qk_kernel, (triton.cdiv(N, block_n), B * (Hq + Hk)), BLOCK_N=block_n, HALF_P2=half_p2,
                                  BACKWARD=backward, ACC_DTYPE=acc_dtype(q.dtype), ROUND_BF16=round_bf16_by_hand(q.dtype),
                                  num_warps=4)  # fmt: skip
    strides = (*q.stride()[:3], *k.stride()[:3], *_table(cos)[1:], *_table(sin)[1:])
    dtype, device = q.dtype, q.device

    def launch(q, k, cos, sin):
        yq = _empty(B, Hq, N, D, dtype=dtype, device=device)
        yk = _empty(B, Hk, N, D, dtype=dtype, device=device)
        kernel(q, k, _table(cos)[0], _table(sin)[0], yq, yk, Hq, Hk, N, half, *strides)
        return yq, yk

    return launch


def _qk_reference(q, k, cos, sin, backward: bool):
    table = (lambda t: t[:, None]) if cos.dim() == 3 else (lambda t: t)  # [B, N, D] -> [B, 1, N, D] beside the heads
    ref = rope_bwd_ref if backward else rope_ref
    return ref(q, table(cos), table(sin)).contiguous(), ref(k, table(cos), table(sin)).contiguous()


def _qk_routed(q, k, cos, sin, backward: bool):
    op = QK_BACKWARD_OP if backward else QK_OP
    if q.numel() == 0 and k.numel() == 0:
        runtime.record_empty(op)
        return _qk_reference(q, k, cos, sin, backward)

    def kernel():
        q_, k_ = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k))
        return qk_launcher(q_, k_, cos, sin, backward)(q_, k_, cos, sin)

    return runtime.dispatch(op, device=q.device, dtype=q.dtype, kernel=kernel, reference=lambda: _qk_reference(q, k, cos, sin, backward))


@torch.library.custom_op("tritonforge::rope_qk", mutates_args=())
def rope_qk_op(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys rotated in one launch, routed; differentiable in q and k."""
    return _qk_routed(q, k, cos, sin, False)


@rope_qk_op.register_fake
def _(q, k, cos, sin):
    return q.new_empty(q.shape), k.new_empty(k.shape)


@torch.library.custom_op("tritonforge::rope_qk_backward", mutates_args=())
def rope_qk_backward_op(dq: torch.Tensor, dk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dq, dk)`` through the transposed rotation, routed."""
    return _qk_routed(dq, dk, cos, sin, True)


@rope_qk_backward_op.register_fake
def _(dq, dk, cos, sin):
    return dq.new_empty(dq.shape), dk.new_empty(dk.shape)


def _qk_setup_context(ctx, inputs, output):
    _, _, cos, sin = inputs
    ctx.save_for_backward(cos, sin)


def _qk_backward(ctx, dyq, dyk):
    cos, sin = ctx.saved_tensors
    dq, dk = launches.backward_or_reference(QK_BACKWARD_OP, lambda: rope_qk_backward_op(dyq, dyk, cos, sin),
                                            lambda: _qk_reference(dyq, dyk, cos, sin, True))  # fmt: skip
    return dq, dk, None, None


rope_qk_op.register_autograd(_qk_backward, setup_context=_qk_setup_context)


def _check_qk(q: object, k: object, cos: object, sin: object) -> None:
    for name, t in (("q", q), ("k", k)):
        checks.check_tensor(name, t, dtypes=ROPE_DTYPES)
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [B, H, N, D], got shape {tuple(t.shape)}")
    checks.check_tensor("cos", cos, dtypes=ROPE_DTYPES)
    checks.check_tensor("sin", sin, dtypes=ROPE_DTYPES)
    checks.check_same_device(q=q, k=k, cos=cos, sin=sin)
    checks.check_same_dtype(q=q, k=k)
    B, _, N, D = q.shape
    if (k.shape[0], k.shape[2], k.shape[3]) != (B, N, D):
        raise ValueError(f"k must be [B, Hk, N, D] with q's B, N, D = {B}, {N}, {D}, got shape {tuple(k.shape)}")
    if D % 2:
        raise ValueError(f"the head dim must be even to split into halves, got {D}")
    for name, t in (("cos", cos), ("sin", sin)):
        if tuple(t.shape) not in ((N, D), (1, N, D), (B, N, D)):
            raise ValueError(f"{name} must have shape [N, D], [1, N, D] or [B, N, D] = [{B}, {N}, {D}], got {tuple(t.shape)}")


def rope_qk(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rope` of queries and keys in one launch, with a table per batch row if need be: what
    Hugging Face's ``apply_rotary_pos_emb(q, k, cos, sin)`` computes (its cos and sin are ``[B, N, D]``,
    one row per batch row's positions, which differ under left padding).

    Args:
        q: ``[B, Hq, N, D]`` float16, bfloat16, float32 or float64, ``D`` even; any strides (read in place).
        k: ``[B, Hk, N, D]``, q's dtype and device.
        cos: ``[N, D]``, ``[1, N, D]`` or ``[B, N, D]``, on q's device.
        sin: like cos.

    Returns:
        ``(q_rotated, k_rotated)``, new contiguous tensors of q's and k's shapes in q's dtype,
        differentiable in q and k (a call whose cos or sin needs a gradient takes the reference).
        ``tfg.last_path("rope_qk")`` tells which path computed them.
    """
    key = launches.signature(QK_OP, (q, k, cos, sin))
    out = launches.run_remembered(key, q, k, cos, sin)  # this signature, checked and served by the kernel before
    if out is not launches.MISS:
        return out
    _check_qk(q, k, cos, sin)
    return QK_ENTRY.serve((q, k, cos, sin), (), key)


def _qk_remembered(q, k, cos, sin):
    """:func:`qk_launcher` for this signature, or ``None`` where a table or an input would be copied."""
    if any(t.stride(-1) != 1 for t in (q, k, cos, sin)):
        return None
    return qk_launcher(q, k, cos, sin)


QK_ENTRY = launches.OpEntry(QK_OP, op=rope_qk_op, eager=lambda q, k, cos, sin: _qk_routed(q, k, cos, sin, False),
                           reference=lambda q, k, cos, sin: _qk_reference(q, k, cos, sin, False), launch=_qk_remembered,
                           vmap=False, grad_inputs=2, empty=False, no_grad_rule="cos or sin")  # fmt: skip
