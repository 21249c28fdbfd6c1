"""Exercises 3a, 3b and 3c (chapter 3): LayerNorm forward, one row per program; the fused
residual add + RMSNorm, both outputs in one pass, rounded in the Hugging Face order; and RMSNorm
of rows longer than one block, in two passes over the columns.
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
    ViewSpec,
    compare_output,
    compare_tensors,
    dtype_name,
    element_map,
    guarded,
    kernel_device,
    largest_difference,
    poisoned_output,
    require_kernel,
    require_unit_column_stride,
    run_guarded,
    run_one_output,
    with_hint,
    with_picture,
)
from tritonforge.kernel_utils import round_bf16_by_hand
from tritonforge.reference import TOLERANCE, rms_norm_ref

__all__ = [
    "FUSED_ADD_MAX_MISMATCH",
    "FUSED_ADD_RMS_NORM_EPS",
    "LAYER_NORM_EPS",
    "RMS_NORM_LONG_ROWS_BLOCK_N",
    "RMS_NORM_LONG_ROWS_EPS",
    "fused_add_rms_norm_cases",
    "fused_add_rms_norm_ref",
    "launch_fused_add_rms_norm",
    "launch_layer_norm_fwd",
    "launch_rms_norm_long_rows",
    "layer_norm_fwd_cases",
    "layer_norm_ref",
    "rms_norm_long_rows_cases",
    "rms_norm_long_rows_ref",
    "try_fused_add_rms_norm",
    "try_layer_norm_fwd",
    "try_rms_norm_long_rows",
]

# ----------------------------------------------------------------------------------------------
# Exercise 3a (chapter 3): LayerNorm forward, one row per program
# ----------------------------------------------------------------------------------------------

LAYER_NORM_EPS = 1e-5


def layer_norm_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = LAYER_NORM_EPS) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dim in float64, with the
    biased variance ``mean((x - mean)**2)`` (``torch.nn.functional.layer_norm``'s definition)."""
    x64 = x.double()
    centered = x64 - x64.mean(-1, keepdim=True)
    var = (centered * centered).mean(-1, keepdim=True)
    return centered / torch.sqrt(var + eps) * weight.double() + bias.double()


def launch_layer_norm_fwd(
    kernel, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: Optional[torch.Tensor] = None, *, eps: float = LAYER_NORM_EPS
) -> torch.Tensor:
    """The given launcher of exercise 3a: one program per row, the whole row in one block of
    ``BLOCK_N = next_power_of_2(N)`` columns; rows may be strided, columns have unit stride.
    Returns ``out`` (a new ``[M, N]`` tensor in x's dtype unless one is given)."""
    require_kernel(kernel)
    require_unit_column_stride("x", x)
    M, N = x.shape
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    kernel[(M,)](x, weight, bias, out, x.stride(0), out.stride(0), N, eps, BLOCK_N=triton.next_power_of_2(N))
    return out


def _layer_norm_guard(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, strides, offset: int = 0) -> dict:
    """x in a view with the given strides, weight and bias, each inside a NaN margin of a block."""
    block = triton.next_power_of_2(x.shape[1])
    device = kernel_device()
    return {
        "x": guarded(x, strides, offset=offset, margin=(1, block + 1), device=device),
        "weight": guarded(weight, (1,), margin=(block + 1,), device=device),
        "bias": guarded(bias, (1,), margin=(block + 1,), device=device),
    }


def _layer_norm_run(fn, inp: dict) -> dict:
    M, N = inp["x"].view.shape
    out = poisoned_output((M, N), inp["x"].view.dtype, margin=(1, triton.next_power_of_2(N) + 1), device=inp["x"].view.device.type)
    return run_one_output(launch_layer_norm_fwd, fn, (inp["x"], inp["weight"], inp["bias"]), out)


def _layer_norm_template(*, rtol: Optional[float] = None, hint: str = "") -> CaseTemplate:
    """Exercise 3a's cases with their budget (``TOLERANCE`` of x's dtype unless given) and hint."""

    def compare(got, exp, inp):
        return compare_output(got, exp, rtol=TOLERANCE[inp["x"].view.dtype] if rtol is None else rtol, name="y", hint=hint)

    return CaseTemplate(
        run=_layer_norm_run, expected=lambda inp: layer_norm_ref(inp["x"].view, inp["weight"].view, inp["bias"].view), compare=compare
    )


