r"""Fused RMSNorm, forward and backward: one pass over memory each way.

Math. For one row :math:`x \in \mathbb{R}^N` with weight :math:`w \in \mathbb{R}^N`:

.. math::

    r = \frac{1}{\sqrt{\tfrac{1}{N}\sum_j x_j^2 + \varepsilon}}, \qquad
    \hat{x} = x\, r, \qquad
    y = w \odot \hat{x}.

``r`` (called ``rstd``, one number per row) is saved for the backward pass.

Backward. Given :math:`dy = \partial L / \partial y`, the weight gradient sums over rows,

.. math:: dw = \sum_{\text{rows}} dy \odot \hat{x},

and the input gradient follows from :math:`\partial r / \partial x_i = -r^3 x_i / N`:

.. math::

    dx_i = r\, dy_i w_i + \sum_j dy_j w_j x_j \Big(-\frac{r^3 x_i}{N}\Big)
         = r \Big( dy_i w_i - \hat{x}_i \cdot \tfrac{1}{N} \sum_j dy_j w_j \hat{x}_j \Big),

that is ``dx = r * (dy*w - xhat * mean(dy*w*xhat, -1))``.

Memory traffic. Eager PyTorch runs about five kernels for the forward (square, mean, add eps,
rsqrt, two multiplies), each a trip through HBM. The fused forward reads ``x`` and ``w`` once
and writes ``y`` and ``rstd``: when a row fits in one block (``N <= BLOCK_N``) the row stays in
registers between the sum of squares and the normalization. Longer rows loop over column
blocks twice (sum of squares, then normalize and store), so the second read usually hits L2;
``fwd_config`` also sends rows of 4096 through the two passes when there are many rows, where
that measured faster.

Dtypes and casting (Hugging Face ``LlamaRMSNorm`` semantics)::

    h = x.to(float32); h = h * rsqrt(mean(h**2) + eps); y = weight * h.to(x.dtype)

Arithmetic runs in float32 for float16, bfloat16 and float32 inputs (upcast right after
``tl.load``: the interpreter computes bf16 arithmetic wrongly otherwise) and in float64 for
float64 inputs, so that ``torch.autograd.gradcheck`` passes through the real kernels. The
normalized row is rounded to ``x.dtype`` *before* it is multiplied by ``weight``, exactly as in
Hugging Face. ``weight`` has x's dtype, or is float32 beside a 16-bit x (an fp32 norm weight
under ``torch.autocast``, or a Hugging Face model kept in fp32 norms): then, as in Hugging Face,
``y`` is promoted to float32. ``rstd`` is float32 (float64 for float64 inputs). ``eps`` reaches
the kernel as two float32 numbers, ``eps`` rounded to float32 and the remainder, added in the
accumulator dtype: a single Python float arrives as float32 in Triton's interpreter whatever the
annotation says, which cost float64 inputs up to ~1e-8 relative error where x² is small next to
eps; the two halves carry 48 bits. ``tritonforge.reference.rms_norm_ref`` implements the same
semantics and is the ``torch`` fallback.

Layouts. Any leading shape is flattened to ``M`` rows of ``N``. Rows may be strided (a row
stride other than ``N``, e.g. ``big[:, :N]``): the kernels take row strides and read in place.
The last dimension must have unit stride; a tensor whose last dimension is strided (e.g. a
transposed view) is copied with ``.contiguous()`` first, and so is one whose leading dimensions
cannot be flattened into a single row stride. Outputs are new contiguous tensors.

Backward reduction of ``dw``, deterministic (no atomics): the backward grid has a fixed number
of programs (about one per SM on a GPU, a handful in the interpreter); each owns a contiguous
group of rows and writes one float32 (float64) partial-sum row into a ``[programs, N]`` buffer,
which ``.sum(0)`` then reduces.

How it meets PyTorch (the template every op follows). Three PyTorch operators, registered with
``torch.library.custom_op``: ``tritonforge::rms_norm`` (inference, no rstd),
``tritonforge::rms_norm_train`` (``(y, rstd)``, with the backward registered by
``register_autograd``) and ``tritonforge::rms_norm_backward``; each has a fake (meta)
implementation, so ``torch.compile(fullgraph=True)`` captures the op as one node with no graph
break, and CUDA graphs (``mode="reduce-overhead"`` or ``torch.cuda.graph``) record its launches.
Why a custom op and not ``torch.library.triton_op`` (whose body Inductor traces, launching the
kernel from generated code) or an ``autograd.Function`` that Dynamo traces: an opaque operator's
body runs on every call, so the router stays whole inside a compiled region — a kernel that fails
to compile or launch still falls back (or raises in strict mode), and ``last_path`` reports the
path that served each call. A traced body would freeze the routing decision of the tracing run,
and in Triton's interpreter ``wrap_triton`` cannot trace at all (it reads the fake tensors' data
pointers), so the CPU tests could never compile the op. The price, measured on the H200
(``benchmarks/experiments/op_integration.py``, bf16, M = 1 and 64, N = 8192): compiled in
Inductor's default mode, ``rms_norm(x * 2, w) + 1`` costs 181-188 µs of host time per call
through the custom op against 72-95 µs through a ``triton_op`` (the HF formula compiled: 48-59);
under CUDA graphs, the deployment decode uses, all three cost the same (110-120 µs of graph-replay
bookkeeping per call). Under CUDA-graph replay no Python runs, so ``last_path`` keeps the route
recorded when the graph was captured.

Eager calls skip the operators where they can: inference without autograd calls the routed
launch directly (the operator's dispatcher costs ~10 µs of host time a call). Forward-mode AD and
``torch.func`` transforms other than ``vmap`` take the PyTorch reference (a routed fallback: a
custom op would drop a forward-mode tangent, and ``torch.func.jvp`` would give zeros);
``create_graph=True`` computes the gradient with the differentiable reference backward, so second
derivatives are exact; ``vmap`` runs the kernels through a rule that moves the batch dimension
to the front.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Optional

import torch

from tritonforge import runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import (
    COOP_WARPS,
    acc_dtype,
    acc_torch_dtype,
    as_rows,
    cast_for_store,
    coop_chunk,
    coop_counters,
    coop_splits,
    coop_words,
    flagged,
    publish_and_wait,
    round_bf16_by_hand,
    row_barrier,
    split_float,
    widen_bf16,
    word_lo,
)
from tritonforge.reference import rms_norm_bwd_ref, rms_norm_ref, rms_norm_rstd_ref

RMS_NORM_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _rms_norm_fwd_kernel(
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    weight_ptr,  # *weight [N], contiguous, x's dtype
    y_ptr,  # *y [M, N]: row stride y_row_stride, unit column stride,
            # x's dtype
    rstd_ptr,  # *rstd [M], ACC_DTYPE: 1 / sqrt(mean(x^2) + eps), saved
               # for backward (if STORE_RSTD)
    x_row_stride,  # elements between rows of x (may differ from N)
    y_row_stride,  # elements between rows of y
    N,  # row length (runtime: every N shares one compiled kernel)
    eps_hi,  # eps = eps_hi + eps_lo: eps rounded to fp32, and the remainder
    eps_lo,  # (see kernel_utils.split_float)
    BLOCK_N: tl.constexpr,  # columns per block (power of two)
    ROW_FITS: tl.constexpr,  # one pass, the row kept in registers (needs
                             # N <= BLOCK_N); else two passes
    ACC_DTYPE: tl.constexpr,  # tl.float32, or tl.float64 for float64 inputs
    ROUND_BF16: tl.constexpr,  # interpreter + bf16: round downcasts by hand
    STORE_RSTD: tl.constexpr,  # write rstd (only autograd needs it;
                               # inference skips the store)
):
    """One program normalizes one row: ``y = w * (x * rstd).to(x.dtype)``,
    ``rstd = 1/sqrt(mean(x²)+eps)``."""
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    cols = tl.arange(0, BLOCK_N)
    if ROW_FITS:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(ACC_DTYPE)
        # w is issued before the reduction waits, and asked to stay in L2
        # (every row reads it).
        w = tl.load(weight_ptr + cols, mask=mask, other=0.0,
                    eviction_policy="evict_last").to(ACC_DTYPE)
        rstd = 1.0 / tl.sqrt(
            tl.sum(x * x, axis=0) / N
            + (tl.cast(eps_hi, ACC_DTYPE) + tl.cast(eps_lo, ACC_DTYPE))
        )
        # Hugging Face order: round the normalized row to x's dtype, then
        # multiply by w.
        x_hat = cast_for_store(x * rstd, x_ptr.dtype.element_ty,
                               ROUND_BF16).to(ACC_DTYPE)
        tl.store(
            y_row + cols,
            cast_for_store(x_hat * w, y_ptr.dtype.element_ty, ROUND_BF16),
            mask=mask,
        )
    else:
        # Pass 1: sum of squares, block by block (elementwise partial sums,
        # reduced once).
        # evict_last: keep the row in L2, pass 2 reads it again.
        sum_sq = tl.zeros([BLOCK_N], dtype=ACC_DTYPE)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_last").to(ACC_DTYPE)
            sum_sq += x * x
        rstd = 1.0 / tl.sqrt(
            tl.sum(sum_sq, axis=0) / N
            + (tl.cast(eps_hi, ACC_DTYPE) + tl.cast(eps_lo, ACC_DTYPE))
        )
        # Pass 2: normalize and store. This re-read of x comes from L2 and
        # is its last use.
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_first").to(ACC_DTYPE)
            w = tl.load(weight_ptr + start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_last").to(ACC_DTYPE)
            x_hat = cast_for_store(x * rstd, x_ptr.dtype.element_ty,
                                   ROUND_BF16).to(ACC_DTYPE)
            y = cast_for_store(x_hat * w, y_ptr.dtype.element_ty,
                               ROUND_BF16)
            tl.store(y_row + start + cols, y, mask=mask)
    if STORE_RSTD:
        tl.store(rstd_ptr + row, rstd)


@triton.jit
def _rms_norm_fwd_coop_kernel(
    x_ptr, weight_ptr, y_ptr, rstd_ptr, x_row_stride, y_row_stride, N, eps_hi, eps_lo,  # as the one-row kernel
    part_ptr,  # *[M, SPLITS] ACC_DTYPE: each chunk's sum of squares
    count_ptr,  # *[M] int32, zeroed: each row's arrivals (kernel_utils.row_barrier)
    SPLITS: tl.constexpr,  # programs per row: cdiv(N, CHUNK); constexpr (softmax, fp32 4096 x 131072: 1118 us, a runtime SPLITS 1244)
    CHUNK: tl.constexpr,  # elements each program holds in registers
    SPLITS_P2: tl.constexpr,  # next power of two of SPLITS
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    STORE_RSTD: tl.constexpr,
    KEEP16: tl.constexpr,  # bf16 x: hold the 16-bit chunk across the barrier (kernel_utils.widen_bf16)
    EVEN_N: tl.constexpr = False,  # N a multiple of CHUNK: no masks
    FLAGS: tl.constexpr = False,  # float32: part_ptr is *[M, SPLITS] int64, zeroed (kernel_utils.publish_and_wait); count_ptr unused
):
    """Program (row, chunk) of a row too long for one program: the chunk's sum of squares, the
    row's barrier, the row's rstd from all partial sums (one fixed order: every program gets the
    same rstd), then this chunk of y from registers: x is read once. What a program holds across
    the barrier decides how many fit an SM, so it holds as little as it can: the weight's chunk is
    loaded after the wait (from L2: every row reads the same weight), and a bf16 chunk stays 16-bit
    (H200, bf16 4096 x 65536: 331 -> 288 us with chunks of 16384; float32 565 -> 556;
    benchmarks/experiments/coop-registers-keep-exp-nvidia-h200-2026-12-01.json)."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
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


