"""Exercises 3a, 3b and 3c's checks (tritonforge.exercise.ch03) catch wrong kernels: LayerNorm's
variance computed the unstable way or over the masked lanes; a fused add + RMSNorm that rounds
in the wrong order or truncates; a blocked RMSNorm without a mask on its last block, dividing by
BLOCK_N, summing or storing only the first block; each fails the check, the reference solutions
pass."""

from __future__ import annotations

import pytest

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
import tritonforge.hardware
import tritonforge.runtime
from tritonforge import exercise
from tritonforge.kernel_utils import cast_for_store

import triton
import triton.language as tl

from . import notebooks

# Exercise 3a: LayerNorm forward ---------------------------------------------------------------


@triton.jit
def layer_norm_naive_variance(x_ptr, w_ptr, b_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    var = tl.sum(x * x, axis=0) / N - mean * mean  # E[x²] − mean²: cancels when the mean is large
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, (x - mean) * rstd * w + b, mask=mask)


@triton.jit
def layer_norm_unmasked_centering(x_ptr, w_ptr, b_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    centered = x - mean  # the masked lanes become -mean and join the variance
    var = tl.sum(centered * centered, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, centered * rstd * w + b, mask=mask)


@triton.jit
def layer_norm_unbiased_variance(x_ptr, w_ptr, b_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    centered = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centered * centered, axis=0) / (N - 1)  # torch.var's default, not LayerNorm's
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, centered * rstd * w + b, mask=mask)


@triton.jit
def layer_norm_divides_by_block(x_ptr, w_ptr, b_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / BLOCK_N  # BLOCK_N, not N
    centered = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centered * centered, axis=0) / BLOCK_N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, centered * rstd * w + b, mask=mask)


@triton.jit
def layer_norm_forgets_eps(x_ptr, w_ptr, b_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / N)  # no eps
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, centered * rstd * w + b, mask=mask)


@triton.jit
def layer_norm_bias_before_weight(x_ptr, w_ptr, b_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, (centered * rstd + b) * w, mask=mask)  # (x̂ + b)·w


@triton.jit
def layer_norm_ignores_row_stride(x_ptr, w_ptr, b_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)  # rows assumed N apart
    mean = tl.sum(x, axis=0) / N
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, centered * rstd * w + b, mask=mask)


@triton.jit
def layer_norm_eps_outside_sqrt(x_ptr, w_ptr, b_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / (tl.sqrt(tl.sum(centered * centered, axis=0) / N) + eps)  # eps outside the root
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, centered * rstd * w + b, mask=mask)


@triton.jit
def layer_norm_eps_added_to_rstd(x_ptr, w_ptr, b_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / N) + eps  # eps added to rstd
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, centered * rstd * w + b, mask=mask)


# Exercise 3b: fused residual add + RMSNorm ----------------------------------------------------


