"""Exercises 4a and 4b (chapter 4): RMSNorm's weight gradient, deterministic, through per-program
partial sums over contiguous groups of rows (including programs that own none), reduced once in a
fixed order; and its input gradient, the boxed ``dx`` formula, one row per program.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch

from tritonforge._triton import triton
from tritonforge.exercise.core import (
    Case,
    Report,
    Trial,
    Verdict,
    changed,
    check,
    compare_tensors,
    format_values,
    guarded,
    kernel_device,
    poisoned_output,
    require_kernel,
    require_unit_column_stride,
    run_trial,
    snapshot,
    synchronize,
    with_hint,
)
from tritonforge.reference import TOLERANCE


def rms_norm_dweight_partials_ref(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, programs: int) -> torch.Tensor:
    """``[programs, N]`` float64: row ``p`` sums ``dy * x * rstd`` over program p's rows
    ``[p * R, min((p + 1) * R, M))`` with ``R = cdiv(M, programs)`` (zero if it has none)."""
    M, N = x.shape
    per_row = dy.double() * x.double() * rstd.double()[:, None]  # [M, N]
    rows_per_program = triton.cdiv(M, programs)
    partials = torch.zeros(programs, N, dtype=torch.float64, device=x.device)
    for p in range(programs):
        start, end = p * rows_per_program, min((p + 1) * rows_per_program, M)
        if start < end:
            partials[p] = per_row[start:end].sum(0)
    return partials


def launch_rms_norm_dweight(
    kernel, dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, programs: int, partial: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The given launcher of exercise 4a: ``programs`` programs, program ``p`` owning rows
    ``[p * rows_per_program, min((p + 1) * rows_per_program, M))`` with
    ``rows_per_program = cdiv(M, programs)``; ``BLOCK_N = next_power_of_2(N)``. The kernel fills
    ``partial`` (float32 ``[programs, N]``, not zeroed); the launcher reduces it with ``.sum(0)``.
    Returns ``(dweight, partial)``."""
    require_kernel(kernel)
    for name, t in (("dy", dy), ("x", x)):
        require_unit_column_stride(name, t)
    M, N = x.shape
    if partial is None:
        partial = torch.empty((programs, N), dtype=torch.float32, device=x.device)
    kernel[(programs,)](
        dy, x, rstd, partial,
        dy.stride(0), x.stride(0), partial.stride(0),
        M, N, triton.cdiv(M, programs),
        BLOCK_N=triton.next_power_of_2(N),
    )  # fmt: skip
    return partial.sum(0), partial  # the second, fixed-order reduction: [N]


def _group_text(p: int, M: int, programs: int) -> str:
    rows_per_program = triton.cdiv(M, programs)
    start, end = p * rows_per_program, min((p + 1) * rows_per_program, M)
    if start >= end:
        return "no rows: its partial row must be zeros"
    return f"row {start}" if end - start == 1 else f"rows {start}–{end - 1}"


def _compare_dweight(got: dict, expected: dict, inputs: dict) -> Verdict:
    M, programs = inputs["x"].view.shape[0], inputs["programs"]
    verdict = compare_tensors(got, expected["partial"], rtol=TOLERANCE[torch.float32])
    if not verdict.passed:
        out64, exp64 = got["out"].detach().double().cpu(), expected["partial"].cpu()
        bad = ((out64 - exp64).abs() > TOLERANCE[torch.float32] * max(1.0, float(exp64.abs().max()))) | torch.isnan(out64)
        wrong = [int(p) for p in torch.nonzero(bad.any(dim=1)).reshape(-1)]
        if 0 < len(wrong) < programs:  # name the culprits when some rows are right
            shown = ", ".join(f"{p} ({_group_text(p, M, programs)})" for p in wrong[:3])
            more = f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""
            return Verdict(False, verdict.error, f"{verdict.detail}; wrong partial rows: {shown}{more}")
        return verdict
    total = compare_tensors({"out": got["dweight"]}, expected["dweight"], rtol=TOLERANCE[torch.float32])
    return total if not total.passed else Verdict(True, max(verdict.error, total.error), "")


@dataclasses.dataclass(frozen=True)
class _DweightSpec:
    shape: tuple[int, int]
    programs: int
    dtype: torch.dtype = torch.float32
    row_strides: tuple[int, int] = (0, 0)  # (dy, x); 0 means N


