r"""Exercises 5a, 5b and 5c (chapter 5): GeGLU's forward with a tanh written from ``tl.exp`` that
cannot overflow; SwiGLU's backward, both gradients from one kernel that recomputes the sigmoid;
and a tiled matmul whose epilogue adds a bias and applies SiLU before the only store.

5a: ``out = gelu_tanh(gate) * up`` with
:math:`\operatorname{gelu\_tanh}(g) = \tfrac12 g\,\bigl(1 + \tanh(\sqrt{2/\pi}\,(g + 0.044715\,g^3))\bigr)`
and ``tanh`` built from ``exp(-2|z|)`` (at most 1: no overflow for any ``z``).

5b: with :math:`s = \sigma(g) = 1 / (1 + e^{-g})` and ``y = silu(g) * up``:
:math:`dg = dy \odot u \odot s\,(1 + g(1 - s))`, :math:`du = dy \odot g s`.

5c: ``out = silu(x @ w + b)``, ``x [M, K]``, ``w [K, N]`` (any strides), ``b [N]`` added to every
row, the product accumulated in float32 over ``BLOCK_K`` slices of ``K``, masked at every edge.

5a and 5b are elementwise over ``[M, N]`` rows with a row stride per tensor and unit column stride,
one program per row and per block of 32 columns; in two cases ``gate`` and ``up`` are the two
halves of one ``[M, 2N]`` tensor (the fused ``gate_up`` projection's output), and in 5b ``dgate``
and ``dup`` the two halves of its gradient. Every case of 5a and 5b holds gates of magnitude 15
to 30 or 90 to 120 in one case of its own, where ``exp`` of them overflows float32.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Optional

import torch

from tritonforge._triton import triton
from tritonforge.exercise.core import (
    Case,
    CaseTemplate,
    Guarded,
    Trial,
    Verdict,
    compare_tensors,
    dtype_name,
    element_map,
    guarded,
    kernel_device,
    largest_difference,
    matches,
    require_kernel,
    run_guarded,
    run_one_output,
    show_first_rows,
    written_outside,
)
from tritonforge.reference import TOLERANCE

__all__ = [
    "GLU_BLOCK_N",
    "MATMUL_BLOCK_K",
    "MATMUL_BLOCK_M",
    "MATMUL_BLOCK_N",
    "geglu_cases",
    "geglu_ref",
    "gelu_tanh_ref",
    "launch_geglu",
    "launch_matmul_bias_silu",
    "launch_swiglu_bwd",
    "matmul_bias_silu_cases",
    "matmul_bias_silu_ref",
    "swiglu_bwd_cases",
    "swiglu_grads_ref",
    "try_geglu",
    "try_matmul_bias_silu",
    "try_swiglu_bwd",
]

GLU_BLOCK_N = 32
"""The column block of exercises 5a and 5b, fixed by their launchers: a row of ``N`` columns is
``cdiv(N, 32)`` programs, the last one ragged unless 32 divides ``N``."""

GLU_MARGIN = (1, GLU_BLOCK_N + 1)  # NaN past each row: room for a whole block past the edge


def _place(values: Sequence[torch.Tensor], layout: Sequence[tuple[int, int]], *, halves: bool, margin=GLU_MARGIN) -> list[Guarded]:
    """Each ``[M, N]`` tensor of ``values`` in a NaN-padded view: with ``halves`` all of them side by
    side in the rows of one buffer (``whole[:, :N]``, ``whole[:, N:2N]``, …, row stride
    ``layout[0][0]``), else each in its own buffer with its ``(row stride, storage offset)``."""
    device = kernel_device()
    if not halves:
        return [guarded(v, (stride, 1), offset=offset, margin=margin, device=device) for v, (stride, offset) in zip(values, layout)]
    M, N = values[0].shape
    stride, offset = layout[0]
    whole = guarded(torch.cat(list(values), dim=1), (stride, 1), offset=offset, margin=margin, device=device)
    return [Guarded(whole.buffer.as_strided((M, N), (stride, 1), offset + i * N), whole.buffer) for i in range(len(values))]


def _poisoned(M: int, N: int, dtype: torch.dtype, count: int, *, halves: bool, extra: int) -> list[Guarded]:
    """``count`` NaN outputs ``[M, N]``: the halves of one ``[M, count·N]`` tensor, or each its own
    with a row stride ``N + extra + i`` (unlike the inputs' and unlike each other's)."""
    nan = torch.full((M, N), float("nan"), dtype=dtype)
    if halves:
        return _place([nan] * count, [(count * N + extra, 0)], halves=True)
    return _place([nan] * count, [(N + extra + i, 0) for i in range(count)], halves=False)


def _launch_glu_grid(M: int, N: int) -> tuple[int, int]:
    return (M, triton.cdiv(N, GLU_BLOCK_N))


def _nonfinite_where_large(out: torch.Tensor, expected: torch.Tensor, gate: torch.Tensor, large: float) -> Optional[int]:
    """How many outputs are NaN or inf where the answer is finite, if every one of them sits where
    ``|gate| >= large`` (an ``exp`` that overflowed); None if there are none, or some elsewhere."""
    bad = ~torch.isfinite(out.detach().double().cpu()) & torch.isfinite(expected.double().cpu())
    if not bad.any():
        return None
    where_large = gate.detach().double().cpu().abs() >= large
    return int(bad.sum()) if not (bad & ~where_large).any() else None


@dataclasses.dataclass(frozen=True)
class _GluSpec:
    """Shape and dtype of a case of 5a or 5b, where its tensors live, and what its gates are."""

    shape: tuple[int, int]
    dtype: torch.dtype = torch.float32
    halves: bool = False  # gate and up (and 5b's outputs) the two halves of one [M, 2N] tensor
    row_strides: tuple[int, ...] = ()  # one per input, 0 (or none given) means N; offsets follow
    gates: str = "normal"  # "normal": 2·randn; "grid": −4 … 4 along each row; "large": see `large`
    large: tuple[float, float] = (15.0, 30.0)  # magnitudes of the "large" gates, alternating in sign


def _gates(spec: _GluSpec, gen: torch.Generator) -> torch.Tensor:
    M, N = spec.shape
    if spec.gates == "grid":  # the whole curve, every row: the erf GELU and the tanh one differ most near ±2.7
        return torch.linspace(-4.0, 4.0, N)[None, :] + 0.01 * torch.randn(M, N, generator=gen)
    moderate = 2.0 * torch.randn(M, N, generator=gen)
    if spec.gates == "large":
        # Columns large and positive, large and negative, moderate, in turn along every row: both
        # tails in every case, and moderate gates between them, so a tanh or a sigmoid that
        # overflows leaves NaN at the large gates only, which tells it from a kernel that wrote nothing.
        lo, hi = spec.large
        large = lo + (hi - lo) * torch.rand(M, N, generator=gen)
        column = torch.arange(N) % 3
        return torch.where(column == 0, large, torch.where(column == 1, -large, moderate))
    return moderate


def _input_layout(spec: _GluSpec, count: int) -> list[tuple[int, int]]:
    """``(row stride, offset)`` of each input: ``2N + 3`` for the halves of one tensor, else the
    spec's row strides (offset 1 + 2i when a stride is wider than the row)."""
    M, N = spec.shape
    if spec.halves:
        return [(2 * N, 0)]
    strides = [*spec.row_strides, *([0] * count)][:count]
    return [((s or N), (1 + 2 * i) if s and s > N else 0) for i, s in enumerate(strides)]


