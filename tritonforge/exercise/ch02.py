"""Exercises 2a, 2b and 2c (chapter 2): bias + ReLU over a strided 2-D view, the maximum of each
row, looping over a long row in blocks, and a transpose into a new tensor, tile by tile.

Each exercise has a float64 reference (``*_ref``), the launcher the notebook gives the learner
(``launch_*``: grid, block sizes, strides), its cases (``*_cases``), and the guarded run of the
notebook's "try it" cell (``try_*``); its check (``check_*``) comes from its row in
:mod:`tritonforge.exercise.registry`.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from tritonforge._triton import triton
from tritonforge.exercise.core import (
    Case,
    CaseTemplate,
    Trial,
    Verdict,
    ViewSpec,
    compare_output,
    element_map,
    guarded,
    kernel_device,
    poisoned_output,
    require_kernel,
    require_unit_column_stride,
    run_one_output,
    show_values,
)
from tritonforge.reference import TOLERANCE

__all__ = [
    "BIAS_RELU_BLOCK_M",
    "BIAS_RELU_BLOCK_N",
    "ROW_MAX_BLOCK_N",
    "ROW_MAX_SENTINEL",
    "TRANSPOSE_BLOCK_M",
    "TRANSPOSE_BLOCK_N",
    "bias_relu_2d_cases",
    "bias_relu_2d_ref",
    "launch_bias_relu_2d",
    "launch_row_max",
    "launch_transpose",
    "row_max_cases",
    "row_max_ref",
    "transpose_cases",
    "transpose_ref",
    "try_bias_relu_2d",
    "try_row_max",
    "try_transpose",
]

# ----------------------------------------------------------------------------------------------
# Exercise 2a (chapter 2): bias + ReLU over a strided 2-D view
# ----------------------------------------------------------------------------------------------

BIAS_RELU_BLOCK_M = 16
BIAS_RELU_BLOCK_N = 16


def bias_relu_2d_ref(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``max(x + bias, 0)`` with ``bias`` broadcast over rows, in float64."""
    return torch.clamp_min(x.double() + bias.double()[None, :], 0.0)


