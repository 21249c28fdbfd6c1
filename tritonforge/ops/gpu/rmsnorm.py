"""RMSNorm's GPU fast path: a row longer than one program's block held by several programs at once.

The learner's forward (:mod:`tritonforge.ops.rmsnorm`, chapter 3) reads a long row twice: the sum of
squares, then the normalized row (from L2 where it can). On a GPU, where there are enough rows to
give every SM a program, each program of a row instead holds its chunk in registers, publishes its
chunk's sum of squares, waits for the row's other programs (:mod:`tritonforge.ops.gpu.coop`: the
assumption it rests on), and writes its chunk: the row is read once. Never in the interpreter.
"""

from __future__ import annotations

from typing import Optional

import torch

from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, cast_for_store, round_bf16_by_hand
from tritonforge.ops.gpu.coop import (
    COOP_WARPS,
    RowsLaunch,
    coop_chunk,
    coop_counters,
    coop_splits,
    coop_words,
    flagged,
    publish_and_wait,
    row_barrier,
    widen_bf16,
    word_lo,
)


@triton.jit
def _rms_norm_fwd_coop_kernel(
    x_ptr, weight_ptr, y_ptr, rstd_ptr, x_row_stride, y_row_stride, N, eps_hi, eps_lo,  # as the one-row kernel
    part_ptr,  # *[M, SPLITS] ACC_DTYPE: each chunk's sum of squares
    count_ptr,  # *[M] int32, zeroed: each row's arrivals (coop.row_barrier)
    M,  # rows
    SPLITS: tl.constexpr,  # programs per row: cdiv(N, CHUNK); constexpr (softmax, fp32 4096 x 131072: 1118 us, a runtime SPLITS 1244)
    CHUNK: tl.constexpr,  # elements each program holds in registers
    SPLITS_P2: tl.constexpr,  # next power of two of SPLITS
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    STORE_RSTD: tl.constexpr,
    KEEP16: tl.constexpr,  # bf16 x: hold the 16-bit chunk across the barrier (coop.widen_bf16)
    EVEN_N: tl.constexpr = False,  # N a multiple of CHUNK: no masks
    FLAGS: tl.constexpr = False,  # float32: part_ptr is *[M, SPLITS] int64, zeroed (coop.publish_and_wait); count_ptr unused
    PERSISTENT: tl.constexpr = False,  # the grid a cooperative launch holds resident, each program looping over rows (coop.RowsLaunch)
):
    """Program (row, chunk) of a row too long for one program: the chunk's sum of squares, the
    row's barrier, the row's rstd from all partial sums (one fixed order: every program gets the
    same rstd), then this chunk of y from registers: x is read once. What a program holds across
    the barrier decides how many fit an SM, so it holds as little as it can: the weight's chunk is
    loaded after the wait (from L2: every row reads the same weight), and a bf16 chunk stays 16-bit
    (benchmarks/NOTES.md, "2026-12-01 (later), issue 13: what a cooperative program holds across its
    barrier")."""
    pid = tl.program_id(0)
    if PERSISTENT:
        for row in range(pid // SPLITS, M, tl.num_programs(0) // SPLITS):
            _rms_norm_fwd_coop_row(x_ptr, weight_ptr, y_ptr, rstd_ptr, x_row_stride, y_row_stride, N, eps_hi, eps_lo, part_ptr, count_ptr,
                                   row.to(tl.int64), pid % SPLITS, SPLITS, CHUNK, SPLITS_P2, ACC_DTYPE, ROUND_BF16, STORE_RSTD, KEEP16,
                                   EVEN_N, FLAGS)  # fmt: skip
    else:
        _rms_norm_fwd_coop_row(x_ptr, weight_ptr, y_ptr, rstd_ptr, x_row_stride, y_row_stride, N, eps_hi, eps_lo, part_ptr, count_ptr,
                               (pid // SPLITS).to(tl.int64), pid % SPLITS, SPLITS, CHUNK, SPLITS_P2, ACC_DTYPE, ROUND_BF16, STORE_RSTD,
                               KEEP16, EVEN_N, FLAGS)  # fmt: skip


@triton.jit
def _rms_norm_fwd_coop_row(x_ptr, weight_ptr, y_ptr, rstd_ptr, x_row_stride, y_row_stride, N, eps_hi, eps_lo, part_ptr, count_ptr, row,
                           split, SPLITS: tl.constexpr, CHUNK: tl.constexpr, SPLITS_P2: tl.constexpr, ACC_DTYPE: tl.constexpr,
                           ROUND_BF16: tl.constexpr, STORE_RSTD: tl.constexpr, KEEP16: tl.constexpr, EVEN_N: tl.constexpr,
                           FLAGS: tl.constexpr):  # fmt: skip
    """Program ``split`` of row ``row``: :func:`_rms_norm_fwd_coop_kernel`'s work on one row."""
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = None if EVEN_N else cols < N
    x_in = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=None if EVEN_N else 0.0)
    x = x_in.to(ACC_DTYPE)
    parts = tl.arange(0, SPLITS_P2)
    if FLAGS:  # the chunk's sum of squares is its word
        words = publish_and_wait(part_ptr + row * SPLITS, split, flagged(tl.sum(x * x, axis=0)), SPLITS, SPLITS_P2)
        sum_sq = tl.sum(tl.where(parts < SPLITS, word_lo(words), 0.0), axis=0)
    else:
        tl.store(part_ptr + row * SPLITS + split, tl.sum(x * x, axis=0))
        row_barrier(count_ptr + row, SPLITS)
        sum_sq = tl.sum(tl.load(part_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True), axis=0)
    if KEEP16:
        x = widen_bf16(x_in)
    w = tl.load(weight_ptr + cols, mask=mask, other=None if EVEN_N else 0.0, eviction_policy="evict_last").to(ACC_DTYPE)
    rstd = 1.0 / tl.sqrt(sum_sq / N + (tl.cast(eps_hi, ACC_DTYPE) + tl.cast(eps_lo, ACC_DTYPE)))
    x_hat = cast_for_store(x * rstd, x_ptr.dtype.element_ty, ROUND_BF16).to(ACC_DTYPE)
    tl.store(y_ptr + row * y_row_stride + cols, cast_for_store(x_hat * w, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)
    if STORE_RSTD:
        if split == 0:
            tl.store(rstd_ptr + row, rstd)


def chunk(dtype: torch.dtype) -> int:
    """Elements each program holds: ``coop.coop_chunk``, doubled for bf16, whose chunk stays 16-bit
    across the barrier (64 elements a thread at 8 warps; faster at rows of 64K-128K on the H200:
    benchmarks/NOTES.md, "2026-12-01 (later), issue 13: what a cooperative program holds across its
    barrier")."""
    return 2 * coop_chunk(dtype) if dtype == torch.bfloat16 else coop_chunk(dtype)


def unmasked(dtype: torch.dtype, N: int) -> bool:
    """Whether the forward drops its masks (``EVEN_N``): bf16 rows a whole number of chunks (float32
    lost with it on the H200: benchmarks/NOTES.md, "2026-12-02, issue 13: a bf16 program is short of
    instructions, not of registers")."""
    return dtype == torch.bfloat16 and N % chunk(dtype) == 0


def row_splits(M: int, N: int, dtype: torch.dtype, sms: Optional[int]) -> int:
    """Programs per row of ``M`` rows of ``N`` (``coop.coop_splits``'s conditions: a GPU, enough rows),
    or 0."""
    return coop_splits(M, N, dtype, sms, chunk(dtype))


def forward(x_rows, weight, y_rows, rstd, eps_hi: float, eps_lo: float, splits: int, save_rstd: bool) -> None:
    """Launch the cooperative forward: ``y_rows`` (and ``rstd`` when ``save_rstd``) from ``x_rows``."""
    M, N = x_rows.shape
    flags = x_rows.dtype != torch.float64  # float32 partials: each program's is its word (publish_and_wait)
    parts = coop_words(M, splits, x_rows.device) if flags else torch.empty(M, splits, dtype=torch.float64, device=x_rows.device)
    RowsLaunch(
        _rms_norm_fwd_coop_kernel, M, splits, SPLITS=splits, CHUNK=chunk(x_rows.dtype), SPLITS_P2=triton.next_power_of_2(splits),
        ACC_DTYPE=acc_dtype(x_rows.dtype), ROUND_BF16=round_bf16_by_hand(x_rows.dtype), STORE_RSTD=save_rstd,
        KEEP16=x_rows.dtype == torch.bfloat16, EVEN_N=unmasked(x_rows.dtype, N), FLAGS=flags, num_warps=COOP_WARPS,
    )(x_rows, weight, y_rows, rstd if save_rstd else y_rows, x_rows.stride(0), y_rows.stride(0), N, eps_hi, eps_lo,
      parts, parts if flags else coop_counters(M, x_rows.device))  # fmt: skip
