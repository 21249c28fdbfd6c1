"""Host time of each line of rms_norm_bwd (and the two totals), each timed alone in a loop of 500
calls after 50 warm-up calls, best of three; bf16 1x8192 on the GPU. Prints to stdout.

Usage (CUDA GPU, repository root): python benchmarks/experiments/rmsnorm_bwd_host_lines.py > out.txt
"""
import importlib
import time

import torch

from tritonforge import bench
rn = importlib.import_module("tritonforge.ops.rmsnorm")
from tritonforge.kernel_utils import acc_dtype, round_bf16_by_hand
x, w = bench.rmsnorm_inputs(1, 8192, torch.bfloat16, "cuda"); dy = torch.randn_like(x)
y, rstd = rn.rms_norm_fwd(x, w, 1e-6)
N, M = 8192, 1
block_n, num_warps = rn._row_config(N, x.dtype, backward=True)
programs, rpp = rn._bwd_grid(M, x.device)
dx = torch.empty(M, N, dtype=x.dtype, device="cuda"); dwp = torch.empty(programs, N, dtype=torch.float32, device="cuda")
stages = rn._bwd_stages(block_n, x.dtype, x.device)
def launch():
    rn._launch_bwd((programs,), dy, x, w, rstd, dx, dwp, dy.stride(0), x.stride(0), N, M, N, rpp,
        BLOCK_N=block_n, ROW_FITS=True, ACC_DTYPE=acc_dtype(x.dtype), COMPUTE_DX=True, COMPUTE_DW=True,
        ROUND_BF16=round_bf16_by_hand(x.dtype), STAGES=stages, num_warps=num_warps)
parts = {
  "_as_rows x2 + contiguous": lambda: (rn._as_rows(x, N), rn._as_rows(dy, N), w.contiguous()),
  "_row_config": lambda: rn._row_config(N, x.dtype, backward=True),
  "_bwd_grid": lambda: rn._bwd_grid(M, x.device),
  "_bwd_stages": lambda: rn._bwd_stages(block_n, x.dtype, x.device),
  "acc_dtype+round_bf16": lambda: (acc_dtype(x.dtype), round_bf16_by_hand(x.dtype)),
  "empty dx": lambda: torch.empty(M, N, dtype=x.dtype, device=x.device),
  "empty dw_partial": lambda: torch.empty(programs, N, dtype=torch.float32, device=x.device),
  "launch (cached)": launch,
  "key only": lambda: rn._launch_bwd.key((dy, x, w, rstd, dx, dwp, 8192, 8192, N, M, N, rpp), dict(BLOCK_N=block_n)),
  "dw.sum(0)": lambda: dwp.sum(0),
  "dw.sum(0).to(bf16)": lambda: dwp.sum(0).to(torch.bfloat16),
  "dx.view(shape)": lambda: dx.view(x.shape),
  "rms_norm_bwd total": lambda: rn.rms_norm_bwd(dy, x, w, rstd),
  "rms_norm_fwd total": lambda: rn.rms_norm_fwd(x, w, 1e-6),
}
for name, fn in parts.items():
    best = []
    for rep in range(3):
        for _ in range(50): fn()
        torch.cuda.synchronize()
        s = time.perf_counter()
        for _ in range(500): fn()
        torch.cuda.synchronize()
        best.append((time.perf_counter() - s) / 500 * 1e6)
    print(f"{name:28} {min(best):7.2f} us (min of 3 x 500)")
