r"""The mechanism of every exercise check: cases, verdicts, reports, and guarded tensors.

- :class:`Case` — one named test: a factory for fresh inputs, how to call the learner's function
  on them, the expected answer (a float64 PyTorch reference or an exact formula), and how to
  compare the two.
- :func:`check` — runs every case and returns a :class:`Report`. It never raises: an exception
  from the learner's code (the untouched stub raises ``NotImplementedError``, or does nothing) is
  a failed case with the exception's message, so a notebook cell always shows the whole table.
  Its inputs come from a fixed seed (:data:`DEFAULT_SEED`): the same code gets the same verdict
  on every run, and the cases are built so that each known mistake fails on every seed (the
  tests sweep seeds to prove it).
- :func:`run_trial` — one case on inputs the learner chose (a notebook's "try it" cell), guarded
  like the check's, returning a :class:`Trial` that shows the result and the verdict; it never
  raises either.
- :class:`Report` — ``.passed`` (every case passed), ``.rows``, a plain-text table
  (``str(report)``) and an HTML table (``_repr_html_``) for notebooks; ``assert_passed()`` for
  pytest.

Kernel exercises guard their buffers (:func:`guarded`, :func:`poisoned_output`): every output is
poisoned with NaN (an element the kernel never writes fails the case), and every tensor — inputs
and outputs — is a view into a larger buffer whose margins are NaN, wide enough to hold a whole
tile past each edge. A kernel that forgets a mask therefore reads NaN and writes into the margin
instead of into someone else's memory (which can crash the process in Triton's interpreter), and
:func:`compare_tensors` reports the writes it finds there. For a failed case the checks draw the
output (:func:`element_map`, attached by :func:`with_picture`): one character per element, right,
wrong or NaN, framed by the margin with a mark where the kernel wrote into it; a
:class:`Report` shows the pictures of its first two failed cases under its table.

The helpers at the end (:func:`require_kernel`, :func:`snapshot` / :func:`changed`, ...) are
shared by the chapters' launchers and cases.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import html
import math
from collections.abc import Callable, Sequence
from typing import Any, Optional

import torch

from tritonforge import hardware

# ----------------------------------------------------------------------------------------------
# The mechanism
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Verdict:
    """How one case went: passed or not, the largest error seen (if any), and a sentence."""

    passed: bool
    error: Optional[float] = None
    detail: str = ""
    picture: str = ""  # a few lines of text (e.g. :func:`element_map`), shown under the report when the case fails


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
    dtype: Optional[torch.dtype] = None  # the kernel's dtype, where it matters: bf16 cases are skipped on a GPU without bf16


@dataclasses.dataclass(frozen=True)
class Row:
    case: str
    passed: bool
    error: Optional[float]
    detail: str
    skipped: bool = False  # not run on this device (bf16 below sm_80): neither a pass nor a failure
    picture: str = ""  # the verdict's picture, shown under the table for a failed case


def describe_exception(exc: BaseException, limit: int = 240) -> str:
    """``Type: message`` on one line; for a Triton compilation error the location and the cause."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip(" ^\t")]  # not the caret under the source
    cause = exc.__cause__
    if lines and lines[0].startswith("at ") and cause is not None and len(lines) <= 2:
        lines.append(describe_exception(cause, limit))  # the compiler's cause, raised inside the call it points at
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
    stopped_early: bool = False
    """The check stopped at the first failed case (:func:`until_first_failure`): the later
    cases did not run, so the table is not the whole verdict."""

    @property
    def passed(self) -> bool:
        return any(not r.skipped for r in self.rows) and all(r.passed or r.skipped for r in self.rows)

    @property
    def n_passed(self) -> int:
        return sum(r.passed for r in self.rows)

    @property
    def n_skipped(self) -> int:
        return sum(r.skipped for r in self.rows)

    def summary(self) -> str:
        run = len(self.rows) - self.n_skipped
        skipped = f"; {self.n_skipped} skipped on this device" if self.n_skipped else ""
        if self.stopped_early:
            skipped += "; stopped at the first failure"
        if self.passed:
            return f"{self.title}: all {run} cases pass{skipped}"
        return f"{self.title}: {self.n_passed} of {run} cases pass (seed {self.seed}){skipped}"

    @staticmethod
    def _verdict_text(row: Row) -> str:
        return "skip" if row.skipped else ("pass" if row.passed else "FAIL")

    @staticmethod
    def _error_text(error: Optional[float]) -> str:
        if error is None:
            return "-"
        if math.isnan(error):
            return "nan"
        return f"{error:.2e}"

    def __str__(self) -> str:
        header = ("case", "verdict", "max error", "detail")
        body = [(r.case, self._verdict_text(r), self._error_text(r.error), r.detail) for r in self.rows]
        widths = [max(len(row[i]) for row in [header, *body]) for i in range(3)]
        lines = [self.summary(), ""]
        for row in [header, *body]:
            lines.append("  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3])
        for r in self.pictured():
            lines += ["", f"{r.case}:", r.picture]
        return "\n".join(lines)

    def pictured(self) -> list[Row]:
        """The failed rows that carry a picture (at most two: the first failures tell enough)."""
        return [r for r in self.rows if r.picture and not r.passed and not r.skipped][:2]

    def __repr__(self) -> str:
        return str(self)

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.passed else "#cf222e"
        cells = []
        for r in self.rows:
            mark = "<span style='color:#1a7f37'>✔ pass</span>" if r.passed else "<span style='color:#cf222e'>✘ fail</span>"
            if r.skipped:
                mark = "<span style='color:#6e7781'>– skipped</span>"
            cells.append(
                "<tr>"
                f"<td style='text-align:left'>{html.escape(r.case)}</td>"
                f"<td style='text-align:left'>{mark}</td>"
                f"<td style='text-align:right'><code>{self._error_text(r.error)}</code></td>"
                f"<td style='text-align:left'>{html.escape(r.detail)}</td>"
                "</tr>"
            )
        head = "".join(f"<th style='text-align:left'>{h}</th>" for h in ("case", "verdict", "max error", "detail"))
        pictures = "".join(f"<p><b>{html.escape(r.case)}</b></p><pre>{html.escape(r.picture)}</pre>" for r in self.pictured())
        return (
            f"<p style='color:{colour}'><b>{html.escape(self.summary())}</b></p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(cells)}</tbody></table>{pictures}"
        )

    def assert_passed(self) -> None:
        """Raise ``AssertionError`` with the table unless every case passed (for pytest)."""
        if not self.passed:
            raise AssertionError("\n" + str(self))


DEFAULT_SEED = 0
"""The seed of every check unless one is given: a check is deterministic, so a verdict never
changes from one run to the next (case ``i`` draws from ``seed + i``)."""


_FIRST_FAILURE_ENDS_A_CHECK = contextvars.ContextVar("first_failure_ends_a_check", default=False)


@contextlib.contextmanager
def until_first_failure():
    """Inside this block a :func:`check` stops at its first failed case. For a question that only
    needs the verdict's ``passed`` (the tests proving that a planted mistake fails on every seed):
    the answer is the same, without running the cases after the one that already decided it."""
    token = _FIRST_FAILURE_ENDS_A_CHECK.set(True)
    try:
        yield
    finally:
        _FIRST_FAILURE_ENDS_A_CHECK.reset(token)


def check(fn: Callable, cases: Sequence[Case], *, title: str, seed: Optional[int] = None) -> Report:
    """Run ``fn`` on every case; never raises (the learner's exceptions become failed rows).
    Inside :func:`until_first_failure` it stops after the first failed case."""
    if seed is None:
        seed = DEFAULT_SEED
    stop_at_failure = _FIRST_FAILURE_ENDS_A_CHECK.get()
    rows: list[Row] = []
    for index, case in enumerate(cases):
        if stop_at_failure and rows and not (rows[-1].passed or rows[-1].skipped):
            return Report(title=title, rows=rows, seed=seed, stopped_early=True)
        gen = torch.Generator().manual_seed(seed + index)
        unsupported = case_unsupported(case)
        if unsupported:
            rows.append(Row(case.name, False, None, unsupported, skipped=True))
            continue
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
        rows.append(Row(case.name, verdict.passed, verdict.error, verdict.detail, picture=verdict.picture))
    return Report(title=title, rows=rows, seed=seed)


@dataclasses.dataclass
class Trial:
    """One run of the learner's code on inputs they chose (a notebook's "try it" cell): what it
    produced next to the right answer (``shown``: label and text), and the check's verdict."""

    title: str
    verdict: Verdict
    shown: list[tuple[str, str]]

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    def __str__(self) -> str:
        head = f"{self.title}: " + ("right on this input" if self.passed else f"not right yet: {self.verdict.detail}")
        width = max((len(label) for label, _ in self.shown), default=0)
        body = [f"{label.ljust(width)}  {text}".replace("\n", "\n" + " " * (width + 2)) for label, text in self.shown]
        return "\n".join([head, *body])

    def __repr__(self) -> str:
        return str(self)

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))