def _dweight_guard(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, programs: int, dy_stride: int, x_stride: int, x_offset: int) -> dict:
    """dy, x and rstd inside NaN margins wide enough for a kernel whose row ranges run past M."""
    M, N = x.shape
    block = triton.next_power_of_2(N)
    extra_rows = programs * triton.cdiv(M, programs) + programs  # room for a wrong row range
    margin = (extra_rows, block + 1)
    device = kernel_device()
    return {
        "dy": guarded(dy, (dy_stride, 1), margin=margin, device=device),
        "x": guarded(x, (x_stride, 1), offset=x_offset, margin=margin, device=device),
        "rstd": guarded(rstd, (1,), margin=(extra_rows,), device=device),
        "programs": programs,
    }


def _dweight_run(fn, inp: dict) -> dict:
    dy, x, rstd, programs = inp["dy"], inp["x"], inp["rstd"], inp["programs"]
    N = x.view.shape[1]
    partial = poisoned_output((programs, N), torch.float32, margin=(1, triton.next_power_of_2(N) + 1), device=x.view.device.type)
    before = snapshot(dy, x, rstd)
    dweight, _ = launch_rms_norm_dweight(fn, dy.view, x.view, rstd.view, programs, partial.view)
    synchronize(dweight)
    return {"out": partial.view, "dweight": dweight, "outside": partial.outside_written(), "inputs_changed": changed((dy, x, rstd), before)}


def _dweight_expected(inp: dict) -> dict:
    partial = rms_norm_dweight_partials_ref(inp["dy"].view, inp["x"].view, inp["rstd"].view, inp["programs"])
    return {"partial": partial, "dweight": partial.sum(0)}


def _dweight_case(name: str, spec: _DweightSpec) -> Case:
    M, N = spec.shape

    def inputs(gen):
        # Rows of different scales (1/4 to 4), so each row's rstd is far from 1 and from the
        # others': a forgotten or misplaced rstd changes every partial sum.
        row_scale = torch.logspace(-2, 2, M, base=2.0)[torch.randperm(M, generator=gen)][:, None] if M > 1 else torch.full((1, 1), 3.0)
        x = (row_scale * torch.randn(M, N, generator=gen)).to(spec.dtype)
        rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)  # [M] float32, as the forward saves it
        dy = torch.randn(M, N, generator=gen).to(spec.dtype)
        dy_stride, x_stride = (s or N for s in spec.row_strides)
        return _dweight_guard(dy, x, rstd, spec.programs, dy_stride, x_stride, 3 if x_stride != N else 0)

    return Case(name=name, inputs=inputs, run=_dweight_run, expected=_dweight_expected, compare=_compare_dweight, dtype=spec.dtype)


def rms_norm_dweight_cases() -> list[Case]:
    return [
        _dweight_case("M = 12, P = 4: three rows each, N = 37", _DweightSpec((12, 37), 4)),
        _dweight_case("M = 10, P = 4: groups of 3, 3, 3 and 1, N = 100", _DweightSpec((10, 100), 4)),
        _dweight_case("M = 10, P = 6: groups of 2, the last program has none", _DweightSpec((10, 64), 6)),
        _dweight_case("P > M: M = 3, P = 8 (five programs without rows)", _DweightSpec((3, 50), 8)),
        _dweight_case("M = 1, P = 1, N = 1", _DweightSpec((1, 1), 1)),
        _dweight_case("strided rows 20×300 (dy stride 320, x stride 310), P = 7", _DweightSpec((20, 300), 7, row_strides=(320, 310))),
        _dweight_case("bfloat16 33×200, P = 8", _DweightSpec((33, 200), 8, torch.bfloat16)),
        _dweight_case("float16 64×1000, P = 8", _DweightSpec((64, 1000), 8, torch.float16)),
    ]


def check_rms_norm_dweight(kernel, *, seed: Optional[int] = None) -> Report:
    """Exercise 4a: the learner's ``rms_norm_dweight_kernel``: every partial row, then their sum."""
    return check(kernel, rms_norm_dweight_cases(), title="rms_norm_dweight_kernel", seed=seed)


def try_rms_norm_dweight(kernel, dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, programs: int) -> Trial:
    """Exercise 4a's "try it": the kernel on copies of ``dy``, ``x`` (same row strides) and
    ``rstd`` inside NaN-padded buffers, the ``[programs, N]`` buffer poisoned with NaN; shows
    which partial rows were written, your ``dweight`` next to the answer, and the verdict."""
    inputs = _dweight_guard(dy.detach().cpu(), x.detach().cpu(), rstd.detach().cpu(), programs, dy.stride(0), x.stride(0), 0)
    case = Case("try", lambda gen: inputs, _dweight_run, _dweight_expected, _compare_dweight)

    def show(got, expected):
        written = [not bool(row.isnan().any()) for row in got["out"].detach().cpu()]
        return [
            ("partial rows written:", str(written)),
            ("yours:", format_values(got["dweight"])),
            ("expected:", format_values(expected["dweight"])),
        ]

    return run_trial(kernel, case, inputs, title=f"rms_norm_dweight_kernel, M = {x.shape[0]}, P = {programs}", show=show)


