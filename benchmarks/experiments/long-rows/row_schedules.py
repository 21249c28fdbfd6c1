"""Where do bf16 rows lose bandwidth, and which schedule of programs over rows gets it back?

The package reads long rows well in float32 and poorly in bf16 with the same kernels (H200,
fraction of a copy: softmax 16384x32K one pass 0.98 fp32 / 0.77 bf16; 4096x128K cooperative 0.89 /
0.69; RMSNorm 4096x64K 0.89 / 0.76). Same elements per thread, same registers, half the bytes: a
hint that each program's fixed cost (load latency, the reduction, a barrier) is paid per element,
not per byte, and that one program per SM does not keep enough bytes in flight to hide it. Three
schedules that change what is in flight, each beside the package's plan:

- ``persistent one-pass`` (rows up to 32K): ``PROGS`` programs per SM loop over rows
  (``tl.range(..., num_stages=STAGES)``): with STAGES > 1 Triton's pipeliner may issue the next
  row's load while this row reduces. Same traffic as one pass (1 read, 1 write).
- ``persistent two-pass``: the online statistics then the output (2 reads + 1 write as issued),
  but only ``PROGS`` programs per SM, so the rows in flight (132 * PROGS rows) fit the 50 MB L2
  and the re-read hits it: 1 read + 1 write from HBM, with small blocks (few registers) and the
  loop's own pipelining. (The package's online path launches one program per row; with hundreds
  resident, their rows overflow L2: 0.62 at 4096x128K.)
- ``split`` for few long rows (the package's two split kernels with a chosen SPLITS): pass 1
  writes each chunk's state, pass 2 re-reads the chunk (from L2: 64 rows of 128K bf16 are 16 MB).
- ``rows`` (rows of 1K): ``ROWS`` rows per program as one 2D block (more bytes per program).

The recorded mode-``all`` file came from this script's own copy of the persistent one-pass kernel
(commit 4acdb30), before the package had it; the script now launches the package's
``softmax._softmax_fwd_pipelined_kernel``, the same kernel. Likewise the ``rows`` variants of the
recorded ``all`` and ``rows`` files came from the script's own rows kernel (commit f261373; it also
zeroed the rows past M before the sum, which are never stored); the script now launches the
package's ``gpu_softmax._softmax_fwd_rows_kernel``.

Every variant is checked against float64 first (a wrong one is reported, not timed); times are
device time (CUDA-graph replay, median); fractions are of the big copy's bandwidth
(``copy_gbps``) and of a same-size copy's device time (``of_same_copy``: ``y.copy_(x)`` with the
same bytes read and written).

Mode ``cooperative`` (a second argument) asks the next question, for rows too long for one
program (softmax 128K-256K, RMSNorm 64K-128K): the package's cooperative path launches a program
per (row, chunk), and each program pays its load latency and its barrier once, with nothing else
in flight. Here a group of programs, one per chunk position, loops over rows (persistent: the
grid is at most ``PROGS`` programs per SM, so every group is resident together), and with
``PREFETCH`` it loads the next row's chunk between arriving at this row's barrier and waiting
at it.

Mode ``rows`` asks whether several short rows per program (one ``[ROWS, BLOCK_N]`` block) beat a
program per row beyond the one shape of mode ``all``: softmax rows of 512-2K, 4K-64K rows, bf16,
fp16 and float32, ROWS 2-8 at 2-8 warps.

Usage (CUDA GPU, repository root): python benchmarks/experiments/long-rows/row_schedules.py OUT.json [all|cooperative|rows]
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/long-rows/row_schedules.py OUT.json [all|cooperative|rows]
(in the toy run a row is one chunk: the interpreter runs programs one after another, and a program
waiting for another would wait forever)
"""

import json
import sys

import torch

import smoke  # first: imports tritonforge before triton
import tritonforge as tfg
from smoke import DEVICE, toy
from tritonforge import hardware, reference
from tritonforge.kernel_utils import round_bf16_by_hand
from tritonforge.ops import softmax
from tritonforge.ops.gpu import softmax as gpu_softmax
from tritonforge.ops.softmax import _online_state, _write_softmax

