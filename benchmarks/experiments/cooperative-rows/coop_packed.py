"""Does a cooperative program that holds its bf16 chunk as packed 32-bit words across the barrier
reach further than one that holds float32?

The package's cooperative kernels hold their chunk across the row's barrier in float32 registers:
softmax its exponentials (48 registers a thread at 8192 elements and 8 warps, 5 programs an SM),
its backward dy and y. A bf16 program so keeps half the bytes in flight that a float32 one does
with the same registers, and bf16 lands at 0.77 of a copy at 4096 x 128K where float32 makes 0.93.
Holding the loaded bf16 instead never held 16 bits: Triton splits each loaded 32-bit word into two
16-bit PTX registers, and ptxas gives each a whole register (benchmarks/NOTES.md, 2026-12-01).

Here the chunk is loaded as ``uint32`` words (a view of the bf16 tensor: two elements a word, so
the row length must be even), each half widened to float32 by a shift or a mask (exact), the
words held across the wait, and the output stored as packed words. Softmax then computes its
exponentials twice (once for the chunk's sum, once for the output); ``launder``: the held words
pass through an opaque ``mov`` after the wait, so that the compiler cannot keep the float32
halves from before it alive instead. Three kernels, each beside the package's: softmax forward,
softmax backward (dy and y held), RMSNorm forward (the weight loaded after the wait, as words).

The widening and packing are the package's ``coop.bf16_pair_lo`` / ``bf16_pair_hi`` /
``bf16_pair`` since the adoption; the recorded runs used the script's own copies of the same
operations (``git show 1ab85e7:benchmarks/experiments/coop_packed.py``).

Checked against float64 first (a wrong answer is reported, not timed); device time (CUDA-graph
replay, median; the counters' memset in the timed call, as in the package); ``fraction_of_copy``
against the big copy's bandwidth; ``n_regs`` from the compiled kernel.

Mode ``order`` (a second argument): RMSNorm's cooperative kernels, the package's and the packed
one, with each store's address written before its value or after, bf16 and float32 at rows of
64K-128K. The recorded run (commit 02f51a5) also launched the package's kernel both ways, through
an ``ADDRESS_FIRST`` knob it had at that commit only; the knob changed nothing and went.

Mode ``e16``: the softmax forward holding its exponentials, not x, as packed words: each ``e = exp(x
- m_chunk)`` rounded to bf16 (one ``cvt.rn.bf16x2.f32`` for two, volatile inline PTX, so that it
stays before the wait), scaled by the merge factor after it. One exponential an element and 16
bits held, at the price of a second rounding: y is rounded from a rounded e, where the package
rounds once. The accuracy is measured beside the time: bf16 ulps against float64 (the largest,
and the share of elements more than half an ulp off), for torch.softmax, the package and each variant.

Usage (CUDA GPU, repository root): python benchmarks/experiments/cooperative-rows/coop_packed.py OUT.json [all|order|e16]
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/cooperative-rows/coop_packed.py OUT.json [all|order|e16]
(in the toy run a row is one chunk, and nothing is laundered: the interpreter has no inline PTX)
"""

import sys

import torch

import smoke  # first: imports tritonforge before triton
from smoke import SMOKE, toy
from tritonforge.kernel_utils import round_bf16_by_hand, split_float
from tritonforge.ops.gpu import rmsnorm as gpu_rmsnorm
from tritonforge.ops.gpu.coop import COOP_WARPS, bf16_pair, bf16_pair_hi, bf16_pair_lo, coop_counters, row_barrier

import triton
import triton.language as tl

NEG_INF_PAIR = tl.constexpr(0xFF80FF80 - 2**32)
"""Two bf16 -inf in one word, as int32: what a masked softmax word loads."""


@triton.jit
def _launder(w, LAUNDER: tl.constexpr):
    """``w`` through an opaque move: the compiler cannot see that it is ``w``."""
    if LAUNDER:
        w = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [w], dtype=tl.uint32, is_pure=False, pack=1)
    return w


@triton.jit
def _words(ptr, row, stride, NW, split, WORDS: tl.constexpr, other):
    idx = split * WORDS + tl.arange(0, WORDS)
    mask = idx < NW
    return tl.load(ptr + row * stride + idx, mask=mask, other=other).to(tl.uint32, bitcast=True), idx, mask


