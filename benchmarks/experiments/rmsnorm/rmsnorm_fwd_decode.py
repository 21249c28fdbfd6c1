"""Decode-sized RMSNorm forward (M <= 64, N = 8192): the package's kernel under other (BLOCK_N,
num_warps, one or two passes) choices, beside torch.compile of the HF formula, timed as device time
in five interleaved repeats; median and minimum per choice. do_bench rows at these sizes swing by
2x between repeats (host time, the L2 flush), so the choice is made on device time. Each choice
reaches rms_norm_fwd by replacing the public heuristic rmsnorm.fwd_config for the call.

Device time: ``bench.device_time_us`` (triton.testing.do_bench_cudagraph, median of its replays);
the recorded file (commit 96e8be9) used the retired ``bench.graph_replay_us`` (mean of 200 replays
of one captured call).

Usage (CUDA GPU, repository root): python benchmarks/experiments/rmsnorm/rmsnorm_fwd_decode.py OUT.json
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/rmsnorm/rmsnorm_fwd_decode.py OUT.json
"""

import json
import statistics
import sys

import torch

import smoke  # first: imports tritonforge before triton
from smoke import DEVICE, toy
from tritonforge import bench
from tritonforge.ops import rmsnorm

import triton

package_config = rmsnorm.fwd_config
N = toy(8192, 96)
CHOICES = toy([(8192, 4, True), (8192, 8, True), (8192, 16, True), (8192, 32, True),
               (4096, 8, False), (4096, 16, False), (2048, 8, False), (2048, 16, False)],
              [(128, 4, True), (128, 8, True), (64, 4, False), (32, 8, False)])  # fmt: skip
rows = []
try:
    for dtype in (torch.float32, torch.bfloat16):
        for m in toy((1, 8, 64), (1, 3)):
            n = N
            x, w = bench.rmsnorm_inputs(m, n, dtype, DEVICE)
            ref = bench.rmsnorm_reference(x, w)
            compiled = bench.compile_fresh(bench.hf_llama_rms_norm)
            calls = {"torch.compile": lambda: compiled(x, w, 1e-6), "package": lambda: rmsnorm.rms_norm_fwd(x, w, 1e-6, save_rstd=False)[0]}
            for block, warps, one_pass in CHOICES:
                calls[f"block {block} warps {warps} {'one pass' if one_pass else 'two passes'}"] = (block, warps, one_pass)
            times = {name: [] for name in calls}
            for _ in range(toy(5, 1)):
                for name, call in calls.items():
                    if isinstance(call, tuple):
                        config = call
                        rmsnorm.fwd_config = lambda M, N, dt, config=config: config
                        call = lambda: rmsnorm.rms_norm_fwd(x, w, 1e-6, save_rstd=False)[0]
                    else:
                        rmsnorm.fwd_config = package_config
                    error = bench.relative_error(call(), ref)
                    assert error <= bench.TOLERANCE[dtype], (name, error)
                    times[name].append(smoke.device_us(call))
            rmsnorm.fwd_config = package_config
            chosen = package_config(m, n, dtype)
            for name, values in times.items():
                row = dict(dtype=bench.dtype_name(dtype), m=m, n=n, choice=name, median_us=statistics.median(values),
                           min_us=min(values), repeats=values)  # fmt: skip
                rows.append(row)
                mark = f"  <- package: {chosen}" if name == "package" else ""
                print(f"{row['dtype']:9} {m:>3}x{n}  {name:34} median {row['median_us']:5.2f} us  min {row['min_us']:5.2f}{mark}", flush=True)
finally:
    rmsnorm.fwd_config = package_config
with open(sys.argv[1], "w") as f:
    json.dump(dict(device=smoke.device_name(), torch=torch.__version__, triton=triton.__version__, rows=rows, **smoke.meta()), f, indent=1)
