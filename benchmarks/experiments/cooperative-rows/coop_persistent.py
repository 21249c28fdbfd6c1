"""Cooperative rows with persistent programs: does loading the next row's chunk while this row
waits at its barrier close the gap between the cooperative kernels and a copy?

Issue 13 asks 0.85 of a same-size copy at rows of 128K and 0.90 for RMSNorm at 32K-128K. The
package's cooperative softmax forward makes 0.82 (bf16) at 4096 x 128K, where a copy whose programs
wait at the same barrier makes 0.89-0.94 (`coop-floor-chunks-nvidia-h200-2026-12-02.json`): the
programs' own work between the load and the store (the chunk's exponentials and sum before the
wait, the merge and the scaling after it) is time in which an SM's programs issue no loads, and
only 3-6 programs fit an SM. A persistent program keeps the same chunk of every ``GROUPS``-th row
(program ``(group, chunk)`` takes rows ``group, group + GROUPS, ...``) and, with ``PREFETCH``,
issues the load of its next row's chunk before it reduces this one: the load is in flight through
the reduction, the wait and the store. The prefetched chunk stays in its input dtype (bf16: a
16-bit value a register), so a program holds the current row's exponentials and the next row's
input at once.

The programs of a group are consecutive program ids and each group's rows are its own, so the
barrier needs only what the package's kernels already assume: a row's programs resident together.
``programs_per_sm`` sets ``GROUPS``: ``per_sm * SMs // SPLITS`` groups; ``max`` is what the
compiled kernel's registers allow (every program resident at once), ``half`` half that.

Rows (device time, CUDA-graph replay, median; each variant checked against float64 first):
``tritonforge`` (the package), ``package kernel`` (the package's cooperative kernel at the same
chunk and warps), ``persistent`` (``prefetch`` true or false), and ``same-size copy``
(``torch.mul(x, 1, out=y)``); ``of_same_copy`` = the copy's time / the row's time.

Mode ``rmsnorm``: the same for RMSNorm's cooperative forward (the weight's chunk loaded after the
wait, a bf16 chunk held 16-bit, as the package).

Mode ``bwd-floor``: what the softmax backward's cooperative programs cost before any arithmetic at
64 rows (issue 13 asks 0.85 there): a program loads its chunks of dy and y, publishes a partial
sum, waits at the row's barrier and stores dy (``barrier copy``), beside the package's
backward and the backward's same-size copy (1.5 x the elements: two reads and a write's bytes).

Usage (CUDA GPU, repository root): python benchmarks/experiments/cooperative-rows/coop_persistent.py OUT.json [softmax|rmsnorm|bwd-floor]
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/cooperative-rows/coop_persistent.py OUT.json [softmax|rmsnorm|bwd-floor]
(a row is one chunk)
"""

import sys

import torch

import smoke  # first: imports tritonforge before triton
from smoke import toy
from tritonforge import hardware
from tritonforge.kernel_utils import acc_dtype, cast_for_store, exp_shifted, round_bf16_by_hand, split_float
from tritonforge.ops.gpu.coop import coop_counters, row_barrier, widen_bf16

import triton
import triton.language as tl


