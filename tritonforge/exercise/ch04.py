"""Exercises 4a, 4b and 4c (chapter 4): RMSNorm's weight gradient, deterministic, through
per-program partial sums over contiguous groups of rows (including programs that own none),
reduced once in a fixed order; its input gradient, the boxed ``dx`` formula, one row per program;
and the ``backward`` of a ``torch.autograd.Function`` for the fused residual add + RMSNorm,
checked in float64 against autograd and by ``torch.autograd.gradcheck``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch

from tritonforge._triton import triton
from tritonforge.exercise.core import (
    Case,
    CaseTemplate,
    Trial,
    Verdict,
    compare_output,
    compare_tensors,
    dtype_name,
    element_map,
    format_values,
    guarded,
    kernel_device,
    largest_difference,
    poisoned_output,
    require_kernel,
    require_unit_column_stride,
    run_guarded,
    run_one_output,
    show_first_rows,
    with_picture,
)
from tritonforge.reference import TOLERANCE

__all__ = [
    "FUSED_ADD_BWD_EPS",
    "fused_add_rms_norm_backward_cases",
    "fused_add_rms_norm_function",
    "fused_add_rms_norm_fwd_ref",
    "launch_rms_norm_dweight",
    "launch_rms_norm_dx",
    "rms_norm_dweight_cases",
    "rms_norm_dweight_partials_ref",
    "rms_norm_dx_cases",
    "rms_norm_dx_ref",
    "try_fused_add_rms_norm_backward",
    "try_rms_norm_dweight",
    "try_rms_norm_dx",
]


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
            verdict = Verdict(False, verdict.error, f"{verdict.detail}; wrong partial rows: {shown}{more}")
        # one line per program's partial row: which programs are wrong, or never stored
        guard = got["guard"]
        return with_picture(verdict, lambda: element_map(guard, expected["partial"], rtol=TOLERANCE[torch.float32], name="partial"), guard)
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
    x, programs = inp["x"].view, inp["programs"]
    N = x.shape[1]
    partial = poisoned_output((programs, N), torch.float32, margin=(1, triton.next_power_of_2(N) + 1), device=x.device.type)
    (dweight, _), inputs_changed = run_guarded(launch_rms_norm_dweight, fn, (inp["dy"], inp["x"], inp["rstd"]), (partial,), programs)
    return {"out": partial.view, "dweight": dweight, "outside": partial.outside_written(), "inputs_changed": inputs_changed, "guard": partial}


def _dweight_expected(inp: dict) -> dict:
    partial = rms_norm_dweight_partials_ref(inp["dy"].view, inp["x"].view, inp["rstd"].view, inp["programs"])
    return {"partial": partial, "dweight": partial.sum(0)}


DWEIGHT = CaseTemplate(_dweight_run, _dweight_expected, _compare_dweight)


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

    return DWEIGHT.case(name, inputs, dtype=spec.dtype)


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


def try_rms_norm_dweight(kernel, dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, programs: int) -> Trial:
    """Exercise 4a's "try it": the kernel on copies of ``dy``, ``x`` (same row strides) and
    ``rstd`` inside NaN-padded buffers, the ``[programs, N]`` buffer poisoned with NaN; shows
    which partial rows were written, your ``dweight`` next to the answer, and the verdict."""
    inputs = _dweight_guard(dy.detach().cpu(), x.detach().cpu(), rstd.detach().cpu(), programs, dy.stride(0), x.stride(0), 0)

    def show(got, expected):
        written = [not bool(row.isnan().any()) for row in got["out"].detach().cpu()]
        return [
            ("partial rows written:", str(written)),
            ("yours:", format_values(got["dweight"])),
            ("expected:", format_values(expected["dweight"])),
        ]

    return DWEIGHT.trial(kernel, inputs, title=f"rms_norm_dweight_kernel, M = {x.shape[0]}, P = {programs}", show=show)


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
    x = inp["x"].view
    M, N = x.shape
    dx = poisoned_output((M, N), x.dtype, margin=(1, triton.next_power_of_2(N) + 2), device=x.device.type)  # its own row stride
    return run_one_output(launch_rms_norm_dx, fn, (inp["dy"], inp["x"], inp["weight"], inp["rstd"]), dx)


RMS_NORM_DX_HINT = (
    "dx = rstd * (dy*w - x̂ * mean(dy*w*x̂)) with x̂ = x * rstd: rstd once outside, once inside x̂, "
    "the mean over the N real columns (÷ N, not ÷ BLOCK_N), with w inside the mean"
)


DX = CaseTemplate(
    run=_dx_run,
    expected=lambda inp: rms_norm_dx_ref(inp["dy"].view, inp["x"].view, inp["weight"].view, inp["rstd"].view),
    compare=lambda got, exp, inp: compare_output(got, exp, rtol=TOLERANCE[inp["x"].view.dtype], name="dx", hint=RMS_NORM_DX_HINT),
)


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

    return DX.case(name, inputs, dtype=spec.dtype)


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


def try_rms_norm_dx(kernel, dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor) -> Trial:
    """Exercise 4b's "try it": the kernel on copies of ``dy``, ``x`` (same row strides), ``weight``
    and ``rstd`` inside NaN-padded buffers, ``dx`` poisoned with NaN; shows the first row of your
    ``dx`` next to the float64 formula's, the largest difference, and the verdict."""
    tensors = (t.detach().cpu() for t in (dy, x, weight, rstd))
    inputs = _dx_guard(*tensors, (dy.stride(0), 0), (x.stride(0), 0))

    def show(got, expected):
        return [
            *show_first_rows(got, expected),
            ("max |dx − formula|:", largest_difference(got["out"], expected)),
        ]

    return DX.trial(kernel, inputs, title=f"rms_norm_dx_kernel on x {list(x.shape)} {dtype_name(x.dtype)}", show=show)


