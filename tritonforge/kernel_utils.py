"""Small pieces shared by the kernels: rounding on store, accumulator dtypes.

Every kernel in the package follows the same dtype discipline: load, upcast to float32 (float64
for float64 inputs), compute, and round to the output dtype only at ``tl.store``. The helpers
here make that one call each.
"""

from __future__ import annotations

import math
import struct
from typing import Optional

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
    program issues the instructions a float32 one does for half the bytes, so they count: H200,
    Triton 3.6, the cooperative softmax 576 -> 480 SASS instructions a program of 8192, bf16
    4096 x 131072 654.7 -> 634.8 us, 64 x 262144 26.1 -> 25.2 (benchmarks/experiments/coop-exp-nvidia-h200-2026-12-02.json);
    float32 lost (1084.2 -> 1104.6) and keeps ``tl.exp``.
    Not ``x * log2(e) - m * log2(e)`` in one multiply-add: the rounded ``m * log2(e)`` would put
    an error of |m| 2^-24 in every exponent."""
    if DTYPE.primitive_bitwidth == 16:
        return tl.exp2((x - m) * LOG2E)
    return tl.exp(x - m)


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


# ----------------------------------------------------------------------------------------------
# Cooperative rows: a row too long for one program's registers, held by several programs
# ----------------------------------------------------------------------------------------------

COOP_CHUNK = 8192
"""Elements of a row each program of a cooperative row holds in registers (float64: half).
Measured on the H200 (benchmarks/experiments/long-rows-nvidia-h200-2026-11-30.json): 8192 with
8 warps was the best or within 2% of it for softmax, its backward and RMSNorm, bf16 and float32,
rows of 32K-128K; 1024 (too many partials) and 16384-32768 (too few programs) were slower. RMSNorm's
bf16 forward, whose chunk stays 16-bit across the barrier, takes twice this
(``rmsnorm.fwd_coop_chunk``)."""

COOP_WARPS = 8
"""Warps of a cooperative program: the backward's and RMSNorm's. The softmax forward, which holds
one exponential an element since, runs 4 (``softmax.COOP_FWD_WARPS``)."""

COOP_MAX_SPLITS = 128
"""Most programs one row is cut into (rows up to 1M elements; longer rows take the two-pass loop)."""


@triton.jit
def row_barrier(
    count_ptr,  # *int32: the row's arrival counter, zero before the launch
    SPLITS,  # programs of the row
    RESET: tl.constexpr = False,  # count out again after the wait; the last one out zeroes the counter
):
    """Arrive at the row's counter, then wait until all ``SPLITS`` programs of the row have.
    The cooperative kernels use it for float64 only: float32 partials are their own arrival flags
    (:func:`publish_and_wait`, one round trip to L2 after the wait instead of two).

    The release of the arrival makes this program's earlier stores (its partial statistic) visible
    to whoever acquires the counter after it; the acquire of the spin makes every sibling's visible
    here (read them with ``volatile=True``: past L1). It relies on the programs of a row being
    resident together: they are consecutive program ids, the GPU dispatches in order, and a row is
    far fewer programs than the GPU holds at once (the forward-progress assumption of decoupled
    look-back scans). Never on the interpreter: it runs programs one after another, and the first
    would wait forever.

    ``RESET``: each program counts out again after its wait, and the last one out sets the counter
    back to zero, so that counters kept between launches need no memset. Measured and not used
    (H200, benchmarks/experiments/coop-floor-nvidia-h200-2026-12-02.json): the memset is a graph
    node of about 1 us, the second atomic a program costs more (a bf16 barrier copy of 4096 x
    131072: 594.7 -> 634.1 us; softmax 64 x 131072 11.5 -> 12.0), and counters shared between
    launches would be one more thing for streams and graph capture to get wrong."""
    tl.atomic_add(count_ptr, 1, sem="release")
    while tl.atomic_add(count_ptr, 0, sem="acquire") < SPLITS:
        pass
    if RESET:  # the counter reaches 2 SPLITS only when every program of the row has left the spin
        if tl.atomic_add(count_ptr, 1, sem="relaxed") == 2 * SPLITS - 1:
            tl.atomic_xchg(count_ptr, 0, sem="relaxed")


@triton.jit
def publish_and_wait(
    words_ptr,  # *int64 [SPLITS]: the row's words, zero before the launch
    split,  # this program's index in the row
    word,  # int64: this program's partial statistic, never zero (pack_floats, flagged)
    SPLITS: tl.constexpr,
    SPLITS_P2: tl.constexpr,  # next power of two of SPLITS
):
    """Write this program's partial into its word of the row, then read the row's words until none
    is zero, and return them (``[SPLITS_P2]``; the words past ``SPLITS`` read as 1).

    The words the program waits on are the partials it needs: one round trip to L2 after the
    wait where :func:`row_barrier` takes two (the counter, then the partials), while the program
    holds its chunk. A 64-bit atomic access is single-copy atomic, so a reader sees a whole word or
    zero, and nothing else rides on the word: relaxed order is enough. The words are read by atomic
    adds of 0 (volatile loads, one per thread, were slower). H200, device time
    (benchmarks/experiments/coop-flags-nvidia-h200-2026-12-02.json), against the counter: softmax bf16
    4096 x 131072 617.8 -> 553.4 us, float32 1072.2 -> 1039.8; the backward bf16 64 x 131072 16.8 ->
    15.4; RMSNorm bf16 4096 x 65536 291.5 -> 264.1, float32 563.9 -> 527.1. The same residency
    assumption as :func:`row_barrier`; never on the interpreter but for rows of one program."""
    tl.atomic_xchg(words_ptr + split, word, sem="relaxed")
    parts = tl.arange(0, SPLITS_P2)
    live = parts < SPLITS
    words = tl.where(live, tl.atomic_add(words_ptr + parts, 0, mask=live, sem="relaxed"), 1)
    while tl.sum((words == 0).to(tl.int32), axis=0) > 0:
        words = tl.where(live, tl.atomic_add(words_ptr + parts, 0, mask=live, sem="relaxed"), 1)
    return words


@triton.jit
def pack_floats(lo, hi):
    """Two float32 scalars as one int64 word, ``lo`` in the low half: not zero unless both are +0."""
    return (lo.to(tl.uint32, bitcast=True).to(tl.uint64) | (hi.to(tl.uint32, bitcast=True).to(tl.uint64) << 32)).to(tl.int64, bitcast=True)


@triton.jit
def flagged(value):
    """A float32 scalar as one int64 word: its bits in the low half, 1 in the high half (never zero)."""
    return (value.to(tl.uint32, bitcast=True).to(tl.uint64) | (1 << 32)).to(tl.int64, bitcast=True)


@triton.jit
def word_lo(words):
    """The float32 in the low half of each int64 word."""
    return (words.to(tl.uint64, bitcast=True) & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True)


@triton.jit
def word_hi(words):
    """The float32 in the high half of each int64 word."""
    return (words.to(tl.uint64, bitcast=True) >> 32).to(tl.uint32).to(tl.float32, bitcast=True)


def coop_words(M: int, splits: int, device: torch.device) -> torch.Tensor:
    """The rows' words for :func:`publish_and_wait`: zeroed for every launch (a memset)."""
    return torch.zeros(M, splits, dtype=torch.int64, device=device)


