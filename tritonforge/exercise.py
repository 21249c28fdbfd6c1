r"""Exercise checks: run a learner's function on a list of cases and show a verdict per case.

The mechanism, in three pieces:

- :class:`Case` — one named test: a factory for fresh inputs, how to call the learner's function
  on them, the expected answer (a float64 PyTorch reference or an exact formula), and how to
  compare the two.
- :func:`check` — runs every case and returns a :class:`Report`. It never raises: an exception
  from the learner's code (the untouched stub raises ``NotImplementedError``, or does nothing) is
  a failed case with the exception's message, so a notebook cell always shows the whole table.
- :class:`Report` — ``.passed`` (every case passed), ``.rows``, a plain-text table
  (``str(report)``) and an HTML table (``_repr_html_``) for notebooks; ``assert_passed()`` for
  pytest.

Kernel exercises guard their buffers: every output is poisoned with NaN (an element the kernel
never writes fails the case), and every tensor — inputs and outputs — is a view into a larger
buffer whose margins are NaN, wide enough to hold a whole tile past each edge. A kernel that
forgets a mask therefore reads NaN and writes into the margin instead of into someone else's
memory (which can crash the process in Triton's interpreter), and the check reports the writes
it finds there.

One ``check_<exercise>(fn)`` per exercise; the exercise notebooks and ``tests/test_exercises.py``
call the same functions. Inputs are drawn afresh on every check from a seed that the report
prints; pass ``seed=`` to replay a run.
"""

from __future__ import annotations

import dataclasses
import html
import math
import os
from typing import Any, Callable, Optional, Sequence

import torch

from tritonforge import runtime
from tritonforge._triton import triton

# ----------------------------------------------------------------------------------------------
# The mechanism
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Verdict:
    """How one case went: passed or not, the largest error seen (if any), and a sentence."""

    passed: bool
    error: Optional[float] = None
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class Case:
    """One test of a learner's function.

    ``inputs(gen)`` builds fresh inputs from a ``torch.Generator``; ``run(fn, inputs)`` calls the
    learner's function and returns what it produced; ``expected(inputs)`` is the right answer;
    ``compare(got, expected, inputs)`` returns a :class:`Verdict`.
    """

    name: str
    inputs: Callable[[torch.Generator], Any]
    run: Callable[[Callable, Any], Any]
    expected: Callable[[Any], Any]
    compare: Callable[[Any, Any, Any], Verdict]


@dataclasses.dataclass(frozen=True)
class Row:
    case: str
    passed: bool
    error: Optional[float]
    detail: str