def _layer_norm_case(
    name: str, spec: ViewSpec, *, loc: float = 0.0, spread: float = 0.0, scale: float = 1.0, rtol: Optional[float] = None, hint: str = ""
) -> Case:
    """Rows of ``loc + spread * randn(row) + scale * randn`` (``spread``: a different mean per row)."""
    M, N = spec.shape

    def inputs(gen):
        values = loc + spread * torch.randn(M, 1, generator=gen) + scale * torch.randn(M, N, generator=gen)
        weight = 1.0 + 0.5 * torch.randn(N, generator=gen)
        bias = torch.randn(N, generator=gen)
        return _layer_norm_guard(values.to(spec.dtype), weight.to(spec.dtype), bias.to(spec.dtype), spec.strides, spec.offset)

    return _layer_norm_template(rtol=rtol, hint=hint).case(name, inputs, dtype=spec.dtype)


LAYER_NORM_CENTERED_HINT = (
    "If only this case fails, look at the variance: in float32, E[x²] − mean² cancels "
    "catastrophically when the mean is large; subtract the mean first and average (x − mean)²"
)


LAYER_NORM_EPS_HINT = "If only the tiny- or large-variance case fails, look at eps: rstd = 1 / sqrt(var + eps), eps inside the root"


LARGE_MEAN_FACTOR = 30
"""The large-mean case's budget in units of ``TOLERANCE[float32]`` (30 × 1e-5 = 3e-4): the mean
of values near 1000 carries float32 rounding, so a correct kernel (and ``F.layer_norm``) is off by
up to ~5e-4 there, while E[x²] − mean² is off by ~0.3 — the budget still tells them apart."""


def layer_norm_fwd_cases() -> list[Case]:
    return [
        _layer_norm_case("float32 5×1000", ViewSpec((5, 1000), (1000, 1))),
        _layer_norm_case("float32 4×37, strided rows (base[:, 5:42])", ViewSpec((4, 37), (64, 1), offset=5)),
        _layer_norm_case("N = 1, 6×1 (variance 0: y = bias)", ViewSpec((6, 1), (1, 1))),
        _layer_norm_case("single row 1×129", ViewSpec((1, 129), (129, 1))),
        _layer_norm_case("tiny variance 4×300 (std 1e-3: eps matters)", ViewSpec((4, 300), (300, 1)), scale=1e-3, hint=LAYER_NORM_EPS_HINT),
        _layer_norm_case(
            "large variance 4×200 (std 1000: rstd ≈ 1e-3, eps inside the root)", ViewSpec((4, 200), (200, 1)), scale=1e3, hint=LAYER_NORM_EPS_HINT
        ),
        _layer_norm_case(
            "large mean 6×1000 (≈ 1000 ± 1): centered variance",
            ViewSpec((6, 1000), (1000, 1)),
            loc=1000.0,
            spread=100.0,
            rtol=LARGE_MEAN_FACTOR * TOLERANCE[torch.float32],
            hint=LAYER_NORM_CENTERED_HINT,
        ),
        _layer_norm_case("float16 7×300", ViewSpec((7, 300), (300, 1), dtype=torch.float16)),
        _layer_norm_case("bfloat16 5×123, strided rows", ViewSpec((5, 123), (200, 1), offset=11, dtype=torch.bfloat16)),
    ]


