r"""Fused RMSNorm forward (chapter 3): one pass over memory; the backward is
:mod:`tritonforge.ops.rmsnorm_backward` (chapter 4).

Math. For one row :math:`x \in \mathbb{R}^N` with weight :math:`w \in \mathbb{R}^N`:

.. math::

    r = \frac{1}{\sqrt{\tfrac{1}{N}\sum_j x_j^2 + \varepsilon}}, \qquad
    \hat{x} = x\, r, \qquad
    y = w \odot \hat{x}.

``r`` (called ``rstd``, one number per row) is saved for the backward pass.

Memory traffic. Eager PyTorch runs about five kernels for the forward (square, mean, add eps,
rsqrt, two multiplies), each a trip through HBM. The fused forward reads ``x`` and ``w`` once
and writes ``y`` and ``rstd``: when a row fits in one block (``N <= BLOCK_N``) the row stays in
registers between the sum of squares and the normalization. Longer rows loop over column
blocks twice (sum of squares, then normalize and store), so the second read usually hits L2;
``fwd_config`` also sends rows of 4096 through the two passes when there are many rows, where
that measured faster. On a GPU, long rows with enough of them to fill it are held by several
programs at once and read once (:mod:`tritonforge.ops.gpu.rmsnorm`).

Dtypes and casting (Hugging Face ``LlamaRMSNorm`` semantics)::

    h = x.to(float32); h = h * rsqrt(mean(h**2) + eps); y = weight * h.to(x.dtype)

Arithmetic runs in float32 for float16, bfloat16 and float32 inputs (upcast right after
``tl.load``: the interpreter computes bf16 arithmetic wrongly otherwise) and in float64 for
float64 inputs, so that ``torch.autograd.gradcheck`` passes through the real kernels. The
normalized row is rounded to ``x.dtype`` *before* it is multiplied by ``weight``, exactly as in
Hugging Face. ``weight`` has x's dtype, or is float32 beside a 16-bit x (then, as in Hugging Face,
``y`` is promoted to float32). ``rstd`` is float32 (float64 for float64 inputs). ``eps`` reaches
the kernel as two float32 numbers, ``eps`` rounded to float32 and the remainder
(:func:`~tritonforge.kernel_utils.split_float`): a Python float arrives as float32 in Triton's
interpreter whatever the annotation says; the two halves carry 48 bits.

Layouts. Any leading shape is flattened to ``M`` rows of ``N``. Rows may be strided (e.g.
``big[:, :N]``): the kernels take row strides and read in place. The last dimension must have unit
stride; a tensor whose last dimension is strided is copied first. Outputs are new contiguous tensors.

How it meets PyTorch: three ``torch.library`` custom ops, ``tritonforge::rms_norm`` (inference, no
rstd), ``tritonforge::rms_norm_train`` (``(y, rstd)``, its autograd registered by the backward
module) and ``tritonforge::rms_norm_backward``, each with a fake, so that ``torch.compile`` captures
one node and CUDA graphs record the launches; a custom op rather than a ``triton_op`` so that the
router runs inside compiled regions too (benchmarks/NOTES.md, "2026-11-30, issue 10"). The decision
each call makes (compile, empty, autograd mode, vmap, eager) is :class:`tritonforge.launches.OpEntry`'s.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Optional

import torch

from tritonforge import checks, hardware, launches, runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, acc_torch_dtype, as_rows, cast_for_store, round_bf16_by_hand, split_float
from tritonforge.ops.gpu import rmsnorm as gpu
from tritonforge.reference import rms_norm_ref, rms_norm_rstd_ref

RMS_NORM_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _rms_norm_fwd_kernel(
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    weight_ptr,  # *weight [N], contiguous, x's dtype
    y_ptr,  # *y [M, N]: row stride y_row_stride, unit column stride,
            # x's dtype
    rstd_ptr,  # *rstd [M], ACC_DTYPE: 1 / sqrt(mean(x^2) + eps), saved
               # for backward (if STORE_RSTD)
    x_row_stride,  # elements between rows of x (may differ from N)
    y_row_stride,  # elements between rows of y
    N,  # row length (runtime: every N shares one compiled kernel)
    eps_hi,  # eps = eps_hi + eps_lo: eps rounded to fp32, and the remainder
    eps_lo,  # (see kernel_utils.split_float)
    BLOCK_N: tl.constexpr,  # columns per block (power of two)
    ROW_FITS: tl.constexpr,  # one pass, the row kept in registers (needs
                             # N <= BLOCK_N); else two passes
    ACC_DTYPE: tl.constexpr,  # tl.float32, or tl.float64 for float64 inputs
    ROUND_BF16: tl.constexpr,  # interpreter + bf16: round downcasts by hand
    STORE_RSTD: tl.constexpr,  # write rstd (only autograd needs it;
                               # inference skips the store)
):
    """One program normalizes one row: ``y = w * (x * rstd).to(x.dtype)``,
    ``rstd = 1/sqrt(mean(x²)+eps)``."""
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    cols = tl.arange(0, BLOCK_N)
    if ROW_FITS:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(ACC_DTYPE)
        # w is issued before the reduction waits, and asked to stay in L2
        # (every row reads it).
        w = tl.load(weight_ptr + cols, mask=mask, other=0.0,
                    eviction_policy="evict_last").to(ACC_DTYPE)
        rstd = 1.0 / tl.sqrt(
            tl.sum(x * x, axis=0) / N
            + (tl.cast(eps_hi, ACC_DTYPE) + tl.cast(eps_lo, ACC_DTYPE))
        )
        # Hugging Face order: round the normalized row to x's dtype, then
        # multiply by w.
        x_hat = cast_for_store(x * rstd, x_ptr.dtype.element_ty,
                               ROUND_BF16).to(ACC_DTYPE)
        tl.store(
            y_row + cols,
            cast_for_store(x_hat * w, y_ptr.dtype.element_ty, ROUND_BF16),
            mask=mask,
        )
    else:
        # Pass 1: sum of squares, block by block (elementwise partial sums,
        # reduced once).
        # evict_last: keep the row in L2, pass 2 reads it again.
        sum_sq = tl.zeros([BLOCK_N], dtype=ACC_DTYPE)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_last").to(ACC_DTYPE)
            sum_sq += x * x
        rstd = 1.0 / tl.sqrt(
            tl.sum(sum_sq, axis=0) / N
            + (tl.cast(eps_hi, ACC_DTYPE) + tl.cast(eps_lo, ACC_DTYPE))
        )
        # Pass 2: normalize and store. This re-read of x comes from L2 and
        # is its last use.
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_first").to(ACC_DTYPE)
            w = tl.load(weight_ptr + start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_last").to(ACC_DTYPE)
            x_hat = cast_for_store(x * rstd, x_ptr.dtype.element_ty,
                                   ROUND_BF16).to(ACC_DTYPE)
            y = cast_for_store(x_hat * w, y_ptr.dtype.element_ty,
                               ROUND_BF16)
            tl.store(y_row + start + cols, y, mask=mask)
    if STORE_RSTD:
        tl.store(rstd_ptr + row, rstd)




# ----------------------------------------------------------------------------------------------
# Heuristics: block sizes, warps, the backward grid and pipelining, in one place
# ----------------------------------------------------------------------------------------------
#
# The measurements behind each rule are in benchmarks/NOTES.md ("rms_norm heuristics"), and the
# experiments that made them in benchmarks/experiments/:
#
#   rule                                            experiment (benchmarks/experiments/)
#   ----------------------------------------------  ------------------------------------------
#   row block: next power of two, capped            rmsnorm-fwd-blocks
#   rows of 4096 x many rows: two passes            rmsnorm-fwd-blocks, rmsnorm-fwd-passes
#   backward: pipelined row loop (3 stages)         rmsnorm-bwd-variants
#   backward: 1 / 2 / 3 programs per SM             rmsnorm-bwd-programs
#   decode sizes: no other choice was faster        rmsnorm-fwd-decode

MAX_BLOCK_N = 16384
"""Largest row block, in elements, for float32 arithmetic (64 KB of one row in registers).
Rows longer than this loop over column blocks. Float64 and the backward (which holds x, dy, w
and a dw partial at once) use half of it."""

MANY_ROWS = 1024
"""From this many rows on, the forward applies the measured exceptions of :func:`fwd_config`."""

def row_config(N: int, dtype: torch.dtype, *, backward: bool = False) -> tuple[int, int]:
    """``(BLOCK_N, num_warps)`` for rows of ``N`` elements: the next power of two up to the cap;
    more warps for longer blocks (``num_warps`` matters on a GPU only). Cached: it runs on every
    call. The cache is keyed on ``MAX_BLOCK_N`` too, so a changed cap (tests lower it to reach
    the column loop with small rows) takes effect."""
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
    num_warps = 4 if block_n <= 1024 else (8 if block_n <= 4096 else 16)
    return block_n, num_warps


def fwd_config(M: int, N: int, dtype: torch.dtype) -> tuple[int, int, bool]:
    """``(BLOCK_N, num_warps, one_pass)`` for the forward: :func:`row_config`, one pass whenever
    the row fits a block, except rows of exactly 4096 with at least ``MANY_ROWS`` rows, where two
    passes measured faster on the H200 (16-bit: blocks of 2048, 8 warps; float32: the whole row,
    16 warps, re-read from L2). Few rows (decode) keep one pass."""
    block_n, num_warps = row_config(N, dtype)
    if N > block_n and not hardware.interpreting():
        # On a GPU the forward keeps rows up to twice the cap in one program (16 warps, 64 elements
        # a thread): faster than the cooperative path at 4096 x 32768 on the H200 (benchmarks/NOTES.md,
        # "2026-12-04 (session 17)").
        wide, wide_warps = _row_config_cached(N, dtype, False, 2 * MAX_BLOCK_N)
        if wide >= N:
            return wide, wide_warps, True
    if M >= MANY_ROWS and N == 4096 and block_n == 4096:
        if dtype.itemsize == 2:
            return 2048, 8, False
        if dtype == torch.float32:
            return 4096, 16, False
    return block_n, num_warps, N <= block_n


def fwd_coop_splits(M: int, N: int, dtype: torch.dtype, device: torch.device) -> int:
    """Programs per row of the forward's cooperative path (:mod:`tritonforge.ops.gpu.rmsnorm`), 0
    where it does not run: rows that fit one program's block take one pass (or the measured
    two-pass exceptions of :func:`fwd_config`); longer rows on a GPU are held by several programs,
    read once, where the two-pass loop reads them twice."""
    _, _, one_pass = fwd_config(M, N, dtype)
    if one_pass or N <= row_config(N, dtype)[0]:
        return 0  # a row that fits one block (the measured two-pass exceptions included)
    return gpu.row_splits(M, N, dtype, hardware.gpu_sm_count(device))


# ----------------------------------------------------------------------------------------------
# Launchers: each kernel is launched as kernel[grid](...) right here
# ----------------------------------------------------------------------------------------------


def _empty(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every buffer a kernel must overwrite completely is allocated here (tests poison it)."""
    return torch.empty(*shape, dtype=dtype, device=device)