# ----------------------------------------------------------------------------------------------
# Exercise 5a (chapter 5): GeGLU forward, tanh from exp without overflow
# ----------------------------------------------------------------------------------------------

GELU_TANH_LARGE = 11.0
"""``|gate|`` above which ``exp(2z)`` overflows float32 (``z = √(2/π)(g + 0.044715 g³)`` > 44.4
once ``g`` > 11.2): NaN or inf only there means a tanh that overflowed."""


def gelu_tanh_ref(gate: torch.Tensor) -> torch.Tensor:
    """GELU with the tanh approximation (GPT-2's, Gemma's ``gelu_pytorch_tanh``), in float64:
    ``0.5 * g * (1 + tanh(sqrt(2/pi) * (g + 0.044715 * g**3)))``."""
    return torch.nn.functional.gelu(gate.double(), approximate="tanh")


def geglu_ref(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``gelu_tanh(gate) * up`` in float64."""
    return gelu_tanh_ref(gate) * up.double()


def launch_geglu(kernel, gate: torch.Tensor, up: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The given launcher of exercise 5a: a grid of ``(M, cdiv(N, 32))`` programs, program
    ``(row, block)`` owning columns ``block·32 …`` of one row; ``gate``, ``up`` and ``out`` each with
    its own row stride (unit column stride). Returns ``out`` (a new ``[M, N]`` tensor in gate's dtype
    unless one is given)."""
    require_kernel(kernel)
    M, N = gate.shape
    if out is None:
        out = torch.empty((M, N), dtype=gate.dtype, device=gate.device)
    kernel[_launch_glu_grid(M, N)](
        gate, up, out,
        gate.stride(0), up.stride(0), out.stride(0),
        N,
        BLOCK_N=GLU_BLOCK_N,
    )  # fmt: skip
    return out


def _geglu_run(fn, inp: dict) -> dict:
    gate = inp["gate"].view
    M, N = gate.shape
    (out,) = _poisoned(M, N, gate.dtype, 1, halves=False, extra=GLU_BLOCK_N + 2)
    return run_one_output(launch_geglu, fn, (inp["gate"], inp["up"]), out)


def _geglu_expected(inp: dict) -> torch.Tensor:
    return geglu_ref(inp["gate"].view, inp["up"].view)


GEGLU_OVERFLOW_HINT = (
    "exp overflowed to inf there (float32's exp overflows above 88.7, so exp(2z) does once z > 44.4): "
    "build tanh from e = exp(−2|z|), which is at most 1: tanh(z) = sign(z)·(1 − e)/(1 + e)"
)
GEGLU_HINT = "out = 0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³)))·up, with g = gate, in float32 after the loads"


def _compare_geglu(got: dict, expected: torch.Tensor, inp: dict) -> Verdict:
    gate, up, dtype = inp["gate"].view, inp["up"].view, inp["gate"].view.dtype
    rtol = TOLERANCE[dtype]
    verdict = compare_tensors(got, expected, rtol=rtol)
    if verdict.passed:
        return verdict
    overflowed = _nonfinite_where_large(got["out"], expected, gate, GELU_TANH_LARGE)
    if overflowed is not None:
        detail = f"{overflowed} element(s) NaN or inf, all where |gate| > {GELU_TANH_LARGE:g}: {GEGLU_OVERFLOW_HINT}"
        if got.get("outside"):
            detail += f"; wrote {got['outside']} element(s) outside the output: a store needs a mask"
        return Verdict(False, verdict.error, detail)
    if "wrong values" not in verdict.detail:
        return verdict
    out = got["out"]
    if matches(out, torch.nn.functional.gelu(gate.double()) * up.double(), rtol):
        hint = "this is the exact GELU, 0.5·g·(1 + erf(g/√2)): the exercise asks for the tanh approximation"
    elif matches(out, gelu_tanh_ref(up) * gate.double(), rtol):
        hint = "this is gelu(up)·gate: the activation goes on gate, and up multiplies it"
    else:
        hint = GEGLU_HINT
    return Verdict(False, verdict.error, f"{verdict.detail}. {hint}")


GEGLU = CaseTemplate(_geglu_run, _geglu_expected, _compare_geglu)


def _geglu_case(name: str, spec: _GluSpec) -> Case:
    M, N = spec.shape

    def inputs(gen):
        gate = _gates(spec, gen)
        up = torch.randn(M, N, generator=gen)
        if spec.gates == "grid":  # |up| >= 1/2: the curve's small differences are not hidden by a small up
            up = up.sign() * (0.5 + up.abs())
        gate, up = gate.to(spec.dtype), up.to(spec.dtype)
        layout = _input_layout(spec, 2)
        placed = _place([gate, up], layout, halves=spec.halves)
        return {"gate": placed[0], "up": placed[1]}

    return GEGLU.case(name, inputs, dtype=spec.dtype)


def geglu_cases() -> list[Case]:
    return [
        _geglu_case("float32 4×100: three blocks of 32 and a ragged one of 4", _GluSpec((4, 100))),
        _geglu_case("gate and up the halves of one 6×154 tensor (gate_up[:, :77], [:, 77:])", _GluSpec((6, 77), halves=True)),
        _geglu_case("gate from −4 to 4 along each row, 3×257 (the tanh approximation, not erf)", _GluSpec((3, 257), gates="grid")),
        _geglu_case("large |gate| (±15 to 30) among moderate ones, 4×64: exp(2z) overflows", _GluSpec((4, 64), gates="large")),
        _geglu_case("N = 1, 5×1", _GluSpec((5, 1))),
        _geglu_case("single row 1×300", _GluSpec((1, 300))),
        _geglu_case("gate, up and out with three different row strides, 5×50", _GluSpec((5, 50), row_strides=(61, 57))),
        _geglu_case("float16 7×123, the halves of one tensor", _GluSpec((7, 123), torch.float16, halves=True)),
        _geglu_case("bfloat16 5×200", _GluSpec((5, 200), torch.bfloat16)),
    ]


def try_geglu(kernel, gate: torch.Tensor, up: torch.Tensor) -> Trial:
    """Exercise 5a's "try it": the kernel on copies of ``gate`` and ``up`` (same row strides) inside
    NaN-padded buffers, ``out`` poisoned with NaN; shows the first row of yours next to the float64
    answer, the largest difference, and the verdict."""
    gate_c, up_c = gate.detach().cpu(), up.detach().cpu()
    placed = _place([gate_c, up_c], [(gate.stride(0), 0), (up.stride(0), 0)], halves=False)
    inputs = {"gate": placed[0], "up": placed[1]}

    def show(got, expected):
        return [
            *show_first_rows(got, expected),
            ("max |out − gelu_tanh(gate)·up|:", largest_difference(got["out"], expected)),
        ]

    return GEGLU.trial(kernel, inputs, title=f"geglu_kernel on gate {list(gate.shape)} {dtype_name(gate.dtype)}", show=show)


# ----------------------------------------------------------------------------------------------
# Exercise 5b (chapter 5): SwiGLU backward, dgate and dup from one kernel
# ----------------------------------------------------------------------------------------------

SIGMOID_LARGE = 88.0
"""``|gate|`` above which ``exp(g)`` overflows float32 (``e^88.7`` is its largest value)."""


def swiglu_grads_ref(gate: torch.Tensor, up: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dgate, dup)`` of ``y = silu(gate) * up`` for the output gradient ``dy``, in float64:
    ``dgate = dy * up * s * (1 + g * (1 - s))``, ``dup = dy * g * s`` with ``s = sigmoid(g)``."""
    g, u, d = gate.double(), up.double(), dy.double()
    s = torch.sigmoid(g)
    return d * u * s * (1.0 + g * (1.0 - s)), d * g * s


def launch_swiglu_bwd(
    kernel,
    gate: torch.Tensor,
    up: torch.Tensor,
    dy: torch.Tensor,
    dgate: Optional[torch.Tensor] = None,
    dup: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The given launcher of exercise 5b: a grid of ``(M, cdiv(N, 32))`` programs, program
    ``(row, block)`` owning columns ``block·32 …`` of one row; all five tensors ``[M, N]``, each with
    its own row stride (unit column stride). Returns ``(dgate, dup)`` (new tensors in gate's dtype
    unless given)."""
    require_kernel(kernel)
    M, N = gate.shape
    if dgate is None:
        dgate = torch.empty((M, N), dtype=gate.dtype, device=gate.device)
    if dup is None:
        dup = torch.empty((M, N), dtype=gate.dtype, device=gate.device)
    kernel[_launch_glu_grid(M, N)](
        gate, up, dy, dgate, dup,
        gate.stride(0), up.stride(0), dy.stride(0), dgate.stride(0), dup.stride(0),
        N,
        BLOCK_N=GLU_BLOCK_N,
    )  # fmt: skip
    return dgate, dup


def _bwd_run(fn, inp: dict) -> dict:
    gate = inp["gate"].view
    M, N = gate.shape
    dgate, dup = _poisoned(M, N, gate.dtype, 2, halves=inp["halves"], extra=GLU_BLOCK_N + 2)
    _, inputs_changed = run_guarded(launch_swiglu_bwd, fn, (inp["gate"], inp["up"], inp["dy"]), (dgate, dup))
    if dgate.buffer is dup.buffer:  # side by side in one buffer: a write past either is outside both
        outside = {"both": written_outside(dup.buffer, (dgate.view, dup.view))}
    else:
        outside = {"dgate": dgate.outside_written(), "dup": dup.outside_written()}
    return {"dgate": dgate.view, "dup": dup.view, "outside": outside, "inputs_changed": inputs_changed}


def _bwd_expected(inp: dict) -> dict:
    dgate, dup = swiglu_grads_ref(inp["gate"].view, inp["up"].view, inp["dy"].view)
    return {"dgate": dgate, "dup": dup}


SWIGLU_OVERFLOW_HINT = (
    "exp overflowed to inf there (float32's exp overflows above 88.7, and exp(g)/(1 + exp(g)) is then inf/inf): "
    "write σ(g) = 1/(1 + exp(−g)), which only goes to 1/inf = 0"
)


def _dgate_hint(got: torch.Tensor, inp: dict, expected: dict, rtol: float) -> str:
    g, u, d = (inp[k].view.double().cpu() for k in ("gate", "up", "dy"))
    s = torch.sigmoid(g)
    if matches(got, expected["dup"], rtol):
        return "dgate holds dup's values: dgate and dup are swapped"
    known = [
        (d * u * s, "dgate = dy·up·σ(g) misses the factor (1 + g·(1 − σ(g))): d silu/dg = σ + g·σ·(1 − σ), the product rule"),
        (d * u * g * s, "silu(g) is the forward; dgate needs its derivative, σ(g)·(1 + g·(1 − σ(g)))"),
        (d * u * g * s * (1 - s), "the product rule's first term, σ(g), is missing: d(g·σ)/dg = σ + g·σ·(1 − σ)"),
        (d * s * (1 + g * (1 - s)), "up is missing from dgate: y = silu(g)·up, so dgate = dy·up·silu'(g)"),
    ]
    for candidate, hint in known:
        if matches(got, candidate, rtol):
            return hint
    return "dgate = dy·up·σ(g)·(1 + g·(1 − σ(g))), σ recomputed from gate in float32"


def _dup_hint(got: torch.Tensor, inp: dict, expected: dict, rtol: float) -> str:
    g, d = inp["gate"].view.double().cpu(), inp["dy"].view.double().cpu()
    if matches(got, expected["dgate"], rtol):
        return "dup holds dgate's values: dgate and dup are swapped"
    if matches(got, d * torch.sigmoid(g), rtol):
        return "dup = dy·σ(g) misses g: dup = dy·silu(g) = dy·g·σ(g)"
    return "dup = dy·silu(g) = dy·g·σ(g)"


def _compare_bwd(got: dict, expected: dict, inp: dict) -> Verdict:
    dtype = inp["gate"].view.dtype
    rtol = TOLERANCE[dtype]
    problems, errors = [], []
    for i, name in enumerate(("dgate", "dup")):
        verdict = compare_tensors(
            {"out": got[name], "outside": got["outside"].get(name, 0), "inputs_changed": got["inputs_changed"] and i == 0},
            expected[name],
            rtol=rtol,
        )
        if verdict.error is not None:
            errors.append(verdict.error)
        if verdict.passed:
            continue
        overflowed = _nonfinite_where_large(got[name], expected[name], inp["gate"].view, SIGMOID_LARGE)
        if overflowed is not None:
            problems.append(f"{name}: {overflowed} element(s) NaN or inf, all where |gate| > {SIGMOID_LARGE:g}: {SWIGLU_OVERFLOW_HINT}")
        elif "wrong values" in verdict.detail:
            hint = (_dgate_hint if name == "dgate" else _dup_hint)(got[name], inp, expected, rtol)
            problems.append(f"{name}: {verdict.detail}. {hint}")
        else:
            problems.append(f"{name}: {verdict.detail}")
    if got["outside"].get("both"):
        problems.append(f"wrote {got['outside']['both']} element(s) outside dgate and dup (side by side in one buffer): a store needs a mask")
    finite = [e for e in errors if not math.isnan(e)]
    error = max(finite) if finite else (float("nan") if errors else None)
    return Verdict(not problems, error, "; ".join(problems))


SWIGLU_BWD = CaseTemplate(_bwd_run, _bwd_expected, _compare_bwd)


def _bwd_case(name: str, spec: _GluSpec) -> Case:
    M, N = spec.shape

    def inputs(gen):
        gate = _gates(spec, gen).to(spec.dtype)
        up = torch.randn(M, N, generator=gen).to(spec.dtype)
        dy = torch.randn(M, N, generator=gen).to(spec.dtype)
        layout = _input_layout(spec, 3)
        if spec.halves:  # gate, up: one [M, 2N] tensor; dy: a tensor of its own
            gate_g, up_g = _place([gate, up], layout, halves=True)
            (dy_g,) = _place([dy], [(N, 0)], halves=False)
        else:
            gate_g, up_g, dy_g = _place([gate, up, dy], layout, halves=False)
        return {"gate": gate_g, "up": up_g, "dy": dy_g, "halves": spec.halves}

    return SWIGLU_BWD.case(name, inputs, dtype=spec.dtype)


def swiglu_bwd_cases() -> list[Case]:
    return [
        _bwd_case("float32 4×100: three blocks of 32 and a ragged one of 4", _GluSpec((4, 100))),
        _bwd_case(
            "gate and up the halves of one 6×154 tensor, dgate and dup side by side in one buffer",
            _GluSpec((6, 77), halves=True),
        ),
        _bwd_case(
            "large |gate| (±90 to 120) among moderate ones, 4×64: exp(g) overflows",
            _GluSpec((4, 64), gates="large", large=(90.0, 120.0)),
        ),
        _bwd_case("N = 1, 5×1", _GluSpec((5, 1))),
        _bwd_case("single row 1×300", _GluSpec((1, 300))),
        _bwd_case("five different row strides, 5×50", _GluSpec((5, 50), row_strides=(61, 57, 53))),
        _bwd_case("float16 7×123, the halves of one tensor", _GluSpec((7, 123), torch.float16, halves=True)),
        _bwd_case("bfloat16 5×200", _GluSpec((5, 200), torch.bfloat16)),
    ]


def try_swiglu_bwd(kernel, gate: torch.Tensor, up: torch.Tensor, dy: torch.Tensor) -> Trial:
    """Exercise 5b's "try it": the kernel on copies of ``gate``, ``up`` and ``dy`` (same row
    strides) inside NaN-padded buffers, ``dgate`` and ``dup`` poisoned with NaN; shows the largest
    difference of each from the float64 formula (autograd's answer), and the verdict."""
    tensors = [t.detach().cpu() for t in (gate, up, dy)]
    gate_g, up_g, dy_g = _place(tensors, [(t.stride(0), 0) for t in (gate, up, dy)], halves=False)
    inputs = {"gate": gate_g, "up": up_g, "dy": dy_g, "halves": False}

    def show(got, expected):
        return [
            ("max |dgate − formula|:", largest_difference(got["dgate"], expected["dgate"])),
            ("max |dup − formula|:", largest_difference(got["dup"], expected["dup"])),
        ]

    return SWIGLU_BWD.trial(kernel, inputs, title=f"swiglu_bwd_kernel on gate {list(gate.shape)} {dtype_name(gate.dtype)}", show=show)


# ----------------------------------------------------------------------------------------------
# Exercise 5c (chapter 5): a tiled matmul with a fused bias + SiLU epilogue
# ----------------------------------------------------------------------------------------------

MATMUL_BLOCK_M = 32
MATMUL_BLOCK_N = 16
MATMUL_BLOCK_K = 16
"""Exercise 5c's tiles, fixed by its launcher: ``[32, 16]`` tiles of ``out`` (not square, so block
sizes or program ids that belong to the other dimension show), ``K`` in slices of 16: most ``K``
of the check leave a ragged last slice."""

MATMUL_X_MARGIN = (MATMUL_BLOCK_M + 1, MATMUL_BLOCK_K + 1)
MATMUL_W_MARGIN = (MATMUL_BLOCK_K + 1, MATMUL_BLOCK_N + 1)
MATMUL_OUT_MARGIN = (MATMUL_BLOCK_M + 1, MATMUL_BLOCK_N + 1)

TF32_ERROR = 3e-3
"""A float32 case off by less than this (relative) but more than ``TOLERANCE[float32]`` is the
signature of TF32: ``tl.dot`` rounds float32 inputs to 10 mantissa bits on tensor cores (sm_80 and
newer) unless told ``input_precision="ieee"``."""


def matmul_bias_silu_ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``silu(x @ w + b)`` in float64, ``b`` added to every row."""
    return torch.nn.functional.silu(x.double() @ w.double() + b.double())


def launch_matmul_bias_silu(kernel, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The given launcher of exercise 5c: a 2-D grid over the ``[32, 16]`` tiles of ``out``,
    ``(cdiv(M, 32), cdiv(N, 16))``, ``BLOCK_K = 16``; every stride of ``x``, ``w`` and ``out`` is
    passed, in elements. Returns ``out`` (a new ``[M, N]`` tensor in x's dtype unless given)."""
    require_kernel(kernel)
    M, K = x.shape
    K_w, N = w.shape
    if K_w != K:
        raise ValueError(f"x is [M, K] = {list(x.shape)} but w is {list(w.shape)}: w must be [K, N]")
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(M, MATMUL_BLOCK_M), triton.cdiv(N, MATMUL_BLOCK_N))
    kernel[grid](
        x, w, b, out,
        M, N, K,
        x.stride(0), x.stride(1),
        w.stride(0), w.stride(1),
        out.stride(0), out.stride(1),
        BLOCK_M=MATMUL_BLOCK_M, BLOCK_N=MATMUL_BLOCK_N, BLOCK_K=MATMUL_BLOCK_K,
    )  # fmt: skip
    return out


