"""Small pieces shared by the kernels: rounding on store, accumulator dtypes, row views.

Every kernel in the package follows the same dtype discipline: load, upcast to float32 (float64
for float64 inputs), compute, and round to the output dtype only at ``tl.store``. The helpers
here make that one call each. (What only the GPU's fast paths need, the cooperative rows'
barriers and packed words, lives in :mod:`tritonforge.ops.gpu.coop`.)
"""

from __future__ import annotations

import math
import struct

import torch

from tritonforge import hardware
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
    if ROUND_BF16:  # constexpr: compiled only in the interpreter
        if DTYPE == tl.bfloat16:  # (a float32 output, e.g. beside an fp32 weight, is not rounded)
            bits = value.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            value = tl.where(value != value, value, bits.to(tl.float32, bitcast=True))
    return value.to(DTYPE)


LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def exp_shifted(
    x,  # float32/float64 block
    m,  # what to subtract (a max): x - m <= 0
    DTYPE: tl.constexpr,  # the element type the result is rounded to in the end
):
    """``exp(x - m)`` for a result rounded to ``DTYPE`` in the end. ``tl.exp`` is ``ex2.approx.f32``
    of ``(x - m) * log2(e)``, whose subnormal-preserving form costs three more instructions an
    element; for 16-bit ``DTYPE`` this takes ``tl.exp2`` of the same product instead
    (``ex2.approx.ftz.f32``): the same rounding, but an ``e`` below 2^-126 flushes to zero. No fp16
    result is that small; a bf16 one below 2^-126 (1.2e-38, a bf16 subnormal) becomes 0. A bf16
    program issues the instructions a float32 one does for half the bytes, so they count (measured
    on the H200: benchmarks/NOTES.md, "2026-12-02, issue 13: a bf16 program is short of
    instructions, not of registers"); float32 lost there and keeps ``tl.exp``.
    Not ``x * log2(e) - m * log2(e)`` in one multiply-add: the rounded ``m * log2(e)`` would put
    an error of |m| 2^-24 in every exponent."""
    if DTYPE.primitive_bitwidth == 16:
        return tl.exp2((x - m) * LOG2E)
    return tl.exp(x - m)


def round_bf16_by_hand(dtype: torch.dtype) -> bool:
    """The ``ROUND_BF16`` flag for :func:`cast_for_store`: bf16 output in the interpreter."""
    return dtype == torch.bfloat16 and hardware.interpreting()


def acc_dtype(dtype: torch.dtype):
    """Accumulator dtype: float64 for float64 inputs (so gradcheck passes), float32 otherwise."""
    return tl.float64 if dtype == torch.float64 else tl.float32


def acc_torch_dtype(dtype: torch.dtype) -> torch.dtype:
    """:func:`acc_dtype` as a torch dtype, for the buffers a kernel stores accumulator values in
    (RMSNorm's ``rstd`` and its ``dweight`` partial sums)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


FLOAT32_MAX = 3.4028234663852886e38


def split_float(value: float) -> tuple[float, float]:
    """``(hi, lo)``: ``value`` rounded to float32, and the remainder. A Python float reaches a
    kernel as float32 in Triton's interpreter whatever its annotation, so a float64 scalar
    travels as these two float32 arguments; their sum in float64 carries 48 bits."""
    if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
        # Beyond float32's range (or inf/NaN): the kernel sees +-inf (or NaN), and lo must be 0, not
        # inf - inf = NaN.
        return (value if math.isnan(value) else math.copysign(math.inf, value)), 0.0
    hi = struct.unpack("f", struct.pack("f", value))[0]
    return hi, value - hi


def as_rows(t: torch.Tensor, N: int) -> torch.Tensor:
    """``[..., N] -> [M, N]`` with unit column stride: a view whenever the
    layout allows one."""
    if N > 1 and t.stride(-1) != 1:
        # e.g. a transposed view: the kernels need unit stride along a row
        t = t.contiguous()
    if t.dim() == 2:
        return t
    # a view unless the leading dims cannot share one row stride
    return t.reshape(-1, N)
