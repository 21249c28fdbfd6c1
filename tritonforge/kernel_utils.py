"""Small pieces shared by the kernels: rounding on store, accumulator dtypes.

Every kernel in the package follows the same dtype discipline: load, upcast to float32 (float64
for float64 inputs), compute, and round to the output dtype only at ``tl.store``. The helpers
here make that one call each.
"""

from __future__ import annotations

import functools

import torch

from tritonforge import _triton, runtime
from tritonforge._triton import tl, triton


@triton.jit
def cast_for_store(
    value,  # float32/float64 block
    DTYPE: tl.constexpr,  # the element type to round to
    ROUND_BF16: tl.constexpr,  # True only in the interpreter for bf16 (see below)
):
    """Round ``value`` to ``DTYPE`` to nearest, ties to even.

    On a GPU ``.to(tl.bfloat16)`` rounds to nearest-even. Triton's CPU interpreter truncates
    float32 -> bfloat16 instead (round toward zero), which doubles the rounding error. With
    ``ROUND_BF16`` we first round the float32 bits by hand (add half an ulp of bf16 plus the
    tie-breaking bit, clear the low 16 bits); the cast that follows is then exact. NaN is kept.
    """
    if ROUND_BF16:
        bits = value.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        value = tl.where(value != value, value, bits.to(tl.float32, bitcast=True))
    return value.to(DTYPE)


def round_bf16_by_hand(dtype: torch.dtype) -> bool:
    """The ``ROUND_BF16`` flag for :func:`cast_for_store`: bf16 output in the interpreter."""
    return dtype == torch.bfloat16 and runtime.interpreting()


def acc_dtype(dtype: torch.dtype):
    """Accumulator dtype: float64 for float64 inputs (so gradcheck passes), float32 otherwise."""
    return tl.float64 if dtype == torch.float64 else tl.float32


