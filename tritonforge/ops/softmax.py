r"""Fused softmax over the last dimension, forward and backward, for rows of any length.

Math. For a row :math:`x \in \mathbb{R}^N`, with :math:`m = \max_j x_j`:

.. math:: y_i = \frac{e^{x_i - m}}{s}, \qquad s = \sum_j e^{x_j - m}.

Subtracting the max changes nothing mathematically and keeps every exponent <= 0, so nothing
overflows. The textbook way needs three passes over the row: the max, the sum, the output.

Online normalizer (Milakov & Gimelshein, 2018). A running state ``(m, s)`` over a prefix of the
row is updated block by block: when a block raises the max from ``m`` to ``m'``, the sum so far is
rescaled by ``exp(m - m')``, so that after every block ``s = sum_{j seen} exp(x_j - m)`` exactly.
Two states of disjoint parts merge the same way:

.. math:: m = \max(m_1, m_2), \qquad s = s_1 e^{m_1 - m} + s_2 e^{m_2 - m}.

An empty part has the state ``(-inf, 0)`` and contributes nothing (the kernels test for it:
``exp(-inf - (-inf))`` would be NaN).

Backward. :math:`\partial y_i / \partial x_j = y_i(\delta_{ij} - y_j)`, so

.. math:: dx = y \odot \big(dy - \langle dy, y \rangle\big),

which needs only ``y`` (saved by the forward), never ``x``: read ``dy`` and ``y``, write ``dx``.

Four forward strategies, chosen per call by :func:`plan`:

- **one pass** (``N <= ROW_FIT_LIMIT``): one program per row holds the row in registers: read
  once, write once (the least traffic, 2 tensors' worth). Rows of 16K-32K elements on a GPU
  are cooperative in chunks of 4096 where there are enough of them (16-bit; float32 below 32 rows
  an SM: ``SHORT_COOP_CHUNK``; H200, bf16 16384 x 32768: 0.93 -> 0.95 of a same-size copy); fewer
  16-bit ones, on a GPU whose shared memory holds three, take persistent programs, each looping
  over rows with the next two loading while one reduces (``Plan.stages``; H200: 0.77 -> 0.93 of
  a copy at 16384 rows), and 16-bit rows of 512-2K take two rows a program (``Plan.rows``);
- **cooperative** (longer rows on a GPU, enough of them to give every SM a program): each row is
  held by ``cdiv(N, COOP_CHUNK)`` programs, each its chunk in registers; they publish their
  chunks' states, meet at a per-row barrier (:func:`~tritonforge.kernel_utils.row_barrier`), merge
  all states in one fixed order and write their chunks: read once, written once, like one pass.
  On the H200 it took rows of 128K from 0.62 to 0.89 of a copy in float32 (0.69 in bf16); holding
  ``exp(x - m_chunk)`` across the barrier instead of x (one exponential per element) then 0.92 / 0.77,
  and the 16-bit exponential without subnormal results (:func:`~tritonforge.kernel_utils.exp_shifted`) 0.79 in bf16.
  Since, each chunk's state is its own arrival flag, one 64-bit word that the wait reads and the
  merge uses (:func:`~tritonforge.kernel_utils.publish_and_wait`; float64 keeps the counter): 0.97 / 0.91;
- **online** (longer rows where the cooperative path does not run: the interpreter, rows over
  1M): one program per row, pass 1 the
  online state block by block (lane-wise: each lane keeps its own running max and sum, combined
  once at the end, so the loop has no cross-lane reduction), pass 2 the output: 2 reads + 1 write
  instead of the safe softmax's 3 + 1;
- **split** (long rows, too few to fill the GPU, e.g. one vocabulary-sized row per token at
  decode): each row is cut into ``SPLITS`` chunks, one program each; a first kernel writes every
  chunk's state, a second merges the row's states and writes its chunk of ``y``.

The backward follows the same four shapes with the dot product ``<dy, y>`` in place of the state;
its cooperative programs hold bf16 rows of even length as loaded, two elements a 32-bit word
(``_softmax_bwd_coop_packed_kernel``; H200, 4096 x 128K: 0.90 -> 0.95 of a copy).

Dtypes: arithmetic in float32 for 16-bit and float32 inputs, float64 for float64 (gradcheck
through the kernels); the output in x's dtype. Fully masked rows (all ``-inf``) give NaN, as
``torch.softmax`` does. For 16-bit outputs the exponential is ``tl.exp2`` of ``(x - m) log2 e``
(``ex2.approx.ftz.f32`` on a GPU): a bf16 probability below 2^-126 (a bf16 subnormal, about
1e-38) may come out 0 where ``torch.softmax`` keeps it. Layouts: any leading shape; rows may be strided; a last dimension without
unit stride is copied. Outputs are new contiguous tensors.

How it meets PyTorch: the template of :mod:`tritonforge.ops.rmsnorm` (custom ops with fake
implementations, ``register_autograd`` saving the output, a vmap rule, routed launches, the
reference for ``create_graph`` and for forward-mode AD / ``torch.func`` transforms other than vmap).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import torch

from tritonforge import runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import (
    COOP_WARPS,
    acc_dtype,
    as_rows,
    bf16_pair,
    bf16_pair_hi,
    bf16_pair_lo,
    cast_for_store,
    coop_chunk,
    coop_counters,
    coop_splits,
    coop_words,
    exp_shifted,
    flagged,
    opaque_u32,
    pack_floats,
    packs_bf16_rows,
    publish_and_wait,
    round_bf16_by_hand,
    row_barrier,
    word_hi,
    word_lo,
)
from tritonforge.reference import softmax_bwd_ref, softmax_ref

SOFTMAX_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _online_state(
    x_row,  # pointer to the row's first element
    start,  # the part of the row to reduce: [start, end)
    end,
    BLOCK_N: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
):
    """``(m, s)`` of ``x_row[start:end]`` in one pass; ``(-inf, 0)`` for an empty or all -inf part."""
    cols = tl.arange(0, BLOCK_N)
    m_lane = tl.full([BLOCK_N], -float("inf"), ACC_DTYPE)  # each lane's running max
    s_lane = tl.zeros([BLOCK_N], dtype=ACC_DTYPE)  # each lane's sum of exp(x - m_lane)
    for off in range(start, end, BLOCK_N):
        idx = off + cols
        x = tl.load(x_row + idx, mask=idx < end, other=-float("inf"), eviction_policy="evict_last").to(ACC_DTYPE)
        m_new = tl.maximum(m_lane, x)
        # A lane that has seen only -inf keeps (m, s) = (-inf, 0): subtract 0 there, not -inf.
        m_ref = tl.where(m_new == -float("inf"), 0.0, m_new)
        s_lane = s_lane * exp_shifted(m_lane, m_ref, x_row.dtype.element_ty) + exp_shifted(x, m_ref, x_row.dtype.element_ty)
        m_lane = m_new
    m = tl.max(m_lane, axis=0)
    s = tl.sum(tl.where(m_lane == -float("inf"), 0.0, s_lane * tl.exp(m_lane - m)), axis=0)
    return m, s


@triton.jit
def _write_softmax(x_row, y_row, start, end, m, s, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr, ROUND_BF16: tl.constexpr):
    """``y[start:end] = exp(x - m) / s``: the second pass (x again, from L2 where it still is)."""
    cols = tl.arange(0, BLOCK_N)
    inv_s = 1.0 / s  # all -inf row: s = 0, exp(x - m) = NaN: NaN, as torch.softmax
    for off in range(start, end, BLOCK_N):
        idx = off + cols
        mask = idx < end
        x = tl.load(x_row + idx, mask=mask, other=0.0, eviction_policy="evict_first").to(ACC_DTYPE)
        tl.store(y_row + idx, cast_for_store(exp_shifted(x, m, y_row.dtype.element_ty) * inv_s, y_row.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _softmax_row(x_row, y_row, N, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr, ROUND_BF16: tl.constexpr, FTZ_EXP: tl.constexpr = True):
    """One row held in registers (``BLOCK_N >= N``): read once, written once. ``FTZ_EXP``: the
    exponential as :func:`~tritonforge.kernel_utils.exp_shifted` takes it for the row's dtype, else ``tl.exp``."""
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(ACC_DTYPE)
    if FTZ_EXP:
        e = exp_shifted(x, tl.max(x, axis=0), y_row.dtype.element_ty)  # masked lanes: exp(-inf) = 0
    else:
        e = tl.exp(x - tl.max(x, axis=0))
    y = e * (1.0 / tl.sum(e, axis=0))
    tl.store(y_row + cols, cast_for_store(y, y_row.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _softmax_fwd_kernel(
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    y_ptr,  # *y [M, N], contiguous, x's dtype
    x_row_stride,
    N,
    BLOCK_N: tl.constexpr,  # one pass: >= N (the whole row); online: the loop's block
    ROW_FITS: tl.constexpr,  # one pass, the row in registers
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
):
    """One program per row: one pass when the row fits, else the online state then the output."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * N
    if ROW_FITS:
        _softmax_row(x_row, y_row, N, BLOCK_N, ACC_DTYPE, ROUND_BF16)
    else:
        m, s = _online_state(x_row, 0, N, BLOCK_N, ACC_DTYPE)
        _write_softmax(x_row, y_row, 0, N, m, s, BLOCK_N, ACC_DTYPE, ROUND_BF16)


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
    1K is 2 KB, too little for one program to keep its SM's memory busy (H200, bf16 16384 x 1024:
    19.05 -> 17.3 us with two rows a program; 16384 x 512: 11.6 -> 7.6;
    benchmarks/experiments/row-schedules-rows-nvidia-h200-2026-12-01.json)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    r = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + r * x_row_stride + cols[None, :], mask=mask, other=-float("inf")).to(ACC_DTYPE)
    e = exp_shifted(x, tl.max(x, axis=1)[:, None], y_ptr.dtype.element_ty)  # rows past M are all -inf: NaN there, never stored
    y = e * (1.0 / tl.sum(e, axis=1))[:, None]
    tl.store(y_ptr + r * N + cols[None, :], cast_for_store(y, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _softmax_fwd_pipelined_kernel(
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    y_ptr,  # *y [M, N], contiguous, x's dtype
    x_row_stride,
    M,
    N,
    BLOCK_N: tl.constexpr,  # >= N: the whole row in registers
    STAGES: tl.constexpr,  # rows in flight per program (software pipelining through shared memory)
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
):
    """One pass, persistent: program p takes rows p, p + programs, ...; Triton's pipeliner loads
    the next STAGES - 1 rows into shared memory while this one reduces and stores, so the SM's
    memory traffic never waits for a reduction (a program per row holds one row and idles)."""
    for row in tl.range(tl.program_id(0), M, tl.num_programs(0), num_stages=STAGES):
        r = tl.cast(row, tl.int64)
        # tl.exp, not exp_shifted's exp2: measured slower here (H200, bf16 16384 x 32768: 535.5 ->
        # 553.5 us; fp16 552.9 / 554.5; benchmarks/experiments/coop-exp-one-pass-nvidia-h200-2026-12-02.json)
        _softmax_row(x_ptr + r * x_row_stride, y_ptr + r * N, N, BLOCK_N, ACC_DTYPE, ROUND_BF16, FTZ_EXP=False)


@triton.jit
def _softmax_split_state_kernel(
    x_ptr,  # *x [M, N]
    m_ptr,  # *[M, SPLITS] ACC_DTYPE: each chunk's max
    s_ptr,  # *[M, SPLITS] ACC_DTYPE: each chunk's sum of exp(x - max)
    x_row_stride,
    N,
    chunk,  # elements per chunk (a multiple of BLOCK_N); trailing chunks may be empty
    SPLITS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
):
    """Program (row, split): the online state of one chunk of one row."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    start = split * chunk
    m, s = _online_state(x_ptr + row * x_row_stride, start, tl.minimum(start + chunk, N), BLOCK_N, ACC_DTYPE)
    tl.store(m_ptr + row * SPLITS + split, m)
    tl.store(s_ptr + row * SPLITS + split, s)


@triton.jit
def _softmax_split_write_kernel(
    x_ptr,
    y_ptr,  # *y [M, N], contiguous
    m_ptr,
    s_ptr,
    x_row_stride,
    N,
    chunk,
    SPLITS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
):
    """Program (row, split): merge the row's SPLITS states, then write this chunk of y."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    parts = tl.arange(0, SPLITS)
    ms = tl.load(m_ptr + row * SPLITS + parts)
    ss = tl.load(s_ptr + row * SPLITS + parts)
    m = tl.max(ms, axis=0)
    s = tl.sum(tl.where(ms == -float("inf"), 0.0, ss * tl.exp(ms - m)), axis=0)  # the merge rule
    start = split * chunk
    _write_softmax(x_ptr + row * x_row_stride, y_ptr + row * N, start, tl.minimum(start + chunk, N), m, s, BLOCK_N, ACC_DTYPE, ROUND_BF16)


@triton.jit
def _dot_part(dy_row, y_row, start, end, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """``sum(dy * y)`` over ``[start, end)`` of one row."""
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=ACC_DTYPE)
    for off in range(start, end, BLOCK_N):
        idx = off + cols
        mask = idx < end
        dy = tl.load(dy_row + idx, mask=mask, other=0.0, eviction_policy="evict_last").to(ACC_DTYPE)
        y = tl.load(y_row + idx, mask=mask, other=0.0, eviction_policy="evict_last").to(ACC_DTYPE)
        acc += dy * y
    return tl.sum(acc, axis=0)


@triton.jit
def _write_dx(dy_row, y_row, dx_row, start, end, dot, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr, ROUND_BF16: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    for off in range(start, end, BLOCK_N):
        idx = off + cols
        mask = idx < end
        dy = tl.load(dy_row + idx, mask=mask, other=0.0, eviction_policy="evict_first").to(ACC_DTYPE)
        y = tl.load(y_row + idx, mask=mask, other=0.0, eviction_policy="evict_first").to(ACC_DTYPE)
        tl.store(dx_row + idx, cast_for_store(y * (dy - dot), dx_row.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _softmax_bwd_kernel(
    dy_ptr,  # *dy [M, N]: row stride dy_row_stride, unit column stride
    y_ptr,  # *y [M, N], contiguous (the forward's output)
    dx_ptr,  # *dx [M, N], contiguous
    dy_row_stride,
    N,
    BLOCK_N: tl.constexpr,
    ROW_FITS: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
):
    """One program per row: ``dx = y * (dy - sum(dy * y))``; one pass when the row fits, else two."""
    row = tl.program_id(0).to(tl.int64)
    dy_row = dy_ptr + row * dy_row_stride
    y_row = y_ptr + row * N
    dx_row = dx_ptr + row * N
    if ROW_FITS:
        cols = tl.arange(0, BLOCK_N)
        mask = cols < N
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(ACC_DTYPE)
        y = tl.load(y_row + cols, mask=mask, other=0.0).to(ACC_DTYPE)
        dx = y * (dy - tl.sum(dy * y, axis=0))
        tl.store(dx_row + cols, cast_for_store(dx, dx_ptr.dtype.element_ty, ROUND_BF16), mask=mask)
    else:
        dot = _dot_part(dy_row, y_row, 0, N, BLOCK_N, ACC_DTYPE)
        _write_dx(dy_row, y_row, dx_row, 0, N, dot, BLOCK_N, ACC_DTYPE, ROUND_BF16)


@triton.jit
def _softmax_bwd_split_dot_kernel(dy_ptr, y_ptr, dot_ptr, dy_row_stride, N, chunk, SPLITS: tl.constexpr, BLOCK_N: tl.constexpr,
                                  ACC_DTYPE: tl.constexpr):  # fmt: skip
    """Program (row, split): this chunk's part of ``<dy, y>`` into ``dot[row, split]``."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    start = split * chunk
    part = _dot_part(dy_ptr + row * dy_row_stride, y_ptr + row * N, start, tl.minimum(start + chunk, N), BLOCK_N, ACC_DTYPE)
    tl.store(dot_ptr + row * SPLITS + split, part)


@triton.jit
def _softmax_bwd_split_write_kernel(dy_ptr, y_ptr, dx_ptr, dot_ptr, dy_row_stride, N, chunk, SPLITS: tl.constexpr,
                                    BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr, ROUND_BF16: tl.constexpr):  # fmt: skip
    """Program (row, split): sum the row's partial dots, then write this chunk of dx."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    dot = tl.sum(tl.load(dot_ptr + row * SPLITS + tl.arange(0, SPLITS)), axis=0)
    start = split * chunk
    _write_dx(dy_ptr + row * dy_row_stride, y_ptr + row * N, dx_ptr + row * N, start, tl.minimum(start + chunk, N), dot, BLOCK_N,
              ACC_DTYPE, ROUND_BF16)  # fmt: skip


@triton.jit
def _row_dot(part, part_ptr, count_ptr, row, split, SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr, FLAGS: tl.constexpr):
    """The row's ``<dy, y>`` from every program's ``part``: with ``FLAGS`` (float32) through
    :func:`~tritonforge.kernel_utils.publish_and_wait` (``part_ptr``: *[M, SPLITS] int64, zeroed;
    ``count_ptr`` unused), else stored to ``part_ptr`` and read after :func:`~tritonforge.kernel_utils.row_barrier`."""
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
    SPLITS: tl.constexpr,  # programs per row: cdiv(N, CHUNK); constexpr (fp32 4096 x 131072: 1118 us, a runtime SPLITS 1244)
    CHUNK: tl.constexpr,  # elements each program holds in registers
    SPLITS_P2: tl.constexpr,  # next power of two of SPLITS (the merge's vector)
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    EVEN_N: tl.constexpr = False,  # N a multiple of CHUNK: no masks
    RESET: tl.constexpr = False,  # row_barrier's RESET (counters kept between launches)
    FLAGS: tl.constexpr = False,  # float32 states: part_m_ptr is *[M, SPLITS] int64, zeroed (publish_and_wait); part_s_ptr, count_ptr unused
):
    """Program (row, chunk) of a cooperative row: the chunk's state, the row's barrier, the merge of
    every chunk's state (the same order in every program), then this chunk of y from registers:
    x is read once. The program holds ``e = exp(x - m)`` across the barrier, not x, and scales it
    by the merge rule's own factor: ``y = e * exp(m - m_row) / s_row``, one exponential per
    element instead of two (H200, 4096 x 131072: bf16 697 -> 666 us, float32 1104 -> 1082;
    benchmarks/experiments/coop-registers-keep-exp-nvidia-h200-2026-12-01.json)."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
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
        row_barrier(count_ptr + row, SPLITS, RESET)
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
def _softmax_bwd_coop_kernel(dy_ptr, y_ptr, dx_ptr, part_ptr, count_ptr, dy_row_stride, N, SPLITS: tl.constexpr, CHUNK: tl.constexpr,
                             SPLITS_P2: tl.constexpr, ACC_DTYPE: tl.constexpr, ROUND_BF16: tl.constexpr,
                             FLAGS: tl.constexpr = False):  # fmt: skip
    """Program (row, chunk) of a cooperative row: this chunk's part of ``<dy, y>``, the barrier, the
    row's sum, then ``dx = y * (dy - dot)`` from registers: dy and y read once."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
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
    SPLITS: tl.constexpr,
    WORDS: tl.constexpr,  # words each program holds: half its chunk's elements
    SPLITS_P2: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    FLAGS: tl.constexpr = False,  # as _row_dot's
):
    """The cooperative backward for bf16 rows of even length, read as 32-bit words of two elements.
    A program holds its chunks of dy and y across the barrier as loaded, 16 bits an element, and
    widens each half again after it (:func:`~tritonforge.kernel_utils.opaque_u32` keeps the
    compiler from holding the float32 halves instead): 48 registers a thread where holding float32
    halves takes 80 (the same kernel without the opaque move), so more programs fit an SM. H200,
    bf16 4096 x 131072: 847 -> 798 us, 0.90 -> 0.95 of a copy; 64 x 131072 18.0 -> 16.7
    (benchmarks/experiments/coop-packed-nvidia-h200-2026-12-01.json)."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
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
# Heuristics: which strategy, block sizes, splits
# ----------------------------------------------------------------------------------------------

ROW_FIT_LIMIT = 32768
"""Longest row kept whole in registers (elements; float64 rows: half): read once, written once."""

LOOP_BLOCK_N = 4096
"""The block of the online and split loops (elements; float64: half)."""

MAX_SPLITS = 64
"""Most chunks a row is cut into (a power of two: the merge loads all states of a row at once)."""

INTERPRETER_SMS = 4
"""What the heuristics take as the SM count in the interpreter (it has none): few splits."""

PIPELINE_MIN_WIDTH = 32768
"""Rows this wide (as one block) take the pipelined persistent kernel where ``PIPELINE_STAGES`` of
them fit the device's shared memory: 16-bit rows of 16K-32K elements on an H100/H200, since
``SHORT_COOP_CHUNK`` only where too few to be cooperative (H200: up to 16 rows). H200, bf16
16384 x 32768: a program per row 655 us device time (0.77 of a copy), persistent with 3 stages
545 us (0.93; benchmarks/experiments/row-schedules-nvidia-h200-2026-12-01.json). Narrower rows
keep a program each: bf16 16384 x 16384 lost with it (269 -> 283-296 us, same file) and so did
float32 16384 x 16384, rows of the same 64 KB (556.6 us where Liger's program per row took 522.5:
benchmarks/results/long-rows/softmax-16k-32k-pipelined-nvidia-h200-2026-12-01.json; ours with a
program per row made 0.98 of a copy in long-rows-one-pass-...-2026-11-30.json); float32 rows of 32K
(3 x 128 KB) do not fit and already make 0.99."""

PIPELINE_STAGES = 3

ROWS_PER_PROGRAM = 2
"""Whole rows a program takes for 16-bit rows of ``ROWS_MIN_WIDTH``-``ROWS_MAX_WIDTH`` on a GPU
(``_softmax_fwd_rows_kernel``), with 2 warps per 1K elements of a row (2 at 512 and 1K, 4 at 2K).
H200, device time, program per row -> two rows a program: bf16 16384 x 512 11.6 -> 7.6 us,
16384 x 1K 19.05 -> 17.3, 65536 x 1K 69.9 -> 65.4, 4096 x 1K 4.74 -> 4.18, 16384 x 2K 38.3 -> 34.5;
fp16 alike; float32 rows gained nothing at 1K-2K (33.5 -> 34.1 at 16384 x 1K) and keep a program
each (benchmarks/experiments/row-schedules-rows-nvidia-h200-2026-12-01.json). The backward keeps a
program per row."""

ROWS_MIN_WIDTH = 512
ROWS_MAX_WIDTH = 2048

PIPELINE_SHARED_SLACK = 1024
"""Shared memory (bytes) left beside the stages for what else Triton keeps there (the reductions'
scratch)."""


COOP_FWD_WARPS = 4
"""Warps of a cooperative forward program (chunks of ``kernel_utils.COOP_CHUNK``, 64 elements a
thread; the backward keeps ``kernel_utils.COOP_WARPS``). H200, device time, 8 -> 4 warps
(benchmarks/experiments/coop-floor-chunks-nvidia-h200-2026-12-02.json): bf16 4096 x 131072
640.6 -> 617.2 us, 512 x 131072 85.9 -> 82.4; float32 1082.9 -> 1074.4, 64 x 262144 40.3 -> 39.7;
64 rows of 128K level. 48 -> 80 registers a thread, yet six programs an SM where five fit before:
more rows in flight to cover the wait. float64 (half the chunk) keeps 8 warps: not measured."""


SHORT_COOP_CHUNK = 4096
"""The forward's chunk for rows held whole by one program up to now (16K-32K elements, a block of
``ROW_FIT_LIMIT``): cooperative in chunks of 4096 with ``COOP_FWD_WARPS``, where one program a row
(pipelined or not) left bandwidth unused. H200, device time, fraction of a same-size copy
(benchmarks/experiments/coop-hold-short-nvidia-h200-2026-12-02.json), one program a row -> chunks
of 4096: bf16 16384 x 32768 0.93 -> 0.95, 2048 x 32768 0.85 -> 0.94, 256 x 32768 0.52 -> 0.65;
fp16 0.90 -> 0.96; float32 256 x 32768 0.73 -> 0.88, 2048 x 32768 0.95 -> 0.96, level at 4096
rows and lost from 8192 (0.977 -> 0.968; ``SHORT_COOP_FP32_ROWS_PER_SM``). Chunks of 2048 and
8192 were slower; rows of 8K-16K (one program each) kept theirs: bf16 16384 x 16384 0.965 against
0.946 in chunks."""

SHORT_COOP_FP32_ROWS_PER_SM = 32
"""float32 rows of 16K-32K go cooperative while there are fewer than this many a SM (H200: 4224).
A program that holds a whole row keeps its 128 KB in registers, so few fit an SM and the last of
few waves runs part-empty; many rows hide it (a reading of the measurements, not itself measured)."""


def short_coop_splits(M: int, N: int, dtype: torch.dtype, sms: Optional[int], fit: int = ROW_FIT_LIMIT) -> int:
    """Programs a row for the forward's rows of 16K-32K elements (a block of ``fit``) in chunks of
    ``SHORT_COOP_CHUNK`` (``kernel_utils.coop_splits``'s conditions: a GPU, enough rows), or 0: one
    program a row."""
    if dtype not in (torch.float16, torch.bfloat16, torch.float32) or sms is None:
        return 0
    if triton.next_power_of_2(max(N, 1)) != fit or (dtype == torch.float32 and M >= SHORT_COOP_FP32_ROWS_PER_SM * sms):
        return 0
    return coop_splits(M, N, dtype, sms, SHORT_COOP_CHUNK)


def pipelines_rows(width: int, dtype: torch.dtype, shared: Optional[int]) -> bool:
    """Whether rows held as one block of ``width`` take the pipelined persistent kernel on a device
    with ``shared`` bytes of shared memory per program (``None``: the interpreter, never)."""
    return shared is not None and width >= PIPELINE_MIN_WIDTH and PIPELINE_STAGES * width * dtype.itemsize + PIPELINE_SHARED_SLACK <= shared


class Plan(NamedTuple):
    """How one call runs: ``strategy`` is "one-pass", "cooperative", "online" or "split";
    ``stages`` > 1: one pass by persistent programs, that many rows in flight each; ``rows`` > 1:
    one pass, that many whole rows a program (the forward only)."""

    strategy: str
    block_n: int
    num_warps: int
    splits: int = 1
    chunk: int = 0
    stages: int = 1
    rows: int = 1


def _warps(block_n: int) -> int:
    return 4 if block_n <= 1024 else (8 if block_n <= 8192 else 16)


def plan(M: int, N: int, dtype: torch.dtype, device: torch.device, backward: bool = False) -> Plan:
    """The strategy for ``M`` rows of ``N``; ``backward``: the backward's (the same strategies,
    but one pass is always a program per row: no pipelined loop, no several rows a program).

    Rows that fit (:data:`ROW_FIT_LIMIT`) take one pass. Longer rows on a GPU are cooperative
    when their chunks make at least one program per SM (``kernel_utils.coop_splits``). Otherwise
    they take the online loop when there are at least two rows per SM; fewer rows are split into
    chunks so that about four programs per SM work (a power of two of chunks, each a whole number
    of loop blocks)."""
    sms = runtime.gpu_sm_count(device)
    shared = runtime.shared_memory_per_block(device) if sms is not None else None
    return _plan_cached(M, N, dtype, sms or INTERPRETER_SMS, ROW_FIT_LIMIT, LOOP_BLOCK_N, MAX_SPLITS, sms is not None, shared, backward)


@functools.lru_cache(maxsize=4096)
def _plan_cached(M: int, N: int, dtype: torch.dtype, sms: int, fit: int, loop_block: int, max_splits: int,
                 cooperative: bool = False, shared: Optional[int] = None, backward: bool = False) -> Plan:  # fmt: skip
    if dtype == torch.float64:
        fit, loop_block = fit // 2, loop_block // 2
    width = triton.next_power_of_2(max(N, 1))
    if width <= fit:
        if backward:
            return Plan("one-pass", width, _warps(width))
        short = short_coop_splits(M, N, dtype, sms if cooperative else None, fit)
        if short:
            return Plan("cooperative", SHORT_COOP_CHUNK, COOP_FWD_WARPS, short, SHORT_COOP_CHUNK)
        if pipelines_rows(width, dtype, shared):
            return Plan("one-pass", width, _warps(width), stages=PIPELINE_STAGES)
        if cooperative and dtype.itemsize == 2 and ROWS_MIN_WIDTH <= width <= ROWS_MAX_WIDTH:  # on a GPU
            return Plan("one-pass", width, max(2, ROWS_PER_PROGRAM * width // 1024), rows=ROWS_PER_PROGRAM)
        return Plan("one-pass", width, _warps(width))
    coop = coop_splits(M, N, dtype, sms if cooperative else None)
    if coop:
        warps = COOP_WARPS if backward or dtype == torch.float64 else COOP_FWD_WARPS
        return Plan("cooperative", coop_chunk(dtype), warps, coop, coop_chunk(dtype))
    if M >= 2 * sms:
        return Plan("online", loop_block, _warps(loop_block))
    blocks = triton.cdiv(N, loop_block)
    splits = min(max_splits, blocks, triton.next_power_of_2(triton.cdiv(4 * sms, M)))
    splits = 1 << (splits.bit_length() - 1)  # a power of two, <= the bound
    if splits < 2:
        return Plan("online", loop_block, _warps(loop_block))
    chunk = triton.cdiv(blocks, splits) * loop_block
    return Plan("split", loop_block, _warps(loop_block), splits, chunk)


# ----------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------

_empty = torch.empty


def coop_unmasked(dtype: torch.dtype, N: int, chunk: int) -> bool:
    """Whether the cooperative forward drops its masks (``EVEN_N``): float32 rows a whole number of
    chunks. H200 (benchmarks/experiments/coop-exp-even-nvidia-h200-2026-12-02.json): float32 64 x
    262144 41.8 -> 40.2 us, 64 x 131072 23.3 -> 22.5, 4096 x 131072 1087.1 -> 1084.2; bf16 lost
    (639.4 -> 650.6 at 4096 x 131072, with fewer instructions: 480 -> 456)."""
    return dtype == torch.float32 and N % chunk == 0


def softmax_fwd(x: torch.Tensor) -> torch.Tensor:
    """Launch the forward: ``y`` a new contiguous tensor of x's shape and dtype."""
    N = x.shape[-1]
    x_rows = as_rows(x, N)
    M = x_rows.shape[0]
    y = _empty(*x.shape, dtype=x.dtype, device=x.device)
    p = plan(M, N, x.dtype, x.device)
    flags = dict(ACC_DTYPE=acc_dtype(x.dtype))
    rounding = round_bf16_by_hand(x.dtype)
    if p.strategy == "cooperative":
        coop = dict(SPLITS=p.splits, CHUNK=p.chunk, SPLITS_P2=triton.next_power_of_2(p.splits), ROUND_BF16=rounding,
                    EVEN_N=coop_unmasked(x.dtype, N, p.chunk), num_warps=p.num_warps, **flags)  # fmt: skip
        if x.dtype != torch.float64:  # float32 states: each program's (max, sum) is its word (publish_and_wait)
            words = coop_words(M, p.splits, x.device)
            _softmax_coop_kernel[(M * p.splits,)](x_rows, y, words, words, words, x_rows.stride(0), N, FLAGS=True, **coop)
            return y
        m, s = _empty(M, p.splits, dtype=torch.float64, device=x.device), _empty(M, p.splits, dtype=torch.float64, device=x.device)
        _softmax_coop_kernel[(M * p.splits,)](x_rows, y, m, s, coop_counters(M, x.device), x_rows.stride(0), N, **coop)
        return y
    if p.rows > 1:
        _softmax_fwd_rows_kernel[(triton.cdiv(M, p.rows),)](x_rows, y, x_rows.stride(0), M, N, ROWS=p.rows, BLOCK_N=p.block_n,
                                                           ROUND_BF16=rounding, num_warps=p.num_warps, **flags)  # fmt: skip
        return y
    if p.stages > 1:
        _softmax_fwd_pipelined_kernel[(min(M, runtime.gpu_sm_count(x.device) or INTERPRETER_SMS),)](
            x_rows, y, x_rows.stride(0), M, N, BLOCK_N=p.block_n, STAGES=p.stages, ROUND_BF16=rounding, num_warps=p.num_warps, **flags)  # fmt: skip
        return y
    if p.strategy != "split":
        _softmax_fwd_kernel[(M,)](x_rows, y, x_rows.stride(0), N, BLOCK_N=p.block_n, ROW_FITS=p.strategy == "one-pass",
                                  ROUND_BF16=rounding, num_warps=p.num_warps, **flags)  # fmt: skip
        return y
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    m = _empty(M, p.splits, dtype=acc, device=x.device)
    s = _empty(M, p.splits, dtype=acc, device=x.device)
    grid = (M, p.splits)
    _softmax_split_state_kernel[grid](x_rows, m, s, x_rows.stride(0), N, p.chunk, SPLITS=p.splits, BLOCK_N=p.block_n,
                                      num_warps=p.num_warps, **flags)  # fmt: skip
    _softmax_split_write_kernel[grid](x_rows, y, m, s, x_rows.stride(0), N, p.chunk, SPLITS=p.splits, BLOCK_N=p.block_n,
                                      ROUND_BF16=rounding, num_warps=p.num_warps, **flags)  # fmt: skip
    return y


def softmax_bwd(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Launch the backward: ``dx`` a new contiguous tensor of y's shape and dtype."""
    N = y.shape[-1]
    dy_rows = as_rows(dy, N)
    y_rows = as_rows(y, N).contiguous()  # the forward's own output: contiguous already
    M = y_rows.shape[0]
    dx = _empty(*y.shape, dtype=y.dtype, device=y.device)
    p = plan(M, N, y.dtype, y.device, backward=True)
    flags = dict(ACC_DTYPE=acc_dtype(y.dtype))
    rounding = round_bf16_by_hand(y.dtype)
    if p.strategy == "cooperative":
        coop = dict(SPLITS=p.splits, SPLITS_P2=triton.next_power_of_2(p.splits), ROUND_BF16=rounding, num_warps=p.num_warps)
        if y.dtype == torch.float64:  # a float64 part fills a word: no room for a flag, so the counter
            dots = _empty(M, p.splits, dtype=torch.float64, device=y.device)
            _softmax_bwd_coop_kernel[(M * p.splits,)](dy_rows, y_rows, dx, dots, coop_counters(M, y.device), dy_rows.stride(0), N, CHUNK=p.chunk,
                                                      **coop, **flags)  # fmt: skip
            return dx
        words = coop_words(M, p.splits, y.device)  # each program's part of <dy, y> is its word (publish_and_wait)
        if packs_bf16_rows(dy_rows, y_rows):  # bf16 rows of even length: held as loaded, two elements a word
            dy_words, y_words = dy_rows.view(torch.int32), y_rows.view(torch.int32)
            _softmax_bwd_coop_packed_kernel[(M * p.splits,)](dy_words, y_words, dx.view(M, N).view(torch.int32), words, words, dy_words.stride(0),
                                                             N // 2, WORDS=p.chunk // 2, FLAGS=True, **coop)  # fmt: skip
            return dx
        _softmax_bwd_coop_kernel[(M * p.splits,)](dy_rows, y_rows, dx, words, words, dy_rows.stride(0), N, CHUNK=p.chunk, FLAGS=True, **coop,
                                                  **flags)  # fmt: skip
        return dx
    if p.strategy != "split":
        _softmax_bwd_kernel[(M,)](dy_rows, y_rows, dx, dy_rows.stride(0), N, BLOCK_N=p.block_n, ROW_FITS=p.strategy == "one-pass",
                                  ROUND_BF16=rounding, num_warps=p.num_warps, **flags)  # fmt: skip
        return dx
    acc = torch.float64 if y.dtype == torch.float64 else torch.float32
    dots = _empty(M, p.splits, dtype=acc, device=y.device)
    grid = (M, p.splits)
    _softmax_bwd_split_dot_kernel[grid](dy_rows, y_rows, dots, dy_rows.stride(0), N, p.chunk, SPLITS=p.splits,
                                        BLOCK_N=p.block_n, num_warps=p.num_warps, **flags)  # fmt: skip
    _softmax_bwd_split_write_kernel[grid](dy_rows, y_rows, dx, dots, dy_rows.stride(0), N, p.chunk, SPLITS=p.splits,
                                          BLOCK_N=p.block_n, ROUND_BF16=rounding, num_warps=p.num_warps, **flags)  # fmt: skip
    return dx


# ----------------------------------------------------------------------------------------------
# Routing
# ----------------------------------------------------------------------------------------------

OP = "softmax"
BACKWARD_OP = "softmax_backward"


def _forward_routed(x: torch.Tensor) -> torch.Tensor:
    if x.numel() == 0:
        runtime.record_empty(OP)
        return softmax_ref(x).contiguous()
    return runtime.dispatch(OP, device=x.device, dtype=x.dtype, kernel=lambda: softmax_fwd(x), reference=lambda: softmax_ref(x).contiguous())


def _backward_routed(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if y.numel() == 0:
        runtime.record_empty(BACKWARD_OP)
        return torch.zeros_like(y)
    return runtime.dispatch(BACKWARD_OP, device=y.device, dtype=y.dtype, kernel=lambda: softmax_bwd(dy, y),
                            reference=lambda: softmax_bwd_ref(dy, y))  # fmt: skip


# ----------------------------------------------------------------------------------------------
# The PyTorch operators
# ----------------------------------------------------------------------------------------------


@torch.library.custom_op("tritonforge::softmax", mutates_args=())
def softmax_op(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim, routed; differentiable through :func:`backward`."""
    return _forward_routed(x)


@softmax_op.register_fake
def _(x):
    return x.new_empty(x.shape)


@torch.library.custom_op("tritonforge::softmax_backward", mutates_args=())
def softmax_backward_op(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``dx = y * (dy - sum(dy * y, -1))``, routed."""
    return _backward_routed(dy, y)


@softmax_backward_op.register_fake
def _(dy, y):
    return y.new_empty(y.shape)


def setup_context(ctx, inputs, output):
    """The backward needs only the output y."""
    ctx.save_for_backward(output)


def backward(ctx, dy):
    """dx from the backward operator, or from the differentiable reference under ``create_graph``."""
    (y,) = ctx.saved_tensors
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():
        return runtime.dispatch_reference(
            BACKWARD_OP, "autograd", "create_graph=True: the backward kernel is not differentiable; "
            "the PyTorch reference backward is, so double backward is exact",
            lambda: softmax_bwd_ref(dy, y),
        )  # fmt: skip
    return softmax_backward_op(dy, y)


softmax_op.register_autograd(backward, setup_context=setup_context)


def _vmap_rule(info, in_dims, x):
    """``vmap``: row-wise over the last dimension, so the batch dimension moves to the front."""
    (x_dim,) = in_dims
    return softmax_op(x.movedim(x_dim, 0)), 0


softmax_op.register_vmap(_vmap_rule)


# ----------------------------------------------------------------------------------------------
# The public function
# ----------------------------------------------------------------------------------------------


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension: ``exp(x - max) / sum(exp(x - max))`` per row.

    Arithmetic in float32 (float64 for float64 inputs), the result in x's dtype; a row of all
    ``-inf`` gives NaN, as ``torch.softmax``; a bf16 probability below 2^-126 (about 1e-38) may
    come out 0 rather than a bf16 subnormal. Differentiable (the backward needs only the output),
    twice too (through the PyTorch reference), and usable under ``torch.compile(fullgraph=True)``,
    CUDA graphs and ``torch.func.vmap`` through the kernels. Forward-mode AD and
    ``torch.func.grad``/``jvp`` take the PyTorch reference (a routed fallback).

    Args:
        x: float16, bfloat16, float32 or float64 tensor ``[..., N]``, any leading shape; rows may
            be strided; a last dimension without unit stride is copied.

    Returns:
        A new contiguous tensor of x's shape and dtype. ``tfg.last_path("softmax")`` tells which
        path computed it, ``tfg.last_path("softmax_backward")`` the latest backward's;
        :func:`plan` which strategy (one pass, cooperative, online, split) a shape takes.
    """
    runtime.check_tensor("x", x, dtypes=SOFTMAX_DTYPES, ndim_min=1)
    needs_grad = torch.is_grad_enabled() and x.requires_grad
    if torch.compiler.is_compiling():
        return softmax_op(x)
    if x.numel() == 0:
        runtime.record_empty(OP)
        return softmax_ref(x).contiguous()
    mode = runtime.autograd_mode_unsupported(x, vmap_ok=not needs_grad)
    if mode is not None:
        return runtime.dispatch_reference(OP, "autograd", mode, lambda: softmax_ref(x).contiguous())
    if needs_grad or torch._C._functorch.peek_interpreter_stack() is not None:
        return softmax_op(x)
    return _forward_routed(x)  # eager inference: skip the dispatcher
