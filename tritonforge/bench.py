r"""The benchmark harness: time a kernel beside its peers and say how close it gets to the roof.

Every number this module reports answers one question: *what fraction of what this GPU can do
did the op reach?* So each run

1. **measures the ceilings first, in the same process**: device-to-device copy bandwidth (the
   memory roof) and the ``torch.matmul`` rate at 8192³ (the compute roof);
2. **checks each implementation's output** against a float64 reference before timing it; a row
   whose output is wrong is marked ``"wrong"`` and not timed;
3. **times it** with ``triton.testing.do_bench`` (median; L2 flushed before every timed rep);
4. **divides an explicit cost formula by the time**: bytes for memory-bound ops (the minimum
   traffic: each input read once, each output written once), FLOPs for matmuls, and reports
   GB/s or TFLOP/s and the fraction of the measured ceiling. Never a bare "×faster".

Cost formulas (``elem`` = bytes per element of the dtype):

==========================  ======================================================================
copy (ceiling)              bytes = 2·n·elem (read n, write n)
matmul (ceiling)            FLOPs = 2·M·N·K
axpy                        bytes = 3·n·elem (read x, read y, write out); FLOPs = 2·n
rmsnorm forward             bytes = (2·M·N + N)·elem (read x, write y, read weight); FLOPs ≈ 4·M·N
rmsnorm forward + backward  bytes = (5·M·N + 3·N)·elem (forward: read x, write y, read weight;
                            backward: read x, read dy, write dx, read weight, write dweight);
                            FLOPs ≈ 13·M·N (4 forward + 9 backward per element)
==========================  ======================================================================

Run it on a GPU machine::

    python -m tritonforge.bench ceilings
    python -m tritonforge.bench rmsnorm --dtype bf16 --shapes 4096x4096,64x8192
    python -m tritonforge.bench all --out benchmarks/results/all-h200.json
    python -m tritonforge.bench show            # print recorded results (works on a CPU too)

Suites: ``ceilings``, ``axpy``, ``rmsnorm``, ``rmsnorm-bwd``, ``profile-eager-rmsnorm`` (the
CUDA kernels one eager HF-Llama RMSNorm launches), and ``all``. Results are JSON files under
``benchmarks/results/`` (schema in ``benchmarks/README.md``); chapters read them back with
:func:`load_results` or :func:`results_for_chapter` and plot them with
:func:`tritonforge.viz.plot_bench`. Without a CUDA GPU nothing is timed: the command says so and
points to the recorded results, because the CPU interpreter would time the interpreter.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import importlib.metadata
import inspect
import json
import math
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import torch

from tritonforge import _triton, runtime  # first: decides TRITON_INTERPRET before triton loads
from tritonforge.reference import rms_norm_ref

SCHEMA = "tritonforge.bench/1"
SUITES = ("ceilings", "axpy", "rmsnorm", "rmsnorm-bwd", "profile-eager-rmsnorm")
DEFAULT_RESULTS_DIR = "benchmarks/results"
REPO_ROOT = Path(__file__).resolve().parent.parent

RMSNORM_EPS = 1e-6
AXPY_ALPHA = 1.5
RMSNORM_SHAPES = ((4096, 512), (4096, 2048), (4096, 8192), (16384, 4096), (32768, 8192), (1, 8192), (64, 8192))
RMSNORM_QUICK_SHAPES = ((4096, 2048), (16384, 4096), (64, 8192))
AXPY_SIZES = ((2**20,), (2**24,), (2**26,), (2**28,))
AXPY_QUICK_SIZES = ((2**20,), (2**24,))
MATMUL_SIZE = 8192
COPY_BYTES, COPY_QUICK_BYTES = 2 * 2**30, 2**29  # 2 GiB (quick: 512 MiB), >> the 60 MB L2 of an H200
PROFILE_SHAPE = (4096, 4096)

# A row is "wrong" when max|out - ref| / max|ref| exceeds this (ref: float64). About 10x the
# rounding error of one store in the dtype, so a correct kernel passes and a wrong one does not.
TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}

DTYPE_ALIASES = {
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
}  # fmt: skip

ROW_FIELDS = (
    "suite",  # which suite produced the row
    "op",  # the operation: copy, matmul, axpy, rmsnorm, rmsnorm-fwd-bwd
    "impl",  # who computed it: tritonforge, hf-eager, F.rms_norm, torch.compile, liger, ...
    "dtype",  # "float32" | "float16" | "bfloat16"
    "shape",  # list of ints: [n], [M, N] or [M, N, K]
    "status",  # "ok" | "wrong" (output check failed, not timed) | "unavailable" | "error"
    "us",  # median time in microseconds (None unless status is "ok")
    "bytes",  # minimum bytes moved, from the formula
    "flops",  # floating-point operations, from the formula
    "formula",  # the formula(s) in words
    "gbps",  # bytes / time, in 1e9 bytes per second
    "tflops",  # flops / time, in 1e12 per second
    "ceiling",  # what the fraction divides by: "copy", "matmul" (row's dtype) or "matmul-<dtype>"
    "fraction_of_ceiling",  # gbps / copy_gbps, or tflops / matmul_tflops[dtype]
    "max_rel_err",  # max|out - ref| / max|ref| against float64
    "tolerance",  # the max_rel_err above which the row is "wrong"
    "note",  # why a row is not ok, or anything a reader must know
    "device_us",  # device time in µs from CUDA-graph replay (no host, no L2 flush); None if not measured
)

OPTIONAL_ROW_FIELDS = ("device_us",)
"""Fields added after results were first recorded: a file without them reads them as None."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def elem_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


# ----------------------------------------------------------------------------------------------
# Cost formulas: the numerators of every GB/s and TFLOP/s in the book
# ----------------------------------------------------------------------------------------------


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
        "bytes = (5·M·N + 3·N)·elem (fwd: read x, write y, read w; bwd: read x, read dy, "
        "read w, write dx, write dw); FLOPs ≈ 13·M·N",
        "copy",
    )