@triton.jit
def _rms_norm_bwd_kernel(
    dy_ptr,  # *dy [M, N]: row stride dy_row_stride, unit column stride,
             # x's dtype
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    weight_ptr,  # *weight [N], contiguous
    rstd_ptr,  # *rstd [M], ACC_DTYPE, from the forward
    dx_ptr,  # *dx [M, N]: row stride dx_row_stride, x's dtype (unused
             # without COMPUTE_DX)
    dw_partial_ptr,  # *[programs, N] ACC_DTYPE: this program's sum of
                     # dy * xhat over its rows
    dy_row_stride,  # elements between rows of dy
    x_row_stride,  # elements between rows of x
    dx_row_stride,  # elements between rows of dx
    M,  # number of rows
    N,  # row length
    rows_per_program,  # each program owns rows [pid * rows_per_program,
                       # ... + rows_per_program)
    BLOCK_N: tl.constexpr,  # columns per block (power of two)
    ROW_FITS: tl.constexpr,  # N <= BLOCK_N: w and the dw partial stay in
                             # registers
    ACC_DTYPE: tl.constexpr,  # tl.float32, or tl.float64 for float64 inputs
    COMPUTE_DX: tl.constexpr,  # x needs a gradient
    COMPUTE_DW: tl.constexpr,  # weight needs a gradient
    ROUND_BF16: tl.constexpr,  # interpreter + bf16: round the dx downcast
                               # by hand
    STAGES: tl.constexpr,  # software-pipelining depth of the row loop
                           # (1 = none): see bwd_stages
):
    """``dx = rstd * (dy*w - xhat * mean(dy*w*xhat))`` per row; ``dw``
    partial = sum of ``dy*xhat``."""
    pid = tl.program_id(0).to(tl.int64)
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, M)
    cols = tl.arange(0, BLOCK_N)
    # this program's private row: no atomics, deterministic
    dw_row = dw_partial_ptr + pid * N
    if ROW_FITS:
        mask = cols < N
        w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(ACC_DTYPE)
        dw_acc = tl.zeros([BLOCK_N], dtype=ACC_DTYPE)
        # With STAGES > 1 the compiler loads the next rows of x and dy (into
        # shared memory) while this row is computed: one program per SM
        # walks many rows, and without the overlap each row's load latency
        # is paid in full.
        for row in tl.range(row_start, row_end, num_stages=STAGES):
            x = tl.load(x_ptr + row * x_row_stride + cols,
                        mask=mask, other=0.0).to(ACC_DTYPE)
            dy = tl.load(dy_ptr + row * dy_row_stride + cols,
                         mask=mask, other=0.0).to(ACC_DTYPE)
            rstd = tl.load(rstd_ptr + row)
            x_hat = x * rstd
            if COMPUTE_DW:
                dw_acc += dy * x_hat
            if COMPUTE_DX:
                dy_w = dy * w
                mean_dyw_xhat = tl.sum(dy_w * x_hat, axis=0) / N
                dx = rstd * (dy_w - x_hat * mean_dyw_xhat)
                dx_out = cast_for_store(dx, dx_ptr.dtype.element_ty,
                                        ROUND_BF16)
                tl.store(dx_ptr + row * dx_row_stride + cols, dx_out,
                         mask=mask)
        if COMPUTE_DW:
            tl.store(dw_row + cols, dw_acc, mask=mask)
    else:
        # Long rows: the dw partial row lives in the (zero-initialized)
        # buffer and is updated block by block; only this program touches
        # it, so read-modify-write is race-free.
        for row in range(row_start, row_end):
            x_row = x_ptr + row * x_row_stride
            dy_row = dy_ptr + row * dy_row_stride
            rstd = tl.load(rstd_ptr + row)
            if COMPUTE_DX:
                # Pass 1: mean(dy * w * xhat) over the whole row.
                acc = tl.zeros([BLOCK_N], dtype=ACC_DTYPE)
                for start in range(0, N, BLOCK_N):
                    mask = start + cols < N
                    x = tl.load(x_row + start + cols, mask=mask,
                                other=0.0).to(ACC_DTYPE)
                    dy = tl.load(dy_row + start + cols, mask=mask,
                                 other=0.0).to(ACC_DTYPE)
                    w = tl.load(weight_ptr + start + cols, mask=mask,
                                other=0.0).to(ACC_DTYPE)
                    acc += dy * w * (x * rstd)
                mean_dyw_xhat = tl.sum(acc, axis=0) / N
            # Pass 2: dx, and this row's contribution to the dw partial.
            for start in range(0, N, BLOCK_N):
                mask = start + cols < N
                x = tl.load(x_row + start + cols, mask=mask,
                            other=0.0).to(ACC_DTYPE)
                dy = tl.load(dy_row + start + cols, mask=mask,
                             other=0.0).to(ACC_DTYPE)
                x_hat = x * rstd
                if COMPUTE_DX:
                    w = tl.load(weight_ptr + start + cols, mask=mask,
                                other=0.0).to(ACC_DTYPE)
                    dx = rstd * (dy * w - x_hat * mean_dyw_xhat)
                    dx_out = cast_for_store(dx, dx_ptr.dtype.element_ty,
                                            ROUND_BF16)
                    tl.store(dx_ptr + row * dx_row_stride + start + cols,
                             dx_out, mask=mask)
                if COMPUTE_DW:
                    partial = tl.load(dw_row + start + cols, mask=mask,
                                      other=0.0)
                    tl.store(dw_row + start + cols, partial + dy * x_hat,
                             mask=mask)


