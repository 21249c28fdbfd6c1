"""What does a cooperative row's barrier cost after the last arrival, and can a program that holds
nothing across it fill the GPU in one wave?

The package's cooperative kernels (softmax rows of 64K-256K, its backward, RMSNorm rows of
64K-128K) publish each chunk's statistic with plain stores, then arrive at the row's counter with a
releasing atomic (``coop.row_barrier``), spin on an acquiring read of it, and load the
statistics once the count is full: after the last arrival, a fence, the counter's round trip and
the statistics' round trip. Two variants, each beside the package's kernel:

- ``exchange``: the same program, but the statistic travels in its own flagged 64-bit word
  (``kernel_utils.row_exchange``): one relaxed atomic exchange to publish, one spin on the row's
  words that ends holding every value. Same registers, fewer round trips.
- ``reread`` (softmax forward): a program holds nothing across the wait. It reduces its chunk in
  blocks of ``block`` (the online state, loaded ``evict_last``), exchanges, and writes its chunk
  re-reading x (from L2, where the chunks in flight still are). Few registers, so every program of
  64 rows of 128K fits the GPU at once (one wave; the package's take two), at the price of a
  second read from L2.

Checked against float64 first (a wrong answer is reported, not timed); device time (CUDA-graph
replay, median; the zeroing of counters or slots is in the timed call, as in the package);
``fraction_of_copy`` against the big copy's bandwidth. ``n_regs`` from the compiled kernel.

Mode ``hold16`` (a second argument) is a probe, not a candidate: the package's cooperative softmax
holding ``e`` across the barrier as float16 (16 bits, still one exponential; float16 loses the
smallest probabilities, so the package could never ship it), to bound what a bf16 chunk held in
16 bits on chip would gain, at chunks of 8192-16384.

Usage (CUDA GPU, repository root): python benchmarks/experiments/cooperative-rows/coop_publish.py OUT.json [all|hold16]
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/cooperative-rows/coop_publish.py OUT.json [all|hold16]
(in the toy run a row is one chunk: the interpreter runs programs one after another)
"""

import sys

import torch

import smoke  # first: imports tritonforge before triton
from smoke import toy
from tritonforge.ops import softmax
from tritonforge.ops.gpu.coop import coop_counters, row_barrier, widen_bf16

import triton
import triton.language as tl

PUBLISHED = tl.constexpr(-(1 << 63))
"""The flag of a :func:`row_exchange` slot, its top bit: set in every word a program publishes (the
slots are zeroed before the launch, so a published word is negative), which makes a statistic's
arrival and its value one 64-bit write."""


@triton.jit
def row_exchange(
    slots_ptr,  # *int64 [SPLITS]: the row's slots, zeroed before the launch
    split,  # this program's slot
    hi,  # uint32 whose top bit is clear (a sum of exponentials or of squares, or 0)
    lo,  # uint32
    SPLITS,  # programs of the row
    SPLITS_P2: tl.constexpr,  # next power of two of SPLITS
):
    """Publish ``(hi, lo)`` in this program's slot, wait until every program of the row has
    published its own, and return all of them: ``(his, los)``, ``[SPLITS_P2]`` uint32 vectors
    (lanes past ``SPLITS`` are 0: mask them).

    The barrier and the exchange in one: the statistic travels in the same 64-bit word as its flag
    (``PUBLISHED``), written by one atomic exchange and read by single-copy-atomic 64-bit loads,
    so a program that sees every flag has every value, and no fence or separate counter is needed
    (``coop.row_barrier`` releases, increments a counter, spins on it, then loads the statistics).
    The same residency assumption as ``coop.row_barrier``; never on the interpreter."""
    word = (hi.to(tl.int64) << 32) | lo.to(tl.int64) | PUBLISHED
    tl.atomic_xchg(slots_ptr + split, word, sem="relaxed")
    parts = tl.arange(0, SPLITS_P2)
    valid = parts < SPLITS
    words = tl.load(slots_ptr + parts, mask=valid, other=PUBLISHED, volatile=True)
    while tl.max(words, axis=0) >= 0:  # some slot not yet published
        words = tl.load(slots_ptr + parts, mask=valid, other=PUBLISHED, volatile=True)
    his = tl.where(valid, (words >> 32).to(tl.uint32) & 0x7FFFFFFF, 0)
    los = tl.where(valid, words.to(tl.uint32), 0)
    return his, los


def coop_slots(M: int, splits: int, device: torch.device) -> torch.Tensor:
    """The rows' slots for :func:`row_exchange`: ``[M, splits]`` int64, zeroed for every launch."""
    return torch.zeros(M, splits, dtype=torch.int64, device=device)