@triton.jit
def _softmax_persistent_kernel(x_ptr, y_ptr, part_m_ptr, part_s_ptr, count_ptr, x_row_stride, M, N, GROUPS, SPLITS: tl.constexpr,
                               CHUNK: tl.constexpr, SPLITS_P2: tl.constexpr, ACC_DTYPE: tl.constexpr, ROUND_BF16: tl.constexpr,
                               EVEN_N: tl.constexpr, PREFETCH: tl.constexpr):  # fmt: skip
    """The package's ``gpu_softmax._softmax_coop_kernel`` (one exponential an element, held across the
    barrier) looping over its group's rows; with ``PREFETCH`` the next row's chunk is loaded
    before this one is reduced (the last row reloads itself: no mask)."""
    pid = tl.program_id(0)
    group = pid // SPLITS
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = None if EVEN_N else cols < N
    other = None if EVEN_N else -float("inf")
    parts = tl.arange(0, SPLITS_P2)
    x_next = tl.load(x_ptr + group.to(tl.int64) * x_row_stride + cols, mask=mask, other=other)
    for r in range(group, M, GROUPS):
        row = tl.cast(r, tl.int64)
        if PREFETCH:
            x = x_next.to(ACC_DTYPE)
            x_next = tl.load(x_ptr + tl.minimum(row + GROUPS, M - 1) * x_row_stride + cols, mask=mask, other=other)
        else:
            x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=other).to(ACC_DTYPE)
        m = tl.max(x, axis=0)
        m_ref = tl.where(m == -float("inf"), 0.0, m)
        e = exp_shifted(x, m_ref, y_ptr.dtype.element_ty)
        tl.store(part_m_ptr + row * SPLITS + split, m)
        tl.store(part_s_ptr + row * SPLITS + split, tl.sum(e, axis=0))
        row_barrier(count_ptr + row, SPLITS)
        ms = tl.load(part_m_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=-float("inf"), volatile=True)
        ss = tl.load(part_s_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True)
        m_row = tl.max(ms, axis=0)
        s_row = tl.sum(tl.where(ms == -float("inf"), 0.0, ss * tl.exp(ms - m_row)), axis=0)
        y = e * (tl.exp(m - m_row) / s_row)
        tl.store(y_ptr + row * N + cols, cast_for_store(y, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _rms_norm_persistent_kernel(x_ptr, w_ptr, y_ptr, x_row_stride, M, N, eps_hi, eps_lo, part_ptr, count_ptr, GROUPS, SPLITS: tl.constexpr,
                                CHUNK: tl.constexpr, SPLITS_P2: tl.constexpr, ACC_DTYPE: tl.constexpr, ROUND_BF16: tl.constexpr,
                                KEEP16: tl.constexpr, EVEN_N: tl.constexpr, PREFETCH: tl.constexpr):  # fmt: skip
    """The package's ``gpu_rmsnorm._rms_norm_fwd_coop_kernel`` looping over its group's rows, with the
    next row's chunk loaded before this one is reduced (``PREFETCH``)."""
    pid = tl.program_id(0)
    group = pid // SPLITS
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = None if EVEN_N else cols < N
    other = None if EVEN_N else 0.0
    parts = tl.arange(0, SPLITS_P2)
    x_next = tl.load(x_ptr + group.to(tl.int64) * x_row_stride + cols, mask=mask, other=other)
    for r in range(group, M, GROUPS):
        row = tl.cast(r, tl.int64)
        if PREFETCH:
            x_in = x_next
            x_next = tl.load(x_ptr + tl.minimum(row + GROUPS, M - 1) * x_row_stride + cols, mask=mask, other=other)
        else:
            x_in = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=other)
        x = x_in.to(ACC_DTYPE)
        tl.store(part_ptr + row * SPLITS + split, tl.sum(x * x, axis=0))
        row_barrier(count_ptr + row, SPLITS)
        if KEEP16:
            x = widen_bf16(x_in)
        w = tl.load(w_ptr + cols, mask=mask, other=other, eviction_policy="evict_last").to(ACC_DTYPE)
        sum_sq = tl.sum(tl.load(part_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True), axis=0)
        rstd = 1.0 / tl.sqrt(sum_sq / N + (tl.cast(eps_hi, ACC_DTYPE) + tl.cast(eps_lo, ACC_DTYPE)))
        x_hat = cast_for_store(x * rstd, x_ptr.dtype.element_ty, ROUND_BF16).to(ACC_DTYPE)
        tl.store(y_ptr + row * N + cols, cast_for_store(x_hat * w, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _bwd_barrier_copy_kernel(dy_ptr, y_ptr, dx_ptr, part_ptr, count_ptr, N, SPLITS: tl.constexpr, CHUNK: tl.constexpr):
    """Mode ``bwd-floor``: program (row, chunk) loads its chunks of dy and y, publishes their sum's
    max, waits at the row's barrier and stores dy: the backward's traffic and wait, no math."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    dy = tl.load(dy_ptr + row * N + cols, mask=mask, other=0.0)
    y = tl.load(y_ptr + row * N + cols, mask=mask, other=0.0)
    tl.store(part_ptr + row * SPLITS + split, tl.max(y.to(tl.float32), axis=0))
    row_barrier(count_ptr + row, SPLITS)
    tl.store(dx_ptr + row * N + cols, dy, mask=mask)


def resident_per_sm(kernel, warps: int) -> int:
    """Programs of ``kernel`` that fit one SM at once by its registers and shared memory (H100/H200
    limits: 64K registers, 64 warps, 32 programs, 227 KB of shared memory a program may take)."""
    if not hasattr(kernel, "n_regs"):  # the interpreter
        return 1
    regs = -(-max(kernel.n_regs, 1) // 8) * 8  # allocated in units of 8 a thread
    by_smem = (228 * 1024) // kernel.metadata.shared if kernel.metadata.shared else 32
    return max(1, min(65536 // (regs * 32 * warps), 64 // warps, 32, by_smem))


def persistent_call(op, args, chunk, warps, per_sm, prefetch, info):
    """A call of the persistent kernel for ``op`` ("softmax", "rmsnorm"); ``per_sm`` "max" or
    "half" of what fits an SM (read from the kernel compiled at one group an SM, then fixed)."""
    x, out = args[0], args[-1]
    m, n = x.shape
    splits = triton.cdiv(n, chunk)
    sms = hardware.gpu_sm_count(x.device) or 1
    p2, acc, rounding = triton.next_power_of_2(splits), acc_dtype(x.dtype), round_bf16_by_hand(x.dtype)
    parts = [torch.empty(m, splits, device=x.device, dtype=torch.float32) for _ in range(2)]
    even = toy(n % chunk == 0, False)
    eps_hi, eps_lo = split_float(1e-6)

    def launch(groups):
        counters = coop_counters(m, x.device)
        if op == "softmax":
            return _softmax_persistent_kernel[(groups * splits,)](x, out, *parts, counters, x.stride(0), m, n, groups, SPLITS=splits, CHUNK=chunk,
                                                                  SPLITS_P2=p2, ACC_DTYPE=acc, ROUND_BF16=rounding, EVEN_N=even,
                                                                  PREFETCH=prefetch, num_warps=toy(warps, 1))  # fmt: skip
        return _rms_norm_persistent_kernel[(groups * splits,)](x, args[1], out, x.stride(0), m, n, eps_hi, eps_lo, parts[0], counters, groups,
                                                               SPLITS=splits, CHUNK=chunk, SPLITS_P2=p2, ACC_DTYPE=acc, ROUND_BF16=rounding,
                                                               KEEP16=x.dtype == torch.bfloat16, EVEN_N=even, PREFETCH=prefetch,
                                                               num_warps=toy(warps, 1))  # fmt: skip

    kernel = launch(max(1, min(m, sms // splits)))  # compiles it; one program an SM always fits
    fit = resident_per_sm(kernel, warps)
    chosen = fit if per_sm == "max" else max(1, fit // 2)
    groups = max(1, min(m, chosen * sms // splits))
    info.update(programs_per_sm=chosen, groups=groups)
    if hasattr(kernel, "n_regs"):
        info.update(n_regs=kernel.n_regs, n_spills=kernel.n_spills)

    def call():
        launch(groups)
        return out

    return call


def run_persistent(op):
    for m, n, dtype in CASES[op]:
        case = smoke.op_case(op, m, n, dtype)
        args, ref, nbytes = case["args"], case["ref"], case["nbytes"]
        base, rows = smoke.same_size_rows(op, m, n, dtype, case, copy["gbps"])
        for chunk, warps in VARIANTS[op][dtype]:
            if not toy(1 < triton.cdiv(n, chunk) <= 128, True):
                continue
            call = smoke.coop_kernel_call(op, args, chunk, warps)
            rows.append(smoke.checked_row({**base, "impl": "package kernel", "chunk": chunk, "warps": warps}, call,
                                          ref, nbytes, copy["gbps"]))  # fmt: skip
            for prefetch in (True, False):
                for per_sm in PER_SM:
                    info = {}
                    call = persistent_call(op, args, chunk, warps, per_sm, prefetch, info)
                    row = smoke.checked_row({**base, "impl": "persistent", "chunk": chunk, "warps": warps, "prefetch": prefetch, "per_sm": per_sm},
                                            call, ref, nbytes, copy["gbps"])  # fmt: skip
                    rows.append({**row, **info})
        results.extend(smoke.with_of_same_copy(rows))
        smoke.save_rows(sys.argv[1], copy, results)
    print("wrote", sys.argv[1])


def run_bwd_floor():
    for m, n, dtype in BWD_CASES:
        case = smoke.op_case("softmax-bwd", m, n, dtype)
        (dy, y, dx), nbytes = case["args"], case["nbytes"]
        base, rows = smoke.same_size_rows("softmax-bwd", m, n, dtype, case, copy["gbps"])
        for chunk, warps in BWD_VARIANTS:
            splits = triton.cdiv(n, chunk)
            part = torch.empty(m, splits, device=dy.device, dtype=torch.float32)

            def call(chunk=chunk, warps=warps, splits=splits, part=part):
                _bwd_barrier_copy_kernel[(m * splits,)](dy, y, dx, part, coop_counters(m, dy.device), n, SPLITS=splits, CHUNK=chunk,
                                                        num_warps=toy(warps, 1))  # fmt: skip
                return dx

            rows.append(smoke.checked_row({**base, "impl": "barrier copy", "chunk": chunk, "warps": warps}, call, dy.double(), nbytes,
                                          copy["gbps"]))  # fmt: skip
        results.extend(smoke.with_of_same_copy(rows))
        smoke.save_rows(sys.argv[1], copy, results)
    print("wrote", sys.argv[1])


MODE = sys.argv[2] if len(sys.argv) > 2 else "softmax"
if MODE not in ("softmax", "rmsnorm", "bwd-floor"):
    sys.exit(f"mode {MODE!r}: softmax (default), rmsnorm or bwd-floor")
BF, F32 = torch.bfloat16, torch.float32
CASES = {
    "softmax": toy([(4096, 131072, BF), (4096, 131072, F32), (512, 131072, BF), (64, 131072, BF), (16384, 32768, BF)],
                   [(5, 256, BF), (3, 256, F32)]),
    "rmsnorm": toy([(4096, 65536, BF), (2048, 131072, BF), (4096, 65536, F32), (2048, 131072, F32), (8192, 32768, BF)],
                   [(5, 256, BF), (3, 256, F32)]),
}
"""(rows, row length, dtype) by mode."""
VARIANTS = {
    "softmax": {BF: toy([(4096, 4), (8192, 4), (8192, 8), (16384, 8)], [(256, 1)]), F32: toy([(4096, 4), (8192, 4), (8192, 8)], [(256, 1)])},
    "rmsnorm": {BF: toy([(8192, 4), (8192, 8), (16384, 8)], [(256, 1)]), F32: toy([(4096, 4), (4096, 8), (8192, 8)], [(256, 1)])},
}
"""(chunk, warps) by mode and dtype; the package runs softmax (8192, 4), RMSNorm bf16 (16384, 8) and float32 (8192, 8)."""
PER_SM = toy(("max", "half"), ("max",))
BWD_CASES = toy([(64, 131072, BF), (64, 131072, F32), (64, 262144, BF), (64, 262144, F32)], [(3, 256, BF), (3, 256, F32)])
BWD_VARIANTS = toy([(4096, 4), (8192, 4), (8192, 8), (16384, 8), (16384, 16), (32768, 16)], [(256, 1)])
"""Mode ``bwd-floor``: (chunk, warps) of the barrier copy; the package's backward runs 8192 with 8 warps."""

copy = smoke.copy_ceiling()
print("copy GB/s", round(copy["gbps"], 1), flush=True)
results = []
{"softmax": lambda: run_persistent("softmax"), "rmsnorm": lambda: run_persistent("rmsnorm"), "bwd-floor": run_bwd_floor}[MODE]()
