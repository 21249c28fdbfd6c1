"""What one eager call costs the host: every public op at decode sizes beside the native op it
replaces, as a Hugging Face ``generate`` without a static cache calls them (one after another, no
synchronization between calls).

``wall_us``: ``CALLS`` calls in a Python loop, then one ``torch.cuda.synchronize``, divided by
``CALLS`` (after a warm-up): at these sizes the GPU finishes each kernel before the host has
launched the next, so this is the host's time per call. ``device_us``: the same call replayed
from a CUDA graph (``bench.device_time_us``), no host.

Usage (CUDA GPU, repository root): python benchmarks/experiments/host_per_call.py OUT.json
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/host_per_call.py OUT.json
"""

import sys
import time

import torch
import torch.nn.functional as F

import smoke  # first: imports tritonforge before triton
import tritonforge as tfg
from smoke import DEVICE, toy
from tritonforge import bench

CALLS = toy(2000, 5)
DTYPE = toy(torch.bfloat16, torch.float32)


def wall_us(call) -> float:
    for _ in range(toy(50, 1)):
        call()
    smoke.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        call()
    smoke.synchronize()
    return (time.perf_counter() - start) / CALLS * 1e6


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
    q, k, v = t(1, heads, 1, hd), t(1, kv_heads, keys, hd), t(1, kv_heads, keys, hd)
    qr, kr = t(1, heads, 1, hd), t(1, kv_heads, 1, hd)
    cos, sin = t(1, hd), t(1, hd)
    xm, w_gate, w_up = t(1, d), t(f, d) / d**0.5, t(f, d) / d**0.5  # nn.Linear weights [out, in]
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    return [
        ("rms_norm", "1x4096", lambda: tfg.rms_norm(x1, w, 1e-6), lambda: F.rms_norm(x1, (d,), w, 1e-6)),
        ("rms_norm", "64x4096", lambda: tfg.rms_norm(x64, w, 1e-6), lambda: F.rms_norm(x64, (d,), w, 1e-6)),
        ("swiglu", "1x14336", lambda: tfg.swiglu(g, u), lambda: F.silu(g) * u),
        ("softmax", "1x131072", lambda: tfg.softmax(s), lambda: torch.softmax(s, -1)),
        ("rope_qk", "q+k 1 token", lambda: tfg.rope_qk(qr, kr, cos[None], sin[None]),
         lambda: apply_rotary_pos_emb(qr, kr, cos[None], sin[None])),
        ("flash_attention", f"decode B=1, {keys} keys", lambda: tfg.flash_attention(q, k, v), sdpa),
        ("swiglu_mlp_front", f"1x{d} -> {f}", lambda: tfg.swiglu_mlp_front(xm, w_gate.T, w_up.T),
         lambda: F.silu(F.linear(xm, w_gate)) * F.linear(xm, w_up)),
    ]  # fmt: skip


def main(out: str) -> int:
    rows = []
    with torch.no_grad():
        for name, shape, ours, native in cases():
            row = {"op": name, "shape": shape, "dtype": str(DTYPE).removeprefix("torch.")}
            for impl, call in (("tritonforge", ours), ("native", native)):
                try:
                    row[f"{impl}_wall_us"] = wall_us(call)
                    row[f"{impl}_device_us"] = smoke.device_us(call)
                except Exception as exc:  # noqa: BLE001 - reported, not fatal
                    row[f"{impl}_error"] = bench.describe_exception(exc)
            if "tritonforge_wall_us" in row and "native_wall_us" in row:
                row["wall_ratio"] = row["tritonforge_wall_us"] / row["native_wall_us"]
            print(row, flush=True)
            rows.append(row)
    data = {
        "metadata": {"device": smoke.device_name(), "torch": torch.__version__, "triton": tfg.environment().triton_version,
                     "command": f"python benchmarks/experiments/host_per_call.py {out}", "calls": CALLS, "date": None,
                     "git_commit": None},
        "rows": rows,
        **smoke.meta(),
    }  # fmt: skip
    smoke.write_record(out, data)
    print(f"wrote {out}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
