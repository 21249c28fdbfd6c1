"""The switch the experiments share: a measurement on a CUDA GPU, or a toy run anywhere.

Not an experiment: the scripts in the topic folders beside it import it. Each topic folder holds a
link ``smoke.py -> ../smoke.py``, and ``python benchmarks/experiments/TOPIC/NAME.py`` puts the
script's folder first on ``sys.path``, so ``import smoke`` finds this one file from every folder.

Without ``TRITONFORGE_SMOKE=1`` a script measures what its docstring says, on a CUDA GPU, with the
harness's clocks: :func:`do_bench_us` is ``triton.testing.do_bench`` (warm-up 25 ms, 100 ms of
reps, median, L2 flushed before each rep; ``bench.do_bench_timer()``) and :func:`device_us` is
``bench.device_time_us`` (``triton.testing.do_bench_cudagraph``, median of the replays). Without a
GPU it stops at once and says so, rather than run full-size shapes through the interpreter.

With ``TRITONFORGE_SMOKE=1`` (``tests/test_experiments.py``) a script runs its code paths at toy
size on ``tfg.environment().device_type`` (the CPU and Triton's interpreter where there is no GPU),
and both clocks become ``time.perf_counter`` around a few calls: the numbers mean nothing; what is
checked is that the script still runs against the package's public names and gets right answers.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Optional

import torch

import tritonforge as tfg  # first: it decides the interpreter flag before triton loads
from tritonforge import bench
from tritonforge.ops.softmax import _softmax_row  # the retired pipelined kernel's row (below)

import triton  # after tritonforge
import triton.language as tl

SMOKE = os.environ.get("TRITONFORGE_SMOKE", "") == "1"
"""A toy run: tiny shapes, ``time.perf_counter`` instead of the GPU clocks."""

DEVICE = tfg.environment().device_type
"""Where the tensors go: ``"cuda"`` on the Triton GPU path, else ``"cpu"`` (the interpreter)."""

TOY_COPY_BYTES = 2**20
"""Bytes of the copy-bandwidth ceiling in a toy run (the measurement uses ``bench.COPY_BYTES``)."""

TOY_CALLS = 3
"""Calls timed by ``time.perf_counter`` in a toy run (after one warm-up call)."""

if not SMOKE and DEVICE != "cuda":
    sys.exit(
        f"{os.path.basename(sys.argv[0])} measures a CUDA GPU and there is none here "
        f"(tritonforge's path: {tfg.environment().path}); TRITONFORGE_SMOKE=1 runs a toy version."
    )


def toy(full, small):
    """``full`` for a measurement, ``small`` in a toy run (shapes, repeats, call counts)."""
    return small if SMOKE else full


def synchronize() -> None:
    """Wait for the GPU (nothing to wait for on the CPU)."""
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def perf_counter_us(call: Callable[[], object], grad_to_none: Optional[list] = None, calls: int = TOY_CALLS) -> float:
    """Mean wall time of ``calls`` calls after one warm-up call, µs: the toy runs' only clock."""
    call()
    synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        for tensor in grad_to_none or ():
            tensor.grad = None
        call()
    synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def do_bench_us(call: Callable[[], object], grad_to_none: Optional[list] = None) -> float:
    """``triton.testing.do_bench`` median (warm-up 25 ms, rep 100 ms), µs; perf_counter in a toy run."""
    if SMOKE:
        return perf_counter_us(call, grad_to_none)
    return bench.do_bench_timer()(call, grad_to_none=grad_to_none)


def device_us(call: Callable[[], object], grad_to_none: Optional[list] = None) -> float:
    """Device time (``bench.device_time_us``: CUDA-graph replays, median), µs; perf_counter in a toy run."""
    if SMOKE:
        return perf_counter_us(call, grad_to_none)
    return bench.device_time_us(call, grad_to_none=grad_to_none)


def copy_ceiling() -> dict:
    """The harness's copy-bandwidth row (``bench.measure_copy``), the denominator of every fraction."""
    if SMOKE:
        return bench.measure_copy(TOY_COPY_BYTES, device=DEVICE, timer=perf_counter_us)
    return bench.measure_copy(bench.COPY_BYTES, device="cuda", timer=bench.do_bench_timer())


def device_name() -> str:
    return torch.cuda.get_device_name() if DEVICE == "cuda" else tfg.environment().device


def meta() -> dict:
    """Keys a toy run adds to what a script writes, so that its file is never read as a measurement."""
    return {"smoke": True} if SMOKE else {}


