"""The package's forward (rms_norm_fwd) under other (BLOCK_N, num_warps) choices, three interleaved
repeats each (so a drift of the machine shows up as spread, not as a winner). Each choice reaches
rms_norm_fwd by replacing the public heuristic rmsnorm.fwd_config for the call: one pass when the
row fits the block, else the column loop (what replacing _row_config did when this was recorded).

Usage (CUDA GPU, repository root): python benchmarks/experiments/rmsnorm/rmsnorm_fwd_blocks.py OUT.json
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/rmsnorm/rmsnorm_fwd_blocks.py OUT.json
"""

import json
import sys

import torch

import smoke  # first: imports tritonforge before triton
from smoke import DEVICE, toy
from tritonforge import bench
from tritonforge.ops import rmsnorm

import triton

package_config = rmsnorm.fwd_config
copy = smoke.copy_ceiling()
gbps = copy["gbps"]
print("copy", gbps, flush=True)
rows = []
cases = toy({
    (torch.bfloat16, 4096, 8192): [(8192, 16), (8192, 8), (2048, 16), (2048, 8), (4096, 16), (1024, 16)],
    (torch.bfloat16, 16384, 4096): [(4096, 8), (4096, 16), (2048, 16), (2048, 8), (1024, 16)],
    (torch.float32, 4096, 8192): [(8192, 16), (2048, 16), (4096, 16), (2048, 8)],
    (torch.bfloat16, 32768, 8192): [(8192, 16), (2048, 16)],
    (torch.float32, 1, 8192): [(8192, 16), (2048, 16), (8192, 32)],
    (torch.bfloat16, 64, 8192): [(8192, 16), (2048, 16), (8192, 8)],
}, {
    (torch.bfloat16, 3, 96): [(128, 4), (32, 4)],
    (torch.float32, 2, 64): [(64, 4), (16, 8)],
})  # fmt: skip
try:
    for (dtype, m, n), configs in cases.items():
        x, w = bench.rmsnorm_inputs(m, n, dtype, DEVICE)
        ref = bench.rms_norm_ref(x, w, 1e-6, upcast=True)
        nbytes = (2 * m * n + n) * x.element_size()
        for rep in range(toy(3, 1)):
            for block, nw in configs:
                rmsnorm.fwd_config = lambda M, N, dt, block=block, nw=nw: (block, nw, N <= block)
                call = lambda: rmsnorm.rms_norm_fwd(x, w, 1e-6, save_rstd=False)[0]
                y = call()
                smoke.synchronize()
                err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
                db = smoke.do_bench_us(call)
                row = dict(dtype=str(dtype)[6:], m=m, n=n, block=block, nw=nw, rep=rep, err=err, us=db, frac=nbytes / (db * 1e-6) / 1e9 / gbps)
                rows.append(row)
                print(row, flush=True)
finally:
    rmsnorm.fwd_config = package_config
with open(sys.argv[1], "w") as f:
    json.dump(dict(copy=copy, rows=rows, torch=torch.__version__, triton=triton.__version__, **smoke.meta()), f, indent=1)