def try_layer_norm_fwd(kernel, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> Trial:
    """Exercise 3a's "try it": the kernel on copies of ``x`` (same row stride), ``weight`` and
    ``bias`` inside NaN-padded buffers, ``y`` poisoned with NaN; shows the largest difference
    from the float64 LayerNorm and the verdict."""
    inputs = _layer_norm_guard(x.detach().cpu(), weight.detach().cpu(), bias.detach().cpu(), x.stride())

    def show(got, expected):
        return [("max |y − layer_norm(x)|:", largest_difference(got["out"], expected))]

    title = f"layer_norm_fwd_kernel on x {list(x.shape)}, row stride {x.stride(0)}"
    return _layer_norm_template().trial(kernel, inputs, title=title, show=show)


# ----------------------------------------------------------------------------------------------
# Exercise 3b (chapter 3): fused residual add + RMSNorm, both outputs in one pass
# ----------------------------------------------------------------------------------------------

FUSED_ADD_RMS_NORM_EPS = 1e-6
FUSED_ADD_MAX_MISMATCH = 0.02
"""In float16 and bfloat16, ``y`` must equal the Hugging Face-order result bit for bit in all but
this fraction of elements (a correct kernel matches all of them in practice; a kernel that skips
one of the two roundings differs in about a fifth)."""


def fused_add_rms_norm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = FUSED_ADD_RMS_NORM_EPS, *, upcast: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h, y)``: ``h = x + residual`` rounded to x's dtype, ``y = rms_norm_ref(h, weight)``
    (Hugging Face casting; in float64 with ``upcast``, from the rounded ``h``)."""
    h = x + residual  # in x's dtype: PyTorch rounds the exact sum to nearest
    return h, rms_norm_ref(h, weight, eps, upcast=upcast)


def launch_fused_add_rms_norm(
    kernel,
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    h: Optional[torch.Tensor] = None,
    y: Optional[torch.Tensor] = None,
    *,
    eps: float = FUSED_ADD_RMS_NORM_EPS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The given launcher of exercise 3b: one program per row, ``BLOCK_N = next_power_of_2(N)``,
    every tensor with its own row stride (unit column stride). ``ROUND_BF16`` is True only for
    bfloat16 in the interpreter (see ``tritonforge.kernel_utils.cast_for_store``). Returns
    ``(h, y)``, new ``[M, N]`` tensors in x's dtype unless given."""
    require_kernel(kernel)
    for name, t in (("x", x), ("residual", residual)):
        require_unit_column_stride(name, t)
    M, N = x.shape
    if h is None:
        h = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if y is None:
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    kernel[(M,)](
        x, residual, weight, h, y,
        x.stride(0), residual.stride(0), h.stride(0), y.stride(0),
        N, eps,
        BLOCK_N=triton.next_power_of_2(N), ROUND_BF16=round_bf16_by_hand(x.dtype),
    )  # fmt: skip
    return h, y


def _fused_add_picture(got: dict, expected: dict) -> str:
    """Both outputs, ``h`` exact and ``y`` within the float64 comparison's budget."""
    h = element_map(got["h_guard"], expected["h"], rtol=0.0, name="h", legend=False)
    return h + "\n" + element_map(got["y_guard"], expected["y64"], rtol=TOLERANCE[expected["h"].dtype], name="y")


def _compare_fused_add(got: dict, expected: dict, inputs: dict) -> Verdict:
    dtype = expected["h"].dtype
    h = compare_tensors({"out": got["h"], "outside": got["h_outside"], "inputs_changed": got["inputs_changed"]}, expected["h"], rtol=0.0)
    y = compare_tensors({"out": got["y"], "outside": got["y_outside"]}, expected["y64"], rtol=TOLERANCE[dtype])
    problems = []
    if not h.passed:
        detail = h.detail
        if "wrong values" in detail:
            detail += " (h must equal x + residual rounded to nearest"
            detail += "; round with cast_for_store(…, ROUND_BF16): the interpreter's .to(tl.bfloat16) truncates)" if dtype == torch.bfloat16 else ")"
        problems.append("h: " + detail)
    if not y.passed:
        problems.append("y: " + y.detail)
    elif dtype != torch.float32:
        y_hf = expected["y_hf"]
        differ = float((got["y"].detach().cpu() != y_hf.cpu()).double().mean())
        if differ > FUSED_ADD_MAX_MISMATCH:
            problems.append(
                f"y: {differ:.0%} of the elements differ from the Hugging Face order (at most {FUSED_ADD_MAX_MISMATCH:.0%}): "
                "normalize h as rounded to the input dtype, round x̂ = h·rstd to the input dtype, then multiply by w"
            )
    errors = [e for e in (h.error, y.error) if e is not None]
    finite = [e for e in errors if not math.isnan(e)]
    error = max(finite) if finite else (float("nan") if errors else None)
    verdict = Verdict(not problems, error, "; ".join(problems))
    if h.passed and y.passed:  # only the rounding order is off: scattered elements, said in the detail
        return verdict
    return with_picture(verdict, lambda: _fused_add_picture(got, expected), got["h_guard"], got["y_guard"])