def describe_exception(exc: BaseException, limit: int = 240) -> str:
    """``Type: message`` on one line; for a Triton compilation error the location and the cause."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        text = ""
    elif len(lines) == 1:
        text = lines[0]
    else:  # CompilationError: "at 12:8:", the source, then the cause on the last line
        text = f"{lines[0]} {lines[-1]}" if lines[0].startswith("at ") else lines[-1]
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclasses.dataclass
class Report:
    """The verdict of one :func:`check`: one row per case."""

    title: str
    rows: list[Row]
    seed: int

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r.passed for r in self.rows)

    @property
    def n_passed(self) -> int:
        return sum(r.passed for r in self.rows)

    def summary(self) -> str:
        if self.passed:
            return f"{self.title}: all {len(self.rows)} cases pass"
        return f"{self.title}: {self.n_passed} of {len(self.rows)} cases pass (seed {self.seed})"

    @staticmethod
    def _error_text(error: Optional[float]) -> str:
        if error is None:
            return "-"
        if math.isnan(error):
            return "nan"
        return f"{error:.2e}"

    def __str__(self) -> str:
        header = ("case", "verdict", "max error", "detail")
        body = [(r.case, "pass" if r.passed else "FAIL", self._error_text(r.error), r.detail) for r in self.rows]
        widths = [max(len(row[i]) for row in [header, *body]) for i in range(3)]
        lines = [self.summary(), ""]
        for row in [header, *body]:
            lines.append("  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3])
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.passed else "#cf222e"
        cells = []
        for r in self.rows:
            mark = "<span style='color:#1a7f37'>✔ pass</span>" if r.passed else "<span style='color:#cf222e'>✘ fail</span>"
            cells.append(
                "<tr>"
                f"<td style='text-align:left'>{html.escape(r.case)}</td>"
                f"<td style='text-align:left'>{mark}</td>"
                f"<td style='text-align:right'><code>{self._error_text(r.error)}</code></td>"
                f"<td style='text-align:left'>{html.escape(r.detail)}</td>"
                "</tr>"
            )
        head = "".join(f"<th style='text-align:left'>{h}</th>" for h in ("case", "verdict", "max error", "detail"))
        return (
            f"<p style='color:{colour}'><b>{html.escape(self.summary())}</b></p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(cells)}</tbody></table>"
        )

    def assert_passed(self) -> None:
        """Raise ``AssertionError`` with the table unless every case passed (for pytest)."""
        if not self.passed:
            raise AssertionError("\n" + str(self))


def check(fn: Callable, cases: Sequence[Case], *, title: str, seed: Optional[int] = None) -> Report:
    """Run ``fn`` on every case; never raises (the learner's exceptions become failed rows)."""
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little") % 1_000_000
    rows = []
    for index, case in enumerate(cases):
        gen = torch.Generator().manual_seed(seed + index)
        try:
            inputs = case.inputs(gen)
            expected = case.expected(inputs)
        except Exception as exc:  # noqa: BLE001 - a bug in the check itself: say so, keep going
            rows.append(Row(case.name, False, None, "error in the check itself: " + describe_exception(exc)))
            continue
        try:
            got = case.run(fn, inputs)
        except Exception as exc:  # noqa: BLE001 - the learner's code raised: a failed case, not a crash
            rows.append(Row(case.name, False, None, describe_exception(exc)))
            continue
        try:
            verdict = case.compare(got, expected, inputs)
        except Exception as exc:  # noqa: BLE001 - e.g. the function returned something odd
            verdict = Verdict(False, None, "could not compare the result: " + describe_exception(exc))
        rows.append(Row(case.name, verdict.passed, verdict.error, verdict.detail))
    return Report(title=title, rows=rows, seed=seed)


# ----------------------------------------------------------------------------------------------
# Guarded tensors: NaN margins around every view a kernel touches
# ----------------------------------------------------------------------------------------------


def kernel_device() -> str:
    """Where exercise kernels run: a CUDA GPU when Triton compiles for it, else the CPU."""
    return "cuda" if torch.cuda.is_available() and not runtime.interpreting() else "cpu"


@dataclasses.dataclass
class Guarded:
    """A strided view into a NaN-filled buffer; ``outside_written()`` counts non-NaN margin cells."""

    view: torch.Tensor
    buffer: torch.Tensor  # 1-D, the whole allocation

    def outside_written(self) -> int:
        inside = torch.zeros(self.buffer.numel(), dtype=torch.bool, device=self.buffer.device)
        idx = torch.zeros((), dtype=torch.long, device=self.buffer.device) + self.view.storage_offset()
        for size, stride in zip(self.view.shape, self.view.stride()):
            idx = (idx.unsqueeze(-1) + torch.arange(size, device=self.buffer.device) * stride).reshape(-1)
        inside[idx] = True
        return int((~torch.isnan(self.buffer[~inside])).sum())


def guarded(
    values: torch.Tensor,
    strides: Sequence[int],
    *,
    offset: int = 0,
    margin: Sequence[int] = (),
    device: str = "cpu",
) -> Guarded:
    """Place ``values`` in a view with the given strides and storage offset, inside a NaN buffer
    large enough for indices up to ``shape[d] + margin[d]`` in every dimension (plus slack)."""
    shape = values.shape
    margin = list(margin) + [0] * (len(shape) - len(margin))
    reach = offset + sum((s + m) * abs(st) for s, m, st in zip(shape, margin, strides))
    size = reach + 2 * max(shape.numel(), 64)  # slack for kernels that index with the wrong strides
    buffer = torch.full((size,), float("nan"), dtype=values.dtype, device=device)
    view = buffer.as_strided(tuple(shape), tuple(strides), offset)
    view.copy_(values.to(device))
    return Guarded(view, buffer)


def poisoned_output(shape: Sequence[int], dtype: torch.dtype, *, margin: Sequence[int], device: str) -> Guarded:
    """A NaN output view with a row stride wider than its rows (so a kernel must use the strides
    it is given) inside a NaN margin."""
    if len(shape) == 1:
        return guarded(torch.full(tuple(shape), float("nan"), dtype=dtype), (1,), margin=margin, device=device)
    M, N = shape
    row_stride = N + max(margin[1], 1)
    return guarded(torch.full((M, N), float("nan"), dtype=dtype), (row_stride, 1), margin=margin, device=device)


def compare_tensors(got: dict, expected: torch.Tensor, *, rtol: float) -> Verdict:
    """``got`` = ``{"out": tensor, "outside": int, "inputs_changed": bool}`` from a kernel run.

    Fails on: a wrong shape; writes outside the output; a changed input; NaN where the answer
    has none (elements never written, or read from outside the inputs); an error above
    ``rtol * max(1, max|expected|)``.
    """
    out = got["out"]
    if tuple(out.shape) != tuple(expected.shape):
        return Verdict(False, None, f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
    problems = []
    if got.get("outside"):
        problems.append(f"wrote {got['outside']} element(s) outside the output: a store needs a mask")
    if got.get("inputs_changed"):
        problems.append("changed an input tensor")
    out64 = out.detach().double().cpu()
    exp64 = expected.double().cpu()
    unwritten = torch.isnan(out64) & ~torch.isnan(exp64)
    if unwritten.any():
        problems.append(
            f"{int(unwritten.sum())} of {out64.numel()} elements are NaN: never written, "
            "or computed from memory outside the inputs"
        )
    finite = ~torch.isnan(out64) & ~torch.isnan(exp64)
    error = float((out64[finite] - exp64[finite]).abs().max()) if finite.any() else float("nan")
    scale = max(1.0, float(exp64.abs().max())) if exp64.numel() else 1.0
    if finite.any() and error > rtol * scale:
        i = int(torch.argmax(torch.where(finite, (out64 - exp64).abs(), torch.zeros_like(out64)).reshape(-1)))
        where = tuple(int(k) for k in torch.unravel_index(torch.tensor(i), out64.shape))
        problems.append(
            f"wrong values, e.g. at {where}: got {out64.reshape(-1)[i].item():.6g}, expected {exp64.reshape(-1)[i].item():.6g}"
        )
    if problems:
        return Verdict(False, error, "; ".join(problems))
    return Verdict(True, error, "")


def _is_kernel(fn: object) -> bool:
    return hasattr(fn, "__getitem__") and hasattr(fn, "run")


def _require_kernel(fn: object) -> None:
    if not _is_kernel(fn):
        raise TypeError(f"expected a @triton.jit kernel, got {type(fn).__name__}: is the kernel decorated with @triton.jit?")


# ----------------------------------------------------------------------------------------------
# Exercise 1a (chapter 1): arithmetic intensity of RMSNorm and of a matmul
# ----------------------------------------------------------------------------------------------

def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def arithmetic_intensity_ref(op: str, shape: tuple, dtype: torch.dtype) -> tuple[int, int, float]:
    """The reference answer to exercise 1a: ``(flops, bytes, flops / bytes)``.

    Convention (the book's benchmarks use the same): bytes = the least one fused pass moves,
    each input read once and each output written once; 1 FLOP per multiply or add.

    - ``rms_norm``, shape ``(M, N)``: bytes = (read x + write y + read weight) = (2MN + N)·elem;
      FLOPs = 4MN (square, add into the row sum, multiply by 1/rms, multiply by the weight; the
      O(M) per-row divide, +eps and rsqrt are not counted).
    - ``matmul``, shape ``(M, N, K)``, ``C[M, N] = A[M, K] @ B[K, N]``: bytes = (MK + KN + MN)·elem;
      FLOPs = 2MNK.
    """
    elem = element_size(dtype)
    if op == "rms_norm":
        M, N = shape
        flops, nbytes = 4 * M * N, (2 * M * N + N) * elem
    elif op == "matmul":
        M, N, K = shape
        flops, nbytes = 2 * M * N * K, (M * K + K * N + M * N) * elem
    else:
        raise ValueError(f"op must be 'rms_norm' or 'matmul', got {op!r}")
    return flops, nbytes, flops / nbytes


def _number(value: float) -> str:
    """Counts exactly (``134,234,112``), ratios to 6 significant digits."""
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 2**53):
        return f"{int(value):,}"
    return f"{value:.6g}"


def _compare_intensity(got: Any, expected: tuple, inputs: tuple) -> Verdict:
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return Verdict(False, None, f"return a tuple (flops, bytes, intensity); got {type(got).__name__} {got!r:.60}")
    problems, errors = [], []
    for label, g, e in zip(("flops", "bytes", "intensity"), got, expected):
        if isinstance(g, bool) or not isinstance(g, (int, float)):
            problems.append(f"{label} should be a number, got {type(g).__name__}")
            continue
        rel = abs(g - e) / abs(e)
        errors.append(rel)
        exact = label != "intensity"
        if (exact and g != e) or (not exact and rel > 1e-9):
            problems.append(f"{label}: got {_number(g)}, expected {_number(e)}")
    error = max(errors) if errors else None
    return Verdict(not problems, error, "; ".join(problems))


def _intensity_case(name: str, op: str, shape_fn: Callable[[torch.Generator], tuple], dtype: torch.dtype) -> Case:
    return Case(
        name=name,
        inputs=lambda gen: (op, shape_fn(gen), dtype),
        run=lambda fn, inp: fn(*inp),
        expected=lambda inp: arithmetic_intensity_ref(*inp),
        compare=_compare_intensity,
    )


def _randint(gen: torch.Generator, low: int, high: int) -> int:
    return int(torch.randint(low, high, (1,), generator=gen))


def arithmetic_intensity_cases() -> list[Case]:
    return [
        _intensity_case("rms_norm 4096×4096 float32", "rms_norm", lambda g: (4096, 4096), torch.float32),
        _intensity_case("rms_norm 4096×4096 bfloat16", "rms_norm", lambda g: (4096, 4096), torch.bfloat16),
        _intensity_case("rms_norm 1×8192 float16 (one token)", "rms_norm", lambda g: (1, 8192), torch.float16),
        _intensity_case("rms_norm random M×N float32", "rms_norm", lambda g: (_randint(g, 1, 5000), _randint(g, 1, 9000)), torch.float32),
        _intensity_case("matmul 4096×4096×4096 bfloat16", "matmul", lambda g: (4096, 4096, 4096), torch.bfloat16),
        _intensity_case("matmul 16×14336×4096 float16 (decode)", "matmul", lambda g: (16, 14336, 4096), torch.float16),
        _intensity_case(
            "matmul random M×N×K float32", "matmul", lambda g: (_randint(g, 1, 3000), _randint(g, 1, 3000), _randint(g, 1, 3000)), torch.float32
        ),
    ]


def check_arithmetic_intensity(fn: Callable, *, seed: Optional[int] = None) -> Report:
    """Exercise 1a: ``fn(op, shape, dtype) -> (flops, bytes, flop_per_byte)``; exact counts."""
    return check(fn, arithmetic_intensity_cases(), title="arithmetic_intensity", seed=seed)


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
    _require_kernel(kernel)
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


@dataclasses.dataclass(frozen=True)
class _ViewSpec:
    """How a case lays out its [M, N] input: strides and storage offset of a view."""

    shape: tuple[int, int]
    strides: tuple[int, int]
    offset: int = 0
    dtype: torch.dtype = torch.float32


def _bias_relu_case(name: str, spec: _ViewSpec) -> Case:
    M, N = spec.shape
    margin = (BIAS_RELU_BLOCK_M + 1, BIAS_RELU_BLOCK_N + 1)

    def inputs(gen):
        device = kernel_device()
        x = guarded(torch.randn(spec.shape, generator=gen).to(spec.dtype), spec.strides, offset=spec.offset, margin=margin, device=device)
        bias_len = max(M, N) + BIAS_RELU_BLOCK_M + BIAS_RELU_BLOCK_N  # room for a kernel that indexes bias by row
        bias = guarded(torch.randn(N, generator=gen).to(spec.dtype), (1,), margin=(bias_len,), device=device)
        return {"x": x, "bias": bias}

    def run(fn, inp):
        x, bias = inp["x"], inp["bias"]
        out = poisoned_output((M, N), spec.dtype, margin=margin, device=x.view.device.type)
        x_before, bias_before = x.buffer.clone(), bias.buffer.clone()
        launch_bias_relu_2d(fn, x.view, bias.view, out.view)
        if x.view.is_cuda:
            torch.cuda.synchronize()
        changed = not (torch.equal(x.buffer.nan_to_num(7.0), x_before.nan_to_num(7.0)) and torch.equal(bias.buffer.nan_to_num(7.0), bias_before.nan_to_num(7.0)))
        return {"out": out.view, "outside": out.outside_written(), "inputs_changed": changed}

    rtol = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[spec.dtype]
    return Case(
        name=name,
        inputs=inputs,
        run=run,
        expected=lambda inp: bias_relu_2d_ref(inp["x"].view, inp["bias"].view),
        compare=lambda got, exp, inp: compare_tensors(got, exp, rtol=rtol),
    )


def bias_relu_2d_cases() -> list[Case]:
    return [
        _bias_relu_case("contiguous 37×53", _ViewSpec((37, 53), (53, 1))),
        _bias_relu_case("transposed 45×30 (x = base.t())", _ViewSpec((45, 30), (1, 45))),
        _bias_relu_case("every 3rd column 20×41 (base[:, ::3])", _ViewSpec((20, 41), (123, 3))),
        _bias_relu_case("interior slice 37×55 (base[3:40, 5:60])", _ViewSpec((37, 55), (70, 1), offset=3 * 70 + 5)),
        _bias_relu_case("single row 1×257", _ViewSpec((1, 257), (257, 1))),
        _bias_relu_case("single column 129×1", _ViewSpec((129, 1), (1, 129))),
        _bias_relu_case("float16 transposed 33×47", _ViewSpec((33, 47), (1, 33), dtype=torch.float16)),
    ]


def check_bias_relu_2d(kernel, *, seed: Optional[int] = None) -> Report:
    """Exercise 2a: the learner's ``bias_relu_2d_kernel`` on views with awkward shapes and strides."""
    return check(kernel, bias_relu_2d_cases(), title="bias_relu_2d_kernel", seed=seed)


# ----------------------------------------------------------------------------------------------
# Exercise 2b (chapter 2): row-wise max, looping over a long row in blocks
# ----------------------------------------------------------------------------------------------

ROW_MAX_BLOCK_N = 32


def row_max_ref(x: torch.Tensor) -> torch.Tensor:
    return x.double().amax(dim=1)


def launch_row_max(kernel, x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The given launcher of exercise 2b: one program per row, ``BLOCK_N = 32`` columns at a time;
    x's rows may be strided (``stride_xm``), its columns have unit stride."""
    _require_kernel(kernel)
    if x.stride(1) != 1 and x.shape[1] > 1:
        raise ValueError("x must have unit column stride in this exercise")
    M, N = x.shape
    if out is None:
        out = torch.empty(M, dtype=x.dtype, device=x.device)
    kernel[(M,)](x, out, N, x.stride(0), BLOCK_N=ROW_MAX_BLOCK_N)
    return out


def _row_max_case(name: str, spec: _ViewSpec, *, negative: bool, max_at: Optional[str] = None) -> Case:
    M, N = spec.shape

    def inputs(gen):
        values = torch.randn(spec.shape, generator=gen)
        if negative:  # every element < 0: a zero from `other=0.0` or a zeroed accumulator wins
            values = -(values.abs() + 0.25)
        if max_at is not None:  # plant each row's maximum at one end of the row
            col = 0 if max_at == "first" else N - 1
            values[:, col] = values.amax(dim=1) + 0.5
        return guarded(values.to(spec.dtype), spec.strides, offset=spec.offset, margin=(1, ROW_MAX_BLOCK_N + 1), device=kernel_device())

    def run(fn, x):
        out = poisoned_output((M,), spec.dtype, margin=(ROW_MAX_BLOCK_N,), device=x.view.device.type)
        before = x.buffer.clone()
        launch_row_max(fn, x.view, out.view)
        if x.view.is_cuda:
            torch.cuda.synchronize()
        changed = not torch.equal(x.buffer.nan_to_num(7.0), before.nan_to_num(7.0))
        return {"out": out.view, "outside": out.outside_written(), "inputs_changed": changed}

    return Case(
        name=name,
        inputs=inputs,
        run=run,
        expected=lambda x: row_max_ref(x.view),
        compare=lambda got, exp, x: compare_tensors(got, exp, rtol=0.0),  # a max is exact
    )


def row_max_cases() -> list[Case]:
    return [
        _row_max_case("7×100, mixed signs", _ViewSpec((7, 100), (100, 1)), negative=False),
        _row_max_case("5×77, all negative", _ViewSpec((5, 77), (77, 1)), negative=True),
        _row_max_case("4×1, N = 1, negative", _ViewSpec((4, 1), (1, 1)), negative=True),
        _row_max_case("3×32, exactly one block, negative", _ViewSpec((3, 32), (32, 1)), negative=True),
        _row_max_case("6×33, max in the last column", _ViewSpec((6, 33), (33, 1)), negative=True, max_at="last"),
        _row_max_case("6×95 strided rows (base[:, 3:98]), max first", _ViewSpec((6, 95), (130, 1), offset=3), negative=True, max_at="first"),
        _row_max_case("float16 3×300, all negative", _ViewSpec((3, 300), (300, 1), dtype=torch.float16), negative=True),
    ]


def check_row_max(kernel, *, seed: Optional[int] = None) -> Report:
    """Exercise 2b: the learner's ``row_max_kernel`` on rows that are long, odd, negative, strided."""
    return check(kernel, row_max_cases(), title="row_max_kernel", seed=seed)


EXERCISES = {
    "arithmetic_intensity": check_arithmetic_intensity,
    "bias_relu_2d": check_bias_relu_2d,
    "row_max": check_row_max,
}
