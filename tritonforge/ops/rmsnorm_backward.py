r"""RMSNorm's backward, hand-derived (chapter 4): one pass over dy and x, the weight gradient
reduced without atomics.

Math. Given :math:`dy = \partial L / \partial y` for ``y = w * xhat``, ``xhat = x * r``,
:math:`r = (\tfrac{1}{N}\sum_j x_j^2 + \varepsilon)^{-1/2}`, the weight gradient sums over rows,

.. math:: dw = \sum_{\text{rows}} dy \odot \hat{x},

and the input gradient follows from :math:`\partial r / \partial x_i = -r^3 x_i / N`:

.. math::

    dx_i = r\, dy_i w_i + \sum_j dy_j w_j x_j \Big(-\frac{r^3 x_i}{N}\Big)
         = r \Big( dy_i w_i - \hat{x}_i \cdot \tfrac{1}{N} \sum_j dy_j w_j \hat{x}_j \Big),

that is ``dx = r * (dy*w - xhat * mean(dy*w*xhat, -1))``, from the ``rstd`` the training forward
saved (:func:`tritonforge.ops.rmsnorm.rms_norm_fwd`).

The reduction of ``dw`` is deterministic: the grid has a fixed number of programs (about one per SM
on a GPU, a handful in the interpreter, :func:`bwd_grid`); each owns a contiguous group of rows and
writes one float32 (float64) partial-sum row into a ``[programs, N]`` buffer, which ``.sum(0)``
then reduces. On a GPU a program's row loop is software-pipelined where the rows fit shared memory
(:func:`bwd_stages`, :func:`bwd_programs_per_sm`).

Autograd: the training forward (``tritonforge::rms_norm_train``) saves ``x``, ``weight`` and
``rstd``; :func:`backward` calls the routed backward operator, or, when autograd builds a graph of
the gradient (``create_graph=True``), the differentiable PyTorch reference, so that second
derivatives are exact.
"""

from __future__ import annotations

from typing import Optional

import torch

from tritonforge import hardware, launches, runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, acc_torch_dtype, as_rows, cast_for_store, round_bf16_by_hand
from tritonforge.ops.rmsnorm import rms_norm_train_op, row_config
from tritonforge.reference import rms_norm_bwd_ref

BACKWARD_OP = "rms_norm_backward"
"""The name :func:`tritonforge.last_path` knows for the backward of a training call."""


# ----------------------------------------------------------------------------------------------
# The kernel
# ----------------------------------------------------------------------------------------------


