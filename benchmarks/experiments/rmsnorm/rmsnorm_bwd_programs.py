"""RMSNorm backward (the package's rms_norm_bwd: kernel + the .sum(0) of the partials): one, two or
three programs per SM, at row lengths of 2-32 KB; device time and do_bench, three interleaved
repeats (median). The package sizes the grid as hardware.sm_count times rmsnorm_backward.bwd_programs_per_sm
(the rule this experiment chose); the script replaces that public heuristic by each count in turn.
(In the interpreter the grid is a fixed handful of programs, so a toy run's three counts coincide.)
Prints one line per (dtype, shape, programs per SM) and writes OUT.json.

Device time: ``bench.device_time_us`` (triton.testing.do_bench_cudagraph, median of its replays);
the recorded file used the retired ``bench.graph_replay_us`` (mean of 100 replays of one captured
call), and scaled hardware.sm_count when the package had one program per SM.

Usage (CUDA GPU, repository root): python benchmarks/experiments/rmsnorm/rmsnorm_bwd_programs.py OUT.json
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/rmsnorm/rmsnorm_bwd_programs.py OUT.json
"""

import json
import statistics
import sys

import torch

import smoke  # first: imports tritonforge before triton
from smoke import DEVICE, toy
from tritonforge import bench
from tritonforge.ops import rmsnorm, rmsnorm_backward

import triton

SHAPES = toy({
    torch.bfloat16: [(4096, 4096), (16384, 4096), (32768, 4096), (16384, 2048), (65536, 2048), (4096, 8192), (16384, 8192)],
    torch.float16: [(16384, 4096)],
    torch.float32: [(16384, 2048), (16384, 4096), (4096, 8192)],
}, {
    torch.bfloat16: [(16, 96)],
    torch.float32: [(12, 64)],
})  # fmt: skip
copy = smoke.copy_ceiling()
print("copy GB/s", round(copy["gbps"]), flush=True)
package_programs_per_sm = rmsnorm_backward.bwd_programs_per_sm
rows = []
try:
    for dtype, shapes in SHAPES.items():
        for m, n in shapes:
            x, w = bench.rmsnorm_inputs(m, n, dtype, DEVICE)
            dy = torch.randn_like(x)
            _, rstd = rmsnorm.rms_norm_fwd(x, w, 1e-6)
            # bytes the backward must move: read x, dy (and w, rstd), write dx and the partials
            nbytes = 3 * m * n * x.element_size()
            times = {mult: ([], []) for mult in (1, 2, 3)}
            for _ in range(toy(3, 1)):
                for mult in times:
                    rmsnorm_backward.bwd_programs_per_sm = lambda row_bytes, stages, mult=mult: mult
                    call = lambda dy=dy, x=x, w=w, rstd=rstd: rmsnorm_backward.rms_norm_bwd(dy, x, w, rstd)
                    times[mult][0].append(smoke.device_us(call))
                    times[mult][1].append(smoke.do_bench_us(call))
            for mult, (graph, timed) in times.items():
                g, t = statistics.median(graph), statistics.median(timed)
                row = dict(dtype=bench.dtype_name(dtype), m=m, n=n, row_kb=n * x.element_size() / 1024,
                           programs_per_sm=mult, graph_us=g, do_bench_us=t,
                           frac_graph=nbytes / g / 1e3 / copy["gbps"], frac_do_bench=nbytes / t / 1e3 / copy["gbps"])  # fmt: skip
                rows.append(row)
                print(f"{row['dtype']:9} {m:>6}x{n:<5} row {row['row_kb']:4.0f} KB  programs/SM {mult}  "
                      f"graph {g:7.1f} us ({row['frac_graph']:.3f})  do_bench {t:7.1f} us ({row['frac_do_bench']:.3f})", flush=True)
            del x, w, dy, rstd
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
finally:
    rmsnorm_backward.bwd_programs_per_sm = package_programs_per_sm
with open(sys.argv[1], "w") as f:
    json.dump(dict(device=smoke.device_name(), torch=torch.__version__, triton=triton.__version__,
                   copy=copy, rows=rows, **smoke.meta()), f, indent=1)  # fmt: skip
