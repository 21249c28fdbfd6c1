"""What Triton compiles for bf16 on a T4 (sm_75) and on an A100 (sm_80): compile-only, no GPU needed.

The evidence behind ``tritonforge.hardware.supports_bf16``'s docstring. Each small kernel is compiled
for ``GPUTarget("cuda", arch, 32)`` and the PTX is searched for the instructions that matter: bf16
conversions (``cvt.*bf16``), bf16 arithmetic, tensor-core ``mma.sync``, atomics. A failure prints
the compiler's message. Also checks that a plain ``print`` in a kernel compiles to
``tl.device_print`` (``tt.print`` in the TTIR, ``vprintf`` in the PTX) and that ``breakpoint()`` does
not compile (chapter 2's claims).

Usage (any machine with Triton's NVIDIA backend, e.g. the book's CPU venv)::

    TRITON_INTERPRET=0 python scripts/bf16_sm75_probe.py [arch ...]   # default: 75 80

Run 2026-11-30 with Triton 3.9.0 (the CPU venv) and, in an earlier form without the round-by-hand
column, 3.6.0 (the GPU machine), which gave the same verdicts for every other column:
sm_75 compiles bf16 load + upcast + store (no cvt: the float32 -> bf16 rounding is done by hand in
integer instructions, add 0x7FFF plus the lowest kept bit, NaN kept), plain bf16 adds, ``tl.dot``
on bf16 (float32 FMAs, no mma; fp16 likewise, and ``fma.rn.f16`` with a float16 accumulator) and
bf16 atomics; sm_80 uses ``mma.sync ... bf16``;
``tl.exp`` on bf16 fails on both (it takes fp32/fp64 only); ``print`` compiles to a device print and
``breakpoint()`` fails with NameError on both.

No tensor-core instruction for ``tl.dot`` on sm_75 is Triton's choice since November 2024
(triton-lang/triton#5066: "fallback to FMA for computeCapability < 80"); older Triton emitted
Turing's ``mma.sync.aligned.m16n8k8`` for fp16 there. Rechecked 2026-12-04 with Triton 3.9.0.
"""

from __future__ import annotations

import os
import re
import sys

os.environ.setdefault("TRITON_INTERPRET", "0")  # compile, never interpret

import triton  # noqa: E402  (after the flag)
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402


@triton.jit
def upcast_add_store(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=m).to(tl.float32)
    tl.store(o_ptr + offs, (x + y).to(o_ptr.dtype.element_ty), mask=m)


@triton.jit
def native_add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def native_exp(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.exp(tl.load(x_ptr + offs, mask=m)), mask=m)


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
    b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :])
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], tl.dot(a, b))


@triton.jit
def dot_fp16_acc_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
    b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :])
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], tl.dot(a, b, out_dtype=tl.float16))


@triton.jit
def atomic_add(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.atomic_add(o_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.jit
def with_print(x_ptr, BLOCK: tl.constexpr):
    print("x", tl.load(x_ptr + tl.arange(0, BLOCK)))


@triton.jit
def with_breakpoint(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    breakpoint()
    tl.store(x_ptr + offs, tl.load(x_ptr + offs))


ELEMENTWISE = {"x_ptr": "*bf16", "y_ptr": "*bf16", "o_ptr": "*bf16", "n": "i32", "BLOCK": "constexpr"}
CASES = {
    "load bf16, upcast, add in fp32, store bf16": (upcast_add_store, ELEMENTWISE, {"BLOCK": 1024}),
    "add two bf16 blocks (no upcast)": (native_add, ELEMENTWISE, {"BLOCK": 1024}),
    "tl.exp on a bf16 block": (native_exp, {"x_ptr": "*bf16", "o_ptr": "*bf16", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}),
    "tl.dot bf16 x bf16 -> fp32": (dot_kernel, {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 32}),
    "tl.dot fp16 x fp16 -> fp32": (dot_kernel, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 32}),
    "tl.dot fp16 x fp16 -> fp16": (dot_fp16_acc_kernel, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16",
                                                          "BLOCK": "constexpr"}, {"BLOCK": 32}),
    "tl.atomic_add bf16": (atomic_add, {"x_ptr": "*bf16", "o_ptr": "*bf16", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}),
    "print(...) in a kernel": (with_print, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 8}),
    "breakpoint() in a kernel": (with_breakpoint, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 8}),
}


CVT_BF16 = r"cvt\.[a-z0-9.]*bf16[a-z0-9.]*"
BF16_ARITH = r"\b(?:add|mul|fma)\.[a-z0-9.]*bf16[x2]*\b"
MMA = r"mma\.sync[a-z0-9.]*"
ATOM = r"atom\.[a-z0-9.]*"


def found(pattern: str, text: str) -> str:
    return ", ".join(sorted(set(re.findall(pattern, text)))) or "-"


def main(archs: list[int]) -> None:
    print("triton", triton.__version__)
    for arch in archs:
        for name, (fn, signature, constexprs) in CASES.items():
            try:
                source = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
                compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": 4})
            except Exception as exc:  # noqa: BLE001 - the compiler's verdict is the result
                lines = [line for line in str(exc).splitlines() if line.strip()]
                print(f"sm_{arch} FAILS {name}: {type(exc).__name__}: {lines[-1] if lines else ''}")
                continue
            ptx = compiled.asm["ptx"]
            cvt = found(CVT_BF16, ptx)
            arith = found(BF16_ARITH, ptx)
            mma = found(MMA, ptx)
            atom = found(ATOM, ptx)
            printed = "tt.print" in compiled.asm["ttir"]
            print(
                f"sm_{arch} OK    {name}: cvt bf16 {cvt}; bf16 arith {arith}; mma {mma}; "
                f"fma.rn.f32 x{ptx.count('fma.rn.f32')}; fma.rn.f16 x{ptx.count('fma.rn.f16')}; atom {atom}; "
                f"round-by-hand (+0x7FFF) {'32767' in ptx}; "
                f"tt.print {printed}; vprintf {'vprintf' in ptx}"
            )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [75, 80])