import triton
import triton.language as tl


@triton.jit
def _softmax_two_pass_persistent_kernel(x_ptr, y_ptr, M, N, stride, BLOCK_N: tl.constexpr):
    """Programs loop over rows (row = pid, pid + programs, ...): the online state, then the output."""
    for row in range(tl.program_id(0), M, tl.num_programs(0)):
        r = tl.cast(row, tl.int64)
        m, s = _online_state(x_ptr + r * stride, 0, N, BLOCK_N, tl.float32)
        _write_softmax(x_ptr + r * stride, y_ptr + r * N, 0, N, m, s, BLOCK_N, tl.float32, False)


@triton.jit
def _rmsnorm_persistent_kernel(x_ptr, w_ptr, y_ptr, M, N, stride, eps, BLOCK_N: tl.constexpr):
    """Programs loop over rows: pass 1 the sum of squares (x kept in L2), pass 2 the output
    (x re-read, its last use). Hugging Face's rounding order, as the package."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    for row in range(pid, M, programs):
        x_row = x_ptr + tl.cast(row, tl.int64) * stride
        y_row = y_ptr + tl.cast(row, tl.int64) * N
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            acc += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            w = tl.load(w_ptr + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            x_hat = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
            tl.store(y_row + start + cols, (x_hat * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _coop_state(x, OP: tl.constexpr):
    """A chunk's partial statistic: softmax (max, sum of exp(x - max)), RMSNorm (sum of squares, 0)."""
    if OP == "softmax":
        m = tl.max(x, axis=0)
        return m, tl.sum(tl.exp(x - tl.where(m == -float("inf"), 0.0, m)), axis=0)
    return tl.sum(x * x, axis=0), 0.0


