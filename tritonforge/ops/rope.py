r"""Rotary position embeddings (RoPE) in one pass: ``y = x cos + rotate_half(x) sin`` (chapter 9).

Math. Llama rotates each head vector ``x [D]`` at position ``n`` pair by pair: with the halves
``x = (x_1, x_2)`` (Hugging Face's ``rotate_half`` layout, ``rotate_half(x) = (-x_2, x_1)``) and
``cos, sin [N, D]`` (the frequency table repeated twice along D),

.. math::

    y_1 = x_1 \cos_1 - x_2 \sin_1, \qquad y_2 = x_2 \cos_2 + x_1 \sin_2,

a rotation of each pair ``(x_{1,i}, x_{2,i})`` by the angle ``n θ_i``. Its backward is the
transposed rotation, the same kernel with the signs moved:

.. math::

    dx_1 = dy_1 \cos_1 + dy_2 \sin_2, \qquad dx_2 = dy_2 \cos_2 - dy_1 \sin_1.

PyTorch eager runs the formula as five kernels (two slices, a negation and a concatenation for
``rotate_half``, then two products and a sum), reading and writing x several times; the kernel
reads x, cos and sin once and writes y once, in float32 (float64 for float64), rounded once.

Layout. ``x [..., N, D]``: up to four dimensions ``[B, H, N, D]`` are read through their strides
(a projection's ``view(B, N, H, D).transpose(1, 2)`` in place), more are flattened; the last
dimension must have unit stride (else copied) and ``D`` must be even. ``cos, sin [N, D]`` any
float dtype; the output is a new contiguous tensor of x's shape and dtype.
"""

from __future__ import annotations

import torch

from tritonforge import checks, launches, runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, cast_for_store, round_bf16_by_hand
from tritonforge.reference import rope_bwd_ref, rope_ref

ROPE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TILE_ELEMENTS = 2048
"""Pairs one program rotates: ``BLOCK_N`` positions times the half head dimension."""


