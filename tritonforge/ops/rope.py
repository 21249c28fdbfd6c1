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
from tritonforge.kernel_utils import acc_dtype, round_bf16_by_hand
from tritonforge.ops.rope_pair import rope_qk
from tritonforge.ops.rotary import ROPE_DTYPES, TILE_ELEMENTS, rotate_block
from tritonforge.reference import rope_bwd_ref, rope_ref


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
    rotate_block(x_ptr, y_ptr, cos_ptr, sin_ptr, (bh // H).to(tl.int64), bh % H, H, N, HALF, x_sb, x_sh, x_sn, 0, c_sn, 0, s_sn,
            BLOCK_N, HALF_P2, BACKWARD, ACC_DTYPE, ROUND_BF16)  # fmt: skip


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
            rotary embedding returns), served by :func:`~tritonforge.ops.rope_pair.rope_qk`'s kernel.
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


ENTRY = launches.OpEntry(OP, op=rope_op, eager=lambda x, cos, sin: _routed(x, cos, sin, False),
                        reference=lambda x, cos, sin: rope_ref(x, cos, sin).contiguous(), launch=_remembered_launch, grad_inputs=1,
                        no_grad_rule="cos or sin")  # fmt: skip