@dataclasses.dataclass(frozen=True)
class _RowsSpec:
    """Shape, dtype and the row strides of each input: ``(stride, storage offset)`` per tensor."""

    shape: tuple[int, int]
    dtype: torch.dtype = torch.float32
    x_layout: tuple[int, int] = (0, 0)  # (row stride, offset); row stride 0 means N
    other_layout: tuple[int, int] = (0, 0)


def _fused_add_guard(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, x_layout, residual_layout) -> dict:
    """Each input inside a NaN margin of a block; ``*_layout`` = ((row stride, 1), storage offset)."""
    block = triton.next_power_of_2(x.shape[1])
    margin = (1, block + 1)
    device = kernel_device()
    (xs, xo), (rs, ro) = x_layout, residual_layout
    return {
        "x": guarded(x, xs, offset=xo, margin=margin, device=device),
        "residual": guarded(residual, rs, offset=ro, margin=margin, device=device),
        "weight": guarded(weight, (1,), margin=(block + 1,), device=device),
    }


def _fused_add_run(fn, inp: dict) -> dict:
    x = inp["x"].view
    M, N = x.shape
    block = triton.next_power_of_2(N)
    h = poisoned_output((M, N), x.dtype, margin=(1, block + 1), device=x.device.type)
    y = poisoned_output((M, N), x.dtype, margin=(1, block + 3), device=x.device.type)  # a row stride unlike h's
    _, inputs_changed = run_guarded(launch_fused_add_rms_norm, fn, (inp["x"], inp["residual"], inp["weight"]), (h, y))
    return {
        "h": h.view,
        "y": y.view,
        "h_outside": h.outside_written(),
        "y_outside": y.outside_written(),
        "inputs_changed": inputs_changed,
        "h_guard": h,
        "y_guard": y,
    }


def _fused_add_expected(inp: dict) -> dict:
    args = (inp["x"].view, inp["residual"].view, inp["weight"].view)
    h, y_hf = fused_add_rms_norm_ref(*args)
    _, y64 = fused_add_rms_norm_ref(*args, upcast=True)
    return {"h": h, "y_hf": y_hf, "y64": y64}


FUSED_ADD_EPS_HINT = (
    "If only the tiny- or large-value case fails, look at eps: rstd = 1 / sqrt(mean(h²) + eps), "
    "eps added to the mean square, inside the root"
)


def _fused_add_case(name: str, spec: _RowsSpec, *, x_scale: float = 1.0, residual_scale: float = 1.0, hint: str = "") -> Case:
    M, N = spec.shape

    def layout(which):
        stride, offset = which
        return (stride or N, 1), offset

    def inputs(gen):
        x = (x_scale * torch.randn(M, N, generator=gen)).to(spec.dtype)
        residual = (residual_scale * torch.randn(M, N, generator=gen)).to(spec.dtype)
        weight = (1.0 + 0.5 * torch.randn(N, generator=gen)).to(spec.dtype)
        return _fused_add_guard(x, residual, weight, layout(spec.x_layout), layout(spec.other_layout))

    def compare(got, expected, inp):
        return with_hint(_compare_fused_add(got, expected, inp), hint)

    return CaseTemplate(_fused_add_run, _fused_add_expected, compare).case(name, inputs, dtype=spec.dtype)


def fused_add_rms_norm_cases() -> list[Case]:
    return [
        _fused_add_case("float32 4×1000", _RowsSpec((4, 1000))),
        _fused_add_case("float32 N = 1, 5×1", _RowsSpec((5, 1))),
        _fused_add_case(
            "float32 4×500, tiny values (≈ 1e-3: mean square ≈ 2e-6, eps = 1e-6 matters)",
            _RowsSpec((4, 500)),
            x_scale=1e-3,
            residual_scale=1e-3,
            hint=FUSED_ADD_EPS_HINT,
        ),
        _fused_add_case(
            "float32 4×500, large values (≈ 1e3: rstd ≈ 7e-4, eps inside the root)",
            _RowsSpec((4, 500)),
            x_scale=1e3,
            residual_scale=1e3,
            hint=FUSED_ADD_EPS_HINT,
        ),
        _fused_add_case("float32 6×37, x and residual with different row strides", _RowsSpec((6, 37), x_layout=(50, 3), other_layout=(64, 0))),
        _fused_add_case("bfloat16 6×300", _RowsSpec((6, 300), torch.bfloat16)),
        _fused_add_case(
            "bfloat16 4×1000, small update on a large residual (rounding order)",
            _RowsSpec((4, 1000), torch.bfloat16),
            x_scale=0.1,
            residual_scale=8.0,
        ),
        _fused_add_case("float16 7×123, strided rows", _RowsSpec((7, 123), torch.float16, x_layout=(130, 2), other_layout=(128, 5))),
        _fused_add_case("bfloat16 single row 1×2000", _RowsSpec((1, 2000), torch.bfloat16)),
    ]


