"""FlashAttention-2 backward's tiles: the package's three backward kernels under other plans than
``attention_backward.plan`` picks, to choose ``BACKWARD_TILES`` from measurements.

At B = 4, 32 query heads over 8 KV heads, D = 128, bf16, N = 2048 and 4096, causal and not: the
forward runs once (O and lse saved); then each (resident, streamed, num_warps, num_stages[,
dq_atomic]) in CANDIDATES runs ``attention_backward.flash_attention_bwd`` (``dq_atomic``:
FlashAttention-2's order, dq added from the dK/dV loop with atomics, no dQ kernel) and is checked
on dq, dk, dv against SDPA's math backend in float32 (a wrong plan is reported, not timed), then
timed by device time (CUDA-graph replay) and do_bench; TFLOP/s count the backward as 2.5 forwards (FlashAttention's
convention: 3.5 for the step). Each compiled kernel's registers, spills and shared memory are read
off Triton's cache after the run. SDPA's flash and cuDNN steps (forward + backward) are timed beside,
and the picked plan's three kernels are timed apart under ``torch.profiler`` (where the time goes).

Mode ``d64`` (a second argument): at D = 64, N = 4096, where the accumulators take half the
registers of D = 128 and ``BACKWARD_TILES``' order (chosen at D = 128) may not hold: 128-key
tiles beside the 64-key ones.

Usage (CUDA GPU, repository root): python benchmarks/experiments/attention/attention_bwd_tiles.py OUT.json [all|d64]
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/attention/attention_bwd_tiles.py OUT.json [all|d64]
"""

import json
import sys

import torch

import smoke  # first: imports tritonforge before triton
from smoke import DEVICE, toy
from tritonforge.ops import attention, attention_backward, attention_backward_kernels

import triton

CANDIDATES = toy(
    [(128, 32, 8, 3), (128, 64, 8, 2), (128, 32, 8, 2), (128, 32, 4, 3), (64, 32, 4, 3), (64, 64, 4, 2), (64, 32, 8, 3),
     (128, 16, 8, 3), (64, 16, 4, 3), (64, 128, 4, 2), (64, 128, 8, 2), (64, 64, 8, 3),
     (64, 64, 4, 2, True), (64, 32, 4, 3, True), (128, 64, 8, 2, True), (128, 32, 8, 3, True)],
    [(16, 16, 4, 1), (32, 16, 4, 1), (16, 16, 4, 1, True)],
)  # fmt: skip
SHAPES = toy([(4, 32, 8, n, 128, causal) for n in (2048, 4096) for causal in (False, True)], [(1, 4, 2, 40, 16, True)])
DTYPE = toy(torch.bfloat16, torch.float32)

if len(sys.argv) > 2 and sys.argv[2] == "d64":
    SHAPES = toy([(4, 32, 8, 4096, 64, causal) for causal in (False, True)], [(1, 4, 2, 40, 32, True)])
    CANDIDATES = toy([(64, 64, 4, 2), (64, 64, 4, 3), (128, 64, 4, 2), (128, 64, 8, 2), (128, 32, 4, 3), (128, 32, 8, 3),
                      (128, 128, 8, 2), (64, 64, 4, 2, True), (128, 64, 8, 2, True)],
                     [(32, 16, 4, 1), (16, 16, 4, 1, True)])  # fmt: skip
elif len(sys.argv) > 2 and sys.argv[2] != "all":
    sys.exit(f"mode {sys.argv[2]!r}: all (default) or d64")


def sdpa_step(q, k, v, do, causal, backend=None):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(getattr(SDPBackend, backend or "MATH")):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
        return torch.autograd.grad(o, (q, k, v), do)


def error(got, ref) -> float:
    return max(((g.float() - r).abs().max() / r.abs().max()).item() for g, r in zip(got, ref))


def registers() -> list:
    """Registers, spills, shared bytes and tiles of every compiled backward kernel in Triton's cache."""
    out = []
    for name in ("_bwd_preprocess_kernel", "_bwd_dkdv_kernel", "_bwd_dq_kernel"):
        kernel = getattr(attention_backward_kernels, name)
        for entry in getattr(kernel, "device_caches", {}).values():
            cache = entry[0] if isinstance(entry, tuple) else entry
            for compiled in cache.values():
                compiled._init_handles()
                consts = {k if isinstance(k, str) else str(k): v for k, v in dict(getattr(compiled, "constants", {}) or {}).items()}
                out.append({"kernel": name, "n_regs": compiled.n_regs, "n_spills": compiled.n_spills,
                            "shared": compiled.metadata.shared, "num_warps": compiled.metadata.num_warps,
                            "num_stages": compiled.metadata.num_stages,
                            "tiles": {k: v for k, v in consts.items() if "BLOCK" in k or k == "CAUSAL"}})  # fmt: skip
    return out