# ----------------------------------------------------------------------------------------------
# Heuristics: block sizes, warps, the backward grid and pipelining, in one place
# ----------------------------------------------------------------------------------------------
#
# The measurements behind each rule are in benchmarks/NOTES.md ("rms_norm heuristics"), and the
# experiments that made them in benchmarks/experiments/:
#
#   rule                                            experiment (benchmarks/experiments/)
#   ----------------------------------------------  ------------------------------------------
#   row block: next power of two, capped            rmsnorm-fwd-blocks
#   rows of 4096 x many rows: two passes            rmsnorm-fwd-blocks, rmsnorm-fwd-passes
#   backward: pipelined row loop (3 stages)         rmsnorm-bwd-variants
#   backward: 1 / 2 / 3 programs per SM             rmsnorm-bwd-programs
#   decode sizes: no other choice was faster        rmsnorm-fwd-decode

MAX_BLOCK_N = 16384
"""Largest row block, in elements, for float32 arithmetic (64 KB of one row in registers).
Rows longer than this loop over column blocks. Float64 and the backward (which holds x, dy, w
and a dw partial at once) use half of it."""

INTERPRETER_BWD_PROGRAMS = 8
"""Backward programs in the interpreter: few, because each program costs CPU time."""

MANY_ROWS = 1024
"""From this many rows on, the forward applies the measured exceptions of :func:`fwd_config`."""