@triton.jit
def _softmax_chunk(x_ptr, stride, NW, SPLITS: tl.constexpr, WORDS: tl.constexpr):
    """A softmax program's row, chunk, words (masked words: two -inf), their halves, the chunk's
    max and the max to subtract (0 for an all -inf chunk)."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    w, idx, mask = _words(x_ptr, row, stride, NW, split, WORDS, NEG_INF_PAIR)
    lo = bf16_pair_lo(w)
    hi = bf16_pair_hi(w)
    m = tl.maximum(tl.max(lo, axis=0), tl.max(hi, axis=0))
    return row, split, w, idx, mask, lo, hi, m, tl.where(m == -float("inf"), 0.0, m)


@triton.jit
def _softmax_packed_kernel(x_ptr, y_ptr, part_m_ptr, part_s_ptr, count_ptr, stride, NW, SPLITS: tl.constexpr, WORDS: tl.constexpr,
                           SPLITS_P2: tl.constexpr, LAUNDER: tl.constexpr):  # fmt: skip
    row, split, w, idx, mask, lo, hi, m, m_ref = _softmax_chunk(x_ptr, stride, NW, SPLITS, WORDS)
    tl.store(part_m_ptr + row * SPLITS + split, m)
    tl.store(part_s_ptr + row * SPLITS + split, tl.sum(tl.exp(lo - m_ref), axis=0) + tl.sum(tl.exp(hi - m_ref), axis=0))
    row_barrier(count_ptr + row, SPLITS)
    parts = tl.arange(0, SPLITS_P2)
    ms = tl.load(part_m_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=-float("inf"), volatile=True)
    ss = tl.load(part_s_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True)
    m_row = tl.max(ms, axis=0)
    inv_s = 1.0 / tl.sum(tl.where(ms == -float("inf"), 0.0, ss * tl.exp(ms - m_row)), axis=0)
    w = _launder(w, LAUNDER)
    tl.store(y_ptr + row * NW + idx, bf16_pair(tl.exp(bf16_pair_lo(w) - m_row) * inv_s, tl.exp(bf16_pair_hi(w) - m_row) * inv_s, False), mask=mask)


@triton.jit
def _pack_e(lo, hi, ASM: tl.constexpr):
    """Two float32 blocks rounded to bf16 and packed, ``lo`` in the first half. ``ASM``: one
    ``cvt.rn.bf16x2.f32`` a word, as volatile inline PTX, which the compiler can move past no barrier
    (a pure conversion it sank past the wait and held float32: ``coop-publish-hold16``)."""
    if ASM:
        return tl.inline_asm_elementwise("cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,r,r", [lo, hi], dtype=tl.uint32, is_pure=False, pack=1)
    return bf16_pair(lo, hi, False).to(tl.uint32, bitcast=True)


@triton.jit
def _softmax_e16_kernel(x_ptr, y_ptr, part_m_ptr, part_s_ptr, count_ptr, stride, NW, SPLITS: tl.constexpr, WORDS: tl.constexpr,
                        SPLITS_P2: tl.constexpr, LAUNDER: tl.constexpr):  # fmt: skip
    """Mode e16: the chunk's exponentials ``e = exp(x - m)`` (the sum taken in float32) rounded to
    bf16 and held as packed words across the wait, scaled after it: one exponential an element and
    16 bits held, but y rounds twice (e, then y)."""
    row, split, w, idx, mask, lo, hi, m, m_ref = _softmax_chunk(x_ptr, stride, NW, SPLITS, WORDS)
    e_lo = tl.exp(lo - m_ref)
    e_hi = tl.exp(hi - m_ref)
    ew = _pack_e(e_lo, e_hi, LAUNDER)
    tl.store(part_m_ptr + row * SPLITS + split, m)
    tl.store(part_s_ptr + row * SPLITS + split, tl.sum(e_lo, axis=0) + tl.sum(e_hi, axis=0))
    row_barrier(count_ptr + row, SPLITS)
    parts = tl.arange(0, SPLITS_P2)
    ms = tl.load(part_m_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=-float("inf"), volatile=True)
    ss = tl.load(part_s_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True)
    m_row = tl.max(ms, axis=0)
    s_row = tl.sum(tl.where(ms == -float("inf"), 0.0, ss * tl.exp(ms - m_row)), axis=0)
    f = tl.exp(m - m_row) / s_row
    ew = _launder(ew, LAUNDER)
    tl.store(y_ptr + row * NW + idx, bf16_pair(bf16_pair_lo(ew) * f, bf16_pair_hi(ew) * f, False), mask=mask)


@triton.jit
def _softmax_bwd_packed_kernel(dy_ptr, y_ptr, dx_ptr, part_ptr, count_ptr, NW, SPLITS: tl.constexpr, WORDS: tl.constexpr,
                               SPLITS_P2: tl.constexpr, LAUNDER: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    dw, idx, mask = _words(dy_ptr, row, NW, NW, split, WORDS, 0)
    yw, _, _ = _words(y_ptr, row, NW, NW, split, WORDS, 0)
    tl.store(part_ptr + row * SPLITS + split,
             tl.sum(bf16_pair_lo(dw) * bf16_pair_lo(yw), axis=0) + tl.sum(bf16_pair_hi(dw) * bf16_pair_hi(yw), axis=0))  # fmt: skip
    row_barrier(count_ptr + row, SPLITS)
    parts = tl.arange(0, SPLITS_P2)
    dot = tl.sum(tl.load(part_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True), axis=0)
    dw = _launder(dw, LAUNDER)
    yw = _launder(yw, LAUNDER)
    tl.store(dx_ptr + row * NW + idx, bf16_pair(bf16_pair_lo(yw) * (bf16_pair_lo(dw) - dot), bf16_pair_hi(yw) * (bf16_pair_hi(dw) - dot), False),
             mask=mask)  # fmt: skip


@triton.jit
def _rmsnorm_packed_kernel(x_ptr, w_ptr, y_ptr, part_ptr, count_ptr, stride, NW, N, eps, SPLITS: tl.constexpr, WORDS: tl.constexpr,
                           SPLITS_P2: tl.constexpr, LAUNDER: tl.constexpr, ADDRESS_FIRST: tl.constexpr = False):  # fmt: skip
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    xw, idx, mask = _words(x_ptr, row, stride, NW, split, WORDS, 0)
    lo = bf16_pair_lo(xw)
    hi = bf16_pair_hi(xw)
    tl.store(part_ptr + row * SPLITS + split, tl.sum(lo * lo, axis=0) + tl.sum(hi * hi, axis=0))
    row_barrier(count_ptr + row, SPLITS)
    parts = tl.arange(0, SPLITS_P2)
    sum_sq = tl.sum(tl.load(part_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True), axis=0)
    rstd = 1.0 / tl.sqrt(sum_sq / N + eps)
    xw = _launder(xw, LAUNDER)
    ww = tl.load(w_ptr + idx, mask=mask, other=0, eviction_policy="evict_last").to(tl.uint32, bitcast=True)
    # as the package: x * rstd rounded to x's dtype, times the weight, rounded to the output's
    if ADDRESS_FIRST:  # the store's address before its value (mode order)
        tl.store(y_ptr + row * NW + idx, bf16_pair((bf16_pair_lo(xw) * rstd).to(tl.bfloat16).to(tl.float32) * bf16_pair_lo(ww),
                                                   (bf16_pair_hi(xw) * rstd).to(tl.bfloat16).to(tl.float32) * bf16_pair_hi(ww), False),
                 mask=mask)  # fmt: skip
    else:
        y_lo = (bf16_pair_lo(xw) * rstd).to(tl.bfloat16).to(tl.float32) * bf16_pair_lo(ww)
        y_hi = (bf16_pair_hi(xw) * rstd).to(tl.bfloat16).to(tl.float32) * bf16_pair_hi(ww)
        tl.store(y_ptr + row * NW + idx, bf16_pair(y_lo, y_hi, False), mask=mask)


def packed_call(op, args, chunk, warps, launder, info, address_first=False):
    """One launch of the packed kernel on int32 views of the bf16 tensors (chunk: bf16 elements)."""
    words = chunk // 2
    m, n = args[0].shape
    nw = n // 2
    splits = triton.cdiv(nw, words)
    p2 = triton.next_power_of_2(splits)
    v = [a.view(torch.int32) for a in args]
    parts = [torch.empty(m, splits, device=args[0].device, dtype=torch.float32) for _ in range(2)]

    def call():
        counters = coop_counters(m, args[0].device)
        if op == "softmax-e16":
            k = _softmax_e16_kernel[(m * splits,)](v[0], v[1], *parts, counters, v[0].stride(0), nw, SPLITS=splits, WORDS=words,
                                                   SPLITS_P2=p2, LAUNDER=launder, num_warps=warps)  # fmt: skip
        elif op == "softmax":
            k = _softmax_packed_kernel[(m * splits,)](v[0], v[1], *parts, counters, v[0].stride(0), nw, SPLITS=splits, WORDS=words,
                                                      SPLITS_P2=p2, LAUNDER=launder, num_warps=warps)  # fmt: skip
        elif op == "softmax-bwd":
            k = _softmax_bwd_packed_kernel[(m * splits,)](v[0], v[1], v[2], parts[0], counters, nw, SPLITS=splits, WORDS=words,
                                                          SPLITS_P2=p2, LAUNDER=launder, num_warps=warps)  # fmt: skip
        else:
            k = _rmsnorm_packed_kernel[(m * splits,)](v[0], v[1], v[2], parts[0], counters, v[0].stride(0), nw, n, 1e-6, SPLITS=splits,
                                                      WORDS=words, SPLITS_P2=p2, LAUNDER=launder, ADDRESS_FIRST=address_first,
                                                      num_warps=warps)  # fmt: skip
        if not info and k is not None and hasattr(k, "n_regs"):
            info.update(n_regs=k.n_regs, n_spills=k.n_spills)
        return args[-1]

    return call


def package_rmsnorm_call(args, info):
    """The package's cooperative RMSNorm forward kernel, launched as ``rms_norm_fwd`` does (no rstd)."""
    x, w, y = args
    m, n = x.shape
    chunk = toy(gpu_rmsnorm.chunk(x.dtype), 256)
    splits = triton.cdiv(n, chunk)
    part = torch.empty(m, splits, device=x.device, dtype=torch.float32)
    eps_hi, eps_lo = split_float(1e-6)

    def call():
        k = gpu_rmsnorm._rms_norm_fwd_coop_kernel[(m * splits,)](
            x, w, y, y, x.stride(0), y.stride(0), n, eps_hi, eps_lo, part, coop_counters(m, x.device), m, SPLITS=splits, CHUNK=chunk,
            SPLITS_P2=triton.next_power_of_2(splits), ACC_DTYPE=tl.float32, ROUND_BF16=round_bf16_by_hand(x.dtype), STORE_RSTD=False,
            KEEP16=x.dtype == torch.bfloat16, num_warps=toy(COOP_WARPS, 1))  # fmt: skip
        if not info and k is not None and hasattr(k, "n_regs"):
            info.update(n_regs=k.n_regs, n_spills=k.n_spills)
        return y

    return call


