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
from tritonforge.kernel_utils import round_bf16_by_hand
from tritonforge.reference import rms_norm_ref

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


# ----------------------------------------------------------------------------------------------
# Shared by the row-wise kernel exercises of chapters 3 and 4
# ----------------------------------------------------------------------------------------------

_RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
"""Error budgets, as a fraction of ``max(1, max|expected|)``: a few units of float32 rounding;
one to two roundings of float16 (2⁻¹¹ each) and of bfloat16 (2⁻⁹ each, 2⁻⁸ where Triton's
interpreter truncates on store), with room to spare."""


def _snapshot(*guards: Guarded) -> list[torch.Tensor]:
    return [g.buffer.clone() for g in guards]


def _changed(guards: Sequence[Guarded], before: Sequence[torch.Tensor]) -> bool:
    """True if a kernel wrote into any input buffer (NaN margins compare equal to themselves)."""
    return not all(torch.equal(g.buffer.nan_to_num(7.0), b.nan_to_num(7.0)) for g, b in zip(guards, before))


def _sync(t: torch.Tensor) -> None:
    if t.is_cuda:
        torch.cuda.synchronize()


def _require_unit_column_stride(name: str, t: torch.Tensor) -> None:
    if t.shape[1] > 1 and t.stride(1) != 1:
        raise ValueError(f"{name} must have unit column stride in this exercise (rows may be strided)")


def _with_hint(verdict: Verdict, hint: str) -> Verdict:
    """Add a hint to a failed verdict whose values are wrong (not to one that never wrote them)."""
    if verdict.passed or not hint or "wrong values" not in verdict.detail:
        return verdict
    return Verdict(False, verdict.error, f"{verdict.detail}. {hint}")


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
    _require_kernel(kernel)
    _require_unit_column_stride("x", x)
    M, N = x.shape
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    kernel[(M,)](x, weight, bias, out, x.stride(0), out.stride(0), N, eps, BLOCK_N=triton.next_power_of_2(N))
    return out


def _layer_norm_case(name: str, spec: _ViewSpec, *, loc: float = 0.0, spread: float = 0.0, scale: float = 1.0, rtol: Optional[float] = None, hint: str = "") -> Case:
    """Rows of ``loc + spread * randn(row) + scale * randn`` (``spread``: a different mean per row)."""
    M, N = spec.shape
    block = triton.next_power_of_2(N)
    margin = (1, block + 1)
    rtol = _RTOL[spec.dtype] if rtol is None else rtol

    def inputs(gen):
        device = kernel_device()
        values = loc + spread * torch.randn(M, 1, generator=gen) + scale * torch.randn(M, N, generator=gen)
        x = guarded(values.to(spec.dtype), spec.strides, offset=spec.offset, margin=margin, device=device)
        weight = guarded((1.0 + 0.5 * torch.randn(N, generator=gen)).to(spec.dtype), (1,), margin=(block + 1,), device=device)
        bias = guarded(torch.randn(N, generator=gen).to(spec.dtype), (1,), margin=(block + 1,), device=device)
        return {"x": x, "weight": weight, "bias": bias}

    def run(fn, inp):
        x, weight, bias = inp["x"], inp["weight"], inp["bias"]
        out = poisoned_output((M, N), spec.dtype, margin=margin, device=x.view.device.type)
        before = _snapshot(x, weight, bias)
        launch_layer_norm_fwd(fn, x.view, weight.view, bias.view, out.view)
        _sync(out.view)
        return {"out": out.view, "outside": out.outside_written(), "inputs_changed": _changed((x, weight, bias), before)}

    return Case(
        name=name,
        inputs=inputs,
        run=run,
        expected=lambda inp: layer_norm_ref(inp["x"].view, inp["weight"].view, inp["bias"].view),
        compare=lambda got, exp, inp: _with_hint(compare_tensors(got, exp, rtol=rtol), hint),
    )


LAYER_NORM_CENTERED_HINT = (
    "If only this case fails, look at the variance: in float32, E[x²] − mean² cancels "
    "catastrophically when the mean is large; subtract the mean first and average (x − mean)²"
)