def out_dtype(x_dtype: torch.dtype, weight_dtype: torch.dtype) -> torch.dtype:
    """The output dtype: ``weight * normalized.to(x.dtype)`` promotes as in Hugging Face."""
    return x_dtype if x_dtype == weight_dtype else torch.promote_types(x_dtype, weight_dtype)


def rms_norm_fwd(
    x: torch.Tensor, weight: torch.Tensor, eps: float, *, save_rstd: bool = True
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Launch the forward kernel. Returns ``(y, rstd)``: y a new contiguous tensor of x's shape,
    rstd ``[M]`` (``None`` with ``save_rstd=False``: inference allocates and stores none)."""
    N = x.shape[-1]
    x_rows = as_rows(x, N)  # [M, N]
    weight = weight.contiguous()  # [N]; a copy only for a strided weight view
    M = x_rows.shape[0]
    y = _empty(*x.shape, dtype=out_dtype(x.dtype, weight.dtype), device=x.device)  # x's shape, owns its storage
    y_rows = y.view(M, N)  # [M, N]
    rstd = _empty(M, dtype=acc_torch_dtype(x.dtype), device=x.device) if save_rstd else None  # [M]
    block_n, num_warps, one_pass = fwd_config(M, N, x.dtype)
    eps_hi, eps_lo = split_float(eps)
    splits = fwd_coop_splits(M, N, x.dtype, x.device)
    if splits:  # the GPU's cooperative rows
        gpu.forward(x_rows, weight, y_rows, rstd, eps_hi, eps_lo, splits, save_rstd)
        return y, rstd
    _rms_norm_fwd_kernel[(M,)](
        x_rows, weight, y_rows, rstd if save_rstd else y_rows,  # without rstd the pointer is never touched
        x_rows.stride(0), y_rows.stride(0), N, eps_hi, eps_lo,
        BLOCK_N=block_n, ROW_FITS=one_pass, ACC_DTYPE=acc_dtype(x.dtype),
        ROUND_BF16=round_bf16_by_hand(x.dtype), STORE_RSTD=save_rstd,
        num_warps=num_warps,
    )  # fmt: skip
    return y, rstd


# ----------------------------------------------------------------------------------------------
# Routing: kernel or reference, decided and recorded per call (runtime.dispatch)
# ----------------------------------------------------------------------------------------------

OP = "rms_norm"
"""The name :func:`tritonforge.last_path` knows (the backward's is ``rms_norm_backward``)."""


def _forward_routed(x: torch.Tensor, weight: torch.Tensor, eps: float, save_rstd: bool):
    """``(y, rstd)`` from the kernel, or from the reference when the router falls back."""
    if x.numel() == 0:  # nothing to launch (an operator called directly with an empty x)
        runtime.record_empty(OP)
        return rms_norm_ref(x, weight, eps).contiguous(), (rms_norm_rstd_ref(x, eps) if save_rstd else None)

    def reference():
        y = rms_norm_ref(x, weight, eps).contiguous()
        return y, (rms_norm_rstd_ref(x, eps) if save_rstd else None)

    return runtime.dispatch(
        OP, device=x.device, dtype=x.dtype,
        kernel=lambda: rms_norm_fwd(x, weight, eps, save_rstd=save_rstd),
        reference=reference,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# The PyTorch operators (torch.library): what torch.compile, CUDA graphs and autograd see
# ----------------------------------------------------------------------------------------------


@torch.library.custom_op("tritonforge::rms_norm", mutates_args=())
def rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Inference forward (no rstd), routed. Not differentiable: :func:`rms_norm` calls
    :func:`rms_norm_train_op` when a gradient can be asked for."""
    return _forward_routed(x, weight, eps, save_rstd=False)[0]


@rms_norm_op.register_fake
def _(x, weight, eps):
    return x.new_empty(x.shape, dtype=out_dtype(x.dtype, weight.dtype))


@torch.library.custom_op("tritonforge::rms_norm_train", mutates_args=())
def rms_norm_train_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Training forward, routed: ``(y, rstd)``, rstd ``[M]`` kept for the backward."""
    y, rstd = _forward_routed(x, weight, eps, save_rstd=True)
    return y, rstd


@rms_norm_train_op.register_fake
def _(x, weight, eps):
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return x.new_empty(x.shape, dtype=out_dtype(x.dtype, weight.dtype)), x.new_empty(rows, dtype=acc_torch_dtype(x.dtype))


def _vmap_rule(info, in_dims, x, weight, eps):
    """``vmap`` over any batch dimension: the op is row-wise over the last dimension, so the
    batch dimension moves to the front and becomes one more leading dimension. A batched weight
    (one weight per batch element) normalizes with a weight of ones, which returns the rounded
    normalized row exactly, then scales it the way Hugging Face does (``weight * normalized``)."""
    x_dim, w_dim, _ = in_dims
    x = x.movedim(x_dim, 0) if x_dim is not None else x
    if w_dim is None:
        return rms_norm_op(x, weight, eps), (0 if x_dim is not None else None)
    weight = weight.movedim(w_dim, 0)  # [B, N]
    normalized = rms_norm_op(x, torch.ones(x.shape[-1], dtype=x.dtype, device=x.device), eps)
    leading = normalized.dim() - (2 if x_dim is not None else 1)
    return weight.view(weight.shape[0], *([1] * leading), weight.shape[-1]) * normalized, 0


rms_norm_op.register_vmap(_vmap_rule)


def _reference(x, weight, eps):
    return rms_norm_ref(x, weight, eps).contiguous()


# ----------------------------------------------------------------------------------------------
# The public function
# ----------------------------------------------------------------------------------------------


def _check_eps(eps: object) -> float:
    if type(eps) is float and 0.0 <= eps < math.inf:
        return eps  # the common case, decided in one comparison
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real Python number, got {type(eps).__name__}")
    eps = float(eps)
    if not (math.isfinite(eps) and eps >= 0.0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps}")
    return eps


def _check_inputs(x: object, weight: object, eps: object) -> float:
    checks.check_tensor("x", x, dtypes=RMS_NORM_DTYPES, ndim_min=1)
    checks.check_tensor("weight", weight, dtypes=RMS_NORM_DTYPES)
    if weight.dim() != 1:
        raise ValueError(f"weight must be 1-D with x.shape[-1] = {x.shape[-1]} elements, got shape {tuple(weight.shape)}")
    checks.check_same_device(x=x, weight=weight)
    if weight.dtype != x.dtype and not (weight.dtype == torch.float32 and x.dtype in (torch.float16, torch.bfloat16)):
        raise TypeError(
            f"weight has dtype {str(weight.dtype).replace('torch.', '')} but x has {str(x.dtype).replace('torch.', '')}; "
            "weight must have x's dtype, or be float32 beside a float16/bfloat16 x (the output is then float32)"
        )
    if weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight has {weight.shape[0]} elements but x.shape[-1] is {x.shape[-1]}; they must match")
    return _check_eps(eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Root-mean-square normalization over the last dimension, then a per-channel scale.

    ``y = weight * (x / sqrt(mean(x**2, -1) + eps)).to(x.dtype)`` with the Hugging Face Llama
    casting (normalize in float32, or float64 for float64 inputs; round to ``x.dtype``; then
    multiply by ``weight``). Differentiable with respect to ``x`` and ``weight``, twice too (the
    second derivative through the PyTorch reference), and usable under ``torch.compile``
    (``fullgraph=True``), CUDA graphs and ``torch.func.vmap`` through the kernels. Forward-mode
    AD and ``torch.func.grad``/``jvp`` take the PyTorch reference (a routed fallback).

    Args:
        x: float16, bfloat16, float32 or float64 tensor ``[..., N]``, any leading shape. Rows may
            be strided; a last dimension without unit stride (a transposed view) is copied.
        weight: ``[N]`` tensor on x's device, with x's dtype, or float32 beside a 16-bit x.
        eps: a finite real number >= 0 added to the mean square (in the accumulator dtype).

    Returns:
        A new contiguous tensor with x's shape (which owns its storage), in x's dtype, or float32
        for a float32 weight. ``tfg.last_path("rms_norm")`` tells which path computed it, and
        ``tfg.last_path("rms_norm_backward")`` which path computed the latest backward.
    """
    key = launches.signature(OP, (x, weight), (eps,))
    y = launches.run_remembered(key, x, weight)  # this signature, checked and served by the kernel before
    if y is not launches.MISS:
        return y
    return ENTRY.serve((x, weight), (_check_inputs(x, weight, eps),), key)


def _eager_launch(x: torch.Tensor, weight: torch.Tensor, eps: float):
    """The launch :func:`rms_norm_fwd` makes for this signature (inference, no rstd), with every
    decision taken once: a function of ``(x, weight)`` that allocates y and launches the kernel.
    ``None`` where the launch needs more than that (a copy of x or of the weight,
    the cooperative path's partials)."""
    N = x.shape[-1]
    M = x.numel() // N
    x_rows = as_rows(x, N)
    if x_rows.data_ptr() != x.data_ptr() or x_rows.stride(-1) != 1 or not weight.is_contiguous():
        return None
    if fwd_coop_splits(M, N, x.dtype, x.device):
        return None
    block_n, num_warps, one_pass = fwd_config(M, N, x.dtype)
    eps_hi, eps_lo = split_float(eps)
    shape, dtype, device, x_stride = x.shape, out_dtype(x.dtype, weight.dtype), x.device, x_rows.stride(0)
    kernel = launches.bound_launch(_rms_norm_fwd_kernel, (M,), BLOCK_N=block_n, ROW_FITS=one_pass, ACC_DTYPE=acc_dtype(x.dtype),
                                  ROUND_BF16=round_bf16_by_hand(x.dtype), STORE_RSTD=False, num_warps=num_warps)  # fmt: skip

    def launch(x, weight):
        y = _empty(*shape, dtype=dtype, device=device)
        kernel(x, weight, y, y, x_stride, N, N, eps_hi, eps_lo)
        return y

    return launch


ENTRY = launches.OpEntry(OP, op=rms_norm_op, train=lambda x, weight, eps: rms_norm_train_op(x, weight, eps)[0],
                        eager=lambda x, weight, eps: _forward_routed(x, weight, eps, save_rstd=False)[0], reference=_reference,
                        launch=_eager_launch)  # fmt: skip
