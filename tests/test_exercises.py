"""The exercise checks catch wrong answers: each check fails on the stub shipped in the exercise
notebook (extracted from the cell tagged ``exercise-stub``), fails on planted wrong answers,
and passes on the reference solution in ``exercises/solutions/``. Everything runs on CPU."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest
import torch

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
import tritonforge.runtime
import triton
import triton.language as tl

from tritonforge import exercise
from tritonforge.kernel_utils import cast_for_store

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"

# What a stub cell may use: the names the notebook's setup cell defines.
STUB_HEADER = "import tritonforge\nimport torch\nimport triton\nimport triton.language as tl\n\n"


def _load_module(path: pathlib.Path, name: str):
    """Import a file as a module (``@triton.jit`` needs a real file to read the source from)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _cells(notebook: pathlib.Path, tag: str) -> list[str]:
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if tag in c.get("metadata", {}).get("tags", [])]


def shipped_stub(notebook: pathlib.Path, name: str, tmp_path: pathlib.Path):
    """The untouched stub: the notebook's ``exercise-stub`` cell, written to a file and imported."""
    (source,) = _cells(notebook, "exercise-stub")
    path = tmp_path / f"stub_{notebook.stem}.py"
    path.write_text(STUB_HEADER + source + "\n", encoding="utf-8")
    return getattr(_load_module(path, f"stub_{notebook.stem}"), name)


def solution(notebook: pathlib.Path, name: str):
    path = EXERCISES / "solutions" / f"{notebook.stem}.py"
    return getattr(_load_module(path, f"solution_{notebook.stem}"), name)


# ----------------------------------------------------------------------------------------------
# Planted wrong answers: the mistakes a learner is most likely to make
# ----------------------------------------------------------------------------------------------


def intensity_forgets_weight(op, shape, dtype):
    """RMSNorm bytes without the weight read (2·M·N·elem)."""
    elem = torch.empty((), dtype=dtype).element_size()
    if op == "rms_norm":
        M, N = shape
        flops, nbytes = 4 * M * N, 2 * M * N * elem
    else:
        M, N, K = shape
        flops, nbytes = 2 * M * N * K, (M * K + K * N + M * N) * elem
    return flops, nbytes, flops / nbytes


def intensity_counts_macs(op, shape, dtype):
    """Matmul FLOPs counted as multiply-adds (M·N·K), RMSNorm right."""
    elem = torch.empty((), dtype=dtype).element_size()
    if op == "rms_norm":
        M, N = shape
        flops, nbytes = 4 * M * N, (2 * M * N + N) * elem
    else:
        M, N, K = shape
        flops, nbytes = M * N * K, (M * K + K * N + M * N) * elem
    return flops, nbytes, flops / nbytes


def intensity_assumes_fp32(op, shape, dtype):
    """4 bytes per element whatever the dtype."""
    if op == "rms_norm":
        M, N = shape
        flops, nbytes = 4 * M * N, (2 * M * N + N) * 4
    else:
        M, N, K = shape
        flops, nbytes = 2 * M * N * K, (M * K + K * N + M * N) * 4
    return flops, nbytes, flops / nbytes


@triton.jit
def bias_relu_ignores_stride_xn(
    x_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask).to(tl.float32)  # forgot stride_xn
    bias = tl.load(bias_ptr + cols, mask=cols < N).to(tl.float32)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, tl.maximum(x + bias[None, :], 0.0), mask=mask)


@triton.jit
def bias_relu_assumes_contiguous_out(
    x_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask).to(tl.float32)
    bias = tl.load(bias_ptr + cols, mask=cols < N).to(tl.float32)
    tl.store(out_ptr + rows[:, None] * N + cols[None, :], tl.maximum(x + bias[None, :], 0.0), mask=mask)  # out as [M, N] contiguous


@triton.jit
def bias_relu_bias_by_row(
    x_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask).to(tl.float32)
    bias = tl.load(bias_ptr + rows, mask=rows < M).to(tl.float32)  # bias broadcast the wrong way
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, tl.maximum(x + bias[:, None], 0.0), mask=mask)


@triton.jit
def bias_relu_unmasked_store(
    x_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask).to(tl.float32)
    bias = tl.load(bias_ptr + cols, mask=cols < N).to(tl.float32)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, tl.maximum(x + bias[None, :], 0.0))  # no mask