def layer_norm_fwd_cases() -> list[Case]:
    return [
        _layer_norm_case("float32 5×1000", _ViewSpec((5, 1000), (1000, 1))),
        _layer_norm_case("float32 4×37, strided rows (base[:, 5:42])", _ViewSpec((4, 37), (64, 1), offset=5)),
        _layer_norm_case("N = 1, 6×1 (variance 0: y = bias)", _ViewSpec((6, 1), (1, 1))),
        _layer_norm_case("single row 1×129", _ViewSpec((1, 129), (129, 1))),
        _layer_norm_case("tiny variance 4×300 (std 1e-3: eps matters)", _ViewSpec((4, 300), (300, 1)), scale=1e-3),
        _layer_norm_case(
            "large mean 6×1000 (≈ 1000 ± 1): centered variance",
            _ViewSpec((6, 1000), (1000, 1)),
            loc=1000.0,
            spread=100.0,
            # The mean of values near 1000 carries float32 rounding: a correct kernel (and
            # F.layer_norm) is off by up to ~5e-4 here; E[x²] − mean² is off by ~0.3.
            rtol=3e-4,
            hint=LAYER_NORM_CENTERED_HINT,
        ),
        _layer_norm_case("float16 7×300", _ViewSpec((7, 300), (300, 1), dtype=torch.float16)),
        _layer_norm_case("bfloat16 5×123, strided rows", _ViewSpec((5, 123), (200, 1), offset=11, dtype=torch.bfloat16)),
    ]


def check_layer_norm_fwd(kernel, *, seed: Optional[int] = None) -> Report:
    """Exercise 3a: the learner's ``layer_norm_fwd_kernel`` on odd, strided, large-mean and 16-bit rows."""
    return check(kernel, layer_norm_fwd_cases(), title="layer_norm_fwd_kernel", seed=seed)


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
    _require_kernel(kernel)
    for name, t in (("x", x), ("residual", residual)):
        _require_unit_column_stride(name, t)
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


def _compare_fused_add(got: dict, expected: dict, inputs: dict) -> Verdict:
    dtype = expected["h"].dtype
    h = compare_tensors({"out": got["h"], "outside": got["h_outside"], "inputs_changed": got["inputs_changed"]}, expected["h"], rtol=0.0)
    y = compare_tensors({"out": got["y"], "outside": got["y_outside"]}, expected["y64"], rtol=_RTOL[dtype])
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
    return Verdict(not problems, error, "; ".join(problems))


@dataclasses.dataclass(frozen=True)
class _RowsSpec:
    """Shape, dtype and the row strides of each input: ``(stride, storage offset)`` per tensor."""

    shape: tuple[int, int]
    dtype: torch.dtype = torch.float32
    x_layout: tuple[int, int] = (0, 0)  # (row stride, offset); row stride 0 means N
    other_layout: tuple[int, int] = (0, 0)


def _fused_add_case(name: str, spec: _RowsSpec, *, x_scale: float = 1.0, residual_scale: float = 1.0) -> Case:
    M, N = spec.shape
    block = triton.next_power_of_2(N)
    margin = (1, block + 1)

    def layout(which):
        stride, offset = which
        return (stride or N, 1), offset

    def inputs(gen):
        device = kernel_device()
        (xs, xo), (rs, ro) = layout(spec.x_layout), layout(spec.other_layout)
        x = guarded((x_scale * torch.randn(M, N, generator=gen)).to(spec.dtype), xs, offset=xo, margin=margin, device=device)
        residual = guarded((residual_scale * torch.randn(M, N, generator=gen)).to(spec.dtype), rs, offset=ro, margin=margin, device=device)
        weight = guarded((1.0 + 0.5 * torch.randn(N, generator=gen)).to(spec.dtype), (1,), margin=(block + 1,), device=device)
        return {"x": x, "residual": residual, "weight": weight}

    def run(fn, inp):
        x, residual, weight = inp["x"], inp["residual"], inp["weight"]
        device = x.view.device.type
        h = poisoned_output((M, N), spec.dtype, margin=margin, device=device)
        y = poisoned_output((M, N), spec.dtype, margin=(1, block + 3), device=device)  # a row stride unlike h's
        before = _snapshot(x, residual, weight)
        launch_fused_add_rms_norm(fn, x.view, residual.view, weight.view, h.view, y.view)
        _sync(y.view)
        return {
            "h": h.view,
            "y": y.view,
            "h_outside": h.outside_written(),
            "y_outside": y.outside_written(),
            "inputs_changed": _changed((x, residual, weight), before),
        }

    def expected(inp):
        args = (inp["x"].view, inp["residual"].view, inp["weight"].view)
        h, y_hf = fused_add_rms_norm_ref(*args)
        _, y64 = fused_add_rms_norm_ref(*args, upcast=True)
        return {"h": h, "y_hf": y_hf, "y64": y64}

    return Case(name=name, inputs=inputs, run=run, expected=expected, compare=_compare_fused_add)


