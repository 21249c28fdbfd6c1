r"""What an op must move and compute: the numerators of every GB/s and TFLOP/s in the book.

Byte counts are the *minimum* traffic (each input read once, each output written once); FLOP
counts take every add, multiply, max, exp, divide and rsqrt on one element as one FLOP. The
roofline (:mod:`tritonforge.book.roofline`), the exercise checks and the chapters use these.

==========================  ======================================================================
copy (ceiling)              bytes = 2·n·elem (read n, write n)
matmul (ceiling)            FLOPs = 2·M·N·K
axpy                        bytes = 3·n·elem (read x, read y, write out); FLOPs = 2·n
rmsnorm forward             bytes = (2·M·N + N)·elem (read x, write y, read weight); FLOPs ≈ 4·M·N
rmsnorm forward + backward  bytes = (5·M·N + 3·N)·elem (forward: read x, write y, read weight;
                            backward: read x, read dy, write dx, read weight, write dweight);
                            FLOPs ≈ 13·M·N (4 forward + 9 backward per element)
==========================  ======================================================================

The *time floor* of an op is the least time it can take on a device: its bytes at the memory
bandwidth and its FLOPs at the arithmetic rate, whichever is longer,

.. math:: t_\text{floor} = \max\left(\frac{B}{\beta}, \frac{F}{\pi}\right)

(:func:`time_floor_us`). A measured time divided into it is the fraction of the roof reached.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Optional

import torch


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``: how results files name a dtype."""
    return str(dtype).replace("torch.", "")


def elem_size(dtype: torch.dtype) -> int:
    """Bytes per element of ``dtype``."""
    return torch.empty((), dtype=dtype).element_size()


@dataclasses.dataclass(frozen=True)
class Cost:
    """What one call must move and compute, and which ceiling its speed is compared with."""

    bytes: Optional[int]
    flops: Optional[int]
    formula: str
    ceiling: Optional[str]  # "copy", "matmul" (of the row's dtype), "matmul-<dtype>", or None


def copy_bytes(numel: int, elem: int) -> int:
    """A copy reads every element once and writes it once."""
    return 2 * numel * elem


def matmul_flops(m: int, n: int, k: int) -> int:
    """One multiply and one add per (row, column, inner index)."""
    return 2 * m * n * k


def axpy_bytes(numel: int, elem: int) -> int:
    """Read x, read y, write out: the least any ``alpha * x + y`` can move."""
    return 3 * numel * elem


def rmsnorm_forward_bytes(m: int, n: int, elem: int) -> int:
    """Read x [M, N] and write y [M, N] once each, plus read the weight [N] once."""
    return (2 * m * n + n) * elem


def rmsnorm_forward_backward_bytes(m: int, n: int, elem: int) -> int:
    """Forward (read x, write y, read w) plus backward (read x, dy, w; write dx, dw)."""
    return (5 * m * n + 3 * n) * elem


def copy_cost(numel: int, dtype: torch.dtype) -> Cost:
    return Cost(copy_bytes(numel, elem_size(dtype)), None, "bytes = 2·n·elem (read n + write n)", None)


def matmul_cost(m: int, n: int, k: int) -> Cost:
    return Cost(None, matmul_flops(m, n, k), "FLOPs = 2·M·N·K", None)


def axpy_cost(numel: int, dtype: torch.dtype) -> Cost:
    return Cost(
        axpy_bytes(numel, elem_size(dtype)),
        2 * numel,
        "bytes = 3·n·elem (read x, read y, write out); FLOPs = 2·n",
        "copy",
    )


def rmsnorm_forward_cost(m: int, n: int, dtype: torch.dtype) -> Cost:
    return Cost(
        rmsnorm_forward_bytes(m, n, elem_size(dtype)),
        4 * m * n,
        "bytes = (2·M·N + N)·elem (read x, write y, read weight); FLOPs ≈ 4·M·N",
        "copy",
    )


def rmsnorm_forward_backward_cost(m: int, n: int, dtype: torch.dtype) -> Cost:
    return Cost(
        rmsnorm_forward_backward_bytes(m, n, elem_size(dtype)),
        13 * m * n,
        "bytes = (5·M·N + 3·N)·elem (fwd: read x, write y, read w; bwd: read x, read dy, read w, write dx, write dw); FLOPs ≈ 13·M·N",
        "copy",
    )


def swiglu_forward_cost(m: int, f: int, dtype: torch.dtype) -> Cost:
    return Cost(3 * m * f * elem_size(dtype), 6 * m * f, "bytes = 3·M·F·elem (read gate, read up, write y); FLOPs ≈ 6·M·F", "copy")


