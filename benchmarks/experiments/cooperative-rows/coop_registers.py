"""Why do 16-bit cooperative rows reach ~0.7 of a copy where float32 rows reach ~0.9?

The package's cooperative path (softmax rows of 64K-256K, RMSNorm rows of 64K-128K) launches a
program per (row, chunk of 8192 elements): it loads its chunk, publishes the chunk's statistic,
waits at the row's barrier, merges and writes its chunk from registers. H200, fraction of a copy:
softmax 4096x128K 0.89 fp32 / 0.69 bf16, RMSNorm 4096x64K 0.89 / 0.76. Same programs, same
barriers, same float32 registers per element; a bf16 program moves half the bytes. If what limits
the SM is how many programs fit its registers (each holds its chunk in float32 across the wait),
bf16 keeps half the bytes in flight that float32 does. Three ways to hold fewer registers, and
three ways to wait, each beside the package's kernel:

- ``keep16``: hold the chunk across the barrier in its 16-bit form and widen it again after (bf16
  only: the widening by moving the bits, ``coop.widen_bf16``, is exact, and is a different instruction sequence from the
  first ``.to(float32)``, so the compiler cannot merge the two and keep the float32 copy alive);
- ``w_after`` (RMSNorm): load the weight's chunk after the barrier, not before it;
- ``keep_exp`` (softmax): hold ``e = exp(x - m_chunk)`` across the barrier instead of x, and
  scale it by ``exp(m_chunk - m_row) / s_row`` after: one exponential per element instead of two
  (a bf16 row moves half the bytes per exponential that a float32 row does);
- ``maxnreg``: cap the registers per thread (``maxnreg=`` at launch), so that more programs fit
  an SM (spills, if any, are reported);
- ``wait``: ``atomic`` spins on an acquiring atomic read of the row's counter (the package's
  :func:`~tritonforge.coop.row_barrier`); ``sleep`` the same with ``nanosleep`` between
  reads; ``load`` spins on a volatile load, then acquires once; ``none`` does not wait at all (a
  probe of what the barrier costs: its answers are wrong, so it is timed without the check).

Each row gives the kernel's registers per thread (``n_regs``), spills, and the programs one SM can
hold by registers and warps (``programs_per_sm``: 64K registers, allocated per warp in units of
256; at most 64 warps). Checked against float64 first (a wrong answer is reported, not timed);
device time (CUDA-graph replay, median; the counters' memset is in the timed call, as in the
package); ``fraction_of_copy`` against the big copy's bandwidth.

The recorded mode-``all`` file came from this script before it had the ``keep_exp`` knob (its
default, False, is the kernel that ran); both recorded files measured the package of 33ae85a, and
``coop-registers-adopted-…json`` is mode ``keep-exp`` again after the package took what won.

Mode ``keep-exp`` (a second argument) measures what won in the first run at more shapes (rows of
32K-256K, float32 too), with other chunks and warps, and the package's cooperative backward at
rows of 32K (which now take one program per row) and 128K.

Mode ``keep16`` asks whether softmax gains from holding its bf16 chunk 16-bit after all (two
exponentials per element again, but more elements per SM), once the widening cannot be moved above
the wait (``keep16`` = 2: the bits are offset by a zero read from the row's counter after it), with
chunks of 16384; and RMSNorm with chunks of 16384-32768 at 4-16 warps.

Usage (CUDA GPU, repository root): python benchmarks/experiments/cooperative-rows/coop_registers.py OUT.json [all|keep-exp|keep16]
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/cooperative-rows/coop_registers.py OUT.json [all|keep-exp|keep16]
(in the toy run a row is one chunk, and neither ``sleep`` nor ``maxnreg`` runs: the interpreter has
no inline PTX and no registers)
"""

import sys

import torch

import smoke  # first: imports tritonforge before triton
import tritonforge as tfg
from smoke import DEVICE, SMOKE, toy
from tritonforge import reference
from tritonforge.kernel_utils import round_bf16_by_hand
from tritonforge.ops import softmax, softmax_backward
from tritonforge.ops.gpu import softmax as gpu_softmax
from tritonforge.ops.gpu.coop import coop_counters, widen_bf16

import triton
import triton.language as tl