def coop_splits(M: int, N: int, dtype: torch.dtype, sms: Optional[int], chunk: Optional[int] = None) -> int:
    """How many programs hold each row on the cooperative path (chunks of ``chunk`` elements,
    :func:`coop_chunk` by default), or 0 where it does not apply:
    off a GPU (``sms`` None: ``runtime.gpu_sm_count``), for rows longer than ``COOP_MAX_SPLITS`` chunks
    or than one chunk per SM (so that a row's programs always fit the GPU at once, whatever else
    runs: a T4's 40 SMs take rows up to 40 chunks), or where ``M`` rows would make fewer programs
    than the GPU has SMs (a few long rows: the split path's two kernels spread them better), and
    for rows of one chunk (a row one program holds needs no barrier)."""
    if sms is None:
        return 0
    splits = triton.cdiv(N, chunk or coop_chunk(dtype))
    return splits if 2 <= splits <= min(COOP_MAX_SPLITS, sms) and M * splits >= sms else 0


@triton.jit
def widen_bf16(x):
    """bf16 -> float32 by moving the bits up: exact, and a different instruction sequence from
    ``x.to(tl.float32)``. A cooperative program that widens its chunk once for its partial statistic
    and again after the barrier this way holds only the 16-bit chunk across the wait (the compiler
    cannot merge the two conversions and keep the float32 copy alive): half the registers, more
    programs per SM (H200, RMSNorm bf16: 61 -> 38 registers a thread with the weight loaded after
    the barrier; benchmarks/experiments/coop-registers-nvidia-h200-2026-12-01.json)."""
    return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def bf16_pair_lo(words):
    """The first bf16 of each ``uint32`` word (two bf16 of a row, little-endian), as float32: exact."""
    return (words << 16).to(tl.float32, bitcast=True)


@triton.jit
def bf16_pair_hi(words):
    """The second bf16 of each ``uint32`` word, as float32: exact."""
    return (words & 0xFFFF0000).to(tl.float32, bitcast=True)


@triton.jit
def bf16_pair(lo, hi, ROUND_BF16: tl.constexpr):
    """Two float32 blocks rounded to bf16 (nearest even, as :func:`cast_for_store`) as one block of
    ``int32`` words, ``lo`` in the first half: the inverse of :func:`bf16_pair_lo` / :func:`bf16_pair_hi`."""
    lo16 = cast_for_store(lo, tl.bfloat16, ROUND_BF16).to(tl.uint16, bitcast=True).to(tl.uint32)
    hi16 = cast_for_store(hi, tl.bfloat16, ROUND_BF16).to(tl.uint16, bitcast=True).to(tl.uint32)
    return (lo16 | (hi16 << 16)).to(tl.int32, bitcast=True)


@triton.jit
def opaque_u32(words):
    """``words`` through a ``mov`` the compiler cannot see into (GPU only: inline PTX). A cooperative
    program holds packed words across its barrier and widens them again after it; without this the
    compiler sees that the widened halves are the ones from before the barrier and keeps those
    alive instead, in float32: twice the registers (H200, softmax backward at chunks of 8192: 80
    registers a thread against 48; benchmarks/experiments/coop-packed-nvidia-h200-2026-12-01.json)."""
    return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [words], dtype=tl.uint32, is_pure=False, pack=1)


def packs_bf16_rows(*rows: torch.Tensor) -> bool:
    """Whether ``[M, N]`` bf16 row views can be read as ``int32`` words, two elements each (an even
    ``N``, unit column stride, even row strides and offsets): what the packed cooperative kernels need."""
    return all(
        t.dtype == torch.bfloat16 and t.dim() == 2 and t.shape[1] % 2 == 0 and t.stride(1) == 1
        and t.stride(0) % 2 == 0 and t.storage_offset() % 2 == 0
        for t in rows
    )  # fmt: skip


def coop_chunk(dtype: torch.dtype) -> int:
    return COOP_CHUNK // 2 if dtype == torch.float64 else COOP_CHUNK


def coop_counters(M: int, device: torch.device) -> torch.Tensor:
    """The rows' arrival counters for :func:`row_barrier`: zeroed for every launch (a memset)."""
    return torch.zeros(M, dtype=torch.int32, device=device)