def run_trial(fn: Callable, case: Case, inputs: Any, *, title: str, show: Callable[[Any, Any], list[tuple[str, str]]]) -> Trial:
    """Run one case on the given (already guarded) inputs; never raises.

    ``show(got, expected)`` picks what to print; ``got`` is None when the learner's code raised.
    """
    try:
        expected = case.expected(inputs)
    except Exception as exc:  # noqa: BLE001 - e.g. inputs of the wrong shape: say so
        return Trial(title, Verdict(False, None, "could not compute the expected answer: " + describe_exception(exc)), [])
    try:
        got = case.run(fn, inputs)
    except Exception as exc:  # noqa: BLE001 - the learner's code raised: a verdict, not a traceback
        return Trial(title, Verdict(False, None, describe_exception(exc)), [])
    try:
        verdict = case.compare(got, expected, inputs)
    except Exception as exc:  # noqa: BLE001
        verdict = Verdict(False, None, "could not compare the result: " + describe_exception(exc))
    try:
        shown = show(got, expected)
    except Exception as exc:  # noqa: BLE001
        shown = [("result", "could not show it: " + describe_exception(exc))]
    return Trial(title, verdict, shown)


@dataclasses.dataclass(frozen=True)
class CaseTemplate:
    """What every case of one exercise shares: how it runs the learner's function, the expected
    answer and the comparison. :meth:`case` makes one of the check's cases from its name and its
    inputs; :meth:`trial` runs the notebook's "try it" cell on inputs the learner chose."""

    run: Callable[[Callable, Any], Any]
    expected: Callable[[Any], Any]
    compare: Callable[[Any, Any, Any], Verdict]

    def case(self, name: str, inputs: Callable[[torch.Generator], Any], *, dtype: Optional[torch.dtype] = None) -> Case:
        return Case(name=name, inputs=inputs, run=self.run, expected=self.expected, compare=self.compare, dtype=dtype)

    def trial(self, fn: Callable, inputs: Any, *, title: str, show: Callable[[Any, Any], list[tuple[str, str]]]) -> Trial:
        """:func:`run_trial` of one case on ``inputs`` (already guarded); never raises."""
        return run_trial(fn, self.case("try", lambda gen: inputs), inputs, title=title, show=show)


