"""Compile the FlashAttention kernels for real GPUs without one: the tiles ``attention.plan`` picks
for an H200 (sm_90, 227 KB of shared memory, 132 SMs) and a T4 (sm_75, 64 KB, 40 SMs), each dtype
the device runs, head dims 64, 80, 128 and 256, causal and not, prefill and decode; and the Hopper
prefill kernel (``tritonforge.ops.gpu.attention``) for sm_90 with the plan picked there.

For each it prints the shared memory the compiled kernel asks for beside the device's limit and
beside the plan's own estimate (``attention_prefill._tile_bytes``); a compile failure prints the
compiler's last line and makes the exit status 1. Compile-only: nothing runs, nothing is timed.

Usage (any machine with Triton's NVIDIA backend, e.g. the book's CPU venv)::

    TRITON_INTERPRET=0 python scripts/attention_compile_probe.py [--quick]

``tests/ops/test_attention.py`` runs it with ``--quick`` (one case per kernel and device).
"""

from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "0"  # compile, never interpret (before tritonforge imports triton)

import torch  # noqa: E402

from tritonforge.ops import attention, attention_decode  # noqa: E402
from tritonforge.ops import attention_prefill as prefill  # noqa: E402
from tritonforge.ops.gpu import attention as hopper  # noqa: E402

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

DEVICES = {"H200 (sm_90)": (90, 232448, 132, ("fp16", "bf16", "fp32")), "T4 (sm_75)": (75, 65536, 40, ("fp16",))}
TORCH_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
STRIDES = ["q_sb", "q_sh", "q_sn", "k_sb", "k_sh", "k_sn", "v_sb", "v_sh", "v_sn", "o_sb", "o_sh", "o_sn"]


IDS = {"kid_ptr": "*i32", "qid_ptr": "*i32", "kid_sb": "i32", "qid_sb": "i32"}  # key and query ids (padding, packing)