@triton.jit
def _coop_persistent_kernel(
    x_ptr, w_ptr, y_ptr, part_a_ptr, part_b_ptr, count_ptr, stride, M, N, eps,
    OP: tl.constexpr,  # "softmax" or "rmsnorm"
    SPLITS: tl.constexpr, CHUNK: tl.constexpr, SPLITS_P2: tl.constexpr,
    PREFETCH: tl.constexpr,  # load the next row's chunk between arriving at this row's barrier and waiting at it
):
    """Cooperative rows by persistent programs: a group of SPLITS programs (one per chunk
    position) takes rows group, group + groups, ...; for each it publishes its chunk's state,
    meets the row's other programs at the row's counter, merges every state in one fixed order
    and writes its chunk from registers. The grid is at most what the GPU holds at once, so every
    group's programs are resident together. With PREFETCH the next row's chunk is in flight while
    the program waits at the barrier, merges and stores."""
    pid = tl.program_id(0)
    groups = tl.num_programs(0) // SPLITS
    group = pid // SPLITS
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    parts = tl.arange(0, SPLITS_P2)
    fill = -float("inf") if OP == "softmax" else 0.0
    if OP == "rmsnorm":
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)  # the same chunk of w for every row
    x_next = tl.load(x_ptr + tl.cast(group, tl.int64) * stride + cols, mask=mask & (tl.zeros([CHUNK], tl.int32) + group < M), other=fill)
    for row in range(group, M, groups):
        r = tl.cast(row, tl.int64)
        x = x_next.to(tl.float32)
        a, b = _coop_state(x, OP)
        tl.store(part_a_ptr + r * SPLITS + split, a)
        tl.store(part_b_ptr + r * SPLITS + split, b)
        tl.atomic_add(count_ptr + r, 1, sem="release")
        nxt = row + groups
        if PREFETCH:
            x_next = tl.load(x_ptr + tl.cast(nxt, tl.int64) * stride + cols, mask=mask & (tl.zeros([CHUNK], tl.int32) + nxt < M), other=fill)
        while tl.atomic_add(count_ptr + r, 0, sem="acquire") < SPLITS:
            pass
        if OP == "softmax":
            ms = tl.load(part_a_ptr + r * SPLITS + parts, mask=parts < SPLITS, other=-float("inf"), volatile=True)
            ss = tl.load(part_b_ptr + r * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True)
            m_row = tl.max(ms, axis=0)
            s_row = tl.sum(tl.where(ms == -float("inf"), 0.0, ss * tl.exp(ms - m_row)), axis=0)
            y = tl.exp(x - m_row) * (1.0 / s_row)
        else:
            sum_sq = tl.sum(tl.load(part_a_ptr + r * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True), axis=0)
            rstd = 1.0 / tl.sqrt(sum_sq / N + eps)
            y = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32) * w
        tl.store(y_ptr + r * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
        if not PREFETCH:
            x_next = tl.load(x_ptr + tl.cast(nxt, tl.int64) * stride + cols, mask=mask & (tl.zeros([CHUNK], tl.int32) + nxt < M), other=fill)


SMS = hardware.gpu_sm_count(torch.device(DEVICE)) or 2


def persistent_call(x, y, progs, block, warps, stages=1, rows_fit=True):
    """``rows_fit``: the package's pipelined one-pass kernel (the whole row a block, ``stages`` rows
    in flight); else this script's two-pass loop. ``progs`` programs per SM, at most one per row."""
    m, n = x.shape
    grid = (min(m, SMS * progs),)

    def call():
        if rows_fit:
            smoke.softmax_fwd_pipelined_kernel[grid](x, y, x.stride(0), m, n, BLOCK_N=block, STAGES=stages, ACC_DTYPE=tl.float32,
                                                        ROUND_BF16=round_bf16_by_hand(x.dtype), num_warps=warps)  # fmt: skip
        else:
            _softmax_two_pass_persistent_kernel[grid](x, y, m, n, x.stride(0), BLOCK_N=block, num_warps=warps)
        return y

    return call


def rows_call(x, y, rows, warps):
    m, n = x.shape

    def call():
        gpu_softmax._softmax_fwd_rows_kernel[(triton.cdiv(m, rows),)](x, y, x.stride(0), m, n, ROWS=rows, BLOCK_N=triton.next_power_of_2(n),
                                                                 ACC_DTYPE=tl.float32, ROUND_BF16=round_bf16_by_hand(x.dtype),
                                                                 num_warps=warps)  # fmt: skip
        return y

    return call


def split_call(x, y, splits, block, warps):
    m, n = x.shape
    chunk = triton.cdiv(triton.cdiv(n, block), splits) * block
    ms = torch.empty(m, splits, device=x.device, dtype=torch.float32)
    ss = torch.empty_like(ms)
    flags = dict(SPLITS=splits, BLOCK_N=block, ACC_DTYPE=tl.float32, num_warps=warps)

    def call():
        softmax._softmax_split_state_kernel[(m, splits)](x, ms, ss, x.stride(0), n, chunk, **flags)
        softmax._softmax_split_write_kernel[(m, splits)](x, y, ms, ss, x.stride(0), n, chunk, ROUND_BF16=False, **flags)
        return y

    return call


def rmsnorm_call(x, w, y, progs, block, warps):
    m, n = x.shape
    grid = (min(m, SMS * progs),)

    def call():
        _rmsnorm_persistent_kernel[grid](x, w, y, m, n, x.stride(0), 1e-6, BLOCK_N=block, num_warps=warps)
        return y

    return call


def coop_persistent_call(op, x, w, y, chunk, warps, progs, prefetch):
    """Groups of cdiv(N, chunk) programs, as many groups as fit progs programs per SM (at most M)."""
    m, n = x.shape
    splits = triton.cdiv(n, chunk)
    groups = max(1, min(m, SMS * progs // splits))
    parts = [torch.empty(m, splits, device=x.device, dtype=torch.float32) for _ in range(2)]

    def call():
        count = torch.zeros(m, device=x.device, dtype=torch.int32)
        _coop_persistent_kernel[(groups * splits,)](x, x if w is None else w, y, *parts, count, x.stride(0), m, n, 1e-6, OP=op, SPLITS=splits,
                                                    CHUNK=chunk, SPLITS_P2=triton.next_power_of_2(splits), PREFETCH=prefetch,
                                                    num_warps=warps)  # fmt: skip
        return y

    return call


def measure(op, m, n, dtype, impl, call, ref, nbytes, same_copy_us, **extra) -> dict:
    out = {"op": op, "shape": [m, n], "dtype": str(dtype)[6:], "impl": impl, **extra}
    out = smoke.checked_row(out, call, ref, nbytes, copy["gbps"])
    if "device_us" in out:
        out["of_same_copy"] = same_copy_us / out["device_us"]
    return out


def softmax_variants(m, n, dtype):
    """(impl, extra, factory(x, y) -> call) for one softmax shape."""
    out = []
    if n <= toy(32768, 256):
        block = triton.next_power_of_2(n)  # bound into each lambda below: the loops further down reuse the name
        for progs in (1, 2):
            for stages in (1, 2, 3):
                for warps in toy((16, 32) if block >= 16384 else (4, 8, 16), (1,)):
                    out.append(("persistent one-pass", dict(progs=progs, stages=stages, warps=warps),
                                lambda x, y, p=progs, s=stages, w=warps, b=block: persistent_call(x, y, p, b, w, s, True)))  # fmt: skip
    if n <= toy(2048, 256):
        for rows in (2, 4, 8):
            for warps in toy((2, 4, 8) if MODE == "rows" else (4, 8), (1,)):
                out.append(("rows", dict(rows=rows, warps=warps), lambda x, y, r=rows, w=warps: rows_call(x, y, r, w)))
    if n >= toy(16384, 256) and m >= toy(1024, 2):
        for progs in (1, 2, 4):
            for block in toy((4096, 8192), (64,)):
                for warps in toy((8, 16), (1,)):
                    out.append(("persistent two-pass", dict(progs=progs, block=block, warps=warps),
                                lambda x, y, p=progs, b=block, w=warps: persistent_call(x, y, p, b, w, 1, False)))  # fmt: skip
    if m <= toy(256, 8):
        for splits in toy((8, 16, 32), (2,)):
            for warps in toy((8, 16), (1,)):
                out.append(("split", dict(splits=splits, block=4096, warps=warps),
                            lambda x, y, s=splits, w=warps: split_call(x, y, s, toy(4096, 64), w)))  # fmt: skip
    return out


CASES = toy(
    [("softmax", 16384, 32768, torch.bfloat16), ("softmax", 16384, 16384, torch.bfloat16), ("softmax", 16384, 1024, torch.bfloat16),
     ("softmax", 4096, 131072, torch.bfloat16), ("softmax", 64, 131072, torch.bfloat16), ("softmax", 64, 262144, torch.bfloat16),
     ("rmsnorm", 4096, 65536, torch.bfloat16), ("rmsnorm", 2048, 131072, torch.bfloat16),
     ("softmax", 16384, 32768, torch.float32), ("softmax", 4096, 131072, torch.float32), ("softmax", 64, 131072, torch.float32),
     ("rmsnorm", 4096, 65536, torch.float32), ("rmsnorm", 2048, 131072, torch.float32)],
    [("softmax", 5, 200, torch.float32), ("softmax", 3, 256, torch.bfloat16), ("rmsnorm", 3, 200, torch.float32)],
)  # fmt: skip

COOP_CONFIGS = ()
"""(chunk, warps, programs per SM, prefetch) of the persistent cooperative kernel (mode cooperative)."""
MODE = sys.argv[2] if len(sys.argv) > 2 else "all"
if MODE == "cooperative":  # the second question: long rows held by persistent groups of programs
    CASES = toy(
        [(op, m, n, dtype) for dtype in (torch.bfloat16, torch.float32)
         for op, m, n in (("softmax", 4096, 131072), ("softmax", 64, 131072), ("softmax", 64, 262144), ("rmsnorm", 4096, 65536),
                          ("rmsnorm", 2048, 131072))],
        [("softmax", 5, 200, torch.float32), ("softmax", 3, 256, torch.bfloat16), ("rmsnorm", 3, 200, torch.float32)],
    )  # fmt: skip
    COOP_CONFIGS = toy([(8192, 8, 1, True), (8192, 8, 1, False), (4096, 4, 1, True), (16384, 16, 1, True), (8192, 8, 2, True)],
                       [(256, 1, 1, True), (256, 1, 1, False)])  # fmt: skip
elif MODE == "rows":  # the third question: several short rows per program, at more shapes
    CASES = toy([("softmax", m, n, dtype) for dtype in (torch.bfloat16, torch.float16, torch.float32)
                 for m, n in ((16384, 512), (16384, 1024), (65536, 1024), (4096, 1024), (16384, 2048))],
                [("softmax", 5, 200, torch.float32), ("softmax", 3, 256, torch.bfloat16)])  # fmt: skip
elif MODE != "all":
    sys.exit(f"mode {MODE!r}: all (default), cooperative or rows")

copy = smoke.copy_ceiling()
print("copy GB/s", round(copy["gbps"], 1), flush=True)
results = []
for op, m, n, dtype in CASES:
    x = (4 * torch.randn(m, n, device=DEVICE)).to(dtype)
    y = torch.empty_like(x)
    nbytes = 2 * m * n * x.element_size()
    same_copy_us = smoke.device_us(lambda: y.copy_(x))
    args = (op, m, n, dtype)
    if op == "softmax":
        ref = reference.softmax_ref(x, upcast=True)
        results.append(measure(*args, "tritonforge", lambda: tfg.softmax(x), ref, nbytes, same_copy_us,
                               plan=list(softmax.plan(m, n, dtype, x.device))))  # fmt: skip
        results.append(measure(*args, "torch.softmax", lambda: torch.softmax(x, -1), ref, nbytes, same_copy_us))
        for impl, extra, factory in [v for v in softmax_variants(m, n, dtype) if MODE == "all" or (MODE == "rows" and v[0] == "rows")]:
            results.append(measure(*args, impl, factory(x, y), ref, nbytes, same_copy_us, **extra))
        for chunk, warps, progs, prefetch in COOP_CONFIGS:
            results.append(measure(*args, "persistent cooperative", coop_persistent_call(op, x, None, y, chunk, warps, progs, prefetch),
                                   ref, nbytes, same_copy_us, chunk=chunk, warps=warps, progs=progs, prefetch=prefetch))  # fmt: skip
    else:
        w = (1 + 0.1 * torch.randn(n, device=DEVICE)).to(dtype)
        ref = reference.rms_norm_ref(x, w, 1e-6, upcast=True)
        results.append(measure(*args, "tritonforge", lambda: tfg.rms_norm(x, w, 1e-6), ref, nbytes, same_copy_us))
        for progs in (1, 2, 4) if MODE == "all" else ():
            for block in toy((4096, 8192), (64,)):
                for warps in toy((8, 16), (1,)):
                    results.append(measure(*args, "persistent two-pass", rmsnorm_call(x, w, y, progs, block, warps), ref, nbytes,
                                           same_copy_us, progs=progs, block=block, warps=warps))  # fmt: skip
        for chunk, warps, progs, prefetch in COOP_CONFIGS:
            results.append(measure(*args, "persistent cooperative", coop_persistent_call(op, x, w, y, chunk, warps, progs, prefetch),
                                   ref, nbytes, same_copy_us, chunk=chunk, warps=warps, progs=progs, prefetch=prefetch))  # fmt: skip
    x = y = ref = None  # freed before the next case allocates
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    with open(sys.argv[1], "w") as f:  # after every case: a run stopped early keeps what it measured
        json.dump({"device": smoke.device_name(), "torch": torch.__version__, "triton": triton.__version__, "copy": copy,
                   "sms": SMS, "rows": results, **smoke.meta()}, f, indent=1)  # fmt: skip
print("wrote", sys.argv[1])
