"""The clock, and the rule around it: an implementation is checked against float64 before it is timed.

Two clocks, both Triton's own:

- :func:`do_bench_timer`: ``triton.testing.do_bench``, median of the timed reps. It zeroes a
  256 MB buffer before every rep (every version read, 2.x to 3.9; :func:`do_bench_flushes_l2`
  checks the installed one), so each rep starts with a cold L2, and it includes the host's time
  to launch the call: what one call costs a program that waits for it.
- :func:`device_time_us`: ``triton.testing.do_bench_cudagraph``, the call captured in a CUDA
  graph (unrolled enough times to fill ``rep`` ms) and replayed: no Python between calls and no
  L2 flush, so what the kernels alone cost the GPU. The median of its replays.

Both need a CUDA GPU (the interpreter has no driver to time); tests pass a fake timer instead.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Optional

import torch

from tritonforge import _triton  # noqa: F401  (first: decides TRITON_INTERPRET before triton loads)
from tritonforge.bench.costs import Ceilings, add_throughput
from tritonforge.reference import TOLERANCE


class NotServed(Exception):
    """Raised by a peer for a case it does not serve (a dtype or shape its kernel was not written
    for): the row says ``unavailable`` with the message, not ``error``. Ours never raises it."""

Timer = Callable[..., float]  # timer(fn, grad_to_none=None) -> median microseconds

DEVICE_TIME_REP_MS = 20
"""How long (ms) of back-to-back calls one CUDA graph of :func:`device_time_us` holds
(``do_bench_cudagraph``'s own default)."""


def do_bench_timer(quick: bool = False) -> Timer:
    """A timer built on ``triton.testing.do_bench``: median of the timed reps, in microseconds.

    ``warmup`` and ``rep`` are milliseconds of running, not counts. ``grad_to_none``: tensors
    whose ``.grad`` is reset before every rep, so a backward is not timed accumulating.
    """
    warmup_ms, rep_ms = (10, 40) if quick else (25, 100)

    def time_us(fn: Callable[[], object], grad_to_none: Optional[list] = None) -> float:
        import triton.testing  # only here: do_bench needs a GPU driver and fails in the interpreter

        ms = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, grad_to_none=grad_to_none, return_mode="median")
        return float(ms) * 1e3

    time_us.settings = f"triton.testing.do_bench(warmup={warmup_ms} ms, rep={rep_ms} ms, return_mode='median')"
    return time_us


def device_time_us(fn: Callable[[], object], grad_to_none: Optional[list] = None, rep_ms: int = DEVICE_TIME_REP_MS) -> float:
    """Device time of ``fn`` in µs: ``triton.testing.do_bench_cudagraph``, median of its replays.

    ``grad_to_none``: tensors whose ``.grad`` is reset before each captured call (do_bench_cudagraph
    does this inside the graph, so a captured backward assigns fresh gradients instead of
    accumulating into old ones); reset once more afterwards, because the captured gradients live
    in the graph's memory pool. CUDA only.
    """
    import triton.testing  # only here: needs a GPU driver

    try:
        ms = triton.testing.do_bench_cudagraph(fn, rep=rep_ms, grad_to_none=grad_to_none, return_mode="median")
    finally:
        for tensor in grad_to_none or ():
            tensor.grad = None
    return float(ms) * 1e3


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


# ----------------------------------------------------------------------------------------------
# Checked before timed
# ----------------------------------------------------------------------------------------------


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


def describe_exception(exc: BaseException, limit: int = 400) -> str:
    """One line for a row's note: the exception's type and message, whitespace folded."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def row_tolerance(dtype_name: str, scale: float = 1.0) -> float:
    """The ``max_rel_err`` above which a row is "wrong": :data:`tritonforge.reference.TOLERANCE`
    for the row's dtype, times ``scale`` where a measurement needs named extra room."""
    return TOLERANCE.get(getattr(torch, dtype_name), TOLERANCE[torch.float32]) * scale


def measure(
    row: dict,
    *,
    run: Callable[[], object],
    check: Callable[[], float],
    timer: Timer,
    ceilings: Optional[Ceilings],
    grad_to_none: Optional[list] = None,
    device_timer: Optional[Callable[..., float]] = None,
    tolerance_scale: float = 1.0,
) -> dict:
    """Check one implementation, then time it; fill ``row`` and return it.

    ``check()`` runs the implementation once and returns its error against float64. A failure
    there makes the row ``"error"`` (``"unavailable"`` for :class:`NotServed`); an error above the dtype's tolerance makes it ``"wrong"``.
    Neither is timed: a fast wrong answer is not a result. ``device_timer`` (such as
    :func:`device_time_us`), when given, also fills ``device_us``; if it fails, the row keeps its
    timing and says why in ``note``.
    """
    tolerance = row_tolerance(row["dtype"], tolerance_scale)
    row["tolerance"] = tolerance
    try:
        row["max_rel_err"] = check()
    except NotServed as exc:
        row.update(status="unavailable", note=str(exc))
        return row
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