# ----------------------------------------------------------------------------------------------
# Exercise 4c (chapter 4): the backward of the fused residual add + RMSNorm, checked in float64
# ----------------------------------------------------------------------------------------------

FUSED_ADD_BWD_EPS = 1e-6
FUSED_ADD_BWD_RTOL = 1e-10
"""Exercise 4c's budget relative to ``max(1, max |reference|)``: every gradient is float64, and a
right backward agrees with autograd of the reference to ~1e-15."""


def fused_add_rms_norm_fwd_ref(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = FUSED_ADD_BWD_EPS):
    """``(h, y)``: ``h = x + residual`` and ``y = w * h * rsqrt(mean(h**2) + eps)``, in plain
    PyTorch ops in the inputs' dtype (float64 in exercise 4c): autograd differentiates it, and
    its gradients are the answer."""
    h = x + residual
    return h, weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps))


def _fused_add_forward(x, residual, weight, eps):
    h = x + residual
    rstd = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)  # [..., 1]
    return h, weight * (h * rstd), rstd


def fused_add_rms_norm_function(backward) -> type:
    """A ``torch.autograd.Function`` for ``(h, y) = fused_add_rms_norm(x, residual, weight, eps)``
    whose forward and ``setup_context`` are given and whose ``backward`` is ``backward``:
    ``setup_context`` saves ``h`` (``[..., N]``), ``weight`` (``[N]``) and ``rstd``
    (``[..., 1]``, keepdim) with ``ctx.save_for_backward`` and sets ``ctx.eps``."""

    class FusedAddRMSNorm(torch.autograd.Function):
        @staticmethod
        def forward(x, residual, weight, eps):
            h, y, _ = _fused_add_forward(x, residual, weight, eps)
            return h, y

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, residual, weight, eps = inputs
            h, _ = output
            ctx.save_for_backward(h, weight, torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps))
            ctx.eps = eps

        @staticmethod
        def backward(ctx, dh, dy):
            return backward(ctx, dh, dy)

    return FusedAddRMSNorm


@dataclasses.dataclass(frozen=True)
class _BwdSpec:
    shape: tuple[int, ...]
    loss: str = "both"  # which outputs feed the loss: "both", "y" (dh = 0) or "h" (dy = 0)
    scales: tuple[float, float] = (0.5, 2.0)  # the rows' scales run from one to the other
    gradcheck: bool = False  # run torch.autograd.gradcheck instead of comparing with autograd


