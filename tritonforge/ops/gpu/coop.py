"""Cooperative rows: a row too long for one program's registers, held by several programs at once.

Each program of a row loads its chunk once, computes a partial statistic (a max and a sum, a sum of
squares, a dot product), publishes it, waits for the row's other programs, combines all partials in
one fixed order and writes its chunk from registers: the row is read once where the learner's loop
(chapter 6's online softmax, chapter 3's two passes) reads it twice. The wait is the price, and its
safety rests on one assumption: **every program of a row is resident on the GPU at once**. A
program waits on its siblings, later program ids included, so a row whose programs could not all
run together would wait forever (a deadlock). An ordinary CUDA launch does not promise co-residency,
so the kernels are launched cooperatively (:class:`RowsLaunch`; Triton's ``launch_cooperative_grid=True``:
the driver runs the whole grid at once or refuses the launch), over as many row groups as the GPU
holds at once, each program looping over rows: the co-residency is then the driver's guarantee.
The price, measured on the H200, is the ordinary launch's speed at many rows (the looping programs
lose to the hardware's own replacement of programs that exit; less or nothing at few rows); the
plan still beats every path without cooperative rows (benchmarks/NOTES.md, "2026-12-04 (session
18), issue 32: the cooperative rows' cooperative launch").
:data:`COOPERATIVE_LAUNCH` = False takes the ordinary launch, one program per (row, chunk), which
rests on an assumption: rows far fewer programs than the GPU holds (``coop_splits``) and the GPU
starting programs in order, as decoupled look-back scans assume, though stronger (a program waits
on later siblings too); a kernel spinning on another stream (a collective, another cooperative
row) can break it. Never on the interpreter: it runs programs one after another.

The numbers behind every choice here are in ``benchmarks/NOTES.md`` (the sections of issue 13);
the thresholds are the table :mod:`tritonforge.ops.gpu.thresholds`.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Optional

import torch

from tritonforge import hardware, launches
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import cast_for_store
from tritonforge.ops.gpu.thresholds import THRESHOLDS

COOP_CHUNK = THRESHOLDS["COOP_CHUNK"].value
COOP_WARPS = THRESHOLDS["COOP_WARPS"].value
COOP_MAX_SPLITS = THRESHOLDS["COOP_MAX_SPLITS"].value


@triton.jit
def row_barrier(
    count_ptr,  # *int32: the row's arrival counter, zero before the launch
    SPLITS,  # programs of the row
):
    """Arrive at the row's counter, then wait until all ``SPLITS`` programs of the row have.
    The cooperative kernels use it for float64 only: float32 partials are their own arrival flags
    (:func:`publish_and_wait`, one round trip to L2 after the wait instead of two).

    The release of the arrival makes this program's earlier stores (its partial statistic) visible
    to whoever acquires the counter after it; the acquire of the spin makes every sibling's visible
    here (read them with ``volatile=True``: past L1). It needs the programs of a row resident
    together: :class:`RowsLaunch`'s cooperative launch guarantees it (the ordinary launch assumes
    it: this module's docstring). Never on the interpreter: it runs programs one after another, and the first
    would wait forever. (Counting out again so that the counters need no memset was measured and
    dropped: benchmarks/NOTES.md, "2026-12-02 (later), issue 13: what a cooperative row costs before
    any softmax".)"""
    tl.atomic_add(count_ptr, 1, sem="release")
    while tl.atomic_add(count_ptr, 0, sem="acquire") < SPLITS:
        pass


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
    adds of 0 (volatile loads, one per thread, were slower). Faster than the counter for every
    cooperative kernel on the H200 (benchmarks/NOTES.md, "2026-12-02 (later), issue 13: what a
    cooperative row costs before any softmax"). The same residency assumption as
    :func:`row_barrier`; never on the interpreter but for rows of one program."""
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
    off a GPU (``sms`` None: ``hardware.gpu_sm_count``), for rows longer than ``COOP_MAX_SPLITS`` chunks
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
    programs per SM (benchmarks/NOTES.md, "2026-12-01 (later), issue 13: what a cooperative program
    holds across its barrier")."""
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
    alive instead, in float32: twice the registers (benchmarks/NOTES.md, "2026-12-01 (night), issue
    13: bf16 held as packed words")."""
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


# ----------------------------------------------------------------------------------------------
# The launch: cooperative (the whole grid resident, or the driver refuses), or the ordinary one
# ----------------------------------------------------------------------------------------------

COOPERATIVE_LAUNCH = True
"""False: the ordinary launch, one program per (row, chunk): faster at many rows on a GPU nothing else
runs on, resting on the assumption in this module's docstring (the experiments' switch too)."""


class RowsLaunch:
    """A cooperative kernel's launch over ``M`` rows of ``splits`` programs each; call it with the
    kernel's arguments up to ``M`` (positionally), as :func:`tritonforge.launches.bound_launch`.

    With :data:`COOPERATIVE_LAUNCH` (the default), the launch is Triton's cooperative one
    (``launch_cooperative_grid=True``: the driver runs the whole grid at once or refuses the launch,
    so a program's siblings are resident and its wait ends) over as many row groups as the GPU holds
    at once (:func:`resident_programs`), each program looping over rows ``group, group + groups, ...``
    (the kernels' ``PERSISTENT``). Otherwise one program per (row, chunk), the ordinary launch,
    which rests on the residency assumption in this module's docstring. The grid is fixed at the
    first call, from the compiled kernel's registers and shared memory."""

    def __init__(self, kernel, M: int, splits: int, **options):
        self.kernel, self.M, self.splits, self.options = kernel, M, splits, options
        self._bound = None

    def __call__(self, *args) -> None:
        if self._bound is None:
            if COOPERATIVE_LAUNCH:
                options = dict(self.options, PERSISTENT=True, launch_cooperative_grid=True)
                resident = resident_programs(self.kernel.warmup(*args, self.M, grid=(1,), **options))
                groups = min(self.M, resident // self.splits)
                if groups < 1:
                    raise RuntimeError(f"a cooperative row of {self.splits} programs does not fit the GPU at once "
                                       f"({resident} programs of this kernel are resident)")  # fmt: skip
            else:
                options, groups = dict(self.options, PERSISTENT=False), self.M
            self._bound = launches.bound_launch(self.kernel, (groups * self.splits,), **options)
        self._bound(*args, self.M)


@functools.lru_cache(maxsize=256)
def resident_programs(compiled) -> int:
    """How many programs of ``compiled`` (a :class:`triton.compiler.CompiledKernel`) the GPU holds
    at once: its SMs times the driver's own count for one SM (``cuOccupancyMaxActiveBlocksPerMultiprocessor``,
    from the kernel's registers, shared memory and warps): the most a cooperative launch accepts."""
    compiled._init_handles()
    blocks = ctypes.c_int()
    threads = compiled.metadata.num_warps * 32
    error = _libcuda().cuOccupancyMaxActiveBlocksPerMultiprocessor(
        ctypes.byref(blocks), ctypes.c_void_p(compiled.function), ctypes.c_int(threads), ctypes.c_size_t(compiled.metadata.shared))
    if error:
        raise RuntimeError(f"cuOccupancyMaxActiveBlocksPerMultiprocessor failed with CUresult {error}")
    return blocks.value * hardware.sm_count(torch.cuda.current_device())


@functools.lru_cache(maxsize=1)
def _libcuda() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")