def checked_row(out: dict, call: Callable[[], torch.Tensor], ref: torch.Tensor, nbytes: int, copy_gbps: float) -> dict:
    """``out`` with the call's error against ``ref`` (max |got - ref| / max |ref|) and, below 2e-2,
    its device time and the fraction of ``copy_gbps`` that ``nbytes`` make in it; an exception is
    recorded in ``out["error"]``, not raised (a variant that fails to compile is a result too).
    Printed and returned."""
    try:
        got = call()
        synchronize()
        out["err"] = ((got.double() - ref).abs().max() / ref.abs().max()).item()
        if out["err"] < 2e-2:
            out["device_us"] = device_us(call)
            out["fraction_of_copy"] = nbytes / out["device_us"] / 1e3 / copy_gbps
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        out["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    print(out, flush=True)
    return out


def write_record(path: str, data: dict) -> None:
    """Write ``data`` (``{"metadata": {...}, "rows": [...], ...}``) to ``path`` as JSON, its metadata
    stamped on a GPU with the commit (``TRITONFORGE_GIT_COMMIT`` when set: a copy of the tree sent to
    a GPU machine may carry an older ``.git``) and the date."""
    if DEVICE == "cuda":
        import datetime

        commit, _ = bench.git_state()
        data["metadata"].update(git_commit=os.environ.get("TRITONFORGE_GIT_COMMIT", commit),
                                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))  # fmt: skip
    with open(path, "w") as f:
        json.dump(bench.json_safe(data), f, indent=1)
        f.write("\n")


def save_rows(path: str, copy: dict, rows: list) -> None:
    """Write what a script measured so far (its device, versions, the copy ceiling and its rows), after
    every case: a run stopped early keeps what it measured."""
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump({"device": device_name(), "torch": torch.__version__, "triton": triton.__version__, "copy": copy, "rows": rows, **meta()},
                  f, indent=1)  # fmt: skip


def op_case(op: str, m: int, n: int, dtype: torch.dtype) -> dict:
    """One case of a cooperative-row experiment on fresh random inputs: ``op`` is "softmax", "softmax-bwd" or
    "rmsnorm". Returns ``args`` (the tensors a variant kernel takes, its output last), ``package``
    (the package's own call), ``ref`` (float64), ``nbytes`` (what the op moves) and ``plan`` (the
    package's softmax plan, None for RMSNorm)."""
    from tritonforge import reference
    from tritonforge.ops import softmax, softmax_backward

    x = (4 * torch.randn(m, n, device=DEVICE)).to(dtype)
    out = torch.empty_like(x)
    if op == "softmax-bwd":
        y = tfg.softmax(x)
        dy = torch.randn_like(y)
        return {"args": (dy, y, out), "package": lambda: softmax_backward.softmax_bwd(dy, y), "ref": reference.softmax_bwd_ref(dy, y, upcast=True),
                "nbytes": 3 * m * n * x.element_size(), "plan": list(softmax.plan(m, n, dtype, x.device, backward=True))}  # fmt: skip
    if op == "softmax":
        return {"args": (x, out), "package": lambda: tfg.softmax(x), "ref": reference.softmax_ref(x, upcast=True),
                "nbytes": 2 * m * n * x.element_size(), "plan": list(softmax.plan(m, n, dtype, x.device))}  # fmt: skip
    w = (1 + 0.1 * torch.randn(n, device=DEVICE)).to(dtype)
    return {"args": (x, w, out), "package": lambda: tfg.rms_norm(x, w, 1e-6), "ref": reference.rms_norm_ref(x, w, 1e-6, upcast=True),
            "nbytes": 2 * m * n * x.element_size(), "plan": None}  # fmt: skip


def same_size_rows(op: str, m: int, n: int, dtype: torch.dtype, case: dict, copy_gbps: float) -> tuple[dict, list]:
    """The base keys of a cooperative-row case (``op_case``'s ``case``) and its first two rows, checked
    and timed: the shape's same-size copy, ``torch.mul(x, 1, out=y)`` of as many bytes as ``op``
    moves (the backward's: 1.5 x the elements), then the package's own call."""
    base = {"op": op, "shape": [m, n], "dtype": str(dtype)[6:]}
    nbytes = case["nbytes"]
    src = torch.randn(m * n * (3 if op == "softmax-bwd" else 2) // 2, device=DEVICE).to(dtype)
    dst = torch.empty_like(src)
    return base, [checked_row({**base, "impl": "same-size copy"}, lambda: torch.mul(src, 1, out=dst), src.double(), nbytes, copy_gbps),
                  checked_row({**base, "impl": "tritonforge", "plan": case["plan"]}, case["package"], case["ref"], nbytes, copy_gbps)]  # fmt: skip


def with_of_same_copy(rows: list) -> list:
    """``rows`` (the first: the same-size copy) with ``of_same_copy`` = the copy's time / the row's."""
    for row in rows:
        if "device_us" in row and "device_us" in rows[0]:
            row["of_same_copy"] = rows[0]["device_us"] / row["device_us"]
    return rows


def ulp_stats(got: torch.Tensor, ref: torch.Tensor) -> dict:
    """Ulps of ``got``'s dtype against the float64 ``ref`` over the first rows, where ``ref`` is a
    normal number of that dtype: the largest, and the share more than half an ulp off."""
    bits = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}[got.dtype]  # stored mantissa bits
    tiny = torch.finfo(got.dtype).tiny
    got, ref = got[:64].double(), ref[:64]
    ok = ref.abs() >= tiny
    ulps = (got - ref).abs()[ok] / torch.exp2(torch.floor(torch.log2(ref.abs()[ok])) - bits)
    return {"max_ulp": ulps.max().item(), "share_over_half_ulp": (ulps > 0.5 + 1e-9).double().mean().item()}