def fused_add_rms_norm_cases() -> list[Case]:
    return [
        _fused_add_case("float32 4×1000", _RowsSpec((4, 1000))),
        _fused_add_case("float32 N = 1, 5×1", _RowsSpec((5, 1))),
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


def check_fused_add_rms_norm(kernel, *, seed: Optional[int] = None) -> Report:
    """Exercise 3b: the learner's ``fused_add_rms_norm_kernel``: ``h`` bit-exact, ``y`` in the Hugging Face order."""
    return check(kernel, fused_add_rms_norm_cases(), title="fused_add_rms_norm_kernel", seed=seed)


# ----------------------------------------------------------------------------------------------
# Exercise 4a (chapter 4): RMSNorm's dweight, deterministic, through per-program partial sums
# ----------------------------------------------------------------------------------------------


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
    _require_kernel(kernel)
    for name, t in (("dy", dy), ("x", x)):
        _require_unit_column_stride(name, t)
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
    verdict = compare_tensors(got, expected["partial"], rtol=_RTOL[torch.float32])
    if not verdict.passed:
        out64, exp64 = got["out"].detach().double().cpu(), expected["partial"].cpu()
        bad = ((out64 - exp64).abs() > _RTOL[torch.float32] * max(1.0, float(exp64.abs().max()))) | torch.isnan(out64)
        wrong = [int(p) for p in torch.nonzero(bad.any(dim=1)).reshape(-1)]
        if 0 < len(wrong) < programs:  # name the culprits when some rows are right
            shown = ", ".join(f"{p} ({_group_text(p, M, programs)})" for p in wrong[:3])
            more = f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""
            return Verdict(False, verdict.error, f"{verdict.detail}; wrong partial rows: {shown}{more}")
        return verdict
    total = compare_tensors({"out": got["dweight"]}, expected["dweight"], rtol=_RTOL[torch.float32])
    return total if not total.passed else Verdict(True, max(verdict.error, total.error), "")


@dataclasses.dataclass(frozen=True)
class _DweightSpec:
    shape: tuple[int, int]
    programs: int
    dtype: torch.dtype = torch.float32
    row_strides: tuple[int, int] = (0, 0)  # (dy, x); 0 means N


def _dweight_case(name: str, spec: _DweightSpec) -> Case:
    M, N = spec.shape
    block = triton.next_power_of_2(N)
    rows_per_program = triton.cdiv(M, spec.programs)
    extra_rows = spec.programs * rows_per_program + spec.programs  # room for a wrong row range
    margin = (extra_rows, block + 1)

    def inputs(gen):
        device = kernel_device()
        x = torch.randn(M, N, generator=gen).to(spec.dtype)
        rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)  # [M] float32, as the forward saves it
        dy = torch.randn(M, N, generator=gen).to(spec.dtype)
        dy_stride, x_stride = (s or N for s in spec.row_strides)
        return {
            "dy": guarded(dy, (dy_stride, 1), margin=margin, device=device),
            "x": guarded(x, (x_stride, 1), offset=3 if x_stride != N else 0, margin=margin, device=device),
            "rstd": guarded(rstd, (1,), margin=(extra_rows,), device=device),
            "programs": spec.programs,
        }

    def run(fn, inp):
        dy, x, rstd = inp["dy"], inp["x"], inp["rstd"]
        partial = poisoned_output((spec.programs, N), torch.float32, margin=(1, block + 1), device=x.view.device.type)
        before = _snapshot(dy, x, rstd)
        dweight, _ = launch_rms_norm_dweight(fn, dy.view, x.view, rstd.view, spec.programs, partial.view)
        _sync(dweight)
        return {"out": partial.view, "dweight": dweight, "outside": partial.outside_written(), "inputs_changed": _changed((dy, x, rstd), before)}

    def expected(inp):
        partial = rms_norm_dweight_partials_ref(inp["dy"].view, inp["x"].view, inp["rstd"].view, spec.programs)
        return {"partial": partial, "dweight": partial.sum(0)}

    return Case(name=name, inputs=inputs, run=run, expected=expected, compare=_compare_dweight)


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


EXERCISES = {
    "arithmetic_intensity": check_arithmetic_intensity,
    "bias_relu_2d": check_bias_relu_2d,
    "row_max": check_row_max,
    "layer_norm_fwd": check_layer_norm_fwd,
    "fused_add_rms_norm": check_fused_add_rms_norm,
    "rms_norm_dweight": check_rms_norm_dweight,
}
