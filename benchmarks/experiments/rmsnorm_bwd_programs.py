"""RMSNorm backward (the package's rms_norm_bwd: kernel + the .sum(0) of the partials): one, two or
three programs per SM, at row lengths of 2-32 KB; CUDA-graph device time and do_bench, three
interleaved repeats (median). The package sizes the grid from runtime.sm_count, which this
script scales. Prints one line per (dtype, shape, programs per SM) and writes OUT.json.

Usage (CUDA GPU, repository root): python benchmarks/experiments/rmsnorm_bwd_programs.py OUT.json
"""
import importlib
import json
import statistics
import sys

import torch
import triton.testing

from tritonforge import bench, runtime

rms_norm_module = importlib.import_module("tritonforge.ops.rmsnorm")
SMS = runtime.sm_count(0)
SHAPES = {
    torch.bfloat16: [(4096, 4096), (16384, 4096), (32768, 4096), (16384, 2048), (65536, 2048), (4096, 8192), (16384, 8192)],
    torch.float16: [(16384, 4096)],
    torch.float32: [(16384, 2048), (16384, 4096), (4096, 8192)],
}
copy = bench.measure_copy(bench.COPY_BYTES, device="cuda", timer=bench.do_bench_timer())
print("copy GB/s", round(copy["gbps"]), flush=True)
real_sm_count = runtime.sm_count
rows = []
try:
    for dtype, shapes in SHAPES.items():
        for m, n in shapes:
            x, w = bench.rmsnorm_inputs(m, n, dtype, "cuda")
            dy = torch.randn_like(x)
            _, rstd = rms_norm_module.rms_norm_fwd(x, w, 1e-6)
            # bytes the backward must move: read x, dy (and w, rstd), write dx and the partials
            nbytes = 3 * m * n * x.element_size()
            times = {mult: ([], []) for mult in (1, 2, 3)}
            for _ in range(3):
                for mult in times:
                    runtime.sm_count = lambda index, mult=mult: real_sm_count(index) * mult
                    call = lambda dy=dy, x=x, w=w, rstd=rstd: rms_norm_module.rms_norm_bwd(dy, x, w, rstd)
                    times[mult][0].append(bench.graph_replay_us(call))
                    times[mult][1].append(triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median") * 1e3)
            for mult, (graph, timed) in times.items():
                g, t = statistics.median(graph), statistics.median(timed)
                row = dict(dtype=bench.dtype_name(dtype), m=m, n=n, row_kb=n * x.element_size() / 1024,
                           programs_per_sm=mult, graph_us=g, do_bench_us=t,
                           frac_graph=nbytes / g / 1e3 / copy["gbps"], frac_do_bench=nbytes / t / 1e3 / copy["gbps"])  # fmt: skip
                rows.append(row)
                print(f"{row['dtype']:9} {m:>6}x{n:<5} row {row['row_kb']:4.0f} KB  programs/SM {mult}  "
                      f"graph {g:7.1f} us ({row['frac_graph']:.3f})  do_bench {t:7.1f} us ({row['frac_do_bench']:.3f})", flush=True)
            del x, w, dy, rstd
            torch.cuda.empty_cache()
finally:
    runtime.sm_count = real_sm_count
with open(sys.argv[1], "w") as f:
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=__import__("triton").__version__,
                   copy=copy, rows=rows), f, indent=1)  # fmt: skip