def swiglu_forward_backward_cost(m: int, f: int, dtype: torch.dtype) -> Cost:
    return Cost(
        8 * m * f * elem_size(dtype),
        20 * m * f,
        "bytes = 8·M·F·elem (fwd: read gate, up, write y; bwd: read dy, gate, up, write dgate, dup); FLOPs ≈ 20·M·F",
        "copy",
    )


def swiglu_front_cost(m: int, d: int, f: int, dtype: torch.dtype, decode_rows: int = 64) -> Cost:
    """The fused MLP front: two [M, D] × [D, F] matmuls. Decode (M <= 64) is bound by reading both
    weights, so its fraction is of the copy bandwidth; prefill's of the matmul rate."""
    return Cost(
        (2 * d * f + m * d + m * f) * elem_size(dtype),
        2 * matmul_flops(m, f, d),
        "bytes = (2·D·F + M·D + M·F)·elem (both weights, x, y); FLOPs = 2·(2·M·D·F)",
        "copy" if m <= decode_rows else "matmul",
    )


def softmax_forward_cost(m: int, n: int, dtype: torch.dtype) -> Cost:
    return Cost(2 * m * n * elem_size(dtype), 5 * m * n, "bytes = 2·M·N·elem (read x, write y); FLOPs ≈ 5·M·N", "copy")


def softmax_forward_backward_cost(m: int, n: int, dtype: torch.dtype) -> Cost:
    return Cost(
        5 * m * n * elem_size(dtype),
        9 * m * n,
        "bytes = 5·M·N·elem (fwd: read x, write y; bwd: read dy, y, write dx); FLOPs ≈ 9·M·N",
        "copy",
    )


def attention_flops(b: int, h: int, nq: int, nk: int, d: int, causal: bool) -> int:
    """The two matmuls ``q kᵀ`` and ``P v``: ``2·2·Nq·Nk·D`` per (batch, head); causal counts only
    the (query, key) pairs a query sees (bottom-right: query i sees ``min(Nk, i + Nk - Nq + 1)``
    keys, at least 0)."""
    return 4 * b * h * (causal_pairs(nq, nk) if causal else nq * nk) * d


def causal_pairs(nq: int, nk: int) -> int:
    """``sum_i min(Nk, max(0, i + Nk - Nq + 1))`` in closed form: rows that see no key, rows the
    diagonal crosses (an arithmetic series), rows that see every key."""
    shift = nk - nq
    first = max(0, -shift)  # rows before this see no key
    full = min(nq, nk - shift)  # rows from here see all Nk keys
    diagonal = (first + shift + 1 + full + shift) * (full - first) // 2 if full > first else 0
    return diagonal + max(0, nq - full) * nk


def attention_prefill_cost(b: int, h: int, n: int, d: int, causal: bool, dtype: torch.dtype) -> Cost:
    """FlashAttention at prefill (``Nq = Nk = N``, as many KV heads as query heads): matmul-bound,
    so its fraction is of the matmul rate; bytes are the least any attention moves (q, k, v, O)."""
    return Cost(
        4 * b * h * n * d * elem_size(dtype),
        attention_flops(b, h, n, n, d, causal),
        "FLOPs = 4·B·H·N²·D (causal: 4·B·H·D·N(N+1)/2); bytes = 4·B·H·N·D·elem (read q, k, v; write O)",
        "matmul",
    )


def attention_forward_backward_cost(b: int, h: int, n: int, d: int, causal: bool, dtype: torch.dtype) -> Cost:
    """One training step of attention at prefill: the forward's two matmuls and the backward's five
    (``dv = Pᵀ dO``, ``dP = dO vᵀ``, ``S`` recomputed, ``dq = dS k``, ``dk = dSᵀ q``), 3.5 times the
    forward's FLOPs, the count FlashAttention's papers use (a kernel that recomputes more, as ours
    does for dq, is charged the same); bytes are the least a step moves: the forward reads q, k, v
    and writes O; the backward reads q, k, v, O, dO and writes dq, dk, dv."""
    return Cost(
        12 * b * h * n * d * elem_size(dtype),
        attention_flops(b, h, n, n, d, causal) * 7 // 2,
        "FLOPs = 3.5 x the forward's (2 matmuls forward, 5 backward); bytes = 12·B·H·N·D·elem (forward: q, k, v, O; "
        "backward: q, k, v, O, dO, dq, dk, dv)",
        "matmul",
    )


def attention_decode_cost(b: int, hq: int, hkv: int, nk: int, d: int, dtype: torch.dtype) -> Cost:
    """Decode (one query per head): bound by reading the KV cache once, a read-only stream. The
    fraction divides by the copy bandwidth (read + write), which a pure read can exceed."""
    return Cost(
        (2 * b * hkv * nk * d + 2 * b * hq * d) * elem_size(dtype),
        attention_flops(b, hq, 1, nk, d, False),
        "bytes = (2·B·Hkv·Nk·D + 2·B·Hq·D)·elem (read K and V once, read q, write O); FLOPs = 4·B·Hq·Nk·D",
        "copy",
    )


