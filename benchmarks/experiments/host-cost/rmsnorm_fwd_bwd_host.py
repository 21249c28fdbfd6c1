"""Where a forward+backward step spends host time, against the floor any Python autograd.Function
pays on this machine.

Host µs per step (x.grad = w.grad = None; y = f(x, w); y.backward(dy); 400 steps, one
synchronize at the end, three interleaved repeats, median) for each implementation, beside two
steps that launch no kernel of their own: an autograd.Function whose forward and backward only
allocate their outputs (the floor of a Python backward), and x * w (a C++ backward). Then the
same with the autograd engine told to run the backward on the calling thread
(torch.autograd.set_multithreading_enabled(False)), and our step split into its parts, timed
inside the step and alone. Prints to stdout.

Since the op became a torch.library custom op (commit 2d0187d) the step's forward is
``tfg.rms_norm`` (its autograd goes through the operator) where the recorded run called
``RMSNormFunction.apply``; the first line of the split says which.

Usage (CUDA GPU, repository root): python benchmarks/experiments/host-cost/rmsnorm_fwd_bwd_host.py > out.txt
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/host-cost/rmsnorm_fwd_bwd_host.py
"""

import statistics
import time

import torch

import smoke  # first: imports tritonforge before triton
import tritonforge as tfg
from smoke import DEVICE, toy
from tritonforge import bench
from tritonforge.ops import rmsnorm as rms_norm_module  # tfg.rms_norm is the function
from tritonforge.ops import rmsnorm_backward as rms_norm_backward_module

import triton

WARMUP_CALLS = toy(30, 1)
STEPS = toy(400, 3)
REPEATS = toy(3, 1)


class AllocateOnly(torch.autograd.Function):
    """The least a Python autograd.Function can do: allocate its outputs, launch nothing."""

    @staticmethod
    def forward(ctx, x, w, eps):
        ctx.save_for_backward(x, w)
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, dy):
        return torch.empty_like(dy), torch.empty_like(ctx.saved_tensors[1]), None


def host_us(call, calls=STEPS):
    """Wall time per call of ``calls`` calls issued back to back (``WARMUP_CALLS`` warm-up calls first)."""
    for _ in range(WARMUP_CALLS):
        call()
    smoke.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    smoke.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def host_us_per_step(fn, x, w, dy):
    def step():
        x.grad = w.grad = None
        fn(x, w, 1e-6).backward(dy)

    return host_us(step)


def steps_table(shapes, dtype=torch.bfloat16):
    impls = {name: make() for name, make in bench.rmsnorm_implementations().items() if callable(make)}
    impls["allocate-only Function"] = AllocateOnly.apply
    impls["x * w (C++ backward)"] = lambda x, w, eps: x * w
    for m, n in shapes:
        x, w = bench.rmsnorm_inputs(m, n, dtype, DEVICE)
        dy = torch.randn_like(x)
        x.requires_grad_(True)
        w.requires_grad_(True)
        for threads in (True, False):
            with torch.autograd.set_multithreading_enabled(threads):
                times = {name: [] for name in impls}
                for _ in range(REPEATS):
                    for name, fn in impls.items():
                        times[name].append(host_us_per_step(fn, x, w, dy))
            engine = "engine thread" if threads else "calling thread"
            for name, values in times.items():
                print(f"{bench.dtype_name(dtype)} {m}x{n} backward on {engine:14} {name:24} host us/step "
                      f"{statistics.median(values):7.1f}  (repeats {', '.join(f'{v:.0f}' for v in values)})", flush=True)


def split_of_our_step(n=8192, steps=STEPS):
    """Our step's parts timed inside the step (perf_counter around each), then each part alone."""
    x, w = bench.rmsnorm_inputs(1, n, torch.bfloat16, DEVICE)
    dy = torch.randn_like(x)
    x.requires_grad_(True)
    w.requires_grad_(True)
    spent = dict.fromkeys(("tfg.rms_norm (forward)", "y.backward (all of it)", "rms_norm_bwd inside it"), 0.0)
    launch_bwd = rms_norm_backward_module.rms_norm_bwd

    def timed_bwd(*args, **kwargs):
        start = time.perf_counter()
        out = launch_bwd(*args, **kwargs)
        spent["rms_norm_bwd inside it"] += time.perf_counter() - start
        return out

    rms_norm_backward_module.rms_norm_bwd = timed_bwd
    try:
        for _phase in ("warm-up", "measured"):
            spent.update(dict.fromkeys(spent, 0.0))
            for _ in range(steps):
                x.grad = w.grad = None
                start = time.perf_counter()
                y = tfg.rms_norm(x, w, 1e-6)
                middle = time.perf_counter()
                y.backward(dy)
                spent["tfg.rms_norm (forward)"] += middle - start
                spent["y.backward (all of it)"] += time.perf_counter() - middle
            smoke.synchronize()
    finally:
        rms_norm_backward_module.rms_norm_bwd = launch_bwd
    assert spent["rms_norm_bwd inside it"] > 0, "the backward no longer calls rmsnorm_backward.rms_norm_bwd: nothing was split"
    for part, seconds in spent.items():
        print(f"bfloat16 1x{n} inside the step: {part:28} {seconds / steps * 1e6:7.1f} us")
    xd, wd = x.detach(), w.detach()
    _, rstd = rms_norm_module.rms_norm_fwd(xd, wd, 1e-6)
    alone = {
        "rms_norm_fwd": lambda: rms_norm_module.rms_norm_fwd(xd, wd, 1e-6),
        "rms_norm_bwd": lambda: launch_bwd(dy, xd, wd, rstd),
        "tfg.rms_norm (no grad)": lambda: tfg.rms_norm(xd, wd),
    }
    for part, call in alone.items():
        print(f"bfloat16 1x{n} alone, in a loop: {part:27} {host_us(call, steps):7.1f} us")


if __name__ == "__main__":
    print(smoke.device_name(), "torch", torch.__version__, "triton", triton.__version__)
    steps_table(toy([(1, 8192), (4096, 8192), (16384, 4096)], [(3, 96)]))
    split_of_our_step(n=toy(8192, 96))