@triton.jit
def _rms_norm_bwd_kernel(
    dy_ptr,  # *dy [M, N]: row stride dy_row_stride, unit column stride,
             # x's dtype
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    weight_ptr,  # *weight [N], contiguous
    rstd_ptr,  # *rstd [M], ACC_DTYPE, from the forward
    dx_ptr,  # *dx [M, N]: row stride dx_row_stride, x's dtype (unused
             # without COMPUTE_DX)
    dw_partial_ptr,  # *[programs, N] ACC_DTYPE: this program's sum of
                     # dy * xhat over its rows
    dy_row_stride,  # elements between rows of dy
    x_row_stride,  # elements between rows of x
    dx_row_stride,  # elements between rows of dx
    M,  # number of rows
    N,  # row length
    rows_per_program,  # each program owns rows [pid * rows_per_program,
                       # ... + rows_per_program)
    BLOCK_N: tl.constexpr,  # columns per block (power of two)
    ROW_FITS: tl.constexpr,  # N <= BLOCK_N: w and the dw partial stay in
                             # registers
    ACC_DTYPE: tl.constexpr,  # tl.float32, or tl.float64 for float64 inputs
    COMPUTE_DX: tl.constexpr,  # x needs a gradient
    COMPUTE_DW: tl.constexpr,  # weight needs a gradient
    ROUND_BF16: tl.constexpr,  # interpreter + bf16: round the dx downcast
                               # by hand
    STAGES: tl.constexpr,  # software-pipelining depth of the row loop
                           # (1 = none): see bwd_stages
):
    """``dx = rstd * (dy*w - xhat * mean(dy*w*xhat))`` per row; ``dw``
    partial = sum of ``dy*xhat``."""
    pid = tl.program_id(0).to(tl.int64)
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, M)
    cols = tl.arange(0, BLOCK_N)
    # this program's private row: no atomics, deterministic
    dw_row = dw_partial_ptr + pid * N
    if ROW_FITS:
        mask = cols < N
        w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(ACC_DTYPE)
        dw_acc = tl.zeros([BLOCK_N], dtype=ACC_DTYPE)
        # With STAGES > 1 the compiler loads the next rows of x and dy (into
        # shared memory) while this row is computed: one program per SM
        # walks many rows, and without the overlap each row's load latency
        # is paid in full.
        for row in tl.range(row_start, row_end, num_stages=STAGES):
            x = tl.load(x_ptr + row * x_row_stride + cols,
                        mask=mask, other=0.0).to(ACC_DTYPE)
            dy = tl.load(dy_ptr + row * dy_row_stride + cols,
                         mask=mask, other=0.0).to(ACC_DTYPE)
            rstd = tl.load(rstd_ptr + row)
            x_hat = x * rstd
            if COMPUTE_DW:
                dw_acc += dy * x_hat
            if COMPUTE_DX:
                dy_w = dy * w
                mean_dyw_xhat = tl.sum(dy_w * x_hat, axis=0) / N
                dx = rstd * (dy_w - x_hat * mean_dyw_xhat)
                dx_out = cast_for_store(dx, dx_ptr.dtype.element_ty,
                                        ROUND_BF16)
                tl.store(dx_ptr + row * dx_row_stride + cols, dx_out,
                         mask=mask)
        if COMPUTE_DW:
            tl.store(dw_row + cols, dw_acc, mask=mask)
    else:
        # Long rows: the dw partial row lives in the (zero-initialized)
        # buffer and is updated block by block; only this program touches
        # it, so read-modify-write is race-free.
        for row in range(row_start, row_end):
            x_row = x_ptr + row * x_row_stride
            dy_row = dy_ptr + row * dy_row_stride
            rstd = tl.load(rstd_ptr + row)
            if COMPUTE_DX:
                # Pass 1: mean(dy * w * xhat) over the whole row.
                acc = tl.zeros([BLOCK_N], dtype=ACC_DTYPE)
                for start in range(0, N, BLOCK_N):
                    mask = start + cols < N
                    x = tl.load(x_row + start + cols, mask=mask,
                                other=0.0).to(ACC_DTYPE)
                    dy = tl.load(dy_row + start + cols, mask=mask,
                                 other=0.0).to(ACC_DTYPE)
                    w = tl.load(weight_ptr + start + cols, mask=mask,
                                other=0.0).to(ACC_DTYPE)
                    acc += dy * w * (x * rstd)
                mean_dyw_xhat = tl.sum(acc, axis=0) / N
            # Pass 2: dx, and this row's contribution to the dw partial.
            for start in range(0, N, BLOCK_N):
                mask = start + cols < N
                x = tl.load(x_row + start + cols, mask=mask,
                            other=0.0).to(ACC_DTYPE)
                dy = tl.load(dy_row + start + cols, mask=mask,
                             other=0.0).to(ACC_DTYPE)
                x_hat = x * rstd
                if COMPUTE_DX:
                    w = tl.load(weight_ptr + start + cols, mask=mask,
                                other=0.0).to(ACC_DTYPE)
                    dx = rstd * (dy * w - x_hat * mean_dyw_xhat)
                    dx_out = cast_for_store(dx, dx_ptr.dtype.element_ty,
                                            ROUND_BF16)
                    tl.store(dx_ptr + row * dx_row_stride + start + cols,
                             dx_out, mask=mask)
                if COMPUTE_DW:
                    partial = tl.load(dw_row + start + cols, mask=mask,
                                      other=0.0)
                    tl.store(dw_row + start + cols, partial + dy * x_hat,
                             mask=mask)


# ----------------------------------------------------------------------------------------------
# Heuristics: the grid and the pipelining of the row loop
# ----------------------------------------------------------------------------------------------

INTERPRETER_BWD_PROGRAMS = 8
"""Backward programs in the interpreter: few, because each program costs CPU time."""

BWD_PIPELINE_STAGES = 3
"""Rows of x and dy in flight per backward program when the row loop is software-pipelined."""

BWD_PIPELINE_MAX_ROW_BYTES = 16 * 1024
"""Pipeline only row blocks up to this size (float32 rows of 32 KB gained nothing)."""

