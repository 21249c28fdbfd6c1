"""Exercise 4a's check (tritonforge.exercise.ch04) catches wrong partial sums: a forgotten rstd,
row groups that overlap, interleave or run past M, programs without rows that store nothing, a
buffer assumed zeroed; exercise 4b's catches a wrong dx: the correction term forgotten, rstd
squared or missing, w left out of the mean, x for x̂, ÷ BLOCK_N, one row stride for all, no
masks; exercise 4c's catches a wrong backward of the fused add + RMSNorm: dh dropped, the path
through y dropped, the correction term forgotten, residual given only dh, dweight from h, no None
for eps, the mean over the wrong dimension. Each fails its check, the reference solutions pass."""

from __future__ import annotations

import pytest

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge import exercise

import triton
import triton.language as tl

from . import notebooks

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


# Exercise 4b: RMSNorm dx, one row per program -------------------------------------------------


@triton.jit
def dx_forgets_correction(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(dx_ptr + row * dx_row_stride + cols, tl.load(rstd_ptr + row) * dy * w, mask=mask)  # r·dy·w: only the direct path


@triton.jit
def _dx_body(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N: tl.constexpr, MISTAKE: tl.constexpr):
    """The right kernel but for one mistake, chosen by MISTAKE (0: none)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    dy = tl.load(dy_ptr + row * (x_row_stride if MISTAKE == 6 else dy_row_stride) + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    x_hat = x if MISTAKE == 4 else x * rstd
    dy_w = dy * w
    if MISTAKE == 3:
        mean = tl.sum(dy * x_hat, axis=0) / N
    elif MISTAKE == 5:
        mean = tl.sum(dy_w * x_hat, axis=0) / BLOCK_N
    else:
        mean = tl.sum(dy_w * x_hat, axis=0) / N
    dx = dy_w - x_hat * mean
    if MISTAKE == 1:
        dx = rstd * rstd * dx
    elif MISTAKE != 2:
        dx = rstd * dx
    tl.store(dx_ptr + row * dx_row_stride + cols, dx, mask=mask)


@triton.jit
def dx_squares_rstd(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N: tl.constexpr):
    _dx_body(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N, 1)  # rstd² · (…)


@triton.jit
def dx_forgets_outer_rstd(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N: tl.constexpr):
    _dx_body(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N, 2)  # (…) without the leading rstd


@triton.jit
def dx_mean_without_weight(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N: tl.constexpr):
    _dx_body(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N, 3)  # mean(dy·x̂)


@triton.jit
def dx_x_for_xhat(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N: tl.constexpr):
    _dx_body(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N, 4)  # x where x̂ belongs


@triton.jit
def dx_divides_by_block_n(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N: tl.constexpr):
    _dx_body(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N, 5)  # mean over BLOCK_N


@triton.jit
def dx_x_stride_for_dy(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N: tl.constexpr):
    _dx_body(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N, 6)  # one row stride for all


@triton.jit
def dx_no_masks(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    dy = tl.load(dy_ptr + row * dy_row_stride + cols).to(tl.float32)
    x = tl.load(x_ptr + row * x_row_stride + cols).to(tl.float32)
    w = tl.load(w_ptr + cols).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    x_hat = x * rstd
    dy_w = dy * w
    dx = rstd * (dy_w - x_hat * (tl.sum(dy_w * x_hat, axis=0) / N))
    tl.store(dx_ptr + row * dx_row_stride + cols, dx)


# Exercise 4c: the backward of the fused residual add + RMSNorm (plain PyTorch, float64) --------


def _bwd_parts(ctx, dy):
    """(h, weight, rstd, ĥ, dy·w) from the saved tensors."""
    h, weight, rstd = ctx.saved_tensors
    h_hat = h * rstd
    return h, weight, rstd, h_hat, dy * weight


def _through_y(ctx, dy):
    _, _, rstd, h_hat, dy_w = _bwd_parts(ctx, dy)
    return rstd * (dy_w - h_hat * (dy_w * h_hat).mean(-1, keepdim=True))


def _dweight(ctx, dy):
    h, _, _, h_hat, _ = _bwd_parts(ctx, dy)
    return (dy * h_hat).reshape(-1, h.shape[-1]).sum(0)


def bwd_forgets_dh(ctx, dh, dy):
    dx = _through_y(ctx, dy)  # as if y were the only output
    return dx, dx, _dweight(ctx, dy), None


def bwd_only_dh(ctx, dh, dy):
    return dh, dh, _dweight(ctx, dy), None  # "the add's gradient is dh": the path through y is lost


def bwd_forgets_correction(ctx, dh, dy):
    _, _, rstd, _, dy_w = _bwd_parts(ctx, dy)
    dx = dh + rstd * dy_w  # as if rstd did not depend on h
    return dx, dx, _dweight(ctx, dy), None


def bwd_residual_gets_only_dh(ctx, dh, dy):
    return dh + _through_y(ctx, dy), dh, _dweight(ctx, dy), None  # residual feeds y too, through h


def bwd_dweight_from_h(ctx, dh, dy):
    h, _, _, _, _ = _bwd_parts(ctx, dy)
    dx = dh + _through_y(ctx, dy)
    return dx, dx, (dy * h).reshape(-1, h.shape[-1]).sum(0), None  # h where ĥ = h·rstd belongs


def bwd_three_gradients(ctx, dh, dy):
    dx = dh + _through_y(ctx, dy)
    return dx, dx, _dweight(ctx, dy)  # no None for eps: forward took four inputs


def bwd_mean_over_rows(ctx, dh, dy):
    _, _, rstd, h_hat, dy_w = _bwd_parts(ctx, dy)
    dx = dh + rstd * (dy_w - h_hat * (dy_w * h_hat).mean(0, keepdim=True))  # the mean down the columns
    return dx, dx, _dweight(ctx, dy), None


STEMS = notebooks.stems(4)
"""This chapter's exercises. Their rows in ``tritonforge.exercise.registry`` name the planted wrong
answers above; the generic tests over every row (stub, planted answers, solution) are in
test_every_exercise.py."""


def test_chapter_4_failure_messages():
    """The verdict of exercise 4a names the programs without rows; 4b's gives the formula."""
    empty = exercise.check_rms_norm_dweight(dweight_skips_empty_programs)
    assert not empty.passed
    assert all("no rows: its partial row must be zeros" in r.detail for r in empty.rows if not r.passed)
    no_rstd = exercise.check_rms_norm_dx(dx_forgets_outer_rstd)
    assert all("wrong values" in r.detail and "rstd once outside" in r.detail for r in no_rstd.rows if not r.passed)


@pytest.mark.parametrize(
    "wrong, every_case",
    [(dx_forgets_correction, True), (dx_squares_rstd, False), (dx_forgets_outer_rstd, False), (dx_divides_by_block_n, False)],
)
def test_ex04b_mistakes_fail_the_cases_built_for_them(wrong, every_case):
    """Forgetting the correction term fails every case (dy is correlated with x̂, so the mean is
    as large as dy·w); a squared or missing rstd fails every case whose rows have rstd far from 1
    (rstd 16 to 64, or 1/16 to 1/64, or 1/8); ÷ BLOCK_N fails every case whose N is not
    a power of two."""
    for seed in notebooks.PLANTED_SEEDS:
        report = exercise.check_rms_norm_dx(wrong, seed=seed)
        failed = {r.case for r in report.rows if not r.passed}
        if every_case:
            assert len(failed) == len(report.rows), str(report)
        elif wrong is dx_divides_by_block_n:
            assert {r.case for r in report.rows if "N = 1" not in r.case} <= failed, str(report)
        else:
            assert {r.case for r in report.rows if r.case.startswith(("small rows", "large rows", "single row"))} <= failed, str(report)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (bwd_forgets_dh, "h is an output too"),
        (bwd_only_dh, "only dh came back"),
        (bwd_forgets_correction, "the correction term"),
        (bwd_dweight_from_h, "dweight = Σ over every row of dy · ĥ"),
    ],
)
def test_ex04c_names_the_mistake(wrong, hint):
    """Exercise 4c's verdict says which gradient is wrong and what it most likely left out; gradcheck
    fails too, and a wrong number of gradients is autograd's own error, in the table."""
    report = exercise.check_fused_add_rms_norm_backward(wrong)
    failed = [r for r in report.rows if not r.passed]
    compared = [r for r in failed if "gradcheck" not in r.case]
    assert compared and all(hint in r.detail for r in compared), str(report)
    assert all("Jacobian mismatch" in r.detail for r in failed if "gradcheck" in r.case)
    assert any("gradcheck" in r.case for r in failed)
    three = exercise.check_fused_add_rms_norm_backward(bwd_three_gradients)
    assert three.n_passed == 0 and all("incorrect number of gradients" in r.detail for r in three.rows), str(three)