# ----------------------------------------------------------------------------------------------
# Ceilings and rows
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """The measured roofs that every fraction divides by."""

    copy_gbps: float  # device-to-device copy, bytes read + written, 1e9 B/s
    matmul_tflops: dict  # {"bfloat16": 713.0, ...}: torch.matmul at 8192³, 1e12 FLOP/s

    def to_dict(self) -> dict:
        return {"copy_gbps": self.copy_gbps, "matmul_tflops": dict(self.matmul_tflops)}

    @classmethod
    def from_dict(cls, data: dict) -> "Ceilings":
        copy_gbps = data.get("copy_gbps")
        return cls(float("nan") if copy_gbps is None else float(copy_gbps), dict(data.get("matmul_tflops") or {}))

    @classmethod
    def from_rows(cls, rows: Iterable[dict]) -> "Ceilings":
        copy_gbps, matmul = float("nan"), {}
        for row in rows:
            if row["suite"] != "ceilings" or row["status"] != "ok":
                continue
            if row["op"] == "copy":
                copy_gbps = row["gbps"]
            elif row["op"] == "matmul":
                matmul[row["dtype"]] = row["tflops"]
        return cls(copy_gbps, matmul)


def make_row(suite: str, op: str, impl: str, dtype: torch.dtype, shape: Sequence[int], **fields) -> dict:
    """A result row with every field of :data:`ROW_FIELDS` present (None where unknown)."""
    row = dict.fromkeys(ROW_FIELDS)
    row.update(suite=suite, op=op, impl=impl, dtype=dtype_name(dtype), shape=[int(s) for s in shape])
    row.update(fields)
    return row


def add_throughput(row: dict, ceilings: Optional[Ceilings]) -> dict:
    """Fill gbps, tflops and fraction_of_ceiling from us, bytes, flops and the ceilings."""
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


# ----------------------------------------------------------------------------------------------
# Timing and checking
# ----------------------------------------------------------------------------------------------

Timer = Callable[..., float]  # timer(fn, grad_to_none=None) -> median microseconds


def do_bench_timer(quick: bool = False) -> Timer:
    """A timer built on ``triton.testing.do_bench``: median of the timed reps, in microseconds.

    ``do_bench`` zeroes a 256 MB buffer before every timed rep (every version read, 2.x to 3.9;
    :func:`do_bench_flushes_l2` checks the installed one), so each rep starts with a cold L2
    (60 MB on an H200), even for shapes far smaller than the cache.
    ``warmup`` and ``rep`` are milliseconds of running, not counts.
    """
    warmup_ms, rep_ms = (10, 40) if quick else (25, 100)

    def time_us(fn: Callable[[], object], grad_to_none: Optional[list] = None) -> float:
        import triton.testing  # only here: do_bench needs a GPU driver and fails in the interpreter

        ms = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, grad_to_none=grad_to_none, return_mode="median")
        return float(ms) * 1e3

    time_us.settings = f"triton.testing.do_bench(warmup={warmup_ms} ms, rep={rep_ms} ms, return_mode='median')"
    return time_us


def graph_replay_us(fn: Callable[[], object], replays: int = 100, grad_to_none: Optional[list] = None) -> float:
    """Device time of ``fn`` in microseconds: captured once in a CUDA graph, then replayed.

    No Python runs between replays, so this is what the kernels cost on the GPU with the host
    out of the way (and without an L2 flush between replays). A few warm-up calls on a side
    stream first, as graph capture requires. ``grad_to_none``: tensors whose ``.grad`` is reset
    before every warm-up call and before the capture (as ``do_bench`` does), so a backward is
    captured writing fresh gradients, not accumulating into old ones. CUDA only.
    """

    def clear_grads() -> None:
        for tensor in grad_to_none or ():
            tensor.grad = None

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            clear_grads()
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    clear_grads()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / replays * 1e3
    finally:
        clear_grads()  # the captured gradients live in the graph's memory pool


def do_bench_flushes_l2() -> Optional[bool]:
    """Read the installed ``do_bench``: does it clear the L2 before each timed rep?

    Recorded in every results file, so a reader need not trust the docstring above.
    """
    try:
        import triton.testing

        source = inspect.getsource(triton.testing.do_bench)
    except Exception:  # noqa: BLE001 - no source (a frozen install): unknown
        return None
    return "clear_cache" in source or "cache.zero_()" in source


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``max|out - ref| / max|ref|``: the error relative to the reference's largest magnitude.

    Normwise rather than elementwise, so a value near zero does not make a correct result look
    wrong. NaN or inf anywhere gives ``inf``.
    """
    if out.shape != ref.shape:
        return math.inf
    diff = (out.detach().double() - ref.double()).abs().max().item()
    scale = ref.double().abs().max().item()
    err = diff / scale if scale > 0 else diff
    return err if math.isfinite(err) else math.inf


def measure(
    row: dict,
    *,
    run: Callable[[], object],
    check: Callable[[], float],
    timer: Timer,
    ceilings: Optional[Ceilings],
    grad_to_none: Optional[list] = None,
    device_timer: Optional[Callable[..., float]] = None,
) -> dict:
    """Check one implementation, then time it; fill ``row`` and return it.

    ``check()`` runs the implementation once and returns its error against float64. A failure
    there makes the row ``"error"``; an error above the dtype's tolerance makes it ``"wrong"``.
    Neither is timed: a fast wrong answer is not a result. ``device_timer`` (such as
    :func:`graph_replay_us`), when given, also fills ``device_us``; if it fails, the row keeps its
    timing and says why in ``note``.
    """
    tolerance = TOLERANCE.get(getattr(torch, row["dtype"]), 1e-4)
    row["tolerance"] = tolerance
    try:
        row["max_rel_err"] = check()
    except Exception as exc:  # noqa: BLE001 - one broken implementation must not stop the table
        row.update(status="error", note=describe_exception(exc))
        return row
    if not row["max_rel_err"] <= tolerance:
        row.update(status="wrong", note=f"max_rel_err {row['max_rel_err']:.3g} > tolerance {tolerance:g}: not timed")
        return row
    try:
        row["us"] = timer(run, grad_to_none=grad_to_none)
    except Exception as exc:  # noqa: BLE001
        row.update(status="error", note="timing failed: " + describe_exception(exc))
        return row
    row["status"] = "ok"
    if device_timer is not None:
        try:
            row["device_us"] = device_timer(run, grad_to_none=grad_to_none)
        except Exception as exc:  # noqa: BLE001 - e.g. an implementation that cannot be graph-captured
            row["note"] = "no device time (CUDA-graph capture failed): " + describe_exception(exc, limit=200)
    return add_throughput(row, ceilings)


def describe_exception(exc: BaseException, limit: int = 400) -> str:
    """One line for a row's note: the exception's type and message, whitespace folded."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def unavailable(row: dict, reason: str) -> dict:
    row.update(status="unavailable", note=reason)
    return row


