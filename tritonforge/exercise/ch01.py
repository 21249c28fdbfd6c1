"""Exercises 1a, 1b and 1c (chapter 1): the arithmetic intensity of RMSNorm and of a matmul; the
roofline's prediction from a datasheet; the HBM traffic of residual add + RMSNorm, eager and fused.

The learner writes ``arithmetic_intensity(op, shape, dtype) -> (flops, bytes, flops / bytes)``
(1a), ``roofline_prediction(device, kind, flops, nbytes, dtype) -> (microseconds, bound)`` (1b)
and ``fused_add_rms_norm_traffic(M, N, dtype) -> (eager_bytes, eager_kernels, fused_bytes)`` (1c);
the checks compare exact counts (ratios and times to 1e-9) on fixed and random shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tritonforge.bench import costs
from tritonforge.exercise.core import Case, CaseTemplate, Trial, Verdict

__all__ = [
    "ROOFLINE_KINDS",
    "arithmetic_intensity_cases",
    "arithmetic_intensity_ref",
    "eager_rms_norm_kernels",
    "fused_add_rms_norm_traffic_cases",
    "fused_add_rms_norm_traffic_ref",
    "roofline_prediction_cases",
    "roofline_prediction_ref",
    "try_arithmetic_intensity",
    "try_fused_add_rms_norm_traffic",
    "try_roofline_prediction",
]


def matmul_bytes(m: int, n: int, k: int, elem: int) -> int:
    """Read A [M, K] and B [K, N], write C [M, N], once each. (The harness times matmuls against
    their FLOPs only, so ``tritonforge.bench.costs`` has no byte count for them.)"""
    return (m * k + k * n + m * n) * elem


def arithmetic_intensity_ref(op: str, shape: tuple, dtype: torch.dtype) -> tuple[int, int, float]:
    """The reference answer to exercise 1a: ``(flops, bytes, flops / bytes)``.

    The counts are the benchmark harness's own (``tritonforge.bench.costs``): bytes = the least
    one fused pass moves, each input read once and each output written once; 1 FLOP per multiply
    or add.

    - ``rms_norm``, shape ``(M, N)``: bytes = (read x + write y + read weight) = (2MN + N)·elem;
      FLOPs = 4MN (square, add into the row sum, multiply by 1/rms, multiply by the weight; the
      O(M) per-row divide, +eps and rsqrt are not counted).
    - ``matmul``, shape ``(M, N, K)``, ``C[M, N] = A[M, K] @ B[K, N]``: bytes = (MK + KN + MN)·elem;
      FLOPs = 2MNK.
    """
    if op == "rms_norm":
        M, N = shape
        cost = costs.rmsnorm_forward_cost(M, N, dtype)
        flops, nbytes = cost.flops, cost.bytes
    elif op == "matmul":
        M, N, K = shape
        flops, nbytes = costs.matmul_flops(M, N, K), matmul_bytes(M, N, K, costs.elem_size(dtype))
    else:
        raise ValueError(f"op must be 'rms_norm' or 'matmul', got {op!r}")
    return flops, nbytes, flops / nbytes


def _number(value: float) -> str:
    """Counts exactly (``134,234,112``), ratios to 6 significant digits."""
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 2**53):
        return f"{int(value):,}"
    return f"{value:.6g}"


def _call(fn: Callable, inputs: tuple) -> Any:
    return fn(*inputs)


def _show_returned(got: Any, expected: Any) -> list[tuple[str, str]]:
    """What a trial prints: what the function returned (the answer itself is the check's to show)."""
    return [("yours:", repr(got))]


def _compare_numbers(returns: str, labels: tuple[str, ...], *, close: tuple[str, ...] = ()):
    """The comparison of a returned tuple of numbers (``returns``, as a verdict names it) called
    ``labels``: each exactly, but those in ``close`` (ratios) to a relative 1e-9; the error is
    the largest relative difference."""

    def compare(got: Any, expected: tuple, inputs: tuple) -> Verdict:
        if not isinstance(got, (tuple, list)) or len(got) != len(labels):
            return Verdict(False, None, f"return a tuple {returns}; got {type(got).__name__} {got!r:.60}")
        problems, errors = [], []
        for label, g, e in zip(labels, got, expected):
            if isinstance(g, bool) or not isinstance(g, (int, float)):
                problems.append(f"{label} should be a number, got {type(g).__name__}")
                continue
            rel = abs(g - e) / abs(e)
            errors.append(rel)
            if (label not in close and g != e) or (label in close and rel > 1e-9):
                problems.append(f"{label}: got {_number(g)}, expected {_number(e)}")
        return Verdict(not problems, max(errors) if errors else None, "; ".join(problems))

    return compare


INTENSITY = CaseTemplate(
    _call,
    lambda inp: arithmetic_intensity_ref(*inp),
    _compare_numbers("(flops, bytes, intensity)", ("flops", "bytes", "intensity"), close=("intensity",)),
)


def _intensity_case(name: str, op: str, shape_fn: Callable[[torch.Generator], tuple], dtype: torch.dtype) -> Case:
    return INTENSITY.case(name, lambda gen: (op, shape_fn(gen), dtype))


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


def try_arithmetic_intensity(fn: Callable, op: str, shape: tuple, dtype: torch.dtype) -> Trial:
    """Exercise 1a's "try it": ``fn(op, shape, dtype)`` on one input, never raising; shows what
    it returned and whether that is right (the answer itself is the check's to show)."""
    inputs = (op, tuple(shape), dtype)
    return INTENSITY.trial(fn, inputs, title=f"arithmetic_intensity{inputs!r}".replace("torch.", ""), show=_show_returned)


# ----------------------------------------------------------------------------------------------
# Exercise 1b (chapter 1): the roofline's prediction, from a datasheet
# ----------------------------------------------------------------------------------------------

ROOFLINE_KINDS = ("elementwise", "matmul")
"""How an op computes: ``"elementwise"`` (elementwise and reduction ops: a norm, an activation, a
softmax) upcasts to float32 and runs on the CUDA cores, under the plain fp32 roof whatever its
dtype; ``"matmul"`` (matmuls, attention) runs on the tensor cores of its dtype, and a float32
matmul (TF32 off) on the CUDA cores."""


def roofline_prediction_ref(device: str, kind: str, flops: int, nbytes: int, dtype: torch.dtype) -> tuple[float, str]:
    """The reference answer to exercise 1b: ``(microseconds, "memory-bound" | "compute-bound")``,
    the roofline's time floor on the datasheet of ``device`` (:data:`tritonforge.book.roofline.DEVICES`):
    ``max(bytes / bandwidth, FLOPs / rate)``, with the rate of :data:`ROOFLINE_KINDS`."""
    from tritonforge.book import roofline  # late: the book's module is not needed to import the checks

    if kind not in ROOFLINE_KINDS:
        raise ValueError(f"kind must be one of {ROOFLINE_KINDS}, got {kind!r}")
    prediction = roofline.predict_on(costs.Cost(nbytes, flops, "", None), device, dtype, matmul_like=kind == "matmul")
    return prediction.us, prediction.bound


def _compare_prediction(got: Any, expected: tuple, inputs: tuple) -> Verdict:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return Verdict(False, None, f"return a tuple (microseconds, bound); got {type(got).__name__} {got!r:.60}")
    us, bound = got
    exp_us, exp_bound = expected
    problems = []
    error = None
    if isinstance(us, bool) or not isinstance(us, (int, float)):
        problems.append(f"the time should be a number of microseconds, got {type(us).__name__}")
    else:
        error = abs(us - exp_us) / exp_us
        if error > 1e-9:
            ratio = us / exp_us
            why = ""
            for factor, unit in ((1e-6, "seconds"), (1e-3, "milliseconds"), (1e3, "nanoseconds")):
                if abs(ratio - factor) < 1e-6 * factor:
                    why = f" (that is the answer in {unit}: return microseconds)"
            problems.append(f"time: got {us:.6g} µs, expected {exp_us:.6g} µs{why}")
    if bound != exp_bound:
        problems.append(f"bound: got {bound!r}, expected {exp_bound!r}")
    return Verdict(not problems, error, "; ".join(problems))


PREDICTION = CaseTemplate(_call, lambda inp: roofline_prediction_ref(*inp), _compare_prediction)


def _prediction_case(name: str, device: str, kind: str, cost: costs.Cost, dtype: torch.dtype) -> Case:
    inputs = (device, kind, cost.flops, cost.bytes, dtype)
    return PREDICTION.case(name, lambda gen: inputs)


def _polynomial_cost(numel: int, degree: int) -> costs.Cost:
    """A made-up elementwise op heavy in arithmetic: a degree-``degree`` polynomial by Horner's rule
    (a multiply and an add per degree) on float32, reading x and writing y once."""
    return costs.Cost(2 * numel * 4, 2 * degree * numel, "bytes = 8·n; FLOPs = 2·degree·n", "copy")


def roofline_prediction_cases() -> list[Case]:
    """The four GPUs of the book's table, the ops of chapter 1, and the cases a shortcut gets
    wrong: a matmul that is memory-bound (decode), a float32 matmul (no tensor cores), attention
    that is compute-bound fused and memory-bound unfused, and an elementwise op that is
    compute-bound on one GPU (A100: fp32 ridge 9.6 FLOP/B) and memory-bound on the others."""
    from tritonforge.book import roofline

    bf16, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32
    return [
        _prediction_case("RMSNorm 32768×8192 bfloat16, H200", "H200", "elementwise", roofline.rmsnorm_cost(32768, 8192, bf16), bf16),
        _prediction_case("RMSNorm 32768×8192 float16, T4", "T4", "elementwise", roofline.rmsnorm_cost(32768, 8192, fp16), fp16),
        _prediction_case("SwiGLU 4096×14336 bfloat16, A100", "A100", "elementwise", roofline.swiglu_cost(4096, 14336, bf16), bf16),
        _prediction_case("softmax 131072×4096 float32, H100", "H100", "elementwise", roofline.softmax_cost(32 * 4096, 4096, fp32), fp32),
        _prediction_case("degree-40 polynomial on 2^24 float32 (10 FLOP/B), A100", "A100", "elementwise", _polynomial_cost(1 << 24, 40), fp32),
        _prediction_case("degree-40 polynomial on 2^24 float32 (10 FLOP/B), H200", "H200", "elementwise", _polynomial_cost(1 << 24, 40), fp32),
        _prediction_case("matmul 4096×14336×4096 bfloat16, H200", "H200", "matmul", roofline.matmul_cost(4096, 14336, 4096, bf16), bf16),
        _prediction_case("matmul 16×14336×4096 float16 (decode), T4", "T4", "matmul", roofline.matmul_cost(16, 14336, 4096, fp16), fp16),
        _prediction_case("matmul 4096³ float32 (no tensor cores), H100", "H100", "matmul", roofline.matmul_cost(4096, 4096, 4096, fp32), fp32),
        _prediction_case(
            "attention fused, 32 heads × 4096 × 128 bfloat16, H100", "H100", "matmul", roofline.attention_cost(32, 4096, 128, bf16), bf16
        ),
        _prediction_case(
            "attention unfused, 32 heads × 4096 × 128 bfloat16, H100",
            "H100",
            "matmul",
            roofline.attention_cost(32, 4096, 128, bf16, fused=False),
            bf16,
        ),
    ]


def try_roofline_prediction(fn: Callable, device: str, kind: str, flops: int, nbytes: int, dtype: torch.dtype) -> Trial:
    """Exercise 1b's "try it": ``fn(device, kind, flops, nbytes, dtype)`` on one input, never
    raising; shows what it returned and whether that is right."""
    inputs = (device, kind, flops, nbytes, dtype)
    return PREDICTION.trial(fn, inputs, title=f"roofline_prediction{inputs!r}".replace("torch.", ""), show=_show_returned)


# ----------------------------------------------------------------------------------------------
# Exercise 1c (chapter 1): the HBM traffic of residual add + RMSNorm, eager against fused
# ----------------------------------------------------------------------------------------------


def eager_rms_norm_kernels(m: int, n: int, dtype: torch.dtype) -> list[tuple[str, int, int]]:
    """The kernels of Hugging Face's eager RMSNorm on ``h`` [M, N] and what each moves,
    ``(name, bytes read, bytes written)``; float32 intermediates (4 bytes), the row statistics
    [M, 1] in float32, and no kernel for a ``.to()`` to the dtype a tensor already has::

        h32 = h.to(torch.float32)
        variance = h32.pow(2).mean(-1, keepdim=True)
        y = h32 * torch.rsqrt(variance + eps)
        out = weight * y.to(h.dtype)

    Per element this is chapter 1's table (36 bytes for bf16, 28 for float32) plus the [M] and
    [N] tensors the table leaves out.
    """
    e, mn, f32 = costs.elem_size(dtype), m * n, 4
    cast = dtype != torch.float32
    kernels = []
    if cast:
        kernels.append(("h.to(float32)", mn * e, mn * f32))
    kernels += [
        ("pow(2)", mn * f32, mn * f32),
        ("mean(-1)", mn * f32, m * f32),
        ("variance + eps", m * f32, m * f32),
        ("rsqrt", m * f32, m * f32),
        ("h32 * rsqrt", mn * f32 + m * f32, mn * f32),
    ]
    if cast:
        kernels.append(("y.to(dtype)", mn * f32, mn * e))
    kernels.append(("weight * y", n * e + mn * e, mn * e))
    return kernels


def fused_add_rms_norm_traffic_ref(m: int, n: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """The reference answer to exercise 1c: ``(eager_bytes, eager_kernels, fused_bytes)`` of
    ``h = x + residual; y = rms_norm(h) * weight`` on [M, N] activations, returning both ``y`` and
    ``h`` (the residual stream the next layer adds to).

    - eager: the residual add (read x and residual, write h: ``costs.axpy_bytes``, the same
      traffic as an axpy), then :func:`eager_rms_norm_kernels`;
    - fused, one kernel: read x, residual and weight, write h and y:
      ``costs.rmsnorm_forward_bytes`` + 2·M·N·elem (read residual, write h).
    """
    e = costs.elem_size(dtype)
    rms = eager_rms_norm_kernels(m, n, dtype)
    eager_bytes = costs.axpy_bytes(m * n, e) + sum(r + w for _, r, w in rms)
    fused_bytes = costs.rmsnorm_forward_bytes(m, n, e) + 2 * m * n * e
    return eager_bytes, 1 + len(rms), fused_bytes


TRAFFIC = CaseTemplate(
    _call,
    lambda inp: fused_add_rms_norm_traffic_ref(*inp),
    _compare_numbers("(eager_bytes, eager_kernels, fused_bytes)", ("eager bytes", "eager kernels", "fused bytes")),
)


def _traffic_case(name: str, shape_fn: Callable[[torch.Generator], tuple], dtype: torch.dtype) -> Case:
    return TRAFFIC.case(name, lambda gen: (*shape_fn(gen), dtype))


def fused_add_rms_norm_traffic_cases() -> list[Case]:
    """16-bit and float32 (where the casts launch nothing), Llama shapes, one token (where the
    weight's N elements matter), a narrow tall shape (where the [M] row statistics matter), and
    random shapes."""
    return [
        _traffic_case("4096×4096 bfloat16", lambda g: (4096, 4096), torch.bfloat16),
        _traffic_case("4096×4096 float32 (the casts launch nothing)", lambda g: (4096, 4096), torch.float32),
        _traffic_case("1×8192 float16 (one token)", lambda g: (1, 8192), torch.float16),
        _traffic_case("65536×4 bfloat16 (narrow rows: the row statistics matter)", lambda g: (65536, 4), torch.bfloat16),
        _traffic_case("7×5 float32", lambda g: (7, 5), torch.float32),
        _traffic_case("random M×N bfloat16", lambda g: (_randint(g, 1, 5000), _randint(g, 1, 9000)), torch.bfloat16),
        _traffic_case("random M×N float32", lambda g: (_randint(g, 1, 5000), _randint(g, 1, 9000)), torch.float32),
    ]


def try_fused_add_rms_norm_traffic(fn: Callable, m: int, n: int, dtype: torch.dtype) -> Trial:
    """Exercise 1c's "try it": ``fn(M, N, dtype)`` on one input, never raising; shows what it
    returned and whether that is right."""
    inputs = (m, n, dtype)
    return TRAFFIC.trial(fn, inputs, title=f"fused_add_rms_norm_traffic{inputs!r}".replace("torch.", ""), show=_show_returned)