def _room(shape, strides, offset: int, margin) -> int:
    """Elements a buffer needs so that every index of a tile past the edge, times any stride of the
    view or the length of either dimension (the row stride a kernel assumes when it takes a view
    for contiguous, or swaps the strides), stays inside it: such a kernel reads or writes wrong
    places in the padding, not outside the allocation."""
    widest = max(max(abs(s) for s in strides), max(shape) + max(margin))
    return offset + sum(s + m for s, m in zip(shape, margin)) * widest + 1


def _matmul_guard(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, x_layout, w_layout) -> dict:
    """x and w in views with the given ``(strides, offset)``, b in a buffer long enough to be read
    at row indices too, each inside a NaN margin of a whole tile."""
    device = kernel_device()
    (xs, xo), (ws, wo) = x_layout, w_layout
    M, K = x.shape
    N = w.shape[1]
    bias_len = max(M, N) + MATMUL_BLOCK_M + MATMUL_BLOCK_N  # room for a kernel that indexes b by row
    return {
        "x": guarded(x, xs, offset=xo, margin=MATMUL_X_MARGIN, device=device, min_size=_room(x.shape, xs, xo, MATMUL_X_MARGIN)),
        "w": guarded(w, ws, offset=wo, margin=MATMUL_W_MARGIN, device=device, min_size=_room(w.shape, ws, wo, MATMUL_W_MARGIN)),
        "b": guarded(b, (1,), margin=(bias_len,), device=device),
    }