@triton.jit
def row_max_other_zero(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.full([BLOCK_N], float("-inf"), tl.float32)
    for start in range(0, N, BLOCK_N):
        x = tl.load(x_ptr + row * stride_xm + start + cols, mask=start + cols < N, other=0.0).to(tl.float32)  # 0 joins the max
        acc = tl.maximum(acc, x)
    tl.store(out_ptr + row, tl.max(acc, axis=0))


@triton.jit
def row_max_zero_init(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], tl.float32)  # 0 is not the identity of max
    for start in range(0, N, BLOCK_N):
        x = tl.load(x_ptr + row * stride_xm + start + cols, mask=start + cols < N, other=float("-inf")).to(tl.float32)
        acc = tl.maximum(acc, x)
    tl.store(out_ptr + row, tl.max(acc, axis=0))


@triton.jit
def row_max_mean_instead(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, N, BLOCK_N):
        acc += tl.load(x_ptr + row * stride_xm + start + cols, mask=start + cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0) / N)


@triton.jit
def row_max_first_block_only(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=float("-inf")).to(tl.float32)  # no loop
    tl.store(out_ptr + row, tl.max(x, axis=0))


@triton.jit
def row_max_off_by_one_mask(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.full([BLOCK_N], float("-inf"), tl.float32)
    for start in range(0, N, BLOCK_N):
        x = tl.load(x_ptr + row * stride_xm + start + cols, mask=start + cols < N - 1, other=float("-inf")).to(tl.float32)
        acc = tl.maximum(acc, x)
    tl.store(out_ptr + row, tl.max(acc, axis=0))


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


# Exercise 4a: RMSNorm dweight through per-program partial sums -------------------------------


@triton.jit
def dweight_forgets_rstd(
    dy_ptr, x_ptr, rstd_ptr, partial_ptr, dy_row_stride, x_row_stride, partial_row_stride, M, N, rows_per_program, BLOCK_N: tl.constexpr
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    row_start = pid * rows_per_program
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in range(row_start, tl.minimum(row_start + rows_per_program, M)):
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        acc += dy * x  # dy * x, not dy * x_hat
    tl.store(partial_ptr + pid * partial_row_stride + cols, acc, mask=mask)


@triton.jit
def dweight_double_counts_last_group(
    dy_ptr, x_ptr, rstd_ptr, partial_ptr, dy_row_stride, x_row_stride, partial_row_stride, M, N, rows_per_program, BLOCK_N: tl.constexpr
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    # "every group full, never past M": the last groups slide back and overlap their neighbours
    row_start = tl.maximum(tl.minimum(pid * rows_per_program, M - rows_per_program), 0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in range(row_start, tl.minimum(row_start + rows_per_program, M)):
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        acc += dy * x * tl.load(rstd_ptr + row)
    tl.store(partial_ptr + pid * partial_row_stride + cols, acc, mask=mask)


@triton.jit
def dweight_interleaved_rows(
    dy_ptr, x_ptr, rstd_ptr, partial_ptr, dy_row_stride, x_row_stride, partial_row_stride, M, N, rows_per_program, BLOCK_N: tl.constexpr
):
    """The right total, but program p sums rows p, p + P, p + 2P, …: not its contiguous group."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in range(pid, M, tl.num_programs(0)):
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        acc += dy * x * tl.load(rstd_ptr + row)
    tl.store(partial_ptr + pid * partial_row_stride + cols, acc, mask=mask)


@triton.jit
def dweight_inclusive_end(
    dy_ptr, x_ptr, rstd_ptr, partial_ptr, dy_row_stride, x_row_stride, partial_row_stride, M, N, rows_per_program, BLOCK_N: tl.constexpr
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    row_start = pid * rows_per_program
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in range(row_start, tl.minimum(row_start + rows_per_program + 1, M)):  # one row too many
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        acc += dy * x * tl.load(rstd_ptr + row)
    tl.store(partial_ptr + pid * partial_row_stride + cols, acc, mask=mask)


@triton.jit
def dweight_no_clamp_to_m(
    dy_ptr, x_ptr, rstd_ptr, partial_ptr, dy_row_stride, x_row_stride, partial_row_stride, M, N, rows_per_program, BLOCK_N: tl.constexpr
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    row_start = pid * rows_per_program
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in range(row_start, row_start + rows_per_program):  # the last group runs past row M - 1
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        acc += dy * x * tl.load(rstd_ptr + row)
    tl.store(partial_ptr + pid * partial_row_stride + cols, acc, mask=mask)


@triton.jit
def dweight_skips_empty_programs(
    dy_ptr, x_ptr, rstd_ptr, partial_ptr, dy_row_stride, x_row_stride, partial_row_stride, M, N, rows_per_program, BLOCK_N: tl.constexpr
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    row_start = pid * rows_per_program
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in range(row_start, tl.minimum(row_start + rows_per_program, M)):
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        acc += dy * x * tl.load(rstd_ptr + row)
    if row_start < M:  # "nothing to add, nothing to store": the row stays as the buffer left it
        tl.store(partial_ptr + pid * partial_row_stride + cols, acc, mask=mask)


@triton.jit
def dweight_accumulates_into_buffer(
    dy_ptr, x_ptr, rstd_ptr, partial_ptr, dy_row_stride, x_row_stride, partial_row_stride, M, N, rows_per_program, BLOCK_N: tl.constexpr
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    row_start = pid * rows_per_program
    out = partial_ptr + pid * partial_row_stride + cols
    for row in range(row_start, tl.minimum(row_start + rows_per_program, M)):
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out, tl.load(out, mask=mask) + dy * x * tl.load(rstd_ptr + row), mask=mask)  # assumes a zeroed buffer


# ----------------------------------------------------------------------------------------------
# The table of exercises
# ----------------------------------------------------------------------------------------------

EXERCISE_TABLE = {
    # notebook stem: (function name in the stub and the solution, the check, planted wrong answers)
    "ex01a_arithmetic_intensity": (
        "arithmetic_intensity",
        exercise.check_arithmetic_intensity,
        [intensity_forgets_weight, intensity_counts_macs, intensity_assumes_fp32],
    ),
    "ex02a_bias_relu_2d": (
        "bias_relu_2d_kernel",
        exercise.check_bias_relu_2d,
        [bias_relu_ignores_stride_xn, bias_relu_assumes_contiguous_out, bias_relu_bias_by_row, bias_relu_unmasked_store],
    ),
    "ex02b_row_max": (
        "row_max_kernel",
        exercise.check_row_max,
        [row_max_other_zero, row_max_zero_init, row_max_mean_instead, row_max_first_block_only, row_max_off_by_one_mask],
    ),
    "ex03a_layer_norm_forward": (
        "layer_norm_fwd_kernel",
        exercise.check_layer_norm_fwd,
        [
            layer_norm_naive_variance,
            layer_norm_unmasked_centering,
            layer_norm_unbiased_variance,
            layer_norm_divides_by_block,
            layer_norm_forgets_eps,
            layer_norm_bias_before_weight,
            layer_norm_ignores_row_stride,
        ],
    ),
    "ex03b_fused_add_rms_norm": (
        "fused_add_rms_norm_kernel",
        exercise.check_fused_add_rms_norm,
        [
            fused_add_normalizes_unrounded_h,
            fused_add_rounds_once,
            fused_add_truncating_casts,
            fused_add_normalizes_x,
            fused_add_forgets_h,
            fused_add_one_row_stride,
        ],
    ),
    "ex04a_rms_norm_dweight": (
        "rms_norm_dweight_kernel",
        exercise.check_rms_norm_dweight,
        [
            dweight_forgets_rstd,
            dweight_double_counts_last_group,
            dweight_interleaved_rows,
            dweight_inclusive_end,
            dweight_no_clamp_to_m,
            dweight_skips_empty_programs,
            dweight_accumulates_into_buffer,
        ],
    ),
}
STEMS = sorted(EXERCISE_TABLE)
PLANTED = [(stem, wrong) for stem in STEMS for wrong in EXERCISE_TABLE[stem][2]]


def test_every_exercise_notebook_is_in_the_table():
    assert sorted(p.stem for p in EXERCISES.glob("*.ipynb")) == STEMS


@pytest.mark.parametrize("stem", STEMS)
def test_notebook_has_one_stub_and_a_check_of_it(stem):
    name, check, _ = EXERCISE_TABLE[stem]
    notebook = EXERCISES / f"{stem}.ipynb"
    (stub,) = _cells(notebook, "exercise-stub")
    assert f"def {name}(" in stub
    (check_cell,) = _cells(notebook, "exercise-check")
    assert f"exercise.{check.__name__}({name})" in check_cell


@pytest.mark.parametrize("stem", STEMS)
def test_check_fails_every_case_on_the_shipped_stub(stem, tmp_path):
    name, check, _ = EXERCISE_TABLE[stem]
    report = check(shipped_stub(EXERCISES / f"{stem}.ipynb", name, tmp_path))
    assert not report.passed
    assert report.n_passed == 0, str(report)
    assert all(row.detail for row in report.rows), "every failure says why"


@pytest.mark.parametrize("stem, wrong", PLANTED, ids=[f"{s}-{w.__name__}" for s, w in PLANTED])
def test_check_fails_on_a_planted_wrong_answer(stem, wrong):
    if wrong in INTERPRETER_ONLY_MISTAKES and not tritonforge.runtime.interpreting():
        pytest.skip(f"{wrong.__name__} is only a mistake in the interpreter (a GPU's .to() rounds to nearest)")
    _, check, _ = EXERCISE_TABLE[stem]
    report = check(wrong)
    assert not report.passed, f"{wrong.__name__} passed:\n{report}"


@pytest.mark.parametrize("seed", [0, 1, None])
@pytest.mark.parametrize("stem", STEMS)
def test_check_passes_on_the_reference_solution(stem, seed):
    name, check, _ = EXERCISE_TABLE[stem]
    check(solution(EXERCISES / f"{stem}.ipynb", name), seed=seed).assert_passed()


# ----------------------------------------------------------------------------------------------
# The mechanism itself
# ----------------------------------------------------------------------------------------------


def test_specific_failure_messages():
    """The verdicts name the mistake: missing mask, zero in a max, a wrong count."""
    unmasked = exercise.check_bias_relu_2d(bias_relu_unmasked_store)
    assert any("outside the output" in r.detail for r in unmasked.rows)
    zero = exercise.check_row_max(row_max_zero_init)
    assert any("got 0," in r.detail for r in zero.rows if not r.passed)
    counts = exercise.check_arithmetic_intensity(intensity_forgets_weight)
    assert any(r.detail.startswith("bytes: got") for r in counts.rows)


@pytest.mark.parametrize(
    "fn, message",
    [
        (lambda *a: 1 / 0, "ZeroDivisionError"),
        (lambda *a: None, "return a tuple"),
        (lambda *a: ("1", 2, 3.0), "should be a number"),
    ],
)
def test_check_never_raises_and_reports_why(fn, message):
    report = exercise.check_arithmetic_intensity(fn)
    assert not report.passed
    assert all(message in r.detail for r in report.rows)


def test_a_kernel_check_rejects_a_plain_function():
    def not_a_kernel(x_ptr, out_ptr, N, stride_xm, BLOCK_N):
        pass

    report = exercise.check_row_max(not_a_kernel)
    assert not report.passed
    assert "@triton.jit" in report.rows[0].detail


def test_a_kernel_that_fails_to_run_is_a_failed_case():
    @triton.jit
    def bad(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
        tl.store(out_ptr + tl.arange(0, N), tl.load(x_ptr + tl.arange(0, N)))  # N is not constexpr

    report = exercise.check_row_max(bad)
    assert report.n_passed == 0
    # The compiler's complaint reaches the learner (its wording differs between the interpreter
    # and the GPU compiler, and between Triton versions).
    words = ("arange", "constexpr", "CompilationError")
    assert any(any(w in r.detail for w in words) for r in report.rows), [r.detail[:200] for r in report.rows]


def test_a_kernel_that_writes_its_input_fails():
    @triton.jit
    def writes_x(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK_N)
        acc = tl.full([BLOCK_N], float("-inf"), tl.float32)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_ptr + row * stride_xm + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
            acc = tl.maximum(acc, x)
            tl.store(x_ptr + row * stride_xm + start + cols, tl.zeros([BLOCK_N], tl.float32), mask=mask)
        tl.store(out_ptr + row, tl.max(acc, axis=0))

    report = exercise.check_row_max(writes_x)
    assert report.n_passed == 0
    assert all("changed an input" in r.detail for r in report.rows)


def test_report_renders_as_text_and_html():
    report = exercise.check_arithmetic_intensity(intensity_counts_macs, seed=3)
    text, page = str(report), report._repr_html_()
    assert "of 7 cases pass (seed 3)" in text
    for row in report.rows:
        assert row.case in text
    assert page.count("<tr>") == len(report.rows) + 1
    assert "✘ fail" in page and "✔ pass" in page
    with pytest.raises(AssertionError, match="cases pass"):
        report.assert_passed()


def test_seed_replays_the_same_inputs():
    cases = exercise.row_max_cases()
    a = cases[0].inputs(torch.Generator().manual_seed(5)).view
    b = cases[0].inputs(torch.Generator().manual_seed(5)).view
    assert torch.equal(a, b)


def test_guarded_view_counts_writes_outside():
    g = exercise.guarded(torch.randn(3, 4), (1, 3), margin=(2, 2))
    assert g.view.stride() == (1, 3)
    assert g.outside_written() == 0
    g.buffer[-1] = 1.0
    assert g.outside_written() == 1


def test_check_itself_failing_is_reported_not_raised():
    broken = exercise.Case("broken", inputs=lambda g: 1 / 0, run=lambda fn, i: None, expected=lambda i: None, compare=None)
    report = exercise.check(lambda: None, [broken], title="t")
    assert not report.passed
    assert "error in the check itself" in report.rows[0].detail


@pytest.mark.gpu
@pytest.mark.parametrize("stem", ["ex02a_bias_relu_2d", "ex02b_row_max"])
def test_gpu_kernel_checks_on_compiled_kernels(stem, tmp_path):
    name, check, planted = EXERCISE_TABLE[stem]
    assert exercise.kernel_device() == "cuda"
    check(solution(EXERCISES / f"{stem}.ipynb", name)).assert_passed()
    assert check(shipped_stub(EXERCISES / f"{stem}.ipynb", name, tmp_path)).n_passed == 0
    for wrong in planted:
        assert not check(wrong).passed, wrong.__name__


def test_chapter_3_and_4_failure_messages():
    """The verdicts of exercises 3a, 3b and 4a name the mistake, and only the case that shows it."""
    naive = exercise.check_layer_norm_fwd(layer_norm_naive_variance)
    assert [r.case for r in naive.rows if not r.passed] == [r.case for r in naive.rows if "large mean" in r.case]
    assert "(x − mean)²" in next(r.detail for r in naive.rows if not r.passed)
    unrounded = exercise.check_fused_add_rms_norm(fused_add_normalizes_unrounded_h)
    failed = [r for r in unrounded.rows if not r.passed]
    assert failed and all("float32" not in r.case and "Hugging Face order" in r.detail for r in failed)
    if tritonforge.runtime.interpreting():  # only the interpreter truncates on .to(bfloat16)
        truncated = exercise.check_fused_add_rms_norm(fused_add_truncating_casts)
        assert any("cast_for_store" in r.detail for r in truncated.rows if not r.passed)
    empty = exercise.check_rms_norm_dweight(dweight_skips_empty_programs)
    assert not empty.passed
    assert all("no rows: its partial row must be zeros" in r.detail for r in empty.rows if not r.passed)


INTERPRETER_ONLY_MISTAKES = {fused_add_truncating_casts}  # right on a GPU, where .to() rounds to nearest


@pytest.mark.gpu
@pytest.mark.parametrize("stem", ["ex03a_layer_norm_forward", "ex03b_fused_add_rms_norm", "ex04a_rms_norm_dweight"])
def test_gpu_chapter_3_and_4_checks_on_compiled_kernels(stem, tmp_path):
    name, check, planted = EXERCISE_TABLE[stem]
    assert exercise.kernel_device() == "cuda"
    check(solution(EXERCISES / f"{stem}.ipynb", name)).assert_passed()
    assert check(shipped_stub(EXERCISES / f"{stem}.ipynb", name, tmp_path)).n_passed == 0
    for wrong in planted:
        if wrong not in INTERPRETER_ONLY_MISTAKES:
            assert not check(wrong).passed, wrong.__name__