def kernel_times(call, calls: int = 5) -> dict:
    """Mean device time of each CUDA kernel one ``call()`` launches, µs (``torch.profiler``)."""
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    return {e.key: e.device_time_total / calls for e in prof.key_averages() if e.device_time_total > 0}


def rows_for(b, hq, hkv, n, d, causal) -> list:
    q = torch.randn(b, hq, n, d, device=DEVICE, dtype=DTYPE, requires_grad=True)
    k, v = (torch.randn(b, hkv, n, d, device=DEVICE, dtype=DTYPE, requires_grad=True) for _ in range(2))
    do = torch.randn(b, hq, n, d, device=DEVICE, dtype=DTYPE)
    ref = sdpa_step(*(t.detach().float().requires_grad_() for t in (q, k, v)), do.float(), causal)
    scale = d**-0.5
    o, lse = attention.flash_attention_fwd(q.detach(), k.detach(), v.detach(), causal, scale, attention.plan(q.shape, k.shape, q.dtype, q.device))
    flops = 2.5 * 4 * b * hq * d * (n * (n + 1) // 2 if causal else n * n)
    base = {"shape": [b, hq, hkv, n, d], "causal": causal, "picked": list(attention_backward.plan(d, q.dtype, q.device))}
    rows = []
    for backend in toy(("FLASH_ATTENTION", "CUDNN_ATTENTION"), ()):
        row = {**base, "impl": f"sdpa-{backend}-step"}
        try:
            row["err"] = error(sdpa_step(q, k, v, do, causal, backend), ref)
            row["device_us"] = smoke.device_us(lambda: sdpa_step(q, k, v, do, causal, backend))
            row["tflops_device_step"] = flops * 3.5 / 2.5 / row["device_us"] / 1e6
        except RuntimeError as exc:
            row["error"] = str(exc)[:200]
        rows.append(row)
        print(row, flush=True)
    for plan in CANDIDATES:
        p = attention_backward.BackwardPlan(*plan)
        row = {**base, "impl": "tritonforge-bwd", "plan": list(plan)}

        def call():
            return attention_backward.flash_attention_bwd(do, None, q.detach(), k.detach(), v.detach(), o, lse, causal, scale, p)

        try:
            row["err"] = error(call(), ref)
            if row["err"] < 2e-2:
                row["device_us"] = smoke.device_us(call)
                row["do_bench_us"] = smoke.do_bench_us(call)
                row["tflops_device"] = flops / row["device_us"] / 1e6
        except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory: reported, not fatal
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        rows.append(row)
        print(row, flush=True)
    if DEVICE == "cuda":
        rows.append({**base, "impl": "tritonforge-bwd-kernels", "kernels_us": kernel_times(
            lambda: attention_backward.flash_attention_bwd(do, None, q.detach(), k.detach(), v.detach(), o, lse, causal, scale,
                                                           attention_backward.plan(d, q.dtype, q.device)))})  # fmt: skip
        print(rows[-1], flush=True)
    fwd_plan = attention.plan(q.shape, k.shape, q.dtype, q.device)
    fwd_us = smoke.device_us(lambda: attention.flash_attention_fwd(q.detach(), k.detach(), v.detach(), causal, scale, fwd_plan))
    rows.append({**base, "impl": "tritonforge-fwd", "device_us": fwd_us, "tflops_device": flops / 2.5 / fwd_us / 1e6})
    print(rows[-1], flush=True)
    return rows


rows = [row for shape in SHAPES for row in rows_for(*shape)]
with open(sys.argv[1], "w") as f:
    json.dump({"device": smoke.device_name(), "torch": torch.__version__, "triton": triton.__version__, "rows": rows,
               "kernels": registers() if DEVICE == "cuda" else [], **smoke.meta()}, f, indent=1)  # fmt: skip
print("wrote", sys.argv[1])
