"""FlashAttention's tiles: the package's forward under other plans than ``attention.plan`` picks,
beside SDPA's flash and cuDNN backends at the same shapes, to choose ``PREFILL_TILES`` and the
decode tile/split heuristics from measurements.

Prefill (B = 4, H = 32, D = 128, bf16, N = 2048 and 8192, causal and not): each (BLOCK_M, BLOCK_N,
num_warps, num_stages) in PREFILL_CANDIDATES; TFLOP/s from device time (CUDA-graph replay) and
do_bench. Decode (one query per head, 32 over 8 KV heads, D = 128, bf16; B = 1 and 32, Nk = 4096
and 32768): each (BLOCK_N, num_warps, num_stages) with splits scaled by SPLIT_FACTORS from what the
plan picks; KV bytes per device second as a fraction of the copy bandwidth. Every candidate's
output is checked against SDPA's math backend in float32 first; a wrong one is reported, not timed.
Each plan reaches the launcher through ``attention.flash_attention_fwd(q, k, v, causal, scale, plan)``.

Mode ``decode-wide`` (a second argument): decode only, at B = 64 (Nk = 1K, 4K, 32K; 512 programs of one
split where cuDNN led) and B = 8 / 1 at the shapes where the plan came within 0.93-0.94 of cuDNN,
with more tiles and stages, and split counts 1-4 times the plan's.

Usage (CUDA GPU, repository root): python benchmarks/experiments/attention/attention_tiles.py OUT.json [all|decode-wide]
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/attention/attention_tiles.py OUT.json
"""

import json
import sys

import torch

import smoke  # first: imports tritonforge before triton
from smoke import DEVICE, toy
from tritonforge.ops import attention, attention_decode, attention_prefill

import triton

PREFILL_CANDIDATES = toy(
    [(128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 3), (128, 32, 4, 3), (128, 64, 4, 3), (64, 64, 4, 3), (64, 128, 4, 3),
     (128, 128, 8, 2), (256, 64, 8, 3)],
    [(16, 16, 4, 1), (32, 16, 4, 1)],
)  # fmt: skip
DECODE_CANDIDATES = toy([(64, 4, 3), (128, 4, 3), (64, 4, 4), (128, 8, 3), (32, 4, 4), (256, 8, 2)], [(16, 4, 1)])
SPLIT_FACTORS = toy((0.5, 1, 2, 4), (1, 2))
PREFILL = toy([(4, 32, n, 128, causal) for n in (2048, 8192) for causal in (False, True)], [(1, 2, 40, 16, True)])
DECODE = toy([(b, 32, 8, nk, 128) for b in (1, 32) for nk in (4096, 32768)], [(1, 4, 2, 70, 16)])
DTYPE = toy(torch.bfloat16, torch.float32)

MODE = sys.argv[2] if len(sys.argv) > 2 else "all"
if MODE == "decode-wide":  # the second question (2026-12-01): decode where the plan's one split lost to cuDNN (B = 64),
    # and the few small shapes at 0.93-0.94 of it; more tiles and stages, split counts 1-4 times the plan's
    PREFILL = []
    DECODE = toy([(64, 32, 8, nk, 128) for nk in (1024, 4096, 32768)] + [(8, 32, 8, 1024, 128), (8, 32, 8, 32768, 128), (1, 32, 8, 8192, 128)],
                 [(3, 4, 2, 70, 16)])  # fmt: skip
    DECODE_CANDIDATES = toy([(64, 4, 3), (64, 4, 2), (64, 4, 4), (32, 4, 3), (128, 4, 3), (128, 8, 3), (64, 8, 3), (128, 4, 2)],
                            [(16, 4, 1), (32, 4, 1)])  # fmt: skip
    SPLIT_FACTORS = toy((1, 2, 3, 4), (1, 2))
elif MODE != "all":
    sys.exit(f"mode {MODE!r}: all (default) or decode-wide")


def sdpa(q, k, v, causal, backend=None):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gqa = q.shape[1] != k.shape[1]
    with sdpa_kernel(getattr(SDPBackend, backend or "MATH")):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)


def error(out, ref) -> float:
    return ((out.float() - ref).abs().max() / ref.abs().max()).item()