def launch_bias_relu_2d(kernel, x: torch.Tensor, bias: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The given launcher of exercise 2a: a 2-D grid of ``16 × 16`` tiles; x's and out's strides
    are passed in elements. Returns ``out`` (a new ``[M, N]`` tensor unless one is given)."""
    require_kernel(kernel)
    M, N = x.shape
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(M, BIAS_RELU_BLOCK_M), triton.cdiv(N, BIAS_RELU_BLOCK_N))
    kernel[grid](
        x, bias, out, M, N,
        x.stride(0), x.stride(1),
        out.stride(0), out.stride(1),
        BLOCK_M=BIAS_RELU_BLOCK_M, BLOCK_N=BIAS_RELU_BLOCK_N,
    )  # fmt: skip
    return out


BIAS_RELU_MARGIN = (BIAS_RELU_BLOCK_M + 1, BIAS_RELU_BLOCK_N + 1)


def _bias_relu_guard(x: torch.Tensor, bias: torch.Tensor, strides, offset: int = 0) -> dict:
    """x in a view with the given strides inside a NaN margin of a whole tile; bias likewise."""
    M, N = x.shape
    device = kernel_device()
    bias_len = max(M, N) + BIAS_RELU_BLOCK_M + BIAS_RELU_BLOCK_N  # room for a kernel that indexes bias by row
    return {
        "x": guarded(x, strides, offset=offset, margin=BIAS_RELU_MARGIN, device=device),
        "bias": guarded(bias, (1,), margin=(bias_len,), device=device),
    }


def _bias_relu_run(fn, inp: dict) -> dict:
    x = inp["x"].view
    out = poisoned_output(tuple(x.shape), x.dtype, margin=BIAS_RELU_MARGIN, device=x.device.type)
    return run_one_output(launch_bias_relu_2d, fn, (inp["x"], inp["bias"]), out)


BIAS_RELU = CaseTemplate(
    run=_bias_relu_run,
    expected=lambda inp: bias_relu_2d_ref(inp["x"].view, inp["bias"].view),
    compare=lambda got, exp, inp: compare_output(got, exp, rtol=TOLERANCE[inp["x"].view.dtype]),
)


def _bias_relu_case(name: str, spec: ViewSpec) -> Case:
    M, N = spec.shape

    def inputs(gen):
        x = torch.randn(spec.shape, generator=gen).to(spec.dtype)
        bias = torch.randn(N, generator=gen).to(spec.dtype)
        return _bias_relu_guard(x, bias, spec.strides, spec.offset)

    return BIAS_RELU.case(name, inputs)


def bias_relu_2d_cases() -> list[Case]:
    return [
        _bias_relu_case("contiguous 37×53", ViewSpec((37, 53), (53, 1))),
        _bias_relu_case("transposed 45×30 (x = base.t())", ViewSpec((45, 30), (1, 45))),
        _bias_relu_case("every 3rd column 20×41 (base[:, ::3])", ViewSpec((20, 41), (123, 3))),
        _bias_relu_case("interior slice 37×55 (base[3:40, 5:60])", ViewSpec((37, 55), (70, 1), offset=3 * 70 + 5)),
        _bias_relu_case("single row 1×257", ViewSpec((1, 257), (257, 1))),
        _bias_relu_case("single column 129×1", ViewSpec((129, 1), (1, 129))),
        _bias_relu_case("float16 transposed 33×47", ViewSpec((33, 47), (1, 33), dtype=torch.float16)),
    ]


def try_bias_relu_2d(kernel, x: torch.Tensor, bias: torch.Tensor) -> Trial:
    """Exercise 2a's "try it": the kernel on copies of ``x`` (same strides) and ``bias`` inside
    NaN-padded buffers, ``out`` poisoned with NaN; shows yours, the answer and the verdict."""
    inputs = _bias_relu_guard(x.detach().cpu(), bias.detach().cpu(), x.stride())
    return BIAS_RELU.trial(kernel, inputs, title=f"bias_relu_2d_kernel on x {list(x.shape)}, strides {x.stride()}", show=show_values)


# ----------------------------------------------------------------------------------------------
# Exercise 2b (chapter 2): row-wise max, looping over a long row in blocks
# ----------------------------------------------------------------------------------------------

ROW_MAX_BLOCK_N = 32


def row_max_ref(x: torch.Tensor) -> torch.Tensor:
    return x.double().amax(dim=1)


def launch_row_max(kernel, x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The given launcher of exercise 2b: one program per row, ``BLOCK_N = 32`` columns at a time;
    x's rows may be strided (``stride_xm``), its columns have unit stride."""
    require_kernel(kernel)
    require_unit_column_stride("x", x)
    M, N = x.shape
    if out is None:
        out = torch.empty(M, dtype=x.dtype, device=x.device)
    kernel[(M,)](x, out, N, x.stride(0), BLOCK_N=ROW_MAX_BLOCK_N)
    return out


ROW_MAX_SENTINEL = 10_000.0
"""What surrounds the rows of every row-max input: a value larger than any row's maximum (and
exact in float16), so a load that reads one element past a row, or before it, changes the
answer on every run instead of when the neighbour happens to be larger."""

ROW_MAX_MARGIN = (1, ROW_MAX_BLOCK_N + 1)


def _row_max_guard(values: torch.Tensor, strides, offset: int = 0) -> Any:
    return guarded(values, strides, offset=offset, margin=ROW_MAX_MARGIN, device=kernel_device(), fill=ROW_MAX_SENTINEL)


def _row_max_run(fn, x) -> dict:
    out = poisoned_output((x.view.shape[0],), x.view.dtype, margin=(ROW_MAX_BLOCK_N,), device=x.view.device.type)
    return run_one_output(launch_row_max, fn, (x,), out)


ROW_MAX_HINT = (
    f"{ROW_MAX_SENTINEL:g} is the value the check puts around each row: a load read past the end of a row "
    "(or before its start); mask every load with start + cols < N"
)


def _compare_row_max(got: dict, expected: torch.Tensor, x) -> Verdict:
    # a max is exact; the picture has one character per row's maximum: which rows are wrong, and writes past the last one
    read_past = bool((got["out"].detach().double().cpu() == ROW_MAX_SENTINEL).any())
    return compare_output(got, expected, rtol=0.0, hint=ROW_MAX_HINT if read_past else "")


ROW_MAX = CaseTemplate(run=_row_max_run, expected=lambda x: row_max_ref(x.view), compare=_compare_row_max)


def _row_max_case(name: str, spec: ViewSpec, *, negative: bool, max_at: Optional[str] = None) -> Case:
    N = spec.shape[1]

    def inputs(gen):
        values = torch.randn(spec.shape, generator=gen)
        if negative:  # every element < 0: a zero from `other=0.0` or a zeroed accumulator wins
            values = -(values.abs() + 0.25)
        if max_at is not None:  # plant each row's maximum at one end of the row
            col = 0 if max_at == "first" else N - 1
            values[:, col] = values.amax(dim=1) + 0.5
        return _row_max_guard(values.to(spec.dtype), spec.strides, spec.offset)

    return ROW_MAX.case(name, inputs)


def row_max_cases() -> list[Case]:
    """Every input sits in a buffer filled with :data:`ROW_MAX_SENTINEL` (rows with gaps between
    them in most cases), so reading past a row shows in every case that reads past it."""
    return [
        _row_max_case("7×100, mixed signs", ViewSpec((7, 100), (100, 1)), negative=False),
        _row_max_case("5×77, all negative, gaps between rows", ViewSpec((5, 77), (80, 1)), negative=True),
        _row_max_case("4×1, N = 1, negative, gaps between rows", ViewSpec((4, 1), (2, 1)), negative=True),
        _row_max_case("3×32, exactly one block, negative, gaps", ViewSpec((3, 32), (33, 1)), negative=True),
        _row_max_case("6×33, max in the last column", ViewSpec((6, 33), (33, 1)), negative=True, max_at="last"),
        _row_max_case("6×95 strided rows (base[:, 3:98]), max first", ViewSpec((6, 95), (130, 1), offset=3), negative=True, max_at="first"),
        _row_max_case("float16 3×300, all negative, gaps", ViewSpec((3, 300), (301, 1), dtype=torch.float16), negative=True),
    ]


def try_row_max(kernel, x: torch.Tensor) -> Trial:
    """Exercise 2b's "try it": the kernel on a copy of ``x`` (same strides) surrounded by
    :data:`ROW_MAX_SENTINEL`, ``out`` poisoned with NaN; shows yours, the answer and the verdict."""
    return ROW_MAX.trial(kernel, _row_max_guard(x.detach().cpu(), x.stride()), title=f"row_max_kernel on x {list(x.shape)}", show=show_values)


# ----------------------------------------------------------------------------------------------
# Exercise 2c (chapter 2): out = x.T, tile by tile, from any strides into a new tensor
# ----------------------------------------------------------------------------------------------

TRANSPOSE_BLOCK_M = 16
TRANSPOSE_BLOCK_N = 8
"""Tiles of ``x`` are 16 rows × 8 columns: not square, so a kernel that mixes up which block size
(or which program id) goes with which dimension leaves elements unwritten or writes past them."""


def transpose_ref(x: torch.Tensor) -> torch.Tensor:
    """``x.T`` as a new ``[N, M]`` tensor, in float64 (a transpose is exact)."""
    return x.double().t().contiguous()


def launch_transpose(kernel, x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The given launcher of exercise 2c: a 2-D grid over ``x``'s tiles,
    ``(cdiv(M, 16), cdiv(N, 8))``; x's and out's strides are passed in elements. Returns ``out``
    (a new contiguous ``[N, M]`` tensor unless one is given)."""
    require_kernel(kernel)
    M, N = x.shape
    if out is None:
        out = torch.empty((N, M), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(M, TRANSPOSE_BLOCK_M), triton.cdiv(N, TRANSPOSE_BLOCK_N))
    kernel[grid](
        x, out, M, N,
        x.stride(0), x.stride(1),
        out.stride(0), out.stride(1),
        BLOCK_M=TRANSPOSE_BLOCK_M, BLOCK_N=TRANSPOSE_BLOCK_N,
    )  # fmt: skip
    return out


TRANSPOSE_IN_MARGIN = (TRANSPOSE_BLOCK_M + 1, TRANSPOSE_BLOCK_N + 1)
TRANSPOSE_OUT_MARGIN = (TRANSPOSE_BLOCK_N + 1, TRANSPOSE_BLOCK_M + 1)  # out is [N, M]: its tiles are 8 × 16


def _room(shape, strides, offset: int = 0) -> int:
    """Elements a buffer needs so that any index below ``max(M, N)`` plus a tile, times any of the
    two strides, stays inside it: a kernel that swaps the strides (or copies instead of
    transposing) writes to wrong places in the padding instead of outside the allocation."""
    reach = max(shape) + TRANSPOSE_BLOCK_M + 1
    return offset + 2 * reach * (max(abs(s) for s in strides) + 1)


def _transpose_guard(x: torch.Tensor, strides, offset: int = 0):
    return guarded(x, strides, offset=offset, margin=TRANSPOSE_IN_MARGIN, device=kernel_device(), min_size=_room(x.shape, strides, offset))


def _transpose_run(fn, x) -> dict:
    M, N = x.view.shape
    row_stride = M + TRANSPOSE_OUT_MARGIN[1]  # wider than out's rows: a kernel must use the strides it is given
    nan = torch.full((N, M), float("nan"), dtype=x.view.dtype)
    out = guarded(nan, (row_stride, 1), margin=TRANSPOSE_OUT_MARGIN, device=x.view.device.type, min_size=_room((N, M), (row_stride, 1)))
    return run_one_output(launch_transpose, fn, (x,), out)


TRANSPOSE = CaseTemplate(
    run=_transpose_run,
    expected=lambda x: transpose_ref(x.view),
    compare=lambda got, expected, x: compare_output(got, expected, rtol=0.0),  # a transpose moves values: exact
)


def _transpose_case(name: str, spec: ViewSpec) -> Case:
    def inputs(gen):
        # distinct values (a permutation of 1..M·N, scaled): a transposed-wrong element never matches by chance
        M, N = spec.shape
        values = (torch.randperm(M * N, generator=gen).reshape(M, N).double() + 1) / 64
        return _transpose_guard(values.to(spec.dtype), spec.strides, spec.offset)

    return TRANSPOSE.case(name, inputs)


def transpose_cases() -> list[Case]:
    """Shapes that are not multiples of a tile in most cases, square and not, views with every
    kind of stride, a single row and a single column (whose transposes swap them)."""
    return [
        _transpose_case("contiguous 37×53", ViewSpec((37, 53), (53, 1))),
        _transpose_case("square 32×32 (whole tiles)", ViewSpec((32, 32), (32, 1))),
        _transpose_case("transposed view 45×30 (x = base.t())", ViewSpec((45, 30), (1, 45))),
        _transpose_case("every 2nd column 20×41 (base[:, ::2])", ViewSpec((20, 41), (90, 2), offset=1)),
        _transpose_case("interior slice 17×40 (base[2:19, 3:43])", ViewSpec((17, 40), (50, 1), offset=2 * 50 + 3)),
        _transpose_case("single row 1×100", ViewSpec((1, 100), (100, 1))),
        _transpose_case("single column 70×1", ViewSpec((70, 1), (1, 70))),
        _transpose_case("float16 transposed view 23×19", ViewSpec((23, 19), (1, 23), dtype=torch.float16)),
    ]


def try_transpose(kernel, x: torch.Tensor) -> Trial:
    """Exercise 2c's "try it": the kernel on a copy of ``x`` (same strides) inside a NaN-padded
    buffer, ``out`` (``[N, M]``) poisoned with NaN; shows yours, the answer, a picture of which
    elements are right, wrong or never written, and the verdict."""

    def show(got, expected):
        return [*show_values(got, expected), ("picture:", element_map(got["guard"], expected, rtol=0.0, name="out"))]

    title = f"transpose_kernel on x {list(x.shape)}, strides {x.stride()}"
    return TRANSPOSE.trial(kernel, _transpose_guard(x.detach().cpu(), x.stride()), title=title, show=show)
