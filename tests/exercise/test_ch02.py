"""Exercises 2a and 2b's checks (tritonforge.exercise.ch02) catch wrong kernels: they fail on the
shipped stubs and on planted mistakes (a stride ignored, a mask forgotten, zero in a max), pass on
the reference solutions, and name the mistake."""

from __future__ import annotations

import pytest
import torch

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge import exercise
from tritonforge.reference import TOLERANCE

import triton
import triton.language as tl

from . import notebooks

# Planted wrong answers: the mistakes a learner is most likely to make ---------------------------


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


@triton.jit
def row_max_reads_past_row(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.full([BLOCK_N], float("-inf"), tl.float32)
    for start in range(0, N, BLOCK_N):
        x = tl.load(x_ptr + row * stride_xm + start + cols, mask=start + cols <= N, other=float("-inf")).to(tl.float32)  # <= N: one too many
        acc = tl.maximum(acc, x)
    tl.store(out_ptr + row, tl.max(acc, axis=0))


@triton.jit
def row_max_no_load_mask(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.full([BLOCK_N], float("-inf"), tl.float32)
    for start in range(0, N, BLOCK_N):
        x = tl.load(x_ptr + row * stride_xm + start + cols).to(tl.float32)  # no mask: reads past the row
        acc = tl.maximum(acc, x)
    tl.store(out_ptr + row, tl.max(acc, axis=0))


@triton.jit
def bias_relu_no_masks(
    x_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn).to(tl.float32)
    bias = tl.load(bias_ptr + cols).to(tl.float32)  # no masks anywhere
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, tl.maximum(x + bias[None, :], 0.0))


@triton.jit
def transpose_copies_instead(x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tile = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, tile, mask=mask)  # out[i, j] = x[i, j]


@triton.jit
def transpose_store_mask_swapped(
    x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    tile = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=(rows[:, None] < M) & (cols[None, :] < N))
    store_mask = (rows[:, None] < N) & (cols[None, :] < M)  # "out is [N, M]", applied to x's indices
    tl.store(out_ptr + cols[None, :] * stride_om + rows[:, None] * stride_on, tile, mask=store_mask)


@triton.jit
def transpose_assumes_contiguous_out(
    x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tile = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask)
    tl.store(out_ptr + cols[None, :] * M + rows[:, None], tile, mask=mask)  # out as a contiguous [N, M]


@triton.jit
def transpose_ignores_stride_xn(
    x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tile = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask)  # forgot stride_xn
    tl.store(out_ptr + cols[None, :] * stride_om + rows[:, None] * stride_on, tile, mask=mask)


@triton.jit
def transpose_program_ids_swapped(
    x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)  # axis 1 of the grid walks the columns
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tile = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask)
    tl.store(out_ptr + cols[None, :] * stride_om + rows[:, None] * stride_on, tile, mask=mask)


@triton.jit
def transpose_unmasked_store(
    x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    tile = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=(rows[:, None] < M) & (cols[None, :] < N))
    tl.store(out_ptr + cols[None, :] * stride_om + rows[:, None] * stride_on, tile)  # no mask


@triton.jit
def transpose_block_sizes_swapped(
    x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_M)  # steps of BLOCK_N: out's tiles are BLOCK_N rows tall
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tile = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask)
    tl.store(out_ptr + cols[None, :] * stride_om + rows[:, None] * stride_on, tile, mask=mask)

STEMS = notebooks.stems(2)
"""This chapter's exercises. Their rows in ``tritonforge.exercise.registry`` name the planted wrong
answers above; the generic tests over every row (stub, planted answers, solution) are in
test_every_exercise.py."""


def test_specific_failure_messages():
    """The verdicts name the mistake: a missing mask, a zero in a max."""
    unmasked = exercise.check_bias_relu_2d(bias_relu_unmasked_store)
    assert any("outside the output" in r.detail for r in unmasked.rows)
    zero = exercise.check_row_max(row_max_zero_init)
    assert any("got 0," in r.detail for r in zero.rows if not r.passed)