def measure(call, nbytes=None, flops=None) -> dict:
    row = {"device_us": smoke.device_us(call), "do_bench_us": smoke.do_bench_us(call)}
    if flops:
        row["tflops_device"] = flops / row["device_us"] / 1e6
    if nbytes:
        row["gbps_device"] = nbytes / row["device_us"] / 1e3
    return row


def sdpa_row(base: dict, q, k, v, causal, backend, ref, **cost) -> dict:
    try:
        return {**base, "impl": f"sdpa-{backend}", "err": error(sdpa(q, k, v, causal, backend), ref),
                **measure(lambda: sdpa(q, k, v, causal, backend), **cost)}  # fmt: skip
    except RuntimeError as exc:  # e.g. a backend that refuses this shape or GPU
        return {**base, "impl": f"sdpa-{backend}", "error": str(exc)[:200]}


def plan_row(base: dict, q, k, v, causal, plan, ref, **cost) -> dict:
    row = {**base, "impl": "tritonforge", "plan": list(plan)}

    def call():
        return attention.flash_attention_fwd(q, k, v, causal, q.shape[-1] ** -0.5, plan)[0]

    try:
        row["err"] = error(call(), ref)
        if row["err"] < 2e-2:
            row.update(measure(call, **cost))
    except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory: reported, not fatal
        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return row


def prefill_rows(b, h, n, d, causal) -> list:
    q, k, v = (torch.randn(b, h, n, d, device=DEVICE, dtype=DTYPE) for _ in range(3))
    ref = sdpa(q.float(), k.float(), v.float(), causal)
    flops = 4 * b * h * d * (n * (n + 1) // 2 if causal else n * n)
    base = {"case": "prefill", "shape": [b, h, n, d], "causal": causal}
    rows = [sdpa_row(base, q, k, v, causal, backend, ref, flops=flops) for backend in toy(("FLASH_ATTENTION", "CUDNN_ATTENTION"), ())]
    for block_m, block_n, warps, stages in PREFILL_CANDIDATES:
        rows.append(plan_row(base, q, k, v, causal, attention_prefill.Plan("prefill", block_m, block_n, warps, stages), ref, flops=flops))
        print(rows[-1], flush=True)
    return rows


def decode_rows(b, hq, hkv, nk, d, copy_gbps) -> list:
    q = torch.randn(b, hq, 1, d, device=DEVICE, dtype=DTYPE)
    k, v = (torch.randn(b, hkv, nk, d, device=DEVICE, dtype=DTYPE) for _ in range(2))
    ref = sdpa(q.float(), k.float(), v.float(), False)
    nbytes = 2 * b * hkv * nk * d * q.element_size()
    picked = attention.plan(q.shape, k.shape, q.dtype, q.device)
    base = {"case": "decode", "shape": [b, hq, hkv, nk, d], "picked": list(picked)}
    rows = [sdpa_row(base, q, k, v, False, backend, ref, nbytes=nbytes) for backend in toy(("FLASH_ATTENTION", "CUDNN_ATTENTION"), ())]
    for block_n, warps, stages in DECODE_CANDIDATES:
        for factor in SPLIT_FACTORS:
            blocks = triton.cdiv(nk, block_n)
            splits = max(1, min(attention_decode.MAX_SPLITS, blocks, round(picked.splits * factor)))
            chunk = triton.cdiv(blocks, splits) * block_n
            plan = attention_prefill.Plan("decode", picked.block_m, block_n, warps, stages, triton.cdiv(nk, chunk), chunk)
            rows.append(plan_row(base, q, k, v, False, plan, ref, nbytes=nbytes))
            print(rows[-1], flush=True)
    for row in rows:
        if "gbps_device" in row:
            row["fraction_of_copy"] = row["gbps_device"] / copy_gbps
    return rows


copy = smoke.copy_ceiling()
print("copy GB/s", round(copy["gbps"], 1), flush=True)
rows = [row for shape in PREFILL for row in prefill_rows(*shape)]
rows += [row for shape in DECODE for row in decode_rows(*shape, copy["gbps"])]
with open(sys.argv[1], "w") as f:
    json.dump({"device": smoke.device_name(), "torch": torch.__version__, "triton": triton.__version__, "copy_gbps": copy["gbps"],
               "rows": rows, **smoke.meta()}, f, indent=1)  # fmt: skip
print("wrote", sys.argv[1])