def coop_kernel_call(op: str, args: tuple, chunk: int, warps: int, flags: bool = False,
                     info: Optional[dict] = None) -> Callable[[], torch.Tensor]:  # fmt: skip
    """A call of the package's cooperative kernel for ``op`` ("softmax", "softmax-bwd": the packed
    kernel for bf16 rows it can read as words, "rmsnorm") on ``op_case``'s ``args`` at ``chunk``
    and ``warps``: with its counter barrier (``FLAGS`` off, as the package launched it until
    4a83bfe; counters zeroed by a memset per call) or, ``flags`` (the softmax kernels only), with
    its flag words as its launcher runs it since (words zeroed by a memset per call). The compiled
    kernel's registers go to ``info`` where it is given (a GPU)."""
    from tritonforge.kernel_utils import acc_dtype, round_bf16_by_hand, split_float
    from tritonforge.ops.gpu import rmsnorm as gpu_rmsnorm
    from tritonforge.ops.gpu import softmax as gpu_softmax
    from tritonforge.ops.gpu.coop import coop_counters, coop_words, packs_bf16_rows

    if flags and op == "rmsnorm":
        raise ValueError("coop_kernel_call: flags for the softmax kernels only")
    x, out = args[0], args[-1]
    m, n = x.shape
    splits = triton.cdiv(n, chunk)
    p2, acc, rounding = triton.next_power_of_2(splits), acc_dtype(x.dtype), round_bf16_by_hand(x.dtype)
    parts = [torch.empty(m, splits, device=x.device, dtype=torch.float32) for _ in range(2)]
    eps_hi, eps_lo = split_float(1e-6)
    common = dict(SPLITS=splits, SPLITS_P2=p2, ROUND_BF16=rounding, num_warps=toy(warps, 1), **({"FLAGS": True} if flags else {}))

    def call():
        if flags:  # the words are the partials and the flags: every buffer argument
            words = coop_words(m, splits, x.device)
            part_m, part_s, count = words, words, words
        else:
            part_m, part_s, count = parts[0], parts[1], coop_counters(m, x.device)
        if op == "softmax":
            k = gpu_softmax._softmax_coop_kernel[(m * splits,)](x, out, part_m, part_s, count, x.stride(0), n, m, CHUNK=chunk, ACC_DTYPE=acc,
                                                            EVEN_N=gpu_softmax.coop_unmasked(x.dtype, n, chunk), **common)  # fmt: skip
        elif op == "softmax-bwd" and toy(packs_bf16_rows(x, args[1]), False):  # inline PTX: not in the interpreter
            w = [t.view(torch.int32) for t in args]
            k = gpu_softmax._softmax_bwd_coop_packed_kernel[(m * splits,)](*w, part_m, count, w[0].stride(0), n // 2, m, WORDS=chunk // 2, **common)
        elif op == "softmax-bwd":
            k = gpu_softmax._softmax_bwd_coop_kernel[(m * splits,)](*args, part_m, count, x.stride(0), n, m, CHUNK=chunk, ACC_DTYPE=acc, **common)
        else:
            k = gpu_rmsnorm._rms_norm_fwd_coop_kernel[(m * splits,)](
                x, args[1], out, out, x.stride(0), out.stride(0), n, eps_hi, eps_lo, part_m, count, m, CHUNK=chunk, ACC_DTYPE=acc,
                STORE_RSTD=False, KEEP16=x.dtype == torch.bfloat16, EVEN_N=gpu_rmsnorm.unmasked(x.dtype, n) and n % chunk == 0,
                **common)  # fmt: skip
        if info is not None and not info and hasattr(k, "n_regs"):
            info.update(n_regs=k.n_regs, n_spills=k.n_spills)
        return out

    return call


@triton.jit
def softmax_fwd_pipelined_kernel(x_ptr, y_ptr, x_row_stride, M, N, BLOCK_N: tl.constexpr, STAGES: tl.constexpr, ACC_DTYPE: tl.constexpr,
                                 ROUND_BF16: tl.constexpr):  # fmt: skip
    """The package's pipelined one-pass softmax as it was until its retirement (commit 5d5dcc3's
    ``softmax._softmax_fwd_pipelined_kernel``), kept for the experiments that measured it
    (``long-rows/row_schedules.py``, ``cooperative-rows/coop_floor.py``): persistent programs, program
    p takes rows p, p + programs, ..., and Triton's pipeliner loads the next ``STAGES - 1`` rows into
    shared memory while one reduces. Retired because the package's plan reached it only for fewer
    rows than SMs, where each program walks a single row and nothing is pipelined
    (``benchmarks/NOTES.md``, session 17)."""
    for row in tl.range(tl.program_id(0), M, tl.num_programs(0), num_stages=STAGES):
        r = tl.cast(row, tl.int64)
        _softmax_row(x_ptr + r * x_row_stride, y_ptr + r * N, N, BLOCK_N, ACC_DTYPE, ROUND_BF16, FTZ_EXP=False)
