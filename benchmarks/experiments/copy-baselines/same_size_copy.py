"""What does a same-size copy take at each shape, on device time, and what fraction of it do the
package's softmax and RMSNorm reach there?

Issue 13 states its targets as fractions of "a same-size copy". The suites' fractions are of the
big copy's bandwidth (``bench.COPY_BYTES``, do_bench), which a small shape cannot reach even as a
copy: a launch, the ramp-up and the drain are a larger part of it, and at sizes under the L2
(50 MB on the H200) a CUDA-graph replay reads what the previous replay left there. Here each
shape's own copy is timed exactly as the kernels are (device time: CUDA-graph replay, median;
``bench.device_time_us``), in three implementations, and the fastest is the baseline:

- ``memcpy``: ``y.copy_(x)`` (captured, a memcpy node);
- ``triton copy``: a plain copy kernel, ``BLOCK`` elements a program (three configurations);
- ``torch.mul``: ``torch.mul(x, 1, out=y)``, PyTorch's vectorized elementwise kernel.

The forward's copy moves x's bytes in and out (x read, y written); the backward kernel alone (dy
and y read, dx written) is compared with a copy of 1.5 times as many elements. Every kernel's
answer is checked against float64 before it is timed. ``of_same_copy`` = the fastest copy's time
/ the kernel's time; ``of_big_copy`` = the fraction of the big copy's bandwidth (the suites').

Mode ``cold`` (a second argument) asks what the small shapes make when nothing they read is in L2,
as when a model's logits were written long enough before: every timed call cycles through
``ROTATE`` sets of tensors (at least 200 MB in all, four times the L2), so that each set has left
the L2 when its turn comes, and divides the replay's time by the sets; the copies and the kernels
alike. Shapes of 64-512 rows of 128K-256K.

Usage (CUDA GPU, repository root): python benchmarks/experiments/copy-baselines/same_size_copy.py OUT.json [cold]
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/copy-baselines/same_size_copy.py OUT.json [cold]
"""

import json
import sys

import torch

import smoke  # first: imports tritonforge before triton
import tritonforge as tfg
from smoke import DEVICE, toy
from tritonforge import reference
from tritonforge.ops import softmax_backward

import triton
import triton.language as tl


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


COPY_CONFIGS = toy([(2048, 4), (8192, 8), (16384, 16)], [(64, 1)])
"""(BLOCK, num_warps) of the Triton copy."""


MODE = sys.argv[2] if len(sys.argv) > 2 else "hot"
if MODE not in ("hot", "cold"):
    sys.exit(f"mode {MODE!r}: hot (default) or cold")
COLD_BYTES = toy(200 * 2**20, 2**16)
"""Mode ``cold``: the least bytes one timed call cycles through (four times the H200's 50 MB L2)."""


