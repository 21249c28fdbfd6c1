"""Is the bf16 cooperative softmax forward short of a copy because of the instructions it issues
per element?

At 4096 x 128K the package's cooperative softmax reaches 0.77 of a same-size copy in bf16 and 0.93
in float32, with the same programs (chunks of 8192 elements, 8 warps, 48 registers a thread). A
bf16 program moves half the bytes for the same instructions, so at the same bandwidth it must
issue twice as many a second. Holding 16 bits instead of float32 did not help (``coop_packed.py``
modes ``all`` and ``e16``: the register count stayed, and the extra packing made it slower), which
points at the instruction stream. ``tl.exp`` lowers to ``ex2.approx.f32`` of ``x * log2(e)``, and
``ex2.approx.f32`` without ``.ftz`` takes extra instructions in SASS to keep subnormal results.
The variants of the package's cooperative kernel (``exp``):

- ``exp``: ``tl.exp(x - m)``, as the package;
- ``sub``: ``tl.exp2((x - m) * log2e)``: ``tl.exp2`` is ``ex2.approx.ftz.f32``, no subnormal results;
- ``fma``: ``tl.exp2(x * log2e - m * log2e)``: the subtraction folded into one multiply-add (whose
  rounded ``m * log2e`` costs accuracy where |m| is large: an error of |m| 2^-24 in the exponent);
- ``fma-noftz``: the multiply-add, then ``ex2.approx.f32`` (subnormal results kept) as inline PTX;
- ``ftz``: the same multiply-add, then ``ex2.approx.ftz.f32`` as inline PTX: subnormal results
  flush to zero (an ``e`` below 2^-126, i.e. ``x - m < -87.3``, becomes 0: a y the size of a
  subnormal, below 1e-38, is lost; every normal y is unchanged in kind).

Each row gives the SASS instruction count of the kernel (``sass_instructions``; a program's
elements are unrolled, so this over the elements a thread holds is the count an element) and its
most frequent opcodes, the registers, and the accuracy beside torch.softmax's (bf16 or float32
ulps against float64: the largest, and the share of elements more than half an ulp off, over the
first rows). Checked against float64 first (a wrong answer is reported, not timed); device time
(CUDA-graph replay, median; the counters' memset in the timed call, as in the package);
``fraction_of_copy`` against the big copy's bandwidth.

Mode ``one-pass`` (a second argument): the rows that fit one program, ``exp`` against ``sub``, in
the package's one-pass kernels as each shape's plan launches them (the pipelined persistent kernel
at 16-bit rows of 32K, a program per row below), beside the package.

Mode ``even``: the package's cooperative forward kernels themselves, softmax's and RMSNorm's, with
and without their masks (``EVEN_N``: the row a multiple of the chunk, as every row of 64K-256K is):
a masked load of a chunk first fills its registers with the ``other`` value (a ``CS2R`` or ``MOV``
each) and compares every column with N.

Usage (CUDA GPU, repository root): python benchmarks/experiments/cooperative-rows/coop_exp.py OUT.json [cooperative|one-pass|even]
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/cooperative-rows/coop_exp.py OUT.json [cooperative|one-pass|even]
(in the toy run a row is one chunk, and ``ftz`` does not run: the interpreter has no inline PTX)
"""

import collections
import re
import sys

import torch

