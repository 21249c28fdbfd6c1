"""Cooperative rows, two questions left by the flag words (``coop_flags.py``).

Mode ``short``: rows the package keeps whole in one program (up to 32K elements) cut into
cooperative chunks instead? At 16384 x 32768 bf16 the package's pipelined one-pass kernel reaches
0.93 of a same-size copy (543.7 us) and its cooperative kernel with flag words at chunks of 4096
and 4 warps 0.95 (527.1 us; ``coop-flags-floor-nvidia-h200-2026-12-02.json``). Here 16-bit and
float32 rows of 8K-32K at several row counts: ``tritonforge`` (its plan), beside the cooperative
kernel at ``SHORT_CHUNKS`` (``smoke.coop_kernel_call``).

Mode ``hold``: at 64 rows of 128K the data a program holds across its wait fills the register file
(64 x 131072 float32 values are 32 MB; an H200's 132 SMs have 33 MB), so the programs run in two
waves: the bf16 forward holds ``e`` in float32, the backward both dy and y (16 bits each). Variants:

- ``reload`` (the backward): hold y (its words) across the wait and load dy again after it (from
  L2, where it was just read): half the registers;
- ``sub`` (the forward): the chunk as ``[CHUNK / SUB_N, SUB_N]``, one warp a sub-row (SUB_N: 8 or
  4 elements a thread, 16 bytes), each sub-row its own max: a warp's exponentials need none of
  the other warps' data, and the chunk's max and sum are merged from the sub-rows' (small).

Each beside ``tritonforge`` and the package's kernel at the same chunk and warps. ``of_same_copy`` =
the shape's same-size copy's time / the row's; device time (CUDA-graph replay, median); every
variant is checked against float64 first.

Usage (CUDA GPU, repository root): python benchmarks/experiments/cooperative-rows/coop_hold.py OUT.json short|hold
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/cooperative-rows/coop_hold.py OUT.json short|hold
"""

import sys

import torch

import smoke  # first: imports tritonforge before triton
from smoke import toy
from tritonforge.kernel_utils import cast_for_store, exp_shifted, round_bf16_by_hand
from tritonforge.ops.gpu.coop import (
    bf16_pair,
    bf16_pair_hi,
    bf16_pair_lo,
    coop_words,
    flagged,
    opaque_u32,
    pack_floats,
    packs_bf16_rows,
    publish_and_wait,
    word_hi,
    word_lo,
)

import triton
import triton.language as tl

SIXTEEN = (torch.bfloat16, torch.float16)
SHORT_CASES = toy([(n, m, SIXTEEN) for n in (8192, 16384) for m in (256, 2048, 16384)]
                  + [(32768, m, (*SIXTEEN, torch.float32)) for m in (256, 2048, 16384)]
                  + [(32768, m, (torch.float32,)) for m in (4096, 8192)], [(256, 3, SIXTEEN)])  # fmt: skip
"""Mode ``short``: (row length, rows, dtypes)."""
SHORT_CHUNKS = toy([(2048, 4), (4096, 4), (8192, 4)], [(256, 1)])
"""(chunk, warps); a toy row is one chunk: the interpreter runs programs one at a time."""
HOLD_CASES = toy([(64, 131072), (64, 262144), (4096, 131072)], [(3, 256)])
"""Mode ``hold``: (rows, row length), bf16."""
HOLD_CHUNKS = toy([(4096, 4), (8192, 4), (8192, 8), (16384, 8)], [(256, 1)])
STEPS_CHUNKS = toy([(8192, 4), (8192, 8)], [(256, 1)])