BWD_PIPELINE_STAGES = 3
"""Rows of x and dy in flight per backward program when the row loop is software-pipelined."""

BWD_PIPELINE_MAX_ROW_BYTES = 16 * 1024
"""Pipeline only row blocks up to this size (float32 rows of 32 KB gained nothing)."""

BWD_SHARED_SLACK_BYTES = 2048
"""Shared memory a backward program uses besides the pipeline buffers (reduction scratch),
counted generously so that :func:`bwd_shared_bytes` is an upper bound (GPU-tested against the
compiled kernel's ``metadata.shared``)."""


def row_config(N: int, dtype: torch.dtype, *, backward: bool = False) -> tuple[int, int]:
    """``(BLOCK_N, num_warps)`` for rows of ``N`` elements: the next power of two up to the cap;
    more warps for longer blocks (``num_warps`` matters on a GPU only). Cached: it runs on every
    call. The cache is keyed on ``MAX_BLOCK_N`` too, so a changed cap (tests lower it to reach
    the column loop with small rows) takes effect."""
    return _row_config_cached(N, dtype, backward, MAX_BLOCK_N)


@functools.lru_cache(maxsize=1024)
def _row_config_cached(N: int, dtype: torch.dtype, backward: bool, max_block_n: int) -> tuple[int, int]:
    cap = max_block_n
    if dtype == torch.float64:
        cap //= 2
    if backward:
        cap //= 2
    next_power_of_2 = 1 << max(N - 1, 0).bit_length()
    block_n = min(next_power_of_2, max(cap, 1))
    num_warps = 4 if block_n <= 1024 else (8 if block_n <= 4096 else 16)
    return block_n, num_warps


def fwd_config(M: int, N: int, dtype: torch.dtype) -> tuple[int, int, bool]:
    """``(BLOCK_N, num_warps, one_pass)`` for the forward: :func:`row_config`, one pass whenever
    the row fits a block, except rows of exactly 4096 with at least ``MANY_ROWS`` rows, where two
    passes measured faster on the H200 (16-bit: blocks of 2048, 8 warps; float32: the whole row,
    16 warps, re-read from L2). Few rows (decode) keep one pass."""
    block_n, num_warps = row_config(N, dtype)
    if N > block_n and not runtime.interpreting():
        # On a GPU the forward keeps rows up to twice the cap in one program (16 warps, 64 elements
        # a thread): H200, 4096 x 32768, 0.93 (bf16) / 0.94 (fp32) of a copy, where the cooperative
        # path made 0.78 / 0.89 (benchmarks/experiments/long-rows-one-pass-nvidia-h200-2026-11-30.json).
        wide, wide_warps = _row_config_cached(N, dtype, False, 2 * MAX_BLOCK_N)
        if wide >= N:
            return wide, wide_warps, True
    if M >= MANY_ROWS and N == 4096 and block_n == 4096:
        if dtype.itemsize == 2:
            return 2048, 8, False
        if dtype == torch.float32:
            return 4096, 16, False
    return block_n, num_warps, N <= block_n


def fwd_coop_chunk(dtype: torch.dtype) -> int:
    """Elements each program of a cooperative row holds: ``kernel_utils.coop_chunk``, doubled for
    bf16, whose chunk stays 16-bit across the barrier (64 elements a thread at 8 warps). H200, bf16
    rows of 64K / 128K: 298.6 / 313.1 us with chunks of 8192, 287.5 / 289.4 with 16384
    (benchmarks/experiments/coop-registers-keep-exp-nvidia-h200-2026-12-01.json)."""
    return 2 * coop_chunk(dtype) if dtype == torch.bfloat16 else coop_chunk(dtype)


