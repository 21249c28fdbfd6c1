"""Compile FlashAttention's backward kernels for real GPUs without one: the tiles
``attention_backward.plan`` picks for an H200 (sm_90, 227 KB of shared memory) and a T4 (sm_75,
64 KB), each dtype the device runs, head dims 64, 80, 128 and 256, causal and not.

For each it prints the shared memory each compiled kernel asks for beside the device's limit and
the plan's own estimate (``attention_backward.backward_tile_bytes``), and each kernel's registers
and spill bytes a thread as the binary states them (``cuobjdump``; spills sit in the stack frame);
a compile failure prints the compiler's last line and makes the exit status 1. Compile-only:
nothing runs, nothing is timed. The counts are this machine's Triton's, which can allocate very
differently from the GPU machine's: Triton 3.9 here gives the dQ kernel 255 registers and
spills at most of the tile sweep's tiles, where Triton 3.6 on the H200 gave it 122-185 registers
and no spills at most of them (the sweep's record), so they say which tiles fit under this
Triton, not how fast a tile runs there.

Usage (any machine with Triton's NVIDIA backend, e.g. the book's CPU venv)::

    TRITON_INTERPRET=0 python scripts/attention_backward_compile_probe.py [--quick]

``tests/ops/test_attention_backward.py`` runs it with ``--quick`` (D = 128 causal, one dtype a device).
"""

from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "0"  # compile, never interpret (before tritonforge imports triton)

import torch  # noqa: E402

from tritonforge.book.compile_ir import cubin_resources  # noqa: E402
from tritonforge.ops import attention_backward as bwd  # noqa: E402
from tritonforge.ops import attention_backward_kernels as kernels  # noqa: E402

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

DEVICES = {"H200 (sm_90)": (90, 232448, ("fp16", "bf16", "fp32")), "T4 (sm_75)": (75, 65536, ("fp16", "fp32"))}
TORCH_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
STRIDES = [f"{t}_s{d}" for t in ("q", "k", "v", "do") for d in "bhn"]
MASKS = {"kv_lens_ptr": "*i32", "kid_ptr": "*i32", "qid_ptr": "*i32", "kid_sb": "i32", "qid_sb": "i32"}
SCALES = dict.fromkeys(("qk_scale", "qk_scale_lo", "sm_scale", "sm_scale_lo"), "fp32")


def _compile(kernel, signature: dict, constexprs: dict, arch: int, p: bwd.BackwardPlan):
    source = ASTSource(fn=kernel, signature={**signature, **dict.fromkeys(constexprs, "constexpr")}, constexprs=constexprs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": p.num_warps, "num_stages": p.num_stages})


def compile_backward(dtype: str, D: int, causal: bool, arch: int, shared: int):
    """The three kernels, with the masks of a padded batch (kv_lens and key ids) compiled in."""
    head_d = max(16, triton.next_power_of_2(D))
    p = bwd.backward_plan(head_d, TORCH_DTYPE[dtype].itemsize, shared)
    if p is None:
        return None, []
    ptr, acc = f"*{dtype}", "*fp32"
    flags = dict(HAS_LENS=True, HAS_IDS=True, HAS_QIDS=False, CAUSAL=causal, HEAD_D=head_d, UPCAST=False, ROUND_BF16=False,
                 IEEE_DOT=dtype == "fp32", ACC_DTYPE=triton.language.float32)  # fmt: skip
    pre = {"o_ptr": ptr, "do_ptr": ptr, "lse_ptr": acc, "dlse_ptr": acc, "delta_ptr": acc, "lse2_ptr": acc,
           **dict.fromkeys(("o_sb", "o_sh", "o_sn", "do_sb", "do_sh", "do_sn", "Hq", "Nq", "D"), "i32"),
           "log2e": "fp32", "log2e_lo": "fp32"}  # fmt: skip
    pre_flags = {"HAS_DLSE": True, "BLOCK_M": p.resident, "HEAD_D": head_d, "ACC_DTYPE": triton.language.float32}
    dkdv = {"q_ptr": ptr, "k_ptr": ptr, "v_ptr": ptr, "do_ptr": ptr, "dk_ptr": ptr, "dv_ptr": ptr, "dq_acc_ptr": acc, "lse2_ptr": acc,
            "delta_ptr": acc,
            **MASKS, **dict.fromkeys(STRIDES, "i32"), **dict.fromkeys(("Hq", "Hkv", "GROUP", "Nq", "Nk", "D"), "i32"), **SCALES}  # fmt: skip
    dq = {"q_ptr": ptr, "k_ptr": ptr, "v_ptr": ptr, "do_ptr": ptr, "dq_ptr": ptr, "lse2_ptr": acc, "delta_ptr": acc, **MASKS,
          **dict.fromkeys(STRIDES, "i32"), **dict.fromkeys(("Hq", "GROUP", "Nq", "Nk", "D"), "i32"), **SCALES}  # fmt: skip
    return p, [
        ("preprocess", _compile(kernels._bwd_preprocess_kernel, pre, pre_flags, arch, p)),
        ("dkdv", _compile(kernels._bwd_dkdv_kernel, dkdv, {**flags, "BLOCK_M": p.streamed, "BLOCK_N": p.resident,
                                                           "DQ_ATOMIC": p.dq_atomic}, arch, p)),
        ("dq", _compile(kernels._bwd_dq_kernel, dq, {**flags, "BLOCK_M": p.resident, "BLOCK_N": p.streamed, "EVEN_D": head_d == D}, arch, p)),
    ]


def main(quick: bool) -> int:
    print(f"triton {triton.__version__}")
    failures = 0
    for device, (arch, shared, dtypes) in DEVICES.items():
        cases = [(dtypes[0], 128, True)] if quick else [(dt, d, c) for dt in dtypes for d in (64, 80, 128, 256) for c in (False, True)]
        for dtype, D, causal in cases:
            name = f"{device} backward {dtype} D={D} {'causal' if causal else 'full'}"
            try:
                p, compiled = compile_backward(dtype, D, causal, arch, shared)
            except Exception as exc:  # noqa: BLE001 - the compiler's verdict is the result
                failures += 1
                lines = [line for line in str(exc).splitlines() if line.strip()]
                print(f"FAILS {name}: {type(exc).__name__}: {lines[-1] if lines else ''}")
                continue
            if p is None:
                print(f"none  {name}: no tile fits (the reference serves)")
                continue
            head_d = max(16, triton.next_power_of_2(D))
            estimate = bwd.backward_tile_bytes(p.resident, p.streamed, head_d, p.num_stages, TORCH_DTYPE[dtype].itemsize)
            used = ", ".join(f"{kind} {kernel.metadata.shared} B" for kind, kernel in compiled)
            regs = ", ".join(f"{kind} {r.get('reg', '?')}/{r.get('stack', '?')} B" for kind, kernel in compiled
                             for r in [cubin_resources(kernel.asm.get("cubin", b""))])  # fmt: skip
            print(f"ok    {name}: tile {p.resident}x{p.streamed} w{p.num_warps} s{p.num_stages}, shared {used} "
                  f"(estimate {estimate}, limit {shared}); registers/spilled a thread: {regs}")  # fmt: skip
            failures += max(kernel.metadata.shared for _, kernel in compiled) > shared
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main("--quick" in sys.argv[1:]))