def format_values(t: torch.Tensor, *, precision: int = 4) -> str:
    """A short tensor as plain numbers (NaN shows as ``nan``), for a trial's printout."""
    import numpy as np  # torch needs it here anyway; imported late to keep the import light

    return np.array2string(t.detach().double().cpu().numpy(), precision=precision, threshold=40, edgeitems=3, max_line_width=100)


# ----------------------------------------------------------------------------------------------
# Guarded tensors: NaN margins around every view a kernel touches
# ----------------------------------------------------------------------------------------------


def kernel_device() -> str:
    """Where exercise kernels run: a CUDA GPU when Triton compiles for it, else the CPU."""
    return "cuda" if torch.cuda.is_available() and not hardware.interpreting() else "cpu"


def half_dtype() -> torch.dtype:
    """The 16-bit dtype for a notebook's "try it" cell: bfloat16 where the device runs bf16
    kernels (sm_80 and newer, or the CPU's interpreter), float16 on a T4."""
    return torch.bfloat16 if hardware.supports_bf16(torch.device(kernel_device())) else torch.float16


def case_unsupported(case: Case) -> Optional[str]:
    """Why ``case`` is not run on this device (a bf16 case on a GPU without bf16), or None."""
    if case.dtype == torch.bfloat16 and not hardware.supports_bf16(torch.device(kernel_device())):
        cap = hardware.device_capability(torch.device(kernel_device())) or (0, 0)
        return f"skipped: the book runs no bf16 kernel on this GPU (sm_{cap[0]}{cap[1]}); the float16 cases cover 16-bit"
    return None