def _bwd_inputs(spec: _BwdSpec, gen: torch.Generator) -> dict:
    shape = spec.shape
    rows = math.prod(shape[:-1])
    lo, hi = spec.scales
    row_scale = torch.logspace(math.log2(lo), math.log2(hi), rows, base=2.0, dtype=torch.float64)[torch.randperm(rows, generator=gen)]
    row_scale = row_scale.reshape(*shape[:-1], 1)
    f64 = dict(dtype=torch.float64)
    x = row_scale * torch.randn(shape, generator=gen, **f64)
    residual = row_scale * torch.randn(shape, generator=gen, **f64)
    weight = 1.5 + 0.5 * torch.randn(shape[-1], generator=gen, **f64)
    dh = torch.randn(shape, generator=gen, **f64)
    h_hat = (x + residual) * torch.rsqrt((x + residual).pow(2).mean(-1, keepdim=True) + FUSED_ADD_BWD_EPS)
    dy = 2.0 * h_hat + torch.randn(shape, generator=gen, **f64)  # correlated with ĥ: the correction term matters
    return {"x": x, "residual": residual, "weight": weight, "dh": dh, "dy": dy, "loss": spec.loss, "gradcheck": spec.gradcheck}


def _bwd_leaves(inp: dict) -> tuple[torch.Tensor, ...]:
    return tuple(inp[k].detach().clone().requires_grad_(True) for k in ("x", "residual", "weight"))


def _bwd_grads(outputs: tuple[torch.Tensor, torch.Tensor], leaves, inp: dict) -> tuple[torch.Tensor, ...]:
    h, y = outputs
    if inp["loss"] == "y":
        return torch.autograd.grad(y, leaves, inp["dy"])
    if inp["loss"] == "h":
        return torch.autograd.grad(h, leaves, inp["dh"], allow_unused=True)
    return torch.autograd.grad((h, y), leaves, (inp["dh"], inp["dy"]))


def _bwd_run(fn, inp: dict):
    from torch.autograd.gradcheck import GradcheckError  # the module (torch.autograd.gradcheck is the function)

    function = fused_add_rms_norm_function(fn)
    leaves = _bwd_leaves(inp)
    if inp["gradcheck"]:
        try:
            torch.autograd.gradcheck(lambda x, r, w: function.apply(x, r, w, FUSED_ADD_BWD_EPS), leaves, raise_exception=True)
        except GradcheckError as exc:  # its first line says which output and input
            return {"gradcheck": False, "message": str(exc).strip().splitlines()[0].rstrip(",")}
        return {"gradcheck": True}
    return _bwd_grads(function.apply(*leaves, FUSED_ADD_BWD_EPS), leaves, inp)


def _bwd_expected(inp: dict):
    if inp["gradcheck"]:
        return None
    leaves = _bwd_leaves(inp)
    grads = _bwd_grads(fused_add_rms_norm_fwd_ref(*leaves, FUSED_ADD_BWD_EPS), leaves, inp)
    return tuple(torch.zeros_like(leaf) if g is None else g for g, leaf in zip(grads, leaves))


def _bwd_hint(name: str, got: torch.Tensor, expected: torch.Tensor, inp: dict) -> str:
    """What a wrong dx or dresidual most likely left out."""
    if name == "dweight":
        return "dweight = Σ over every row of dy · ĥ, with ĥ = h · rstd"
    tol = 1e-8 * max(1.0, float(expected.abs().max()))
    dh = inp["dh"] if inp["loss"] != "y" else torch.zeros_like(expected)
    if inp["loss"] != "y" and float((got - (expected - dh)).abs().max()) <= tol:
        return "h is an output too: its gradient dh flows straight back to x and to residual, added to the one through y"
    if inp["loss"] != "h" and float((got - dh).abs().max()) <= tol:
        return "only dh came back: add the gradient through y, rstd · (dy·w − ĥ · mean(dy·w·ĥ))"
    r = torch.rsqrt((inp["x"] + inp["residual"]).pow(2).mean(-1, keepdim=True) + FUSED_ADD_BWD_EPS)
    if inp["loss"] != "h" and float((got - (dh + r * inp["dy"] * inp["weight"])).abs().max()) <= tol:
        return "the correction term − ĥ · mean(dy·w·ĥ) is missing: rstd depends on h too"
    return "dx = dresidual = dh + rstd · (dy·w − ĥ · mean(dy·w·ĥ over the row, dim −1)), ĥ = h · rstd: both reach the outputs through h"


def _bwd_picture(got, expected) -> str:
    """Each gradient that came back with the right shape, element by element (``dx`` and
    ``dresidual`` a line per row, ``dweight`` one line)."""
    names = ("dx", "dresidual", "dweight")
    drawn = [(n, g, e) for n, g, e in zip(names, got, expected) if g is not None and tuple(g.shape) == tuple(e.shape)]
    return "\n".join(
        element_map(g.detach(), e, rtol=FUSED_ADD_BWD_RTOL, name=n, legend=k == len(drawn) - 1) for k, (n, g, e) in enumerate(drawn)
    )