@triton.jit
def _rotate(x_ptr, y_ptr, cos_ptr, sin_ptr, b, h, H, N, HALF, x_sb, x_sh, x_sn, c_sb, c_sn, s_sb, s_sn,
            BLOCK_N: tl.constexpr, HALF_P2: tl.constexpr, BACKWARD: tl.constexpr, ACC_DTYPE: tl.constexpr,
            ROUND_BF16: tl.constexpr):  # fmt: skip
    """BLOCK_N rows of head h of batch b: x (strides x_sb, x_sh, x_sn, 1) rotated into y, a
    contiguous ``[B, H, N, D]``; cos and sin ``[B or 1, N, D]`` (batch stride 0: one table)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, HALF_P2)
    mask = (rows < N)[:, None] & (cols < HALF)[None, :]
    x1_ptrs = x_ptr + b * x_sb + h * x_sh + rows.to(tl.int64)[:, None] * x_sn + cols[None, :]
    x1 = tl.load(x1_ptrs, mask=mask, other=0.0).to(ACC_DTYPE)
    x2 = tl.load(x1_ptrs + HALF, mask=mask, other=0.0).to(ACC_DTYPE)
    c_ptrs = cos_ptr + b * c_sb + rows[:, None] * c_sn + cols[None, :]
    s_ptrs = sin_ptr + b * s_sb + rows[:, None] * s_sn + cols[None, :]
    c1 = tl.load(c_ptrs, mask=mask, other=0.0).to(ACC_DTYPE)
    c2 = tl.load(c_ptrs + HALF, mask=mask, other=0.0).to(ACC_DTYPE)
    s1 = tl.load(s_ptrs, mask=mask, other=0.0).to(ACC_DTYPE)
    s2 = tl.load(s_ptrs + HALF, mask=mask, other=0.0).to(ACC_DTYPE)
    if BACKWARD:
        y1 = x1 * c1 + x2 * s2
        y2 = x2 * c2 - x1 * s1
    else:
        y1 = x1 * c1 - x2 * s1
        y2 = x2 * c2 + x1 * s2
    y1_ptrs = y_ptr + ((b * H + h) * N + rows[:, None]) * (2 * HALF) + cols[None, :]
    tl.store(y1_ptrs, cast_for_store(y1, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)
    tl.store(y1_ptrs + HALF, cast_for_store(y2, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _rope_kernel(
    x_ptr,  # *x [B, H, N, D] with strides (x_sb, x_sh, x_sn, 1)
    cos_ptr,  # *cos [N, D] with row stride c_sn
    sin_ptr,  # *sin [N, D] with row stride s_sn
    y_ptr,  # *y [B, H, N, D] contiguous
    H,
    N,
    HALF,  # D // 2
    x_sb,
    x_sh,
    x_sn,
    c_sn,
    s_sn,
    BLOCK_N: tl.constexpr,
    HALF_P2: tl.constexpr,  # HALF rounded up to a power of two
    BACKWARD: tl.constexpr,  # the transposed rotation (dx from dy)
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
):
    """Program (block of positions, batch · head): BLOCK_N rows of y, both halves."""
    bh = tl.program_id(1)
    _rotate(x_ptr, y_ptr, cos_ptr, sin_ptr, (bh // H).to(tl.int64), bh % H, H, N, HALF, x_sb, x_sh, x_sn, 0, c_sn, 0, s_sn,
            BLOCK_N, HALF_P2, BACKWARD, ACC_DTYPE, ROUND_BF16)  # fmt: skip


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
        _rotate(q_ptr, yq_ptr, cos_ptr, sin_ptr, b, h, Hq, N, HALF, q_sb, q_sh, q_sn, c_sb, c_sn, s_sb, s_sn, BLOCK_N, HALF_P2,
                BACKWARD, ACC_DTYPE, ROUND_BF16)  # fmt: skip
    else:
        _rotate(k_ptr, yk_ptr, cos_ptr, sin_ptr, b, h - Hq, Hk, N, HALF, k_sb, k_sh, k_sn, c_sb, c_sn, s_sb, s_sn, BLOCK_N,
                HALF_P2, BACKWARD, ACC_DTYPE, ROUND_BF16)  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Launcher
# ----------------------------------------------------------------------------------------------

_empty = torch.empty


def _as_4d(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, N, D]`` view of ``x [..., N, D]`` (leading dimensions of one; more than two
    leading dimensions flattened, which may copy), last dimension of unit stride."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    while x.dim() < 4:
        x = x.unsqueeze(0)
    return x if x.dim() == 4 else x.reshape(-1, *x.shape[-3:])


def rope_launch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, backward: bool = False) -> torch.Tensor:
    """Launch the kernel: y (or dx from dy when ``backward``), contiguous, x's shape and dtype."""
    x4 = _as_4d(x)
    cos = cos if cos.stride(-1) == 1 else cos.contiguous()
    sin = sin if sin.stride(-1) == 1 else sin.contiguous()
    return launcher(x4, cos, sin, x.shape, backward)(x4, cos, sin)