CASES = toy(
    [("softmax", 4096, 131072), ("softmax", 64, 131072), ("softmax", 64, 262144), ("softmax", 512, 131072), ("softmax", 8192, 65536),
     ("softmax-bwd", 4096, 131072), ("softmax-bwd", 64, 131072), ("softmax-bwd", 64, 262144),
     ("rmsnorm", 4096, 65536), ("rmsnorm", 2048, 131072)],
    [("softmax", 5, 200), ("softmax-bwd", 3, 200), ("rmsnorm", 3, 200)],
)  # fmt: skip

MODE = sys.argv[2] if len(sys.argv) > 2 else "all"
if MODE not in ("all", "order", "e16"):
    sys.exit(f"mode {MODE!r}: all (default), order or e16")
ORDER_CASES = toy([("rmsnorm", 4096, 65536, torch.bfloat16), ("rmsnorm", 2048, 131072, torch.bfloat16), ("rmsnorm", 4096, 65536, torch.float32),
                   ("rmsnorm", 2048, 131072, torch.float32)], [("rmsnorm", 3, 200, torch.bfloat16), ("rmsnorm", 3, 200, torch.float32)])  # fmt: skip
"""Mode ``order``: does writing the output's address before its value (what made the packed
backward 48 registers, not 59) help RMSNorm's cooperative kernel, the package's and the packed one?"""

