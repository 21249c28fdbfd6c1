"""Where does a small RMSNorm call spend its time? Host (Python) versus device, on a CUDA GPU.

For decode-sized inputs the kernel itself runs in a few microseconds; what a caller waits for is
the Python work around the launch. This script measures, for each implementation:
  host µs/call   - wall time of 2000 back-to-back calls, one synchronize at the end;
  device µs/call - the same call replayed from a CUDA graph (no Python at all): bench.device_time_us,
                   triton.testing.do_bench_cudagraph (median);
  do_bench µs    - what the harness reports (triton.testing.do_bench median, L2 cleared per rep).
Then it splits our host time into layers (allocation, Triton's launch, the launcher function,
the public call) and prints the top entries of a cProfile of our own call. Usage: python benchmarks/host_overhead.py [out.json]
"""

import cProfile
import io
import json
import pstats
import sys
import time

import torch

import tritonforge as tfg  # before triton: it decides the interpreter flag
from tritonforge import bench
from tritonforge.kernel_utils import split_float
from tritonforge.ops import rmsnorm as rms_norm_module

import triton.language as tl
import triton.testing

assert torch.cuda.is_available(), "needs a CUDA GPU"
EPS = 1e-6


def host_us(fn, calls=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


rows = []
impls = bench.rmsnorm_implementations()
for dtype in (torch.bfloat16, torch.float32):
    for m, n in ((1, 8192), (64, 8192), (4096, 512), (4096, 8192)):
        x, w = bench.rmsnorm_inputs(m, n, dtype, "cuda")
        for name, maker in impls.items():
            if not callable(maker):
                continue  # unavailable here (a string says why)
            fn = maker()
            call = lambda: fn(x, w, EPS)  # noqa: E731
            try:
                row = {"impl": name, "dtype": str(dtype)[6:], "shape": [m, n], "host_us": host_us(call)}
                row["do_bench_us"] = triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median") * 1e3
                try:
                    row["graph_us"] = bench.device_time_us(call)
                except Exception as exc:  # noqa: BLE001
                    row["graph_us"] = None
                    row["graph_error"] = f"{type(exc).__name__}: {exc}"[:200]
            except Exception as exc:  # noqa: BLE001
                row = {"impl": name, "dtype": str(dtype)[6:], "shape": [m, n], "error": f"{type(exc).__name__}: {exc}"[:300]}
            rows.append(row)
            g = row.get("graph_us")
            print(f"{row['dtype']:9} {m:>5}x{n:<5} {name:14} host {row.get('host_us', float('nan')):8.1f} us/call   "
                  f"graph {g if g is None else round(g, 1)}   do_bench {row.get('do_bench_us', float('nan')):8.1f}")

# Where our host time goes, layer by layer (1x8192 bf16): each line adds one layer on top of the last.
x, w = bench.rmsnorm_inputs(1, 8192, torch.bfloat16, "cuda")
y = torch.empty_like(x)
block_n, num_warps = rms_norm_module.row_config(8192, torch.bfloat16)
constexprs = dict(BLOCK_N=block_n, ROW_FITS=True, ACC_DTYPE=tl.float32, ROUND_BF16=False, STORE_RSTD=False, num_warps=num_warps)
args = (x, w, y, y, x.stride(0), y.stride(0), 8192, *split_float(EPS))
layers = {
    "torch.empty (the output)": lambda: torch.empty(1, 8192, dtype=torch.bfloat16, device="cuda"),
    "Triton's own launch: kernel[grid](...)": lambda: rms_norm_module._rms_norm_fwd_kernel[(1,)](*args, **constexprs),
    "rms_norm_fwd (+ layout, allocation)": lambda: rms_norm_module.rms_norm_fwd(x, w, EPS, save_rstd=False),
    "tfg.rms_norm (+ checks, routing)": lambda: tfg.rms_norm(x, w, EPS),
}
split = []
for name, fn in layers.items():
    split.append({"layer": name, "host_us": host_us(fn, calls=5000)})
    print(f"{name:42} {split[-1]['host_us']:7.2f} us/call")

profiler = cProfile.Profile()
profiler.enable()
for _ in range(2000):
    tfg.rms_norm(x, w, EPS)
torch.cuda.synchronize()
profiler.disable()
text = io.StringIO()
pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
print(text.getvalue()[:6000])
if len(sys.argv) > 1:
    record = {"schema": bench.results.HOST_OVERHEAD_SCHEMA, "rows": rows, "host_split_1x8192_bf16": split,
              "profile_top": text.getvalue()[:20000], "torch": torch.__version__}
    json.dump(record, open(sys.argv[1], "w"), indent=1)