def _compare_bwd(got, expected, inp) -> Verdict:
    if inp["gradcheck"]:
        if got.get("gradcheck"):
            return Verdict(True, None, "")
        message = got.get("message", "")
        where = " (outputs: 0 = h, 1 = y; inputs: 0 = x, 1 = residual, 2 = weight)" if "output" in message else ""
        return Verdict(False, None, f"gradcheck: {message}{where}: finite differences of the forward disagree with your backward")
    problems, errors = [], []
    for name, g, e in zip(("dx", "dresidual", "dweight"), got, expected):
        if g is None:
            problems.append(f"{name}: None, expected a gradient")
            continue
        if tuple(g.shape) != tuple(e.shape):
            problems.append(f"{name}: shape {tuple(g.shape)}, expected {tuple(e.shape)}")
            continue
        error = float((g.detach() - e).abs().max()) if e.numel() else 0.0
        errors.append(error)
        if math.isnan(error) or error > FUSED_ADD_BWD_RTOL * max(1.0, float(e.abs().max())):
            hint = _bwd_hint(name, g.detach(), e, inp)
            if problems and not isinstance(problems[-1], str) and problems[-1][1] == hint:  # dx and dresidual alike: once
                problems[-1] = (problems[-1][0] + [name], hint)
            else:
                problems.append(([name], hint))
    error = max(errors) if errors else None
    text = [p if isinstance(p, str) else f"{' and '.join(p[0])} wrong: {p[1]}" for p in problems]
    verdict = Verdict(not problems, error, "; ".join(text))
    return with_picture(verdict, lambda: _bwd_picture(got, expected)) if errors else verdict


BACKWARD = CaseTemplate(_bwd_run, _bwd_expected, _compare_bwd)


def _bwd_case(name: str, spec: _BwdSpec) -> Case:
    return BACKWARD.case(name, lambda gen: _bwd_inputs(spec, gen), dtype=torch.float64)


def fused_add_rms_norm_backward_cases() -> list[Case]:
    return [
        _bwd_case("4×10, dh and dy both nonzero", _BwdSpec((4, 10))),
        _bwd_case("N = 1, 5×1", _BwdSpec((5, 1))),
        _bwd_case("3-D input 2×3×7", _BwdSpec((2, 3, 7))),
        _bwd_case("rows of scale 1/16 to 16 (rstd far from 1), 6×20", _BwdSpec((6, 20), scales=(1 / 16, 16.0))),
        _bwd_case("only y feeds the loss (dh = 0), 3×12", _BwdSpec((3, 12), loss="y")),
        _bwd_case("only h feeds the loss (dy = 0), 3×12", _BwdSpec((3, 12), loss="h")),
        _bwd_case("torch.autograd.gradcheck, 3×6", _BwdSpec((3, 6), gradcheck=True)),
        _bwd_case("torch.autograd.gradcheck, 3-D 2×2×5", _BwdSpec((2, 2, 5), gradcheck=True)),
    ]


def try_fused_add_rms_norm_backward(backward, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, *, seed: int = 0) -> Trial:
    """Exercise 4c's "try it": ``(h, y)`` of the Function with your ``backward`` on float64 copies
    of the inputs, the loss ``Σ dh·h + Σ dy·y`` with random ``dh`` and ``dy`` (from ``seed``); shows
    the largest difference of each gradient from autograd of the reference, and the verdict."""
    gen = torch.Generator().manual_seed(seed)
    f64 = dict(dtype=torch.float64)
    x, residual, weight = (t.detach().cpu().double() for t in (x, residual, weight))
    inputs = {
        "x": x, "residual": residual, "weight": weight, "loss": "both", "gradcheck": False,
        "dh": torch.randn(x.shape, generator=gen, **f64), "dy": torch.randn(x.shape, generator=gen, **f64),
    }  # fmt: skip

    def show(got, expected):
        rows = []
        for name, g, e in zip(("dx", "dresidual", "dweight"), got, expected):
            text = "None" if g is None else (f"shape {tuple(g.shape)}" if g.shape != e.shape else f"{float((g - e).abs().max()):.3g}")
            rows.append((f"max |{name} − autograd|:", text))
        return rows

    return BACKWARD.trial(backward, inputs, title=f"fused_add_rms_norm_backward on x {list(x.shape)}", show=show)
