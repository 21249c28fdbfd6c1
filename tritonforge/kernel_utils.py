"""Small pieces shared by the kernels: rounding on store, accumulator dtypes.

Every kernel in the package follows the same dtype discipline: load, upcast to float32 (float64
for float64 inputs), compute, and round to the output dtype only at ``tl.store``. The helpers
here make that one call each.
"""

from __future__ import annotations

import functools

import torch

from tritonforge import runtime
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


def _specialization(value: object) -> tuple:
    """What Triton's JIT specializes a compiled kernel on, for one argument.

    Triton compiles one binary per combination of: each pointer's dtype and whether its address
    is a multiple of 16 bytes (16-byte vector loads need it); each integer's width (i32 / i64 /
    u64), whether it equals 1 and whether it is a multiple of 16; the value of every constexpr;
    and the launch options. Floats are not specialized. This tuple records exactly those
    properties, so two calls with equal tuples can share one binary.
    """
    if isinstance(value, torch.Tensor):
        return ("ptr", value.dtype, value.data_ptr() % 16 == 0)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        width = "i32" if -(2**31) <= value < 2**31 else ("i64" if -(2**63) <= value < 2**63 else "u64")
        return ("int", width, value == 1, value % 16 == 0)
    if isinstance(value, float):
        return ("float",)
    return ("value", value)  # anything else (None, a dtype) is passed through as itself


class CachedLauncher:
    """Launch a ``@triton.jit`` kernel with less host time than ``kernel[grid](...)``.

    ``kernel[grid](...)`` re-binds and re-specializes every argument and hashes the result on
    every call: on triton 3.6 that costs tens of microseconds of Python per launch — longer than
    a decode-sized RMSNorm runs on the GPU (about 3 µs on an H200). Here the specialization is
    computed directly (:func:`_specialization`), the compiled kernel that the first launch
    produced is kept per specialization, and later launches go straight to it through Triton's
    own ``CompiledKernel[grid](*args)``. In the interpreter every launch takes the ordinary
    path (nothing is compiled there).

    Call it like the kernel: ``launcher(grid, *tensor_and_runtime_args, CONST=..., num_warps=...)``,
    with every constexpr passed by keyword.
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
        return tuple(_specialization(a) for a in args), tuple(kwargs.items())

    def __call__(self, grid: tuple, *args, **kwargs) -> None:
        if runtime.interpreting() or not _triton_version().startswith(self.FAST_PATH_TRITON):
            self.kernel[grid](*args, **kwargs)
            return
        key = (torch.cuda.current_device(), *self.key(args, kwargs))
        compiled = self._compiled.get(key)
        if compiled is None:  # first launch of this specialization: compile (or fetch) through Triton
            self._compiled[key] = self.kernel[grid](*args, **kwargs)
            return
        # Every parameter in declaration order, constexprs included, as Triton's launcher takes them.
        constexprs = [kwargs[name] for name in self.kernel.arg_names[len(args):]]
        grid3 = (tuple(grid) + (1, 1))[:3]  # CompiledKernel's runner reads three grid dimensions
        compiled[grid3](*args, *constexprs, stream=torch.cuda.current_stream().cuda_stream)


@functools.lru_cache(maxsize=None)
def _triton_version() -> str:
    return str(getattr(triton, "__version__", ""))