@triton.jit
def _as_f32(bits):
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _softmax_exchange_kernel(x_ptr, y_ptr, slots_ptr, stride, N, SPLITS: tl.constexpr, CHUNK: tl.constexpr, SPLITS_P2: tl.constexpr,
                             REREAD: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """The package's cooperative softmax forward with ``row_exchange``; ``REREAD``: in blocks, nothing held across the wait."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * N
    if REREAD:
        start = split * CHUNK
        end = tl.minimum(start + CHUNK, N)
        m, s = softmax._online_state(x_row, start, end, BLOCK, tl.float32)
    else:
        cols = split * CHUNK + tl.arange(0, CHUNK)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        m = tl.max(x, axis=0)
        m_ref = tl.where(m == -float("inf"), 0.0, m)
        e = tl.exp(x - m_ref)
        s = tl.sum(e, axis=0)
    his, los = row_exchange(slots_ptr + row * SPLITS, split, s.to(tl.uint32, bitcast=True), m.to(tl.uint32, bitcast=True), SPLITS, SPLITS_P2)
    valid = tl.arange(0, SPLITS_P2) < SPLITS
    ms = tl.where(valid, _as_f32(los), -float("inf"))
    ss = tl.where(valid, _as_f32(his), 0.0)
    m_row = tl.max(ms, axis=0)
    s_row = tl.sum(tl.where(ms == -float("inf"), 0.0, ss * tl.exp(ms - m_row)), axis=0)
    if REREAD:
        softmax._write_softmax(x_row, y_row, start, end, m_row, s_row, BLOCK, tl.float32, False)
    else:
        y = e * (tl.exp(m - m_row) / s_row)
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_exchange_kernel(x_ptr, w_ptr, y_ptr, slots_ptr, stride, N, eps, SPLITS: tl.constexpr, CHUNK: tl.constexpr,
                             SPLITS_P2: tl.constexpr, KEEP16: tl.constexpr):  # fmt: skip
    """The package's cooperative RMSNorm forward (weight after the wait, bf16 held 16-bit) with ``row_exchange``."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    x_in = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    x = x_in.to(tl.float32)
    sum_sq = tl.sum(x * x, axis=0)
    his, los = row_exchange(slots_ptr + row * SPLITS, split, sum_sq.to(tl.uint32, bitcast=True), tl.zeros([], tl.uint32), SPLITS, SPLITS_P2)
    if KEEP16:
        x = widen_bf16(x_in)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(_as_f32(his), axis=0) / N + eps)
    y = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32) * w
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_bwd_exchange_kernel(dy_ptr, y_ptr, dx_ptr, slots_ptr, N, SPLITS: tl.constexpr, CHUNK: tl.constexpr, SPLITS_P2: tl.constexpr):
    """The package's cooperative softmax backward with ``row_exchange`` (the dot's bits in ``lo``)."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    dy = tl.load(dy_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    part = tl.sum(dy * y, axis=0)
    his, los = row_exchange(slots_ptr + row * SPLITS, split, tl.zeros([], tl.uint32), part.to(tl.uint32, bitcast=True), SPLITS, SPLITS_P2)
    dot = tl.sum(_as_f32(los), axis=0)
    tl.store(dx_ptr + row * N + cols, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_hold16_kernel(x_ptr, y_ptr, part_m_ptr, part_s_ptr, count_ptr, stride, N, SPLITS: tl.constexpr, CHUNK: tl.constexpr,
                           SPLITS_P2: tl.constexpr):  # fmt: skip
    """A probe, not a candidate: the package's cooperative softmax forward holding ``e`` across the
    barrier as float16 (16 bits, one exponential), to bound what holding a bf16 chunk in 16 bits
    could gain. float16 flushes ``e`` below 6e-8 to zero and keeps fewer bits below 6e-5, so the
    smallest probabilities come out wrong: never the package's kernel."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    m_ref = tl.where(m == -float("inf"), 0.0, m)
    e = tl.exp(x - m_ref)
    tl.store(part_m_ptr + row * SPLITS + split, m)
    tl.store(part_s_ptr + row * SPLITS + split, tl.sum(e, axis=0))
    e16 = e.to(tl.float16)
    row_barrier(count_ptr + row, SPLITS)
    parts = tl.arange(0, SPLITS_P2)
    ms = tl.load(part_m_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=-float("inf"), volatile=True)
    ss = tl.load(part_s_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True)
    m_row = tl.max(ms, axis=0)
    s_row = tl.sum(tl.where(ms == -float("inf"), 0.0, ss * tl.exp(ms - m_row)), axis=0)
    y = e16.to(tl.float32) * (tl.exp(m - m_row) / s_row)
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def hold16_call(x, y, chunk, warps, info):
    m, n = x.shape
    splits = triton.cdiv(n, chunk)
    parts = [torch.empty(m, splits, device=x.device, dtype=torch.float32) for _ in range(2)]

    def call():
        k = _softmax_hold16_kernel[(m * splits,)](x, y, *parts, coop_counters(m, x.device), x.stride(0), n, SPLITS=splits, CHUNK=chunk,
                                                  SPLITS_P2=triton.next_power_of_2(splits), num_warps=warps)  # fmt: skip
        if not info and k is not None and hasattr(k, "n_regs"):
            info.update(n_regs=k.n_regs, n_spills=k.n_spills)
        return y

    return call