def _matmul_run(fn, inp: dict) -> dict:
    x = inp["x"].view
    M, N = x.shape[0], inp["w"].view.shape[1]
    row_stride = N + MATMUL_OUT_MARGIN[1]  # wider than out's rows: a kernel must use the strides it is given
    nan = torch.full((M, N), float("nan"), dtype=x.dtype)
    out = guarded(nan, (row_stride, 1), margin=MATMUL_OUT_MARGIN, device=x.device.type, min_size=_room((M, N), (row_stride, 1), 0, MATMUL_OUT_MARGIN))
    return run_one_output(launch_matmul_bias_silu, fn, (inp["x"], inp["w"], inp["b"]), out)


def _matmul_expected(inp: dict) -> torch.Tensor:
    return matmul_bias_silu_ref(inp["x"].view, inp["w"].view, inp["b"].view)


MATMUL_HINT = (
    "out = silu(x @ w + b): accumulate x @ w over every BLOCK_K slice of K (the last one masked at k < K) "
    "in float32, add b[column] to every row of the tile, then silu(z) = z·sigmoid(z), and store once"
)


def _matmul_hint(got: dict, inp: dict, error: Optional[float], expected: torch.Tensor) -> str:
    x, w, b = (inp[k].view.double().cpu() for k in ("x", "w", "b"))
    dtype = inp["x"].view.dtype
    rtol = TOLERANCE[dtype]
    out = got["out"]
    K = x.shape[1]
    whole = K // MATMUL_BLOCK_K * MATMUL_BLOCK_K
    scale = max(1.0, float(expected.abs().max()))
    if matches(out, torch.nn.functional.silu(x @ w) + b, rtol):
        return "SiLU came before the bias: add b first, then apply silu to the sum"
    if whole < K and matches(out, torch.nn.functional.silu(x[:, :whole] @ w[:whole] + b), rtol):
        return f"the last, partial slice of K is missing (K = {K}): loop over cdiv(K, BLOCK_K) slices and mask k < K"
    rows = min(out.shape[0], b.numel())  # b[row] exists for these rows only
    if rows > 1 and matches(out[:rows], torch.nn.functional.silu(x[:rows] @ w + b[:rows, None]), rtol):
        return "the bias went down the rows (b[row]): b holds one value per column, b[cols][None, :], the same for every row"
    if dtype == torch.float32 and error is not None and error <= TF32_ERROR * scale:
        return (
            "off by a little: on a GPU with tensor cores (sm_80 and newer) tl.dot rounds float32 inputs to TF32 "
            'unless you pass input_precision="ieee"'
        )
    if dtype != torch.float32 and error is not None and error <= 10 * rtol * scale:
        return "off by a little, in 16-bit: keep the accumulator in float32 (tl.zeros(..., dtype=tl.float32)) and round once, at the store"
    return MATMUL_HINT


