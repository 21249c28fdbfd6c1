r"""Fused RMSNorm, forward and backward: one pass over memory each way.

Math. For one row :math:`x \in \mathbb{R}^N` with weight :math:`w \in \mathbb{R}^N`:

.. math::

    r = \frac{1}{\sqrt{\tfrac{1}{N}\sum_j x_j^2 + \varepsilon}}, \qquad
    \hat{x} = x\, r, \qquad
    y = w \odot \hat{x}.

``r`` (called ``rstd``, one number per row) is saved for the backward pass.

Backward. Given :math:`dy = \partial L / \partial y`, the weight gradient sums over rows,

.. math:: dw = \sum_{\text{rows}} dy \odot \hat{x},

and the input gradient follows from :math:`\partial r / \partial x_i = -r^3 x_i / N`:

.. math::

    dx_i = r\, dy_i w_i + \sum_j dy_j w_j x_j \Big(-\frac{r^3 x_i}{N}\Big)
         = r \Big( dy_i w_i - \hat{x}_i \cdot \tfrac{1}{N} \sum_j dy_j w_j \hat{x}_j \Big),

that is ``dx = r * (dy*w - xhat * mean(dy*w*xhat, -1))``.

Memory traffic. Eager PyTorch runs about five kernels for the forward (square, mean, add eps,
rsqrt, two multiplies), each a trip through HBM. The fused forward reads ``x`` and ``w`` once
and writes ``y`` and ``rstd``: when a row fits in one block (``N <= BLOCK_N``) the row stays in
registers between the sum of squares and the normalization. Longer rows loop over column
blocks twice (sum of squares, then normalize and store), so the second read usually hits L2;
``_fwd_config`` also sends rows of 4096 through the two passes when there are many rows, where
that measured faster.

Dtypes and casting (Hugging Face ``LlamaRMSNorm`` semantics)::

    h = x.to(float32); h = h * rsqrt(mean(h**2) + eps); y = weight * h.to(x.dtype)

Arithmetic runs in float32 for float16, bfloat16 and float32 inputs (upcast right after
``tl.load``: the interpreter computes bf16 arithmetic wrongly otherwise) and in float64 for
float64 inputs, so that ``torch.autograd.gradcheck`` passes through the real kernels. The
normalized row is rounded to ``x.dtype`` *before* it is multiplied by ``weight``, exactly as in
Hugging Face; ``weight`` must have ``x``'s dtype, so ``y`` has it too. ``rstd`` is float32
(float64 for float64 inputs). ``eps`` is passed as a float64 scalar and cast to the accumulator
dtype in the kernel (a plain Python float would arrive as float32, which costs float64 inputs
up to ~1e-9 relative error where x² is small next to eps). ``tritonforge.reference.rms_norm_ref`` implements the same
semantics and is the ``torch`` fallback.

Layouts. Any leading shape is flattened to ``M`` rows of ``N``. Rows may be strided (a row
stride other than ``N``, e.g. ``big[:, :N]``): the kernels take row strides and read in place.
The last dimension must have unit stride; a tensor whose last dimension is strided (e.g. a
transposed view) is copied with ``.contiguous()`` first, and so is one whose leading dimensions
cannot be flattened into a single row stride. Outputs are new contiguous tensors.

Backward reduction of ``dw``, deterministic (no atomics): the backward grid has a fixed number
of programs (about one per SM on a GPU, a handful in the interpreter); each owns a contiguous
group of rows and writes one float32 (float64) partial-sum row into a ``[programs, N]`` buffer,
which ``.sum(0)`` then reduces.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Optional

import torch

from tritonforge import runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import CachedLauncher, acc_dtype, acc_torch_dtype, cast_for_store, round_bf16_by_hand
from tritonforge.reference import rms_norm_ref

RMS_NORM_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _rms_norm_fwd_kernel(
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    weight_ptr,  # *weight [N], contiguous, x's dtype
    y_ptr,  # *y [M, N]: row stride y_row_stride, unit column stride, x's dtype
    rstd_ptr,  # *rstd [M], ACC_DTYPE: 1 / sqrt(mean(x^2) + eps), saved for backward (if STORE_RSTD)
    x_row_stride,  # elements between rows of x (may differ from N)
    y_row_stride,  # elements between rows of y
    N,  # row length (runtime: every N shares one compiled kernel)
    eps: tl.float64,  # added to the mean square; typed fp64 so fp64 inputs get it exactly
    BLOCK_N: tl.constexpr,  # columns per block (power of two)
    ROW_FITS: tl.constexpr,  # one pass, the row kept in registers (needs N <= BLOCK_N); else two passes
    ACC_DTYPE: tl.constexpr,  # tl.float32, or tl.float64 for float64 inputs
    ROUND_BF16: tl.constexpr,  # interpreter + bf16: round the downcasts by hand
    STORE_RSTD: tl.constexpr,  # write rstd (only autograd needs it; inference skips the store)
):
    """One program normalizes one row: ``y = w * (x * rstd).to(x.dtype)``, ``rstd = 1/sqrt(mean(x²)+eps)``."""
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2**31
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    cols = tl.arange(0, BLOCK_N)
    if ROW_FITS:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(ACC_DTYPE)
        # w is issued before the reduction waits, and asked to stay in L2 (every row reads it).
        w = tl.load(weight_ptr + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(ACC_DTYPE)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + tl.cast(eps, ACC_DTYPE))
        # Hugging Face order: round the normalized row to x's dtype, then multiply by w.
        x_hat = cast_for_store(x * rstd, x_ptr.dtype.element_ty, ROUND_BF16).to(ACC_DTYPE)
        tl.store(y_row + cols, cast_for_store(x_hat * w, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)
    else:
        # Pass 1: sum of squares, block by block (elementwise partial sums, reduced once).
        # evict_last: keep the row in L2, pass 2 reads it again.
        sum_sq = tl.zeros([BLOCK_N], dtype=ACC_DTYPE)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(ACC_DTYPE)
            sum_sq += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(sum_sq, axis=0) / N + tl.cast(eps, ACC_DTYPE))
        # Pass 2: normalize and store. This re-read of x comes from L2 and is its last use.
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(ACC_DTYPE)
            w = tl.load(weight_ptr + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(ACC_DTYPE)
            x_hat = cast_for_store(x * rstd, x_ptr.dtype.element_ty, ROUND_BF16).to(ACC_DTYPE)
            y = cast_for_store(x_hat * w, y_ptr.dtype.element_ty, ROUND_BF16)
            tl.store(y_row + start + cols, y, mask=mask)
    if STORE_RSTD:
        tl.store(rstd_ptr + row, rstd)


@triton.jit
def _rms_norm_bwd_kernel(
    dy_ptr,  # *dy [M, N]: row stride dy_row_stride, unit column stride, x's dtype
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    weight_ptr,  # *weight [N], contiguous
    rstd_ptr,  # *rstd [M], ACC_DTYPE, from the forward
    dx_ptr,  # *dx [M, N]: row stride dx_row_stride, x's dtype (unused without COMPUTE_DX)
    dw_partial_ptr,  # *[programs, N] ACC_DTYPE: this program's sum of dy * xhat over its rows
    dy_row_stride,  # elements between rows of dy
    x_row_stride,  # elements between rows of x
    dx_row_stride,  # elements between rows of dx
    M,  # number of rows
    N,  # row length
    rows_per_program,  # each program owns rows [pid * rows_per_program, ... + rows_per_program)
    BLOCK_N: tl.constexpr,  # columns per block (power of two)
    ROW_FITS: tl.constexpr,  # N <= BLOCK_N: w and the dw partial stay in registers
    ACC_DTYPE: tl.constexpr,  # tl.float32, or tl.float64 for float64 inputs
    COMPUTE_DX: tl.constexpr,  # x needs a gradient
    COMPUTE_DW: tl.constexpr,  # weight needs a gradient
    ROUND_BF16: tl.constexpr,  # interpreter + bf16: round the dx downcast by hand
    STAGES: tl.constexpr,  # software-pipelining depth of the row loop (1 = none): see _bwd_stages
):
    """``dx = rstd * (dy*w - xhat * mean(dy*w*xhat))`` per row; ``dw`` partial = sum of ``dy*xhat``."""
    pid = tl.program_id(0).to(tl.int64)
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, M)
    cols = tl.arange(0, BLOCK_N)
    dw_row = dw_partial_ptr + pid * N  # this program's private row: no atomics, deterministic
    if ROW_FITS:
        mask = cols < N
        w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(ACC_DTYPE)
        dw_acc = tl.zeros([BLOCK_N], dtype=ACC_DTYPE)
        # With STAGES > 1 the compiler loads the next rows of x and dy (into shared memory) while
        # this row is computed: one program per SM walks many rows, and without the overlap each
        # row's load latency is paid in full.
        for row in tl.range(row_start, row_end, num_stages=STAGES):
            x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(ACC_DTYPE)
            dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(ACC_DTYPE)
            rstd = tl.load(rstd_ptr + row)
            x_hat = x * rstd
            if COMPUTE_DW:
                dw_acc += dy * x_hat
            if COMPUTE_DX:
                dy_w = dy * w
                mean_dyw_xhat = tl.sum(dy_w * x_hat, axis=0) / N
                dx = rstd * (dy_w - x_hat * mean_dyw_xhat)
                dx_out = cast_for_store(dx, dx_ptr.dtype.element_ty, ROUND_BF16)
                tl.store(dx_ptr + row * dx_row_stride + cols, dx_out, mask=mask)
        if COMPUTE_DW:
            tl.store(dw_row + cols, dw_acc, mask=mask)
    else:
        # Long rows: the dw partial row lives in the (zero-initialized) buffer and is updated
        # block by block; only this program touches it, so read-modify-write is race-free.
        for row in range(row_start, row_end):
            x_row = x_ptr + row * x_row_stride
            dy_row = dy_ptr + row * dy_row_stride
            rstd = tl.load(rstd_ptr + row)
            if COMPUTE_DX:
                # Pass 1: mean(dy * w * xhat) over the whole row.
                acc = tl.zeros([BLOCK_N], dtype=ACC_DTYPE)
                for start in range(0, N, BLOCK_N):
                    mask = start + cols < N
                    x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(ACC_DTYPE)
                    dy = tl.load(dy_row + start + cols, mask=mask, other=0.0).to(ACC_DTYPE)
                    w = tl.load(weight_ptr + start + cols, mask=mask, other=0.0).to(ACC_DTYPE)
                    acc += dy * w * (x * rstd)
                mean_dyw_xhat = tl.sum(acc, axis=0) / N
            # Pass 2: dx, and this row's contribution to the dw partial.
            for start in range(0, N, BLOCK_N):
                mask = start + cols < N
                x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(ACC_DTYPE)
                dy = tl.load(dy_row + start + cols, mask=mask, other=0.0).to(ACC_DTYPE)
                x_hat = x * rstd
                if COMPUTE_DX:
                    w = tl.load(weight_ptr + start + cols, mask=mask, other=0.0).to(ACC_DTYPE)
                    dx = rstd * (dy * w - x_hat * mean_dyw_xhat)
                    dx_out = cast_for_store(dx, dx_ptr.dtype.element_ty, ROUND_BF16)
                    tl.store(dx_ptr + row * dx_row_stride + start + cols, dx_out, mask=mask)
                if COMPUTE_DW:
                    partial = tl.load(dw_row + start + cols, mask=mask, other=0.0)
                    tl.store(dw_row + start + cols, partial + dy * x_hat, mask=mask)


# ----------------------------------------------------------------------------------------------
# Heuristics: block sizes, warps and the backward grid, in one place
# ----------------------------------------------------------------------------------------------

MAX_BLOCK_N = 16384
"""Largest row block, in elements, for float32 arithmetic (64 KB of one row in registers).
Rows longer than this loop over column blocks. Float64 and the backward (which holds x, dy, w
and a dw partial at once) use half of it."""

INTERPRETER_BWD_PROGRAMS = 8
"""Backward programs in the interpreter: few, because each program costs CPU time."""


def _row_config(N: int, dtype: torch.dtype, *, backward: bool = False) -> tuple[int, int]:
    """``(BLOCK_N, num_warps)`` for rows of ``N`` elements (``num_warps`` matters on GPU only).

    Cached, and in plain Python: it runs on every call, and host time is what a decode-sized
    call is made of. The cache is keyed on ``MAX_BLOCK_N`` too, so a changed cap (tests lower it
    to reach the column loop with small rows) takes effect."""
    return _row_config_cached(N, dtype, backward, MAX_BLOCK_N)


@functools.lru_cache(maxsize=1024)
def _row_config_cached(N: int, dtype: torch.dtype, backward: bool, max_block_n: int) -> tuple[int, int]:
    cap = max_block_n
    if dtype == torch.float64:
        cap //= 2
    if backward:
        cap //= 2
    next_power_of_2 = 1 << max(N - 1, 0).bit_length()
    block_n = min(next_power_of_2, max(cap, 1))
    if block_n <= 1024:
        num_warps = 4
    elif block_n <= 4096:
        num_warps = 8
    else:
        num_warps = 16
    return block_n, num_warps


MANY_ROWS = 1024
"""From this many rows on, the forward applies the measured exceptions of :func:`_fwd_config`."""


def _fwd_config(M: int, N: int, dtype: torch.dtype) -> tuple[int, int, bool]:
    """``(BLOCK_N, num_warps, one_pass)`` for the forward: :func:`_row_config`, one pass whenever
    the row fits a block, except where measurement on the H200 said otherwise.

    Rows of 4096 elements, with many rows (``benchmarks/experiments``, ``rmsnorm-fwd-blocks`` and
    ``rmsnorm-fwd-passes``, three interleaved repeats each, 16384x4096):

    - 16-bit: two passes over blocks of 2048 with 8 warps, 0.92-0.93 of copy bandwidth against
      0.90 for one pass (three separate sweeps agreed);
    - float32: two passes with the whole row as one block and 16 warps (the row re-read from L2,
      as torch.compile's kernel does), 0.975 against 0.934.

    Not applied to few rows (a decode-sized call is latency-bound, and a second pass over the row
    adds a round trip that nothing hides), nor to other row lengths, which were not measured."""
    block_n, num_warps = _row_config(N, dtype)
    if M >= MANY_ROWS and N == 4096 and block_n == 4096:
        if dtype.itemsize == 2:
            return 2048, 8, False
        if dtype == torch.float32:
            return 4096, 16, False
    return block_n, num_warps, N <= block_n


BWD_PIPELINE_STAGES = 3
"""Rows of x and dy in flight per backward program when the loop is software-pipelined."""

BWD_PIPELINE_MAX_ROW_BYTES = 16 * 1024
"""Pipeline only rows up to this size: 3 stages x (x + dy) x 16 KB = 96 KB of shared memory,
within an A100's 164 KB and an H100/H200's 228 KB. On the H200 (2026-11-29 sweep, bf16 rows of
16 KB) the pipelined loop moved the backward from 0.75 to 0.90 of copy bandwidth at 32768x8192;
float32 rows of 32 KB gained nothing and stay unpipelined."""


def _bwd_stages(block_n: int, dtype: torch.dtype, device: torch.device) -> int:
    """Pipelining depth for the backward's row loop: 3 on Ampere and newer for rows up to 16 KB,
    else 1 (no pipelining: the T4's 64 KB of shared memory, the interpreter, long rows)."""
    if device.type != "cuda" or runtime.interpreting():
        return 1
    capability = runtime.device_capability(device)
    if capability is None or capability < (8, 0):
        return 1
    return BWD_PIPELINE_STAGES if block_n * dtype.itemsize <= BWD_PIPELINE_MAX_ROW_BYTES else 1


def _bwd_programs_per_sm(row_bytes: int, stages: int) -> int:
    """Backward programs per SM for the pipelined loop, by the bytes of one row block (the row
    padded to ``BLOCK_N``, which is also what each pipeline stage holds in shared memory): 1 for
    blocks of 16 KB, 2 for 8 KB, 3 below. Measured on the H200 (``benchmarks/experiments``, ``rmsnorm-bwd-programs``,
    kernel plus partial sum, CUDA-graph time): rows of 8 KB went from 0.59-0.77 to 0.67-0.88 of
    copy bandwidth with two programs (five shapes, three dtypes), rows of 4 KB from 0.52-0.58 to
    0.74-0.90 with three; rows of 16 and 32 KB lost 4-12% with a second program. With one program
    per SM, a single program's pipelined loads cannot keep enough bytes in flight for short rows.
    The unpipelined loop (``stages == 1``: T4, long rows, the interpreter) keeps one per SM, as
    before (not measured)."""
    if stages == 1 or row_bytes >= 16 * 1024:
        return 1
    return 2 if row_bytes >= 8 * 1024 else 3


def _bwd_grid(M: int, device: torch.device, programs_per_sm: int = 1) -> tuple[int, int]:
    """``(programs, rows_per_program)`` for the backward: ``programs_per_sm`` programs per SM on a
    GPU (each walks a contiguous block of rows), a few in the interpreter."""
    if device.type == "cuda" and not runtime.interpreting():
        index = device.index if device.index is not None else torch.cuda.current_device()
        target = runtime.sm_count(index) * programs_per_sm
    else:
        target = INTERPRETER_BWD_PROGRAMS
    # Ceil division in plain ints: this runs on every backward, and triton.cdiv is a
    # constexpr_function whose call costs ~2 µs of Python (measured on the CPU machine, triton 3.9).
    rows_per_program = -(-M // max(1, min(M, target)))
    return -(-M // rows_per_program), rows_per_program


# ----------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------


_launch_fwd = CachedLauncher(_rms_norm_fwd_kernel)
_launch_bwd = CachedLauncher(_rms_norm_bwd_kernel)


def _empty(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every buffer a kernel must overwrite completely is allocated here (tests poison it)."""
    return torch.empty(*shape, dtype=dtype, device=device)


def _as_rows(t: torch.Tensor, N: int) -> torch.Tensor:
    """``[..., N] -> [M, N]`` with unit column stride: a view whenever the layout allows one."""
    if N > 1 and t.stride(-1) != 1:
        t = t.contiguous()  # e.g. a transposed view: the kernels need unit stride along a row
    if t.dim() == 2:
        return t  # already rows (skipping reshape saves host time on every call)
    return t.reshape(-1, N)  # a view unless the leading dims cannot share one row stride


def rms_norm_fwd(
    x: torch.Tensor, weight: torch.Tensor, eps: float, *, save_rstd: bool = True
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Launch the forward kernel. Returns ``(y, rstd)``: y contiguous in x's shape, rstd ``[M]``
    (``None`` with ``save_rstd=False``: inference needs no rstd, so none is allocated or stored)."""
    N = x.shape[-1]
    x_rows = _as_rows(x, N)  # [M, N]
    weight = weight.contiguous()  # [N]; a copy only for a strided weight view
    M = x_rows.shape[0]
    dtype = x.dtype
    y = _empty(M, N, dtype=dtype, device=x.device)  # [M, N]
    rstd = _empty(M, dtype=acc_torch_dtype(dtype), device=x.device) if save_rstd else None  # [M]
    block_n, num_warps, one_pass = _fwd_config(M, N, dtype)
    _launch_fwd((M,),
        x_rows, weight, y, rstd if save_rstd else y,  # without rstd the pointer is never touched
        x_rows.stride(0), y.stride(0), N, float(eps),
        BLOCK_N=block_n, ROW_FITS=one_pass, ACC_DTYPE=acc_dtype(dtype),
        ROUND_BF16=round_bf16_by_hand(dtype), STORE_RSTD=save_rstd, num_warps=num_warps,
    )  # fmt: skip
    return (y if x.dim() == 2 else y.view(x.shape)), rstd


def rms_norm_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    rstd: torch.Tensor,
    *,
    compute_dx: bool = True,
    compute_dweight: bool = True,
) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Launch the backward kernel. Returns ``(dx, dweight)`` (``None`` for a gradient not asked)."""
    N = x.shape[-1]
    x_rows = _as_rows(x, N)  # [M, N]
    dy_rows = _as_rows(dy, N)  # [M, N]; a copy when dy is not row-major (e.g. expanded)
    weight = weight.contiguous()  # [N]
    M = x_rows.shape[0]
    device = x.device
    acc = acc_torch_dtype(x.dtype)
    block_n, num_warps = _row_config(N, x.dtype, backward=True)
    row_fits = N <= block_n
    stages = _bwd_stages(block_n, x.dtype, device) if row_fits else 1
    programs, rows_per_program = _bwd_grid(M, device, _bwd_programs_per_sm(block_n * x.element_size(), stages))
    dx = _empty(M, N, dtype=x.dtype, device=device) if compute_dx else None  # [M, N]
    dw_partial = None
    if compute_dweight:  # [programs, N]; long rows accumulate into it, so it starts at zero
        dw_partial = _empty(programs, N, dtype=acc, device=device) if row_fits else torch.zeros(programs, N, dtype=acc, device=device)
    _launch_bwd((programs,),
        dy_rows, x_rows, weight, rstd,
        dx if dx is not None else dy_rows,  # placeholder pointers are never touched
        dw_partial if dw_partial is not None else rstd,
        dy_rows.stride(0), x_rows.stride(0), N,
        M, N, rows_per_program,
        BLOCK_N=block_n, ROW_FITS=row_fits, ACC_DTYPE=acc_dtype(x.dtype),
        COMPUTE_DX=compute_dx, COMPUTE_DW=compute_dweight, ROUND_BF16=round_bf16_by_hand(x.dtype),
        STAGES=stages, num_warps=num_warps,
    )  # fmt: skip
    dweight = dw_partial.sum(0).to(weight.dtype) if dw_partial is not None else None  # [N]
    if dx is not None and x.dim() != 2:
        dx = dx.view(x.shape)  # (a 2-D x is already rows: skipping the view saves host time)
    return dx, dweight


# ----------------------------------------------------------------------------------------------
# Autograd and the public function
# ----------------------------------------------------------------------------------------------


class RMSNormFunction(torch.autograd.Function):
    """Autograd glue: saves ``x``, ``weight`` and the per-row ``rstd``; the backward is one kernel
    plus a ``.sum(0)`` over the per-program ``dw`` partials. Not twice differentiable."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        y, rstd = rms_norm_fwd(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if not (need_dx or need_dw):
            return None, None, None
        dx, dweight = rms_norm_bwd(dy, x, weight, rstd, compute_dx=need_dx, compute_dweight=need_dw)
        return dx, dweight, None


def _rms_norm_kernel_path(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Through autograd only when a gradient can be asked for: the ``autograd.Function`` costs
    ~15 µs of host time per call, more than a decode-sized kernel runs on the GPU."""
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return RMSNormFunction.apply(x, weight, eps)
    return rms_norm_fwd(x, weight, eps, save_rstd=False)[0]


def _check_eps(eps: object) -> float:
    if type(eps) is float and 0.0 <= eps < math.inf:
        return eps  # the common case, decided in one comparison
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real Python number, got {type(eps).__name__}")
    eps = float(eps)
    if not (math.isfinite(eps) and eps >= 0.0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps}")
    return eps


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Root-mean-square normalization over the last dimension, then a per-channel scale.

    ``y = weight * (x / sqrt(mean(x**2, -1) + eps)).to(x.dtype)`` with the Hugging Face Llama
    casting (normalize in float32, or float64 for float64 inputs; round to ``x.dtype``; then
    multiply by ``weight``). Differentiable with respect to ``x`` and ``weight``.

    Args:
        x: float16, bfloat16, float32 or float64 tensor ``[..., N]``, any leading shape. Rows may
            be strided; a last dimension without unit stride (a transposed view) is copied.
        weight: ``[N]`` tensor with x's dtype and device.
        eps: a finite real number >= 0 added to the mean square (in the accumulator dtype).

    Returns:
        A new contiguous tensor with x's shape and dtype. ``tfg.last_path("rms_norm")`` tells
        which path computed it.
    """
    runtime.check_tensor("x", x, dtypes=RMS_NORM_DTYPES, ndim_min=1)
    runtime.check_tensor("weight", weight, dtypes=RMS_NORM_DTYPES)
    if weight.dim() != 1:
        raise ValueError(f"weight must be 1-D with x.shape[-1] = {x.shape[-1]} elements, got shape {tuple(weight.shape)}")
    device = runtime.check_same_device(x=x, weight=weight)
    runtime.check_same_dtype(x=x, weight=weight)
    if weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight has {weight.shape[0]} elements but x.shape[-1] is {x.shape[-1]}; they must match")
    eps = _check_eps(eps)
    if x.numel() == 0:  # nothing to launch: the reference gives the empty (differentiable) answer
        return rms_norm_ref(x, weight, eps).contiguous()
    return runtime.dispatch(
        "rms_norm",
        device=device,
        kernel=lambda: _rms_norm_kernel_path(x, weight, eps),
        reference=lambda: rms_norm_ref(x, weight, eps).contiguous(),
        dtype=x.dtype,
    )