def test_transpose_failures_come_with_a_picture():
    """A failed transpose case draws the output: a copy leaves a diagonal of right elements in a
    field of wrong ones, a swapped store mask leaves elements unwritten and writes past the edge."""
    copy = exercise.check_transpose(transpose_copies_instead)
    square = next(r for r in copy.rows if r.case.startswith("square"))
    assert not square.passed and square.picture.splitlines()[1].startswith("·x")
    assert "written past the output's edge" in str(copy) and "<pre>" in copy._repr_html_()
    swapped = exercise.check_transpose(transpose_store_mask_swapped)
    pictured = [r.picture for r in swapped.rows if not r.passed]
    assert pictured and all(r.picture for r in swapped.rows if not r.passed)
    assert any("?" in p and "!" in p for p in pictured)
    solved = exercise.check_transpose(notebooks.solution("ex02c_transpose", "transpose_kernel"))
    assert solved.passed and not any(r.picture for r in solved.rows) and "out [" not in str(solved)


# Pictures of the other two exercises' failed cases ----------------------------------------------


def row_of(report, prefix: str):
    return next(r for r in report.rows if r.case.startswith(prefix))


def drawn(picture: str) -> list[str]:
    """A picture's lines between its heading and its legend."""
    return picture.splitlines()[1:-1]


def case_inputs(cases, prefix: str):
    """The inputs a check gives the case named ``prefix…`` (case i draws from the default seed + i)."""
    index = next(i for i, c in enumerate(cases) if c.name.startswith(prefix))
    return cases[index].inputs(torch.Generator().manual_seed(exercise.core.DEFAULT_SEED + index))


def test_bias_relu_picture_marks_the_spoiled_elements_and_the_frame():
    """Bias broadcast down the columns spoils exactly the elements where relu(x + bias[row])
    differs from relu(x + bias[col]): the picture marks those with ``x`` and nothing else. A store
    without a mask leaves every element right and writes the frame, right of the rows and below
    them, as far as the 16 × 16 tiles reach (every drawn cell of it, for 20 × 41)."""
    case = "every 3rd column 20×41"
    inp = case_inputs(exercise.bias_relu_2d_cases(), case)
    x, bias = inp["x"].view.double(), inp["bias"].view.double()
    right = torch.clamp_min(x + bias[None, :], 0.0)
    spoiled = (torch.clamp_min(x + bias[: x.shape[0], None], 0.0) - right).abs() > TOLERANCE[torch.float32] * max(1.0, float(right.abs().max()))
    by_row = row_of(exercise.check_bias_relu_2d(bias_relu_bias_by_row), case)
    expected_lines = ["".join("x" if bad else "·" for bad in line) + "|" for line in spoiled.tolist()]
    assert drawn(by_row.picture) == [*expected_lines, "-" * 41 + "+"]
    assert "".join(drawn(by_row.picture)).count("x") == int(spoiled.sum()) > 0

    unmasked = exercise.check_bias_relu_2d(bias_relu_unmasked_store)
    assert drawn(row_of(unmasked, case).picture) == ["·" * 41 + "|!!!"] * 20 + ["-" * 41 + "+"] + ["!" * 44] * 3
    assert "written past the output's edge" in str(unmasked)


@triton.jit
def row_max_stores_one_row_late(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.full([BLOCK_N], float("-inf"), tl.float32)
    for start in range(0, N, BLOCK_N):
        x = tl.load(x_ptr + row * stride_xm + start + cols, mask=start + cols < N, other=float("-inf")).to(tl.float32)
        acc = tl.maximum(acc, x)
    tl.store(out_ptr + row + 1, tl.max(acc, axis=0))  # out[row + 1]: row 0 never written, the last one past the end


def test_row_max_picture_is_a_strip_of_the_rows():
    """One character per row's maximum: a zero accumulator spoils every row of an all-negative
    case; a store one row late leaves row 0 unwritten, puts every other maximum in the wrong row
    and writes one past the end. A case that passes has no picture."""
    case = "5×77, all negative"
    zero = exercise.check_row_max(row_max_zero_init)
    assert row_of(zero, case).picture.splitlines()[0] == "out [5]:"
    assert drawn(row_of(zero, case).picture) == ["xxxxx|"]
    assert row_of(zero, "7×100, mixed signs").passed and row_of(zero, "7×100, mixed signs").picture == ""
    late = exercise.check_row_max(row_max_stores_one_row_late)
    assert drawn(row_of(late, case).picture) == ["?xxxx|!"]


@pytest.mark.gpu
@pytest.mark.parametrize("stem", STEMS)
def test_gpu_kernel_checks_on_compiled_kernels(stem, tmp_path):
    notebooks.assert_gpu_checks_on_compiled_kernels(stem, tmp_path)
