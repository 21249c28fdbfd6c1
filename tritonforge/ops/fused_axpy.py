r"""Fused ``alpha * x + y``: the smallest kernel that shows the whole routing mechanism.

Math, element by element:

.. math:: \mathrm{out}_i = \alpha\, x_i + y_i

Eager PyTorch evaluates ``alpha * x + y`` as two kernels: ``tmp = alpha * x`` (read x, write
tmp) and ``tmp + y`` (read tmp and y, write out): five tensor-sized trips through memory. The
fused kernel reads x and y once and writes out once: three trips. For a memory-bound op that
is the whole speed-up, 5/3 in the limit.

Arithmetic happens in float32 (16-bit inputs are upcast right after ``tl.load``: the
interpreter computes bf16 wrongly otherwise), float64 for float64 inputs, and the result is
stored in the inputs' dtype. ``alpha`` reaches the kernel as two float32 scalars whose sum is
alpha to 48 bits (:func:`tritonforge.kernel_utils.split_float`).
"""

from __future__ import annotations

import numbers

import torch

from tritonforge import checks, launches, runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, cast_for_store, round_bf16_by_hand, split_float
from tritonforge.reference import axpy_ref

AXPY_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
BLOCK_SIZE = 1024  # elements per program: 4 KB of fp32 per operand, plenty to hide latency


@triton.jit
def _axpy_kernel(
    x_ptr,  # *x, contiguous, n_elements values
    y_ptr,  # *y, contiguous, same dtype and length as x
    out_ptr,  # *out, contiguous, written in x's dtype
    alpha_hi,  # alpha = alpha_hi + alpha_lo, two fp32 scalars (exact enough for float64 inputs)
    alpha_lo,
    n_elements,  # runtime length: not constexpr, so every length shares one compiled kernel
    BLOCK: tl.constexpr,  # elements handled by one program (a power of two)
    ROUND_BF16: tl.constexpr,  # round bf16 by hand (the interpreter truncates): see kernel_utils
    ACC_DTYPE: tl.constexpr,  # tl.float32, or tl.float64 for float64 inputs (gradcheck)
):
    pid = tl.program_id(0).to(tl.int64)  # int64: pid * BLOCK overflows int32 past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements  # the last program's tail; unmasked, the interpreter may crash
    x = tl.load(x_ptr + offsets, mask=mask).to(ACC_DTYPE)
    y = tl.load(y_ptr + offsets, mask=mask).to(ACC_DTYPE)
    alpha = tl.cast(alpha_hi, ACC_DTYPE) + tl.cast(alpha_lo, ACC_DTYPE)
    out = alpha * x + y
    tl.store(out_ptr + offsets, cast_for_store(out, out_ptr.dtype.element_ty, ROUND_BF16), mask=mask)