BWD_SHARED_SLACK_BYTES = 2048
"""Shared memory a backward program uses besides the pipeline buffers (reduction scratch),
counted generously so that :func:`bwd_shared_bytes` is an upper bound (GPU-tested against the
compiled kernel's ``metadata.shared``)."""


def bwd_shared_bytes(block_n: int, itemsize: int, stages: int) -> int:
    """Upper bound of the shared memory one backward program uses: a pipelined loop keeps
    ``stages`` row blocks of x and of dy in flight; an unpipelined one keeps none."""
    buffers = stages * 2 * block_n * itemsize if stages > 1 else 0
    return buffers + BWD_SHARED_SLACK_BYTES


def bwd_stages(block_n: int, dtype: torch.dtype, device: torch.device) -> int:
    """Pipelining depth of the backward's row loop: the deepest of 3, 2 whose buffers fit the
    device's shared memory per block (read from the driver, :func:`hardware.shared_memory_per_block`),
    for row blocks up to ``BWD_PIPELINE_MAX_ROW_BYTES``; else 1 (no pipelining). Pipelining needs
    asynchronous copies (``cp.async``, compute capability 8.0 and newer); the interpreter has no
    pipeline."""
    if device.type != "cuda" or hardware.interpreting():
        return 1
    capability = hardware.device_capability(device)
    if capability is None or capability < (8, 0) or block_n * dtype.itemsize > BWD_PIPELINE_MAX_ROW_BYTES:
        return 1
    limit = hardware.shared_memory_per_block(device)
    for stages in range(BWD_PIPELINE_STAGES, 1, -1):
        if limit is not None and bwd_shared_bytes(block_n, dtype.itemsize, stages) <= limit:
            return stages
    return 1


def bwd_programs_per_sm(row_bytes: int, stages: int) -> int:
    """Backward programs per SM for the pipelined loop, by the bytes of one row block (the row
    padded to ``BLOCK_N``): 1 for 16 KB and more, 2 for 8 KB, 3 below; 1 unpipelined."""
    if stages == 1 or row_bytes >= 16 * 1024:
        return 1
    return 2 if row_bytes >= 8 * 1024 else 3


