"""Where a forward+backward step spends host time: host µs per step and do_bench (with and without
grad_to_none) for each implementation, then a cProfile and a torch.profiler table of ours at bf16
4096×8192. Prints to stdout.

Usage (CUDA GPU, repository root): python benchmarks/experiments/rmsnorm_fwd_bwd_host.py > out.txt
"""
import cProfile, io, pstats, time
import torch
import tritonforge as tfg
from tritonforge import bench
import triton.testing

def host_us(fn, calls=300):
    for _ in range(20): fn()
    torch.cuda.synchronize()
    s = time.perf_counter()
    for _ in range(calls): fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - s) / calls * 1e6

impls = bench.rmsnorm_implementations()
for dtype in (torch.bfloat16,):
    for m, n in ((1, 8192), (4096, 8192)):
        x, w = bench.rmsnorm_inputs(m, n, dtype, "cuda")
        dy = torch.randn(m, n, device="cuda", dtype=dtype)
        x.requires_grad_(True); w.requires_grad_(True)
        for name, make in impls.items():
            if not callable(make): continue
            fn = make()
            step = lambda: bench.forward_backward(fn, x, w, dy)
            def fwd_only():
                with torch.no_grad():
                    fn(x, w, 1e-6)
            h = host_us(step)
            db = triton.testing.do_bench(step, warmup=25, rep=100, grad_to_none=[x, w], return_mode="median") * 1e3
            db2 = triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median") * 1e3
            print(f"{str(dtype)[6:]} {m}x{n} {name:14} host/step {h:8.1f} us  do_bench(grad_to_none) {db:8.1f}  do_bench(no grad_to_none) {db2:8.1f}", flush=True)
            x.grad = w.grad = None

x, w = bench.rmsnorm_inputs(4096, 8192, torch.bfloat16, "cuda")
dy = torch.randn_like(x); x.requires_grad_(True); w.requires_grad_(True)
step = lambda: bench.forward_backward(tfg.rms_norm, x, w, dy)
for _ in range(10): step()
torch.cuda.synchronize()
pr = cProfile.Profile(); pr.enable()
for _ in range(200): step()
torch.cuda.synchronize(); pr.disable()
t = io.StringIO(); pstats.Stats(pr, stream=t).sort_stats("tottime").print_stats(25); print(t.getvalue()[:5000])
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(20):
        x.grad = w.grad = None
        step()
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))
