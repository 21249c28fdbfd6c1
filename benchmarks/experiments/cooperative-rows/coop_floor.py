"""What does a cooperative row cost before any softmax is computed: the counters' memset, the
barrier, and reading a whole row before writing any of it?

Issue 13 asks a softmax over 64 rows of 128K-256K for 0.85 of a same-size copy. The package's
cooperative forward makes 0.47 (bf16) / 0.76 (float32) there, and 0.79 / 0.94 at 4096 rows of 128K
(`../copy-baselines/same-size-copy-nvidia-h200-2026-12-02.json`). Part of any such kernel is not softmax at all: a
memset zeroes the rows' arrival counters before every launch (a graph node of its own), and each
program must wait for every program of its row before it writes. This script times that part
alone, with the package's chunks and warps, at each shape (device time: CUDA-graph replay, median):

- ``same-size copy``: ``torch.mul(x, 1, out=y)`` (the fastest copy of `../copy-baselines/same_size_copy.py` at these sizes);
- ``chunk copy``: a program per (row, chunk) loads its chunk and stores it: the cooperative grid, no barrier;
- ``barrier copy``: the same, with ``coop.row_barrier`` between the load and the store (and
  a partial statistic published before it, as the softmax does), counters zeroed by a memset per call;
- ``barrier copy, reset``: the same barrier with ``RESET`` (each program counts out again and the last
  one zeroes the counter; the script's own copy of that retired barrier), the counters kept between
  calls: no memset;
- ``softmax``: the package's ``gpu_softmax._softmax_coop_kernel`` launched as its launcher did when
  this was recorded (8 warps; it now runs 4, ``gpu_softmax.COOP_FWD_WARPS``), with a memset per call
  (the recorded run also had ``softmax, reset``, the kernel with the retired ``RESET``: 11.5 -> 12.0 us
  at 64 x 131072; the kernel no longer takes it);
- ``tritonforge``: ``tfg.softmax``;
- ``memset``: ``coop.coop_counters(M)`` alone.

RMSNorm's cooperative chunks (16384 elements in bf16) get the copy rows at its shapes. Every copy is
checked against x and every softmax against float64 before it is timed; after the timing, the kept
counters must all be zero again (``counters_zero``). ``of_same_copy`` = the same-size copy's time /
the row's time.

Mode ``chunks`` (a second argument): the package's cooperative kernels (softmax forward and
backward, RMSNorm forward) at other chunks and warps (``CHUNKS``), each beside a barrier copy of the
same chunks and warps, with the compiled kernels' registers.

Mode ``rows2``: RMSNorm's cooperative forward with each program holding the same chunk of two rows,
so that one load of the weight's chunk after the wait serves both rows (``_rms_norm_rows2_kernel``).

Mode ``pipelined``: the package's pipelined one-pass softmax (rows of 32K, 16-bit: 0.93 of a
same-size copy, short of the issue's 0.95) at other warps, stages and programs an SM.

Mode ``few-rows``: the package's cooperative softmax forward and backward at chunks and warps up to
16 warps a program (``FEW_CHUNKS``) over 64 to 4096 rows of 128K-256K, each beside its own
same-size copy (the backward's: 1.5 x the elements), so that ``of_same_copy`` is the issue's
measure. A copy that waits at the backward's barrier reached 0.90-0.95 of that copy at 64 rows
with chunks of 16384 and 16 warps (`coop-persistent-bwd-floor-…json`), where the package's
backward (8192, 8 warps) makes 0.75-0.88.

Usage (CUDA GPU, repository root): python benchmarks/experiments/cooperative-rows/coop_floor.py OUT.json [floor|chunks|rows2|pipelined|few-rows]
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/cooperative-rows/coop_floor.py OUT.json [floor|chunks|rows2|pipelined|few-rows]
(a row is one chunk)
"""

import sys

import torch

