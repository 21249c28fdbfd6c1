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

from tritonforge import runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, cast_for_store, round_bf16_by_hand
from tritonforge.reference import rope_bwd_ref, rope_ref

ROPE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TILE_ELEMENTS = 2048
"""Pairs one program rotates: ``BLOCK_N`` positions times the half head dimension."""


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
    b = (bh // H).to(tl.int64)
    h = bh % H
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, HALF_P2)
    mask = (rows < N)[:, None] & (cols < HALF)[None, :]
    x1_ptrs = x_ptr + b * x_sb + h * x_sh + rows.to(tl.int64)[:, None] * x_sn + cols[None, :]
    x1 = tl.load(x1_ptrs, mask=mask, other=0.0).to(ACC_DTYPE)
    x2 = tl.load(x1_ptrs + HALF, mask=mask, other=0.0).to(ACC_DTYPE)
    c_ptrs = cos_ptr + rows[:, None] * c_sn + cols[None, :]
    s_ptrs = sin_ptr + rows[:, None] * s_sn + cols[None, :]
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
    B, H, N, D = x4.shape
    cos = cos if cos.stride(-1) == 1 else cos.contiguous()
    sin = sin if sin.stride(-1) == 1 else sin.contiguous()
    y = _empty(*x.shape, dtype=x.dtype, device=x.device)
    half = D // 2
    half_p2 = triton.next_power_of_2(half)
    block_n = min(triton.next_power_of_2(N), max(1, TILE_ELEMENTS // half_p2))
    grid = (triton.cdiv(N, block_n), B * H)
    _rope_kernel[grid](x4, cos, sin, y, H, N, half, *x4.stride()[:3], cos.stride(0), sin.stride(0), BLOCK_N=block_n,
                       HALF_P2=half_p2, BACKWARD=backward, ACC_DTYPE=acc_dtype(x.dtype),
                       ROUND_BF16=round_bf16_by_hand(x.dtype), num_warps=4)  # fmt: skip
    return y


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
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():
        dx = runtime.dispatch_reference(
            BACKWARD_OP, "autograd", "create_graph=True: the backward kernel is not differentiable; "
            "the PyTorch reference backward is, so double backward is exact",
            lambda: rope_bwd_ref(dy, cos, sin),
        )  # fmt: skip
    else:
        dx = rope_backward_op(dy, cos, sin)
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
    runtime.check_tensor("x", x, dtypes=ROPE_DTYPES, ndim_min=2)
    runtime.check_tensor("cos", cos, dtypes=ROPE_DTYPES)
    runtime.check_tensor("sin", sin, dtypes=ROPE_DTYPES)
    runtime.check_same_device(x=x, cos=cos, sin=sin)
    N, D = x.shape[-2], x.shape[-1]
    if D % 2:
        raise ValueError(f"x's last dimension (the head dim) must be even to split into halves, got {D}")
    for name, t in (("cos", cos), ("sin", sin)):
        if tuple(t.shape) != (N, D):
            raise ValueError(f"{name} must have shape [N, D] = [{N}, {D}] (x's last two), got {tuple(t.shape)}")


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
        cos: ``[N, D]``, on x's device, any of those dtypes (Hugging Face's ``cos`` for the positions).
        sin: like cos.

    Returns:
        A new contiguous tensor of x's shape and dtype. ``tfg.last_path("rope")`` tells which path
        computed it.
    """
    _check(x, cos, sin)
    needs_grad = torch.is_grad_enabled() and x.requires_grad
    table_grad = torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad)
    if torch.compiler.is_compiling():  # the op has no gradient for cos/sin: the traced reference has
        return rope_ref(x, cos, sin).contiguous() if table_grad else rope_op(x, cos, sin)
    if x.numel() == 0:
        runtime.record_empty(OP)
        return rope_ref(x, cos, sin).contiguous()
    mode = runtime.autograd_mode_unsupported(x, cos, sin, vmap_ok=not needs_grad)
    if mode is None and table_grad:
        mode = "cos or sin needs a gradient: the kernel differentiates x only; the PyTorch reference"
    if mode is not None:
        return runtime.dispatch_reference(OP, "autograd", mode, lambda: rope_ref(x, cos, sin).contiguous())
    if needs_grad or torch._C._functorch.peek_interpreter_stack() is not None:
        return rope_op(x, cos, sin)
    return _routed(x, cos, sin, False)  # eager inference: skip the dispatcher