def bwd_grid(M: int, device: torch.device,
             programs_per_sm: int = 1) -> tuple[int, int]:
    """``(programs, rows_per_program)`` for the backward:
    ``programs_per_sm`` programs per SM on a GPU (each walks a contiguous
    block of rows), a few in the interpreter."""
    if device.type == "cuda" and not hardware.interpreting():
        index = (device.index if device.index is not None
                 else torch.cuda.current_device())
        target = hardware.sm_count(index) * programs_per_sm
    else:
        target = INTERPRETER_BWD_PROGRAMS
    # Ceil division in plain ints (triton.cdiv is a constexpr_function:
    # ~2 µs of Python a call).
    rows_per_program = -(-M // max(1, min(M, target)))
    return -(-M // rows_per_program), rows_per_program


# ----------------------------------------------------------------------------------------------
# Launch, routing, the operator and autograd
# ----------------------------------------------------------------------------------------------


def _empty(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every buffer the kernel must overwrite completely is allocated here (tests poison it)."""
    return torch.empty(*shape, dtype=dtype, device=device)


def rms_norm_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    rstd: torch.Tensor,
    *,
    compute_dx: bool = True,
    compute_dweight: bool = True,
) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Launch the backward kernel. Returns ``(dx, dweight)`` (``None`` for a
    gradient not asked): dx in x's dtype and shape, dweight in weight's
    dtype."""
    N = x.shape[-1]
    x_rows = as_rows(x, N)  # [M, N]
    # [M, N]; a copy when dy is not row-major (e.g. expanded)
    dy_rows = as_rows(dy, N)
    weight = weight.contiguous()  # [N]
    M = x_rows.shape[0]
    device = x.device
    acc = acc_torch_dtype(x.dtype)
    block_n, num_warps = row_config(N, x.dtype, backward=True)
    row_fits = N <= block_n
    stages = bwd_stages(block_n, x.dtype, device) if row_fits else 1
    programs, rows_per_program = bwd_grid(
        M, device, bwd_programs_per_sm(block_n * x.element_size(), stages))
    # dx: x's shape, owns its storage
    dx = (_empty(*x.shape, dtype=x.dtype, device=device)
          if compute_dx else None)
    dw_partial = None
    if compute_dweight:
        # [programs, N]; long rows accumulate into it, so it starts at zero
        dw_partial = (
            _empty(programs, N, dtype=acc, device=device) if row_fits
            else torch.zeros(programs, N, dtype=acc, device=device)
        )
    # placeholder pointers are never touched
    dx_rows = dx.view(M, N) if dx is not None else dy_rows
    _rms_norm_bwd_kernel[(programs,)](
        dy_rows, x_rows, weight, rstd, dx_rows,
        dw_partial if dw_partial is not None else rstd,
        dy_rows.stride(0), x_rows.stride(0), dx_rows.stride(0),
        M, N, rows_per_program,
        BLOCK_N=block_n, ROW_FITS=row_fits, ACC_DTYPE=acc_dtype(x.dtype),
        COMPUTE_DX=compute_dx, COMPUTE_DW=compute_dweight,
        ROUND_BF16=round_bf16_by_hand(x.dtype),
        STAGES=stages, num_warps=num_warps,
    )  # fmt: skip
    dweight = (dw_partial.sum(0).to(weight.dtype)  # [N]
               if dw_partial is not None else None)
    return dx, dweight


def _backward_routed(dy, x, weight, rstd, eps: float, need_dx: bool, need_dweight: bool):
    """``(dx, dweight)`` from the backward kernel, or from the reference backward (routed like
    the forward: warned once, recorded, an error in strict mode)."""
    if x.numel() == 0:
        runtime.record_empty(BACKWARD_OP)
        return (torch.zeros_like(x) if need_dx else None), (torch.zeros_like(weight) if need_dweight else None)

    def reference():
        dx, dweight = rms_norm_bwd_ref(dy, x, weight, eps)
        return (dx if need_dx else None), (dweight if need_dweight else None)

    return runtime.dispatch(
        BACKWARD_OP, device=x.device, dtype=x.dtype,
        kernel=lambda: rms_norm_bwd(dy, x, weight, rstd, compute_dx=need_dx, compute_dweight=need_dweight),
        reference=reference,
    )  # fmt: skip


@torch.library.custom_op("tritonforge::rms_norm_backward", mutates_args=())
def rms_norm_backward_op(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor, eps: float, need_dx: bool, need_dweight: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward, routed: ``(dx, dweight)``; a gradient not asked for is an empty tensor
    (an operator's outputs cannot be None)."""
    dx, dweight = _backward_routed(dy, x, weight, rstd, eps, need_dx, need_dweight)
    return (dx if dx is not None else x.new_empty(0)), (dweight if dweight is not None else weight.new_empty(0))


@rms_norm_backward_op.register_fake
def _(dy, x, weight, rstd, eps, need_dx, need_dweight):
    return (x.new_empty(x.shape if need_dx else (0,))), weight.new_empty(weight.shape if need_dweight else (0,))


def setup_context(ctx, inputs, output):
    """What the backward keeps from the training forward: x, weight and the
    per-row rstd."""
    x, weight, eps = inputs
    _, rstd = output
    ctx.save_for_backward(x, weight, rstd)
    ctx.eps = eps
    ctx.mark_non_differentiable(rstd)


def backward(ctx, dy, _drstd):
    """``(dx, dweight, None)`` from dy: the backward operator (routed), or
    the differentiable reference backward when autograd builds a graph of
    the gradient (``create_graph=True``)."""
    x, weight, rstd = ctx.saved_tensors
    need_dx, need_dweight = ctx.needs_input_grad[:2]
    if not (need_dx or need_dweight):
        return None, None, None
    # create_graph=True (a Hessian, a gradient penalty): the reference
    # backward, whose PyTorch ops autograd records (rstd recomputed from x
    # inside the graph); else the routed operator.
    dx, dweight = launches.backward_or_reference(
        BACKWARD_OP,
        lambda: rms_norm_backward_op(
            dy, x, weight, rstd, ctx.eps, need_dx, need_dweight),
        lambda: rms_norm_bwd_ref(dy, x, weight, ctx.eps))
    dx = dx if need_dx else None
    return dx, (dweight if need_dweight else None), None


rms_norm_train_op.register_autograd(backward, setup_context=setup_context)