import smoke  # first: imports tritonforge before triton
import tritonforge as tfg
from smoke import toy
from tritonforge import hardware, reference
from tritonforge.kernel_utils import acc_dtype, cast_for_store, round_bf16_by_hand, split_float
from tritonforge.ops import softmax
from tritonforge.ops.gpu import rmsnorm as gpu_rmsnorm
from tritonforge.ops.gpu import softmax as gpu_softmax
from tritonforge.ops.gpu.coop import COOP_WARPS, coop_counters, packs_bf16_rows, row_barrier, widen_bf16

import triton
import triton.language as tl


@triton.jit
def _row_barrier_counting_out(count_ptr, SPLITS, RESET: tl.constexpr):
    """``coop.row_barrier`` as the package had it when this was recorded: with ``RESET`` each
    program counts out again after the wait and the last one out zeroes the counter (no memset
    between launches). Measured here, rejected, and gone from the package since (benchmarks/NOTES.md,
    "2026-12-02 (later), issue 13")."""
    tl.atomic_add(count_ptr, 1, sem="release")
    while tl.atomic_add(count_ptr, 0, sem="acquire") < SPLITS:
        pass
    if RESET:  # the counter reaches 2 SPLITS only when every program of the row has left the spin
        if tl.atomic_add(count_ptr, 1, sem="relaxed") == 2 * SPLITS - 1:
            tl.atomic_xchg(count_ptr, 0, sem="relaxed")


@triton.jit
def _chunk_copy_kernel(x_ptr, y_ptr, part_ptr, count_ptr, N, SPLITS: tl.constexpr, CHUNK: tl.constexpr, BARRIER: tl.constexpr,
                       RESET: tl.constexpr):  # fmt: skip
    """Program (row, chunk): load the chunk, (publish its max and meet the row's programs at the
    barrier,) store it."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask)
    if BARRIER:
        tl.store(part_ptr + row * SPLITS + split, tl.max(x.to(tl.float32), axis=0))
        _row_barrier_counting_out(count_ptr + row, SPLITS, RESET)
    tl.store(y_ptr + row * N + cols, x, mask=mask)


@triton.jit
def _rms_norm_rows2_kernel(x_ptr, w_ptr, y_ptr, stride, M, N, eps_hi, eps_lo, part_ptr, count_ptr, SPLITS: tl.constexpr, CHUNK: tl.constexpr,
                           SPLITS_P2: tl.constexpr, ROUND_BF16: tl.constexpr, KEEP16: tl.constexpr):  # fmt: skip
    """Mode ``rows2``: the package's ``gpu_rmsnorm._rms_norm_fwd_coop_kernel`` with each program holding
    the same chunk of two rows, so that the weight's chunk, loaded after the wait, serves both (the
    package's programs read the weight once a row, from L2: as many bytes as x). One counter a pair
    of rows; float32 accumulation."""
    pid = tl.program_id(0)
    pair = pid // SPLITS
    split = pid % SPLITS
    rows = pair * 2 + tl.arange(0, 2)
    row_ok = rows < M
    cols = split * CHUNK + tl.arange(0, CHUNK)
    col_ok = cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    offs = rows.to(tl.int64)[:, None] * stride + cols[None, :]
    x_in = tl.load(x_ptr + offs, mask=mask, other=0.0)
    x = x_in.to(tl.float32)
    tl.store(part_ptr + rows * SPLITS + split, tl.sum(x * x, axis=1), mask=row_ok)
    row_barrier(count_ptr + pair, SPLITS)
    if KEEP16:
        x = widen_bf16(x_in)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    parts = tl.arange(0, SPLITS_P2)
    sums = tl.load(part_ptr + rows[:, None] * SPLITS + parts[None, :], mask=row_ok[:, None] & (parts < SPLITS)[None, :], other=0.0, volatile=True)
    rstd = 1.0 / tl.sqrt(tl.sum(sums, axis=1) / N + (eps_hi + eps_lo))
    x_hat = cast_for_store(x * rstd[:, None], x_ptr.dtype.element_ty, ROUND_BF16).to(tl.float32)
    tl.store(y_ptr + offs, cast_for_store(x_hat * w[None, :], y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


def note_registers(info: dict, kernel) -> None:
    """Record the compiled kernel's registers and spills in ``info`` once (none in the interpreter)."""
    if not info and kernel is not None and hasattr(kernel, "n_regs"):
        info.update(n_regs=kernel.n_regs, n_spills=kernel.n_spills)


