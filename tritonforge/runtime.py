"""Execution paths and routing: which path serves a call, and the record of what did.

Every op in tritonforge runs on one of three paths, decided per call:

=============  ==========================================================================
``triton``     the compiled Triton kernel, on CUDA tensors
``interpreter`` the same kernel run by Triton's CPU interpreter (``TRITON_INTERPRET=1``)
``torch``      the op's PyTorch reference (a fallback, never silent)
=============  ==========================================================================

:func:`dispatch` makes the decision with four checks, in this order:

1. **Triton importable** — otherwise ``torch`` (reason ``triton-missing``);
2. **a device Triton can run on** — CUDA tensors with the compiler, or any tensors with the
   interpreter switched on; otherwise ``torch`` (reason ``device``);
3. **inputs the kernel supports** — the op's own ``supports`` check (e.g. bf16 kernels only from compute
   capability 8.0); otherwise ``torch`` (reason ``unsupported``);
4. **the kernel compiles and launches** — an exception from the kernel is caught; ``torch``
   (reason ``kernel-error``).

A fallback warns once per op and reason (:class:`FallbackWarning`) and is recorded:
:func:`last_path` and :func:`last_route` say what served the latest call. With
``TRITONFORGE_STRICT=1`` in the environment (or inside ``with strict():``) every fallback
raises :class:`FallbackError` instead; the test suite runs strict so that a broken kernel cannot
hide behind the reference.

The rest of what a call needs lives beside this module, one job each: the input checks
(:mod:`tritonforge.checks`: bad input is an error naming the argument, never a fallback), what the
device can do (:mod:`tritonforge.hardware`), the remembered eager launches and the decision every op
makes about a checked call (:mod:`tritonforge.launches`), the environment report
(:mod:`tritonforge.environment`) and the simulated T4 of the tests (:mod:`tritonforge.simulation`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Optional

import torch

from tritonforge import _triton, hardware

PATHS = ("triton", "interpreter", "torch")

class FallbackWarning(UserWarning):
    """An op ran its PyTorch reference instead of its Triton kernel."""


class FallbackError(RuntimeError):
    """Raised instead of falling back when strict routing is on."""


@dataclasses.dataclass(frozen=True)
class Route:
    """Which path served a call, and why when it was a fallback."""

    op: str
    path: str  # one of PATHS
    reason: Optional[str] = None  # None | "triton-missing" | "device" | "unsupported" | "kernel-error" | "autograd" | "empty"
    detail: Optional[str] = None  # a sentence for humans


# ----------------------------------------------------------------------------------------------
# Strict mode, the record of the last route, and the once-only warnings
# ----------------------------------------------------------------------------------------------

_lock = threading.Lock()
_last_routes: dict[str, Route] = {}
_warned: set[tuple[str, str]] = set()
_strict_override: list[bool] = []  # a stack, so that strict()/strict(False) nest


def is_strict() -> bool:
    """True when every fallback must raise (``TRITONFORGE_STRICT=1`` or inside ``strict()``)."""
    if _strict_override:
        return _strict_override[-1]
    return os.environ.get("TRITONFORGE_STRICT", "0").strip().lower() in ("1", "true", "yes", "on")


@contextlib.contextmanager
def strict(enabled: bool = True) -> Iterator[None]:
    """Turn strict routing on (or off) inside a ``with`` block."""
    _strict_override.append(enabled)
    try:
        yield
    finally:
        _strict_override.pop()


def last_route(op: str) -> Route:
    """The :class:`Route` of the most recent call of ``op`` (raises ``KeyError`` if none yet)."""
    with _lock:
        if op not in _last_routes:
            raise KeyError(f"op {op!r} has not been called yet in this process")
        return _last_routes[op]


def last_path(op: str) -> str:
    """``"triton"``, ``"interpreter"`` or ``"torch"``: the path that served the last call of ``op``."""
    return last_route(op).path


def reset_routing_state() -> None:
    """Forget recorded routes and which warnings were shown (tests and chapter 8 use this; the
    remembered eager launches are :func:`tritonforge.launches.forget`'s)."""
    with _lock:
        _last_routes.clear()
        _warned.clear()


def record(route: Route) -> None:
    """Record ``route`` as the last of its op (one dict store: atomic under the GIL, no lock needed)."""
    _last_routes[route.op] = route


def last_routes() -> dict:
    """Every op's last route, by op name (a live view: the remembered launches read it)."""
    return _last_routes


def _fall_back(route: Route, cause: Optional[BaseException] = None) -> None:
    """Record a fallback; raise if strict, else warn once per (op, reason).

    Inside a region ``torch.compile`` traces (a fallback decided in traced Python, such as a mask
    the kernels cannot serve), the strict check and the warning happen once, when Dynamo traces
    the call (:func:`_announce_while_tracing`, no lock, no graph break), and the record is a plain
    dict store, which Dynamo replays on every run of the compiled graph. A fallback decided while
    AOTAutograd (or ``make_fx``) traces, which runs this Python once with fake tensors, is checked
    and warned there and then: that trace is the only time it runs, so a kernel that fails there
    (a launch traced outside an operator) becomes the reference in the compiled graph."""
    if torch.compiler.is_compiling():
        if torch.compiler.is_dynamo_compiling():
            _announce_while_tracing(route.op, route.reason or "", route.detail or "")
        elif is_strict():
            raise FallbackError(_strict_message(route.op, route.reason, route.detail) + " (decided while torch.compile traced this call)") from cause
        else:
            _warn_once(route.op, route.reason or "", route.detail, stacklevel=5)
        record(route)
        return
    if is_strict():
        raise FallbackError(_strict_message(route.op, route.reason, route.detail)) from cause
    record(route)
    _warn_once(route.op, route.reason or "", route.detail, stacklevel=5)


def _strict_message(op, reason, detail) -> str:
    return (f"tritonforge.{op}: the Triton path is unavailable ({reason}): {detail}; "
            "strict routing (TRITONFORGE_STRICT=1) forbids falling back to the PyTorch reference")  # fmt: skip


def _warn_once(op: str, reason: str, detail, stacklevel: int) -> None:
    key = (op, reason)
    with _lock:
        first = key not in _warned
        _warned.add(key)
    if first:
        warnings.warn(f"tritonforge.{op}: using the PyTorch reference ({reason}): {detail}", FallbackWarning, stacklevel=stacklevel)


def _announce_while_tracing(op: str, reason: str, detail: str) -> None:
    from torch._dynamo.comptime import comptime

    comptime(_announce_at_trace_time)


def _announce_at_trace_time(ctx) -> None:
    """Run by Dynamo while it traces :func:`_announce_while_tracing` (reads that frame's locals)."""
    op, reason, detail = (ctx.get_local(name).as_python_constant() for name in ("op", "reason", "detail"))
    if is_strict():
        raise FallbackError(_strict_message(op, reason, detail) + " (decided while torch.compile traced this call)")
    _warn_once(op, reason, detail, stacklevel=2)


# ----------------------------------------------------------------------------------------------
# The four checks
# ----------------------------------------------------------------------------------------------


def triton_available() -> bool:
    """Check 1: Triton imported (tests monkeypatch this to inject a missing Triton)."""
    return _triton.HAVE_TRITON

@functools.cache
def _served(op: str, path: str) -> Route:
    # The Route of a call served by a kernel carries no detail, so one object per (op, path) is
    # built once and reused: a dataclass per call would cost host time on every launch.
    return Route(op, path)


def _device_route(op: str, device: torch.device) -> Optional[Route]:
    """Check 2: the path the device allows, or a fallback Route."""
    if hardware.interpreting():
        if device.type in ("cpu", "cuda"):
            return _served(op, "interpreter")
        return Route(op, "torch", "device", f"tensors are on {device.type}; Triton's interpreter runs kernels on CPU tensors")
    if device.type == "cuda":
        return _served(op, "triton")
    return Route(
        op,
        "torch",
        "device",
        f"tensors are on {device.type}; compiled Triton kernels need CUDA tensors "
        "(on a machine without a GPU, import tritonforge before triton so that it can switch "
        "the interpreter on, or set TRITON_INTERPRET=1)",
    )


def choose_route(op: str, device: torch.device, unsupported: Optional[str] = None) -> Route:
    """Checks 1-3: decide the path for a call without running anything."""
    if not triton_available():
        return Route(op, "torch", "triton-missing", f"Triton is not importable ({_triton.TRITON_IMPORT_ERROR})")
    route = _device_route(op, device)
    if route.path == "torch":
        return route
    if unsupported:
        return Route(op, "torch", "unsupported", unsupported)
    return route


def dispatch(
    op: str,
    *,
    device: torch.device,
    kernel: Callable[[], object],
    reference: Callable[[], object],
    dtype: Optional[torch.dtype] = None,
    unsupported: Optional[str] = None,
):
    """Run ``kernel()`` on the Triton path if the four checks allow it, else ``reference()``.

    Args:
        op: the op's public name, the key for :func:`last_path`.
        device: the device of the (already validated) inputs.
        kernel: zero-argument callable that launches the Triton kernel(s) and returns the result.
        reference: zero-argument callable that computes the same result with PyTorch.
        dtype: the inputs' dtype; check 3 then refuses bf16 on a GPU without it
            (:func:`tritonforge.hardware.bf16_unsupported`), the one limit every op shares.
        unsupported: ``None`` if the kernel supports these inputs, else a sentence saying why not
            (check 3, for limits of one op's own).
    """
    if unsupported is None and dtype is not None:
        unsupported = hardware.bf16_unsupported(dtype, device)
    route = choose_route(op, device, unsupported)
    if route.path == "torch":
        _fall_back(route)
        return reference()
    try:
        out = kernel()  # check 4: compile and launch errors surface here
    except Exception as exc:  # noqa: BLE001 - any kernel failure is a routing event, never silent
        if torch.compiler.is_dynamo_compiling():  # Dynamo can fold the type's name, not the message, into a constant
            detail = f"{type(exc).__name__} while torch.compile traced the launch (route inside a torch.library operator)"
        else:
            detail = f"{type(exc).__name__}: {exc}"
        _fall_back(Route(op, "torch", "kernel-error", detail), cause=exc)
        return reference()
    record(route)
    return out


def record_empty(op: str) -> None:
    """Record a call with an empty input: nothing to compute, no kernel launched. Path ``torch``,
    reason ``empty``; not a fallback (no warning, allowed in strict mode)."""
    record(Route(op, "torch", "empty", "empty input: the result is empty, no kernel was launched"))


def autograd_mode_unsupported(*tensors: torch.Tensor, vmap_ok: bool = True) -> Optional[str]:
    """Check 3 for autograd modes a custom kernel cannot serve, or ``None``.

    A ``torch.library`` custom op sees neither forward-mode tangents (it would drop them: the
    result's tangent is ``None``) nor ``torch.func`` transforms other than ``vmap`` (``jvp``
    gives zeros, ``grad`` raises). So a call under forward-mode AD (a dual tensor from
    ``torch.autograd.forward_ad.make_dual``) or under ``torch.func.grad``/``jvp``/``jacrev``/...
    takes the op's PyTorch reference, which every transform differentiates correctly: a routed
    fallback (warned once; an error in strict mode), never a silent wrong answer. ``vmap``
    alone is served by the op's vmap rule (``vmap_ok``). :func:`traced_mode_unsupported` inside
    a region ``torch.compile`` traces, :func:`eager_mode_unsupported` elsewhere."""
    if torch.compiler.is_compiling():
        return traced_mode_unsupported()
    return eager_mode_unsupported(*tensors, vmap_ok=vmap_ok)


def traced_mode_unsupported() -> Optional[str]:
    """:func:`autograd_mode_unsupported` inside a region ``torch.compile`` traces. Dynamo cannot
    call the functorch interpreter stack (``fullgraph=True`` would fail on it), but it does follow
    the forward-mode AD level, which ``torch.func.jvp`` raises too: a call there takes the
    reference (a compiled jvp through the operator would otherwise get zero tangents).
    ``torch.func.grad`` over an operator raises under compile; ``vmap`` is the operator's rule."""
    if torch.autograd.forward_ad._current_level >= 0:
        return ("forward-mode AD (torch.func.jvp or a dual tensor) under torch.compile: the kernels have no jvp; "
                "the PyTorch reference carries the tangent")  # fmt: skip
    return None


def eager_mode_unsupported(*tensors: torch.Tensor, vmap_ok: bool = True) -> Optional[str]:
    """:func:`autograd_mode_unsupported` outside a traced region (the caller knows it is): two
    attribute reads when no transform and no tangent is active."""
    if torch._C._functorch.peek_interpreter_stack() is not None:
        from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

        kinds = [interpreter.key() for interpreter in retrieve_all_functorch_interpreters()]
        if not (vmap_ok and all(kind == torch._C._functorch.TransformType.Vmap for kind in kinds)):
            names = ", ".join(str(kind).rsplit(".", 1)[-1].lower() for kind in kinds)
            return f"torch.func transform ({names}) active: the kernels have no rule for it; the PyTorch reference differentiates correctly"
    if torch.autograd.forward_ad._current_level >= 0:
        for t in tensors:
            if torch.autograd.forward_ad.unpack_dual(t).tangent is not None:
                return "forward-mode AD (a dual tensor): the kernels have no jvp; the PyTorch reference carries the tangent"
    return None


def dispatch_reference(op: str, reason: str, detail: str, reference: Callable[[], object]):
    """Serve a call with the reference for a reason found before routing (e.g. an autograd mode
    the kernel has no rule for): recorded, warned once, an error in strict mode."""
    _fall_back(Route(op, "torch", reason, detail))
    return reference()
