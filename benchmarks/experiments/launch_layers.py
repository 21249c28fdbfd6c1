"""Host µs per call of each layer of an eager tfg.rms_norm call (bf16 and fp32, 1x8192), for the package on PYTHONPATH: the tree before issue 10 (the CachedLauncher, commit c0557ec) or after (plain kernel[grid]). Usage: PYTHONPATH=<tree> python benchmarks/experiments/launch_layers.py out.json"""
import json, sys, time
import torch
import tritonforge as tfg
import triton.language as tl
try:
    from tritonforge.ops import rmsnorm as m
    new = True
except ImportError:
    import importlib
    m = importlib.import_module("tritonforge.rms_norm")
    new = False

def host_us(fn, calls=5000, repeats=3):
    for _ in range(100): fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls): fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) / calls * 1e6)
    return sorted(out)[1]

rows = {}
for dtype in (torch.bfloat16, torch.float32):
    x = torch.randn(1, 8192, device="cuda", dtype=dtype); w = torch.randn(8192, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    block_n, num_warps = (m.row_config if new else m._row_config)(8192, dtype)
    consts = dict(BLOCK_N=block_n, ROW_FITS=True, ACC_DTYPE=tl.float32, ROUND_BF16=False, STORE_RSTD=False, num_warps=num_warps)
    if new:
        from tritonforge.kernel_utils import split_float
        args = (x, w, y, y, x.stride(0), y.stride(0), 8192, *split_float(1e-6))
    else:
        args = (x, w, y, y, x.stride(0), y.stride(0), 8192, 1e-6)
    layers = {
        "torch.empty": lambda: torch.empty(1, 8192, dtype=dtype, device="cuda"),
        "kernel[grid] (plain)": lambda: m._rms_norm_fwd_kernel[(1,)](*args, **consts),
    }
    if not new:
        layers["cached launch"] = lambda: m._launch_fwd((1,), *args, **consts)
    layers["rms_norm_fwd"] = lambda: m.rms_norm_fwd(x, w, 1e-6, save_rstd=False)
    if new:
        layers["_forward_routed"] = lambda: m._forward_routed(x, w, 1e-6, False)
        layers["operator (torch.ops.tritonforge.rms_norm)"] = lambda: torch.ops.tritonforge.rms_norm(x, w, 1e-6)
    layers["tfg.rms_norm"] = lambda: tfg.rms_norm(x, w, 1e-6)
    for name, fn in layers.items():
        rows[f"{str(dtype)[6:]} {name}"] = host_us(fn)
        print(f"{'new' if new else 'old'} {str(dtype)[6:]:9} {name:45} {rows[f'{str(dtype)[6:]} {name}']:7.2f} us", flush=True)
json.dump(dict(tree="new" if new else "old", rows=rows), open(sys.argv[1], "w"), indent=1)
