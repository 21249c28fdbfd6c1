"""Rows too long for one program's registers, read once: a row cut into chunks held by SPLITS
programs that meet at a per-row barrier (the package's cooperative kernels, launched here with
each chunk and warps), beside the package's softmax and RMSNorm forward (and softmax backward)
as the plans choose, and torch's, as fractions of the copy bandwidth. The recorded chunks-mode
file came from this script's own copies of those kernels (commit fa563f5, SPLITS a constexpr),
before the package had them; the package's are the same kernels.

Why: the package's long-row paths read x twice (pass 1 the statistics, pass 2 the output, hoping
the re-read hits L2). With hundreds of programs in flight, hundreds of 128-512 KB rows overflow
the 50 MB L2 and the re-read goes to HBM: 2 reads + 1 write, at best 2/3 of a copy. Here each
program keeps its chunk of the row in registers, writes its partial statistic ((max, sum) for
softmax, the sum of squares for RMSNorm, <dy, y> for softmax's backward) to a workspace, bumps
the row's counter (atomic, release) and spins until the counter reaches SPLITS (acquire); then
every program merges the row's SPLITS partials in the same fixed order (deterministic) and writes
its chunk from registers: 1 read + 1 write. The barrier relies on the programs of a row being
resident together: siblings are consecutive program ids, dispatched in order, and SPLITS is far
below what the GPU holds at once (the forward-progress assumption of decoupled look-back scans).
The counters are zeroed per call (one memset, included in the time).

The chunk and warps (CONFIGS) are swept; each row checked against float64 first, and a
wrong one reported, not timed.

Mode ``one-pass`` (a second argument) asks the next question: rows up to 32K with the whole row
in one program (the package's one-row kernels, launched with each num_warps), and the package's
cooperative path beside this script's, at fewer shapes.

Usage (CUDA GPU, repository root): python benchmarks/experiments/long-rows/long_rows.py OUT.json [chunks|one-pass]
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/long-rows/long_rows.py OUT.json (one chunk per
row: the interpreter runs programs one after another, so a row of several chunks would spin forever)
"""

import json
import sys

import torch

import smoke  # first: imports tritonforge before triton
import tritonforge as tfg
from smoke import DEVICE, toy
from tritonforge.kernel_utils import acc_dtype, round_bf16_by_hand
from tritonforge.ops.gpu import rmsnorm as gpu_rmsnorm
from tritonforge.ops.gpu import softmax as gpu_softmax

import triton


def coop_call(op: str, tensors: dict, chunk: int, warps: int):
    """A zero-argument call of the package's cooperative kernel for ``op`` on ``tensors`` with this
    chunk and warps (its output and partials preallocated; the counters zeroed in the call)."""
    from tritonforge.kernel_utils import split_float

    x = tensors["x"]
    m, n = x.shape
    splits = triton.cdiv(n, chunk)
    flags = dict(CHUNK=chunk, SPLITS=splits, SPLITS_P2=triton.next_power_of_2(splits), ACC_DTYPE=acc_dtype(x.dtype),
                 ROUND_BF16=round_bf16_by_hand(x.dtype), num_warps=warps)  # fmt: skip
    out = torch.empty_like(x)
    parts = torch.empty(m, splits, device=x.device, dtype=torch.float32)
    parts2 = torch.empty(m, splits, device=x.device, dtype=torch.float32)
    eps_hi, eps_lo = split_float(1e-6)

    def call():
        count = torch.zeros(m, device=x.device, dtype=torch.int32)
        grid = (m * splits,)
        if op == "softmax":
            gpu_softmax._softmax_coop_kernel[grid](x, out, parts, parts2, count, x.stride(0), n, m, **flags)
        elif op == "softmax-bwd":
            gpu_softmax._softmax_bwd_coop_kernel[grid](tensors["dy"], tensors["y"], out, parts, count, n, n, m, **flags)
        else:
            gpu_rmsnorm._rms_norm_fwd_coop_kernel[grid](x, tensors["w"], out, out, x.stride(0), out.stride(0), n, eps_hi, eps_lo, parts, count, m,
                                                    STORE_RSTD=False, KEEP16=x.dtype == torch.bfloat16, **flags)  # fmt: skip
        return out

    return call


def package_call(op: str, tensors: dict):
    if op == "softmax":
        return lambda: tfg.softmax(tensors["x"])
    if op == "softmax-bwd":
        from tritonforge.ops import softmax_backward

        return lambda: softmax_backward.softmax_bwd(tensors["dy"], tensors["y"])
    return lambda: tfg.rms_norm(tensors["x"], tensors["w"], 1e-6)


def torch_call(op: str, tensors: dict):
    if op == "softmax":
        return lambda: torch.softmax(tensors["x"], -1)
    if op == "softmax-bwd":
        return lambda: torch._softmax_backward_data(tensors["dy"], tensors["y"], -1, tensors["x"].dtype)
    return lambda: torch.nn.functional.rms_norm(tensors["x"], (tensors["x"].shape[1],), tensors["w"], 1e-6)


def make(op: str, m: int, n: int, dtype) -> tuple[dict, torch.Tensor, int]:
    """Inputs, the float64 reference and the bytes one call must move at least."""
    x = (4 * torch.randn(m, n, device=DEVICE)).to(dtype)
    if op == "rmsnorm":
        w = (1 + 0.1 * torch.randn(n, device=DEVICE)).to(dtype)
        xd = x.double()
        ref = (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6)) * w.double()
        return {"x": x, "w": w}, ref, (2 * m * n + n) * x.element_size()
    y = torch.softmax(x.double(), -1)
    if op == "softmax":
        return {"x": x}, y, 2 * m * n * x.element_size()
    dy = torch.randn(m, n, device=DEVICE).to(dtype)
    ref = y * (dy.double() - (dy.double() * y).sum(-1, keepdim=True))
    return {"x": x, "y": y.to(dtype), "dy": dy}, ref, 3 * m * n * x.element_size()