@pytest.mark.gpu
@pytest.mark.parametrize("stem", STEMS)
def test_gpu_chapter_4_checks_on_compiled_kernels(stem, tmp_path):
    notebooks.assert_gpu_checks_on_compiled_kernels(stem, tmp_path)


# Pictures of a failed case ------------------------------------------------------------------------


def row_of(report, prefix: str):
    return next(r for r in report.rows if r.case.startswith(prefix))


def drawn(picture: str) -> list[str]:
    """A picture's lines between its heading and its legend."""
    return picture.splitlines()[1:-1]


def test_dweight_picture_is_a_line_per_program():
    """Programs without rows that store nothing: P = 8 over M = 3 rows leaves the partial rows of
    programs 3 to 7 unwritten, 250 elements marked ``?``, one line per program; a group that
    runs one row too far spoils its program's line and no other."""
    empty = row_of(exercise.check_rms_norm_dweight(dweight_skips_empty_programs), "P > M")
    assert empty.picture.splitlines()[0] == "partial [8, 50]:"
    assert drawn(empty.picture) == ["·" * 50 + "|"] * 3 + ["?" * 50 + "|"] * 5 + ["-" * 50 + "+"]
    assert "".join(drawn(empty.picture)).count("?") == 250 and empty.detail.startswith("250 of 400 elements are NaN")
    inclusive = row_of(exercise.check_rms_norm_dweight(dweight_inclusive_end), "M = 12, P = 4")
    assert drawn(inclusive.picture) == ["x" * 37 + "|"] * 3 + ["·" * 37 + "|", "-" * 37 + "+"]  # the last group ends at M