def axpy_fwd(alpha: float, x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Launch the kernel. Non-contiguous inputs are copied to contiguous first.

    ``out`` (contiguous, x's shape and dtype) lets tests pass a NaN-poisoned buffer.
    """
    # [n]. Not x.reshape(-1): for a view like base[:, ::2] reshape returns a *strided* 1-D view
    # (stride 2), and this kernel assumes unit stride. .contiguous() copies only when needed.
    x_flat = x.contiguous().view(-1)
    y_flat = y.contiguous().view(-1)
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    n = x_flat.numel()
    grid = (-(-n // BLOCK_SIZE),)  # ceil division
    alpha_hi, alpha_lo = split_float(float(alpha))
    _axpy_kernel[grid](
        x_flat, y_flat, out.view(-1), alpha_hi, alpha_lo, n,
        BLOCK=BLOCK_SIZE, ROUND_BF16=round_bf16_by_hand(x.dtype), ACC_DTYPE=acc_dtype(x.dtype),
    )  # fmt: skip
    return out


OP = "axpy"


def _axpy_routed(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    if x.numel() == 0:  # nothing to launch: the natural empty answer
        runtime.record_empty(OP)
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    return runtime.dispatch(
        OP, device=x.device, dtype=x.dtype,
        kernel=lambda: axpy_fwd(alpha, x, y),
        reference=lambda: axpy_ref(alpha, x, y).contiguous(),
    )  # fmt: skip


@torch.library.custom_op("tritonforge::axpy", mutates_args=())
def axpy_op(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    """The PyTorch operator (what torch.compile and CUDA graphs see): the routed kernel."""
    return _axpy_routed(x, y, alpha)


@axpy_op.register_fake
def _(x, y, alpha):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def setup_context(ctx, inputs, output):
    """The backward needs only alpha."""
    ctx.alpha = inputs[2]


def backward(ctx, dout):
    """``(dx, dy, None)`` = ``(alpha * dout, dout, None)``."""
    # d(alpha*x + y)/dx = alpha, d/dy = 1: PyTorch ops, so a second derivative is exact (zero).
    return (ctx.alpha * dout if ctx.needs_input_grad[0] else None), (dout if ctx.needs_input_grad[1] else None), None


axpy_op.register_autograd(backward, setup_context=setup_context)


def _vmap_rule(info, in_dims, x, y, alpha):
    """``vmap``: elementwise, so both inputs are given the batch dimension in front."""
    x_dim, y_dim, _ = in_dims
    x = x.movedim(x_dim, 0) if x_dim is not None else x.expand(info.batch_size, *x.shape)
    y = y.movedim(y_dim, 0) if y_dim is not None else y.expand(info.batch_size, *y.shape)
    return axpy_op(x, y, alpha), 0


axpy_op.register_vmap(_vmap_rule)


def axpy(alpha: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Return ``alpha * x + y`` in one pass over memory.

    Differentiable (``dx = alpha * dout``, ``dy = dout``) and usable under ``torch.compile`` and
    CUDA graphs through the operator ``torch.ops.tritonforge.axpy``; forward-mode AD and
    ``torch.func`` transforms other than ``vmap`` take the PyTorch reference (a routed fallback).

    Args:
        alpha: a real Python number (applied in float32; float64 for float64 tensors).
        x: float16, bfloat16, float32 or float64 tensor of any shape.
        y: tensor with x's shape, dtype and device.

    Returns:
        A new contiguous tensor with x's shape and dtype. ``tfg.last_path("axpy")`` tells which
        path computed it.
    """
    key = launches.signature(OP, (x, y), (alpha,))
    out = launches.run_remembered(key, x, y)  # this signature, checked and served by the kernel before
    if out is not launches.MISS:
        return out
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a real Python number, got {type(alpha).__name__}")
    checks.check_tensor("x", x, dtypes=AXPY_DTYPES)
    checks.check_tensor("y", y, dtypes=AXPY_DTYPES)
    checks.check_same_device(x=x, y=y)
    checks.check_same_dtype(x=x, y=y)
    checks.check_same_shape(x=x, y=y)
    return ENTRY.serve((x, y), (float(alpha),), key)


def _remembered_launch(x: torch.Tensor, y: torch.Tensor, alpha: float):
    """The launch :func:`axpy_fwd` makes for contiguous inputs of this signature, every decision
    taken once: a function of ``(x, y)``; ``None`` where an input would be copied first."""
    if not (x.is_contiguous() and y.is_contiguous()):
        return None
    n = x.numel()
    kernel = launches.bound_launch(_axpy_kernel, (-(-n // BLOCK_SIZE),), BLOCK=BLOCK_SIZE, ROUND_BF16=round_bf16_by_hand(x.dtype),
                                  ACC_DTYPE=acc_dtype(x.dtype))  # fmt: skip
    alpha_hi, alpha_lo = split_float(alpha)
    shape, dtype, device = x.shape, x.dtype, x.device

    def launch(x, y):
        out = torch.empty(shape, dtype=dtype, device=device)
        kernel(x, y, out, alpha_hi, alpha_lo, n)
        return out

    return launch


ENTRY = launches.OpEntry(OP, op=lambda x, y, alpha: axpy_op(x, y, alpha), eager=lambda x, y, alpha: _axpy_routed(x, y, alpha),
                        reference=lambda x, y, alpha: axpy_ref(alpha, x, y).contiguous(), launch=_remembered_launch,
                        empty=False)  # fmt: skip