def exchange_call(op, args, m, n, chunk, warps, info, block=None):
    """One launch of a variant (slots zeroed inside the timed call, as the package zeroes its counters)."""
    splits = triton.cdiv(n, chunk)
    p2 = triton.next_power_of_2(splits)

    def call():
        slots = coop_slots(m, splits, args[0].device)
        if op == "softmax":
            x, y = args
            k = _softmax_exchange_kernel[(m * splits,)](x, y, slots, x.stride(0), n, SPLITS=splits, CHUNK=chunk, SPLITS_P2=p2,
                                                        REREAD=block is not None, BLOCK=block or 1, num_warps=warps)  # fmt: skip
        elif op == "rmsnorm":
            x, w, y = args
            k = _rmsnorm_exchange_kernel[(m * splits,)](x, w, y, slots, x.stride(0), n, 1e-6, SPLITS=splits, CHUNK=chunk, SPLITS_P2=p2,
                                                        KEEP16=x.dtype == torch.bfloat16, num_warps=warps)  # fmt: skip
        else:
            dy, y, dx = args
            k = _softmax_bwd_exchange_kernel[(m * splits,)](dy, y, dx, slots, n, SPLITS=splits, CHUNK=chunk, SPLITS_P2=p2, num_warps=warps)
        if not info and k is not None and hasattr(k, "n_regs"):
            info.update(n_regs=k.n_regs, n_spills=k.n_spills)
        return args[-1]

    return call


CASES = toy(
    [("softmax", 4096, 131072, torch.bfloat16), ("softmax", 64, 131072, torch.bfloat16), ("softmax", 64, 262144, torch.bfloat16),
     ("softmax", 512, 131072, torch.bfloat16), ("softmax", 4096, 131072, torch.float32), ("softmax", 64, 131072, torch.float32),
     ("rmsnorm", 4096, 65536, torch.bfloat16), ("rmsnorm", 2048, 131072, torch.bfloat16), ("rmsnorm", 4096, 65536, torch.float32),
     ("rmsnorm", 2048, 131072, torch.float32), ("softmax-bwd", 4096, 131072, torch.bfloat16), ("softmax-bwd", 64, 131072, torch.bfloat16),
     ("softmax-bwd", 64, 262144, torch.bfloat16), ("softmax-bwd", 4096, 131072, torch.float32)],
    [("softmax", 5, 200, torch.bfloat16), ("softmax", 3, 256, torch.float32), ("rmsnorm", 3, 200, torch.bfloat16),
     ("softmax-bwd", 3, 200, torch.float32)],
)  # fmt: skip


MODE = sys.argv[2] if len(sys.argv) > 2 else "all"
if MODE == "hold16":  # the second question: what would holding a bf16 chunk in 16 bits gain (a probe)
    CASES = toy([("softmax", 4096, 131072, torch.bfloat16), ("softmax", 64, 131072, torch.bfloat16), ("softmax", 64, 262144, torch.bfloat16),
                 ("softmax", 512, 131072, torch.bfloat16)], [("softmax", 5, 200, torch.bfloat16)])  # fmt: skip
elif MODE != "all":
    sys.exit(f"mode {MODE!r}: all (default) or hold16")


def variants(op, dtype):
    """(chunk, warps, block): block None is the package's program with the exchange; else ``reread``;
    block "hold16": the probe holding float16 exponentials, with the package's barrier."""
    if MODE == "hold16":
        return toy([(8192, 8, "hold16"), (16384, 8, "hold16"), (16384, 16, "hold16"), (8192, 4, "hold16")], [(256, 1, "hold16")])
    if op == "rmsnorm":
        return [(toy(16384 if dtype == torch.bfloat16 else 8192, 256), toy(8, 1), None)]
    if op == "softmax-bwd":
        return [(toy(8192, 256), toy(8, 1), None)]
    return toy([(8192, 8, None), (8192, 4, 2048), (8192, 8, 4096), (16384, 8, 4096), (4096, 4, 1024), (16384, 4, 2048)],
               [(256, 1, None), (256, 1, 64)])  # fmt: skip


copy = smoke.copy_ceiling()
print("copy GB/s", round(copy["gbps"], 1), flush=True)
results = []


for op, m, n, dtype in CASES:
    case = smoke.op_case(op, m, n, dtype)
    args, package, ref, nbytes, plan = case["args"], case["package"], case["ref"], case["nbytes"], case["plan"]
    x, out = args[0], args[-1]
    base = {"op": op, "shape": [m, n], "dtype": str(dtype)[6:]}
    results.append(smoke.checked_row({**base, "impl": "tritonforge", "plan": plan}, package, ref, nbytes, copy["gbps"]))
    for chunk, warps, block in variants(op, dtype):
        info = {}
        if block == "hold16":
            row = {**base, "impl": "hold16", "chunk": chunk, "warps": warps}
            call = hold16_call(x, out, chunk, warps, info)
        else:
            row = {**base, "impl": "exchange" if block is None else "reread", "chunk": chunk, "warps": warps, "block": block}
            call = exchange_call(op, args, m, n, chunk, warps, info, block)
        results.append({**smoke.checked_row(row, call, ref, nbytes, copy["gbps"]), **info})
    x = out = ref = args = package = case = None
    smoke.save_rows(sys.argv[1], copy, results)
print("wrote", sys.argv[1])
