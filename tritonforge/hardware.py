"""What the device can do: the facts the routing and the ops' heuristics read, asked of the driver
once and cached (a decode-sized call cannot afford a driver query), or of the simulated device
(:mod:`tritonforge.simulation`) while one is on.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from tritonforge import _triton, simulation


def interpreting() -> bool:
    """Whether Triton kernels run in the CPU interpreter (decided when Triton was imported)."""
    return _triton.INTERPRETING


def device_capability(device: torch.device) -> Optional[tuple[int, int]]:
    """Compute capability of a CUDA device, or None for anything else (the simulated device's
    for any device while a simulation is on)."""
    sim = simulation.simulated_device()
    if sim is not None:
        return sim.capability
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
    sim = simulation.simulated_device()
    if sim is not None:
        return sim.shared_memory_per_block
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


def bf16_unsupported(dtype: torch.dtype, device: torch.device) -> Optional[str]:
    """The shared check-3 sentence for bf16 on a GPU older than Ampere (None when fine)."""
    if dtype == torch.bfloat16 and not supports_bf16(device):
        major, minor = device_capability(device)  # type: ignore[misc]
        simulated = " (simulated)" if simulation.simulated_device() is not None else ""
        return (
            f"the package runs bf16 kernels from compute capability 8.0 and this GPU is sm_{major}{minor}{simulated} "
            "(no bf16 instructions: Triton would emulate every conversion); use float16"
        )
    return None