def fwd_coop_unmasked(dtype: torch.dtype, N: int) -> bool:
    """Whether the cooperative forward drops its masks (``EVEN_N``): bf16 rows a whole number of
    chunks. H200 (benchmarks/experiments/coop-exp-even-nvidia-h200-2026-12-02.json): bf16 74 -> 70
    registers, 64 x 131072 11.7 -> 11.3 us, 4096 x 65536 293.1 -> 292.1; float32 lost (60 -> 72
    registers, 564.3 -> 585.0 at 4096 x 65536)."""
    return dtype == torch.bfloat16 and N % fwd_coop_chunk(dtype) == 0


def fwd_coop_splits(M: int, N: int, dtype: torch.dtype, device: torch.device) -> int:
    """Programs per row of the forward's cooperative path (``kernel_utils.coop_splits``), 0 where
    it does not run: rows that fit one program's block take one pass (or the measured two-pass
    exceptions of :func:`fwd_config`); longer rows on a GPU are held by several programs, read
    once (H200, rows of 64K-128K: 0.88-0.90 of a copy in float32 and 0.86-0.87 in bf16, where
    the two-pass loop that re-reads x made 0.63-0.65 and 0.60-0.72;
    benchmarks/experiments/coop-registers-adopted-nvidia-h200-2026-12-01.json)."""
    _, _, one_pass = fwd_config(M, N, dtype)
    if one_pass or N <= row_config(N, dtype)[0]:
        return 0  # a row that fits one block (the measured two-pass exceptions included)
    return coop_splits(M, N, dtype, runtime.gpu_sm_count(device), fwd_coop_chunk(dtype))


def bwd_shared_bytes(block_n: int, itemsize: int, stages: int) -> int:
    """Upper bound of the shared memory one backward program uses: a pipelined loop keeps
    ``stages`` row blocks of x and of dy in flight; an unpipelined one keeps none."""
    buffers = stages * 2 * block_n * itemsize if stages > 1 else 0
    return buffers + BWD_SHARED_SLACK_BYTES


def bwd_stages(block_n: int, dtype: torch.dtype, device: torch.device) -> int:
    """Pipelining depth of the backward's row loop: the deepest of 3, 2 whose buffers fit the
    device's shared memory per block (read from the driver, :func:`runtime.shared_memory_per_block`),
    for row blocks up to ``BWD_PIPELINE_MAX_ROW_BYTES``; else 1 (no pipelining). Pipelining needs
    asynchronous copies (``cp.async``, compute capability 8.0 and newer); the interpreter has no
    pipeline."""
    if device.type != "cuda" or runtime.interpreting():
        return 1
    capability = runtime.device_capability(device)
    if capability is None or capability < (8, 0) or block_n * dtype.itemsize > BWD_PIPELINE_MAX_ROW_BYTES:
        return 1
    limit = runtime.shared_memory_per_block(device)
    for stages in range(BWD_PIPELINE_STAGES, 1, -1):
        if limit is not None and bwd_shared_bytes(block_n, dtype.itemsize, stages) <= limit:
            return stages
    return 1


def bwd_programs_per_sm(row_bytes: int, stages: int) -> int:
    """Backward programs per SM for the pipelined loop, by the bytes of one row block (the row
    padded to ``BLOCK_N``): 1 for 16 KB and more, 2 for 8 KB, 3 below; 1 unpipelined."""
    if stages == 1 or row_bytes >= 16 * 1024:
        return 1
    return 2 if row_bytes >= 8 * 1024 else 3