def launcher(x4: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, shape: torch.Size, backward: bool = False):
    """The launch for ``x4 [B, H, N, D]`` and tables of these shapes, strides, dtypes and device
    (unit stride along the head dimension), every decision taken now: a function of ``(x4, cos,
    sin)`` that allocates y of ``shape`` (contiguous) and launches the kernel."""
    B, H, N, D = x4.shape
    half = D // 2
    half_p2 = triton.next_power_of_2(half)
    block_n = min(triton.next_power_of_2(N), max(1, TILE_ELEMENTS // half_p2))
    kernel = launches.bound_launch(_rope_kernel, (triton.cdiv(N, block_n), B * H), BLOCK_N=block_n, HALF_P2=half_p2,
                                  BACKWARD=backward, ACC_DTYPE=acc_dtype(x4.dtype), ROUND_BF16=round_bf16_by_hand(x4.dtype),
                                  num_warps=4)  # fmt: skip
    scalars = (H, N, half, *x4.stride()[:3], cos.stride(0), sin.stride(0))
    dtype, device = x4.dtype, x4.device

    def launch(x4, cos, sin):
        y = _empty(*shape, dtype=dtype, device=device)
        kernel(x4, cos, sin, y, *scalars)
        return y

    return launch


def _remembered_launch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """:func:`launcher` for this signature, or ``None`` where x or a table would be copied first."""
    if x.dim() > 4 or any(t.stride(-1) != 1 for t in (x, cos, sin)):
        return None
    launch = launcher(_as_4d(x), cos, sin, x.shape)
    lead = (1,) * (4 - x.dim())
    return lambda x, cos, sin: launch(x.view(*lead, *x.shape), cos, sin)


# ----------------------------------------------------------------------------------------------
# Routing
# ----------------------------------------------------------------------------------------------

OP = "rope"
BACKWARD_OP = "rope_backward"


def _routed(x, cos, sin, backward: bool):
    op, reference = (BACKWARD_OP, rope_bwd_ref) if backward else (OP, rope_ref)
    if x.numel() == 0:
        runtime.record_empty(op)
        return reference(x, cos, sin).contiguous()
    return runtime.dispatch(op, device=x.device, dtype=x.dtype, kernel=lambda: rope_launch(x, cos, sin, backward),
                            reference=lambda: reference(x, cos, sin).contiguous())  # fmt: skip


# ----------------------------------------------------------------------------------------------
# The PyTorch operators
# ----------------------------------------------------------------------------------------------


@torch.library.custom_op("tritonforge::rope", mutates_args=())
def rope_op(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x cos + rotate_half(x) sin``, routed; differentiable in x through :func:`backward`."""
    return _routed(x, cos, sin, False)


@rope_op.register_fake
def _(x, cos, sin):
    return x.new_empty(x.shape)


@torch.library.custom_op("tritonforge::rope_backward", mutates_args=())
def rope_backward_op(dy: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``dx`` from ``dy``: the transposed rotation, routed."""
    return _routed(dy, cos, sin, True)


@rope_backward_op.register_fake
def _(dy, cos, sin):
    return dy.new_empty(dy.shape)


def setup_context(ctx, inputs, output):
    _, cos, sin = inputs
    ctx.save_for_backward(cos, sin)


def backward(ctx, dy):
    """``dx``: the backward operator, or under ``create_graph`` the differentiable reference (a
    routed fallback, so a second derivative is exact, never zeros). cos and sin get no gradient
    here: the public function sends calls that need one to the reference."""
    cos, sin = ctx.saved_tensors
    dx = launches.backward_or_reference(BACKWARD_OP, lambda: rope_backward_op(dy, cos, sin), lambda: rope_bwd_ref(dy, cos, sin))
    return dx, None, None


rope_op.register_autograd(backward, setup_context=setup_context)


def _vmap_rule(info, in_dims, x, cos, sin):
    """``vmap`` over x: the mapped dimension becomes one more leading dimension. Mapped cos or sin
    (a table per example): the reference, which broadcasts them."""
    x_dim, cos_dim, sin_dim = in_dims
    size = info.batch_size
    x = x.movedim(x_dim, 0) if x_dim is not None else x.expand(size, *x.shape)
    if cos_dim is None and sin_dim is None:
        return rope_op(x, cos, sin), 0
    cos = cos.movedim(cos_dim, 0) if cos_dim is not None else cos.expand(size, *cos.shape)
    sin = sin.movedim(sin_dim, 0) if sin_dim is not None else sin.expand(size, *sin.shape)
    extra = x.dim() - 3  # broadcast each example's [N, D] table over x's leading dimensions
    cos, sin = (t.reshape(size, *([1] * extra), *t.shape[1:]) for t in (cos, sin))
    return runtime.dispatch_reference(OP, "autograd", "vmap over cos/sin: the PyTorch reference",
                                      lambda: rope_ref(x, cos, sin).contiguous()), 0  # fmt: skip


rope_op.register_vmap(_vmap_rule)


# ----------------------------------------------------------------------------------------------
# The public function
# ----------------------------------------------------------------------------------------------


def _check(x: object, cos: object, sin: object) -> None:
    checks.check_tensor("x", x, dtypes=ROPE_DTYPES, ndim_min=2)
    checks.check_tensor("cos", cos, dtypes=ROPE_DTYPES)
    checks.check_tensor("sin", sin, dtypes=ROPE_DTYPES)
    checks.check_same_device(x=x, cos=cos, sin=sin)
    N, D = x.shape[-2], x.shape[-1]
    if D % 2:
        raise ValueError(f"x's last dimension (the head dim) must be even to split into halves, got {D}")
    batched = x.dim() == 4 and cos.dim() == 3  # Hugging Face's tables: one row of positions per batch row
    shapes = ((N, D), (1, N, D), (x.shape[0], N, D)) if batched else ((N, D),)
    for name, t in (("cos", cos), ("sin", sin)):
        if tuple(t.shape) not in shapes:
            allowed = f"[N, D], [1, N, D] or [B, N, D] = [{x.shape[0]}, {N}, {D}]" if batched else f"[N, D] = [{N}, {D}] (x's last two)"
            raise ValueError(f"{name} must have shape {allowed}, got {tuple(t.shape)}")
    if cos.dim() != sin.dim():
        raise ValueError(f"cos has shape {tuple(cos.shape)} but sin has {tuple(sin.shape)}; give both per batch row or neither")


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embeddings, ``x * cos + rotate_half(x) * sin``, in one pass over memory.

    Hugging Face Llama's formula and layout (``rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])``,
    cos and sin the frequency table repeated twice), computed in float32 (float64 for float64)
    and rounded once. Differentiable in x (twice: the second derivative through the PyTorch
    reference); a call whose cos or sin needs a gradient takes the reference (a routed
    fallback). Usable under ``torch.compile(fullgraph=True)``, CUDA graphs and ``torch.func.vmap``.

    Args:
        x: ``[..., N, D]`` float16, bfloat16, float32 or float64 with ``D`` even, e.g. queries or
            keys ``[B, H, N, D]``; any strides over up to four dimensions (read in place).
        cos: ``[N, D]``, on x's device, any of those dtypes (Hugging Face's ``cos`` for the positions);
            for a 4-D x also ``[1, N, D]`` or ``[B, N, D]``, a table per batch row (what Hugging Face's
            rotary embedding returns), served by :func:`rope_qk`'s kernel.
        sin: like cos.

    Returns:
        A new contiguous tensor of x's shape and dtype. ``tfg.last_path("rope")`` tells which path
        computed it.
    """
    key = launches.signature(OP, (x, cos, sin))
    y = launches.run_remembered(key, x, cos, sin)  # this signature, checked and served by the kernel before
    if y is not launches.MISS:
        return y
    _check(x, cos, sin)
    if cos.dim() == 3:  # a table per batch row: rope_qk's kernel reads one (with no keys to rotate)
        return rope_qk(x, x[:, :0], cos, sin)[0]
    return ENTRY.serve((x, cos, sin), (), key)


# ----------------------------------------------------------------------------------------------
# Queries and keys in one launch (what an attention layer rotates)
# ----------------------------------------------------------------------------------------------

QK_OP = "rope_qk"
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


ENTRY = launches.OpEntry(OP, op=rope_op, eager=lambda x, cos, sin: _routed(x, cos, sin, False),
                        reference=lambda x, cos, sin: rope_ref(x, cos, sin).contiguous(), launch=_remembered_launch, grad_inputs=1,
                        no_grad_rule="cos or sin")  # fmt: skip
QK_ENTRY = launches.OpEntry(QK_OP, op=rope_qk_op, eager=lambda q, k, cos, sin: _qk_routed(q, k, cos, sin, False),
                           reference=lambda q, k, cos, sin: _qk_reference(q, k, cos, sin, False), launch=_qk_remembered,
                           vmap=False, grad_inputs=2, empty=False, no_grad_rule="cos or sin")  # fmt: skip
