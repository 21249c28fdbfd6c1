"""Checked before timed, and the clocks (tritonforge.bench.timing).

No timing is asserted anywhere (timings never go in tests): on a CPU the timer is a fake, so what
is checked is the bookkeeping around the clock.
"""

from __future__ import annotations

import math

import pytest
import torch

import tritonforge as tfg
from tritonforge import bench
from tritonforge.reference import TOLERANCE

from .fakes import FakeTimer


def test_relative_error_is_normwise_and_catches_nan():
    ref = torch.tensor([1.0, -4.0, 0.0], dtype=torch.float64)
    assert bench.relative_error(torch.tensor([1.0, -4.0, 1e-3]), ref) == pytest.approx(1e-3 / 4)
    assert bench.relative_error(torch.tensor([float("nan"), -4.0, 0.0]), ref) == math.inf
    assert bench.relative_error(torch.zeros(2), ref) == math.inf  # wrong shape


def test_a_wrong_output_is_marked_and_not_timed():
    timer = FakeTimer()
    reference = torch.ones(8, dtype=torch.float64)
    row = bench.make_row("t", "op", "planted-wrong", torch.float32, [8], bytes=64, ceiling="copy")
    bench.measure(row, run=lambda: None, check=bench.checked(lambda: torch.full((8,), 1.5), reference),
                  timer=timer, ceilings=bench.Ceilings(1000.0, {}))  # fmt: skip
    assert row["status"] == "wrong" and row["us"] is None and row["fraction_of_ceiling"] is None
    assert row["max_rel_err"] == pytest.approx(0.5)
    assert timer.calls == 0


def test_the_tolerance_is_the_reference_table():
    """The harness's correctness column uses tritonforge.reference.TOLERANCE, scaled only by name."""
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        row = bench.make_row("t", "copy", "clone", dtype, [4])
        x = torch.ones(4, dtype=torch.float64)
        bench.measure(row, run=lambda x=x: x, check=lambda: 0.0, timer=FakeTimer(), ceilings=None)
        assert row["tolerance"] == TOLERANCE[dtype]
    row = bench.make_row("t", "matmul", "mm", torch.float32, [4])
    bench.measure(row, run=lambda: x, check=lambda: 0.0, timer=FakeTimer(), ceilings=None, tolerance_scale=4.0)
    assert row["tolerance"] == 4.0 * TOLERANCE[torch.float32]


def test_an_exception_is_an_error_row():
    def broken():
        raise RuntimeError("kernel failed to compile")

    row = bench.make_row("t", "op", "broken", torch.float32, [8])
    bench.measure(row, run=broken, check=broken, timer=FakeTimer(), ceilings=None)
    assert row["status"] == "error" and "kernel failed to compile" in row["note"]


def test_a_correct_output_is_timed_and_scored():
    timer = FakeTimer(us=2.0)
    x = torch.randn(1000, dtype=torch.float64)
    row = bench.make_row("t", "copy", "clone", torch.float32, [1000], bytes=8000, ceiling="copy")
    check = bench.checked(lambda: x.clone(), x)
    bench.measure(row, run=lambda: x.clone(), check=check, timer=timer, ceilings=bench.Ceilings(8.0, {}))
    assert row["status"] == "ok" and row["max_rel_err"] == 0.0 and timer.calls == 1
    assert row["gbps"] == pytest.approx(4.0) and row["fraction_of_ceiling"] == pytest.approx(0.5)


def test_device_timer_fills_device_us_and_a_failed_capture_keeps_the_row():
    x = torch.randn(100, dtype=torch.float64)
    seen = []

    def device_timer(fn, grad_to_none=None):
        seen.append(grad_to_none)
        return 1.5

    row = bench.make_row("t", "copy", "clone", torch.float32, [100], bytes=800, ceiling="copy")
    bench.measure(row, run=lambda: x.clone(), check=bench.checked(lambda: x.clone(), x), timer=FakeTimer(),
                  ceilings=None, grad_to_none=[x], device_timer=device_timer)  # fmt: skip
    assert row["status"] == "ok" and row["device_us"] == 1.5 and seen == [[x]]

    def cannot_capture(fn, grad_to_none=None):
        raise RuntimeError("operation not permitted when stream is capturing")

    row = bench.make_row("t", "copy", "clone", torch.float32, [100], bytes=800, ceiling="copy")
    bench.measure(row, run=lambda: x.clone(), check=bench.checked(lambda: x.clone(), x), timer=FakeTimer(),
                  ceilings=None, device_timer=cannot_capture)  # fmt: skip
    assert row["status"] == "ok" and row["us"] == 10.0 and row["device_us"] is None
    assert "capture failed" in row["note"] and "stream is capturing" in row["note"]


def test_installed_do_bench_flushes_l2():
    assert bench.do_bench_flushes_l2() is True


def test_device_time_is_triton_do_bench_cudagraph_with_gradients_reset():
    """The installed Triton's do_bench_cudagraph takes what device_time_us passes (triton 3.6 on the
    GPU machine has the same signature) and resets grad_to_none inside the captured graph."""
    import inspect

    import triton.testing

    params = inspect.signature(triton.testing.do_bench_cudagraph).parameters
    assert {"fn", "rep", "grad_to_none", "return_mode"} <= set(params)
    assert "x.grad = None" in inspect.getsource(triton.testing.do_bench_cudagraph)


# ----------------------------------------------------------------------------------------------
# On a GPU (skipped elsewhere): the device clock runs for real; no timing asserted beyond sanity
# ----------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_device_time_replays_the_captured_work():
    out = torch.zeros(1 << 20, device="cuda")
    us = bench.device_time_us(lambda: out.add_(1.0))
    assert 0 < us < 1e4 and out[0].item() > 1  # the call ran (warm-up, estimate and the replays)


@pytest.mark.gpu
def test_device_time_of_a_training_step_writes_fresh_gradients():
    """With grad_to_none, the captured backward assigns gradients instead of accumulating, so the
    graph replays exactly the step's kernels; the gradients are released afterwards."""
    x = torch.randn(64, 256, device="cuda", requires_grad=True)
    weight = torch.randn(256, device="cuda", requires_grad=True)
    dy = torch.randn(64, 256, device="cuda")
    x.grad = torch.ones_like(x)  # would be accumulated into without the reset

    def step():
        tfg.rms_norm(x, weight, 1e-6).backward(dy)

    us = bench.device_time_us(step, grad_to_none=[x, weight])
    assert 0 < us < 1e4 and x.grad is None and weight.grad is None