def time_floor_us(
    nbytes: Optional[float] = None,
    flops: Optional[float] = None,
    *,
    gbps: Optional[float] = None,
    tflops: Optional[float] = None,
) -> float:
    """The least time in µs an op can take: ``nbytes`` at ``gbps`` and ``flops`` at ``tflops``.

    ``nbytes / (gbps·1e9)`` and ``flops / (tflops·1e12)``, whichever is longer; give either or
    both (a count of None or 0 adds no term). A count without its rate is an error.

    Args:
        nbytes: bytes the op must move (a :class:`Cost`'s ``bytes``, a result row's ``"bytes"``).
        flops: floating-point operations it must perform.
        gbps: memory bandwidth in 1e9 bytes per second (a measured copy ceiling, or a datasheet's).
        tflops: arithmetic rate in 1e12 FLOP per second.
    """
    if nbytes is None and flops is None:
        raise ValueError("time_floor_us: give nbytes (with gbps) or flops (with tflops)")
    memory_us = nbytes / (_rate(gbps, "gbps", nbytes) * 1e9) * 1e6 if nbytes else 0.0
    math_us = flops / (_rate(tflops, "tflops", flops) * 1e12) * 1e6 if flops else 0.0
    return max(memory_us, math_us)


def _rate(rate: Optional[float], name: str, count: float) -> float:
    if rate is None or not rate > 0:
        raise ValueError(f"time_floor_us: a count of {count} needs a positive {name}, got {rate!r}")
    return rate


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """The measured roofs that every fraction divides by."""

    copy_gbps: float  # device-to-device copy, bytes read + written, 1e9 B/s
    matmul_tflops: dict  # {"bfloat16": 713.0, ...}: torch.matmul at 8192³, 1e12 FLOP/s

    def to_dict(self) -> dict:
        return {"copy_gbps": self.copy_gbps, "matmul_tflops": dict(self.matmul_tflops)}

    @property
    def half_dtype(self) -> str:
        """The 16-bit dtype whose matmul roof these ceilings hold: "bfloat16" where it was measured
        (sm_80 and newer), else "float16" (a T4 has no bf16; a quick run there measures float16
        only). A chapter reads ``matmul_tflops[ceilings.half_dtype]``, never a fixed key."""
        for name in ("bfloat16", "float16"):
            if self.matmul_tflops.get(name):
                return name
        raise ValueError(f"these ceilings measured no 16-bit matmul (only {sorted(self.matmul_tflops) or 'none'})")

    def ridge_point(self, dtype: Optional[str] = None) -> float:
        """FLOP/byte where the ``dtype`` matmul roof (default :attr:`half_dtype`) meets the copy roof."""
        return self.matmul_tflops[dtype or self.half_dtype] * 1e12 / (self.copy_gbps * 1e9)

    @classmethod
    def from_dict(cls, data: dict) -> Ceilings:
        copy_gbps = data.get("copy_gbps")
        return cls(float("nan") if copy_gbps is None else float(copy_gbps), dict(data.get("matmul_tflops") or {}))

    @classmethod
    def from_rows(cls, rows: Iterable[dict]) -> Ceilings:
        copy_gbps, matmul = float("nan"), {}
        for row in rows:
            if row["suite"] != "ceilings" or row["status"] != "ok":
                continue
            if row["op"] == "copy":
                copy_gbps = row["gbps"]
            elif row["op"] == "matmul":
                matmul[row["dtype"]] = row["tflops"]
        return cls(copy_gbps, matmul)


def add_throughput(row: dict, ceilings: Optional[Ceilings]) -> dict:
    """Fill a result row's gbps, tflops and fraction_of_ceiling from its us, bytes, flops and the ceilings."""
    if row["us"] is None:
        return row
    seconds = row["us"] * 1e-6
    if row["bytes"]:
        row["gbps"] = row["bytes"] / seconds / 1e9
    if row["flops"]:
        row["tflops"] = row["flops"] / seconds / 1e12
    if ceilings is None or row["ceiling"] is None:
        return row
    if row["ceiling"] == "copy" and row["gbps"] is not None:
        row["fraction_of_ceiling"] = row["gbps"] / ceilings.copy_gbps
    elif row["ceiling"].startswith("matmul") and row["tflops"] is not None:
        dtype = row["ceiling"].removeprefix("matmul").removeprefix("-") or row["dtype"]  # bare "matmul": the row's
        peak = ceilings.matmul_tflops.get(dtype)
        row["fraction_of_ceiling"] = row["tflops"] / peak if peak else None
    return row