# ----------------------------------------------------------------------------------------------
# Exercise 4b (chapter 4): RMSNorm's input gradient, one row per program
# ----------------------------------------------------------------------------------------------


def rms_norm_dx_ref(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
    """``dx = r * (dy*w - xhat * mean(dy*w*xhat))`` with ``xhat = x * r``, in float64, from the
    ``rstd`` given (``r``, one per row, as the forward saved it)."""
    r = rstd.double()[:, None]  # [M, 1]
    x_hat = x.double() * r
    dy_w = dy.double() * weight.double()
    return r * (dy_w - x_hat * (dy_w * x_hat).mean(-1, keepdim=True))


def launch_rms_norm_dx(
    kernel, dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor, dx: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """The given launcher of exercise 4b: one program per row, the whole row in one block of
    ``BLOCK_N = next_power_of_2(N)`` columns; ``dy``, ``x`` and ``dx`` each with its own row
    stride (unit column stride). Returns ``dx`` (a new ``[M, N]`` tensor in x's dtype unless given)."""
    require_kernel(kernel)
    for name, t in (("dy", dy), ("x", x)):
        require_unit_column_stride(name, t)
    M, N = x.shape
    if dx is None:
        dx = torch.empty((M, N), dtype=x.dtype, device=x.device)
    kernel[(M,)](
        dy, x, weight, rstd, dx,
        dy.stride(0), x.stride(0), dx.stride(0),
        N,
        BLOCK_N=triton.next_power_of_2(N),
    )  # fmt: skip
    return dx


def _dx_guard(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor, dy_layout, x_layout) -> dict:
    """Each input inside a NaN margin of a block; ``*_layout`` = (row stride, storage offset)."""
    block = triton.next_power_of_2(x.shape[1])
    margin = (1, block + 1)
    device = kernel_device()
    (dys, dyo), (xs, xo) = dy_layout, x_layout
    return {
        "dy": guarded(dy, (dys, 1), offset=dyo, margin=margin, device=device),
        "x": guarded(x, (xs, 1), offset=xo, margin=margin, device=device),
        "weight": guarded(weight, (1,), margin=(block + 1,), device=device),
        "rstd": guarded(rstd, (1,), margin=(2,), device=device),
    }


def _dx_run(fn, inp: dict) -> dict:
    dy, x, weight, rstd = inp["dy"], inp["x"], inp["weight"], inp["rstd"]
    M, N = x.view.shape
    dx = poisoned_output((M, N), x.view.dtype, margin=(1, triton.next_power_of_2(N) + 2), device=x.view.device.type)  # its own row stride
    before = snapshot(dy, x, weight, rstd)
    launch_rms_norm_dx(fn, dy.view, x.view, weight.view, rstd.view, dx.view)
    synchronize(dx.view)
    return {"out": dx.view, "outside": dx.outside_written(), "inputs_changed": changed((dy, x, weight, rstd), before)}


def _dx_expected(inp: dict) -> torch.Tensor:
    return rms_norm_dx_ref(inp["dy"].view, inp["x"].view, inp["weight"].view, inp["rstd"].view)


RMS_NORM_DX_HINT = (
    "dx = rstd * (dy*w - x̂ * mean(dy*w*x̂)) with x̂ = x * rstd: rstd once outside, once inside x̂, "
    "the mean over the N real columns (÷ N, not ÷ BLOCK_N), with w inside the mean"
)


def _compare_dx(got, expected, inp) -> Verdict:
    return with_hint(compare_tensors(got, expected, rtol=TOLERANCE[inp["x"].view.dtype]), RMS_NORM_DX_HINT)


@dataclasses.dataclass(frozen=True)
class _DxSpec:
    shape: tuple[int, int]
    dtype: torch.dtype = torch.float32
    scales: tuple[float, float] = (0.25, 4.0)  # the rows' scales run from one to the other: rstd from 4 to 1/4
    dy_layout: tuple[int, int] = (0, 0)  # (row stride, storage offset); row stride 0 means N
    x_layout: tuple[int, int] = (0, 0)
    away_from_zero: bool = False  # |x| at least half the row's scale (N = 1: dx is a difference of nearly equal terms)


def _dx_case(name: str, spec: _DxSpec) -> Case:
    M, N = spec.shape

    def inputs(gen):
        # Every row has its own scale, so rstd is far from 1 (a missing or squared rstd changes
        # every row), and dy is correlated with x̂: mean(dy*w*x̂) is about 3, so the correction
        # term is as large as dy*w itself and a kernel without it is wrong everywhere.
        lo, hi = spec.scales
        row_scale = torch.logspace(math.log2(lo), math.log2(hi), M, base=2.0)[torch.randperm(M, generator=gen)][:, None]
        values = torch.randn(M, N, generator=gen)
        if spec.away_from_zero:
            values = values.sign() * (0.5 + values.abs())
        x = (row_scale * values).to(spec.dtype)
        rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)  # [M] float32, as the forward saves it
        weight = (1.5 + 0.5 * torch.randn(N, generator=gen)).to(spec.dtype)  # far from 1: w inside the mean matters
        x_hat = x.float() * rstd[:, None]
        dy = (2.0 * x_hat + 0.5 * torch.randn(M, N, generator=gen)).to(spec.dtype)

        def layout(which):
            stride, offset = which
            return (stride or N, offset)

        return _dx_guard(dy, x, weight, rstd, layout(spec.dy_layout), layout(spec.x_layout))

    return Case(name=name, inputs=inputs, run=_dx_run, expected=_dx_expected, compare=_compare_dx, dtype=spec.dtype)


def rms_norm_dx_cases() -> list[Case]:
    return [
        _dx_case("float32 6×37 (BLOCK_N = 64: divide by N)", _DxSpec((6, 37))),
        _dx_case("N = 1, 5×1 (x̂ = ±1: dx ≈ 0, all correction)", _DxSpec((5, 1), scales=(0.5, 2.0), away_from_zero=True)),
        _dx_case("single row 1×129, scale 8 (rstd ≈ 1/8)", _DxSpec((1, 129), scales=(8.0, 8.0))),
        _dx_case("small rows 4×100 (scale 1/16 to 1/64: rstd 16 to 64)", _DxSpec((4, 100), scales=(1 / 64, 1 / 16))),
        _dx_case("large rows 4×100 (scale 16 to 64: rstd 1/16 to 1/64)", _DxSpec((4, 100), scales=(16.0, 64.0))),
        _dx_case("strided rows 5×50 (dy stride 60, x stride 57, dx stride 66)", _DxSpec((5, 50), dy_layout=(60, 0), x_layout=(57, 3))),
        _dx_case("float16 7×123, strided x", _DxSpec((7, 123), torch.float16, x_layout=(130, 2))),
        _dx_case("bfloat16 5×200", _DxSpec((5, 200), torch.bfloat16)),
    ]


def check_rms_norm_dx(kernel, *, seed: Optional[int] = None) -> Report:
    """Exercise 4b: the learner's ``rms_norm_dx_kernel`` against the boxed formula in float64."""
    return check(kernel, rms_norm_dx_cases(), title="rms_norm_dx_kernel", seed=seed)


def try_rms_norm_dx(kernel, dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor) -> Trial:
    """Exercise 4b's "try it": the kernel on copies of ``dy``, ``x`` (same row strides), ``weight``
    and ``rstd`` inside NaN-padded buffers, ``dx`` poisoned with NaN; shows the first row of your
    ``dx`` next to the float64 formula's, the largest difference, and the verdict."""
    inputs = _dx_guard(
        dy.detach().cpu(), x.detach().cpu(), weight.detach().cpu(), rstd.detach().cpu(), (dy.stride(0), 0), (x.stride(0), 0)
    )
    case = Case("try", lambda gen: inputs, _dx_run, _dx_expected, _compare_dx)

    def show(got, expected):
        diff = (got["out"].detach().double().cpu() - expected.cpu()).abs()
        largest = "nan (some elements were never written)" if bool(diff.isnan().any()) else f"{float(diff.max()):.3g}"
        return [
            ("yours, row 0:", format_values(got["out"][0])),
            ("expected, row 0:", format_values(expected[0])),
            ("max |dx − formula|:", largest),
        ]

    return run_trial(kernel, case, inputs, title=f"rms_norm_dx_kernel on x {list(x.shape)} {str(x.dtype).replace('torch.', '')}", show=show)