def row(op, m, n, dtype, impl, call, ref, nbytes, copy_gbps, **extra) -> dict:
    out = {"op": op, "shape": [m, n], "dtype": str(dtype)[6:], "impl": impl, **extra}
    return smoke.checked_row(out, call, ref, nbytes, copy_gbps)


CASES = toy(
    [(op, m, n, dtype) for dtype in (torch.bfloat16, torch.float32)
     for op, m, n in (("rmsnorm", 4096, 65536), ("softmax", 4096, 131072), ("softmax", 64, 131072), ("softmax", 1, 262144),
                      ("softmax", 16384, 32768), ("softmax-bwd", 4096, 131072), ("softmax-bwd", 16384, 32768),
                      ("rmsnorm", 4096, 32768), ("rmsnorm", 2048, 131072))],
    [("softmax", 3, 96, torch.float32), ("softmax-bwd", 2, 64, torch.float32), ("rmsnorm", 2, 128, torch.bfloat16)],
)  # fmt: skip
CONFIGS = toy(((1024, 4), (4096, 8), (8192, 4), (8192, 8), (16384, 8), (16384, 16), (32768, 16)), ((128, 1),))
"""(chunk, num_warps) of the cooperative kernel: 8-64 elements a thread."""
ONE_PASS_WARPS = ()
"""num_warps of the package's one-row kernels with the whole row in registers (mode one-pass)."""

MODE = sys.argv[2] if len(sys.argv) > 2 else "chunks"
if MODE == "one-pass":  # the second question: rows up to 32K in one program, by warps; the package's cooperative
    # path (runtime SPLITS) beside this script's (constexpr SPLITS)
    CASES = toy(
        [(op, m, n, dtype) for dtype in (torch.bfloat16, torch.float32)
         for op, m, n in (("softmax", 16384, 32768), ("softmax", 16384, 16384), ("rmsnorm", 4096, 32768), ("rmsnorm", 8192, 16384),
                          ("softmax", 4096, 131072), ("softmax-bwd", 4096, 131072), ("rmsnorm", 4096, 65536))],
        [("softmax", 3, 96, torch.float32), ("rmsnorm", 2, 128, torch.bfloat16)],
    )  # fmt: skip
    CONFIGS = toy(((8192, 8),), ((128, 1),))
    ONE_PASS_WARPS = toy((4, 8, 16, 32), (1,))
elif MODE != "chunks":
    sys.exit(f"mode {MODE!r}: chunks (default) or one-pass")


def one_pass_call(op: str, tensors: dict, warps: int):
    """The package's one-row kernel with the whole row as one block, ``warps`` warps."""
    from tritonforge.kernel_utils import split_float
    from tritonforge.ops import rmsnorm, softmax

    x = tensors["x"]
    m, n = x.shape
    block = triton.next_power_of_2(n)
    out = torch.empty_like(x)
    acc, bf16 = acc_dtype(x.dtype), round_bf16_by_hand(x.dtype)
    eps_hi, eps_lo = split_float(1e-6)

    def call():
        if op == "softmax":
            softmax._softmax_fwd_kernel[(m,)](x, out, x.stride(0), n, BLOCK_N=block, ROW_FITS=True, ACC_DTYPE=acc, ROUND_BF16=bf16,
                                              num_warps=warps)  # fmt: skip
        else:
            rmsnorm._rms_norm_fwd_kernel[(m,)](x, tensors["w"], out, out, x.stride(0), out.stride(0), n, eps_hi, eps_lo, BLOCK_N=block,
                                               ROW_FITS=True, ACC_DTYPE=acc, ROUND_BF16=bf16, STORE_RSTD=False, num_warps=warps)  # fmt: skip
        return out

    return call


def write(rows: list) -> None:
    with open(sys.argv[1], "w") as f:
        json.dump({"device": smoke.device_name(), "torch": torch.__version__, "triton": triton.__version__, "copy": copy,
                   "rows": rows, **smoke.meta()}, f, indent=1)  # fmt: skip


copy = smoke.copy_ceiling()
print("copy GB/s", round(copy["gbps"], 1), flush=True)
rows = []
for op, m, n, dtype in CASES:
    tensors, ref, nbytes = make(op, m, n, dtype)
    rows.append(row(op, m, n, dtype, "tritonforge", package_call(op, tensors), ref, nbytes, copy["gbps"]))
    rows.append(row(op, m, n, dtype, "torch", torch_call(op, tensors), ref, nbytes, copy["gbps"]))
    for warps in ONE_PASS_WARPS if op != "softmax-bwd" and n <= toy(32768, 128) else ():
        rows.append(row(op, m, n, dtype, "one-pass", one_pass_call(op, tensors, warps), ref, nbytes, copy["gbps"], warps=warps))
    for chunk, warps in CONFIGS:
        splits = triton.cdiv(n, chunk)
        if splits > 128 or (m * splits < 132 and chunk > 1024):
            continue  # too many partials for one merge, or too few programs to fill the GPU
        rows.append(row(op, m, n, dtype, "coop", coop_call(op, tensors, chunk, warps), ref, nbytes, copy["gbps"],
                        chunk=chunk, warps=warps, splits=splits))  # fmt: skip
    del tensors, ref
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    write(rows)  # after every case: a run stopped early keeps what it measured
print("wrote", sys.argv[1])
