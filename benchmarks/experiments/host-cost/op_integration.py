"""How an op should meet PyTorch, measured: host time of plain launches against the retired
cached launcher, and the op inside compiled and CUDA-graph-captured functions.

Part 1 (``launch``): host µs per eager inference call of ``tfg.rms_norm`` and ``tfg.axpy`` at
decode sizes (2000 calls issued back to back after 50 warm-up calls, one synchronize at the end,
median of three repeats), beside ``triton.testing.do_bench``'s median (µs). Run it once with the
package of this checkout and once with an older checkout on PYTHONPATH (the retired
CachedLauncher, commit c0557ec) to compare launchers on one machine.

Part 2 (``compiled``, this checkout only): ``f(x, w) = rms_norm(x * 2, w) + 1`` compiled with
``fullgraph=True`` in Inductor's default mode and in ``reduce-overhead`` (CUDA graphs), three
ways: the package's op (a ``torch.library.custom_op`` whose body routes and launches), the same
forward kernel registered as a ``torch.library.triton_op`` (its body traced by Inductor, which
then launches the kernel from generated code), and the Hugging Face formula compiled in the same
mode. Host µs per call (as above) and ``do_bench`` µs.

Usage (CUDA GPU, repository root):
  PYTHONPATH=. python benchmarks/experiments/host-cost/op_integration.py launch  after.json
  PYTHONPATH=OLD python benchmarks/experiments/host-cost/op_integration.py launch before.json
  PYTHONPATH=. python benchmarks/experiments/host-cost/op_integration.py compiled compiled.json

Toy run (tests/test_experiments.py; any machine): TRITONFORGE_SMOKE=1 before either command. See
the SMOKE block below: it changes nothing a GPU run measures.
"""

import json
import os
import statistics
import sys
import time

import torch

import tritonforge as tfg  # first: it decides the interpreter flag before triton loads

import triton
import triton.testing

SHAPES = ((1, 4096), (1, 8192), (64, 8192), (256, 8192))
DTYPES = (torch.bfloat16, torch.float32)
COMPILED_SHAPES = ((1, 8192), (64, 8192))  # each row compiles afresh: a few decode sizes, bf16
COMPILED_DTYPES = (torch.bfloat16,)
DEVICE = "cuda"
MODES = ("default", "reduce-overhead")  # torch.compile modes of part 2 (Inductor)

# --- Toy run: TRITONFORGE_SMOKE=1 --------------------------------------------------------------
# Tiny shapes on tfg.environment().device_type, a few calls timed with time.perf_counter only
# (no do_bench; synchronize only on a GPU), part 2 compiled with backend "aot_eager" instead of
# Inductor's modes, and without the triton_op variant on the CPU (Triton's interpreter runs the
# kernel on FakeTensors when torch.compile traces it, which fails). Its numbers mean nothing.
SMOKE = os.environ.get("TRITONFORGE_SMOKE", "") == "1"
if SMOKE:
    SHAPES = COMPILED_SHAPES = ((1, 64), (3, 96))
    DEVICE = tfg.environment().device_type
    MODES = ("aot_eager",)


def synchronize():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def compile_options(mode):
    return {"backend": mode} if SMOKE else {"mode": mode}


# --- end of the toy run's switches -------------------------------------------------------------


def host_us(call, calls=2000, repeats=3):
    """Median over ``repeats`` of the wall time per call of ``calls`` back-to-back calls."""
    warmup, calls = (1, 3) if SMOKE else (50, calls)
    for _ in range(warmup):
        call()
    synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def bench_us(call):
    if SMOKE:
        return None  # no do_bench in a toy run
    return triton.testing.do_bench(call, warmup=25, rep=200) * 1e3


def launch_rows():
    rows = []
    for dtype in DTYPES:
        for m, n in SHAPES:
            x = torch.randn(m, n, device=DEVICE, dtype=dtype)
            w = torch.randn(n, device=DEVICE, dtype=dtype)
            y = torch.randn(m, n, device=DEVICE, dtype=dtype)
            for op, call in (("rms_norm", lambda: tfg.rms_norm(x, w, 1e-6)), ("axpy", lambda: tfg.axpy(1.5, x, y))):
                rows.append(dict(op=op, dtype=str(dtype).replace("torch.", ""), shape=[m, n],
                                 host_us=host_us(call), do_bench_us=bench_us(call)))  # fmt: skip
                print(rows[-1], flush=True)
    return rows


def triton_op_rms_norm():
    """The package's forward kernel behind torch.library.triton_op (inference only, no routing):
    the alternative to a custom op, whose body Inductor traces and whose launch it generates."""
    from tritonforge import kernel_utils
    from tritonforge.ops import rmsnorm as m

    @torch.library.triton_op("tfexperiment::rms_norm", mutates_args=())
    def rms_norm_traced(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        M, N = x.shape
        y = torch.empty_like(x)
        block_n, num_warps, one_pass = m.fwd_config(M, N, x.dtype)
        eps_hi, eps_lo = kernel_utils.split_float(eps)
        torch.library.wrap_triton(m._rms_norm_fwd_kernel)[(M,)](
            x, weight, y, y, x.stride(0), y.stride(0), N, eps_hi, eps_lo,
            BLOCK_N=block_n, ROW_FITS=one_pass, ACC_DTYPE=kernel_utils.acc_dtype(x.dtype),
            ROUND_BF16=False, STORE_RSTD=False, num_warps=num_warps,
        )  # fmt: skip
        return y

    return rms_norm_traced


def compiled_rows():
    from tritonforge.reference import rms_norm_ref

    traced = triton_op_rms_norm()
    variants = {
        "tritonforge (custom_op)": lambda x, w: tfg.rms_norm(x * 2.0, w, 1e-6) + 1.0,
        "triton_op (traced)": lambda x, w: traced(x * 2.0, w, 1e-6) + 1.0,
        "HF formula": lambda x, w: rms_norm_ref(x * 2.0, w, 1e-6) + 1.0,
    }
    if SMOKE and DEVICE == "cpu":
        del variants["triton_op (traced)"]
    rows = []
    for dtype in COMPILED_DTYPES:
        for m, n in COMPILED_SHAPES:
            x = torch.randn(m, n, device=DEVICE, dtype=dtype)
            w = torch.randn(n, device=DEVICE, dtype=dtype)
            expected = variants["HF formula"](x, w)
            for mode in MODES:
                for name, fn in variants.items():
                    torch._dynamo.reset()
                    compiled = torch.compile(fn, fullgraph=True, dynamic=False, **compile_options(mode))
                    for _ in range(3):
                        out = compiled(x, w)
                    err = ((out.double() - expected.double()).abs().max() / expected.double().abs().max()).item()
                    rows.append(dict(impl=name, mode=mode, dtype=str(dtype).replace("torch.", ""), shape=[m, n],
                                     host_us=host_us(lambda: compiled(x, w), calls=1000),
                                     do_bench_us=bench_us(lambda: compiled(x, w)), rel_err_vs_hf=err))  # fmt: skip
                    print(rows[-1], flush=True)
    return rows


def main():
    part, out = sys.argv[1], sys.argv[2]
    rows = launch_rows() if part == "launch" else compiled_rows()
    device = torch.cuda.get_device_name() if DEVICE == "cuda" else tfg.environment().device
    meta = dict(part=part, device=device, torch=torch.__version__, triton=triton.__version__,
                tritonforge_file=tfg.__file__, date=time.strftime("%Y-%m-%d"))  # fmt: skip
    if SMOKE:
        meta["smoke"] = True
    with open(out, "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