def free_memory(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------
# The peers: what a user would otherwise run
# ----------------------------------------------------------------------------------------------


def hf_llama_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = RMSNORM_EPS) -> torch.Tensor:
    """``LlamaRMSNorm.forward`` from Hugging Face transformers, line for line: the eager peer.
    (The float64 oracle is :func:`tritonforge.reference.rms_norm_ref` with ``upcast=True``.)"""
    input_dtype = x.dtype
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + eps)
    return weight * hidden.to(input_dtype)


def functional_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = RMSNORM_EPS) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)


def eager_axpy(alpha: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return alpha * x + y


def compile_fresh(fn: Callable) -> Callable:
    """``torch.compile(fn, dynamic=False)`` after forgetting earlier compilations.

    Each row compiles for its own shape: without the reset, dynamo's recompile limit (8 per
    function) would silently send later shapes back to eager.
    """
    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False)


def load_tritonforge_rms_norm() -> tuple[Optional[Callable], Optional[str]]:
    """``tritonforge.ops.rmsnorm.rms_norm``, or None and the reason it cannot be imported."""
    try:
        from tritonforge.ops.rmsnorm import rms_norm
    except Exception as exc:  # noqa: BLE001 - a missing or broken module is a row, not a crash
        return None, f"tritonforge.ops.rmsnorm not importable ({describe_exception(exc)})"
    return rms_norm, None