def rotations(nbytes: int) -> int:
    """Sets of tensors a timed call cycles through: 1 (mode hot), else enough for ``COLD_BYTES``."""
    return 1 if MODE == "hot" else max(2, -(-COLD_BYTES // nbytes))


def rotated(make, sets: int):
    """``sets`` independent calls from ``make(k)``, as one call that runs them all in turn."""
    calls = [make(k) for k in range(sets)]

    def call():
        return [c() for c in calls][-1]

    return call


def copies(numel: int, dtype: torch.dtype) -> list[dict]:
    """Every copy of ``numel`` elements, timed (per copy, over ``rotations`` sets of tensors);
    the fastest is the shape's baseline."""
    sets = rotations(2 * numel * dtype.itemsize)
    srcs = [torch.randn(numel, device=DEVICE).to(dtype) for _ in range(sets)]
    dsts = [torch.empty_like(src) for src in srcs]
    makers = {"memcpy": lambda k: lambda: dsts[k].copy_(srcs[k]), "torch.mul": lambda k: lambda: torch.mul(srcs[k], 1, out=dsts[k])}
    for block, warps in COPY_CONFIGS:
        makers[f"triton copy {block}/{warps}"] = (
            lambda k, b=block, w=warps: lambda: _copy_kernel[(triton.cdiv(numel, b),)](srcs[k], dsts[k], numel, BLOCK=b, num_warps=w))  # fmt: skip
    out = []
    for impl, make in makers.items():
        call = rotated(make, sets)
        for dst in dsts:
            dst.zero_()
        call()
        smoke.synchronize()
        if not all(torch.equal(dst, src) for dst, src in zip(dsts, srcs)):
            out.append({"impl": impl, "error": "the copy is wrong"})
            continue
        out.append({"impl": impl, "device_us": smoke.device_us(call) / sets, "sets": sets})
    return out


def kernel_row(base: dict, call, ref, copy_rows: list[dict], nbytes: int, sets: int = 1) -> dict:
    """The kernel's row: checked (the call's last result against ``ref``), then timed per call of
    ``sets``, beside the fastest copy."""
    row = smoke.checked_row(dict(base), call, ref, nbytes * sets, big_copy["gbps"])
    if "device_us" in row:
        row["device_us"] /= sets
        row["sets"] = sets
    timed = [r for r in copy_rows if "device_us" in r]
    if "device_us" in row and timed:
        best = min(timed, key=lambda r: r["device_us"])
        row.update(same_copy_impl=best["impl"], same_copy_us=best["device_us"], of_same_copy=best["device_us"] / row["device_us"],
                   of_big_copy=row.pop("fraction_of_copy"))  # fmt: skip
    return row


SOFTMAX = toy([(16384, 1024), (16384, 4096), (16384, 32768), (4096, 131072), (64, 131072), (64, 262144)], [(5, 200), (3, 1000)])
RMSNORM = toy([(8192, 32768), (4096, 65536), (2048, 131072)], [(3, 300)])
if MODE == "cold":
    SOFTMAX = toy([(64, 131072), (64, 262144), (512, 131072)], [(5, 200)])
    RMSNORM = toy([(64, 131072)], [(3, 300)])

big_copy = smoke.copy_ceiling()
print("copy GB/s", round(big_copy["gbps"], 1), flush=True)
results = []
for dtype in (torch.bfloat16, torch.float32):
    for op, shapes in (("softmax", SOFTMAX), ("rmsnorm", RMSNORM)):
        for m, n in shapes:
            base = {"op": op, "shape": [m, n], "dtype": str(dtype)[6:]}
            sets = rotations(2 * m * n * dtype.itemsize)
            xs = [(4 * torch.randn(m, n, device=DEVICE)).to(dtype) for _ in range(sets)]
            x = xs[-1]  # the set whose result is checked (the rotated call returns the last)
            fwd_copies = copies(m * n, dtype)
            results += [{**base, "direction": "forward", **r} for r in fwd_copies]
            nbytes = 2 * m * n * x.element_size()
            if op == "softmax":
                ref = reference.softmax_ref(x, upcast=True)
                results.append(kernel_row({**base, "direction": "forward", "impl": "tritonforge"},
                                          rotated(lambda k: lambda: tfg.softmax(xs[k]), sets), ref, fwd_copies, nbytes, sets))  # fmt: skip
                ys = [tfg.softmax(xk) for xk in xs]
                dys = [torch.randn_like(yk) for yk in ys]
                ref = reference.softmax_bwd_ref(dys[-1], ys[-1], upcast=True)
                bwd_copies = copies(m * n * 3 // 2, dtype)
                results += [{**base, "direction": "backward", **r} for r in bwd_copies]
                results.append(kernel_row({**base, "direction": "backward", "impl": "tritonforge"},
                                          rotated(lambda k: lambda: softmax_backward.softmax_bwd(dys[k], ys[k]), sets), ref, bwd_copies,
                                          3 * m * n * x.element_size(), sets))  # fmt: skip
                ys = dys = None
            else:
                w = (1 + 0.1 * torch.randn(n, device=DEVICE)).to(dtype)
                ref = reference.rms_norm_ref(x, w, 1e-6, upcast=True)
                results.append(kernel_row({**base, "direction": "forward", "impl": "tritonforge"},
                                          rotated(lambda k: lambda: tfg.rms_norm(xs[k], w, 1e-6), sets), ref, fwd_copies, nbytes, sets))  # fmt: skip
            x = xs = ref = None  # freed before the next shape allocates
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
            with open(sys.argv[1], "w") as f:  # after every shape: a run stopped early keeps what it measured
                json.dump({"device": smoke.device_name(), "torch": torch.__version__, "triton": triton.__version__, "copy": big_copy,
                           "mode": MODE, "rows": results, **smoke.meta()}, f, indent=1)  # fmt: skip
print("wrote", sys.argv[1])
