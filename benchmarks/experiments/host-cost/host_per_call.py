"""What one eager call costs the host: every public op at decode sizes beside the native op it
replaces, as a Hugging Face ``generate`` without a static cache calls them (one after another, no
synchronization between calls).

``wall_us``: ``CALLS`` calls in a Python loop, then one ``torch.cuda.synchronize``, divided by
``CALLS`` (after a warm-up): at these sizes the GPU finishes each kernel before the host has
launched the next, so this is the host's time per call; the median of ``ROUNDS`` such loops, the
variants of a row taking turns loop by loop. ``device_us``: the same call replayed
from a CUDA graph (``bench.device_time_us``), no host. Each op is timed twice in the same run:
with the remembered launches' direct launch of the compiled kernel (``launches.BoundLaunch``, the
default) and with ``launches.DIRECT_LAUNCHES = False`` (every launch through ``kernel[grid]``,
Triton's ``JITFunction.run``), so that the two compare on one host.

``breakdown`` rows take one eager ``rms_norm`` call (1 x 4096) and one decode ``flash_attention``
call apart: each piece of the call timed alone in the same loop (the signature, the remembered
lookup's autograd test, the output allocation, the kernel's launch through ``kernel[grid]`` and
through the compiled kernel's own launcher, a kernel with one pointer argument the same two ways:
Triton's floor), beside the whole call and the native op.

Usage (CUDA GPU, repository root): python benchmarks/experiments/host-cost/host_per_call.py OUT.json
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/host-cost/host_per_call.py OUT.json
"""

import statistics
import sys
import time

import torch
import torch.nn.functional as F

import smoke  # first: imports tritonforge before triton
import tritonforge as tfg
from smoke import DEVICE, toy
from tritonforge import bench, launches

import triton  # after tritonforge (smoke imports it first)
import triton.language as tl

CALLS = toy(300, 3)
ROUNDS = toy(11, 1)
DTYPE = toy(torch.bfloat16, torch.float32)


def loop_us(call) -> float:
    """Wall time per call of ``CALLS`` calls in a loop, then one synchronize, µs."""
    smoke.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        call()
    smoke.synchronize()
    return (time.perf_counter() - start) / CALLS * 1e6


def wall_us(calls: dict) -> dict:
    """For each named call, the median over ``ROUNDS`` rounds of :func:`loop_us`, the calls taking
    turns round by round (a host's drift during the run falls on all of them alike)."""
    for call in calls.values():
        for _ in range(toy(50, 1)):
            call()
    times = {name: [] for name in calls}
    for _ in range(ROUNDS):
        for name, call in calls.items():
            times[name].append(loop_us(call))
    return {name: statistics.median(t) for name, t in times.items()}


def cases():
    """(name, shape, ours, native): decode-sized calls (rows = tokens of one step)."""
    d = toy(4096, 64)
    f = toy(14336, 96)
    heads, kv_heads, hd = toy((32, 8, 128), (4, 2, 16))
    keys = toy(4096, 40)

    def t(*shape):
        return torch.randn(*shape, device=DEVICE, dtype=DTYPE)

    x1, x64, w = t(1, d), t(64, d), torch.ones(d, device=DEVICE, dtype=DTYPE)
    g, u = t(1, f), t(1, f)
    s = t(1, toy(131072, 256))
    xr, cos1, sin1 = t(1, heads, 1, hd), t(1, hd), t(1, hd)
    xa, ya = t(1, d), t(1, d)
    q, k, v = t(1, heads, 1, hd), t(1, kv_heads, keys, hd), t(1, kv_heads, keys, hd)
    qr, kr = t(1, heads, 1, hd), t(1, kv_heads, 1, hd)
    cos, sin = t(1, hd), t(1, hd)
    xm, w_gate, w_up = t(1, d), t(f, d) / d**0.5, t(f, d) / d**0.5  # nn.Linear weights [out, in]
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, rotate_half

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    return [
        ("rms_norm", "1x4096", lambda: tfg.rms_norm(x1, w, 1e-6), lambda: F.rms_norm(x1, (d,), w, 1e-6)),
        ("rms_norm", "64x4096", lambda: tfg.rms_norm(x64, w, 1e-6), lambda: F.rms_norm(x64, (d,), w, 1e-6)),
        ("swiglu", "1x14336", lambda: tfg.swiglu(g, u), lambda: F.silu(g) * u),
        ("softmax", "1x131072", lambda: tfg.softmax(s), lambda: torch.softmax(s, -1)),
        ("rope_qk", "q+k 1 token", lambda: tfg.rope_qk(qr, kr, cos[None], sin[None]),
         lambda: apply_rotary_pos_emb(qr, kr, cos[None], sin[None])),
        ("rope", "q 1 token", lambda: tfg.rope(xr, cos1, sin1), lambda: xr * cos1 + rotate_half(xr) * sin1),
        ("axpy", f"1x{d}", lambda: tfg.axpy(0.5, xa, ya), lambda: torch.add(ya, xa, alpha=0.5)),
        ("flash_attention", f"decode B=1, {keys} keys", lambda: tfg.flash_attention(q, k, v), sdpa),
        ("swiglu_mlp_front", f"1x{d} -> {f}", lambda: tfg.swiglu_mlp_front(xm, w_gate.T, w_up.T),
         lambda: F.silu(F.linear(xm, w_gate)) * F.linear(xm, w_up)),
    ]  # fmt: skip


def with_direct_launches(enabled: bool, call):
    def switched():
        launches.DIRECT_LAUNCHES = enabled
        try:
            return call()
        finally:
            launches.DIRECT_LAUNCHES = True

    return switched if not enabled else call


