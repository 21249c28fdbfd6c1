"""RMSNorm forward variants on the borderline large shapes: one pass vs looped blocks, cache hints
(evict_first on x, evict_last on w, streaming ".cs" stores), 4/8/16 warps; do_bench and CUDA-graph
times beside tfg.rms_norm, torch.compile and Liger.

Usage (CUDA GPU, repository root): python benchmarks/experiments/rmsnorm_fwd_variants.py OUT.json
A standalone copy of the forward kernel with switches: an experiment, not the package's kernel.
"""
import json, sys
import torch
import tritonforge as tfg
from tritonforge import bench
import triton, triton.language as tl, triton.testing

@triton.jit
def fwd(x_ptr, w_ptr, y_ptr, x_stride, y_stride, N, eps,
        BLOCK_N: tl.constexpr, LOOP: tl.constexpr, XHINT: tl.constexpr, YCS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    x_row = x_ptr + row * x_stride
    y_row = y_ptr + row * y_stride
    if not LOOP:
        mask = cols < N
        if XHINT == 1:
            x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        else:
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        y = ((x * rstd).to(y_ptr.dtype.element_ty).to(tl.float32) * w).to(y_ptr.dtype.element_ty)
        if YCS:
            tl.store(y_row + cols, y, mask=mask, cache_modifier=".cs")
        else:
            tl.store(y_row + cols, y, mask=mask)
    else:
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            if XHINT == 2:
                x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            else:
                x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            acc += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            if XHINT == 2:
                x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            else:
                x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            y = ((x * rstd).to(y_ptr.dtype.element_ty).to(tl.float32) * w).to(y_ptr.dtype.element_ty)
            if YCS:
                tl.store(y_row + start + cols, y, mask=mask, cache_modifier=".cs")
            else:
                tl.store(y_row + start + cols, y, mask=mask)


copy = bench.measure_copy(bench.COPY_BYTES, device="cuda", timer=bench.do_bench_timer())
gbps = copy["gbps"]
print("copy", gbps, flush=True)
rows = []
impls = bench.rmsnorm_implementations()
for dtype, m, n in ((torch.bfloat16, 4096, 8192), (torch.bfloat16, 16384, 4096), (torch.float32, 4096, 8192), (torch.bfloat16, 8192, 8192)):
    x, w = bench.rmsnorm_inputs(m, n, dtype, "cuda")
    ref = bench.rms_norm_ref(x, w, 1e-6, upcast=True)
    nbytes = (2 * m * n + n) * x.element_size()
    variants = []
    for nw in (4, 8, 16):
        for xh in (0, 1):
            for ycs in (False, True):
                variants.append(dict(block=triton.next_power_of_2(n), loop=False, nw=nw, xhint=xh, ycs=ycs))
    for block in (1024, 2048, 4096):
        if block >= n: continue
        for nw in (4, 8):
            for xh in (0, 2):
                variants.append(dict(block=block, loop=True, nw=nw, xhint=xh, ycs=False))
    def measure(name, call, v):
        y = call()
        torch.cuda.synchronize()
        err = ((y.double() - ref).abs() / (ref.abs() + 1e-3)).max().item()
        db = triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median") * 1e3
        gr = bench.graph_replay_us(call)
        row = dict(dtype=str(dtype)[6:], m=m, n=n, name=name, **v, max_rel=err, do_bench_us=db, graph_us=gr,
                   frac_db=nbytes / (db * 1e-6) / 1e9 / gbps, frac_graph=nbytes / (gr * 1e-6) / 1e9 / gbps)
        rows.append(row); print(row, flush=True)
    measure("tfg", lambda: tfg.rms_norm(x, w, 1e-6), {})
    for v in variants:
        y = torch.empty_like(x)
        def call(y=y, v=v):
            fwd[(m,)](x, w, y, x.stride(0), y.stride(0), n, 1e-6, BLOCK_N=v["block"], LOOP=v["loop"], XHINT=v["xhint"], YCS=v["ycs"], num_warps=v["nw"])
            return y
        try:
            measure("variant", call, v)
        except Exception as e:
            rows.append(dict(dtype=str(dtype)[6:], m=m, n=n, **v, error=str(e)[:200])); print(rows[-1], flush=True)
    measure("tfg", lambda: tfg.rms_norm(x, w, 1e-6), {})
    fn = impls["torch.compile"]()
    measure("torch.compile", lambda: fn(x, w, 1e-6), {})
    if callable(impls.get("liger")):
        fl = impls["liger"]()
        measure("liger", lambda: fl(x, w, 1e-6), {})
    json.dump(dict(copy=copy, rows=rows), open(sys.argv[1], "w"), indent=1)