def try_fused_add_rms_norm(kernel, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> Trial:
    """Exercise 3b's "try it": the kernel on copies of ``x``, ``residual`` (same row strides) and
    ``weight`` inside NaN-padded buffers, ``h`` and ``y`` poisoned with NaN; shows how many
    elements equal the unfused PyTorch result (the add in x's dtype, then ``rms_norm_ref``) and
    the verdict."""
    inputs = _fused_add_guard(
        x.detach().cpu(), residual.detach().cpu(), weight.detach().cpu(), ((x.stride(0), 1), 0), ((residual.stride(0), 1), 0)
    )
    def show(got, expected):
        same_h = float((got["h"].detach().cpu() == expected["h"].cpu()).double().mean())
        same_y = float((got["y"].detach().cpu() == expected["y_hf"].cpu()).double().mean())
        return [
            ("h identical to x + residual:", f"{same_h:.0%} of the elements"),
            ("y identical to the unfused reference:", f"{same_y:.0%} of the elements"),
        ]

    title = f"fused_add_rms_norm_kernel on x {list(x.shape)} {dtype_name(x.dtype)}"
    return CaseTemplate(_fused_add_run, _fused_add_expected, _compare_fused_add).trial(kernel, inputs, title=title, show=show)


# ----------------------------------------------------------------------------------------------
# Exercise 3c (chapter 3): RMSNorm of rows longer than one block, two passes over the columns
# ----------------------------------------------------------------------------------------------

RMS_NORM_LONG_ROWS_BLOCK_N = 32
"""The block of exercise 3c, fixed by its launcher and smaller than most rows of the check: a row
of ``N`` columns takes ``cdiv(N, 32)`` blocks, the last one ragged unless 32 divides ``N``."""

RMS_NORM_LONG_ROWS_EPS = 1e-6


def rms_norm_long_rows_ref(x: torch.Tensor, weight: torch.Tensor, eps: float = RMS_NORM_LONG_ROWS_EPS) -> torch.Tensor:
    """Exercise 3c's answer: RMSNorm of each row in float64 (``tritonforge.reference.rms_norm_ref``, upcast)."""
    return rms_norm_ref(x, weight, eps, upcast=True)


def launch_rms_norm_long_rows(
    kernel, x: torch.Tensor, weight: torch.Tensor, y: Optional[torch.Tensor] = None, *, eps: float = RMS_NORM_LONG_ROWS_EPS
) -> torch.Tensor:
    """The given launcher of exercise 3c: one program per row, ``BLOCK_N`` fixed at
    :data:`RMS_NORM_LONG_ROWS_BLOCK_N` whatever ``N`` is, so the kernel loops over the row in
    blocks; rows may be strided (unit column stride). Returns ``y`` (a new ``[M, N]`` tensor in
    x's dtype unless one is given)."""
    require_kernel(kernel)
    require_unit_column_stride("x", x)
    M, N = x.shape
    if y is None:
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    kernel[(M,)](x, weight, y, x.stride(0), y.stride(0), N, eps, BLOCK_N=RMS_NORM_LONG_ROWS_BLOCK_N)
    return y


def _long_rows_guard(x: torch.Tensor, weight: torch.Tensor, x_layout) -> dict:
    """x (``(row stride, storage offset)``) and weight, each inside a NaN margin of a block."""
    margin = RMS_NORM_LONG_ROWS_BLOCK_N + 1
    stride, offset = x_layout
    device = kernel_device()
    return {
        "x": guarded(x, (stride, 1), offset=offset, margin=(1, margin), device=device),
        "weight": guarded(weight, (1,), margin=(margin,), device=device),
    }


def _long_rows_run(fn, inp: dict) -> dict:
    M, N = inp["x"].view.shape
    y = poisoned_output((M, N), inp["x"].view.dtype, margin=(1, RMS_NORM_LONG_ROWS_BLOCK_N + 3), device=inp["x"].view.device.type)
    return run_one_output(launch_rms_norm_long_rows, fn, (inp["x"], inp["weight"]), y)


RMS_NORM_LONG_ROWS_HINT = (
    "Pass 1 adds x² over every block of the row (the last one masked), then divides by N — not by "
    "BLOCK_N, nor by the number of blocks × BLOCK_N; pass 2 goes over the blocks again and stores x · rstd · w"
)


LONG_ROWS = CaseTemplate(
    run=_long_rows_run,
    expected=lambda inp: rms_norm_long_rows_ref(inp["x"].view, inp["weight"].view),
    compare=lambda got, exp, inp: compare_output(got, exp, rtol=TOLERANCE[inp["x"].view.dtype], name="y", hint=RMS_NORM_LONG_ROWS_HINT),
)


def _long_rows_case(name: str, spec: _RowsSpec, *, scale: float = 1.0) -> Case:
    M, N = spec.shape

    def inputs(gen):
        x = (scale * torch.randn(M, N, generator=gen)).to(spec.dtype)
        weight = (1.0 + 0.5 * torch.randn(N, generator=gen)).to(spec.dtype)
        stride, offset = spec.x_layout
        return _long_rows_guard(x, weight, (stride or N, offset))

    return LONG_ROWS.case(name, inputs, dtype=spec.dtype)


def rms_norm_long_rows_cases() -> list[Case]:
    return [
        _long_rows_case("float32 4×100: three blocks of 32 and a ragged one of 4", _RowsSpec((4, 100))),
        _long_rows_case("N < BLOCK_N: 5×20, one ragged block", _RowsSpec((5, 20))),
        _long_rows_case("N = 64: exactly two blocks", _RowsSpec((3, 64))),
        _long_rows_case("N = 1, 4×1", _RowsSpec((4, 1))),
        _long_rows_case("strided rows 5×77 (row stride 90, offset 3)", _RowsSpec((5, 77), x_layout=(90, 3))),
        _long_rows_case("single row 1×300: ten blocks, the last of 12", _RowsSpec((1, 300))),
        _long_rows_case("tiny values 3×100 (≈ 1e-3: mean square ≈ eps)", _RowsSpec((3, 100)), scale=1e-3),
        _long_rows_case("float16 6×150", _RowsSpec((6, 150), torch.float16)),
        _long_rows_case("bfloat16 4×90", _RowsSpec((4, 90), torch.bfloat16)),
    ]


def try_rms_norm_long_rows(kernel, x: torch.Tensor, weight: torch.Tensor) -> Trial:
    """Exercise 3c's "try it": the kernel (``BLOCK_N = 32``) on a copy of ``x`` (same row stride)
    and ``weight`` inside NaN-padded buffers, ``y`` poisoned with NaN; shows, per block of 32
    columns, whether it was written and right, the largest difference from the float64 RMSNorm,
    and the verdict."""
    inputs = _long_rows_guard(x.detach().cpu(), weight.detach().cpu(), (x.stride(0), 0))

    def show(got, expected):
        out, exp = got["out"].detach().double().cpu(), expected.cpu()
        tol = TOLERANCE[x.dtype] * max(1.0, float(exp.abs().max()))
        blocks = []
        for start in range(0, out.shape[1], RMS_NORM_LONG_ROWS_BLOCK_N):
            o, e = out[:, start : start + RMS_NORM_LONG_ROWS_BLOCK_N], exp[:, start : start + RMS_NORM_LONG_ROWS_BLOCK_N]
            blocks.append("NaN" if bool(o.isnan().any()) else ("ok" if float((o - e).abs().max()) <= tol else "wrong"))
        return [("blocks of 32 columns:", " ".join(blocks)), ("max |y − rms_norm(x)|:", largest_difference(got["out"], expected))]

    title = f"rms_norm_long_rows_kernel on x {list(x.shape)}, BLOCK_N = {RMS_NORM_LONG_ROWS_BLOCK_N}"
    return LONG_ROWS.trial(kernel, inputs, title=title, show=show)
