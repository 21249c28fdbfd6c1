"""The package's forward kernel: one pass (the row kept in registers) against two passes with the
whole row as one block (the row re-read from L2, the structure of torch.compile's kernel) and
two passes of 2048 columns; three interleaved repeats each.

Usage (CUDA GPU, repository root): python benchmarks/experiments/rmsnorm_fwd_passes.py OUT.json
"""
import json, sys, importlib
import torch
from tritonforge import bench
import triton, triton.language as tl, triton.testing
m_ = importlib.import_module("tritonforge.ops.rmsnorm")
copy = bench.measure_copy(bench.COPY_BYTES, device="cuda", timer=bench.do_bench_timer())
gbps = copy["gbps"]; print("copy", gbps, flush=True)
rows = []
shapes = [(torch.bfloat16, 4096, 8192), (torch.bfloat16, 16384, 4096), (torch.float32, 4096, 8192),
          (torch.float32, 16384, 4096), (torch.bfloat16, 32768, 8192), (torch.float32, 32768, 8192),
          (torch.bfloat16, 1, 8192), (torch.bfloat16, 64, 8192), (torch.bfloat16, 4096, 2048)]
for dtype, m, n in shapes:
    x, w = bench.rmsnorm_inputs(m, n, dtype, "cuda")
    ref = bench.rms_norm_ref(x, w, 1e-6, upcast=True)
    nbytes = (2 * m * n + n) * x.element_size()
    block_prod, nw_prod = m_._row_config(n, dtype)
    configs = [("one pass", block_prod, True, nw_prod), ("two passes, block N", block_prod, False, nw_prod),
               ("two passes, block N", block_prod, False, 8 if nw_prod == 16 else 16),
               ("two passes, block 2048", 2048, False, 8)]
    for rep in range(3):
        for name, block, fits, nw in configs:
            y = torch.empty_like(x)
            def call(y=y, block=block, fits=fits, nw=nw):
                m_._launch_fwd((m,), x, w, y, y, x.stride(0), y.stride(0), n, 1e-6, BLOCK_N=block, ROW_FITS=fits,
                               ACC_DTYPE=tl.float32, ROUND_BF16=False, STORE_RSTD=False, num_warps=nw)
                return y
            call(); torch.cuda.synchronize()
            err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
            db = triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median") * 1e3
            row = dict(dtype=str(dtype)[6:], m=m, n=n, variant=name, block=block, nw=nw, rep=rep, err=err, us=db,
                       frac=nbytes / (db * 1e-6) / 1e9 / gbps)
            rows.append(row); print(row, flush=True)
json.dump(dict(copy=copy, rows=rows, torch=torch.__version__, triton=triton.__version__,
               device=torch.cuda.get_device_name()), open(sys.argv[1], "w"), indent=1)