def rows2_call(x, w, y, chunk, warps, info):
    m, n = x.shape
    splits, pairs = triton.cdiv(n, chunk), triton.cdiv(m, 2)
    part = torch.empty(m, splits, device=x.device, dtype=torch.float32)
    eps_hi, eps_lo = split_float(1e-6)

    def call():
        k = _rms_norm_rows2_kernel[(pairs * splits,)](x, w, y, x.stride(0), m, n, eps_hi, eps_lo, part, coop_counters(pairs, x.device), SPLITS=splits,
                                                      CHUNK=chunk, SPLITS_P2=triton.next_power_of_2(splits), ROUND_BF16=round_bf16_by_hand(x.dtype),
                                                      KEEP16=x.dtype == torch.bfloat16, num_warps=toy(warps, 1))  # fmt: skip
        note_registers(info, k)
        return y

    return call


def run_rows2():
    for m, n in ROWS2_CASES:
        for dtype in DTYPES:
            case = smoke.op_case("rmsnorm", m, n, dtype)
            (x, w, y), ref, nbytes = case["args"], case["ref"], case["nbytes"]
            base = {"op": "rmsnorm", "shape": [m, n], "dtype": str(dtype)[6:]}
            results.append(smoke.checked_row({**base, "impl": "tritonforge"}, case["package"], ref, nbytes, copy["gbps"]))
            for chunk, warps in ROWS2_CHUNKS[dtype]:
                info = {}
                row = smoke.checked_row({**base, "impl": "two rows", "chunk": chunk, "warps": warps}, rows2_call(x, w, y, chunk, warps, info), ref,
                                        nbytes, copy["gbps"])  # fmt: skip
                results.append({**row, **info})
            smoke.save_rows(sys.argv[1], copy, results)
    print("wrote", sys.argv[1])


def run_pipelined():
    """Mode ``pipelined``: the package's pipelined one-pass kernel at other warps (and two programs an SM)."""
    for m, n, dtype in PIPELINED_CASES:
        case = smoke.op_case("softmax", m, n, dtype)
        (x, y), ref, nbytes = case["args"], case["ref"], case["nbytes"]
        p = softmax.plan(m, n, dtype, x.device)
        sms = hardware.gpu_sm_count(x.device) or 1
        base = {"op": "softmax", "shape": [m, n], "dtype": str(dtype)[6:]}
        results.append(smoke.checked_row({**base, "impl": "tritonforge", "plan": list(p)}, case["package"], ref, nbytes, copy["gbps"]))
        for warps, stages, per_sm in PIPELINED:
            info = {}

            def call(warps=warps, stages=stages, per_sm=per_sm, info=info):
                grid = (min(m, per_sm * sms),)
                k = smoke.softmax_fwd_pipelined_kernel[grid](x, y, x.stride(0), m, n, BLOCK_N=triton.next_power_of_2(n), STAGES=stages,
                                                                ACC_DTYPE=acc_dtype(dtype), ROUND_BF16=round_bf16_by_hand(dtype),
                                                                num_warps=toy(warps, 1))  # fmt: skip
                note_registers(info, k)
                return y

            row = smoke.checked_row({**base, "impl": "pipelined", "warps": warps, "stages": stages, "programs_per_sm": per_sm}, call, ref, nbytes,
                                    copy["gbps"])  # fmt: skip
            results.append({**row, **info})
        smoke.save_rows(sys.argv[1], copy, results)
    print("wrote", sys.argv[1])