@triton.jit
def _softmax_sub_kernel(x_ptr, y_ptr, words_ptr, x_row_stride, N, SPLITS: tl.constexpr, CHUNK: tl.constexpr, SUB_N: tl.constexpr,
                        SPLITS_P2: tl.constexpr, ROUND_BF16: tl.constexpr):  # fmt: skip
    """``gpu_softmax._softmax_coop_kernel`` (FLAGS) with the chunk as sub-rows of ``SUB_N``, each its own max."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK // SUB_N)[:, None] * SUB_N + tl.arange(0, SUB_N)[None, :]
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    m_sub = tl.max(x, axis=1)
    e = exp_shifted(x, tl.where(m_sub == -float("inf"), 0.0, m_sub)[:, None], y_ptr.dtype.element_ty)
    m = tl.max(m_sub, axis=0)
    s = tl.sum(tl.where(m_sub == -float("inf"), 0.0, tl.sum(e, axis=1) * tl.exp(m_sub - m)), axis=0)
    words = publish_and_wait(words_ptr + row * SPLITS, split, pack_floats(m, s), SPLITS, SPLITS_P2)
    ms = tl.where(tl.arange(0, SPLITS_P2) < SPLITS, word_lo(words), -float("inf"))
    ss = word_hi(words)
    m_row = tl.max(ms, axis=0)
    s_row = tl.sum(tl.where(ms == -float("inf"), 0.0, ss * tl.exp(ms - m_row)), axis=0)
    y = e * (tl.exp(m_sub - m_row) / s_row)[:, None]
    tl.store(y_ptr + row * N + cols, cast_for_store(y, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _packed_chunks(dy_ptr, y_ptr, dy_row_stride, NW, row, split, WORDS: tl.constexpr):
    """Program (row, split)'s words of dy and y (bf16 pairs as ``uint32``), their indices and mask."""
    idx = split * WORDS + tl.arange(0, WORDS)
    mask = idx < NW
    dw = tl.load(dy_ptr + row * dy_row_stride + idx, mask=mask, other=0).to(tl.uint32, bitcast=True)
    yw = tl.load(y_ptr + row * NW + idx, mask=mask, other=0).to(tl.uint32, bitcast=True)
    return idx, mask, dw, yw


@triton.jit
def _softmax_bwd_reload_kernel(dy_ptr, y_ptr, dx_ptr, words_ptr, dy_row_stride, NW, SPLITS: tl.constexpr, WORDS: tl.constexpr,
                               SPLITS_P2: tl.constexpr, ROUND_BF16: tl.constexpr):  # fmt: skip
    """``gpu_softmax._softmax_bwd_coop_packed_kernel`` (FLAGS) holding y's words across the wait and
    loading dy's again after it."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    idx, mask, dw, yw = _packed_chunks(dy_ptr, y_ptr, dy_row_stride, NW, row, split, WORDS)
    part = tl.sum(bf16_pair_lo(dw) * bf16_pair_lo(yw), axis=0) + tl.sum(bf16_pair_hi(dw) * bf16_pair_hi(yw), axis=0)
    words = publish_and_wait(words_ptr + row * SPLITS, split, flagged(part), SPLITS, SPLITS_P2)
    dot = tl.sum(tl.where(tl.arange(0, SPLITS_P2) < SPLITS, word_lo(words), 0.0), axis=0)
    yw = opaque_u32(yw)
    dw = tl.load(dy_ptr + row * dy_row_stride + idx, mask=mask, other=0).to(tl.uint32, bitcast=True)
    tl.store(dx_ptr + row * NW + idx, bf16_pair(bf16_pair_lo(yw) * (bf16_pair_lo(dw) - dot), bf16_pair_hi(yw) * (bf16_pair_hi(dw) - dot),
                                                ROUND_BF16), mask=mask)  # fmt: skip


EXP2_POLY = (0.9999280720307991, 0.6932609877583421, 0.24261114787053215, 0.0551716687545781)
"""Mode ``steps``: 2^f on [-0.5, 0.5], degree 3 (Lawson's weighted least squares on the relative
error, 2001 Chebyshev nodes): at most 7.5e-5 off, a sixth of a bf16 half-ulp (2^-9)."""


@triton.jit
def _exp2_fma(t):
    """2^t for float32 t <= 0 on the FMA and integer pipes, no MUFU: t + 1.5 * 2^23 rounds t to the
    nearest integer n in its low bits, 2^(t - n) is the polynomial, n goes into the exponent
    field by an integer add. Below 2^-125: 0."""
    tc = tl.maximum(t, -125.0)
    big = tc + 12582912.0
    f = tc - (big - 12582912.0)
    p = 0.9999280720307991 + f * (0.6932609877583421 + f * (0.24261114787053215 + f * 0.0551716687545781))
    e = (p.to(tl.int32, bitcast=True) + (big.to(tl.int32, bitcast=True) << 23)).to(tl.float32, bitcast=True)
    return tl.where(t < -125.0, 0.0, e)


@triton.jit
def _exp_half(x, m, POLY: tl.constexpr):
    """exp(x - m) (x - m <= 0) for a 16-bit result: ``ex2.approx.ftz`` or, ``POLY``, :func:`_exp2_fma`."""
    if POLY:
        return _exp2_fma((x - m) * 1.4426950408889634)
    return tl.exp2((x - m) * 1.4426950408889634)


@triton.jit
def _softmax_steps_kernel(x_ptr, y_ptr, words_ptr, N, SPLITS: tl.constexpr, CHUNK: tl.constexpr, SPLITS_P2: tl.constexpr,
                          ROUND_BF16: tl.constexpr, STEP: tl.constexpr):  # fmt: skip
    """Mode ``steps``, the forward (16-bit, contiguous rows), its chunk as two halves: ``STEP`` 0
    publishes the chunk's max and stores x (a flag copy); 1 also takes the exponentials (MUFU)
    for the sum, still storing x; 2 is the softmax (``e`` held, MUFU); 3 takes the second half's
    exponentials by :func:`_exp2_fma`; 4 both halves'."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    ca = split * CHUNK + tl.arange(0, CHUNK // 2)
    cb = ca + CHUNK // 2
    xa = tl.load(x_ptr + row * N + ca, mask=ca < N, other=-float("inf")).to(tl.float32)
    xb = tl.load(x_ptr + row * N + cb, mask=cb < N, other=-float("inf")).to(tl.float32)
    m = tl.maximum(tl.max(xa, axis=0), tl.max(xb, axis=0))
    if STEP == 0:
        words = publish_and_wait(words_ptr + row * SPLITS, split, flagged(m), SPLITS, SPLITS_P2)
        zero = 0.0 * tl.sum(word_hi(words), axis=0)  # the wait's result used: Triton 3.6 fails to compile it unused
        ya, yb = xa + zero, xb + zero
    else:
        m_ref = tl.where(m == -float("inf"), 0.0, m)
        ea = _exp_half(xa, m_ref, STEP == 4)
        eb = _exp_half(xb, m_ref, STEP >= 3)
        words = publish_and_wait(words_ptr + row * SPLITS, split, pack_floats(m, tl.sum(ea, axis=0) + tl.sum(eb, axis=0)), SPLITS, SPLITS_P2)
        ms = tl.where(tl.arange(0, SPLITS_P2) < SPLITS, word_lo(words), -float("inf"))
        m_row = tl.max(ms, axis=0)
        s_row = tl.sum(tl.where(ms == -float("inf"), 0.0, word_hi(words) * tl.exp(ms - m_row)), axis=0)
        factor = tl.exp(m - m_row) / s_row
        if STEP == 1:
            ya, yb = xa + 0.0 * factor, xb + 0.0 * factor
        else:
            ya, yb = ea * factor, eb * factor
    tl.store(y_ptr + row * N + ca, cast_for_store(ya, y_ptr.dtype.element_ty, ROUND_BF16), mask=ca < N)
    tl.store(y_ptr + row * N + cb, cast_for_store(yb, y_ptr.dtype.element_ty, ROUND_BF16), mask=cb < N)


