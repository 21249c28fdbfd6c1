"""Decode-sized RMSNorm forward (M <= 64, N = 8192): the package's kernel under other (BLOCK_N,
num_warps, one or two passes) choices, beside torch.compile of the HF formula, timed as device time
(CUDA-graph replay, 200 replays) in five interleaved repeats; median and minimum per choice.
do_bench rows at these sizes swing by 2x between repeats (host time, the L2 flush), so the
choice is made on device time.

Usage (CUDA GPU, repository root): python benchmarks/experiments/rmsnorm_fwd_decode.py OUT.json
"""
import importlib
import json
import statistics
import sys

import torch
import triton

from tritonforge import bench

rms_norm_module = importlib.import_module("tritonforge.ops.rmsnorm")
package_config = rms_norm_module._fwd_config
CHOICES = [(8192, 4, True), (8192, 8, True), (8192, 16, True), (8192, 32, True),
           (4096, 8, False), (4096, 16, False), (2048, 8, False), (2048, 16, False)]  # fmt: skip
rows = []
try:
    for dtype in (torch.float32, torch.bfloat16):
        for m in (1, 8, 64):
            n = 8192
            x, w = bench.rmsnorm_inputs(m, n, dtype, "cuda")
            ref = bench.rmsnorm_reference(x, w)
            compiled = bench.compile_fresh(bench.hf_llama_rms_norm)
            calls = {"torch.compile": lambda: compiled(x, w, 1e-6), "package": lambda: rms_norm_module.rms_norm_fwd(x, w, 1e-6, save_rstd=False)[0]}
            for block, warps, one_pass in CHOICES:
                calls[f"block {block} warps {warps} {'one pass' if one_pass else 'two passes'}"] = (block, warps, one_pass)
            times = {name: [] for name in calls}
            for _ in range(5):
                for name, call in calls.items():
                    if isinstance(call, tuple):
                        config = call
                        rms_norm_module._fwd_config = lambda M, N, dt, config=config: config
                        call = lambda: rms_norm_module.rms_norm_fwd(x, w, 1e-6, save_rstd=False)[0]
                    else:
                        rms_norm_module._fwd_config = package_config
                    error = bench.relative_error(call(), ref)
                    assert error <= bench.TOLERANCE[dtype], (name, error)
                    times[name].append(bench.graph_replay_us(call, replays=200))
            rms_norm_module._fwd_config = package_config
            chosen = package_config(m, n, dtype)
            for name, values in times.items():
                row = dict(dtype=bench.dtype_name(dtype), m=m, n=n, choice=name, median_us=statistics.median(values),
                           min_us=min(values), repeats=values)  # fmt: skip
                rows.append(row)
                mark = f"  <- package: {chosen}" if name == "package" else ""
                print(f"{row['dtype']:9} {m:>3}x{n}  {name:34} median {row['median_us']:5.2f} us  min {row['min_us']:5.2f}{mark}", flush=True)
finally:
    rms_norm_module._fwd_config = package_config
with open(sys.argv[1], "w") as f:
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, rows=rows), f, indent=1)