def copy_call(x, y, chunk, barrier, reset, kept, warps=COOP_WARPS):
    m, n = x.shape
    splits = triton.cdiv(n, chunk)
    part = torch.empty(m, splits, device=x.device, dtype=torch.float32)

    def call():
        counters = kept if reset else coop_counters(m, x.device)
        _chunk_copy_kernel[(m * splits,)](x, y, part, counters, n, SPLITS=splits, CHUNK=chunk, BARRIER=barrier, RESET=reset,
                                          num_warps=toy(warps, 1))  # fmt: skip
        return y

    return call


MODE = sys.argv[2] if len(sys.argv) > 2 else "floor"
if MODE not in ("floor", "chunks", "rows2", "pipelined", "few-rows"):
    sys.exit(f"mode {MODE!r}: floor (default), chunks, rows2, pipelined or few-rows")
CHUNKS = toy([(4096, 2), (8192, 2), (8192, 4), (8192, 8), (16384, 4), (16384, 8), (32768, 8), (32768, 16)], [(256, 1)])
"""Mode ``chunks``: (chunk, warps) of the package's cooperative kernels. The package's 8192 with 8
warps was chosen in `../long-rows/long_rows.py` (2026-11-30) with ``tl.exp`` and x held across the wait; the
softmax now holds its exponentials and takes ``exp2`` in 16 bits (fewer instructions an element)."""
FEW_CASES = toy([(op, m, n) for op in ("softmax-bwd", "softmax") for n in (131072, 262144) for m in (64, 256, 512, 4096)
                 if m * n <= 4096 * 131072], [("softmax-bwd", 3, 256), ("softmax", 3, 256)])  # fmt: skip
"""Mode ``few-rows``: (op, rows, row length); bf16 and float32 each."""
FEW_CHUNKS = toy([(8192, 4), (8192, 8), (8192, 16), (16384, 8), (16384, 16), (32768, 16)], [(256, 1)])
"""Mode ``few-rows``: (chunk, warps); the package runs (8192, 4) forward and (8192, 8) backward."""
ROWS2_CASES = toy([(4096, 65536), (2048, 131072), (64, 131072), (4096, 131072)], [(3, 256)])
"""Mode ``rows2``: RMSNorm shapes (rows, row length), bf16 and float32 each."""
ROWS2_CHUNKS = {torch.bfloat16: toy([(8192, 8), (8192, 4), (16384, 8), (16384, 16)], [(256, 1)]),
                torch.float32: toy([(4096, 8), (4096, 4), (8192, 8), (8192, 16)], [(256, 1)])}  # fmt: skip
"""Mode ``rows2``: (chunk of each row, warps) by dtype; the program holds twice the chunk."""
PIPELINED_CASES = toy([(16384, 32768, torch.bfloat16), (8192, 32768, torch.bfloat16), (16384, 32768, torch.float16), (16384, 32768, torch.float32)],
                       [(3, 256, torch.bfloat16)])  # fmt: skip
"""Mode ``pipelined``: (rows, row length, dtype) that take the pipelined one-pass kernel."""
PIPELINED = toy([(16, 3, 1), (8, 3, 1), (8, 2, 1), (4, 3, 1), (8, 1, 2)], [(1, 2, 1)])
"""Mode ``pipelined``: (warps, stages, programs an SM); the package runs (16, 3, 1) for rows of 32K."""
CHUNK_CASES = toy([("softmax", 4096, 131072), ("softmax", 512, 131072), ("softmax", 64, 131072), ("softmax", 64, 262144),
                   ("softmax-bwd", 4096, 131072), ("softmax-bwd", 64, 131072), ("softmax-bwd", 64, 262144),
                   ("rmsnorm", 4096, 65536), ("rmsnorm", 2048, 131072), ("rmsnorm", 64, 131072)],
                  [("softmax", 3, 256), ("softmax-bwd", 3, 256), ("rmsnorm", 3, 256)])  # fmt: skip
CASES = toy([("softmax", 4096, 131072), ("softmax", 512, 131072), ("softmax", 64, 131072), ("softmax", 64, 262144),
             ("rmsnorm", 4096, 65536), ("rmsnorm", 64, 131072)], [("softmax", 3, 256), ("rmsnorm", 3, 256)])  # fmt: skip
