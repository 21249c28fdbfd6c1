r"""The softmax's backward (chapter 6): ``dx = y * (dy - <dy, y>)``, from the output alone.

Math. :math:`\partial y_i / \partial x_j = y_i(\delta_{ij} - y_j)`, so

.. math:: dx = y \odot \big(dy - \langle dy, y \rangle\big),

which needs only ``y`` (saved by the forward), never ``x``: read ``dy`` and ``y``, write ``dx``. The
strategies are the forward's (:func:`tritonforge.ops.softmax.plan` with ``backward=True``) with the
dot product ``<dy, y>`` in place of the online state: one pass (the row in registers), the two-pass
loop, split rows (a first kernel writes each chunk's part of the dot product, a second sums them and
writes its chunk of dx), and on a GPU cooperative rows (:mod:`tritonforge.ops.gpu.softmax`).
"""

from __future__ import annotations

import torch

from tritonforge import launches, runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, as_rows, cast_for_store, round_bf16_by_hand
from tritonforge.ops.gpu import softmax as gpu
from tritonforge.ops.softmax import plan, softmax_op
from tritonforge.reference import softmax_bwd_ref

BACKWARD_OP = "softmax_backward"
"""The name :func:`tritonforge.last_path` knows for the backward of a training call."""


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _dot_part(dy_row, y_row, start, end, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """``sum(dy * y)`` over ``[start, end)`` of one row."""
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=ACC_DTYPE)
    for off in range(start, end, BLOCK_N):
        idx = off + cols
        mask = idx < end
        dy = tl.load(dy_row + idx, mask=mask, other=0.0, eviction_policy="evict_last").to(ACC_DTYPE)
        y = tl.load(y_row + idx, mask=mask, other=0.0, eviction_policy="evict_last").to(ACC_DTYPE)
        acc += dy * y
    return tl.sum(acc, axis=0)


