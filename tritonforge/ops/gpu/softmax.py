"""The softmax's GPU fast paths: cooperative rows, and several short rows a program.

The learner's softmax (:mod:`tritonforge.ops.softmax`, chapter 6) has three strategies that run
everywhere, the interpreter included: one pass, the online loop, split rows. On a GPU its plan
takes two more where they measured faster, both here:

- **cooperative rows** (:mod:`tritonforge.ops.gpu.coop`): a row longer than one program's block,
  and rows of 16K-32K elements where there are enough of them (``SHORT_COOP_CHUNK``), is held by
  several programs at once, each its chunk in registers; they publish their chunks' states, wait
  for each other, merge the states and write their chunks: the row is read once where the online
  loop reads it twice. The backward likewise with ``<dy, y>``, its bf16 rows held as packed words.
- **two rows a program** for 16-bit rows of 512-2K elements (``ROWS_PER_PROGRAM``).

Every number behind these choices is in :mod:`tritonforge.ops.gpu.thresholds` (with its reason and
its section of ``benchmarks/NOTES.md``). The cooperative kernels never run in the interpreter,
which runs programs one after another (the first would wait forever); the GPU tests and the
sanitizer workload (``scripts/sanitize.sh``) check them on a GPU.
"""

from __future__ import annotations

from typing import Optional

import torch

from tritonforge import launches
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, cast_for_store, exp_shifted, round_bf16_by_hand
from tritonforge.ops.gpu.coop import (
    COOP_WARPS,
    RowsLaunch,
    bf16_pair,
    bf16_pair_hi,
    bf16_pair_lo,
    coop_chunk,
    coop_counters,
    coop_splits,
    coop_words,
    flagged,
    opaque_u32,
    pack_floats,
    packs_bf16_rows,
    publish_and_wait,
    row_barrier,
    word_hi,
    word_lo,
)
from tritonforge.ops.gpu.thresholds import THRESHOLDS

