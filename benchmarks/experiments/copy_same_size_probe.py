"""Before the harness had a same-size copy row: torch's copy_ of x into a tensor of the same shape
beside our forward, at five shapes, do_bench (best of three medians) and CUDA-graph replay; and
which launch path each of our two kernels takes (the C launcher or Triton's runner).
Also shows that a graph-captured contiguous copy_ (a memcpy node) runs slower than the eager one.

Usage (CUDA GPU, repository root): python benchmarks/experiments/copy_same_size_probe.py > out.txt
"""
import importlib, torch, triton.testing
import tritonforge as tfg
from tritonforge import bench
rn = importlib.import_module("tritonforge.ops.rmsnorm")
x, w = bench.rmsnorm_inputs(4096, 8192, torch.bfloat16, "cuda")
dy = torch.randn_like(x); x.requires_grad_(True); w.requires_grad_(True)
for _ in range(3):
    y = tfg.rms_norm(x, w); y.backward(dy)
for name, l in (("fwd", rn._launch_fwd), ("bwd", rn._launch_bwd)):
    for key, e in l._compiled.items():
        r = e.compiled.run
        print(name, "launch None?", e.launch is None, "gscratch", getattr(r, "global_scratch_size", "?"), "pscratch", getattr(r, "profile_scratch_size", "?"),
              "coop", getattr(r, "launch_cooperative_grid", "?"), "pdl", getattr(r, "launch_pdl", "?"), [k for k in key[2]][:4])
with torch.no_grad():
    for dt in (torch.bfloat16, torch.float32):
        for m, n in ((4096, 8192), (16384, 4096), (32768, 8192), (8192, 8192), (2048, 8192)):
            a = torch.randn(m, n, device="cuda", dtype=dt); b = torch.empty_like(a); wt = torch.ones(n, device="cuda", dtype=dt)
            t_copy = min(triton.testing.do_bench(lambda: b.copy_(a), warmup=25, rep=100, return_mode="median") for _ in range(3)) * 1e3
            t_ours = min(triton.testing.do_bench(lambda: tfg.rms_norm(a, wt), warmup=25, rep=100, return_mode="median") for _ in range(3)) * 1e3
            g_copy = bench.graph_replay_us(lambda: b.copy_(a)); g_ours = bench.graph_replay_us(lambda: tfg.rms_norm(a, wt))
            nbytes = 2 * a.numel() * a.element_size()
            print(f"{dt} {m}x{n} copy_ {t_copy:7.1f} us ({nbytes/t_copy/1e3/4249:.3f} of 4249 GB/s) graph {g_copy:7.1f} | ours {t_ours:7.1f} ({nbytes/t_ours/1e3/4249:.3f}) graph {g_ours:7.1f}")