@triton.jit
def fused_add_normalizes_unrounded_h(
    x_ptr, residual_ptr, w_ptr, h_ptr, y_ptr, x_row_stride, residual_row_stride, h_row_stride, y_row_stride,
    N, eps, BLOCK_N: tl.constexpr, ROUND_BF16: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    residual = tl.load(residual_ptr + row * residual_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    h = x + residual  # float32: the norm sees the sum before it is rounded to the input dtype
    tl.store(h_ptr + row * h_row_stride + cols, cast_for_store(h, h_ptr.dtype.element_ty, ROUND_BF16), mask=mask)
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x_hat = cast_for_store(h * rstd, y_ptr.dtype.element_ty, ROUND_BF16).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, cast_for_store(x_hat * w, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def fused_add_rounds_once(
    x_ptr, residual_ptr, w_ptr, h_ptr, y_ptr, x_row_stride, residual_row_stride, h_row_stride, y_row_stride,
    N, eps, BLOCK_N: tl.constexpr, ROUND_BF16: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    residual = tl.load(residual_ptr + row * residual_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    h = cast_for_store(x + residual, h_ptr.dtype.element_ty, ROUND_BF16)
    tl.store(h_ptr + row * h_row_stride + cols, h, mask=mask)
    h = h.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = h * rstd * w  # x̂ not rounded before the multiply by w: one rounding, not Hugging Face's two
    tl.store(y_ptr + row * y_row_stride + cols, cast_for_store(y, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def fused_add_truncating_casts(
    x_ptr, residual_ptr, w_ptr, h_ptr, y_ptr, x_row_stride, residual_row_stride, h_row_stride, y_row_stride,
    N, eps, BLOCK_N: tl.constexpr, ROUND_BF16: tl.constexpr,
):  # fmt: skip
    """Right on a GPU; in the interpreter ``.to(tl.bfloat16)`` truncates instead of rounding."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    residual = tl.load(residual_ptr + row * residual_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    h = (x + residual).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + row * h_row_stride + cols, h, mask=mask)
    h = h.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x_hat = (h * rstd).to(y_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, (x_hat * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fused_add_normalizes_x(
    x_ptr, residual_ptr, w_ptr, h_ptr, y_ptr, x_row_stride, residual_row_stride, h_row_stride, y_row_stride,
    N, eps, BLOCK_N: tl.constexpr, ROUND_BF16: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    residual = tl.load(residual_ptr + row * residual_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    h = cast_for_store(x + residual, h_ptr.dtype.element_ty, ROUND_BF16)
    tl.store(h_ptr + row * h_row_stride + cols, h, mask=mask)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)  # the norm of x, not of x + residual
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x_hat = cast_for_store(x * rstd, y_ptr.dtype.element_ty, ROUND_BF16).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, cast_for_store(x_hat * w, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def fused_add_forgets_h(
    x_ptr, residual_ptr, w_ptr, h_ptr, y_ptr, x_row_stride, residual_row_stride, h_row_stride, y_row_stride,
    N, eps, BLOCK_N: tl.constexpr, ROUND_BF16: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    residual = tl.load(residual_ptr + row * residual_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    h = cast_for_store(x + residual, h_ptr.dtype.element_ty, ROUND_BF16).to(tl.float32)  # never stored
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x_hat = cast_for_store(h * rstd, y_ptr.dtype.element_ty, ROUND_BF16).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, cast_for_store(x_hat * w, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def fused_add_one_row_stride(
    x_ptr, residual_ptr, w_ptr, h_ptr, y_ptr, x_row_stride, residual_row_stride, h_row_stride, y_row_stride,
    N, eps, BLOCK_N: tl.constexpr, ROUND_BF16: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    residual = tl.load(residual_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)  # x's stride
    h = cast_for_store(x + residual, h_ptr.dtype.element_ty, ROUND_BF16)
    tl.store(h_ptr + row * h_row_stride + cols, h, mask=mask)
    h = h.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x_hat = cast_for_store(h * rstd, y_ptr.dtype.element_ty, ROUND_BF16).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, cast_for_store(x_hat * w, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def fused_add_forgets_eps(
    x_ptr, residual_ptr, w_ptr, h_ptr, y_ptr, x_row_stride, residual_row_stride, h_row_stride, y_row_stride,
    N, eps, BLOCK_N: tl.constexpr, ROUND_BF16: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    residual = tl.load(residual_ptr + row * residual_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    h = cast_for_store(x + residual, h_ptr.dtype.element_ty, ROUND_BF16)
    tl.store(h_ptr + row * h_row_stride + cols, h, mask=mask)
    h = h.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N)  # no eps
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x_hat = cast_for_store(h * rstd, y_ptr.dtype.element_ty, ROUND_BF16).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, cast_for_store(x_hat * w, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def fused_add_eps_outside_sqrt(
    x_ptr, residual_ptr, w_ptr, h_ptr, y_ptr, x_row_stride, residual_row_stride, h_row_stride, y_row_stride,
    N, eps, BLOCK_N: tl.constexpr, ROUND_BF16: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    residual = tl.load(residual_ptr + row * residual_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    h = cast_for_store(x + residual, h_ptr.dtype.element_ty, ROUND_BF16)
    tl.store(h_ptr + row * h_row_stride + cols, h, mask=mask)
    h = h.to(tl.float32)
    rstd = 1.0 / (tl.sqrt(tl.sum(h * h, axis=0) / N) + eps)  # eps outside the root
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x_hat = cast_for_store(h * rstd, y_ptr.dtype.element_ty, ROUND_BF16).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, cast_for_store(x_hat * w, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def fused_add_eps_added_to_rstd(
    x_ptr, residual_ptr, w_ptr, h_ptr, y_ptr, x_row_stride, residual_row_stride, h_row_stride, y_row_stride,
    N, eps, BLOCK_N: tl.constexpr, ROUND_BF16: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    residual = tl.load(residual_ptr + row * residual_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    h = cast_for_store(x + residual, h_ptr.dtype.element_ty, ROUND_BF16)
    tl.store(h_ptr + row * h_row_stride + cols, h, mask=mask)
    h = h.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N) + eps  # eps added to rstd
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x_hat = cast_for_store(h * rstd, y_ptr.dtype.element_ty, ROUND_BF16).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, cast_for_store(x_hat * w, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


INTERPRETER_ONLY_MISTAKES = {fused_add_truncating_casts}  # right on a GPU, where .to() rounds to nearest

# Exercise 3c: RMSNorm of rows longer than one block, two passes -------------------------------


@triton.jit
def _long_rows_body(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr, MISTAKE: tl.constexpr):
    """The right two-pass kernel but for one mistake, chosen by MISTAKE (0: none)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, BLOCK_N if MISTAKE == 3 else N, BLOCK_N):  # 3: only the first block
        mask = (cols < N) if MISTAKE == 1 else (start + cols < N)  # 1: the mask of the first block, reused
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        acc += x * x
    if MISTAKE == 2:
        mean_square = tl.sum(acc, axis=0) / BLOCK_N
    elif MISTAKE == 4:
        mean_square = tl.sum(acc, axis=0) / (tl.cdiv(N, BLOCK_N) * BLOCK_N)  # every block counted full
    else:
        mean_square = tl.sum(acc, axis=0) / N
    rstd = 1.0 / tl.sqrt(mean_square + eps)
    for start in range(0, N, BLOCK_N):
        mask = (cols < N) if MISTAKE == 1 else (start + cols < N)
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + start + cols, x * rstd * w, mask=mask)


@triton.jit
def long_rows_first_block_mask(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    _long_rows_body(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N, 1)  # cols < N: no mask on the last block


@triton.jit
def long_rows_divides_by_block_n(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    _long_rows_body(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N, 2)


@triton.jit
def long_rows_first_block_only(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    _long_rows_body(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N, 3)


@triton.jit
def long_rows_divides_by_padded_n(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    _long_rows_body(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N, 4)


@triton.jit
def long_rows_one_pass(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    """Normalizes each block by its own mean square: one pass, a different rstd per block."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        tl.store(y_ptr + row * y_row_stride + start + cols, x * rstd * w, mask=mask)


@triton.jit
def long_rows_stores_first_block_only(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, x * rstd * w, mask=mask)  # the rest of the row is never written


STEMS = notebooks.stems(3)
"""This chapter's exercises. Their rows in ``tritonforge.exercise.registry`` name the planted wrong
answers above; the generic tests over every row (stub, planted answers, solution) are in
test_every_exercise.py."""


def test_chapter_3_failure_messages():
    """The verdicts of exercises 3a and 3b name the mistake, and only the case that shows it."""
    naive = exercise.check_layer_norm_fwd(layer_norm_naive_variance)
    assert [r.case for r in naive.rows if not r.passed] == [r.case for r in naive.rows if "large mean" in r.case]
    assert "(x − mean)²" in next(r.detail for r in naive.rows if not r.passed)
    unrounded = exercise.check_fused_add_rms_norm(fused_add_normalizes_unrounded_h)
    failed = [r for r in unrounded.rows if not r.passed]
    assert failed and all("float32" not in r.case and "Hugging Face order" in r.detail for r in failed)
    if tritonforge.hardware.interpreting():  # only the interpreter truncates on .to(bfloat16)
        truncated = exercise.check_fused_add_rms_norm(fused_add_truncating_casts)
        assert any("cast_for_store" in r.detail for r in truncated.rows if not r.passed)


@pytest.mark.parametrize(
    "wrong, spared",
    [
        # cols < N is the right mask when the row is one block; past that the last block runs off
        # the row (NaN read from the margin, or a write outside y) on every ragged row
        (long_rows_first_block_mask, ("N < BLOCK_N", "N = 64", "N = 1")),
        (long_rows_divides_by_block_n, ()),  # no case has N = 32
        (long_rows_first_block_only, ("N < BLOCK_N", "N = 1")),  # fails every row of more than one block
        (long_rows_divides_by_padded_n, ("N = 64",)),  # fails every ragged row
    ],
)
def test_ex03c_mistakes_fail_the_cases_built_for_them(wrong, spared):
    """Each typical mistake of exercise 3c fails every case that can show it, on every seed."""
    for seed in notebooks.PLANTED_SEEDS:
        report = exercise.check_rms_norm_long_rows(wrong, seed=seed)
        failed = {r.case for r in report.rows if not r.passed}
        assert failed == {r.case for r in report.rows if not r.case.startswith(spared)}, str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("stem", STEMS)
def test_gpu_chapter_3_checks_on_compiled_kernels(stem, tmp_path):
    notebooks.assert_gpu_checks_on_compiled_kernels(stem, tmp_path, skip=INTERPRETER_ONLY_MISTAKES)


# Pictures of a failed case ------------------------------------------------------------------------


def row_of(report, prefix: str):
    return next(r for r in report.rows if r.case.startswith(prefix))


def drawn(picture: str) -> list[str]:
    """A picture's lines between its heading and its legend."""
    return picture.splitlines()[1:-1]


def test_layer_norm_picture_shows_the_rows_read_from_the_wrong_place():
    """Rows assumed N apart: row 0 is right, every other row of the strided case reads the NaN
    between rows, and the picture marks each of its elements ``?`` (111 of them, the count the
    detail gives); the cases that pass have no picture."""
    report = exercise.check_layer_norm_fwd(layer_norm_ignores_row_stride)
    strided = row_of(report, "float32 4×37, strided rows")
    assert strided.picture.splitlines()[0] == "y [4, 37]:"
    assert drawn(strided.picture) == ["·" * 37 + "|"] + ["?" * 37 + "|"] * 3 + ["-" * 37 + "+"]
    assert "".join(drawn(strided.picture)).count("?") == 111 and strided.detail.startswith("111 of 148 elements are NaN")
    assert all(not r.picture for r in report.rows if r.passed)


def test_fused_add_picture_draws_both_outputs():
    """h never stored: the picture draws h (every element ``?``) above y (every element right).
    A kernel whose only fault is the rounding order (scattered elements, said in the detail)
    gets no picture."""
    forgets_h = row_of(exercise.check_fused_add_rms_norm(fused_add_forgets_h), "float32 6×37")
    lines = forgets_h.picture.splitlines()
    assert lines[0] == "h [6, 37]:" and lines[1:8] == ["?" * 37 + "|"] * 6 + ["-" * 37 + "+"]
    assert lines[8] == "y [6, 37]:" and lines[9:16] == ["·" * 37 + "|"] * 6 + ["-" * 37 + "+"]
    assert lines[16:] == [exercise.core.PICTURE_LEGEND]
    unrounded = exercise.check_fused_add_rms_norm(fused_add_normalizes_unrounded_h)
    failed = [r for r in unrounded.rows if not r.passed]
    assert failed and not any(r.picture for r in failed)


def test_long_rows_picture_folds_the_row_in_blocks():
    """Storing only the first block of 32: rows of 100 are drawn two columns to a character, the
    first 16 characters right and the other 34 never written (68 columns a row, 272 in all)."""
    row = row_of(exercise.check_rms_norm_long_rows(long_rows_stores_first_block_only), "float32 4×100")
    assert row.picture.splitlines()[0] == "y [4, 100] (2 columns to a character):"
    assert drawn(row.picture) == ["·" * 16 + "?" * 34 + "|"] * 4 + ["-" * 50 + "+"]
    assert row.detail.startswith(f"{2 * 34 * 4} of 400 elements are NaN")