def liger_version() -> Optional[str]:
    for name in ("liger-kernel", "liger_kernel", "liger-kernel-nightly"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def load_liger_rms_norm() -> tuple[Optional[Callable], Optional[str]]:
    """Liger-Kernel's RMSNorm as ``fn(x, weight, eps)``, or None and why not.

    Newer Liger versions take ``in_place`` (overwrite dy with dx in backward); we pass False so
    that repeated backward calls see the same dy. It changes no traffic.
    """
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except Exception as exc:  # noqa: BLE001
        return None, f"liger-kernel not importable ({describe_exception(exc)})"
    params = inspect.signature(LigerRMSNormFunction.forward).parameters
    extra = (0.0, "llama", False) if "in_place" in params else ()

    def liger_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return LigerRMSNormFunction.apply(x, weight, eps, *extra)

    return liger_rms_norm, None


def rmsnorm_implementations(impls: Optional[Sequence[str]] = None) -> dict:
    """name -> a maker that returns ``fn(x, weight, eps)`` for one row, or why it is unavailable.

    Makers rather than functions so that torch.compile compiles afresh for every row. Ours first.
    """
    ours, ours_missing = load_tritonforge_rms_norm()
    liger, liger_missing = load_liger_rms_norm()
    table = {
        "tritonforge": (lambda: ours) if ours else ours_missing,
        "hf-eager": lambda: hf_llama_rms_norm,
        "F.rms_norm": lambda: functional_rms_norm,
        "torch.compile": lambda: compile_fresh(hf_llama_rms_norm),
        "liger": (lambda: liger) if liger else liger_missing,
    }
    return {name: maker for name, maker in table.items() if impls is None or name in impls}


# ----------------------------------------------------------------------------------------------
# Suites
# ----------------------------------------------------------------------------------------------


def default_dtypes(device: str, quick: bool = False) -> list[torch.dtype]:
    """float32 and the GPU's 16-bit type (bfloat16 from sm_80, float16 before); quick: 16-bit."""
    half = torch.bfloat16 if runtime.supports_bf16(torch.device(device)) else torch.float16
    return [half] if quick else [torch.float32, half]


def run_ceilings(*, dtypes=None, quick: bool = False, device: str = "cuda", timer: Timer) -> list[dict]:
    """Copy bandwidth and matmul rate, measured the way the ops are: do_bench, median."""
    rows = [measure_copy(COPY_QUICK_BYTES if quick else COPY_BYTES, device=device, timer=timer)]
    if dtypes is None:
        dtypes = default_dtypes(device, quick=True) if quick else [torch.bfloat16, torch.float16, torch.float32]
    for dtype in dtypes:
        if dtype == torch.bfloat16 and not runtime.supports_bf16(torch.device(device)):
            continue
        rows.append(measure_matmul(dtype, MATMUL_SIZE, device=device, timer=timer))
        free_memory(device)
    return rows


def measure_copy(nbytes: int, *, device: str, timer: Timer) -> dict:
    numel = nbytes // 4
    src = torch.randn(numel, device=device)
    dst = torch.empty_like(src)
    row = make_row("ceilings", "copy", "torch.Tensor.copy_", torch.float32, [numel])
    cost = copy_cost(numel, torch.float32)
    row.update(bytes=cost.bytes, formula=cost.formula)
    row = measure_copy_into(row, src, dst, timer=timer, ceilings=None)
    src = dst = None  # free the 2 GiB before empty_cache
    free_memory(device)
    return row


def measure_copy_into(row: dict, src: torch.Tensor, dst: torch.Tensor, *, timer: Timer, ceilings) -> dict:
    """Check, then time, ``dst.copy_(src)`` into ``row``: the ceiling row and the forward suite's
    same-size copy are measured the same way. ``dst`` is poisoned before the check."""

    def check() -> float:
        dst.fill_(math.nan)
        dst.copy_(src)
        return 0.0 if torch.equal(dst, src) else math.inf

    return measure(row, run=lambda: dst.copy_(src), check=check, timer=timer, ceilings=ceilings)


def measure_matmul(dtype: torch.dtype, size: int, *, device: str, timer: Timer) -> dict:
    """``torch.matmul`` on fresh random data; fp32 with TF32 off (so it is real fp32)."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    row = make_row("ceilings", "matmul", "torch.matmul", dtype, [size, size, size])
    cost = matmul_cost(size, size, size)
    row.update(flops=cost.flops, formula=cost.formula)
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # no TF32: an fp32 ceiling must be fp32
    try:
        row = measure(
            row,
            run=lambda: torch.matmul(a, b),
            check=lambda: relative_error(torch.matmul(a, b), a.double() @ b.double()),
            timer=timer,
            ceilings=None,
        )
    finally:
        torch.set_float32_matmul_precision(previous)
    if dtype == torch.float32:
        row["note"] = "TF32 disabled (torch.set_float32_matmul_precision('highest'))"
    return row


def run_axpy(ceilings, *, dtypes=None, shapes=None, impls=None, quick=False, device="cuda", timer: Timer) -> list[dict]:
    """tritonforge.ops.fused_axpy vs eager ``alpha * x + y`` (two kernels) vs torch.compile of the same."""
    from tritonforge.ops.fused_axpy import axpy
    from tritonforge.reference import axpy_ref

    dtypes = dtypes or default_dtypes(device, quick)
    shapes = shapes or (AXPY_QUICK_SIZES if quick else AXPY_SIZES)
    rows = []
    for dtype in dtypes:
        for shape in shapes:
            numel = math.prod(shape)
            x = torch.randn(numel, device=device, dtype=dtype)
            y = torch.randn(numel, device=device, dtype=dtype)
            reference = axpy_ref(AXPY_ALPHA, x, y, upcast=True)
            cost = axpy_cost(numel, dtype)
            makers = {  # name -> a maker of fn(alpha, x, y); torch.compile compiles afresh per row
                "tritonforge": lambda: axpy,
                "eager": lambda: eager_axpy,
                "torch.compile": lambda: compile_fresh(eager_axpy),
            }
            for impl, make in makers.items():
                if impls is not None and impl not in impls:
                    continue
                row = make_row("axpy", "axpy", impl, dtype, [numel], bytes=cost.bytes, flops=cost.flops,
                               formula=cost.formula, ceiling=cost.ceiling)  # fmt: skip
                call = functools.partial(make(), AXPY_ALPHA, x, y)
                check = checked_ours("axpy", call, reference) if impl == "tritonforge" else checked(call, reference)
                rows.append(measure(row, run=call, check=check, timer=timer, ceilings=ceilings))
            del x, y, reference
            free_memory(device)
    return rows


def checked(fn: Callable[[], torch.Tensor], reference: torch.Tensor) -> Callable[[], float]:
    """A check that runs ``fn`` once and compares its output with the float64 reference."""
    return lambda: relative_error(fn(), reference)


def checked_ours(op: str, fn: Callable[[], torch.Tensor], reference: torch.Tensor) -> Callable[[], float]:
    """Like :func:`checked`, under strict routing: our row must time our kernel, not a fallback."""

    def check() -> float:
        with runtime.strict():
            out = fn()
        path = runtime.last_path(op)
        if path == "torch":
            raise RuntimeError(f"tritonforge.{op} was served by the PyTorch fallback, not the kernel")
        return relative_error(out, reference)

    return check


def rmsnorm_inputs(m: int, n: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh non-zero random x [M, N] and weight [N] (a weight of ones would hide a missing multiply)."""
    x = torch.randn(m, n, device=device, dtype=dtype)
    weight = (1.0 + 0.5 * torch.randn(n, device=device)).to(dtype)
    return x, weight


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return rms_norm_ref(x, weight, RMSNORM_EPS, upcast=True)


SAME_SIZE_COPY = "copy_ (same bytes)"
"""The forward suite's baseline row at each shape: ``torch.Tensor.copy_`` of x into a tensor of x's
shape, timed like the implementations. It moves what a fused forward must move (x in, y out; less
the weight, one row), so its fraction is the most a kernel can show at that size under the timer."""


def run_rmsnorm_forward(
    ceilings, *, dtypes=None, shapes=None, impls=None, quick=False, device="cuda", timer: Timer, device_timer=None
) -> list[dict]:
    """RMSNorm forward: tritonforge vs HF-eager, F.rms_norm, torch.compile(HF), Liger; and at each
    shape a copy of the same bytes (:data:`SAME_SIZE_COPY`), the ceiling at that size."""
    dtypes = dtypes or default_dtypes(device, quick)
    shapes = shapes or (RMSNORM_QUICK_SHAPES if quick else RMSNORM_SHAPES)
    implementations = rmsnorm_implementations(impls)
    rows = []
    for dtype in dtypes:
        for m, n in shapes:
            x, weight = rmsnorm_inputs(m, n, dtype, device)
            reference = rmsnorm_reference(x, weight)
            cost = rmsnorm_forward_cost(m, n, dtype)
            for impl, make in implementations.items():
                row = make_row("rmsnorm", "rmsnorm", impl, dtype, [m, n], bytes=cost.bytes, flops=cost.flops,
                               formula=cost.formula, ceiling=cost.ceiling)  # fmt: skip
                if isinstance(make, str):
                    rows.append(unavailable(row, make))
                    continue
                call = functools.partial(make(), x, weight, RMSNORM_EPS)
                check = checked_ours("rms_norm", call, reference) if impl == "tritonforge" else checked(call, reference)
                rows.append(measure(row, run=call, check=check, timer=timer, ceilings=ceilings, device_timer=device_timer))
            if impls is None or SAME_SIZE_COPY in impls:
                rows.append(measure_same_size_copy(x, timer=timer, ceilings=ceilings))
            del x, weight, reference
            free_memory(device)
    return rows


def measure_same_size_copy(x: torch.Tensor, *, timer: Timer, ceilings: Optional[Ceilings]) -> dict:
    """:data:`SAME_SIZE_COPY` for one input: copy ``x`` into a fresh tensor of its shape."""
    out = torch.empty_like(x)
    cost = copy_cost(x.numel(), x.dtype)
    row = make_row("rmsnorm", "copy", SAME_SIZE_COPY, x.dtype, list(x.shape),
                   bytes=cost.bytes, formula=cost.formula, ceiling="copy")  # fmt: skip
    # No device time: captured in a CUDA graph, a contiguous copy_ becomes a memcpy node, which ran
    # slower than the eager copy on the H200 (benchmarks/experiments, copy-same-size-probe).
    return measure_copy_into(row, x, out, timer=timer, ceilings=ceilings)


def run_rmsnorm_forward_backward(
    ceilings, *, dtypes=None, shapes=None, impls=None, quick=False, device="cuda", timer: Timer, device_timer=None
) -> list[dict]:
    """RMSNorm forward + backward (one training step of the layer): y = f(x, w); y.backward(dy)."""
    dtypes = dtypes or default_dtypes(device, quick)
    shapes = shapes or (RMSNORM_QUICK_SHAPES if quick else RMSNORM_SHAPES)
    implementations = rmsnorm_implementations(impls)
    rows = []
    for dtype in dtypes:
        for m, n in shapes:
            x, weight = rmsnorm_inputs(m, n, dtype, device)
            dy = torch.randn(m, n, device=device, dtype=dtype)
            references = rmsnorm_forward_backward_reference(x, weight, dy)
            x.requires_grad_(True)
            weight.requires_grad_(True)
            cost = rmsnorm_forward_backward_cost(m, n, dtype)
            for impl, make in implementations.items():
                row = make_row("rmsnorm-bwd", "rmsnorm-fwd-bwd", impl, dtype, [m, n], bytes=cost.bytes,
                               flops=cost.flops, formula=cost.formula, ceiling=cost.ceiling)  # fmt: skip
                if isinstance(make, str):
                    rows.append(unavailable(row, make))
                    continue
                step = functools.partial(forward_backward, make(), x, weight, dy)
                check = checked_gradients(step, x, weight, references, ours=impl == "tritonforge")
                rows.append(measure(row, run=step, check=check, timer=timer, ceilings=ceilings,
                                    grad_to_none=[x, weight], device_timer=device_timer))  # fmt: skip
                x.grad = weight.grad = None
            del x, weight, dy, references
            free_memory(device)
    return rows


def forward_backward(fn: Callable, x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    y = fn(x, weight, RMSNORM_EPS)
    y.backward(dy)
    return y


def rmsnorm_forward_backward_reference(x, weight, dy) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, dx, dweight) in float64 through autograd of the HF formula."""
    x64 = x.detach().double().requires_grad_(True)
    w64 = weight.detach().double().requires_grad_(True)
    y64 = rms_norm_ref(x64, w64, RMSNORM_EPS, upcast=True)
    y64.backward(dy.double())
    return y64.detach(), x64.grad, w64.grad


def checked_gradients(step, x, weight, references, *, ours: bool) -> Callable[[], float]:
    """Run one forward+backward; the row's error is the worst of y, dx and dweight."""
    y_ref, dx_ref, dw_ref = references

    def check() -> float:
        x.grad = weight.grad = None
        if ours:
            with runtime.strict():
                y = step()
            if runtime.last_path("rms_norm") == "torch":
                raise RuntimeError("tritonforge.ops.rmsnorm was served by the PyTorch fallback, not the kernel")
        else:
            y = step()
        if x.grad is None or weight.grad is None:
            raise RuntimeError("backward produced no gradient for x or weight")
        return max(relative_error(y, y_ref), relative_error(x.grad, dx_ref), relative_error(weight.grad, dw_ref))

    return check


# ----------------------------------------------------------------------------------------------
# Profile: which CUDA kernels one eager HF-Llama RMSNorm launches
# ----------------------------------------------------------------------------------------------

PROFILE_METHOD = (
    "torch.profiler (CPU + CUDA activities, record_shapes=True) around one call after a warm-up "
    "call. kernel_count = CUDA device events. hbm_passes = kernels launched by an aten op that "
    "has an M×N input (such a kernel reads the whole tensor from memory at least once, and the "
    "elementwise ones also write one); kernels not launched through an aten op (Triton kernels) "
    "are counted in kernel_count only."
)


def summarize_kernels(events: Iterable, tensor_numel: int) -> dict:
    """Count device kernels and estimate full-tensor memory passes from profiler events.

    ``events`` are ``torch.profiler`` FunctionEvents (or anything with ``name``,
    ``device_type``, ``kernels`` and ``input_shapes``).
    """
    events = list(events)
    device_types = (torch.autograd.DeviceType.CUDA,)
    kernels = [e.name for e in events if e.device_type in device_types]
    passes = mapped = 0
    for event in events:
        launched = getattr(event, "kernels", None) or []
        if event.device_type in device_types or not launched:
            continue
        mapped += len(launched)
        if any(shape_numel(shape) == tensor_numel for shape in (event.input_shapes or [])):
            passes += len(launched)
    return {
        "kernel_count": len(kernels),
        "kernels": kernels,
        "hbm_passes": passes if mapped else None,
        "kernels_mapped_to_aten_ops": mapped,
    }


def shape_numel(shape) -> Optional[int]:
    if isinstance(shape, (list, tuple)) and shape and all(isinstance(s, int) for s in shape):
        return math.prod(shape)
    return None


def profile_one_call(fn: Callable[[], object]) -> list:
    """The profiler events of one call of ``fn`` (CPU ops with their shapes, and CUDA kernels)."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    fn()  # warm-up: lazy initialisation and first-call allocations stay out of the trace
    if on_gpu:
        torch.cuda.synchronize()
    with profile(activities=activities, record_shapes=True) as prof:
        fn()
        if on_gpu:
            torch.cuda.synchronize()
    return list(prof.events())


def run_profile_eager_rmsnorm(
    ceilings, *, dtypes=None, shapes=None, impls=None, quick=False, device="cuda", timer=None
) -> list[dict]:
    """Kernels launched by one RMSNorm forward (bf16, 4096×4096): HF eager, F.rms_norm, ours.

    ``impls`` may add torch.compile or liger; ``dtypes`` and ``shapes`` replace the defaults
    (only the first of each is profiled).
    """
    dtype = (dtypes or default_dtypes(device, quick=True))[0]
    m, n = (shapes or [PROFILE_SHAPE])[0]
    x, weight = rmsnorm_inputs(m, n, dtype, device)
    rows = []
    for impl, make in rmsnorm_implementations(impls or ("tritonforge", "hf-eager", "F.rms_norm")).items():
        row = make_row("profile-eager-rmsnorm", "rmsnorm", impl, dtype, [m, n], method=PROFILE_METHOD)
        if isinstance(make, str):
            rows.append(unavailable(row, make))
            continue
        try:
            events = profile_one_call(functools.partial(make(), x, weight, RMSNORM_EPS))
        except Exception as exc:  # noqa: BLE001
            row.update(status="error", note=describe_exception(exc))
        else:
            row.update(status="ok", **summarize_kernels(events, m * n))
        rows.append(row)
    return rows


DEVICE_TIMED_SUITES = ("rmsnorm", "rmsnorm-bwd")
"""Suites whose rows also get ``device_us`` (CUDA-graph replay): small calls there are host-bound
under ``do_bench``, and the device time says what the kernels alone cost."""

SUITE_RUNNERS = {
    "axpy": run_axpy,
    "rmsnorm": run_rmsnorm_forward,
    "rmsnorm-bwd": run_rmsnorm_forward_backward,
    "profile-eager-rmsnorm": run_profile_eager_rmsnorm,
}


# ----------------------------------------------------------------------------------------------
# Results: run, save, load
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(repr=False)
class Results:
    """Rows plus the metadata that says where and when they were measured."""

    metadata: dict
    rows: list
    path: Optional[str] = None  # the file they came from (None when measured live)
    live: bool = False  # measured in this process, now

    @property
    def ceilings(self) -> Optional[Ceilings]:
        data = self.metadata.get("ceilings")
        return Ceilings.from_dict(data) if data else None

    def where(self, **conditions) -> list[dict]:
        """Rows whose fields equal the given values, e.g. ``where(dtype="bfloat16", status="ok")``."""
        return [r for r in self.rows if all(r.get(k) == v for k, v in conditions.items())]

    def provenance(self) -> str:
        """"live on <device> ..." or "recorded on <device>, <date> ...": the line every plot shows."""
        return describe_provenance(self.metadata, live=self.live)

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "metadata": self.metadata, "rows": self.rows}

    def table(self) -> str:
        return format_results(self)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:  # short on purpose: print(results) shows the tables
        return f"<Results: {len(self.rows)} rows, {self.provenance()}>"


def describe_provenance(metadata: dict, live: bool = False) -> str:
    device = metadata.get("device", "unknown device")
    versions = f"torch {metadata.get('torch', '?')}, triton {metadata.get('triton', '?')}"
    if live:
        return f"live on {device} ({versions})"
    return f"recorded on {device}, {str(metadata.get('date', '?'))[:10]} ({versions})"


def run_suite(
    suite: str,
    *,
    dtypes: Optional[Sequence[torch.dtype]] = None,
    shapes: Optional[Sequence[tuple]] = None,
    impls: Optional[Sequence[str]] = None,
    quick: bool = False,
    command: Optional[str] = None,
) -> Results:
    """Measure the ceilings, then ``suite`` (or every suite for ``"all"``), on the CUDA GPU.

    ``dtypes``, ``shapes`` and ``impls`` narrow the suite (None: its defaults); ``command`` is
    recorded in the metadata (default: this call, written out).
    """
    if not torch.cuda.is_available():
        raise RuntimeError(no_gpu_message())
    timer = do_bench_timer(quick)
    suites = list(SUITE_RUNNERS) if suite == "all" else [suite]
    ceiling_dtypes = dtypes if suite == "ceilings" else None
    rows = run_ceilings(dtypes=ceiling_dtypes, quick=quick, timer=timer)
    ceilings = Ceilings.from_rows(rows)
    for name in suites:
        if name == "ceilings":
            continue
        extra = {"device_timer": graph_replay_us} if name in DEVICE_TIMED_SUITES else {}
        rows += SUITE_RUNNERS[name](ceilings, dtypes=dtypes, shapes=shapes, impls=impls, quick=quick, timer=timer, **extra)
    command = command or f"tritonforge.bench.run_suite({suite!r}, quick={quick})"
    metadata = collect_metadata(suite, ceilings, timer, quick=quick, command=command)
    return Results(metadata=metadata, rows=rows, live=True)


def collect_metadata(suite: str, ceilings: Ceilings, timer: Timer, *, quick: bool, command: str) -> dict:
    major, minor = torch.cuda.get_device_capability()
    commit, dirty = git_state()
    return {
        "suite": suite,
        "suites": list(SUITES) if suite == "all" else (["ceilings"] if suite == "ceilings" else ["ceilings", suite]),
        "device": torch.cuda.get_device_name(),
        "compute_capability": f"{major}.{minor}",
        "torch": torch.__version__,
        "triton": getattr(_triton.triton, "__version__", None),
        "liger": liger_version(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "git_commit": commit,
        "git_dirty": dirty,
        "quick": quick,
        "timer": getattr(timer, "settings", None),
        "l2_flushed_before_each_rep": do_bench_flushes_l2(),  # read from the installed do_bench
        "error_metric": "max_rel_err = max|out - ref| / max|ref|, ref computed in float64",
        "tolerances": {dtype_name(d): t for d, t in TOLERANCE.items()},
        "ceilings": ceilings.to_dict(),
    }


GIT_COMMIT_ENV = "TRITONFORGE_GIT_COMMIT"
"""Set it to the full commit hash when the checkout's own git metadata cannot be trusted: a copy
of a working tree sent to a GPU machine may carry an older ``.git`` than the files it holds.
The results then record that commit, with ``git_dirty`` null (unknown)."""


def git_state() -> tuple[Optional[str], Optional[bool]]:
    """(commit, has uncommitted changes) of the checkout holding this file; (None, None) if unknown.

    A full hash in ``$TRITONFORGE_GIT_COMMIT`` takes precedence (see :data:`GIT_COMMIT_ENV`)."""
    declared = os.environ.get(GIT_COMMIT_ENV, "").strip().lower()
    if re.fullmatch(r"[0-9a-f]{40}", declared):
        return declared, None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None, None
    sha = commit.stdout.strip()
    if commit.returncode != 0 or not re.fullmatch(r"[0-9a-f]{40}", sha):
        return None, None
    return sha, bool(status.stdout.strip()) if status.returncode == 0 else None


def device_slug(name: str) -> str:
    """"NVIDIA H200" -> "nvidia-h200": a file-name-safe device name."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def default_results_path(metadata: dict, directory: str = DEFAULT_RESULTS_DIR) -> Path:
    """``<directory>/<suite>-<device-slug>-<YYYY-MM-DD>.json``."""
    day = str(metadata["date"])[:10]
    return Path(directory) / f"{metadata['suite']}-{device_slug(metadata['device'])}-{day}.json"


def json_safe(value):
    """JSON has no inf or NaN: write them as null (a row's note says why it is not ok)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_results(results: Results, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(json_safe(results.to_dict()), indent=1, allow_nan=False, default=str) + "\n")
    return path


METADATA_KEYS = ("suite", "device", "compute_capability", "torch", "triton", "liger", "python", "date", "command", "git_commit")


def validate_results(data: dict) -> None:
    """Raise ``ValueError`` unless ``data`` has the results schema (see benchmarks/README.md)."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"not a tritonforge results file (expected schema {SCHEMA!r})")
    missing = [k for k in METADATA_KEYS if k not in data.get("metadata", {})]
    if missing:
        raise ValueError(f"metadata lacks {missing}")
    for i, row in enumerate(data.get("rows", [])):
        absent = [k for k in ROW_FIELDS if k not in row and k not in OPTIONAL_ROW_FIELDS]
        if absent:
            raise ValueError(f"row {i} lacks {absent}")


def read_results(path) -> Results:
    data = json.loads(Path(path).read_text())
    validate_results(data)
    rows = [{**dict.fromkeys(OPTIONAL_ROW_FIELDS), **row} for row in data["rows"]]
    return Results(metadata=data["metadata"], rows=rows, path=str(path))


PACKAGED_RESULTS = Path(__file__).resolve().parent / "recorded"
"""Where a wheel install (``pip install git+...`` in Colab) keeps ``benchmarks/results``:
``pyproject.toml`` ships that folder as the package data ``tritonforge/recorded``."""


def results_directory(directory=DEFAULT_RESULTS_DIR) -> Path:
    """``directory`` as given if it exists, else the same path under the repository root, else
    (for the default folder outside a checkout, e.g. in Colab) the copy shipped in the package.

    Chapters execute inside ``chapters/``, so the default relative path is resolved against the
    checkout that holds this package.
    """
    path = Path(directory)
    if path.is_dir() or path.is_absolute():
        return path
    in_checkout = REPO_ROOT / path
    if not in_checkout.is_dir() and path == Path(DEFAULT_RESULTS_DIR) and PACKAGED_RESULTS.is_dir():
        return PACKAGED_RESULTS
    return in_checkout


def load_results(suite: Optional[str] = None, directory=DEFAULT_RESULTS_DIR) -> Results:
    """The newest recorded results that contain ``suite`` (any suite when None).

    "Newest" is the latest ``metadata.date``. With a suite, only that suite's rows are kept (the
    run's ceilings stay in ``metadata["ceilings"]``). Raises ``FileNotFoundError`` if no file
    matches.
    """
    folder = results_directory(directory)
    candidates = []
    for path in sorted(folder.glob("*.json")):
        try:
            results = read_results(path)
        except (ValueError, OSError, json.JSONDecodeError):
            continue  # not a results file (or an older schema): skip it
        if suite is None or any(row["suite"] == suite for row in results.rows):
            candidates.append((str(results.metadata["date"]), path.stat().st_mtime, results))
    if not candidates:
        wanted = f"suite {suite!r}" if suite else "any suite"
        raise FileNotFoundError(
            f"no recorded results for {wanted} in {folder}; record them on a GPU machine with "
            f"scripts/gpu_bench.sh (or python -m tritonforge.bench {suite or 'all'})"
        )
    newest = max(candidates, key=lambda c: (c[0], c[1]))[2]
    if suite is not None:
        newest.rows = [row for row in newest.rows if row["suite"] == suite]
    return newest


def results_for_chapter(suite: str, *, live: bool = False, directory=DEFAULT_RESULTS_DIR) -> Results:
    """What a chapter plots: a live quick run if ``live`` and a CUDA GPU is here, else the record.

    The returned :class:`Results` knows which it is (``.live``), and the plots say so.
    """
    if live and torch.cuda.is_available():
        results = run_suite(suite, quick=True, command=f"tritonforge.bench.results_for_chapter({suite!r}, live=True)")
        if suite != "ceilings":
            results.rows = [row for row in results.rows if row["suite"] == suite]
        return results
    return load_results(suite, directory)


# ----------------------------------------------------------------------------------------------
# Printing
# ----------------------------------------------------------------------------------------------


def shape_label(shape: Sequence[int]) -> str:
    return "×".join(str(s) for s in shape)


def cell(row: dict) -> str:
    """One table cell: "µs (fraction)" for a timed row, else its status."""
    if row["status"] != "ok":
        return {"wrong": "WRONG", "unavailable": "n/a", "error": "error"}.get(row["status"], str(row["status"]))
    fraction = row["fraction_of_ceiling"]
    return f"{row['us']:.1f} ({fraction:.2f})" if fraction is not None else f"{row['us']:.1f}"


def format_suite(suite: str, rows: list[dict]) -> str:
    """A markdown table for one suite: one line per (dtype, shape), one column per impl."""
    lines = [f"## {suite}"]
    if suite == "ceilings":
        lines += ["| op | dtype | shape | µs | rate |", "|---|---|---|---|---|"]
        for r in rows:
            rate = f"{r['gbps']:.0f} GB/s" if r["gbps"] else (f"{r['tflops']:.1f} TFLOP/s" if r["tflops"] else r["status"])
            us = f"{r['us']:.1f}" if r["us"] is not None else "-"
            lines.append(f"| {r['op']} | {r['dtype']} | {shape_label(r['shape'])} | {us} | {rate} |")
    elif suite == "profile-eager-rmsnorm":
        lines += ["| impl | dtype | shape | CUDA kernels | full-tensor passes | kernel names |", "|---|---|---|---|---|---|"]
        for r in rows:
            names = ", ".join(k[:60] for k in r.get("kernels") or []) or (r["note"] or "")
            lines.append(f"| {r['impl']} | {r['dtype']} | {shape_label(r['shape'])} | {r.get('kernel_count', '-')} "
                         f"| {r.get('hbm_passes', '-')} | {names} |")  # fmt: skip
    else:
        impls = list(dict.fromkeys(r["impl"] for r in rows))
        keys = list(dict.fromkeys((r["dtype"], tuple(r["shape"])) for r in rows))
        by_key = {(r["dtype"], tuple(r["shape"]), r["impl"]): r for r in rows}
        lines.append("| dtype | shape | " + " | ".join(f"{i} µs (frac)" for i in impls) + " |")
        lines.append("|---|---|" + "---|" * len(impls))
        for dtype, shape in keys:
            cells = [cell(by_key[(dtype, shape, i)]) if (dtype, shape, i) in by_key else "" for i in impls]
            lines.append(f"| {dtype} | {shape_label(shape)} | " + " | ".join(cells) + " |")
        lines += [f"cost: {f}" for f in dict.fromkeys(r["formula"] for r in rows if r["formula"])]
        lines.append("frac = fraction of the measured copy bandwidth")
        timed_on_device = [i for i in impls if any(r["impl"] == i and r.get("device_us") is not None for r in rows)]
        if timed_on_device:
            lines += ["", "device µs (CUDA-graph replay: no host time, no L2 flush between calls)",
                      "| dtype | shape | " + " | ".join(timed_on_device) + " |", "|---|---|" + "---|" * len(timed_on_device)]  # fmt: skip
            for dtype, shape in keys:
                cells = [by_key.get((dtype, shape, i), {}).get("device_us") for i in timed_on_device]
                text = " | ".join("" if us is None else f"{us:.1f}" for us in cells)
                lines.append(f"| {dtype} | {shape_label(shape)} | {text} |")
    notes = [f"  {r['impl']} {r['dtype']} {shape_label(r['shape'])}: {r['status']}: {r['note']}"
             for r in rows if r["status"] != "ok" and r["note"]]  # fmt: skip
    seen = dict.fromkeys(notes)
    return "\n".join(lines + (["not counted:"] + list(seen) if seen else []))


def format_results(results: Results) -> str:
    header = [results.provenance()]
    ceilings = results.ceilings
    if ceilings:
        matmul = ", ".join(f"{d} {t:.0f}" for d, t in ceilings.matmul_tflops.items())
        header.append(f"ceilings: copy {ceilings.copy_gbps:.0f} GB/s; matmul TFLOP/s: {matmul}")
    suites = list(dict.fromkeys(r["suite"] for r in results.rows))
    return "\n\n".join(["\n".join(header)] + [format_suite(s, [r for r in results.rows if r["suite"] == s]) for s in suites])


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------


def no_gpu_message(directory=DEFAULT_RESULTS_DIR) -> str:
    folder = results_directory(directory)
    recorded = sorted(p.name for p in folder.glob("*.json")) if folder.is_dir() else []
    listing = ("recorded results: " + ", ".join(recorded)) if recorded else f"no recorded results in {folder} yet"
    return (
        "tritonforge.bench: benchmarks need a CUDA GPU, and torch.cuda.is_available() is False here.\n"
        "Timing through Triton's CPU interpreter would measure the interpreter, not the kernel.\n"
        f"Use the recorded GPU results in {folder} instead ({listing}):\n"
        "  python -m tritonforge.bench show          # print them\n"
        "  tritonforge.bench.load_results('rmsnorm') # load them; tritonforge.viz.plot_bench(...) plots them"
    )


def parse_dtypes(text: Optional[str]) -> Optional[list[torch.dtype]]:
    """"fp32,bf16" -> [torch.float32, torch.bfloat16]."""
    if not text:
        return None
    try:
        return [DTYPE_ALIASES[name.strip().lower()] for name in text.split(",") if name.strip()]
    except KeyError as exc:
        raise argparse.ArgumentTypeError(f"unknown dtype {exc.args[0]!r}; use one of {sorted(DTYPE_ALIASES)}") from None


def parse_shapes(text: Optional[str]) -> Optional[list[tuple[int, ...]]]:
    """"4096x512,1x8192" -> [(4096, 512), (1, 8192)]; "1048576" -> [(1048576,)]; "2^20" works too."""
    if not text:
        return None
    shapes = []
    for item in text.split(","):
        dims = re.split(r"[x×*]", item.strip().lower())
        try:
            shapes.append(tuple(int(d.split("^")[0]) ** int(d.split("^")[1]) if "^" in d else int(d) for d in dims))
        except (ValueError, IndexError):
            raise argparse.ArgumentTypeError(f"cannot read shape {item!r}; write e.g. 4096x512") from None
    return shapes


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tritonforge.bench",
        description="Time tritonforge kernels beside their peers; report bytes or FLOPs, GB/s or "
        "TFLOP/s and the fraction of the ceilings measured in the same run.",
    )
    parser.add_argument("suite", choices=[*SUITES, "all", "show"], help="what to measure ('show' prints recorded results)")
    parser.add_argument("target", nargs="?", help="show only: a results file or folder (default: the results folder)")
    parser.add_argument("--dtype", type=parse_dtypes, help="comma-separated: fp32,bf16,fp16 (default: fp32 and bf16)")
    parser.add_argument("--shapes", type=parse_shapes, help="comma-separated: 4096x512,1x8192 (axpy: element counts)")
    parser.add_argument("--impls", help="comma-separated subset, e.g. tritonforge,hf-eager,liger")
    parser.add_argument("--out", help="results file (default: <results-dir>/<suite>-<device>-<date>.json)")
    parser.add_argument("--results-dir", default=DEFAULT_RESULTS_DIR, help="where results are written and read")
    parser.add_argument("--quick", action="store_true", help="fewer shapes and dtypes, shorter timing")
    return parser


