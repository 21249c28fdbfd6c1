"""Cooperative rows whose partial statistics are their own arrival flags: one round trip to L2
after the wait instead of two?

The package's cooperative programs publish a partial statistic, count in at the row's counter
(an atomic), spin on the counter until every program of the row has, and only then load the
row's partials: the load is a second round trip to L2 after the wait, while the program holds its
chunk. A copy that waits at the same barrier but loads nothing after it reaches 0.89-0.94 of a
same-size copy at 4096 x 128K bf16, where the softmax reaches 0.82
(`coop-floor-chunks-nvidia-h200-2026-12-02.json`).

Here each program writes its partial into one 64-bit word of a zeroed ``[M, SPLITS]`` buffer, in a
single atomic exchange, and waits by reading the row's words until none is zero: the words it
waits on are the partials it needs. No word is zero once written: the softmax forward packs the
chunk's max and sum (the sum is at least 1, or the max is -inf, whose bits are not zero); the
backward and RMSNorm put their float32 partial in the low half and 1 in the high half. A 64-bit
access is single-copy atomic, so a reader sees a whole word or zero; no other data rides on the
word, so no acquire or release is needed. The counters' memset becomes the words' memset.

Variants (``spin``): the row's words read by a volatile load (``load``) or by atomic adds of 0
(``atomic``). Beside each: the package's kernel at the same chunk and warps (``package kernel``),
``tritonforge``, and the shape's same-size copy (``torch.mul``; the backward's: 1.5 x the
elements); ``of_same_copy`` = the copy's time / the row's time. Device time (CUDA-graph replay,
median); every variant is checked against float64 first.

Adopted (``coop.publish_and_wait``, the kernels' ``FLAGS``; float64 keeps the counter).
Since then the ``package kernel`` rows of the default mode launch the package's kernels with their
counter (``FLAGS`` off), as the package ran them when this was recorded.

Mode ``floor``: at 64 rows (and 16384 rows of 32K), the package's kernels with their flag words at other chunks and
warps (``FLOOR_CHUNKS``), each beside a ``flag copy``: programs that load their chunks (the
backward's: of dy and y), publish a flag word, wait for the row's and store, no softmax. What the
row's wait costs with flags, against each shape's same-size copy (``of_same_copy``).

Usage (CUDA GPU, repository root): python benchmarks/experiments/cooperative-rows/coop_flags.py OUT.json [compare|floor]
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/cooperative-rows/coop_flags.py OUT.json [compare|floor] (a row is one chunk)
"""

import sys

import torch

import smoke  # first: imports tritonforge before triton
from smoke import toy
from tritonforge.kernel_utils import cast_for_store, exp_shifted, round_bf16_by_hand, split_float
from tritonforge.ops.gpu import rmsnorm as gpu_rmsnorm
from tritonforge.ops.gpu import softmax as gpu_softmax
from tritonforge.ops.gpu.coop import (
    COOP_WARPS,
    bf16_pair,
    bf16_pair_hi,
    bf16_pair_lo,
    coop_words,
    flagged,
    opaque_u32,
    pack_floats,
    packs_bf16_rows,
    widen_bf16,
    word_hi,
    word_lo,
)

import triton
import triton.language as tl


@triton.jit
def _read_words(words_ptr, parts, live, ATOMIC: tl.constexpr):
    if ATOMIC:
        return tl.where(live, tl.atomic_add(words_ptr + parts, 0, mask=live, sem="relaxed"), 1)
    return tl.load(words_ptr + parts, mask=live, other=1, volatile=True)


@triton.jit
def _publish_and_wait(words_ptr, split, word, SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr, ATOMIC: tl.constexpr):
    """Write this program's word, then read the row's words until every one is written; returns them."""
    tl.atomic_xchg(words_ptr + split, word, sem="relaxed")
    parts = tl.arange(0, SPLITS_P2)
    live = parts < SPLITS
    words = _read_words(words_ptr, parts, live, ATOMIC)
    while tl.sum((words == 0).to(tl.int32), axis=0) > 0:
        words = _read_words(words_ptr, parts, live, ATOMIC)
    return words