def _compare_matmul(got: dict, expected: torch.Tensor, inp: dict) -> Verdict:
    rtol = TOLERANCE[inp["x"].view.dtype]
    verdict = compare_tensors(got, expected, rtol=rtol)
    if verdict.passed:
        return verdict
    detail = verdict.detail
    if "wrong values" in detail:
        detail = f"{detail}. {_matmul_hint(got, inp, verdict.error, expected)}"
    picture = ""
    if bool((~torch.isnan(got["guard"].buffer)).any()):  # a picture of NaN alone says no more than "never written"
        picture = element_map(got["guard"], expected, rtol=rtol, margin=MATMUL_OUT_MARGIN)
    return Verdict(False, verdict.error, detail, picture=picture)


@dataclasses.dataclass(frozen=True)
class _MatmulSpec:
    """``out [M, N] = silu(x [M, K] @ w [K, N] + b)``; where x and w live; what the values are."""

    M: int
    N: int
    K: int
    dtype: torch.dtype = torch.float32
    x_layout: str = "contiguous"  # or "strided rows": x = base[:, 3 : 3 + K] of a [M, K + 7] base
    w_layout: str = "contiguous"  # or "linear": w = weight.t() of an nn.Linear weight [N, K] (strides (1, K))
    outlier: bool = False  # x[:, 0] ≈ 40 and w[0] ≈ 75, every other product small and positive