@dataclasses.dataclass
class Guarded:
    """A strided view into a NaN-filled buffer; ``outside_written()`` counts non-NaN margin cells."""

    view: torch.Tensor
    buffer: torch.Tensor  # 1-D, the whole allocation
    margin: tuple[int, ...] = ()  # NaN indices past each dimension's end that the buffer holds (:func:`element_map`'s frame)

    def outside_written(self) -> int:
        return written_outside(self.buffer, (self.view,))


def written_outside(buffer: torch.Tensor, views: Sequence[torch.Tensor]) -> int:
    """Elements of ``buffer`` written (not NaN) outside every one of ``views`` (one guarded output,
    or outputs that share one allocation, such as the two halves of one gradient)."""
    inside = torch.zeros(buffer.numel(), dtype=torch.bool, device=buffer.device)
    for view in views:
        idx = torch.zeros((), dtype=torch.long, device=buffer.device) + view.storage_offset()
        for size, stride in zip(view.shape, view.stride()):
            idx = (idx.unsqueeze(-1) + torch.arange(size, device=buffer.device) * stride).reshape(-1)
        inside[idx] = True
    return int((~torch.isnan(buffer[~inside])).sum())


def guarded(
    values: torch.Tensor,
    strides: Sequence[int],
    *,
    offset: int = 0,
    margin: Sequence[int] = (),
    device: str = "cpu",
    fill: float = float("nan"),
    min_size: int = 0,
) -> Guarded:
    """Place ``values`` in a view with the given strides and storage offset, inside a buffer
    large enough for indices up to ``shape[d] + margin[d]`` in every dimension (plus slack),
    filled with ``fill`` (NaN unless a case needs a value that a wrong read cannot hide, such as
    a large sentinel next to the rows of a maximum), of at least ``min_size`` elements."""
    shape = values.shape
    margin = list(margin) + [0] * (len(shape) - len(margin))
    reach = offset + sum((s + m) * abs(st) for s, m, st in zip(shape, margin, strides))
    size = max(reach + 2 * max(shape.numel(), 64), min_size)  # slack for kernels that index with the wrong strides
    buffer = torch.full((size,), fill, dtype=values.dtype, device=device)
    view = buffer.as_strided(tuple(shape), tuple(strides), offset)
    view.copy_(values.to(device))
    return Guarded(view, buffer, tuple(margin))


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


PICTURE_LEGEND = "· right   x wrong value   ? never written (NaN)   ! written past the output's edge (the frame)"
PLAIN_PICTURE_LEGEND = "· right   x wrong value   ? NaN"
"""The legend of a picture without a frame (a tensor that was not guarded, e.g. a gradient from PyTorch code)."""


def _map_columns(columns: int, limit: int) -> int:
    """Columns to a character: 1 while a row fits in ``limit`` characters, else the smallest power
    of two that makes it fit (a power of two, so a character never straddles two blocks of a
    power-of-two ``BLOCK_N``)."""
    per_char = 1
    while math.ceil(columns / per_char) > limit:
        per_char *= 2
    return per_char


