"""FlashAttention's forward on Hopper: the Hopper kernel (``tritonforge.ops.gpu.attention``: tiles
through tensor descriptors, a pipelined and optionally warp-specialized loop) under each candidate
plan, beside the portable kernel's plan, SDPA's flash and cuDNN backends, at the issue's shapes.

Prefill, bf16, 32 query heads over 8 KV heads (Llama-3-8B), D = 128 (and D = 64 at one shape),
N (B) = 1024 (16), 4096 (4), 16384 (1), causal and not. Each candidate (strategy, BLOCK_M,
BLOCK_N, num_warps, num_stages), strategy "hopper" or "hopper-ws" (warp-specialized), runs
``attention.flash_attention_fwd`` with that plan; its output is checked against the float64
oracle of the benchmark suite (a wrong plan is reported, not timed), then timed by device time
(CUDA-graph replay) and do_bench; TFLOP/s count causal as half the FLOPs. A plan that fails to
compile is a result too (its error is recorded).

Mode ``d64`` (a second argument): at D = 64, where the Hopper kernel led the portable kernel's
default tile, the portable kernel under the Hopper kernel's best tiles too (which one wins, the
tile or the copy engine?).

Usage (CUDA GPU, repository root): python benchmarks/experiments/attention/attention_hopper.py OUT.json [all|d64]
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/attention/attention_hopper.py OUT.json
(the toy run times only the portable plan: the Hopper kernel needs an sm_90 GPU)
"""

import json
import sys

import torch

import smoke  # first: imports tritonforge before triton
from smoke import DEVICE, toy
from tritonforge.bench.suites import attention_oracle
from tritonforge.ops import attention, attention_prefill
from tritonforge.ops.gpu import attention as gpu_attention

import triton

HOPPER = toy(
    [("hopper", 128, 128, 8, 2), ("hopper", 128, 128, 8, 3), ("hopper", 128, 64, 8, 3), ("hopper", 128, 64, 4, 3),
     ("hopper", 128, 64, 4, 4), ("hopper", 64, 128, 4, 2), ("hopper", 128, 128, 4, 2), ("hopper", 64, 64, 4, 4),
     ("hopper-ws", 128, 128, 8, 2), ("hopper-ws", 128, 128, 8, 3), ("hopper-ws", 128, 64, 8, 3), ("hopper-ws", 128, 64, 4, 3),
     ("hopper-ws", 128, 128, 4, 2)],
    [],
)  # fmt: skip
PORTABLE = [attention_prefill.Plan("prefill", *tile) for tile in toy([(128, 128, 8, 3)], [(16, 16, 4, 1)])]
SHAPES = toy([(16, 32, 8, 1024, 128), (4, 32, 8, 4096, 128), (1, 32, 8, 16384, 128), (4, 32, 8, 4096, 64)], [(1, 4, 2, 40, 16)])
DTYPE = toy(torch.bfloat16, torch.float32)

if len(sys.argv) > 2 and sys.argv[2] == "d64":  # the second question: at D = 64, the Hopper kernel or the portable one's tile?
    SHAPES = toy([(4, 32, 8, 4096, 64)], [(1, 4, 2, 40, 16)])
    PORTABLE = [attention_prefill.Plan("prefill", *tile) for tile in toy(
        [(128, 128, 8, 3), (64, 128, 4, 2), (64, 128, 4, 3), (128, 64, 4, 3), (128, 128, 4, 2), (64, 64, 4, 3)], [(16, 16, 4, 1)])]
    HOPPER = toy([("hopper", 64, 128, 4, 2), ("hopper", 64, 128, 4, 3), ("hopper", 128, 64, 4, 3), ("hopper", 128, 128, 4, 3)], [])
elif len(sys.argv) > 2:
    sys.exit(f"mode {sys.argv[2]!r}: all (default) or d64")


def sdpa(q, k, v, causal, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(getattr(SDPBackend, backend)):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])


def timed(row: dict, call, ref, flops) -> dict:
    try:
        out = call()
        row["err"] = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        if row["err"] < 2e-2:
            row["device_us"] = smoke.device_us(call)
            row["do_bench_us"] = smoke.do_bench_us(call)
            row["tflops_device"] = flops / row["device_us"] / 1e6
    except Exception as exc:  # noqa: BLE001 - a plan that does not compile is a result
        row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else ''}"
    print(row, flush=True)
    return row


def rows_for(b, hq, hkv, n, d, causal) -> list:
    q = torch.randn(b, hq, n, d, device=DEVICE, dtype=DTYPE)
    k, v = (torch.randn(b, hkv, n, d, device=DEVICE, dtype=DTYPE) for _ in range(2))
    group = hq // hkv
    ref = attention_oracle(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), causal)
    flops = 4 * b * hq * d * n * n / (2 if causal else 1)
    base = {"shape": [b, hq, hkv, n, d], "causal": causal, "picked": list(attention.plan(q.shape, k.shape, q.dtype, q.device))}
    rows = [timed({**base, "impl": f"sdpa-{backend}"}, lambda backend=backend: sdpa(q, k, v, causal, backend), ref, flops)
            for backend in toy(("FLASH_ATTENTION", "CUDNN_ATTENTION"), ())]  # fmt: skip
    plans = PORTABLE + [attention_prefill.Plan(*tile) for tile in HOPPER if d in gpu_attention.HEAD_DIMS]
    for p in plans:
        rows.append(timed({**base, "impl": "tritonforge", "plan": list(p)},
                          lambda p=p: attention.flash_attention_fwd(q, k, v, causal, d**-0.5, p)[0], ref, flops))  # fmt: skip
    return rows


rows = [row for shape in SHAPES for causal in (False, True) for row in rows_for(*shape, causal)]
with open(sys.argv[1], "w") as f:
    json.dump({"device": smoke.device_name(), "torch": torch.__version__, "triton": triton.__version__, "rows": rows, **smoke.meta()}, f, indent=1)
print("wrote", sys.argv[1])