@triton.jit
def _write_dx(dy_row, y_row, dx_row, start, end, dot, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr, ROUND_BF16: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    for off in range(start, end, BLOCK_N):
        idx = off + cols
        mask = idx < end
        dy = tl.load(dy_row + idx, mask=mask, other=0.0, eviction_policy="evict_first").to(ACC_DTYPE)
        y = tl.load(y_row + idx, mask=mask, other=0.0, eviction_policy="evict_first").to(ACC_DTYPE)
        tl.store(dx_row + idx, cast_for_store(y * (dy - dot), dx_row.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _softmax_bwd_kernel(
    dy_ptr,  # *dy [M, N]: row stride dy_row_stride, unit column stride
    y_ptr,  # *y [M, N], contiguous (the forward's output)
    dx_ptr,  # *dx [M, N], contiguous
    dy_row_stride,
    N,
    BLOCK_N: tl.constexpr,
    ROW_FITS: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
):
    """One program per row: ``dx = y * (dy - sum(dy * y))``; one pass when the row fits, else two."""
    row = tl.program_id(0).to(tl.int64)
    dy_row = dy_ptr + row * dy_row_stride
    y_row = y_ptr + row * N
    dx_row = dx_ptr + row * N
    if ROW_FITS:
        cols = tl.arange(0, BLOCK_N)
        mask = cols < N
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(ACC_DTYPE)
        y = tl.load(y_row + cols, mask=mask, other=0.0).to(ACC_DTYPE)
        dx = y * (dy - tl.sum(dy * y, axis=0))
        tl.store(dx_row + cols, cast_for_store(dx, dx_ptr.dtype.element_ty, ROUND_BF16), mask=mask)
    else:
        dot = _dot_part(dy_row, y_row, 0, N, BLOCK_N, ACC_DTYPE)
        _write_dx(dy_row, y_row, dx_row, 0, N, dot, BLOCK_N, ACC_DTYPE, ROUND_BF16)


@triton.jit
def _softmax_bwd_split_dot_kernel(dy_ptr, y_ptr, dot_ptr, dy_row_stride, N, chunk, SPLITS: tl.constexpr, BLOCK_N: tl.constexpr,
                                  ACC_DTYPE: tl.constexpr):  # fmt: skip
    """Program (row, split): this chunk's part of ``<dy, y>`` into ``dot[row, split]``."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    start = split * chunk
    part = _dot_part(dy_ptr + row * dy_row_stride, y_ptr + row * N, start, tl.minimum(start + chunk, N), BLOCK_N, ACC_DTYPE)
    tl.store(dot_ptr + row * SPLITS + split, part)


@triton.jit
def _softmax_bwd_split_write_kernel(dy_ptr, y_ptr, dx_ptr, dot_ptr, dy_row_stride, N, chunk, SPLITS: tl.constexpr,
                                    BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr, ROUND_BF16: tl.constexpr):  # fmt: skip
    """Program (row, split): sum the row's partial dots, then write this chunk of dx."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    dot = tl.sum(tl.load(dot_ptr + row * SPLITS + tl.arange(0, SPLITS)), axis=0)
    start = split * chunk
    _write_dx(dy_ptr + row * dy_row_stride, y_ptr + row * N, dx_ptr + row * N, start, tl.minimum(start + chunk, N), dot, BLOCK_N,
              ACC_DTYPE, ROUND_BF16)  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Launch, routing, the operator and autograd
# ----------------------------------------------------------------------------------------------

_empty = torch.empty


def softmax_bwd(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Launch the backward: ``dx`` a new contiguous tensor of y's shape and dtype."""
    N = y.shape[-1]
    dy_rows = as_rows(dy, N)
    y_rows = as_rows(y, N).contiguous()  # the forward's own output: contiguous already
    M = y_rows.shape[0]
    dx = _empty(*y.shape, dtype=y.dtype, device=y.device)
    p = plan(M, N, y.dtype, y.device, backward=True)
    if p.strategy == "cooperative":  # the GPU's
        gpu.backward(p, dy_rows, y_rows, dx)
        return dx
    flags = dict(ACC_DTYPE=acc_dtype(y.dtype))
    rounding = round_bf16_by_hand(y.dtype)
    if p.strategy != "split":
        _softmax_bwd_kernel[(M,)](dy_rows, y_rows, dx, dy_rows.stride(0), N, BLOCK_N=p.block_n, ROW_FITS=p.strategy == "one-pass",
                                  ROUND_BF16=rounding, num_warps=p.num_warps, **flags)  # fmt: skip
        return dx
    acc = torch.float64 if y.dtype == torch.float64 else torch.float32
    dots = _empty(M, p.splits, dtype=acc, device=y.device)
    grid = (M, p.splits)
    _softmax_bwd_split_dot_kernel[grid](dy_rows, y_rows, dots, dy_rows.stride(0), N, p.chunk, SPLITS=p.splits,
                                        BLOCK_N=p.block_n, num_warps=p.num_warps, **flags)  # fmt: skip
    _softmax_bwd_split_write_kernel[grid](dy_rows, y_rows, dx, dots, dy_rows.stride(0), N, p.chunk, SPLITS=p.splits,
                                          BLOCK_N=p.block_n, ROUND_BF16=rounding, num_warps=p.num_warps, **flags)  # fmt: skip
    return dx


def _backward_routed(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if y.numel() == 0:
        runtime.record_empty(BACKWARD_OP)
        return torch.zeros_like(y)
    return runtime.dispatch(BACKWARD_OP, device=y.device, dtype=y.dtype, kernel=lambda: softmax_bwd(dy, y),
                            reference=lambda: softmax_bwd_ref(dy, y))  # fmt: skip


@torch.library.custom_op("tritonforge::softmax_backward", mutates_args=())
def softmax_backward_op(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``dx = y * (dy - sum(dy * y, -1))``, routed."""
    return _backward_routed(dy, y)


@softmax_backward_op.register_fake
def _(dy, y):
    return y.new_empty(y.shape)


def setup_context(ctx, inputs, output):
    """The backward needs only the output y."""
    ctx.save_for_backward(output)


def backward(ctx, dy):
    """dx from the backward operator, or from the differentiable reference under ``create_graph``."""
    (y,) = ctx.saved_tensors
    return launches.backward_or_reference(BACKWARD_OP, lambda: softmax_backward_op(dy, y), lambda: softmax_bwd_ref(dy, y))


softmax_op.register_autograd(backward, setup_context=setup_context)
