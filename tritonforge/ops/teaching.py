r"""Chapter 2's teaching ops: programs, blocks, masks, pointers and strides.

The programming model in one paragraph. A Triton kernel is written for **one program**: one
instance of the kernel, identified by ``tl.program_id(axis)``, that works on one **block** of
the data. ``tl.arange(0, BLOCK)`` is a vector of ``BLOCK`` consecutive indices (``BLOCK`` a
power of two known at compile time); adding it to ``pid * BLOCK`` gives the indices of this
program's block. The last block usually sticks out past the end of the tensor, so every load and
store takes a **mask** that switches the extra lanes off. Memory is reached by **pointer
arithmetic**: ``x_ptr + offsets`` is a block of addresses, and for a 2-D view element
``(i, j)`` lives at ``x_ptr + i * stride_m + j * stride_n`` — passing the view's strides lets a
kernel read a transposed or sliced tensor in place, without a copy.

Ops, in reading order:

``vector_add(x, y)``
    :math:`\mathrm{out}_i = x_i + y_i`, one 1-D program per ``VECTOR_BLOCK`` elements.
``add_2d(x, y)``
    :math:`\mathrm{out}_{ij} = x_{ij} + y_{ij}` on 2-D tensors with **any** strides (transposed,
    sliced), a 2-D grid of ``ADD_2D_BLOCK_M × ADD_2D_BLOCK_N`` tiles; nothing is copied.
``program_map(M, N, block_m, block_n)``
    a teaching op: element ``(i, j)`` receives the number of the program that wrote it, using
    the same index arithmetic as ``add_2d``; chapter 2 draws it
    (``tritonforge.book.program_figures.plot_program_map``).

Arithmetic happens in float32: 16-bit inputs are upcast right after ``tl.load`` (Triton's CPU
interpreter keeps a bf16 block as raw 16-bit integers and computes bf16 arithmetic wrongly
otherwise), and the sum is cast once, to the output's dtype, with ``.to(out_ptr.dtype.element_ty)``
just before ``tl.store``. That cast rounds to nearest-even when compiled for a GPU, so fp16 and
bf16 results are the float32 sum rounded once. These first kernels are kept free of any
workaround, so one difference is left in: **Triton's CPU interpreter truncates float32 -> bf16**
(rounds toward zero) where the GPU rounds to nearest, so in the interpreter a bf16 result may be
one bf16 ulp toward zero from the GPU's (float16 and float32 results are identical on both
paths). The package's other kernels round by hand there (``kernel_utils.cast_for_store``,
introduced in chapter 3, where a bf16 result is first compared bit for bit).

What these kernels compile to (IR at every stage, registers, vector widths) is read by
``tritonforge.book.compile_ir``.
"""

from __future__ import annotations

from typing import Optional

import torch

from tritonforge import checks, runtime
from tritonforge._triton import tl, triton
from tritonforge.reference import add_ref, program_map_ref

TEACHING_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

# ----------------------------------------------------------------------------------------------
# Block sizes (the only tuning in this module)
# ----------------------------------------------------------------------------------------------

VECTOR_BLOCK = 1024  # elements per 1-D program: 4 KB of fp32 per operand
ADD_2D_BLOCK_M = 16  # rows per 2-D tile
ADD_2D_BLOCK_N = 64  # columns per 2-D tile: 256 B of fp32 per row, two 128-byte lines
NUM_WARPS = 4  # 128 threads per program on a GPU (ignored by the interpreter)


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _vector_add_kernel(
    x_ptr,  # *x, contiguous, n_elements values
    y_ptr,  # *y, contiguous, same dtype and length
    out_ptr,  # *out, contiguous, written in x's dtype
    n_elements,  # length, not constexpr: one kernel serves every length
    BLOCK: tl.constexpr,  # elements per program, a power of two
):
    pid = tl.program_id(0).to(tl.int64)  # which program am I? (no overflow)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)  # my block: [BLOCK] indices
    mask = offsets < n_elements  # False past the end (last block only)
    # Compute in float32; round once, to the output's dtype.
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    out = (x + y).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + offsets, out, mask=mask)


@triton.jit
def _add_2d_kernel(
    x_ptr,  # *x [M, N], any strides
    y_ptr,  # *y [M, N], any strides
    out_ptr,  # *out [M, N], any strides
    M,  # rows
    N,  # columns
    stride_xm,  # elements from x[i, j] to x[i + 1, j]
    stride_xn,  # elements from x[i, j] to x[i, j + 1]
    stride_ym,
    stride_yn,
    stride_om,
    stride_on,
    BLOCK_M: tl.constexpr,  # rows per tile
    BLOCK_N: tl.constexpr,  # columns per tile
):
    pid_m = tl.program_id(0)  # tile row
    pid_n = tl.program_id(1)  # tile column
    # my tile's row indices [BLOCK_M] and column indices [BLOCK_N]
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    r, c = rows[:, None], cols[None, :]  # [BLOCK_M, 1] and [1, BLOCK_N]
    mask = (r < M) & (c < N)  # [BLOCK_M, BLOCK_N]: inside the tensor
    # Compute in float32; round once, to the output's dtype.
    x = tl.load(x_ptr + r * stride_xm + c * stride_xn,
                mask=mask).to(tl.float32)
    y = tl.load(y_ptr + r * stride_ym + c * stride_yn,
                mask=mask).to(tl.float32)
    out = (x + y).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + r * stride_om + c * stride_on, out, mask=mask)


