"""Simulating a GPU (tests only): decide and report as on a device this machine does not have.

``TRITONFORGE_SIMULATE_DEVICE=t4`` in the environment (read when tritonforge is imported;
:func:`simulate` switches it inside a ``with`` block) makes the package report and decide as on a
Colab T4 (sm_75) while tensors stay on the CPU and kernels run in the interpreter:
:func:`tritonforge.environment.environment` names the device "Tesla T4 (simulated)" with
capability 7.5, no bf16 and float16 as the default dtype; :mod:`tritonforge.hardware` answers (7, 5)
for the capability, False for bf16 and 64 KB of shared memory for any device, so routing refuses
bf16 as on a T4 (reason ``unsupported``); a kernel launched by hand with a bf16 tensor raises
:class:`SimulatedCompileError` (a real T4 would compile and run it, emulating bf16; the book runs no
bf16 kernel there, see :func:`tritonforge.hardware.supports_bf16`, and the guard keeps a chapter from
doing so); and a chapter's benchmark cells take their live branch
(:attr:`tritonforge.environment.Environment.benchmarks_live`), served by a simulated quick run
shaped like a T4's (:func:`tritonforge.bench.results_for_chapter`; made-up numbers, labelled so). The
test suite runs every notebook this way (``tests/test_simulated_t4.py``) so that a T4 cannot meet
an error the tests did not. Never set it to learn anything about speed.

Nothing is patched when the package is imported: the guard on hand launches is installed the first
time a simulation is consulted (:func:`active`), and only then.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Iterator, Sequence
from typing import Optional

import torch

from tritonforge import _triton

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
    """The GPU being simulated (``TRITONFORGE_SIMULATE_DEVICE``), or ``None`` (the normal case).
    The first answer that is a device installs the guard on hand launches (:func:`install_launch_guard`)."""
    if _simulated is not None and not _guard_installed:
        install_launch_guard()
    return _simulated


@contextlib.contextmanager
def simulate(key: Optional[str] = "t4") -> Iterator[None]:
    """Simulate the device ``key`` (``None``: no simulation) inside a ``with`` block (tests)."""
    global _simulated
    previous = _simulated
    device = SIMULATED_DEVICES[key] if key else None
    if device is not None:
        install_launch_guard()  # before the switch: a failure here leaves nothing simulated
    _simulated = device  # remembered eager launches stay: none is looked up while a simulation is on
    try:
        yield
    finally:
        _simulated = previous


class SimulatedCompileError(RuntimeError):
    """What the simulation raises when a kernel is launched by hand with a bf16 tensor on a GPU
    below sm_80. Triton would compile and run it there (emulating bf16: see
:func:`tritonforge.hardware.supports_bf16`);
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


def install_launch_guard() -> None:
    """Wrap the interpreter's launch once so that, while a simulation without bf16 is on, a kernel
    called with a bf16 tensor raises :class:`SimulatedCompileError` (the routed ops refuse bf16
    before launching; this catches the launches a chapter or an exercise makes by hand). Called by
    :func:`simulate`, by the first :func:`simulated_device` that answers a device, and by the test
    harness at the start of a notebook's kernel (``tests/test_simulated_t4.py``); never on import."""
    global _guard_installed
    if _guard_installed or not (_triton.HAVE_TRITON and _triton.INTERPRETING):
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