"""(whose chunks, rows, row length); bf16 and float32 each."""
DTYPES = (torch.bfloat16, torch.float32)

copy = smoke.copy_ceiling()
print("copy GB/s", round(copy["gbps"], 1), flush=True)
results = []


def package_call(op, args, chunk, warps, info):
    """The package's cooperative kernel for ``op`` ("softmax", "softmax-bwd": the packed kernel for
    bf16, "rmsnorm") launched as its launcher did until 4a83bfe (the counter barrier, ``FLAGS``
    off), at ``chunk`` and ``warps``."""
    x, out = args[0], args[-1]
    m, n = x.shape
    splits = triton.cdiv(n, chunk)
    p2, acc, rounding = triton.next_power_of_2(splits), acc_dtype(x.dtype), round_bf16_by_hand(x.dtype)
    parts = [torch.empty(m, splits, device=x.device, dtype=torch.float32) for _ in range(2)]

    def call():
        counters = coop_counters(m, x.device)
        if op == "softmax":
            k = gpu_softmax._softmax_coop_kernel[(m * splits,)](x, out, *parts, counters, x.stride(0), n, m, SPLITS=splits, CHUNK=chunk, SPLITS_P2=p2,
                                                            ACC_DTYPE=acc, ROUND_BF16=rounding, EVEN_N=gpu_softmax.coop_unmasked(x.dtype, n, chunk),
                                                            num_warps=toy(warps, 1))  # fmt: skip
        elif op == "softmax-bwd" and toy(packs_bf16_rows(x, args[1]), False):  # (the packed kernel's inline PTX: not in the interpreter)
            words = [t.view(torch.int32) for t in args]
            k = gpu_softmax._softmax_bwd_coop_packed_kernel[(m * splits,)](*words, parts[0], counters, words[0].stride(0), n // 2,
                                                                       SPLITS=splits, WORDS=chunk // 2, SPLITS_P2=p2, ROUND_BF16=rounding,
                                                                       num_warps=warps)  # fmt: skip
        elif op == "softmax-bwd":
            k = gpu_softmax._softmax_bwd_coop_kernel[(m * splits,)](*args, parts[0], counters, x.stride(0), n, m, SPLITS=splits, CHUNK=chunk,
                                                                    SPLITS_P2=p2, ACC_DTYPE=acc, ROUND_BF16=rounding, num_warps=warps)  # fmt: skip
        else:
            eps_hi, eps_lo = split_float(1e-6)
            k = gpu_rmsnorm._rms_norm_fwd_coop_kernel[(m * splits,)](
                x, args[1], out, out, x.stride(0), out.stride(0), n, eps_hi, eps_lo, parts[0], counters, m, SPLITS=splits, CHUNK=chunk,
                SPLITS_P2=p2, ACC_DTYPE=acc, ROUND_BF16=rounding, STORE_RSTD=False, KEEP16=x.dtype == torch.bfloat16,
                EVEN_N=gpu_rmsnorm.unmasked(x.dtype, n) and n % chunk == 0, num_warps=warps)  # fmt: skip
        note_registers(info, k)
        return out

    return call


def run_chunks():
    for op, m, n in CHUNK_CASES:
        for dtype in DTYPES:
            case = smoke.op_case(op, m, n, dtype)
            args, ref, nbytes = case["args"], case["ref"], case["nbytes"]
            x = args[0]
            base = {"op": op, "shape": [m, n], "dtype": str(dtype)[6:]}
            results.append(smoke.checked_row({**base, "impl": "tritonforge", "plan": case["plan"]}, case["package"], ref, nbytes, copy["gbps"]))
            for chunk, warps in CHUNKS:
                if not toy(1 < triton.cdiv(n, chunk) <= 128, True):  # a cooperative row: two chunks or more (a toy row: one)
                    continue
                info = {}
                row = smoke.checked_row({**base, "impl": "package kernel", "chunk": chunk, "warps": warps},
                                        package_call(op, args, chunk, warps, info), ref, nbytes, copy["gbps"])  # fmt: skip
                results.append({**row, **info})
                if op != "softmax-bwd":
                    y = torch.empty_like(x)
                    results.append(smoke.checked_row({**base, "impl": "barrier copy", "chunk": chunk, "warps": warps},
                                                     copy_call(x, y, chunk, True, False, None, warps), x.double(), nbytes, copy["gbps"]))  # fmt: skip
            smoke.save_rows(sys.argv[1], copy, results)
    print("wrote", sys.argv[1])