@triton.jit
def _softmax_bwd_steps_kernel(dy_ptr, y_ptr, dx_ptr, words_ptr, NW, SPLITS: tl.constexpr, WORDS: tl.constexpr, SPLITS_P2: tl.constexpr,
                              ROUND_BF16: tl.constexpr, STEP: tl.constexpr):  # fmt: skip
    """Mode ``steps``, the packed backward (bf16, contiguous rows): ``STEP`` 0 publishes the max of
    y's chunk and stores dy (a flag copy of the backward's traffic); 1 publishes the chunk's part of
    ``<dy, y>`` and stores dy; 2 stores dx, without the package's opaque moves."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    idx, mask, dw, yw = _packed_chunks(dy_ptr, y_ptr, NW, NW, row, split, WORDS)
    if STEP == 0:
        part = tl.maximum(tl.max(bf16_pair_lo(yw), axis=0), tl.max(bf16_pair_hi(yw), axis=0))
    else:
        part = tl.sum(bf16_pair_lo(dw) * bf16_pair_lo(yw), axis=0) + tl.sum(bf16_pair_hi(dw) * bf16_pair_hi(yw), axis=0)
    words = publish_and_wait(words_ptr + row * SPLITS, split, flagged(part), SPLITS, SPLITS_P2)
    dot = tl.sum(tl.where(tl.arange(0, SPLITS_P2) < SPLITS, word_lo(words), 0.0), axis=0)
    if STEP <= 1:
        out = (dw + (dot * 0.0).to(tl.uint32)).to(tl.int32, bitcast=True)
    else:
        out = bf16_pair(bf16_pair_lo(yw) * (bf16_pair_lo(dw) - dot), bf16_pair_hi(yw) * (bf16_pair_hi(dw) - dot), ROUND_BF16)
    tl.store(dx_ptr + row * NW + idx, out, mask=mask)


def variant_call(kind, args, chunk, warps, info, step=None):
    """A call of a variant kernel: ``kind`` "sub" or "steps" on a forward case, "reload" or "steps"
    on a backward one (``args`` of three tensors), at ``step`` for "steps"."""
    x, out = args[0], args[-1]
    m, n = x.shape
    splits = triton.cdiv(n, chunk)
    common = dict(SPLITS=splits, SPLITS_P2=triton.next_power_of_2(splits), ROUND_BF16=round_bf16_by_hand(x.dtype), num_warps=toy(warps, 1))
    w = [t.view(torch.int32) for t in args] if len(args) == 3 else None

    def call():
        words = coop_words(m, splits, x.device)
        if kind == "sub":
            k = _softmax_sub_kernel[(m * splits,)](x, out, words, x.stride(0), n, CHUNK=chunk, SUB_N=toy(16 // x.element_size() * 32, 32),
                                                   **common)  # fmt: skip
        elif kind == "steps" and w is None:
            k = _softmax_steps_kernel[(m * splits,)](x, out, words, n, CHUNK=chunk, STEP=step, **common)
        elif kind == "steps":
            k = _softmax_bwd_steps_kernel[(m * splits,)](*w, words, n // 2, WORDS=chunk // 2, STEP=step, **common)
        else:
            k = _softmax_bwd_reload_kernel[(m * splits,)](*w, words, w[0].stride(0), n // 2, WORDS=chunk // 2, **common)
        if not info and hasattr(k, "n_regs"):
            info.update(n_regs=k.n_regs, n_spills=k.n_spills)
        return out

    return call


def timed_rows(op, m, n, dtype, chunks, variants=()):
    """The case's same-size copy, ``tritonforge``, then at each of ``chunks`` the package's cooperative
    kernel and each of ``variants`` ((kind, step) for :func:`variant_call`; steps that store their
    input are checked against it, the others' ulps counted, ``smoke.ulp_stats``); saved with ``of_same_copy``."""
    case = smoke.op_case(op, m, n, dtype)
    args, ref, nbytes = case["args"], case["ref"], case["nbytes"]
    base, rows = smoke.same_size_rows(op, m, n, dtype, case, copy["gbps"])
    for chunk, warps in chunks:
        if not toy(2, 1) <= triton.cdiv(n, chunk) <= 128:
            continue
        info = {}
        row = smoke.checked_row({**base, "impl": "package kernel", "chunk": chunk, "warps": warps},
                                smoke.coop_kernel_call(op, args, chunk, warps, flags=True, info=info), ref, nbytes, copy["gbps"])  # fmt: skip
        rows.append({**row, **info})
        for kind, step in variants:
            info = {}
            copies = kind == "steps" and (step <= 1)
            keys = {**base, "impl": kind, "chunk": chunk, "warps": warps, **({"step": step} if step is not None else {})}
            row = smoke.checked_row(keys, variant_call(kind, args, chunk, warps, info, step), args[0].double() if copies else ref, nbytes,
                                    copy["gbps"])  # fmt: skip
            if not copies and "err" in row:  # the output of its last call
                row.update(smoke.ulp_stats(args[-1], ref))
            rows.append({**row, **info})
    results.extend(smoke.with_of_same_copy(rows))
    smoke.save_rows(sys.argv[1], copy, results)


def run_short():
    for n, m, dtypes in SHORT_CASES:
        for dtype in dtypes:
            timed_rows("softmax", m, n, dtype, SHORT_CHUNKS)


def run_hold():
    for m, n in HOLD_CASES:
        timed_rows("softmax", m, n, torch.bfloat16, HOLD_CHUNKS, [("sub", None)])
        if toy(True, False):  # the reload kernel is packed: inline PTX, not in the interpreter
            assert packs_bf16_rows(torch.empty(m, n, dtype=torch.bfloat16))
            timed_rows("softmax-bwd", m, n, torch.bfloat16, HOLD_CHUNKS, [("reload", None)])


def run_steps():
    for m, n in HOLD_CASES:
        timed_rows("softmax", m, n, torch.bfloat16, STEPS_CHUNKS, [("steps", step) for step in range(5)])
        timed_rows("softmax-bwd", m, n, torch.bfloat16, STEPS_CHUNKS, [("steps", step) for step in range(3)])


MODE = sys.argv[2] if len(sys.argv) > 2 else ""
if MODE not in ("short", "hold", "steps"):
    sys.exit(f"mode {MODE!r}: short, hold or steps")
copy = smoke.copy_ceiling()
print("copy GB/s", round(copy["gbps"], 1), flush=True)
results = []
{"short": run_short, "hold": run_hold, "steps": run_steps}[MODE]()
print("wrote", sys.argv[1])