@triton.jit
def _nanosleep(like):
    return tl.inline_asm_elementwise("nanosleep.u32 64;\n mov.u32 $0, $1;", "=r,r", [like], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _wait(count_ptr, SPLITS, WAIT: tl.constexpr):
    if WAIT == "atomic":
        while tl.atomic_add(count_ptr, 0, sem="acquire") < SPLITS:
            pass
    elif WAIT == "sleep":
        while tl.atomic_add(count_ptr, 0, sem="acquire") < SPLITS:
            _nanosleep(tl.full([1], 0, tl.int32))
    elif WAIT == "load":
        while tl.load(count_ptr, volatile=True) < SPLITS:
            pass
        tl.atomic_add(count_ptr, 0, sem="acquire")  # reads the last arrival: synchronizes with every release


@triton.jit
def _coop_variant_kernel(
    x_ptr, w_ptr, y_ptr, part_a_ptr, part_b_ptr, count_ptr, stride, N, eps,
    OP: tl.constexpr,  # "softmax" or "rmsnorm"
    SPLITS: tl.constexpr, CHUNK: tl.constexpr, SPLITS_P2: tl.constexpr,
    WAIT: tl.constexpr,  # "atomic" (the package), "sleep", "load", "none" (a probe: wrong answers)
    KEEP16: tl.constexpr,  # hold the bf16 chunk across the barrier, widen it after (2: after an opaque zero from the counter)
    W_AFTER: tl.constexpr,  # RMSNorm: load the weight's chunk after the barrier
    KEEP_EXP: tl.constexpr,  # softmax: hold e = exp(x - m_chunk) across the barrier, scale it after
):  # fmt: skip
    """The package's cooperative softmax / RMSNorm forward (coop.row_barrier and all), with
    the knobs above."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    parts = tl.arange(0, SPLITS_P2)
    x_in = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf") if OP == "softmax" else 0.0)
    x = x_in.to(tl.float32)
    if OP == "softmax":
        m = tl.max(x, axis=0)
        m_ref = tl.where(m == -float("inf"), 0.0, m)
        e = tl.exp(x - m_ref)
        tl.store(part_a_ptr + row * SPLITS + split, m)
        tl.store(part_b_ptr + row * SPLITS + split, tl.sum(e, axis=0))
    else:
        if not W_AFTER:
            w = tl.load(w_ptr + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        tl.store(part_a_ptr + row * SPLITS + split, tl.sum(x * x, axis=0))
    tl.atomic_add(count_ptr + row, 1, sem="release")
    if WAIT != "none":
        _wait(count_ptr + row, SPLITS, WAIT)
    if KEEP16 == 2:  # widen bits offset by a zero only the counter knows: the compiler cannot move it above the wait
        zero = (tl.atomic_add(count_ptr + row, 0, sem="relaxed") - SPLITS).to(tl.uint32)
        x = ((x_in.to(tl.uint16, bitcast=True).to(tl.uint32) + zero) << 16).to(tl.float32, bitcast=True)
    elif KEEP16:
        x = widen_bf16(x_in)
    if OP == "softmax":
        ms = tl.load(part_a_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=-float("inf"), volatile=True)
        ss = tl.load(part_b_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True)
        m_row = tl.max(ms, axis=0)
        s_row = tl.sum(tl.where(ms == -float("inf"), 0.0, ss * tl.exp(ms - m_row)), axis=0)
        if KEEP_EXP:  # one exp per program after the barrier, not one per element
            y = e * (tl.exp(m_ref - m_row) / s_row)
        else:
            y = tl.exp(x - m_row) * (1.0 / s_row)
    else:
        if W_AFTER:
            w = tl.load(w_ptr + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        sum_sq = tl.sum(tl.load(part_a_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True), axis=0)
        rstd = 1.0 / tl.sqrt(sum_sq / N + eps)
        y = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32) * w
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


REGISTERS = 65536
MAX_WARPS = 64


def programs_per_sm(n_regs, warps):
    """Programs one SM holds by registers (allocated per warp in units of 256) and warps."""
    if not n_regs:
        return None
    per_warp = -(-n_regs * 32 // 256) * 256
    return min(MAX_WARPS // warps, REGISTERS // per_warp // warps)


def variant_call(op, x, w, y, chunk, warps, wait, keep16, w_after, maxnreg, info, keep_exp=False):
    m, n = x.shape
    splits = triton.cdiv(n, chunk)
    parts = [torch.empty(m, splits, device=x.device, dtype=torch.float32) for _ in range(2)]
    extra = {} if maxnreg is None else {"maxnreg": maxnreg}

    def call():
        kernel = _coop_variant_kernel[(m * splits,)](x, x if w is None else w, y, *parts, coop_counters(m, x.device), x.stride(0), n, 1e-6,
                                                     OP=op, SPLITS=splits, CHUNK=chunk, SPLITS_P2=triton.next_power_of_2(splits), WAIT=wait,
                                                     KEEP16=keep16, W_AFTER=w_after, KEEP_EXP=keep_exp, num_warps=warps,
                                                     **extra)  # fmt: skip
        if not info and kernel is not None and hasattr(kernel, "n_regs"):
            info.update(n_regs=kernel.n_regs, n_spills=kernel.n_spills, programs_per_sm=programs_per_sm(kernel.n_regs, warps))
        return y

    return call


def variants(op, dtype):
    """(chunk, warps, wait, keep16, w_after, maxnreg) for one case."""
    chunk = toy(8192, 256)
    keeps = (False, True) if dtype == torch.bfloat16 else (False,)
    w_afters = (False, True) if op == "rmsnorm" else (False,)
    waits = ("atomic", "load") if SMOKE else ("atomic", "sleep", "load", "none")
    out = [(chunk, toy(8, 1), "atomic", k, wa, None) for k in keeps for wa in w_afters]
    out += [(chunk, toy(8, 1), wait, keeps[-1], w_afters[-1], None) for wait in waits if wait != "atomic"]
    if not SMOKE:
        out += [(chunk, 8, "atomic", keeps[-1], w_afters[-1], cap) for cap in (32, 40, 48)]
        out += [(chunk, 8, "atomic", False, False, cap) for cap in (40, 48)]
        out += [(16384, 16, "atomic", keeps[-1], w_afters[-1], None), (8192, 16, "atomic", keeps[-1], w_afters[-1], None),
                (4096, 8, "atomic", keeps[-1], w_afters[-1], None)]  # fmt: skip
    return out


CASES = toy(
    [("softmax", 4096, 131072, torch.bfloat16), ("softmax", 64, 131072, torch.bfloat16), ("rmsnorm", 4096, 65536, torch.bfloat16),
     ("rmsnorm", 2048, 131072, torch.bfloat16), ("softmax", 4096, 131072, torch.float32), ("rmsnorm", 4096, 65536, torch.float32)],
    [("softmax", 5, 200, torch.bfloat16), ("softmax", 3, 256, torch.float32), ("rmsnorm", 3, 200, torch.bfloat16)],
)  # fmt: skip


MODE = sys.argv[2] if len(sys.argv) > 2 else "all"
if MODE == "keep-exp":  # the second question: the knobs that won, at more shapes, and the backward
    CASES = toy(
        [("softmax", 4096, 131072, torch.bfloat16), ("softmax", 64, 131072, torch.bfloat16), ("softmax", 64, 262144, torch.bfloat16),
         ("softmax", 16384, 32768, torch.bfloat16), ("softmax", 4096, 131072, torch.float32), ("softmax", 64, 131072, torch.float32),
         ("rmsnorm", 4096, 65536, torch.bfloat16), ("rmsnorm", 2048, 131072, torch.bfloat16), ("rmsnorm", 8192, 32768, torch.bfloat16),
         ("rmsnorm", 4096, 65536, torch.float32), ("rmsnorm", 2048, 131072, torch.float32),
         ("softmax-bwd", 16384, 32768, torch.bfloat16), ("softmax-bwd", 4096, 131072, torch.bfloat16)],
        [("softmax", 5, 200, torch.bfloat16), ("rmsnorm", 3, 200, torch.bfloat16), ("softmax-bwd", 3, 200, torch.bfloat16)],
    )  # fmt: skip

    def variants(op, dtype):  # noqa: F811 - this mode's list: (chunk, warps, wait, keep16, w_after, maxnreg, keep_exp)
        small = toy(None, (256, 1, "atomic", dtype == torch.bfloat16, op == "rmsnorm", None, op == "softmax"))
        if op == "softmax":
            return toy([(8192, 8, "atomic", False, False, None, k) for k in (False, True)]
                       + [(c, w, "atomic", False, False, None, True) for c, w in ((8192, 16), (16384, 16), (4096, 8))], [small])  # fmt: skip
        if op == "rmsnorm":
            k16 = dtype == torch.bfloat16
            return toy([(8192, 8, "atomic", k16, True, cap, False) for cap in (None, 32)]
                       + [(c, w, "atomic", k16, True, None, False) for c, w in ((16384, 16), (16384, 8), (8192, 16))], [small])  # fmt: skip
        return toy([(c, w) for c, w in ((8192, 8), (4096, 8), (16384, 16))], [(256, 1)])  # softmax-bwd: the package's coop kernel
elif MODE == "keep16":  # the third question: softmax holding its bf16 chunk 16-bit (two exponentials), bigger chunks
    CASES = toy(
        [("softmax", 4096, 131072, torch.bfloat16), ("softmax", 64, 131072, torch.bfloat16), ("softmax", 64, 262144, torch.bfloat16),
         ("rmsnorm", 4096, 65536, torch.bfloat16), ("rmsnorm", 2048, 131072, torch.bfloat16)],
        [("softmax", 5, 200, torch.bfloat16), ("rmsnorm", 3, 200, torch.bfloat16)],
    )  # fmt: skip

    def variants(op, dtype):  # noqa: F811 - (chunk, warps, wait, keep16, w_after, maxnreg, keep_exp)
        if SMOKE:
            return [(256, 1, "atomic", k, op == "rmsnorm", None, False) for k in (1, 2)]
        if op == "softmax":
            return [(8192, 8, "atomic", False, False, None, True)] + [(c, w, "atomic", k, False, None, False)
                                                                   for c, w, k in ((8192, 8, 1), (8192, 8, 2), (16384, 8, 2), (16384, 16, 2))]
        return [(c, w, "atomic", k, True, None, False) for c, w, k in ((16384, 8, 1), (16384, 8, 2), (32768, 16, 1), (16384, 4, 1))]
elif MODE != "all":
    sys.exit(f"mode {MODE!r}: all (default), keep-exp or keep16")


def bwd_coop_call(dy, y, dx, chunk, warps):
    """The package's cooperative softmax backward with a chosen chunk, at any row length."""
    m, n = y.shape
    splits = triton.cdiv(n, chunk)
    dots = torch.empty(m, splits, device=y.device, dtype=torch.float32)

    def call():
        gpu_softmax._softmax_bwd_coop_kernel[(m * splits,)](dy, y, dx, dots, coop_counters(m, y.device), dy.stride(0), n, m, SPLITS=splits,
                                                        CHUNK=chunk, SPLITS_P2=triton.next_power_of_2(splits), ACC_DTYPE=tl.float32,
                                                        ROUND_BF16=round_bf16_by_hand(y.dtype), num_warps=warps)  # fmt: skip
        return dx

    return call


copy = smoke.copy_ceiling()
print("copy GB/s", round(copy["gbps"], 1), flush=True)
results = []


for op, m, n, dtype in CASES:
    x = (4 * torch.randn(m, n, device=DEVICE)).to(dtype)
    w = (1 + 0.1 * torch.randn(n, device=DEVICE)).to(dtype) if op == "rmsnorm" else None
    y = torch.empty_like(x)
    nbytes = 2 * m * n * x.element_size()
    base = {"op": op, "shape": [m, n], "dtype": str(dtype)[6:]}
    if op == "softmax-bwd":
        y_fwd = tfg.softmax(x)
        dy = torch.randn_like(y_fwd)
        ref = reference.softmax_bwd_ref(dy, y_fwd, upcast=True)
        nbytes = 3 * m * n * x.element_size()
        results.append(smoke.checked_row({**base, "impl": "tritonforge", "plan": list(softmax.plan(m, n, dtype, x.device))},
                                         lambda: softmax_backward.softmax_bwd(dy, y_fwd), ref, nbytes, copy["gbps"]))  # fmt: skip
        for chunk, warps in variants(op, dtype):
            results.append(smoke.checked_row({**base, "impl": "coop", "chunk": chunk, "warps": warps},
                                             bwd_coop_call(dy, y_fwd, y, chunk, warps), ref, nbytes, copy["gbps"]))  # fmt: skip
        x = y = y_fwd = dy = ref = None  # freed before the next case allocates
        smoke.save_rows(sys.argv[1], copy, results)
        continue
    if op == "softmax":
        ref = reference.softmax_ref(x, upcast=True)
        results.append(smoke.checked_row({**base, "impl": "tritonforge"}, lambda: tfg.softmax(x), ref, nbytes, copy["gbps"]))
    else:
        ref = reference.rms_norm_ref(x, w, 1e-6, upcast=True)
        results.append(smoke.checked_row({**base, "impl": "tritonforge"}, lambda: tfg.rms_norm(x, w, 1e-6), ref, nbytes, copy["gbps"]))
    results.append({**base, "impl": "counters memset", "device_us": smoke.device_us(lambda: coop_counters(m, x.device))})
    for chunk, warps, wait, keep16, w_after, maxnreg, *keep_exp in variants(op, dtype):
        info = {}
        call = variant_call(op, x, w, y, chunk, warps, wait, keep16, w_after, maxnreg, info, *keep_exp)
        row = {**base, "impl": "variant", "chunk": chunk, "warps": warps, "wait": wait, "keep16": keep16, "w_after": w_after,
               "maxnreg": maxnreg, "keep_exp": bool(keep_exp and keep_exp[0])}  # fmt: skip
        if wait == "none":  # a probe: no barrier, so the answer is wrong; time only
            call()
            row["device_us"] = smoke.device_us(call)
            row["fraction_of_copy"] = nbytes / row["device_us"] / 1e3 / copy["gbps"]
            print(row, flush=True)
        else:
            row = smoke.checked_row(row, call, ref, nbytes, copy["gbps"])
        results.append({**row, **info})
    x = y = w = ref = None
    smoke.save_rows(sys.argv[1], copy, results)
print("wrote", sys.argv[1])