import smoke  # first: imports tritonforge before triton
from smoke import toy
from tritonforge.kernel_utils import cast_for_store, round_bf16_by_hand
from tritonforge.ops.gpu import rmsnorm as gpu_rmsnorm
from tritonforge.ops.gpu import softmax as gpu_softmax
from tritonforge.ops.gpu.coop import COOP_WARPS, coop_counters, row_barrier

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _exp_of(x, m, EXP: tl.constexpr):
    """``exp(x - m)`` the variant's way."""
    if EXP == "exp":
        return tl.exp(x - m)
    if EXP == "sub":
        return tl.exp2((x - m) * LOG2E)
    t = x * LOG2E - m * LOG2E
    if EXP == "fma":
        return tl.exp2(t)
    if EXP == "fma-noftz":
        return tl.inline_asm_elementwise("ex2.approx.f32 $0, $1;", "=f,f", [t], dtype=tl.float32, is_pure=True, pack=1)
    return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [t], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _coop_exp_kernel(x_ptr, y_ptr, part_m_ptr, part_s_ptr, count_ptr, stride, N, SPLITS: tl.constexpr, CHUNK: tl.constexpr,
                     SPLITS_P2: tl.constexpr, EXP: tl.constexpr, ROUND_BF16: tl.constexpr, MAX16: tl.constexpr = False):  # fmt: skip
    """The package's ``gpu_softmax._softmax_coop_kernel`` (float32 accumulation) with the exponential
    taken the ``EXP`` way (the merge's few exponentials too)."""
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    split = pid % SPLITS
    cols = split * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    if MAX16:  # the chunk's max in its own 16-bit type (exact), then widened
        m = tl.max(x, axis=0).to(tl.float32)
        x = x.to(tl.float32)
    else:
        x = x.to(tl.float32)
        m = tl.max(x, axis=0)
    m_ref = tl.where(m == -float("inf"), 0.0, m)
    e = _exp_of(x, m_ref, EXP)
    tl.store(part_m_ptr + row * SPLITS + split, m)
    tl.store(part_s_ptr + row * SPLITS + split, tl.sum(e, axis=0))
    row_barrier(count_ptr + row, SPLITS)
    parts = tl.arange(0, SPLITS_P2)
    ms = tl.load(part_m_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=-float("inf"), volatile=True)
    ss = tl.load(part_s_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=0.0, volatile=True)
    m_row = tl.max(ms, axis=0)
    s_row = tl.sum(tl.where(ms == -float("inf"), 0.0, ss * _exp_of(ms, m_row, EXP)), axis=0)
    y = e * (_exp_of(m, m_row, EXP) / s_row)
    tl.store(y_ptr + row * N + cols, cast_for_store(y, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _one_pass_exp_kernel(x_ptr, y_ptr, stride, M, N, BLOCK_N: tl.constexpr, STAGES: tl.constexpr, EXP: tl.constexpr,
                         ROUND_BF16: tl.constexpr):  # fmt: skip
    """Mode ``one-pass``: the package's one-pass row (``softmax._softmax_row``) with the exponential
    taken the ``EXP`` way; ``STAGES`` > 1 as ``softmax._softmax_fwd_pipelined_kernel`` (persistent
    programs, that many rows in flight), else a program per row as ``softmax._softmax_fwd_kernel``."""
    if STAGES > 1:
        for row in tl.range(tl.program_id(0), M, tl.num_programs(0), num_stages=STAGES):
            _row_exp(x_ptr + tl.cast(row, tl.int64) * stride, y_ptr + tl.cast(row, tl.int64) * N, N, BLOCK_N, EXP, ROUND_BF16)
    else:
        row = tl.program_id(0).to(tl.int64)
        _row_exp(x_ptr + row * stride, y_ptr + row * N, N, BLOCK_N, EXP, ROUND_BF16)


@triton.jit
def _row_exp(x_row, y_row, N, BLOCK_N: tl.constexpr, EXP: tl.constexpr, ROUND_BF16: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = _exp_of(x, tl.max(x, axis=0), EXP)
    y = e * (1.0 / tl.sum(e, axis=0))
    tl.store(y_row + cols, cast_for_store(y, y_row.dtype.element_ty, ROUND_BF16), mask=mask)


def one_pass_call(x, y, exp, plan, info):
    m, n = x.shape
    stages = getattr(plan, "stages", 1)  # the package's plans no longer pipeline (retired 2026-12-04): one program a row
    grid = (min(m, torch.cuda.get_device_properties(x.device).multi_processor_count),) if stages > 1 else (m,)

    def call():
        k = _one_pass_exp_kernel[grid](x, y, x.stride(0), m, n, BLOCK_N=plan.block_n, STAGES=stages, EXP=exp,
                                       ROUND_BF16=round_bf16_by_hand(x.dtype), num_warps=plan.num_warps)  # fmt: skip
        if not info and k is not None and hasattr(k, "n_regs"):
            info.update(n_regs=k.n_regs, n_spills=k.n_spills, **sass_profile(k))
        return y

    return call


def package_even_call(op, args, even, info):
    """Mode ``even``: the package's own cooperative forward kernel (softmax or RMSNorm), launched as
    its launcher does, with its ``EVEN_N`` knob (no masks: N a multiple of the chunk) set to ``even``."""
    from tritonforge.kernel_utils import acc_dtype, split_float
    from tritonforge.ops import softmax

    x, y = args[0], args[-1]
    m, n = x.shape
    # the package's chunks (a toy row is one chunk of 256)
    chunk = toy(softmax.plan(m, n, x.dtype, x.device).chunk if op == "softmax" else gpu_rmsnorm.chunk(x.dtype), 256)
    splits, warps = triton.cdiv(n, chunk), toy(COOP_WARPS, 1)
    parts = [torch.empty(m, splits, device=x.device, dtype=torch.float32) for _ in range(2)]
    p2 = triton.next_power_of_2(splits)

    def call():
        if op == "softmax":
            k = gpu_softmax._softmax_coop_kernel[(m * splits,)](x, y, *parts, coop_counters(m, x.device), x.stride(0), n, m,
                                                            SPLITS=splits, CHUNK=chunk,
                                                            SPLITS_P2=p2, ACC_DTYPE=acc_dtype(x.dtype), ROUND_BF16=round_bf16_by_hand(x.dtype),
                                                            EVEN_N=even, num_warps=warps)  # fmt: skip
        else:
            eps_hi, eps_lo = split_float(1e-6)
            k = gpu_rmsnorm._rms_norm_fwd_coop_kernel[(m * splits,)](
                x, args[1], y, y, x.stride(0), y.stride(0), n, eps_hi, eps_lo, parts[0], coop_counters(m, x.device), m, SPLITS=splits, CHUNK=chunk,
                SPLITS_P2=p2, ACC_DTYPE=acc_dtype(x.dtype), ROUND_BF16=round_bf16_by_hand(x.dtype), STORE_RSTD=False,
                KEEP16=x.dtype == torch.bfloat16, EVEN_N=even, num_warps=warps)  # fmt: skip
        if not info and k is not None and hasattr(k, "n_regs"):
            info.update(n_regs=k.n_regs, n_spills=k.n_spills, **sass_profile(k))
        return y

    return call


def sass_profile(kernel) -> dict:
    """The compiled kernel's SASS instruction count and its ten most frequent opcodes (empty where
    the toolchain gives no SASS, e.g. the interpreter)."""
    try:
        sass = kernel.asm["sass"]
    except Exception:  # noqa: BLE001 - no SASS here (the interpreter) or no disassembler
        return {}
    # an instruction line: "<control codes>\t[@predicate ]OPCODE operands;" (Triton 3.9's disassembly)
    # or "        /*0040*/   [@predicate ]OPCODE operands ;" (cuobjdump's)
    ops = re.findall(r"^(?:\S+\t|\s+/\*[0-9a-f]+\*/\s+)(?:@!?U?P\w+ +)?([A-Z][A-Z0-9_.]*)", sass, flags=re.MULTILINE)
    return {"sass_instructions": len(ops), "sass_top": collections.Counter(op.split(".")[0] for op in ops).most_common(10)}


def variant_call(x, y, exp, chunk, warps, info):
    m, n = x.shape
    splits = triton.cdiv(n, chunk)
    parts = [torch.empty(m, splits, device=x.device, dtype=torch.float32) for _ in range(2)]

    def call():
        k = _coop_exp_kernel[(m * splits,)](x, y, *parts, coop_counters(m, x.device), x.stride(0), n, SPLITS=splits, CHUNK=chunk,
                                            SPLITS_P2=triton.next_power_of_2(splits), EXP=exp, ROUND_BF16=round_bf16_by_hand(x.dtype),
                                            num_warps=warps)  # fmt: skip
        if not info and k is not None and hasattr(k, "n_regs"):
            info.update(n_regs=k.n_regs, n_spills=k.n_spills, **sass_profile(k))
        return y

    return call


MODE = sys.argv[2] if len(sys.argv) > 2 else "cooperative"
if MODE not in ("cooperative", "one-pass", "even"):
    sys.exit(f"mode {MODE!r}: cooperative (default), one-pass or even")
EVEN_CASES = toy([("softmax", 4096, 131072), ("softmax", 512, 131072), ("softmax", 64, 131072), ("softmax", 64, 262144),
                  ("rmsnorm", 4096, 65536), ("rmsnorm", 2048, 131072), ("rmsnorm", 64, 131072)],
                 [("softmax", 3, 256), ("rmsnorm", 3, 256)])  # fmt: skip
"""Mode ``even``: (op, rows, row length), bf16 and float32 each."""
ONE_PASS_CASES = toy([(16384, 32768, torch.bfloat16), (16384, 32768, torch.float16), (8192, 32768, torch.bfloat16),
                      (16384, 16384, torch.bfloat16), (16384, 4096, torch.bfloat16), (16384, 32768, torch.float32)],
                     [(5, 200, torch.bfloat16), (3, 256, torch.float32)])  # fmt: skip
CASES = toy([(4096, 131072), (512, 131072), (64, 131072), (64, 262144)], [(5, 200), (3, 256)])
DTYPES = (torch.bfloat16, torch.float32)
EXPS = toy(("exp", "sub", "fma", "fma-noftz", "ftz"), ("exp", "sub", "fma"))

copy = smoke.copy_ceiling()
print("copy GB/s", round(copy["gbps"], 1), flush=True)
results = []


def run_cooperative():
    for m, n in CASES:
        for dtype in DTYPES:
            case = smoke.op_case("softmax", m, n, dtype)
            (x, y), ref, nbytes = case["args"], case["ref"], case["nbytes"]
            base = {"op": "softmax", "shape": [m, n], "dtype": str(dtype)[6:]}
            results.append({**base, "impl": "torch", **smoke.ulp_stats(torch.softmax(x, -1), ref)})
            row = smoke.checked_row({**base, "impl": "tritonforge", "plan": case["plan"]}, case["package"], ref, nbytes, copy["gbps"])
            results.append({**row, **smoke.ulp_stats(case["package"](), ref)})
            for exp in EXPS:
                info = {}
                call = variant_call(x, y, exp, toy(8192, 256), toy(COOP_WARPS, 1), info)
                row = smoke.checked_row({**base, "impl": "variant", "exp": exp}, call, ref, nbytes, copy["gbps"])
                results.append({**row, **info, **({} if "error" in row else smoke.ulp_stats(call(), ref))})
            smoke.save_rows(sys.argv[1], copy, results)


def run_one_pass():
    from tritonforge.ops import softmax

    for m, n, dtype in ONE_PASS_CASES:
        case = smoke.op_case("softmax", m, n, dtype)
        (x, y), ref, nbytes = case["args"], case["ref"], case["nbytes"]
        plan = softmax.plan(m, n, dtype, x.device)
        base = {"op": "softmax", "shape": [m, n], "dtype": str(dtype)[6:], "plan": list(plan)}
        row = smoke.checked_row({**base, "impl": "tritonforge"}, case["package"], ref, nbytes, copy["gbps"])
        results.append({**row, **smoke.ulp_stats(case["package"](), ref)})
        for exp in ("exp", "sub"):
            info = {}
            call = one_pass_call(x, y, exp, plan, info)
            row = smoke.checked_row({**base, "impl": "variant", "exp": exp}, call, ref, nbytes, copy["gbps"])
            results.append({**row, **info, **({} if "error" in row else smoke.ulp_stats(call(), ref))})
        smoke.save_rows(sys.argv[1], copy, results)


def run_even():
    for op, m, n in EVEN_CASES:
        for dtype in DTYPES:
            case = smoke.op_case(op, m, n, dtype)
            args, ref, nbytes = case["args"], case["ref"], case["nbytes"]
            base = {"op": op, "shape": [m, n], "dtype": str(dtype)[6:]}
            results.append(smoke.checked_row({**base, "impl": "tritonforge"}, case["package"], ref, nbytes, copy["gbps"]))
            for even in (False, True):
                info = {}
                row = smoke.checked_row({**base, "impl": "package kernel", "even_n": even}, package_even_call(op, args, even, info), ref,
                                        nbytes, copy["gbps"])  # fmt: skip
                results.append({**row, **info})
            smoke.save_rows(sys.argv[1], copy, results)


{"cooperative": run_cooperative, "one-pass": run_one_pass, "even": run_even}[MODE]()
print("wrote", sys.argv[1])