def _compile(kernel, signature: dict, constexprs: dict, arch: int, plan: prefill.Plan):
    source = ASTSource(fn=kernel, signature={**signature, **dict.fromkeys(constexprs, "constexpr")}, constexprs=constexprs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": plan.num_warps, "num_stages": plan.num_stages})


def _flags(dtype: str, head_d: int, D: int, p: prefill.Plan, causal: bool) -> dict:
    return dict(HAS_LENS=False, HAS_IDS=False, HAS_QIDS=False, CAUSAL=causal, BLOCK_M=p.block_m, BLOCK_N=p.block_n,
                HEAD_D=head_d, EVEN_D=head_d == D, UPCAST=False,
                ROUND_BF16=False, IEEE_DOT=dtype == "fp32", ACC_DTYPE=triton.language.float32)  # fmt: skip


def compile_prefill(dtype: str, D: int, causal: bool, arch: int, shared: int, sms: int):
    p = attention._plan_cached(4, 32, 4096, D, 32, 4096, TORCH_DTYPE[dtype].itemsize, shared, sms)
    head_d = max(16, triton.next_power_of_2(D))
    ptr = f"*{dtype}"
    signature = {"q_ptr": ptr, "k_ptr": ptr, "v_ptr": ptr, "o_ptr": ptr, "lse_ptr": "*fp32", "kv_lens_ptr": "*i32",
                 **IDS, **dict.fromkeys(STRIDES, "i32"), "Hq": "i32", "GROUP": "i32", "Nq": "i32", "Nk": "i32", "D": "i32",
                 "qk_scale": "fp32", "qk_scale_lo": "fp32"}  # fmt: skip
    return p, _compile(prefill._flash_attn_fwd_kernel, signature, _flags(dtype, head_d, D, p, causal), arch, p)


def compile_hopper(dtype: str, D: int, causal: bool):
    """The Hopper kernel (sm_90 only) with the plan ``attention.plan`` picks there, the masks of a
    padded batch compiled in."""
    p = attention._plan_cached(4, 32, 4096, D, 32, 4096, TORCH_DTYPE[dtype].itemsize, 232448, 132, True)
    ptr = f"*{dtype}"
    signature = {"q_ptr": ptr, "k_ptr": ptr, "v_ptr": ptr, "o_ptr": ptr, "lse_ptr": "*fp32", "kv_lens_ptr": "*i32", **IDS,
                 **dict.fromkeys(STRIDES, "i32"), "Hq": "i32", "GROUP": "i32", "Nq": "i32", "Nk": "i32", "qk_scale": "fp32"}  # fmt: skip
    constexprs = dict(HAS_LENS=True, HAS_IDS=True, HAS_QIDS=False, CAUSAL=causal, BLOCK_M=p.block_m, BLOCK_N=p.block_n, HEAD_D=D,
                      STAGES=p.num_stages, WARP_SPECIALIZE=p.strategy == "hopper-ws")  # fmt: skip
    return p, _compile(hopper._flash_attn_fwd_hopper_kernel, signature, constexprs, 90, p)


def compile_decode(dtype: str, D: int, arch: int, shared: int, sms: int):
    p = attention._plan_cached(1, 32, 1, D, 8, 32768, TORCH_DTYPE[dtype].itemsize, shared, sms)
    head_d = max(16, triton.next_power_of_2(D))
    ptr = f"*{dtype}"
    signature = {"q_ptr": ptr, "k_ptr": ptr, "v_ptr": ptr, "o_ptr": "*fp32", "lse_ptr": "*fp32", **dict.fromkeys(STRIDES, "i32"),
                 "kv_lens_ptr": "*i32", **IDS, "Hq": "i32", "Hkv": "i32", "GROUP": "i32", "Nq": "i32", "Nk": "i32", "D": "i32", "chunk": "i32",
                 "qk_scale": "fp32", "qk_scale_lo": "fp32"}  # fmt: skip
    constexprs = {"SPLITS": p.splits, **_flags(dtype, head_d, D, p, False), "HAS_LENS": True, "HAS_IDS": True}  # a padded static cache's decode
    split = _compile(attention_decode._flash_decode_split_kernel, signature, constexprs, arch, p)
    merge_signature = {"part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "o_ptr": ptr, "lse_ptr": "*fp32", "o_sb": "i32", "o_sh": "i32",
                       "o_sn": "i32", "Hq": "i32", "Nq": "i32", "D": "i32"}  # fmt: skip
    merge_constexprs = {"SPLITS": p.splits, "SPLITS_P2": triton.next_power_of_2(p.splits), "HEAD_D": head_d, "ROUND_BF16": False}
    merge = _compile(attention_decode._flash_decode_merge_kernel, merge_signature, merge_constexprs, arch, prefill.Plan("merge", 0, 0, 4, 1))
    return p, split, merge


def main(quick: bool) -> int:
    print(f"triton {triton.__version__}")
    failures = 0
    for device, (arch, shared, sms, dtypes) in DEVICES.items():
        cases = [(dtypes[0], 128, True)] if quick else [(dt, d, c) for dt in dtypes for d in (64, 80, 128, 256) for c in (False, True)]
        for dtype, D, causal in cases:
            name = f"{device} prefill {dtype} D={D} {'causal' if causal else 'full'}"
            try:
                p, kernel = compile_prefill(dtype, D, causal, arch, shared, sms)
            except Exception as exc:  # noqa: BLE001 - the compiler's verdict is the result
                failures += 1
                lines = [line for line in str(exc).splitlines() if line.strip()]
                print(f"FAILS {name}: {type(exc).__name__}: {lines[-1] if lines else ''}")
                continue
            estimate = prefill._tile_bytes(p.block_m, p.block_n, max(16, triton.next_power_of_2(D)), p.num_stages, TORCH_DTYPE[dtype].itemsize)
            print(f"ok    {name}: tile {p.block_m}x{p.block_n} w{p.num_warps} s{p.num_stages}, shared {kernel.metadata.shared} B "
                  f"(estimate {estimate}, limit {shared})")  # fmt: skip
            failures += kernel.metadata.shared > shared
        for dtype, D in [(dtypes[0], 128)] if quick else [(dt, d) for dt in dtypes for d in (64, 128)]:
            name = f"{device} decode {dtype} D={D}"
            try:
                p, split, merge = compile_decode(dtype, D, arch, shared, sms)
            except Exception as exc:  # noqa: BLE001
                failures += 1
                lines = [line for line in str(exc).splitlines() if line.strip()]
                print(f"FAILS {name}: {type(exc).__name__}: {lines[-1] if lines else ''}")
                continue
            print(f"ok    {name}: tile {p.block_m}x{p.block_n}, {p.splits} splits, shared {split.metadata.shared} B "
                  f"(merge {merge.metadata.shared} B, limit {shared})")  # fmt: skip
            failures += max(split.metadata.shared, merge.metadata.shared) > shared
    full = [(dt, d, c) for dt in ("fp16", "bf16") for d in hopper.HOPPER_TILES for c in (False, True)]
    for dtype, D, causal in [("bf16", 64, True)] if quick else full:
        name = f"H200 (sm_90) hopper prefill {dtype} D={D} {'causal' if causal else 'full'}"
        try:
            p, kernel = compile_hopper(dtype, D, causal)
        except Exception as exc:  # noqa: BLE001
            failures += 1
            lines = [line for line in str(exc).splitlines() if line.strip()]
            print(f"FAILS {name}: {type(exc).__name__}: {lines[-1] if lines else ''}")
            continue
        print(f"ok    {name}: {p.strategy} tile {p.block_m}x{p.block_n} w{p.num_warps} s{p.num_stages}, shared {kernel.metadata.shared} B")
        failures += kernel.metadata.shared > 232448
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main("--quick" in sys.argv[1:]))