def acc_torch_dtype(dtype: torch.dtype) -> torch.dtype:
    """:func:`acc_dtype` as a torch dtype, for the buffers a kernel stores accumulator values in
    (RMSNorm's ``rstd`` and its ``dweight`` partial sums)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _specialization(value: object) -> tuple:
    """What Triton's JIT specializes a compiled kernel on, for one argument.

    Triton compiles one binary per combination of: each pointer's dtype and whether its address
    is a multiple of 16 bytes (16-byte vector loads need it); each integer's width (i32 / i64 /
    u64), whether it equals 1 and whether it is a multiple of 16; the value of every constexpr;
    and the launch options. Floats are not specialized. This tuple records exactly those
    properties, so two calls with equal tuples can share one binary — plus, for a tensor, whether
    it is on the GPU, so that a CPU tensor never reuses a GPU launch: its first launch goes through
    Triton, which rejects it with a clear error instead of handing the GPU a host address.
    """
    if isinstance(value, torch.Tensor):
        return _tensor_specialization(value, value.data_ptr())
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return _int_specialization(value)
    if isinstance(value, float):
        return ("float",)
    return ("value", value)  # anything else (None, a dtype) is passed through as itself


def _tensor_specialization(tensor: torch.Tensor, ptr: int) -> tuple:
    """:func:`_specialization` of a tensor whose ``data_ptr()`` is ``ptr``."""
    return ("ptr", tensor.dtype, ptr % 16 == 0, tensor.is_cuda)


def _int_specialization(value: int) -> tuple:
    """:func:`_specialization` of an integer (not a bool)."""
    width = "i32" if -(2**31) <= value < 2**31 else ("i64" if -(2**63) <= value < 2**63 else "u64")
    return ("int", width, value == 1, value % 16 == 0)


def _runtime_args(args: tuple) -> tuple[tuple, list]:
    """``(specializations, values)`` of a launch's runtime arguments, in one pass: each argument's
    :func:`_specialization`, and what the C launcher is given (a tensor's ``data_ptr()``, which
    the alignment check needs anyway; other values as they are)."""
    specializations, values = [], []
    for value in args:
        if type(value) is int:  # the commonest argument first; exact type, so a bool is not taken here
            specializations.append(_int_specialization(value))
            values.append(value)
        elif isinstance(value, torch.Tensor):
            ptr = value.data_ptr()
            specializations.append(_tensor_specialization(value, ptr))
            values.append(ptr)
        else:
            specializations.append(_specialization(value))
            values.append(value)
    return tuple(specializations), values


class CachedLauncher:
    """Launch a ``@triton.jit`` kernel with less host time than ``kernel[grid](...)``.

    ``kernel[grid](...)`` re-binds and re-specializes every argument, hashes the result and
    builds launch metadata on every call: on triton 3.6 that costs tens of microseconds of Python
    per launch — longer than a decode-sized RMSNorm runs on the GPU (about 3 µs on an H200).
    Here the first launch of each specialization goes through ``kernel[grid]`` (which compiles, or
    loads from Triton's cache, and checks everything); the compiled kernel it returns is kept
    under the key :meth:`key`, and later launches call its C launcher directly, with

    - the device and stream read with the same raw calls Triton uses
      (``torch._C._cuda_getDevice``, ``torch._C._cuda_getCurrentRawStream``);
    - tensors passed as their ``data_ptr()`` integers (which the key needs anyway for the
      alignment check), so the launcher skips its per-pointer driver query;
    - no launch metadata and no hooks, *unless* a profiler registered launch hooks
      (``triton.knobs.runtime.launch_enter_hook``/``launch_exit_hook``), in which case every
      launch takes Triton's own compiled-kernel runner, hooks included.

    In the interpreter, and on Triton versions other than :attr:`FAST_PATH_TRITON`, every
    launch takes the ordinary path. Call it like the kernel:
    ``launcher(grid, *tensor_and_runtime_args, CONST=..., num_warps=...)``, with every constexpr
    passed by keyword.
    """

    FAST_PATH_TRITON = ("3.6.",)
    """Triton versions whose compiled-kernel launch convention this was checked against on a GPU
    (``tests/test_kernel_utils.py``). Other versions launch the ordinary way."""

    def __init__(self, kernel):
        self.kernel = kernel
        self._compiled: dict = {}

    @staticmethod
    def key(args: tuple, kwargs: dict) -> tuple:
        """The cache key of one launch: the runtime arguments' specializations, and the constexpr
        values and launch options *as they are* (every distinct value compiles its own binary)."""
        return _runtime_args(args)[0], tuple(kwargs.items())

    def __call__(self, grid: tuple, *args, **kwargs) -> None:
        if not _fast_path_available():
            self.kernel[grid](*args, **kwargs)
            return
        device = torch._C._cuda_getDevice()  # Triton launches on the current device, as here
        specializations, values = _runtime_args(args)
        key = (device, specializations, tuple(kwargs.items()))
        entry = self._compiled.get(key)
        if entry is None:  # first launch of this specialization: compile (or fetch) through Triton
            compiled = self.kernel[grid](*args, **kwargs)
            self._compiled[key] = _LaunchEntry(compiled, [kwargs[name] for name in self.kernel.arg_names[len(args):]])
            return
        grid3 = (*grid, 1, 1) if len(grid) < 3 else grid  # the launcher reads three grid dimensions
        stream = torch._C._cuda_getCurrentRawStream(device)
        if entry.launch is None or _launch_hooks_registered():
            entry.compiled[grid3](*args, *entry.constexprs, stream=stream)  # Triton's runner, hooks and all
            return
        entry.launch(grid3[0], grid3[1], grid3[2], stream, entry.function, entry.cooperative, entry.pdl,
                     None, None, entry.packed_metadata, None, None, None, *values, *entry.constexprs)  # fmt: skip


class _LaunchEntry:
    """What a direct launch of one compiled kernel needs, read once from Triton's objects."""

    __slots__ = ("compiled", "constexprs", "launch", "function", "packed_metadata", "cooperative", "pdl")

    def __init__(self, compiled, constexprs: list):
        self.compiled = compiled
        self.constexprs = tuple(constexprs)  # in declaration order, as the C launcher takes them
        runner = compiled.run  # triton's CudaLauncher (loads the binary on first access)
        self.function = compiled.function
        self.packed_metadata = compiled.packed_metadata
        self.cooperative = getattr(runner, "launch_cooperative_grid", None)
        self.pdl = getattr(runner, "launch_pdl", None)
        # Kernels that need global or profiler scratch memory get it allocated per launch by
        # Triton's Python wrapper: those keep going through it (self.launch = None).
        simple = (
            getattr(runner, "global_scratch_size", 1) == 0
            and getattr(runner, "profile_scratch_size", 1) == 0
            and self.cooperative is not None
            and self.pdl is not None
        )
        self.launch = getattr(runner, "launch", None) if simple else None


def _launch_hooks_registered() -> bool:
    """True when someone (a profiler such as Proton) registered Triton launch hooks."""
    runtime_knobs = triton.knobs.runtime
    for hook in (runtime_knobs.launch_enter_hook, runtime_knobs.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):  # an empty HookChain means none
            return True
    return False


@functools.lru_cache(maxsize=None)
def _triton_version() -> str:
    return str(getattr(triton, "__version__", ""))


@functools.lru_cache(maxsize=None)
def _fast_path_available() -> bool:
    """Compiled kernels (not the interpreter, which is decided once, at import) on a Triton
    version this launcher was checked against, with the raw CUDA calls it uses."""
    return (
        not _triton.INTERPRETING
        and _triton_version().startswith(CachedLauncher.FAST_PATH_TRITON)
        and hasattr(torch._C, "_cuda_getCurrentRawStream")
        and hasattr(torch._C, "_cuda_getDevice")
    )
