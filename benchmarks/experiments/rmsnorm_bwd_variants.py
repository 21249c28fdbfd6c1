"""RMSNorm backward (rows that fit a block): programs per SM (1, 2, 4), warps (4, 8, 16) and the
software-pipelining depth of the row loop (tl.range num_stages 1, 2, 3), beside the package's
rms_norm_bwd; do_bench and CUDA-graph times, kernel plus the .sum(0) of the partials.

Usage (CUDA GPU, repository root): python benchmarks/experiments/rmsnorm_bwd_variants.py OUT.json
A standalone copy of the backward kernel with switches: an experiment, not the package's kernel.
"""
import json, sys, importlib
import torch
from tritonforge import bench
import triton, triton.language as tl, triton.testing
m_ = importlib.import_module("tritonforge.ops.rmsnorm")

@triton.jit
def bwd(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dwp_ptr, stride, M, N, rows_per_program,
        BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, M)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in tl.range(row_start, row_end, num_stages=STAGES):
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + row)
        x_hat = x * rstd
        dw_acc += dy * x_hat
        dy_w = dy * w
        mean = tl.sum(dy_w * x_hat, axis=0) / N
        dx = rstd * (dy_w - x_hat * mean)
        tl.store(dx_ptr + row * stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dwp_ptr + pid * N + cols, dw_acc, mask=mask)


copy = bench.measure_copy(bench.COPY_BYTES, device="cuda", timer=bench.do_bench_timer())
gbps = copy["gbps"]; print("copy", gbps, flush=True)
sms = torch.cuda.get_device_properties(0).multi_processor_count
rows = []
for dtype, m, n in ((torch.bfloat16, 4096, 8192), (torch.bfloat16, 32768, 8192), (torch.float32, 4096, 8192), (torch.bfloat16, 16384, 4096)):
    x, w = bench.rmsnorm_inputs(m, n, dtype, "cuda")
    dy = torch.randn_like(x)
    y, rstd = m_.rms_norm_fwd(x, w, 1e-6)
    dx_ref, dw_ref = m_.rms_norm_bwd(dy, x, w, rstd)
    nbytes = (3 * m * n + 2 * n) * x.element_size()  # read x, dy, w; write dx, dw
    def rec(name, fn, **v):
        dx, dw = fn(); torch.cuda.synchronize()
        err = max(((dx.float() - dx_ref.float()).abs().max() / dx_ref.float().abs().max()).item(),
                  ((dw.float() - dw_ref.float()).abs().max() / dw_ref.float().abs().max()).item())
        db = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3
        gr = bench.graph_replay_us(fn, replays=50)
        row = dict(dtype=str(dtype)[6:], m=m, n=n, name=name, **v, err=err, do_bench_us=db, graph_us=gr,
                   frac_db=nbytes / (db * 1e-6) / 1e9 / gbps, frac_graph=nbytes / (gr * 1e-6) / 1e9 / gbps)
        rows.append(row); print(row, flush=True)
    rec("production", lambda: m_.rms_norm_bwd(dy, x, w, rstd))
    block = triton.next_power_of_2(n)
    for mult in (1, 2, 4):
        for nw in (4, 8, 16):
            for stages in (1, 2, 3):
                programs = min(m, sms * mult)
                rpp = triton.cdiv(m, programs); programs = triton.cdiv(m, rpp)
                def fn(programs=programs, rpp=rpp, nw=nw, stages=stages):
                    dx = torch.empty_like(x); dwp = torch.empty(programs, n, device="cuda", dtype=torch.float32)
                    bwd[(programs,)](dy, x, w, rstd, dx, dwp, x.stride(0), m, n, rpp, BLOCK_N=block, STAGES=stages, num_warps=nw)
                    return dx, dwp.sum(0).to(w.dtype)
                try:
                    rec("variant", fn, mult=mult, nw=nw, stages=stages)
                except Exception as e:
                    rows.append(dict(dtype=str(dtype)[6:], m=m, n=n, mult=mult, nw=nw, stages=stages, error=str(e)[:200])); print(rows[-1], flush=True)
    json.dump(dict(copy=copy, rows=rows), open(sys.argv[1], "w"), indent=1)
