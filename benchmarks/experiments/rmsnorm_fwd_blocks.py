"""The package's forward kernel under other (BLOCK_N, num_warps) choices, three interleaved repeats
each (so a drift of the machine shows up as spread, not as a winner).

Usage (CUDA GPU, repository root): python benchmarks/experiments/rmsnorm_fwd_blocks.py OUT.json
"""
import json, sys, importlib
import torch
from tritonforge import bench
import triton, triton.testing
m_ = importlib.import_module("tritonforge.ops.rmsnorm")
orig = m_._row_config
copy = bench.measure_copy(bench.COPY_BYTES, device="cuda", timer=bench.do_bench_timer())
gbps = copy["gbps"]; print("copy", gbps, flush=True)
rows = []
cases = {
    (torch.bfloat16, 4096, 8192): [(8192, 16), (8192, 8), (2048, 16), (2048, 8), (4096, 16), (1024, 16)],
    (torch.bfloat16, 16384, 4096): [(4096, 8), (4096, 16), (2048, 16), (2048, 8), (1024, 16)],
    (torch.float32, 4096, 8192): [(8192, 16), (2048, 16), (4096, 16), (2048, 8)],
    (torch.bfloat16, 32768, 8192): [(8192, 16), (2048, 16)],
    (torch.float32, 1, 8192): [(8192, 16), (2048, 16), (8192, 32)],
    (torch.bfloat16, 64, 8192): [(8192, 16), (2048, 16), (8192, 8)],
}
for (dtype, m, n), configs in cases.items():
    x, w = bench.rmsnorm_inputs(m, n, dtype, "cuda")
    ref = bench.rms_norm_ref(x, w, 1e-6, upcast=True)
    nbytes = (2 * m * n + n) * x.element_size()
    for rep in range(3):
        for block, nw in configs:
            m_._row_config = lambda N, dt, backward=False, block=block, nw=nw: (block, nw)
            call = lambda: m_.rms_norm_fwd(x, w, 1e-6, save_rstd=False)[0]
            y = call(); torch.cuda.synchronize()
            err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
            db = triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median") * 1e3
            row = dict(dtype=str(dtype)[6:], m=m, n=n, block=block, nw=nw, rep=rep, err=err, us=db, frac=nbytes / (db * 1e-6) / 1e9 / gbps)
            rows.append(row); print(row, flush=True)
    m_._row_config = orig
json.dump(dict(copy=copy, rows=rows, torch=torch.__version__, triton=triton.__version__), open(sys.argv[1], "w"), indent=1)
