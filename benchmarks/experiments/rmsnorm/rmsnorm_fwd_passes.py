"""The package's forward kernel: one pass (the row kept in registers) against two passes with the
whole row as one block (the row re-read from L2, the structure of torch.compile's kernel) and
two passes of 2048 columns; three interleaved repeats each. Launches the kernel
(rmsnorm._rms_norm_fwd_kernel) itself, with each choice, into a preallocated output.

Usage (CUDA GPU, repository root): python benchmarks/experiments/rmsnorm/rmsnorm_fwd_passes.py OUT.json
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/rmsnorm/rmsnorm_fwd_passes.py OUT.json
"""

import json
import sys

import torch

import smoke  # first: imports tritonforge before triton
from smoke import DEVICE, toy
from tritonforge import bench
from tritonforge.kernel_utils import acc_dtype, round_bf16_by_hand, split_float
from tritonforge.ops import rmsnorm

import triton

LOOP_BLOCK = toy(2048, 32)  # the "two passes, block 2048" variant's block
copy = smoke.copy_ceiling()
gbps = copy["gbps"]
print("copy", gbps, flush=True)
rows = []
shapes = toy([(torch.bfloat16, 4096, 8192), (torch.bfloat16, 16384, 4096), (torch.float32, 4096, 8192),
              (torch.float32, 16384, 4096), (torch.bfloat16, 32768, 8192), (torch.float32, 32768, 8192),
              (torch.bfloat16, 1, 8192), (torch.bfloat16, 64, 8192), (torch.bfloat16, 4096, 2048),
              (torch.bfloat16, 1024, 4096), (torch.bfloat16, 2048, 4096), (torch.float32, 2048, 4096)],
             [(torch.bfloat16, 3, 96), (torch.float32, 2, 128)])  # fmt: skip
eps_hi, eps_lo = split_float(1e-6)
for dtype, m, n in shapes:
    x, w = bench.rmsnorm_inputs(m, n, dtype, DEVICE)
    ref = bench.rms_norm_ref(x, w, 1e-6, upcast=True)
    nbytes = (2 * m * n + n) * x.element_size()
    block_prod, nw_prod = rmsnorm.row_config(n, dtype)
    configs = [("one pass", block_prod, True, nw_prod), ("two passes, block N", block_prod, False, nw_prod),
               ("two passes, block N", block_prod, False, 8 if nw_prod == 16 else 16),
               (f"two passes, block {LOOP_BLOCK}", LOOP_BLOCK, False, 8)]  # fmt: skip
    for rep in range(toy(3, 1)):
        for name, block, fits, nw in configs:
            y = torch.empty_like(x)

            def call(y=y, block=block, fits=fits, nw=nw):
                rmsnorm._rms_norm_fwd_kernel[(m,)](
                    x, w, y, y, x.stride(0), y.stride(0), n, eps_hi, eps_lo, BLOCK_N=block, ROW_FITS=fits,
                    ACC_DTYPE=acc_dtype(dtype), ROUND_BF16=round_bf16_by_hand(dtype), STORE_RSTD=False, num_warps=nw,
                )  # fmt: skip
                return y

            call()
            smoke.synchronize()
            err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
            db = smoke.do_bench_us(call)
            row = dict(dtype=str(dtype)[6:], m=m, n=n, variant=name, block=block, nw=nw, rep=rep, err=err, us=db,
                       frac=nbytes / (db * 1e-6) / 1e9 / gbps)  # fmt: skip
            rows.append(row)
            print(row, flush=True)
with open(sys.argv[1], "w") as f:
    json.dump(dict(copy=copy, rows=rows, torch=torch.__version__, triton=triton.__version__,
                   device=smoke.device_name(), **smoke.meta()), f, indent=1)  # fmt: skip