def test_dx_picture_shows_the_rows_read_with_the_wrong_stride():
    """dy read with x's row stride: row 0 is right, rows 1 to 4 read the NaN between dy's rows."""
    report = exercise.check_rms_norm_dx(dx_x_stride_for_dy)
    strided = row_of(report, "strided rows 5×50")
    assert strided.picture.splitlines()[0] == "dx [5, 50]:"
    assert drawn(strided.picture) == ["·" * 50 + "|"] + ["?" * 50 + "|"] * 4 + ["-" * 50 + "+"]
    assert all(not r.picture for r in report.rows if r.passed)


def test_backward_picture_draws_each_gradient():
    """residual given only dh: dx and dweight right, every element of dresidual wrong; no frame
    (PyTorch's tensors are not guarded). gradcheck's cases have no picture."""
    report = exercise.check_fused_add_rms_norm_backward(bwd_residual_gets_only_dh)
    lines = row_of(report, "4×10").picture.splitlines()
    assert lines[0] == "dx [4, 10]:" and lines[1:5] == ["·" * 10] * 4
    assert lines[5] == "dresidual [4, 10]:" and lines[6:10] == ["x" * 10] * 4
    assert lines[10:] == ["dweight [10]:", "·" * 10, exercise.core.PLAIN_PICTURE_LEGEND]
    assert all(not r.picture for r in report.rows if "gradcheck" in r.case or r.passed)