COOP_FWD_WARPS = THRESHOLDS["COOP_FWD_WARPS"].value
SHORT_COOP_CHUNK = THRESHOLDS["SHORT_COOP_CHUNK"].value
SHORT_COOP_FP32_ROWS_PER_SM = THRESHOLDS["SHORT_COOP_FP32_ROWS_PER_SM"].value
ROWS_PER_PROGRAM = THRESHOLDS["ROWS_PER_PROGRAM"].value
ROWS_MIN_WIDTH = THRESHOLDS["ROWS_MIN_WIDTH"].value
ROWS_MAX_WIDTH = THRESHOLDS["ROWS_MAX_WIDTH"].value


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _softmax_fwd_rows_kernel(
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    y_ptr,  # *y [M, N], contiguous, x's dtype
    x_row_stride,
    M,
    N,
    ROWS: tl.constexpr,  # whole rows per program
    BLOCK_N: tl.constexpr,  # >= N
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
):
    """One pass over ``ROWS`` short rows at once, as one ``[ROWS, BLOCK_N]`` block: a 16-bit row of
    1K is 2 KB, too little for one program to keep its SM's memory busy (``ROWS_PER_PROGRAM``)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    r = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + r * x_row_stride + cols[None, :], mask=mask, other=-float("inf")).to(ACC_DTYPE)
    e = exp_shifted(x, tl.max(x, axis=1)[:, None], y_ptr.dtype.element_ty)  # rows past M are all -inf: NaN there, never stored
    y = e * (1.0 / tl.sum(e, axis=1))[:, None]
    tl.store(y_ptr + r * N + cols[None, :], cast_for_store(y, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _row_dot(part, part_ptr, count_ptr, row, split, SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr, FLAGS: tl.constexpr):
    """The row's ``<dy, y>`` from every program's ``part``: with ``FLAGS`` (float32) through
    :func:`~tritonforge.ops.gpu.coop.publish_and_wait` (``part_ptr``: *[M, SPLITS] int64, zeroed;
    ``count_ptr`` unused), else stored to ``part_ptr`` and read after :func:`~tritonforge.ops.gpu.coop.row_barrier`."""
    parts = tl.arange(0, SPLITS_P2)
    if FLAGS:
        words = publish_and_wait(part_ptr + row * SPLITS, split, flagged(part), SPLITS, SPLITS_P2)
        dot = tl.sum(tl.where(parts < SPLITS, word_lo(words), 0.0), axis=0)
    else:
        tl.store(part_ptr + row * SPLITS + split, part)
        row_barrier(count_ptr + row, SPLITS)
        dot = tl.sum(tl.load(part_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True), axis=0)
    return dot


@triton.jit
def _softmax_coop_kernel(
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    y_ptr,  # *y [M, N], contiguous
    part_m_ptr,  # *[M, SPLITS] ACC_DTYPE: each chunk's max
    part_s_ptr,  # *[M, SPLITS] ACC_DTYPE: each chunk's sum of exp(x - max)
    count_ptr,  # *[M] int32, zeroed: each row's arrivals (row_barrier)
    x_row_stride,
    N,
    M,  # rows
    SPLITS: tl.constexpr,  # programs per row: cdiv(N, CHUNK); constexpr (fp32 4096 x 131072: 1118 us, a runtime SPLITS 1244)
    CHUNK: tl.constexpr,  # elements each program holds in registers
    SPLITS_P2: tl.constexpr,  # next power of two of SPLITS (the merge's vector)
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    EVEN_N: tl.constexpr = False,  # N a multiple of CHUNK: no masks
    FLAGS: tl.constexpr = False,  # float32 states: part_m_ptr is *[M, SPLITS] int64, zeroed (publish_and_wait); part_s_ptr, count_ptr unused
    PERSISTENT: tl.constexpr = False,  # the grid a cooperative launch holds resident, each program looping over rows (coop.RowsLaunch)
):
    """Program (row, chunk) of a cooperative row: the chunk's state, the row's barrier, the merge of
    every chunk's state (the same order in every program), then this chunk of y from registers:
    x is read once. The program holds ``e = exp(x - m)`` across the barrier, not x, and scales it
    by the merge rule's own factor: ``y = e * exp(m - m_row) / s_row``, one exponential per
    element instead of two (faster in both dtypes on the H200: benchmarks/NOTES.md, "2026-12-01
    (later), issue 13: what a cooperative program holds across its barrier")."""
    pid = tl.program_id(0)
    if PERSISTENT:  # the whole grid resident (a cooperative launch): rows pid // SPLITS, + groups, ...
        for row in range(pid // SPLITS, M, tl.num_programs(0) // SPLITS):
            _softmax_coop_row(x_ptr, y_ptr, part_m_ptr, part_s_ptr, count_ptr, row.to(tl.int64), pid % SPLITS, x_row_stride, N,
                              SPLITS, CHUNK, SPLITS_P2, ACC_DTYPE, ROUND_BF16, EVEN_N, FLAGS)  # fmt: skip
    else:  # one row a program
        _softmax_coop_row(x_ptr, y_ptr, part_m_ptr, part_s_ptr, count_ptr, (pid // SPLITS).to(tl.int64), pid % SPLITS, x_row_stride,
                          N, SPLITS, CHUNK, SPLITS_P2, ACC_DTYPE, ROUND_BF16, EVEN_N, FLAGS)  # fmt: skip


@triton.jit
def _softmax_coop_row(x_ptr, y_ptr, part_m_ptr, part_s_ptr, count_ptr, row, split, x_row_stride, N, SPLITS: tl.constexpr,
                      CHUNK: tl.constexpr, SPLITS_P2: tl.constexpr, ACC_DTYPE: tl.constexpr, ROUND_BF16: tl.constexpr,
                      EVEN_N: tl.constexpr, FLAGS: tl.constexpr):  # fmt: skip
    """Program ``split`` of row ``row``: :func:`_softmax_coop_kernel`'s work on one row."""
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = None if EVEN_N else cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=None if EVEN_N else -float("inf")).to(ACC_DTYPE)
    m = tl.max(x, axis=0)
    m_ref = tl.where(m == -float("inf"), 0.0, m)  # an all -inf chunk: (-inf, 0), e = 0
    e = exp_shifted(x, m_ref, y_ptr.dtype.element_ty)
    parts = tl.arange(0, SPLITS_P2)
    if FLAGS:  # the chunk's (max, sum) is its word: the sum is >= 1, or the max is -inf (bits not zero)
        words = publish_and_wait(part_m_ptr + row * SPLITS, split, pack_floats(m, tl.sum(e, axis=0)), SPLITS, SPLITS_P2)
        ms = tl.where(parts < SPLITS, word_lo(words), -float("inf"))
        ss = word_hi(words)
    else:
        tl.store(part_m_ptr + row * SPLITS + split, m)
        tl.store(part_s_ptr + row * SPLITS + split, tl.sum(e, axis=0))
        row_barrier(count_ptr + row, SPLITS)
        ms = tl.load(part_m_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=-float("inf"), volatile=True)
        ss = tl.load(part_s_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True)
    m_row = tl.max(ms, axis=0)
    s_row = tl.sum(tl.where(ms == -float("inf"), 0.0, ss * tl.exp(ms - m_row)), axis=0)  # the merge rule
    # An all -inf chunk of a finite row: exp(-inf - m_row) = 0, so its y is 0 (e is 0 there too;
    # exp(m_ref - m_row) could overflow to inf, and 0 * inf is NaN). An all -inf row: m_row = -inf,
    # the factor is NaN and so is y, as torch.softmax.
    y = e * (tl.exp(m - m_row) / s_row)
    tl.store(y_ptr + row * N + cols, cast_for_store(y, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _softmax_bwd_coop_kernel(dy_ptr, y_ptr, dx_ptr, part_ptr, count_ptr, dy_row_stride, N, M, SPLITS: tl.constexpr,
                             CHUNK: tl.constexpr, SPLITS_P2: tl.constexpr, ACC_DTYPE: tl.constexpr, ROUND_BF16: tl.constexpr,
                             FLAGS: tl.constexpr = False, PERSISTENT: tl.constexpr = False):  # fmt: skip
    """Program (row, chunk) of a cooperative row: this chunk's part of ``<dy, y>``, the barrier, the
    row's sum, then ``dx = y * (dy - dot)`` from registers: dy and y read once. ``PERSISTENT``: as
    :func:`_softmax_coop_kernel`'s."""
    pid = tl.program_id(0)
    if PERSISTENT:
        for row in range(pid // SPLITS, M, tl.num_programs(0) // SPLITS):
            _softmax_bwd_coop_row(dy_ptr, y_ptr, dx_ptr, part_ptr, count_ptr, row.to(tl.int64), pid % SPLITS, dy_row_stride, N, SPLITS,
                                  CHUNK, SPLITS_P2, ACC_DTYPE, ROUND_BF16, FLAGS)  # fmt: skip
    else:
        _softmax_bwd_coop_row(dy_ptr, y_ptr, dx_ptr, part_ptr, count_ptr, (pid // SPLITS).to(tl.int64), pid % SPLITS, dy_row_stride, N,
                              SPLITS, CHUNK, SPLITS_P2, ACC_DTYPE, ROUND_BF16, FLAGS)  # fmt: skip


@triton.jit
def _softmax_bwd_coop_row(dy_ptr, y_ptr, dx_ptr, part_ptr, count_ptr, row, split, dy_row_stride, N, SPLITS: tl.constexpr,
                          CHUNK: tl.constexpr, SPLITS_P2: tl.constexpr, ACC_DTYPE: tl.constexpr, ROUND_BF16: tl.constexpr,
                          FLAGS: tl.constexpr):  # fmt: skip
    """Program ``split`` of row ``row``: :func:`_softmax_bwd_coop_kernel`'s work on one row."""
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(ACC_DTYPE)
    y = tl.load(y_ptr + row * N + cols, mask=mask, other=0.0).to(ACC_DTYPE)
    dot = _row_dot(tl.sum(dy * y, axis=0), part_ptr, count_ptr, row, split, SPLITS, SPLITS_P2, FLAGS)
    tl.store(dx_ptr + row * N + cols, cast_for_store(y * (dy - dot), dx_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _softmax_bwd_coop_packed_kernel(
    dy_ptr,  # *int32 [M, NW]: dy's bf16 pairs, row stride dy_row_stride (in words)
    y_ptr,  # *int32 [M, NW]: y's, contiguous
    dx_ptr,  # *int32 [M, NW]: dx's, contiguous
    part_ptr,  # *[M, SPLITS] float32: each chunk's part of <dy, y>
    count_ptr,  # *[M] int32, zeroed: each row's arrivals (row_barrier)
    dy_row_stride,
    NW,  # words a row: N / 2
    M,  # rows
    SPLITS: tl.constexpr,
    WORDS: tl.constexpr,  # words each program holds: half its chunk's elements
    SPLITS_P2: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    FLAGS: tl.constexpr = False,  # as _row_dot's
    PERSISTENT: tl.constexpr = False,  # as _softmax_coop_kernel's
):
    """The cooperative backward for bf16 rows of even length, read as 32-bit words of two elements.
    A program holds its chunks of dy and y across the barrier as loaded, 16 bits an element, and
    widens each half again after it (:func:`~tritonforge.ops.gpu.coop.opaque_u32` keeps the
    compiler from holding the float32 halves instead): fewer registers a thread, so more programs
    fit an SM (benchmarks/NOTES.md, "2026-12-01 (night), issue 13: bf16 held as packed words")."""
    pid = tl.program_id(0)
    if PERSISTENT:
        for row in range(pid // SPLITS, M, tl.num_programs(0) // SPLITS):
            _softmax_bwd_coop_packed_row(dy_ptr, y_ptr, dx_ptr, part_ptr, count_ptr, row.to(tl.int64), pid % SPLITS, dy_row_stride, NW,
                                         SPLITS, WORDS, SPLITS_P2, ROUND_BF16, FLAGS)  # fmt: skip
    else:
        _softmax_bwd_coop_packed_row(dy_ptr, y_ptr, dx_ptr, part_ptr, count_ptr, (pid // SPLITS).to(tl.int64), pid % SPLITS,
                                     dy_row_stride, NW, SPLITS, WORDS, SPLITS_P2, ROUND_BF16, FLAGS)  # fmt: skip


@triton.jit
def _softmax_bwd_coop_packed_row(dy_ptr, y_ptr, dx_ptr, part_ptr, count_ptr, row, split, dy_row_stride, NW, SPLITS: tl.constexpr,
                                 WORDS: tl.constexpr, SPLITS_P2: tl.constexpr, ROUND_BF16: tl.constexpr,
                                 FLAGS: tl.constexpr):  # fmt: skip
    """Program ``split`` of row ``row``: :func:`_softmax_bwd_coop_packed_kernel`'s work on one row."""
    idx = split * WORDS + tl.arange(0, WORDS)
    mask = idx < NW
    dw = tl.load(dy_ptr + row * dy_row_stride + idx, mask=mask, other=0).to(tl.uint32, bitcast=True)
    yw = tl.load(y_ptr + row * NW + idx, mask=mask, other=0).to(tl.uint32, bitcast=True)
    # Each store's address is written before its value: the order the compiler then schedules in
    # (the same kernel with the values first took 59 registers a thread, not 48, and 831 us, not 797).
    part = tl.sum(bf16_pair_lo(dw) * bf16_pair_lo(yw), axis=0) + tl.sum(bf16_pair_hi(dw) * bf16_pair_hi(yw), axis=0)
    dot = _row_dot(part, part_ptr, count_ptr, row, split, SPLITS, SPLITS_P2, FLAGS)
    dw = opaque_u32(dw)
    yw = opaque_u32(yw)
    tl.store(dx_ptr + row * NW + idx, bf16_pair(bf16_pair_lo(yw) * (bf16_pair_lo(dw) - dot), bf16_pair_hi(yw) * (bf16_pair_hi(dw) - dot),
                                                ROUND_BF16), mask=mask)  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Where they run: the plan's GPU choices
# ----------------------------------------------------------------------------------------------


def short_coop_splits(M: int, N: int, dtype: torch.dtype, sms: Optional[int], fit: int) -> int:
    """Programs a row for the forward's rows of 16K-32K elements (one block of ``fit``) in chunks of
    ``SHORT_COOP_CHUNK`` (``coop_splits``'s conditions: a GPU, enough rows), or 0: one program a row."""
    if dtype not in (torch.float16, torch.bfloat16, torch.float32) or sms is None:
        return 0
    if triton.next_power_of_2(max(N, 1)) != fit or (dtype == torch.float32 and M >= SHORT_COOP_FP32_ROWS_PER_SM * sms):
        return 0
    return coop_splits(M, N, dtype, sms, SHORT_COOP_CHUNK)


def cooperative(M: int, N: int, dtype: torch.dtype, sms: Optional[int], fit: int, backward: bool):
    """``(splits, chunk, warps)`` of the cooperative path for these rows, or ``None`` where it does
    not run (off a GPU, too few rows to give every SM a program, rows of one chunk)."""
    width = triton.next_power_of_2(max(N, 1))
    if width <= fit:
        short = 0 if backward else short_coop_splits(M, N, dtype, sms, fit)
        return (short, SHORT_COOP_CHUNK, COOP_FWD_WARPS) if short else None
    splits = coop_splits(M, N, dtype, sms)
    if not splits:
        return None
    return splits, coop_chunk(dtype), COOP_WARPS if backward or dtype == torch.float64 else COOP_FWD_WARPS


def rows_per_program(width: int, dtype: torch.dtype) -> int:
    """Whole rows a forward program takes on a GPU: ``ROWS_PER_PROGRAM`` for 16-bit rows of
    ``ROWS_MIN_WIDTH``-``ROWS_MAX_WIDTH`` (as one block of ``width``), else 1."""
    return ROWS_PER_PROGRAM if dtype.itemsize == 2 and ROWS_MIN_WIDTH <= width <= ROWS_MAX_WIDTH else 1


def coop_unmasked(dtype: torch.dtype, N: int, chunk: int) -> bool:
    """Whether the cooperative forward drops its masks (``EVEN_N``): float32 rows a whole number of
    chunks (bf16 lost with it on the H200: benchmarks/NOTES.md, "2026-12-02, issue 13: a bf16 program
    is short of instructions, not of registers")."""
    return dtype == torch.float32 and N % chunk == 0


# ----------------------------------------------------------------------------------------------
# Launchers (the ops' plan decides; these launch)
# ----------------------------------------------------------------------------------------------

_empty = torch.empty


def forward_launcher(p, M: int, N: int, stride: int, shape: torch.Size, dtype: torch.dtype, device: torch.device):
    """The forward's launch for plan ``p`` (strategy "cooperative", or one pass with ``p.rows`` > 1):
    a function of the rows ``[M, N]`` (row stride ``stride``) that allocates y of ``shape`` and launches."""
    flags = dict(ACC_DTYPE=acc_dtype(dtype), ROUND_BF16=round_bf16_by_hand(dtype))
    if p.strategy != "cooperative":
        kernel = launches.bound_launch(_softmax_fwd_rows_kernel, (triton.cdiv(M, p.rows),), ROWS=p.rows, BLOCK_N=p.block_n,
                                       num_warps=p.num_warps, **flags)  # fmt: skip

        def launch(x):
            y = _empty(*shape, dtype=dtype, device=device)
            kernel(x, y, stride, M, N)
            return y

        return launch
    coop = dict(SPLITS=p.splits, CHUNK=p.chunk, SPLITS_P2=triton.next_power_of_2(p.splits), EVEN_N=coop_unmasked(dtype, N, p.chunk),
                num_warps=p.num_warps, **flags)  # fmt: skip
    if dtype != torch.float64:  # float32 states: each program's (max, sum) is its word (publish_and_wait)
        kernel = RowsLaunch(_softmax_coop_kernel, M, p.splits, FLAGS=True, **coop)

        def launch(x):
            y, words = _empty(*shape, dtype=dtype, device=device), coop_words(M, p.splits, device)
            kernel(x, y, words, words, words, stride, N)
            return y

        return launch
    kernel = RowsLaunch(_softmax_coop_kernel, M, p.splits, **coop)

    def launch(x):
        y = _empty(*shape, dtype=dtype, device=device)
        m, s = _empty(M, p.splits, dtype=torch.float64, device=device), _empty(M, p.splits, dtype=torch.float64, device=device)
        kernel(x, y, m, s, coop_counters(M, device), stride, N)
        return y

    return launch


def backward(p, dy_rows: torch.Tensor, y_rows: torch.Tensor, dx: torch.Tensor) -> None:
    """The cooperative backward for plan ``p`` into ``dx`` (contiguous, y's shape): float64 meets at
    the counter; float32 and 16-bit parts of ``<dy, y>`` are their own words; bf16 rows of even
    length are held as packed words."""
    M, N = y_rows.shape
    coop = dict(SPLITS=p.splits, SPLITS_P2=triton.next_power_of_2(p.splits), ROUND_BF16=round_bf16_by_hand(y_rows.dtype),
                num_warps=p.num_warps)  # fmt: skip
    if y_rows.dtype == torch.float64:  # a float64 part fills a word: no room for a flag, so the counter
        dots = _empty(M, p.splits, dtype=torch.float64, device=y_rows.device)
        RowsLaunch(_softmax_bwd_coop_kernel, M, p.splits, CHUNK=p.chunk, FLAGS=False, ACC_DTYPE=acc_dtype(y_rows.dtype), **coop)(
            dy_rows, y_rows, dx, dots, coop_counters(M, y_rows.device), dy_rows.stride(0), N)
        return
    words = coop_words(M, p.splits, y_rows.device)  # each program's part of <dy, y> is its word (publish_and_wait)
    if packs_bf16_rows(dy_rows, y_rows):  # bf16 rows of even length: held as loaded, two elements a word
        dy_words, y_words = dy_rows.view(torch.int32), y_rows.view(torch.int32)
        RowsLaunch(_softmax_bwd_coop_packed_kernel, M, p.splits, WORDS=p.chunk // 2, FLAGS=True, **coop)(
            dy_words, y_words, dx.view(M, N).view(torch.int32), words, words, dy_words.stride(0), N // 2)
        return
    RowsLaunch(_softmax_bwd_coop_kernel, M, p.splits, CHUNK=p.chunk, FLAGS=True, ACC_DTYPE=acc_dtype(y_rows.dtype), **coop)(
        dy_rows, y_rows, dx, words, words, dy_rows.stride(0), N)