def breakdown() -> list:
    """The pieces of one eager rms_norm call and one decode flash_attention call, each timed alone."""
    from tritonforge.ops import attention, rmsnorm

    d = toy(4096, 64)
    x, w = torch.randn(1, d, device=DEVICE, dtype=DTYPE), torch.randn(d, device=DEVICE, dtype=DTYPE)
    (hq, hkv, hd), keys = toy((32, 8, 128), (4, 2, 16)), toy(4096, 40)
    q = torch.randn(1, hq, 1, hd, device=DEVICE, dtype=DTYPE)
    k, v = (torch.randn(1, hkv, keys, hd, device=DEVICE, dtype=DTYPE) for _ in range(2))
    tfg.rms_norm(x, w, 1e-6)
    tfg.rms_norm(x, w, 1e-6)
    key = launches.signature("rms_norm", (x, w), (1e-6,))
    remembered = launches.remembered(key)
    y = torch.empty_like(x)
    block_n, num_warps, one_pass = rmsnorm.fwd_config(1, d, x.dtype)
    eps_hi, eps_lo = rmsnorm.split_float(1e-6)
    flags = dict(BLOCK_N=block_n, ROW_FITS=one_pass, ACC_DTYPE=rmsnorm.acc_dtype(x.dtype),
                 ROUND_BF16=rmsnorm.round_bf16_by_hand(x.dtype), STORE_RSTD=False, num_warps=num_warps)  # fmt: skip
    args = (x, w, y, y, d, d, d, eps_hi, eps_lo)
    jit = rmsnorm._rms_norm_fwd_kernel[(1,)]
    compiled = jit(*args, **flags)
    tail = [flags[name] for name in rmsnorm._rms_norm_fwd_kernel.arg_names[len(args):]]
    parts = {
        "whole call (remembered, direct launch)": lambda: tfg.rms_norm(x, w, 1e-6),
        "whole call (remembered, Triton's launch)": with_direct_launches(False, lambda: tfg.rms_norm(x, w, 1e-6)),
        "launches.signature": lambda: launches.signature("rms_norm", (x, w), (1e-6,)),
        "launches.plain_inference": lambda: launches.plain_inference(x, w),
        "torch.empty of y": lambda: torch.empty(1, d, device=DEVICE, dtype=DTYPE),
        "kernel[grid](...): Triton's launch": lambda: jit(*args, **flags),
        "native F.rms_norm": lambda: torch.nn.functional.rms_norm(x, (d,), w, 1e-6),
    }
    if remembered is not None:
        parts["remembered launch alone (allocation + launch)"] = lambda: remembered(x, w)
    if compiled is not None:  # a GPU: the compiled kernel's own launcher, and Triton's floor
        runner = compiled[(1, 1, 1)]
        parts["CompiledKernel[grid](...): the compiled kernel's launcher"] = lambda: runner(*args, *tail)
        one = _touch_kernel[(1,)](y)
        one_runner = one[(1, 1, 1)]
        parts["one-pointer kernel: kernel[grid](...)"] = lambda: _touch_kernel[(1,)](y)
        parts["one-pointer kernel: CompiledKernel[grid](...)"] = lambda: one_runner(y)
    rows = [{"op": "rms_norm", "part": name, "wall_us": us} for name, us in wall_us(parts).items()]
    tfg.flash_attention(q, k, v)
    tfg.flash_attention(q, k, v)
    parts = {
        "whole call (remembered, direct launch)": lambda: tfg.flash_attention(q, k, v),
        "whole call (remembered, Triton's launch)": with_direct_launches(False, lambda: tfg.flash_attention(q, k, v)),
        "launches.signature": lambda: launches.signature("flash_attention", (q, k, v), (False, None, False, "public")),
        "plan (cached)": lambda: attention.plan(q.shape, k.shape, q.dtype, q.device),
        "torch.empty of O and lse": lambda: (torch.empty_like(q), torch.empty(1, hq, 1, device=DEVICE)),
        "native SDPA": lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
    }
    rows += [{"op": "flash_attention", "part": name, "wall_us": us} for name, us in wall_us(parts).items()]
    for row in rows:
        print(row, flush=True)
    return rows


@triton.jit
def _touch_kernel(ptr):
    tl.store(ptr, tl.load(ptr))


def main(out: str) -> int:
    rows = []
    with torch.no_grad():
        for name, shape, ours, native in cases():
            row = {"op": name, "shape": shape, "dtype": str(DTYPE).removeprefix("torch.")}
            impls = {"tritonforge": ours, "tritonforge_triton_launch": with_direct_launches(False, ours), "native": native}
            try:
                row.update({f"{impl}_wall_us": us for impl, us in wall_us(impls).items()})
                row["tritonforge_device_us"], row["native_device_us"] = smoke.device_us(ours), smoke.device_us(native)
            except Exception as exc:  # noqa: BLE001 - reported, not fatal
                row["error"] = bench.describe_exception(exc)
            if "tritonforge_wall_us" in row and "native_wall_us" in row:
                row["wall_ratio"] = row["tritonforge_wall_us"] / row["native_wall_us"]
            print(row, flush=True)
            rows.append(row)
        rows += breakdown()
    data = {
        "metadata": {"device": smoke.device_name(), "torch": torch.__version__, "triton": tfg.environment().triton_version,
                     "command": f"python benchmarks/experiments/host-cost/host_per_call.py {out}", "calls": CALLS, "date": None,
                     "git_commit": None},
        "rows": rows,
        **smoke.meta(),
    }  # fmt: skip
    smoke.write_record(out, data)
    print(f"wrote {out}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