def element_map(
    out: Guarded | torch.Tensor,
    expected: torch.Tensor,
    *,
    rtol: float,
    margin: Optional[Sequence[int]] = None,
    limit: tuple[int, int] = (24, 64),
    name: str = "output",
    legend: bool = True,
) -> str:
    """A text picture of an output after a kernel ran: ``·`` right, ``x`` wrong (by more than
    ``rtol * max(1, max|expected|)``, as :func:`compare_tensors` judges), ``?`` NaN (never
    written), and, for a :class:`Guarded` output, a frame of up to three of the ``margin`` rows
    below and three characters of its columns to the right (the padding a tile past the edge
    lands in; the guard's own margin unless one is given), ``!`` where the kernel wrote there.

    A 1-D output is one line (a strip); a 2-D one is a line per row, the first ``limit[0]`` rows
    (the frame below only when every row is drawn); more dimensions are drawn as rows of the
    last one. A row longer than ``limit[1]`` characters is folded: each character stands for a
    group of columns (a power of two of them), and shows the worst of the group (``?``, then
    ``x``, then ``·``; ``!`` if any of the frame's group was written). ``name`` heads the
    picture; ``legend=False`` leaves the legend off (for the first of several pictures)."""
    view = out.view if isinstance(out, Guarded) else out.detach()
    shape = list(view.shape)
    if margin is None:
        margin = out.margin if isinstance(out, Guarded) else ()
    margin = [*margin, 0, 0][: max(view.dim(), 2)]
    if view.dim() == 1:  # a strip: one row, no frame below
        rows2d = view.as_strided((1, shape[0]), (0, view.stride(0)), view.storage_offset()) if isinstance(out, Guarded) else view[None]
        margin = (0, margin[0])
    elif view.dim() == 2:
        rows2d = view
    else:  # rows of the last dimension (no frame: a guard of more dimensions is not drawn with one)
        rows2d = view.reshape(-1, shape[-1])
        out = rows2d
    exp = expected.detach().double().cpu().reshape(rows2d.shape)
    R, C = rows2d.shape
    framed = isinstance(out, Guarded)
    rows_in = min(R, limit[0])
    per_char = _map_columns(C, limit[1])
    frame_rows = min(margin[0], 3) if framed and rows_in == R else 0
    frame_cols = min(margin[1], 3 * per_char) if framed else 0
    rows, cols = rows_in + frame_rows, C + frame_cols
    if framed:
        buffer = out.buffer
        stride_r, stride_c = rows2d.stride()
        i = torch.arange(rows, device=buffer.device)[:, None]
        j = torch.arange(cols, device=buffer.device)[None, :]
        address = (rows2d.storage_offset() + i * stride_r + j * stride_c).clamp(0, buffer.numel() - 1)
        cells = buffer[address].detach().double().cpu()
    else:
        cells = rows2d[:rows_in].double().cpu()
    scale = max(1.0, float(exp.abs().max())) if exp.numel() else 1.0
    want = torch.full((rows, cols), float("nan"), dtype=torch.float64)
    want[:rows_in, :C] = exp[:rows_in]
    nan = torch.isnan(cells)
    wrong = (cells - want).abs() > rtol * scale
    inside = torch.zeros((rows, cols), dtype=torch.bool)
    inside[:R, :C] = True
    # 0 right, 1 wrong, 2 NaN (inside); 3 untouched, 4 written (the frame): the larger wins a group
    state = torch.where(inside, torch.where(nan, 2, torch.where(wrong, 1, 0)), torch.where(nan, 3, 4))

    def fold(part: torch.Tensor, fill: int) -> list[list[int]]:  # [rows, n] -> [rows, cdiv(n, per_char)], the worst of each group
        pad = -part.shape[1] % per_char
        part = torch.nn.functional.pad(part, (0, pad), value=fill)
        return part.reshape(rows, -1, per_char).amax(-1).tolist() if part.shape[1] else [[] for _ in range(rows)]

    marks = "·x? !"
    width = math.ceil(C / per_char)
    lines = []
    for r, (body, frame) in enumerate(zip(fold(state[:, :C], 0), fold(state[:, C:], 3))):
        line = "".join(marks[k] for k in body) + ("|" if frame and r < R else "") + "".join(marks[k] for k in frame)
        lines.append(line.rstrip())
        if r == R - 1 and frame_rows:
            lines.append("-" * width + ("+" if frame_cols else ""))
    while lines and not lines[-1]:  # frame rows below with nothing written in them
        lines.pop()
    notes = []
    if view.dim() > 2:
        notes.append(f"as {R} rows of {C}")
    if rows_in < R:
        notes.append(f"the first {rows_in} of {R} rows drawn")
    if per_char > 1:
        notes.append(f"{per_char} columns to a character")
    head = f"{name} {shape}" + (f" ({'; '.join(notes)})" if notes else "") + ":"
    return "\n".join([head, *lines, *([PICTURE_LEGEND if framed else PLAIN_PICTURE_LEGEND] if legend else [])])


def wrote_anything(*outputs: Guarded) -> bool:
    """True if a kernel wrote a value other than NaN anywhere in the outputs' buffers (inside
    the outputs or in their margins)."""
    return any(bool((~torch.isnan(g.buffer)).any()) for g in outputs)