def bwd_grid(M: int, device: torch.device,
             programs_per_sm: int = 1) -> tuple[int, int]:
    """``(programs, rows_per_program)`` for the backward:
    ``programs_per_sm`` programs per SM on a GPU (each walks a contiguous
    block of rows), a few in the interpreter."""
    if device.type == "cuda" and not runtime.interpreting():
        index = (device.index if device.index is not None
                 else torch.cuda.current_device())
        target = runtime.sm_count(index) * programs_per_sm
    else:
        target = INTERPRETER_BWD_PROGRAMS
    # Ceil division in plain ints (triton.cdiv is a constexpr_function:
    # ~2 µs of Python a call).
    rows_per_program = -(-M // max(1, min(M, target)))
    return -(-M // rows_per_program), rows_per_program


# ----------------------------------------------------------------------------------------------
# Launchers: each kernel is launched as kernel[grid](...) right here
# ----------------------------------------------------------------------------------------------


def _empty(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every buffer a kernel must overwrite completely is allocated here (tests poison it)."""
    return torch.empty(*shape, dtype=dtype, device=device)


def out_dtype(x_dtype: torch.dtype, weight_dtype: torch.dtype) -> torch.dtype:
    """The output dtype: ``weight * normalized.to(x.dtype)`` promotes as in Hugging Face."""
    return x_dtype if x_dtype == weight_dtype else torch.promote_types(x_dtype, weight_dtype)


def rms_norm_fwd(
    x: torch.Tensor, weight: torch.Tensor, eps: float, *, save_rstd: bool = True
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Launch the forward kernel. Returns ``(y, rstd)``: y a new contiguous tensor of x's shape,
    rstd ``[M]`` (``None`` with ``save_rstd=False``: inference allocates and stores none)."""
    N = x.shape[-1]
    x_rows = as_rows(x, N)  # [M, N]
    weight = weight.contiguous()  # [N]; a copy only for a strided weight view
    M = x_rows.shape[0]
    y = _empty(*x.shape, dtype=out_dtype(x.dtype, weight.dtype), device=x.device)  # x's shape, owns its storage
    y_rows = y.view(M, N)  # [M, N]
    rstd = _empty(M, dtype=acc_torch_dtype(x.dtype), device=x.device) if save_rstd else None  # [M]
    block_n, num_warps, one_pass = fwd_config(M, N, x.dtype)
    eps_hi, eps_lo = split_float(eps)
    splits = fwd_coop_splits(M, N, x.dtype, x.device)
    if splits:
        flags = x.dtype != torch.float64  # float32 partials: each program's is its word (kernel_utils.publish_and_wait)
        parts = coop_words(M, splits, x.device) if flags else _empty(M, splits, dtype=torch.float64, device=x.device)
        _rms_norm_fwd_coop_kernel[(M * splits,)](
            x_rows, weight, y_rows, rstd if save_rstd else y_rows, x_rows.stride(0), y_rows.stride(0), N, eps_hi, eps_lo,
            parts, parts if flags else coop_counters(M, x.device), SPLITS=splits,
            CHUNK=fwd_coop_chunk(x.dtype), SPLITS_P2=triton.next_power_of_2(splits), ACC_DTYPE=acc_dtype(x.dtype),
            ROUND_BF16=round_bf16_by_hand(x.dtype), STORE_RSTD=save_rstd, KEEP16=x.dtype == torch.bfloat16,
            EVEN_N=fwd_coop_unmasked(x.dtype, N), FLAGS=flags, num_warps=COOP_WARPS,
        )  # fmt: skip
        return y, rstd
    _rms_norm_fwd_kernel[(M,)](
        x_rows, weight, y_rows, rstd if save_rstd else y_rows,  # without rstd the pointer is never touched
        x_rows.stride(0), y_rows.stride(0), N, eps_hi, eps_lo,
        BLOCK_N=block_n, ROW_FITS=one_pass, ACC_DTYPE=acc_dtype(x.dtype),
        ROUND_BF16=round_bf16_by_hand(x.dtype), STORE_RSTD=save_rstd,
        num_warps=num_warps,
    )  # fmt: skip
    return y, rstd


def rms_norm_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    rstd: torch.Tensor,
    *,
    compute_dx: bool = True,
    compute_dweight: bool = True,
) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Launch the backward kernel. Returns ``(dx, dweight)`` (``None`` for a
    gradient not asked): dx in x's dtype and shape, dweight in weight's
    dtype."""
    N = x.shape[-1]
    x_rows = as_rows(x, N)  # [M, N]
    # [M, N]; a copy when dy is not row-major (e.g. expanded)
    dy_rows = as_rows(dy, N)
    weight = weight.contiguous()  # [N]
    M = x_rows.shape[0]
    device = x.device
    acc = acc_torch_dtype(x.dtype)
    block_n, num_warps = row_config(N, x.dtype, backward=True)
    row_fits = N <= block_n
    stages = bwd_stages(block_n, x.dtype, device) if row_fits else 1
    programs, rows_per_program = bwd_grid(
        M, device, bwd_programs_per_sm(block_n * x.element_size(), stages))
    # dx: x's shape, owns its storage
    dx = (_empty(*x.shape, dtype=x.dtype, device=device)
          if compute_dx else None)
    dw_partial = None
    if compute_dweight:
        # [programs, N]; long rows accumulate into it, so it starts at zero
        dw_partial = (
            _empty(programs, N, dtype=acc, device=device) if row_fits
            else torch.zeros(programs, N, dtype=acc, device=device)
        )
    # placeholder pointers are never touched
    dx_rows = dx.view(M, N) if dx is not None else dy_rows
    _rms_norm_bwd_kernel[(programs,)](
        dy_rows, x_rows, weight, rstd, dx_rows,
        dw_partial if dw_partial is not None else rstd,
        dy_rows.stride(0), x_rows.stride(0), dx_rows.stride(0),
        M, N, rows_per_program,
        BLOCK_N=block_n, ROW_FITS=row_fits, ACC_DTYPE=acc_dtype(x.dtype),
        COMPUTE_DX=compute_dx, COMPUTE_DW=compute_dweight,
        ROUND_BF16=round_bf16_by_hand(x.dtype),
        STAGES=stages, num_warps=num_warps,
    )  # fmt: skip
    dweight = (dw_partial.sum(0).to(weight.dtype)  # [N]
               if dw_partial is not None else None)
    return dx, dweight


# ----------------------------------------------------------------------------------------------
# Routing: kernel or reference, decided and recorded per call (runtime.dispatch)
# ----------------------------------------------------------------------------------------------

OP = "rms_norm"
BACKWARD_OP = "rms_norm_backward"
"""The names :func:`tritonforge.last_path` knows: the forward, and the backward of a training call."""


def _forward_routed(x: torch.Tensor, weight: torch.Tensor, eps: float, save_rstd: bool):
    """``(y, rstd)`` from the kernel, or from the reference when the router falls back."""
    if x.numel() == 0:  # nothing to launch (an operator called directly with an empty x)
        runtime.record_empty(OP)
        return rms_norm_ref(x, weight, eps).contiguous(), (rms_norm_rstd_ref(x, eps) if save_rstd else None)

    def reference():
        y = rms_norm_ref(x, weight, eps).contiguous()
        return y, (rms_norm_rstd_ref(x, eps) if save_rstd else None)

    return runtime.dispatch(
        OP, device=x.device, dtype=x.dtype,
        kernel=lambda: rms_norm_fwd(x, weight, eps, save_rstd=save_rstd),
        reference=reference,
    )  # fmt: skip


def _backward_routed(dy, x, weight, rstd, eps: float, need_dx: bool, need_dweight: bool):
    """``(dx, dweight)`` from the backward kernel, or from the reference backward (routed like
    the forward: warned once, recorded, an error in strict mode)."""
    if x.numel() == 0:
        runtime.record_empty(BACKWARD_OP)
        return (torch.zeros_like(x) if need_dx else None), (torch.zeros_like(weight) if need_dweight else None)

    def reference():
        dx, dweight = rms_norm_bwd_ref(dy, x, weight, eps)
        return (dx if need_dx else None), (dweight if need_dweight else None)

    return runtime.dispatch(
        BACKWARD_OP, device=x.device, dtype=x.dtype,
        kernel=lambda: rms_norm_bwd(dy, x, weight, rstd, compute_dx=need_dx, compute_dweight=need_dweight),
        reference=reference,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# The PyTorch operators (torch.library): what torch.compile, CUDA graphs and autograd see
# ----------------------------------------------------------------------------------------------


@torch.library.custom_op("tritonforge::rms_norm", mutates_args=())
def rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Inference forward (no rstd), routed. Not differentiable: :func:`rms_norm` calls
    :func:`rms_norm_train_op` when a gradient can be asked for."""
    return _forward_routed(x, weight, eps, save_rstd=False)[0]


@rms_norm_op.register_fake
def _(x, weight, eps):
    return x.new_empty(x.shape, dtype=out_dtype(x.dtype, weight.dtype))


@torch.library.custom_op("tritonforge::rms_norm_train", mutates_args=())
def rms_norm_train_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Training forward, routed: ``(y, rstd)``, rstd ``[M]`` kept for the backward."""
    y, rstd = _forward_routed(x, weight, eps, save_rstd=True)
    return y, rstd


@rms_norm_train_op.register_fake
def _(x, weight, eps):
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return x.new_empty(x.shape, dtype=out_dtype(x.dtype, weight.dtype)), x.new_empty(rows, dtype=acc_torch_dtype(x.dtype))


@torch.library.custom_op("tritonforge::rms_norm_backward", mutates_args=())
def rms_norm_backward_op(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor, eps: float, need_dx: bool, need_dweight: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward, routed: ``(dx, dweight)``; a gradient not asked for is an empty tensor
    (an operator's outputs cannot be None)."""
    dx, dweight = _backward_routed(dy, x, weight, rstd, eps, need_dx, need_dweight)
    return (dx if dx is not None else x.new_empty(0)), (dweight if dweight is not None else weight.new_empty(0))


@rms_norm_backward_op.register_fake
def _(dy, x, weight, rstd, eps, need_dx, need_dweight):
    return (x.new_empty(x.shape if need_dx else (0,))), weight.new_empty(weight.shape if need_dweight else (0,))


def setup_context(ctx, inputs, output):
    """What the backward keeps from the training forward: x, weight and the
    per-row rstd."""
    x, weight, eps = inputs
    _, rstd = output
    ctx.save_for_backward(x, weight, rstd)
    ctx.eps = eps
    ctx.mark_non_differentiable(rstd)


def backward(ctx, dy, _drstd):
    """``(dx, dweight, None)`` from dy: the backward operator (routed), or
    the differentiable reference backward when autograd builds a graph of
    the gradient (``create_graph=True``)."""
    x, weight, rstd = ctx.saved_tensors
    need_dx, need_dweight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if not (need_dx or need_dweight):
        return None, None, None
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():
        # create_graph=True (a Hessian, a gradient penalty): the gradient
        # must itself be differentiable, so it is computed by the reference
        # backward, whose PyTorch ops autograd records (rstd recomputed from
        # x inside the graph). A routed fallback, never zeros.
        dx, dweight = runtime.dispatch_reference(
            BACKWARD_OP, "autograd",
            "create_graph=True: the backward kernel is not "
            "differentiable; the PyTorch reference backward is, "
            "so double backward is exact",
            lambda: rms_norm_bwd_ref(dy, x, weight, ctx.eps),
        )  # fmt: skip
        return ((dx if need_dx else None),
                (dweight if need_dweight else None), None)
    dx, dweight = rms_norm_backward_op(dy, x, weight, rstd, ctx.eps,
                                       need_dx, need_dweight)
    return ((dx if need_dx else None),
            (dweight if need_dweight else None), None)


rms_norm_train_op.register_autograd(backward, setup_context=setup_context)


def _vmap_rule(info, in_dims, x, weight, eps):
    """``vmap`` over any batch dimension: the op is row-wise over the last dimension, so the
    batch dimension moves to the front and becomes one more leading dimension. A batched weight
    (one weight per batch element) normalizes with a weight of ones, which returns the rounded
    normalized row exactly, then scales it the way Hugging Face does (``weight * normalized``)."""
    x_dim, w_dim, _ = in_dims
    x = x.movedim(x_dim, 0) if x_dim is not None else x
    if w_dim is None:
        return rms_norm_op(x, weight, eps), (0 if x_dim is not None else None)
    weight = weight.movedim(w_dim, 0)  # [B, N]
    normalized = rms_norm_op(x, torch.ones(x.shape[-1], dtype=x.dtype, device=x.device), eps)
    leading = normalized.dim() - (2 if x_dim is not None else 1)
    return weight.view(weight.shape[0], *([1] * leading), weight.shape[-1]) * normalized, 0


rms_norm_op.register_vmap(_vmap_rule)


# ----------------------------------------------------------------------------------------------
# The public function
# ----------------------------------------------------------------------------------------------


def _check_eps(eps: object) -> float:
    if type(eps) is float and 0.0 <= eps < math.inf:
        return eps  # the common case, decided in one comparison
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real Python number, got {type(eps).__name__}")
    eps = float(eps)
    if not (math.isfinite(eps) and eps >= 0.0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps}")
    return eps


def _check_inputs(x: object, weight: object, eps: object) -> float:
    runtime.check_tensor("x", x, dtypes=RMS_NORM_DTYPES, ndim_min=1)
    runtime.check_tensor("weight", weight, dtypes=RMS_NORM_DTYPES)
    if weight.dim() != 1:
        raise ValueError(f"weight must be 1-D with x.shape[-1] = {x.shape[-1]} elements, got shape {tuple(weight.shape)}")
    runtime.check_same_device(x=x, weight=weight)
    if weight.dtype != x.dtype and not (weight.dtype == torch.float32 and x.dtype in (torch.float16, torch.bfloat16)):
        raise TypeError(
            f"weight has dtype {str(weight.dtype).replace('torch.', '')} but x has {str(x.dtype).replace('torch.', '')}; "
            "weight must have x's dtype, or be float32 beside a float16/bfloat16 x (the output is then float32)"
        )
    if weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight has {weight.shape[0]} elements but x.shape[-1] is {x.shape[-1]}; they must match")
    return _check_eps(eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Root-mean-square normalization over the last dimension, then a per-channel scale.

    ``y = weight * (x / sqrt(mean(x**2, -1) + eps)).to(x.dtype)`` with the Hugging Face Llama
    casting (normalize in float32, or float64 for float64 inputs; round to ``x.dtype``; then
    multiply by ``weight``). Differentiable with respect to ``x`` and ``weight``, twice too (the
    second derivative through the PyTorch reference), and usable under ``torch.compile``
    (``fullgraph=True``), CUDA graphs and ``torch.func.vmap`` through the kernels. Forward-mode
    AD and ``torch.func.grad``/``jvp`` take the PyTorch reference (a routed fallback).

    Args:
        x: float16, bfloat16, float32 or float64 tensor ``[..., N]``, any leading shape. Rows may
            be strided; a last dimension without unit stride (a transposed view) is copied.
        weight: ``[N]`` tensor on x's device, with x's dtype, or float32 beside a 16-bit x.
        eps: a finite real number >= 0 added to the mean square (in the accumulator dtype).

    Returns:
        A new contiguous tensor with x's shape (which owns its storage), in x's dtype, or float32
        for a float32 weight. ``tfg.last_path("rms_norm")`` tells which path computed it, and
        ``tfg.last_path("rms_norm_backward")`` which path computed the latest backward.
    """
    key = _signature(x, weight, eps) if runtime.eager_fast_path() else None
    y = runtime.run_remembered(key, x, weight)  # this signature, checked and served by the kernel before
    if y is not runtime.MISS:
        return y
    eps = _check_inputs(x, weight, eps)
    needs_grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    if torch.compiler.is_compiling():  # traced by Dynamo: the graph holds the operator
        return rms_norm_train_op(x, weight, eps)[0] if needs_grad else rms_norm_op(x, weight, eps)
    if x.numel() == 0:  # nothing to launch: the reference gives the empty (differentiable) answer
        runtime.record_empty(OP)
        return rms_norm_ref(x, weight, eps).contiguous()
    mode = runtime.autograd_mode_unsupported(x, weight, vmap_ok=not needs_grad)
    if mode is not None:
        return runtime.dispatch_reference(OP, "autograd", mode, lambda: rms_norm_ref(x, weight, eps).contiguous())
    if needs_grad:
        return rms_norm_train_op(x, weight, eps)[0]
    if torch._C._functorch.peek_interpreter_stack() is not None:
        return rms_norm_op(x, weight, eps)  # vmap: the operator's vmap rule
    # Eager inference skips the operator's dispatcher (~10 µs of host time a call, longer than a
    # decode-sized kernel runs on the GPU) and calls what the operator's body calls.
    y = _forward_routed(x, weight, eps, save_rstd=False)[0]
    runtime.remember_served(OP, key, lambda: _eager_launch(x, weight, eps))
    return y


def _signature(x, weight, eps):
    """What decides an eager inference call: shapes, strides, dtypes, devices and eps (``None``
    for arguments that are not tensors: the checks then say what is wrong)."""
    try:
        return (OP, x.shape, x.stride(), x.dtype, x.device, weight.shape, weight.stride(), weight.dtype, weight.device, eps)
    except (AttributeError, TypeError):
        return None


def _eager_launch(x: torch.Tensor, weight: torch.Tensor, eps: float):
    """The launch :func:`rms_norm_fwd` makes for this signature (inference, no rstd), with every
    decision taken once: a function of ``(x, weight)`` that allocates y and launches the kernel.
    ``None`` where the launch needs more than that (a copy of x or of the weight,
    the cooperative path's partials)."""
    N = x.shape[-1]
    M = x.numel() // N
    x_rows = as_rows(x, N)
    if x_rows.data_ptr() != x.data_ptr() or x_rows.stride(-1) != 1 or not weight.is_contiguous():
        return None
    if fwd_coop_splits(M, N, x.dtype, x.device):
        return None
    block_n, num_warps, one_pass = fwd_config(M, N, x.dtype)
    eps_hi, eps_lo = split_float(eps)
    shape, dtype, device, x_stride = x.shape, out_dtype(x.dtype, weight.dtype), x.device, x_rows.stride(0)
    kernel = _rms_norm_fwd_kernel[(M,)]
    flags = dict(BLOCK_N=block_n, ROW_FITS=one_pass, ACC_DTYPE=acc_dtype(x.dtype), ROUND_BF16=round_bf16_by_hand(x.dtype),
                 STORE_RSTD=False, num_warps=num_warps)  # fmt: skip

    def launch(x, weight):
        y = _empty(*shape, dtype=dtype, device=device)
        kernel(x, weight, y, y, x_stride, N, N, eps_hi, eps_lo, **flags)
        return y

    return launch