def _matmul_inputs(spec: _MatmulSpec, gen: torch.Generator) -> dict:
    M, N, K = spec.M, spec.N, spec.K
    if spec.outlier:
        # An outlier feature (LLMs have them): column 0 of x is large, and so is row 0 of w, so the
        # first slice of K puts ≈ 3000 in every accumulator. Every later slice adds less than 1:
        # less than half a float16 step at 3000 (2), so an accumulator kept in float16 drops each
        # of them, ≈ 14 in all, far above the budget (2e-3 × 3000 = 6); float32 keeps them.
        x = 0.1 + 0.1 * torch.rand(M, K, generator=gen)
        w = 0.1 + 0.1 * torch.rand(K, N, generator=gen)
        x[:, 0] = 40.0 + torch.rand(M, generator=gen)
        w[0, :] = 75.0 + torch.rand(N, generator=gen)
        b = 0.5 * torch.randn(N, generator=gen)
    else:
        x = torch.randn(M, K, generator=gen)
        w = torch.randn(K, N, generator=gen) / math.sqrt(K)  # x @ w of order 1: SiLU's curved part
        b = 0.5 + torch.randn(N, generator=gen)
    x, w, b = x.to(spec.dtype), w.to(spec.dtype), b.to(spec.dtype)
    x_layout = ((K + 7, 1), 3) if spec.x_layout == "strided rows" else ((K, 1), 0)
    w_layout = ((1, K), 0) if spec.w_layout == "linear" else ((N, 1), 0)
    return _matmul_guard(x, w, b, x_layout, w_layout)


