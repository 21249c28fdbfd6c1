"""Execution paths, routing, input checks and the environment report.

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

Bad input is not a fallback: the ``check_*`` helpers raise ``TypeError``/``ValueError`` naming
the argument before any routing happens.

**Simulating a GPU (tests only).** ``TRITONFORGE_SIMULATE_DEVICE=t4`` in the environment (read when
tritonforge is imported; :func:`simulate` switches it inside a ``with`` block) makes the package
report and decide as on a Colab T4 (sm_75) while tensors stay on the CPU and kernels run in the
interpreter: :func:`environment` names the device "Tesla T4 (simulated)" with capability 7.5,
no bf16 and float16 as the default dtype; :func:`device_capability` answers (7, 5),
:func:`supports_bf16` False and :func:`shared_memory_per_block` 64 KB for any device, so routing
refuses bf16 as on a T4 (reason ``unsupported``); a kernel launched by hand with a bf16 tensor
raises :class:`SimulatedCompileError` (a real T4 would compile and run it, emulating bf16; the
book runs no bf16 kernel there, see :func:`supports_bf16`, and the guard keeps a chapter from
doing so); and a chapter's benchmark cells take their live branch
(:attr:`Environment.benchmarks_live`), served by a simulated quick run shaped like a T4's
(:func:`tritonforge.bench.results_for_chapter`; made-up numbers, labelled so). The test suite runs
every notebook this way (``tests/test_simulated_t4.py``) so that a T4 cannot meet an error the
tests did not. Never set it to learn anything about speed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import platform
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Optional

import torch

from tritonforge import _triton

PATHS = ("triton", "interpreter", "torch")

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

SIMULATE_ENV = "TRITONFORGE_SIMULATE_DEVICE"
"""The environment variable that switches the simulation on (see the module docstring)."""


@dataclasses.dataclass(frozen=True)
class SimulatedDevice:
    """A GPU the package can pretend to run on (tests only): what it reports and decides by.

    ``copy_gbps`` and ``matmul_tflops`` are stand-ins for a simulated benchmark run (roughly what
    such a GPU measures; never shown as a measurement)."""

    key: str  # the value of TRITONFORGE_SIMULATE_DEVICE
    name: str  # what torch.cuda.get_device_name() answers on the real device
    capability: tuple[int, int]
    shared_memory_per_block: int  # bytes, the opt-in maximum per block
    sms: int
    copy_gbps: float
    matmul_tflops: dict  # dtype name -> TFLOP/s, only the dtypes the device has


SIMULATED_DEVICES = {
    # T4: 64 KB of shared memory per block, no bf16 instructions (the book runs no bf16 kernel on
    # it: see supports_bf16), 40 SMs.
    "t4": SimulatedDevice("t4", "Tesla T4", (7, 5), 64 * 1024, 40, 240.0, {"float16": 25.0, "float32": 4.5}),
}


def _read_simulation() -> Optional[SimulatedDevice]:
    value = os.environ.get(SIMULATE_ENV, "").strip().lower()
    if not value:
        return None
    if value not in SIMULATED_DEVICES:
        raise ValueError(f"{SIMULATE_ENV}={value!r}: expected one of {sorted(SIMULATED_DEVICES)} (or unset)")
    return SIMULATED_DEVICES[value]


_simulated: Optional[SimulatedDevice] = _read_simulation()


def simulated_device() -> Optional[SimulatedDevice]:
    """The GPU being simulated (``TRITONFORGE_SIMULATE_DEVICE``), or ``None`` (the normal case)."""
    return _simulated


@contextlib.contextmanager
def simulate(key: Optional[str] = "t4") -> Iterator[None]:
    """Simulate the device ``key`` (``None``: no simulation) inside a ``with`` block (tests)."""
    global _simulated
    previous = _simulated
    device = SIMULATED_DEVICES[key] if key else None
    if device is not None:
        _install_simulated_launch_guard()  # before the switch: a failure here leaves nothing simulated
    _simulated = device
    _eager_launches.clear()
    try:
        yield
    finally:
        _simulated = previous
        _eager_launches.clear()


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
    """Forget recorded routes, which warnings were shown and the remembered eager launches (tests
    use this)."""
    with _lock:
        _last_routes.clear()
        _warned.clear()
        _eager_launches.clear()


# ----------------------------------------------------------------------------------------------
# Remembered eager launches: a repeated eager inference call skips what it decided before
# ----------------------------------------------------------------------------------------------

EAGER_LAUNCHES_MAX = 4096
"""Signatures remembered at most (then no more are added): a decode loop repeats a few dozen."""

_eager_launches: dict = {}


def eager_fast_path() -> bool:
    """Whether remembered launches are used at all: compiled kernels on a GPU (on the interpreter a
    kernel costs milliseconds, and the simulation decides as another device would), outside a
    region Dynamo traces (there the graph holds the op, and a lookup would become a guard)."""
    if torch.compiler.is_compiling():
        return False
    return _triton.HAVE_TRITON and not _triton.INTERPRETING and _simulated is None


MISS = object()
"""What :func:`run_remembered` returns when no remembered launch serves the call."""


def plain_inference(*tensors: Optional[torch.Tensor]) -> bool:
    """No autograd graph to build for ``tensors`` (``None`` entries skipped), no ``torch.func``
    transform, no forward-mode tangent, no Dynamo trace: the conditions under which a remembered
    launch may serve a call."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        return False
    if torch.compiler.is_compiling() or torch._C._functorch.peek_interpreter_stack() is not None:
        return False
    return torch.autograd.forward_ad._current_level < 0