def with_picture(verdict: Verdict, draw: Callable[[], str], *outputs: Guarded) -> Verdict:
    """A failed ``verdict`` with the picture ``draw()`` (e.g. :func:`element_map`), unless the
    kernel wrote nothing at all into ``outputs`` (a picture of NaN alone says no more than the
    detail's "never written"). A picture that cannot be drawn says why instead of hiding the verdict."""
    if verdict.passed or (outputs and not wrote_anything(*outputs)):
        return verdict
    try:
        picture = draw()
    except Exception as exc:  # noqa: BLE001 - a picture is an extra: never lose the verdict to it
        picture = f"(no picture: {describe_exception(exc)})"
    return dataclasses.replace(verdict, picture=picture)


def _is_kernel(fn: object) -> bool:
    return hasattr(fn, "__getitem__") and hasattr(fn, "run")


def require_kernel(fn: object) -> None:
    """Raise ``TypeError`` unless ``fn`` is a ``@triton.jit`` kernel (a launcher needs ``fn[grid]``)."""
    if not _is_kernel(fn):
        raise TypeError(f"expected a @triton.jit kernel, got {type(fn).__name__}: is the kernel decorated with @triton.jit?")


# ----------------------------------------------------------------------------------------------
# Shared by the chapters' launchers and cases
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ViewSpec:
    """How a case lays out its [M, N] input: strides and storage offset of a view."""

    shape: tuple[int, int]
    strides: tuple[int, int]
    offset: int = 0
    dtype: torch.dtype = torch.float32


def snapshot(*guards: Guarded) -> list[torch.Tensor]:
    """Copies of the guards' whole buffers, to compare with after the kernel ran (:func:`changed`)."""
    return [g.buffer.clone() for g in guards]


def changed(guards: Sequence[Guarded], before: Sequence[torch.Tensor]) -> bool:
    """True if a kernel wrote into any input buffer (NaN margins compare equal to themselves)."""
    return not all(torch.equal(g.buffer.nan_to_num(7.0), b.nan_to_num(7.0)) for g, b in zip(guards, before))


def synchronize(t: torch.Tensor) -> None:
    """Wait for the GPU when ``t`` lives there (a kernel's writes are then visible)."""
    if t.is_cuda:
        torch.cuda.synchronize()


def require_unit_column_stride(name: str, t: torch.Tensor) -> None:
    """Row-wise exercises: rows may be strided, columns may not."""
    if t.shape[1] > 1 and t.stride(1) != 1:
        raise ValueError(f"{name} must have unit column stride in this exercise (rows may be strided)")


def with_hint(verdict: Verdict, hint: str) -> Verdict:
    """Add a hint to a failed verdict whose values are wrong (not to one that never wrote them)."""
    if verdict.passed or not hint or "wrong values" not in verdict.detail:
        return verdict
    return dataclasses.replace(verdict, detail=f"{verdict.detail}. {hint}")


def quiet(run, *args):
    """Run a kernel with numpy's floating-point warnings off: an ``exp`` that overflows in the
    interpreter is the verdict's business (it names it), not a warning under the table."""
    import numpy as np  # the interpreter computes with numpy; imported late to keep imports light

    with np.errstate(all="ignore"):
        return run(*args)


# ---- one guarded run of a kernel, and the verdict on one output -------------------------------


def run_guarded(launch: Callable, kernel, inputs: Sequence[Guarded], outputs: Sequence[Guarded], *extra) -> tuple[Any, bool]:
    """Run ``launch(kernel, *input views, *extra, *output views)`` (the exercise's given launcher,
    :func:`quiet`) and wait for the device: ``(what launch returned, whether it changed an input)``."""
    before = snapshot(*inputs)
    result = quiet(launch, kernel, *(g.view for g in inputs), *extra, *(g.view for g in outputs))
    synchronize(outputs[0].view)
    return result, changed(inputs, before)


def run_one_output(launch: Callable, kernel, inputs: Sequence[Guarded], out: Guarded, *extra) -> dict:
    """:func:`run_guarded` of a kernel with one output: what :func:`compare_tensors` reads, and the
    output's guard under ``"guard"`` (its picture, :func:`compare_output`)."""
    _, inputs_changed = run_guarded(launch, kernel, inputs, (out,), *extra)
    return {"out": out.view, "outside": out.outside_written(), "inputs_changed": inputs_changed, "guard": out}