VARIANTS = toy([(8192, 8, True), (8192, 8, False), (16384, 8, True), (16384, 16, True), (32768, 16, True)], [(256, 1, False)])
"""(chunk in bf16 elements, warps, launder)."""

copy = smoke.copy_ceiling()
print("copy GB/s", round(copy["gbps"], 1), flush=True)
results = []

def run_all():
    for op, m, n in CASES:
        case = smoke.op_case(op, m, n, torch.bfloat16)
        args, package, ref, nbytes = case["args"], case["package"], case["ref"], case["nbytes"]
        base = {"op": op, "shape": [m, n], "dtype": "bfloat16"}
        results.append(smoke.checked_row({**base, "impl": "tritonforge"}, package, ref, nbytes, copy["gbps"]))
        for chunk, warps, launder in VARIANTS:
            if op != "softmax" and chunk > 16384:
                continue
            info = {}
            row = {**base, "impl": "packed", "chunk": chunk, "warps": warps, "launder": launder and not SMOKE}
            results.append({**smoke.checked_row(row, packed_call(op, args, chunk, warps, launder and not SMOKE, info), ref, nbytes,
                                                copy["gbps"]), **info})  # fmt: skip
        smoke.save_rows(sys.argv[1], copy, results)


def run_order():
    for op, m, n, dtype in ORDER_CASES:
        case = smoke.op_case(op, m, n, dtype)
        args, ref, nbytes = case["args"], case["ref"], case["nbytes"]
        base = {"op": op, "shape": [m, n], "dtype": str(dtype)[6:]}
        results.append(smoke.checked_row({**base, "impl": "tritonforge"}, case["package"], ref, nbytes, copy["gbps"]))
        info = {}
        row = {**base, "impl": "package kernel", "address_first": False}
        results.append({**smoke.checked_row(row, package_rmsnorm_call(args, info), ref, nbytes, copy["gbps"]), **info})
        for address_first in (False, True):
            if dtype == torch.bfloat16:
                for chunk in toy((8192, 16384), (256,)):
                    info = {}
                    row = {**base, "impl": "packed", "chunk": chunk, "warps": toy(8, 1), "launder": not SMOKE, "address_first": address_first}
                    call = packed_call(op, args, chunk, toy(8, 1), not SMOKE, info, address_first)
                    results.append({**smoke.checked_row(row, call, ref, nbytes, copy["gbps"]), **info})
        smoke.save_rows(sys.argv[1], copy, results)