def run_remembered(key, *args):
    """Serve a call by the launch remembered for ``key`` (``None``: none) with ``args`` (its tensors,
    ``None`` for an absent optional one), or return :data:`MISS`: nothing remembered, or the call
    needs more than the launch (:func:`plain_inference`), or the launch raised (then it is
    forgotten, and the op's full path decides again, a kernel error there being a routed fallback)."""
    launch = _eager_launches.get(key) if key is not None else None
    if launch is None or not plain_inference(*args):
        return MISS
    try:
        return launch(*args)
    except Exception:  # noqa: BLE001 - see the docstring: the full path decides again
        _eager_launches.pop(key, None)
        return MISS


def remember_served(op: str, key, build: Callable[[], Optional[Callable]]) -> None:
    """After a call of ``op`` with signature ``key`` that the kernel served (its route not
    ``torch``), remember ``build()``: a launch of the same arguments whose every decision (tiles,
    grid, flags) depends on nothing but the signature, so that it only allocates the outputs and
    launches; or ``None`` where the call needs more than a launch (a copy of an input, say). The
    launch is wrapped so that it records the same route. The key holds the op's name and the
    call's shapes, strides, dtypes, devices and scalar arguments; the checks that passed for it
    hold for every call of that key."""
    if key is None or key in _eager_launches:
        return
    route = _last_routes.get(op)
    if route is None or route.path == "torch":
        return
    launch = build()
    if launch is None:
        return

    def served(*args):
        out = launch(*args)
        _last_routes[op] = route
        return out

    if len(_eager_launches) < EAGER_LAUNCHES_MAX:
        _eager_launches[key] = served


def _record(route: Route) -> None:
    _last_routes[route.op] = route  # one dict store: atomic under the GIL, no lock needed


def _fall_back(route: Route, cause: Optional[BaseException] = None) -> None:
    """Record a fallback; raise if strict, else warn once per (op, reason).

    Inside a region ``torch.compile`` traces (a fallback decided in traced Python, such as a mask
    the kernels cannot serve), the strict check and the warning happen once, when Dynamo traces
    the call (:func:`_announce_while_tracing`, no lock, no graph break), and the record is a plain
    dict store, which Dynamo replays on every run of the compiled graph."""
    if torch.compiler.is_compiling():
        _announce_while_tracing(route.op, route.reason or "", route.detail or "")
        _record(route)
        return
    if is_strict():
        raise FallbackError(_strict_message(route.op, route.reason, route.detail)) from cause
    _record(route)
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


def interpreting() -> bool:
    """Whether Triton kernels run in the CPU interpreter (decided when Triton was imported)."""
    return _triton.INTERPRETING