@triton.jit
def _softmax_flags_kernel(x_ptr, y_ptr, words_ptr, x_row_stride, N, SPLITS: tl.constexpr, CHUNK: tl.constexpr, SPLITS_P2: tl.constexpr,
                          ROUND_BF16: tl.constexpr, EVEN_N: tl.constexpr, ATOMIC: tl.constexpr):  # fmt: skip
    """``gpu_softmax._softmax_coop_kernel`` (float32 arithmetic) with the chunk's (max, sum) as its flag word."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = None if EVEN_N else cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=None if EVEN_N else -float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    m_ref = tl.where(m == -float("inf"), 0.0, m)
    e = exp_shifted(x, m_ref, y_ptr.dtype.element_ty)
    words = _publish_and_wait(words_ptr + row * SPLITS, split, pack_floats(m, tl.sum(e, axis=0)), SPLITS, SPLITS_P2, ATOMIC)
    ms = tl.where(tl.arange(0, SPLITS_P2) < SPLITS, word_lo(words), -float("inf"))
    ss = word_hi(words)
    m_row = tl.max(ms, axis=0)
    s_row = tl.sum(tl.where(ms == -float("inf"), 0.0, ss * tl.exp(ms - m_row)), axis=0)
    y = e * (tl.exp(m - m_row) / s_row)
    tl.store(y_ptr + row * N + cols, cast_for_store(y, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _partial_sum(words, SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr):
    """The row's sum of the float32 partials in the words' low halves (the fixed order of a reduction)."""
    return tl.sum(tl.where(tl.arange(0, SPLITS_P2) < SPLITS, word_lo(words), 0.0), axis=0)


@triton.jit
def _softmax_bwd_flags_kernel(dy_ptr, y_ptr, dx_ptr, words_ptr, dy_row_stride, N, SPLITS: tl.constexpr, CHUNK: tl.constexpr,
                              SPLITS_P2: tl.constexpr, ROUND_BF16: tl.constexpr, ATOMIC: tl.constexpr):  # fmt: skip
    """``gpu_softmax._softmax_bwd_coop_kernel`` (float32) with its part of ``<dy, y>`` as its flag word."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    words = _publish_and_wait(words_ptr + row * SPLITS, split, flagged(tl.sum(dy * y, axis=0)), SPLITS, SPLITS_P2, ATOMIC)
    dot = _partial_sum(words, SPLITS, SPLITS_P2)
    tl.store(dx_ptr + row * N + cols, cast_for_store(y * (dy - dot), dx_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _softmax_bwd_flags_packed_kernel(dy_ptr, y_ptr, dx_ptr, words_ptr, dy_row_stride, NW, SPLITS: tl.constexpr, WORDS: tl.constexpr,
                                     SPLITS_P2: tl.constexpr, ROUND_BF16: tl.constexpr, ATOMIC: tl.constexpr):  # fmt: skip
    """``gpu_softmax._softmax_bwd_coop_packed_kernel`` (bf16 pairs held as words) with its part of
    ``<dy, y>`` as its flag word."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    idx = split * WORDS + tl.arange(0, WORDS)
    mask = idx < NW
    dw = tl.load(dy_ptr + row * dy_row_stride + idx, mask=mask, other=0).to(tl.uint32, bitcast=True)
    yw = tl.load(y_ptr + row * NW + idx, mask=mask, other=0).to(tl.uint32, bitcast=True)
    part = tl.sum(bf16_pair_lo(dw) * bf16_pair_lo(yw), axis=0) + tl.sum(bf16_pair_hi(dw) * bf16_pair_hi(yw), axis=0)
    words = _publish_and_wait(words_ptr + row * SPLITS, split, flagged(part), SPLITS, SPLITS_P2, ATOMIC)
    dot = _partial_sum(words, SPLITS, SPLITS_P2)
    dw = opaque_u32(dw)
    yw = opaque_u32(yw)
    tl.store(dx_ptr + row * NW + idx, bf16_pair(bf16_pair_lo(yw) * (bf16_pair_lo(dw) - dot), bf16_pair_hi(yw) * (bf16_pair_hi(dw) - dot),
                                                ROUND_BF16), mask=mask)  # fmt: skip


@triton.jit
def _rms_norm_flags_kernel(x_ptr, w_ptr, y_ptr, x_row_stride, N, eps_hi, eps_lo, words_ptr, SPLITS: tl.constexpr, CHUNK: tl.constexpr,
                           SPLITS_P2: tl.constexpr, ROUND_BF16: tl.constexpr, KEEP16: tl.constexpr, EVEN_N: tl.constexpr,
                           ATOMIC: tl.constexpr):  # fmt: skip
    """``gpu_rmsnorm._rms_norm_fwd_coop_kernel`` (float32 arithmetic) with its sum of squares as its flag word."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = None if EVEN_N else cols < N
    x_in = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=None if EVEN_N else 0.0)
    x = x_in.to(tl.float32)
    words = _publish_and_wait(words_ptr + row * SPLITS, split, flagged(tl.sum(x * x, axis=0)), SPLITS, SPLITS_P2, ATOMIC)
    if KEEP16:
        x = widen_bf16(x_in)
    w = tl.load(w_ptr + cols, mask=mask, other=None if EVEN_N else 0.0, eviction_policy="evict_last").to(tl.float32)
    rstd = 1.0 / tl.sqrt(_partial_sum(words, SPLITS, SPLITS_P2) / N + (eps_hi + eps_lo))
    x_hat = cast_for_store(x * rstd, x_ptr.dtype.element_ty, ROUND_BF16).to(tl.float32)
    tl.store(y_ptr + row * N + cols, cast_for_store(x_hat * w, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


def flags_call(op, args, chunk, warps, atomic):
    """The flagged kernel for ``op`` at ``chunk`` and ``warps``, the words zeroed per call (a memset)."""
    x, out = args[0], args[-1]
    m, n = x.shape
    splits = triton.cdiv(n, chunk)
    p2, rounding = triton.next_power_of_2(splits), round_bf16_by_hand(x.dtype)
    common = dict(SPLITS=splits, SPLITS_P2=p2, ROUND_BF16=rounding, ATOMIC=atomic, num_warps=toy(warps, 1))
    eps_hi, eps_lo = split_float(1e-6)

    def call():
        words = torch.zeros(m, splits, dtype=torch.int64, device=x.device)
        if op == "softmax":
            _softmax_flags_kernel[(m * splits,)](x, out, words, x.stride(0), n, CHUNK=chunk, EVEN_N=gpu_softmax.coop_unmasked(x.dtype, n, chunk),
                                                 **common)  # fmt: skip
        elif op == "softmax-bwd" and toy(packs_bf16_rows(x, args[1]), False):  # inline PTX: not in the interpreter
            w = [t.view(torch.int32) for t in args]
            _softmax_bwd_flags_packed_kernel[(m * splits,)](*w, words, w[0].stride(0), n // 2, WORDS=chunk // 2, **common)
        elif op == "softmax-bwd":
            _softmax_bwd_flags_kernel[(m * splits,)](*args, words, x.stride(0), n, CHUNK=chunk, **common)
        else:
            _rms_norm_flags_kernel[(m * splits,)](x, args[1], out, x.stride(0), n, eps_hi, eps_lo, words, CHUNK=chunk,
                                                  KEEP16=x.dtype == torch.bfloat16, EVEN_N=gpu_rmsnorm.unmasked(x.dtype, n) and n % chunk == 0,
                                                  **common)  # fmt: skip
        return out

    return call


def chunk_and_warps(op, dtype):
    """The package's: softmax forward (8192, 4), backward (8192, 8), RMSNorm bf16 (16384, 8), float32 (8192, 8)."""
    if op == "softmax":
        return toy(8192, 256), gpu_softmax.COOP_FWD_WARPS
    if op == "softmax-bwd":
        return toy(8192, 256), COOP_WARPS
    return toy(gpu_rmsnorm.chunk(dtype), 256), COOP_WARPS


CASES = toy([("softmax", 4096, 131072), ("softmax", 512, 131072), ("softmax", 64, 131072), ("softmax", 64, 262144),
             ("softmax-bwd", 4096, 131072), ("softmax-bwd", 64, 131072), ("softmax-bwd", 64, 262144),
             ("rmsnorm", 4096, 65536), ("rmsnorm", 2048, 131072), ("rmsnorm", 64, 131072)],
            [("softmax", 3, 256), ("softmax-bwd", 3, 256), ("rmsnorm", 3, 256)])  # fmt: skip
"""(op, rows, row length); bf16 and float32 each."""

FLOOR_CASES = toy([("softmax", 64, 131072), ("softmax", 64, 262144), ("softmax-bwd", 64, 131072), ("softmax-bwd", 64, 262144),
                   ("softmax", 16384, 32768)],
                  [("softmax", 3, 256), ("softmax-bwd", 3, 256)])  # fmt: skip
"""Mode ``floor``: (op, rows, row length); bf16 and float32 each. Rows of 32K take one pass in the
package (bf16: the pipelined kernel, 0.93 of a same-size copy); here also cooperative rows."""
FLOOR_CHUNKS = toy([(4096, 4), (8192, 4), (8192, 8), (16384, 8), (16384, 16), (32768, 16)], [(256, 1)])
"""Mode ``floor``: (chunk, warps) of the flag copies and of the package's kernels."""


@triton.jit
def _flag_copy_kernel(a_ptr, b_ptr, out_ptr, words_ptr, N, SPLITS: tl.constexpr, CHUNK: tl.constexpr, SPLITS_P2: tl.constexpr,
                      TWO: tl.constexpr):  # fmt: skip
    """Mode ``floor``: program (row, chunk) loads its chunk of a (and of b, ``TWO``: the backward's
    traffic), publishes the max of the last as its flag word, waits for the row's words and stores
    its chunk of a: the cooperative kernels' traffic and wait, no softmax."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    a = tl.load(a_ptr + row * N + cols, mask=mask, other=0.0)
    last = tl.load(b_ptr + row * N + cols, mask=mask, other=0.0) if TWO else a
    words = _publish_and_wait(words_ptr + row * SPLITS, split, flagged(tl.max(last.to(tl.float32), axis=0)), SPLITS, SPLITS_P2, True)
    # the words in the mask (all > 0 after the wait): Triton 3.6 failed to compile the wait's loop with its result unused
    tl.store(out_ptr + row * N + cols, a, mask=cols < N * (tl.min(words, axis=0) > 0).to(tl.int32))


def finish(rows):
    results.extend(smoke.with_of_same_copy(rows))
    smoke.save_rows(sys.argv[1], copy, results)


def run_compare():
    for op, m, n in CASES:
        for dtype in (torch.bfloat16, torch.float32):
            case = smoke.op_case(op, m, n, dtype)
            args, ref, nbytes = case["args"], case["ref"], case["nbytes"]
            base, rows = smoke.same_size_rows(op, m, n, dtype, case, copy["gbps"])
            chunk, warps = chunk_and_warps(op, dtype)
            call = smoke.coop_kernel_call(op, args, chunk, warps)
            rows.append(smoke.checked_row({**base, "impl": "package kernel", "chunk": chunk, "warps": warps}, call,
                                          ref, nbytes, copy["gbps"]))  # fmt: skip
            for spin in ("load", "atomic"):
                rows.append(smoke.checked_row({**base, "impl": "flags", "spin": spin, "chunk": chunk, "warps": warps},
                                              flags_call(op, args, chunk, warps, spin == "atomic"), ref, nbytes, copy["gbps"]))  # fmt: skip
            finish(rows)
    print("wrote", sys.argv[1])


def run_floor():
    for op, m, n in FLOOR_CASES:
        for dtype in (torch.bfloat16, torch.float32):
            case = smoke.op_case(op, m, n, dtype)
            args, ref, nbytes = case["args"], case["ref"], case["nbytes"]
            base, rows = smoke.same_size_rows(op, m, n, dtype, case, copy["gbps"])
            a, out = args[0], args[-1]
            for chunk, warps in FLOOR_CHUNKS:
                splits = triton.cdiv(n, chunk)
                if not toy(1 < splits <= 128, True):
                    continue
                info = {}
                row = smoke.checked_row({**base, "impl": "package kernel", "chunk": chunk, "warps": warps},
                                        smoke.coop_kernel_call(op, args, chunk, warps, flags=True, info=info), ref, nbytes, copy["gbps"])  # fmt: skip
                rows.append({**row, **info})

                def flag_copy(chunk=chunk, warps=warps, splits=splits):
                    _flag_copy_kernel[(m * splits,)](a, args[1], out, coop_words(m, splits, a.device), n, SPLITS=splits, CHUNK=chunk,
                                                     SPLITS_P2=triton.next_power_of_2(splits), TWO=op == "softmax-bwd",
                                                     num_warps=toy(warps, 1))  # fmt: skip
                    return out

                rows.append(smoke.checked_row({**base, "impl": "flag copy", "chunk": chunk, "warps": warps}, flag_copy, a.double(), nbytes,
                                              copy["gbps"]))  # fmt: skip
            finish(rows)
    print("wrote", sys.argv[1])


MODE = sys.argv[2] if len(sys.argv) > 2 else "compare"
if MODE not in ("compare", "floor"):
    sys.exit(f"mode {MODE!r}: compare (default) or floor")
copy = smoke.copy_ceiling()
print("copy GB/s", round(copy["gbps"], 1), flush=True)
results = []
{"compare": run_compare, "floor": run_floor}[MODE]()