E16_CASES = toy([(4096, 131072), (512, 131072), (64, 131072), (64, 262144), (8192, 65536), (16384, 32768)], [(5, 200), (3, 256)])
E16_VARIANTS = toy([(8192, 8, True), (8192, 8, False), (16384, 8, True), (16384, 16, True), (32768, 16, True)], [(256, 1, False)])
"""Mode ``e16``: (chunk in bf16 elements, warps, launder: the exponentials packed by inline PTX and
passed through the opaque move after the wait)."""


def run_e16():
    for m, n in E16_CASES:
        case = smoke.op_case("softmax", m, n, torch.bfloat16)
        args, ref, nbytes = case["args"], case["ref"], case["nbytes"]
        base = {"op": "softmax", "shape": [m, n], "dtype": "bfloat16"}
        x = args[0]
        results.append({**base, "impl": "torch", **smoke.ulp_stats(torch.softmax(x, -1), ref)})
        results.append({**smoke.checked_row({**base, "impl": "tritonforge", "plan": case["plan"]}, case["package"], ref, nbytes, copy["gbps"]),
                        **smoke.ulp_stats(case["package"](), ref)})  # fmt: skip
        for chunk, warps, launder in E16_VARIANTS:
            info = {}
            row = {**base, "impl": "e16", "chunk": chunk, "warps": warps, "launder": launder and not SMOKE}
            call = packed_call("softmax-e16", args, chunk, warps, launder and not SMOKE, info)
            row = smoke.checked_row(row, call, ref, nbytes, copy["gbps"])
            results.append({**row, **info, **({} if "error" in row else smoke.ulp_stats(call(), ref))})
        smoke.save_rows(sys.argv[1], copy, results)


{"all": run_all, "order": run_order, "e16": run_e16}[MODE]()
print("wrote", sys.argv[1])