def run_few_rows():
    for op, m, n in FEW_CASES:
        for dtype in DTYPES:
            case = smoke.op_case(op, m, n, dtype)
            args, ref, nbytes = case["args"], case["ref"], case["nbytes"]
            base, rows = smoke.same_size_rows(op, m, n, dtype, case, copy["gbps"])
            for chunk, warps in FEW_CHUNKS:
                if toy(1 < triton.cdiv(n, chunk) <= 128, True):
                    info = {}
                    row = smoke.checked_row({**base, "impl": "package kernel", "chunk": chunk, "warps": warps},
                                            package_call(op, args, chunk, warps, info), ref, nbytes, copy["gbps"])  # fmt: skip
                    rows.append({**row, **info})
            results.extend(smoke.with_of_same_copy(rows))
            smoke.save_rows(sys.argv[1], copy, results)
    print("wrote", sys.argv[1])


def run_floor():
    for op, m, n in CASES:
        for dtype in DTYPES:
            floor_case(op, m, n, dtype)
    print("wrote", sys.argv[1])


def floor_case(op, m, n, dtype):
    x = (4 * torch.randn(m, n, device=smoke.DEVICE)).to(dtype)
    y = torch.empty_like(x)
    kept = coop_counters(m, x.device)
    nbytes = 2 * x.numel() * x.element_size()
    chunk = toy(softmax.plan(m, n, dtype, x.device).chunk if op == "softmax" else gpu_rmsnorm.chunk(dtype), 256)
    base = {"chunks_of": op, "shape": [m, n], "dtype": str(dtype)[6:], "chunk": chunk}
    rows = [smoke.checked_row({**base, "impl": "same-size copy"}, lambda: torch.mul(x, 1, out=y), x.double(), nbytes, copy["gbps"])]
    for name, barrier, reset in (("chunk copy", False, False), ("barrier copy", True, False), ("barrier copy, reset", True, True)):
        rows.append(smoke.checked_row({**base, "impl": name}, copy_call(x, y, chunk, barrier, reset, kept), x.double(), nbytes, copy["gbps"]))
    if op == "softmax":
        ref = reference.softmax_ref(x, upcast=True)
        # the package's programs as recorded (8 warps; the package now runs 4: gpu_softmax.COOP_FWD_WARPS)
        rows.append(smoke.checked_row({**base, "impl": "softmax"}, package_call("softmax", (x, y), chunk, COOP_WARPS, {}), ref, nbytes,
                                      copy["gbps"]))  # fmt: skip
        rows.append(smoke.checked_row({**base, "impl": "tritonforge", "plan": list(softmax.plan(m, n, dtype, x.device))},
                                      lambda: tfg.softmax(x), ref, nbytes, copy["gbps"]))  # fmt: skip
    memset = {**base, "impl": "memset", "device_us": smoke.device_us(lambda: coop_counters(m, x.device))}
    print(memset, flush=True)
    rows.append(memset)
    smoke.synchronize()
    zero = bool((kept == 0).all())
    for row in rows:
        if "reset" in row["impl"]:
            row["counters_zero"] = zero
        if "device_us" in row and "device_us" in rows[0] and row is not memset:
            row["of_same_copy"] = rows[0]["device_us"] / row["device_us"]
    results.extend(rows)
    smoke.save_rows(sys.argv[1], copy, results)


{"floor": run_floor, "chunks": run_chunks, "rows2": run_rows2, "pipelined": run_pipelined, "few-rows": run_few_rows}[MODE]()