def show(target: Optional[str], results_dir: str) -> int:
    """Print recorded results: one file, or the newest file for each suite in a folder."""
    path = Path(target) if target else results_directory(results_dir)
    if path.is_file():
        print(read_results(path).table())
        return 0
    printed = False
    for suite in SUITES:
        try:
            results = load_results(suite, path)
        except FileNotFoundError:
            continue
        print(f"# {results.path}\n{results.table()}\n")
        printed = True
    if not printed:
        print(f"no recorded results in {path}", file=sys.stderr)
    return 0 if printed else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.suite == "show":
        return show(args.target, args.results_dir)
    if not torch.cuda.is_available():
        print(no_gpu_message(args.results_dir), file=sys.stderr)
        return 2
    if args.shapes and args.suite in ("rmsnorm", "rmsnorm-bwd", "profile-eager-rmsnorm", "all"):
        if any(len(shape) != 2 for shape in args.shapes):
            parser.error(f"suite {args.suite} needs M×N shapes, e.g. --shapes 4096x512,1x8192")
    impls = [i.strip() for i in args.impls.split(",")] if args.impls else None
    command = " ".join(["python", "-m", "tritonforge.bench", *(sys.argv[1:] if argv is None else argv)])
    results = run_suite(args.suite, dtypes=args.dtype, shapes=args.shapes, impls=impls, quick=args.quick, command=command)
    path = write_results(results, args.out or default_results_path(results.metadata, args.results_dir))
    results.path = str(path)
    print(results.table())
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