def compare_output(got: dict, expected: torch.Tensor, *, rtol: float, name: str = "out", hint: str = "") -> Verdict:
    """The verdict on one guarded output (:func:`run_one_output`): :func:`compare_tensors`, the
    ``hint`` where values are wrong (:func:`with_hint`), and, for a failed case, a picture of the
    output named ``name`` in its margin (:func:`element_map`)."""
    verdict = with_hint(compare_tensors(got, expected, rtol=rtol), hint)
    return with_picture(verdict, lambda: element_map(got["guard"], expected, rtol=rtol, name=name), got["guard"])


def show_values(got: dict, expected: torch.Tensor) -> list[tuple[str, str]]:
    """A trial's printout of a short output: yours, then the answer."""
    return [("yours:", format_values(got["out"])), ("expected:", format_values(expected))]


def show_first_rows(got: dict, expected: torch.Tensor) -> list[tuple[str, str]]:
    """A trial's printout of an output of long rows: the first row of yours, then of the answer."""
    return [("yours, row 0:", format_values(got["out"][0])), ("expected, row 0:", format_values(expected[0]))]


def matches(got: torch.Tensor, candidate: torch.Tensor, rtol: float) -> bool:
    """True if ``got`` equals ``candidate`` within the check's budget (to name a known mistake)."""
    got64, cand64 = got.detach().double().cpu(), candidate.double().cpu()
    if got64.shape != cand64.shape or not bool(torch.isfinite(got64).all()):
        return False
    scale = max(1.0, float(cand64.abs().max())) if cand64.numel() else 1.0
    return bool(((got64 - cand64).abs() <= rtol * scale).all())


def largest_difference(got: torch.Tensor, expected: torch.Tensor) -> str:
    diff = (got.detach().double().cpu() - expected.double().cpu()).abs()
    return "nan (some elements were never written, or are NaN)" if bool(diff.isnan().any()) else f"{float(diff.max()):.3g}"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# ---- [B, H, N, D] tensors (chapters 7 and 9) ----------------------------------------------------


def require_heads(**tensors: torch.Tensor) -> None:
    """Raise ``ValueError`` naming the tensor unless each is ``[B, H, N, D]`` with unit stride along ``D``."""
    for name, t in tensors.items():
        if t.dim() != 4 or t.stride(3) != 1:
            raise ValueError(f"{name} must be [B, H, N, D] with unit stride along D (any other strides)")


def guarded_heads(x: torch.Tensor, layout: str, *, pad: int, before: int = 0, fill: float = float("nan"), min_size: int = 0) -> Guarded:
    """``x [B, H, N, D]`` in a buffer of ``fill`` on the kernel device, ``pad`` rows past every
    head's last row and ``before`` rows before the first one (a row index −1 … −before stays
    inside the buffer), at least ``min_size`` elements. ``"bhnd"``: each head's rows contiguous;
    ``"bnhd"``: the storage of a ``[B, N, H, D]`` tensor (a fused projection's), seen as ``[B, H, N, D]``."""
    B, H, N, D = x.shape
    rows = N + pad
    if layout == "bnhd":
        strides, row = (rows * H * D, D, H * D, 1), H * D
    else:
        strides, row = (H * rows * D, rows * D, D, 1), D
    return guarded(x, strides, offset=before * row, margin=(0, 0, pad, 0), device=kernel_device(), fill=fill, min_size=min_size)


def head_rows_map(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]], *, rtol: float, name: str, width: int = 64) -> str:
    """A picture of ``[B, H, N, D]`` outputs: one line per (batch, head) of each ``(out, expected)``
    pair in turn, one character per row ``n`` (``·`` every element right, ``x`` some wrong by
    more than ``rtol · max(1, max|expected|)``, ``?`` some NaN), folded past ``width`` rows."""
    lines = []
    for out, expected in pairs:
        o, e = out.detach().double().cpu(), expected.double().cpu()
        tol = rtol * max(1.0, float(e.abs().max()))
        nan = o.isnan().any(dim=-1)
        wrong = ((o - e).abs() > tol).any(dim=-1)
        lines.append(torch.where(nan, float("nan"), torch.where(wrong, 1.0, 0.0)).reshape(-1, o.shape[2]))
    cells = torch.cat(lines)
    return element_map(cells, torch.zeros_like(cells), rtol=0.25, limit=(24, width), name=name)
