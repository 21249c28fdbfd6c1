r"""Fused ``alpha * x + y``: the smallest kernel that shows the whole routing mechanism.

Math, element by element:

.. math:: \mathrm{out}_i = \alpha\, x_i + y_i

Eager PyTorch evaluates ``alpha * x + y`` as two kernels: ``tmp = alpha * x`` (read x, write
tmp) and ``tmp + y`` (read tmp and y, write out): five tensor-sized trips through memory. The
fused kernel reads x and y once and writes out once: three trips. For a memory-bound op that
is the whole speed-up, 5/3 in the limit.

Arithmetic happens in float32 (16-bit inputs are upcast right after ``tl.load``: the
interpreter computes bf16 wrongly otherwise) and the result is stored in the inputs' dtype.
``alpha`` reaches the kernel as a float32 scalar.
"""

from __future__ import annotations

import numbers

import torch

from tritonforge import runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import CachedLauncher, cast_for_store, round_bf16_by_hand
from tritonforge.reference import axpy_ref

AXPY_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
BLOCK_SIZE = 1024  # elements per program: 4 KB of fp32 per operand, plenty to hide latency


@triton.jit
def _axpy_kernel(
    x_ptr,  # *x, contiguous, n_elements values
    y_ptr,  # *y, contiguous, same dtype and length as x
    out_ptr,  # *out, contiguous, written in x's dtype
    alpha,  # fp32 scalar
    n_elements,  # runtime length: not constexpr, so every length shares one compiled kernel
    BLOCK: tl.constexpr,  # elements handled by one program (a power of two)
    ROUND_BF16: tl.constexpr,  # round bf16 by hand (the interpreter truncates): see kernel_utils
):
    pid = tl.program_id(0).to(tl.int64)  # int64: pid * BLOCK overflows int32 past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements  # the last program's tail; unmasked, the interpreter may crash
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    out = alpha * x + y
    tl.store(out_ptr + offsets, cast_for_store(out, out_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


_launch_axpy = CachedLauncher(_axpy_kernel)


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
    grid = (triton.cdiv(n, BLOCK_SIZE),)
    _launch_axpy(grid, x_flat, y_flat, out.view(-1), float(alpha), n, BLOCK=BLOCK_SIZE, ROUND_BF16=round_bf16_by_hand(x.dtype))
    return out


def axpy(alpha: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Return ``alpha * x + y`` in one pass over memory.

    Args:
        alpha: a real Python number (applied in float32).
        x: float16, bfloat16 or float32 tensor of any shape.
        y: tensor with x's shape, dtype and device.

    Returns:
        A new contiguous tensor with x's shape and dtype. ``tfg.last_path("axpy")`` tells which
        path computed it.
    """
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a real Python number, got {type(alpha).__name__}")
    runtime.check_tensor("x", x, dtypes=AXPY_DTYPES)
    runtime.check_tensor("y", y, dtypes=AXPY_DTYPES)
    device = runtime.check_same_device(x=x, y=y)
    runtime.check_same_dtype(x=x, y=y)
    runtime.check_same_shape(x=x, y=y)
    if x.numel() == 0:  # nothing to launch: the natural empty answer
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    return runtime.dispatch(
        "axpy",
        device=device,
        kernel=lambda: axpy_fwd(alpha, x, y),
        reference=lambda: axpy_ref(alpha, x, y).contiguous(),
        dtype=x.dtype,
    )