def device_capability(device: torch.device) -> Optional[tuple[int, int]]:
    """Compute capability of a CUDA device, or None for anything else (the simulated device's
    for any device while a simulation is on)."""
    if _simulated is not None:
        return _simulated.capability
    if device.type != "cuda":
        return None
    return _cuda_capability(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _cuda_capability(index: int) -> tuple[int, int]:
    # Cached: torch.cuda.get_device_capability costs tens of microseconds per call, which a
    # decode-sized kernel call (a few microseconds on the GPU) cannot afford. A device's
    # capability never changes within a process.
    return torch.cuda.get_device_capability(index)


@functools.cache
def sm_count(index: int) -> int:
    """Streaming multiprocessors of CUDA device ``index`` (cached like the capability)."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def gpu_sm_count(device: torch.device) -> Optional[int]:
    """SMs of ``device`` where compiled kernels run on it (a CUDA device, not the interpreter),
    else ``None``: the ops' heuristics then plan for a small stand-in GPU."""
    if interpreting() or device.type != "cuda":
        return None
    return sm_count(device.index if device.index is not None else torch.cuda.current_device())


def shared_memory_per_block(device: torch.device) -> Optional[int]:
    """Bytes of shared memory one program (CUDA block) may use on ``device``, as the driver
    reports it (the opt-in maximum, which Triton uses), or ``None`` off CUDA.

    Configurations that keep data in shared memory (software-pipelined loops, tiles) are chosen
    from this number, never inferred from the compute capability: sm_86/sm_89 parts (A10, L4)
    allow about 99 KB, a T4 64 KB, an A100 about 163 KB, an H100/H200 about 227 KB. Tests
    monkeypatch this function to simulate those devices; under :func:`simulate` it answers the
    simulated device's limit for any device."""
    if _simulated is not None:
        return _simulated.shared_memory_per_block
    if device.type != "cuda":
        return None
    return _cuda_shared_memory(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _cuda_shared_memory(index: int) -> int:
    props = torch.cuda.get_device_properties(index)
    optin = getattr(props, "shared_memory_per_block_optin", None)
    if optin:
        return int(optin)
    # Older torch: ask Triton's driver, which reads the same attribute from CUDA.
    return int(_triton.triton.runtime.driver.active.utils.get_device_properties(index)["max_shared_mem"])


def supports_bf16(device: torch.device) -> bool:
    """Whether the package runs its bf16 kernels on ``device``: compute capability >= 8.0, or any
    non-CUDA device (the interpreter handles bf16 as long as kernels upcast after ``tl.load``).

    What Triton itself does below sm_80 (checked by compiling for sm_75, a T4, with Triton 3.6 and
    3.9: ``scripts/bf16_sm75_probe.py``; not run on one): bf16 **compiles**. Loads and stores are plain 16-bit memory operations,
    bf16 -> float32 is a 16-bit shift, and float32 -> bf16 is rounded to nearest-even in software
    (a few integer instructions per element, NaN kept): the bits sm_80's hardware conversion
    gives. bf16 arithmetic written without an upcast compiles too, each operation done in float32
    and rounded back. ``tl.dot`` on bf16 operands compiles to float32 FMAs, without tensor cores
    (as fp16 ``tl.dot`` does on sm_75 in Triton 3.x); from sm_80 it is ``mma.sync`` on bf16.

    Why the package refuses it all the same (bf16 calls take the PyTorch reference, a routed and
    warned fallback, and the chapters default to float16 there): a T4 has no bf16 instructions,
    so every bf16 conversion is emulated, for nothing float16 (native there, the same 2 bytes)
    does not give; Triton lists compute capability 8.0+ as its supported NVIDIA hardware; and the
    package's bf16 kernels have never run on an sm_75 device.

    ``torch.cuda.is_bf16_supported()`` is no guide: it answers True on a T4 (PyTorch emulates
    bf16 there), so we ask for the capability.
    """
    cap = device_capability(device)
    return cap is None or cap >= (8, 0)


@functools.cache
def _served(op: str, path: str) -> Route:
    # The Route of a call served by a kernel carries no detail, so one object per (op, path) is
    # built once and reused: a dataclass per call would cost host time on every launch.
    return Route(op, path)


def _device_route(op: str, device: torch.device) -> Optional[Route]:
    """Check 2: the path the device allows, or a fallback Route."""
    if interpreting():
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
            (:func:`bf16_unsupported`), the one limit every op shares.
        unsupported: ``None`` if the kernel supports these inputs, else a sentence saying why not
            (check 3, for limits of one op's own).
    """
    if unsupported is None and dtype is not None:
        unsupported = bf16_unsupported(dtype, device)
    route = choose_route(op, device, unsupported)
    if route.path == "torch":
        _fall_back(route)
        return reference()
    try:
        out = kernel()  # check 4: compile and launch errors surface here
    except Exception as exc:  # noqa: BLE001 - any kernel failure is a routing event, never silent
        _fall_back(Route(op, "torch", "kernel-error", f"{type(exc).__name__}: {exc}"), cause=exc)
        return reference()
    _record(route)
    return out


def record_empty(op: str) -> None:
    """Record a call with an empty input: nothing to compute, no kernel launched. Path ``torch``,
    reason ``empty``; not a fallback (no warning, allowed in strict mode)."""
    _record(Route(op, "torch", "empty", "empty input: the result is empty, no kernel was launched"))


def autograd_mode_unsupported(*tensors: torch.Tensor, vmap_ok: bool = True) -> Optional[str]:
    """Check 3 for autograd modes a custom kernel cannot serve, or ``None``.

    A ``torch.library`` custom op sees neither forward-mode tangents (it would drop them: the
    result's tangent is ``None``) nor ``torch.func`` transforms other than ``vmap`` (``jvp``
    gives zeros, ``grad`` raises). So a call under forward-mode AD (a dual tensor from
    ``torch.autograd.forward_ad.make_dual``) or under ``torch.func.grad``/``jvp``/``jacrev``/...
    takes the op's PyTorch reference, which every transform differentiates correctly: a routed
    fallback (warned once; an error in strict mode), never a silent wrong answer. ``vmap``
    alone is served by the op's vmap rule (``vmap_ok``). Cheap when none of this is active:
    two attribute reads."""
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


# ----------------------------------------------------------------------------------------------
# Input checks: bad input is an error naming the argument, never a fallback
# ----------------------------------------------------------------------------------------------


def check_tensor(
    name: str,
    value: object,
    *,
    dtypes: Sequence[torch.dtype] = FLOAT_DTYPES,
    ndim_min: int = 0,
) -> torch.Tensor:
    """Raise ``TypeError`` unless ``value`` is a tensor of one of ``dtypes``; return it."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} has dtype {str(value.dtype).replace('torch.', '')}; expected one of: {allowed}")
    if value.dim() < ndim_min:
        raise ValueError(f"{name} must have at least {ndim_min} dimension(s), got shape {tuple(value.shape)}")
    return value


def check_same_device(**tensors: torch.Tensor) -> torch.device:
    """Raise ``ValueError`` unless all tensors live on one device; return that device.

    These checks run on every call of every op, so they compare first and build a message only
    when something differs (host time is what a decode-sized call is made of)."""
    items = iter(tensors.items())
    first_name, first = next(items)
    device = first.device
    for name, t in items:
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but {first_name} is on {device}; move them to one device")
    return device


def check_same_dtype(**tensors: torch.Tensor) -> torch.dtype:
    """Raise ``TypeError`` unless all tensors share a dtype; return it (cheap, as above)."""
    items = iter(tensors.items())
    first_name, first = next(items)
    dtype = first.dtype
    for name, t in items:
        if t.dtype != dtype:
            raise TypeError(
                f"{name} has dtype {str(t.dtype).replace('torch.', '')} but {first_name} has "
                f"{str(dtype).replace('torch.', '')}; cast one of them"
            )
    return dtype


def check_same_shape(**tensors: torch.Tensor) -> torch.Size:
    """Raise ``ValueError`` unless all tensors share a shape; return it (cheap, as above)."""
    items = iter(tensors.items())
    first_name, first = next(items)
    shape = first.shape
    for name, t in items:
        if t.shape != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but {first_name} has shape {tuple(shape)}")
    return shape


def bf16_unsupported(dtype: torch.dtype, device: torch.device) -> Optional[str]:
    """The shared check-3 sentence for bf16 on a GPU older than Ampere (None when fine)."""
    if dtype == torch.bfloat16 and not supports_bf16(device):
        major, minor = device_capability(device)  # type: ignore[misc]
        simulated = " (simulated)" if _simulated is not None else ""
        return (
            f"the package runs bf16 kernels from compute capability 8.0 and this GPU is sm_{major}{minor}{simulated} "
            "(no bf16 instructions: Triton would emulate every conversion); use float16"
        )
    return None


# ----------------------------------------------------------------------------------------------
# The environment report: the first cell of every chapter
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Environment:
    """What this machine will run: see :func:`environment`."""

    path: str
    device: str
    compute_capability: Optional[str]
    bf16: bool
    default_dtype: torch.dtype
    torch_version: str
    triton_version: Optional[str]
    python_version: str
    strict: bool
    notes: tuple[str, ...] = ()
    gpu: Optional[str] = None  # the GPU's name as the driver gives it ("NVIDIA H200", "Tesla T4"), None without one
    simulated: bool = False  # TRITONFORGE_SIMULATE_DEVICE: the gpu is pretended, tensors stay on the CPU

    @property
    def device_type(self) -> str:
        """``"cuda"`` on the triton path, else ``"cpu"``: where a chapter puts its tensors."""
        return "cuda" if self.path == "triton" else "cpu"

    @property
    def benchmarks_live(self) -> bool:
        """Whether a chapter's benchmark cells measure here (a CUDA GPU; or, under the simulation,
        the simulated quick run that stands in for one) rather than plot the recorded results."""
        return self.simulated or (self.path == "triton" and torch.cuda.is_available())

    @property
    def dtypes(self) -> tuple[torch.dtype, ...]:
        """The float dtypes this device's kernels run: float32, float16, and bfloat16 where it has it."""
        return (torch.float32, torch.float16) + ((torch.bfloat16,) if self.bf16 else ())

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("execution path", self.path),
            ("device", self.device),
            ("compute capability", self.compute_capability or "-"),
            ("bf16 kernels", "yes" if self.bf16 else "no"),
            ("default dtype", str(self.default_dtype).replace("torch.", "")),
            ("torch", self.torch_version),
            ("triton", self.triton_version or "not installed"),
            ("python", self.python_version),
            ("strict routing", "on" if self.strict else "off"),
        ] + [("note", n) for n in self.notes]

    def __str__(self) -> str:
        width = max(len(k) for k, _ in self.rows())
        return "\n".join(f"{k:<{width}}  {v}" for k, v in self.rows())

    def _repr_html_(self) -> str:
        body = "".join(f"<tr><th style='text-align:left'>{k}</th><td style='text-align:left'>{v}</td></tr>" for k, v in self.rows())
        return f"<table>{body}</table>"

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython's plain-text display
        printer.text(str(self))


def environment() -> Environment:
    """Report the path kernels will take here, the device, its capability and dtypes.

    Call it in a notebook's first cell: a reader sees at once whether this run compiles Triton
    kernels for a GPU, interprets them on the CPU, or falls back to PyTorch.
    """
    notes: list[str] = []
    triton_version = getattr(_triton.triton, "__version__", None) if _triton.HAVE_TRITON else None
    gpu: Optional[str] = None
    if _simulated is not None:
        sim = _simulated
        gpu = sim.name
        device = f"{sim.name} (simulated: {SIMULATE_ENV}={sim.key}; tensors on the CPU, kernels in the interpreter)"
        major, minor = sim.capability
        cap = f"{major}.{minor} (sm_{major}{minor})"
        bf16 = sim.capability >= (8, 0)
        default = torch.bfloat16 if bf16 else torch.float16
        notes.append(f"simulated {sim.name} for tests: decisions as on that GPU, numbers of any benchmark made up")
        if not bf16:
            notes.append("no bf16 instructions on this GPU: the package runs no bf16 kernel below sm_80, chapters use float16")
    elif torch.cuda.is_available() and not interpreting():
        dev = torch.device("cuda")
        major, minor = torch.cuda.get_device_capability(dev)
        bf16 = (major, minor) >= (8, 0)
        device = gpu = torch.cuda.get_device_name(dev)
        cap = f"{major}.{minor} (sm_{major}{minor})"
        default = torch.bfloat16 if bf16 else torch.float16
        if not bf16:
            notes.append("no bf16 instructions on this GPU: the package runs no bf16 kernel below sm_80, chapters use float16")
        if (major, minor) < (8, 0):
            notes.append("pre-Ampere GPU: Triton supports it unofficially; tl.dot runs without tensor cores")
    else:
        device = f"cpu ({platform.processor() or platform.machine()})"
        # The interpreter handles bf16 as long as kernels upcast after tl.load (they all do);
        # float32 stays the default on CPU because it is what a reader can check by hand.
        cap, bf16, default = None, True, torch.float32
    route = choose_route("environment", torch.device("cuda" if cap and _simulated is None else "cpu"))
    path = route.path
    if path == "torch":
        notes.append(f"kernels fall back to PyTorch here: {route.detail}")
    if path == "interpreter":
        notes.append("Triton kernels run in the CPU interpreter: correct but slow; keep sizes small")
    if _triton.TRITON_ALREADY_IMPORTED and path == "interpreter":
        notes.append("triton was imported before tritonforge: restart and import tritonforge first")
    return Environment(
        path=path,
        device=device,
        compute_capability=cap,
        bf16=bf16,
        default_dtype=default,
        torch_version=torch.__version__,
        triton_version=triton_version,
        python_version=platform.python_version(),
        strict=is_strict(),
        notes=tuple(notes),
        gpu=gpu,
        simulated=_simulated is not None,
    )


# ----------------------------------------------------------------------------------------------
# The simulation's launch guard: a bf16 tensor handed to a kernel by hand is refused below sm_80
# ----------------------------------------------------------------------------------------------


class SimulatedCompileError(RuntimeError):
    """What the simulation raises when a kernel is launched by hand with a bf16 tensor on a GPU
    below sm_80. Triton would compile and run it there (emulating bf16: see :func:`supports_bf16`);
    the error stands for the book's rule that no bf16 kernel runs on such a GPU."""


def _check_simulated_launch(kernel_name: str, args: Sequence[object], kwargs: dict) -> None:
    sim = _simulated
    if sim is None or sim.capability >= (8, 0):
        return
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dtype == torch.bfloat16:
            major, minor = sim.capability
            raise SimulatedCompileError(
                f"{kernel_name}: a bfloat16 tensor argument on sm_{major}{minor} ({sim.name}, simulated by "
                f"{SIMULATE_ENV}): the book runs no bf16 kernel below sm_80 (a real T4 would emulate it); "
                "choose the dtype from the device (float16 here)"
            )


_guard_installed = False


def _install_simulated_launch_guard() -> None:
    """Wrap the interpreter's launch once so that, while a simulation without bf16 is on, a kernel
    called with a bf16 tensor raises :class:`SimulatedCompileError` (the routed ops refuse bf16
    before launching; this catches the launches a chapter or an exercise makes by hand)."""
    global _guard_installed
    if _guard_installed or not (_triton.HAVE_TRITON and interpreting()):
        return
    from triton.runtime.interpreter import InterpretedFunction

    # kernel[grid](...) goes through __getitem__ in every Triton version tested (3.3: it returns the
    # grid executor itself; 3.9: a closure over the method `run`, which 3.3 does not have).
    getitem = InterpretedFunction.__getitem__

    @functools.wraps(getitem)
    def guarded_getitem(self, grid):
        launch = getitem(self, grid)
        name = getattr(self.fn, "__name__", "kernel")

        def guarded_launch(*args, **kwargs):
            _check_simulated_launch(name, args, kwargs)
            return launch(*args, **kwargs)

        return guarded_launch

    InterpretedFunction.__getitem__ = guarded_getitem
    _guard_installed = True


if _simulated is not None:
    _install_simulated_launch_guard()  # the one import-time action of the (test-only) simulation
