"""Exercise 1a (chapter 1): the arithmetic intensity of RMSNorm and of a matmul.

The learner writes ``arithmetic_intensity(op, shape, dtype) -> (flops, bytes, flops / bytes)``;
the check compares exact counts (and the ratio to 1e-9) on fixed and random shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import torch

from tritonforge.bench import costs
from tritonforge.exercise.core import Case, Report, Trial, Verdict, check, run_trial


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


def try_arithmetic_intensity(fn: Callable, op: str, shape: tuple, dtype: torch.dtype) -> Trial:
    """Exercise 1a's "try it": ``fn(op, shape, dtype)`` on one input, never raising; shows what
    it returned and whether that is right (the answer itself is the check's to show)."""
    inputs = (op, tuple(shape), dtype)
    case = _intensity_case("try", op, lambda gen: inputs[1], dtype)

    def show(got, expected):
        return [("yours:", repr(got))]

    return run_trial(fn, case, inputs, title=f"arithmetic_intensity{inputs!r}".replace("torch.", ""), show=show)