MATMUL = CaseTemplate(_matmul_run, _matmul_expected, _compare_matmul)


def _matmul_case(name: str, spec: _MatmulSpec) -> Case:
    return MATMUL.case(name, lambda gen: _matmul_inputs(spec, gen), dtype=spec.dtype)


def matmul_bias_silu_cases() -> list[Case]:
    return [
        _matmul_case("float32 37×53, K = 29: every edge ragged", _MatmulSpec(37, 53, 29)),
        _matmul_case("K < BLOCK_K: 20×30, K = 7", _MatmulSpec(20, 30, 7)),
        _matmul_case("whole tiles: 64×32, K = 48", _MatmulSpec(64, 32, 48)),
        _matmul_case("decode, one row: 1×70, K = 100", _MatmulSpec(1, 70, 100)),
        _matmul_case("one output column: 45×1, K = 33", _MatmulSpec(45, 1, 33)),
        _matmul_case("w = weight.t() of an nn.Linear (strides (1, K)): 30×40, K = 50", _MatmulSpec(30, 40, 50, w_layout="linear")),
        _matmul_case("x with strided rows (base[:, 3:40]): 33×20, K = 37", _MatmulSpec(33, 20, 37, x_layout="strided rows")),
        _matmul_case("float16 25×40, K = 45", _MatmulSpec(25, 40, 45, torch.float16)),
        _matmul_case(
            "float16 20×24, K = 649, an outlier feature (x[:, 0] ≈ 40): accumulate in float32",
            _MatmulSpec(20, 24, 649, torch.float16, outlier=True),
        ),
    ]


def try_matmul_bias_silu(kernel, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Trial:
    """Exercise 5c's "try it": the kernel on copies of ``x``, ``w`` (same strides) and ``b`` inside
    NaN-padded buffers, ``out`` poisoned with NaN; shows the largest difference from the float64
    answer, a picture of which elements are right, wrong, never written or written past the edge,
    and the verdict."""
    x_c, w_c, b_c = x.detach().cpu(), w.detach().cpu(), b.detach().cpu()
    inputs = _matmul_guard(x_c, w_c, b_c, (x.stride(), 0), (w.stride(), 0))

    def show(got, expected):
        picture = element_map(got["guard"], expected, rtol=TOLERANCE[x.dtype], margin=MATMUL_OUT_MARGIN)
        return [("max |out − silu(x @ w + b)|:", largest_difference(got["out"], expected)), ("picture:", picture)]

    title = f"matmul_bias_silu_kernel on x {list(x.shape)} @ w {list(w.shape)} {dtype_name(x.dtype)}"
    return MATMUL.trial(kernel, inputs, title=title, show=show)
