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

Usage (CUDA GPU, repository root): python benchmarks/experiments/same_size_copy.py OUT.json
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/same_size_copy.py OUT.json
"""

import json
import sys

import torch

import smoke  # first: imports tritonforge before triton
import tritonforge as tfg
from smoke import DEVICE, toy
from tritonforge import reference
from tritonforge.ops import softmax

import triton
import triton.language as tl


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


COPY_CONFIGS = toy([(2048, 4), (8192, 8), (16384, 16)], [(64, 1)])
"""(BLOCK, num_warps) of the Triton copy."""


def copies(numel: int, dtype: torch.dtype) -> list[dict]:
    """Every copy of ``numel`` elements, timed; the fastest is the shape's baseline."""
    src = torch.randn(numel, device=DEVICE).to(dtype)
    dst = torch.empty_like(src)
    calls = {"memcpy": lambda: dst.copy_(src), "torch.mul": lambda: torch.mul(src, 1, out=dst)}
    for block, warps in COPY_CONFIGS:
        calls[f"triton copy {block}/{warps}"] = (
            lambda b=block, w=warps: _copy_kernel[(triton.cdiv(numel, b),)](src, dst, numel, BLOCK=b, num_warps=w))  # fmt: skip
    out = []
    for impl, call in calls.items():
        dst.zero_()
        call()
        smoke.synchronize()
        if not torch.equal(dst, src):
            out.append({"impl": impl, "error": "the copy is wrong"})
            continue
        out.append({"impl": impl, "device_us": smoke.device_us(call)})
    return out


def kernel_row(base: dict, call, ref, copy_rows: list[dict], nbytes: int) -> dict:
    row = smoke.checked_row(dict(base), call, ref, nbytes, big_copy["gbps"])
    timed = [r for r in copy_rows if "device_us" in r]
    if "device_us" in row and timed:
        best = min(timed, key=lambda r: r["device_us"])
        row.update(same_copy_impl=best["impl"], same_copy_us=best["device_us"], of_same_copy=best["device_us"] / row["device_us"],
                   of_big_copy=row.pop("fraction_of_copy"))  # fmt: skip
    return row


SOFTMAX = toy([(16384, 1024), (16384, 4096), (16384, 32768), (4096, 131072), (64, 131072), (64, 262144)], [(5, 200), (3, 1000)])
RMSNORM = toy([(8192, 32768), (4096, 65536), (2048, 131072)], [(3, 300)])

big_copy = smoke.copy_ceiling()
print("copy GB/s", round(big_copy["gbps"], 1), flush=True)
results = []
for dtype in (torch.bfloat16, torch.float32):
    for op, shapes in (("softmax", SOFTMAX), ("rmsnorm", RMSNORM)):
        for m, n in shapes:
            base = {"op": op, "shape": [m, n], "dtype": str(dtype)[6:]}
            x = (4 * torch.randn(m, n, device=DEVICE)).to(dtype)
            fwd_copies = copies(m * n, dtype)
            results += [{**base, "direction": "forward", **r} for r in fwd_copies]
            nbytes = 2 * m * n * x.element_size()
            if op == "softmax":
                ref = reference.softmax_ref(x, upcast=True)
                results.append(kernel_row({**base, "direction": "forward", "impl": "tritonforge"}, lambda: tfg.softmax(x), ref, fwd_copies,
                                          nbytes))  # fmt: skip
                y = tfg.softmax(x)
                dy = torch.randn_like(y)
                ref = reference.softmax_bwd_ref(dy, y, upcast=True)
                bwd_copies = copies(m * n * 3 // 2, dtype)
                results += [{**base, "direction": "backward", **r} for r in bwd_copies]
                results.append(kernel_row({**base, "direction": "backward", "impl": "tritonforge"}, lambda: softmax.softmax_bwd(dy, y), ref,
                                          bwd_copies, 3 * m * n * x.element_size()))  # fmt: skip
                y = dy = None
            else:
                w = (1 + 0.1 * torch.randn(n, device=DEVICE)).to(dtype)
                ref = reference.rms_norm_ref(x, w, 1e-6, upcast=True)
                results.append(kernel_row({**base, "direction": "forward", "impl": "tritonforge"}, lambda: tfg.rms_norm(x, w, 1e-6), ref,
                                          fwd_copies, nbytes))  # fmt: skip
            x = ref = None  # freed before the next shape allocates
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
            with open(sys.argv[1], "w") as f:  # after every shape: a run stopped early keeps what it measured
                json.dump({"device": smoke.device_name(), "torch": torch.__version__, "triton": triton.__version__, "copy": big_copy,
                           "rows": results, **smoke.meta()}, f, indent=1)  # fmt: skip
print("wrote", sys.argv[1])