@triton.jit
def _program_map_kernel(
    out_ptr,  # *out [M, N] int32, contiguous
    M,
    N,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    program = pid_m * tl.num_programs(1) + pid_n  # one number per program, row-major over the grid
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    value = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32) + program
    tl.store(out_ptr + rows[:, None] * N + cols[None, :], value, mask=mask)


# ----------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------


def vector_add_fwd(x: torch.Tensor, y: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Launch the 1-D kernel; non-contiguous inputs are copied to contiguous first.

    ``out`` (contiguous, x's shape and dtype) lets tests pass a NaN-poisoned buffer.
    """
    x_flat = x.contiguous().view(-1)  # [n]
    y_flat = y.contiguous().view(-1)  # [n]
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    n = x_flat.numel()
    grid = (triton.cdiv(n, VECTOR_BLOCK),)
    _vector_add_kernel[grid](
        x_flat, y_flat, out.view(-1), n, BLOCK=VECTOR_BLOCK, num_warps=NUM_WARPS
    )
    return out


def add_2d_grid(M: int, N: int) -> tuple[int, int]:
    """``(tiles down, tiles across)``: axis 0 takes the rows, whose grid limit is 2**31 - 1."""
    return triton.cdiv(M, ADD_2D_BLOCK_M), triton.cdiv(N, ADD_2D_BLOCK_N)


def add_2d_fwd(x: torch.Tensor, y: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Launch the 2-D kernel on the views as they are: their strides go to the kernel, no copy.

    ``out`` may be any ``[M, N]`` tensor (tests pass a NaN-poisoned, even strided, buffer).
    """
    M, N = x.shape
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _add_2d_kernel[add_2d_grid(M, N)](
        x, y, out, M, N,
        x.stride(0), x.stride(1),
        y.stride(0), y.stride(1),
        out.stride(0), out.stride(1),
        BLOCK_M=ADD_2D_BLOCK_M, BLOCK_N=ADD_2D_BLOCK_N, num_warps=NUM_WARPS,
    )  # fmt: skip
    return out


def program_map_fwd(M: int, N: int, block_m: int, block_n: int, device) -> torch.Tensor:
    out = torch.empty((M, N), dtype=torch.int32, device=device)
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    _program_map_kernel[grid](out, M, N, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=1)
    return out


# ----------------------------------------------------------------------------------------------
# Public ops
# ----------------------------------------------------------------------------------------------


def _check_pair(x: object, y: object) -> torch.device:
    checks.check_tensor("x", x, dtypes=TEACHING_DTYPES)
    checks.check_tensor("y", y, dtypes=TEACHING_DTYPES)
    device = checks.check_same_device(x=x, y=y)
    checks.check_same_dtype(x=x, y=y)
    checks.check_same_shape(x=x, y=y)
    return device


def vector_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Return ``x + y`` computed by one 1-D Triton program per ``VECTOR_BLOCK`` elements.

    Args:
        x: float16, bfloat16 or float32 tensor of any shape (copied if not contiguous).
        y: tensor with x's shape, dtype and device.

    Returns:
        A new contiguous tensor with x's shape and dtype; ``tfg.last_path("vector_add")`` tells
        which path computed it. (bf16 in the interpreter: truncated, not rounded; see the module
        docstring.)
    """
    device = _check_pair(x, y)
    if x.numel() == 0:  # nothing to launch: recorded, not a fallback
        runtime.record_empty("vector_add")
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    return runtime.dispatch(
        "vector_add",
        device=device,
        kernel=lambda: vector_add_fwd(x, y),
        reference=lambda: add_ref(x, y).contiguous(),
        dtype=x.dtype,
    )


def add_2d(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Return ``x + y`` for 2-D tensors of any strides, read in place (no ``.contiguous()`` copy).

    Args:
        x: 2-D float16, bfloat16 or float32 tensor; any strides (a transposed or sliced view).
        y: tensor with x's shape, dtype and device; its strides may differ from x's.

    Returns:
        A new contiguous ``[M, N]`` tensor in x's dtype; ``tfg.last_path("add_2d")`` tells which
        path computed it. (bf16 in the interpreter: truncated, not rounded; see the module
        docstring.)
    """
    device = _check_pair(x, y)
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D, got shape {tuple(x.shape)}")
    if x.numel() == 0:  # nothing to launch: recorded, not a fallback
        runtime.record_empty("add_2d")
        return torch.empty(tuple(x.shape), dtype=x.dtype, device=device)
    return runtime.dispatch(
        "add_2d",
        device=device,
        kernel=lambda: add_2d_fwd(x, y),
        reference=lambda: add_ref(x, y).contiguous(),
        dtype=x.dtype,
    )


def _check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def program_map(M: int, N: int, block_m: int, block_n: int, *, device="cpu") -> torch.Tensor:
    """``[M, N]`` int32 tensor: element ``(i, j)`` holds the number of the program that wrote it.

    The grid is ``cdiv(M, block_m) × cdiv(N, block_n)`` tiles, numbered row by row. Every
    element is written by the kernel itself (the torch path computes the same numbers).

    Args:
        M, N: the tensor's shape (positive ints).
        block_m, block_n: the tile shape, powers of two (``tl.arange`` needs them).
        device: where to run (``env.device_type`` in a chapter).
    """
    for name, value in (("M", M), ("N", N), ("block_m", block_m), ("block_n", block_n)):
        _check_positive_int(name, value)
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if value & (value - 1):
            raise ValueError(f"{name} must be a power of two (tl.arange needs one), got {value}")
    device = torch.device(device)
    return runtime.dispatch(
        "program_map",
        device=device,
        kernel=lambda: program_map_fwd(M, N, block_m, block_n, device),
        reference=lambda: program_map_ref(M, N, block_m, block_n, device=device),
    )
