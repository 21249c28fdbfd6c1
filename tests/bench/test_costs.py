"""The cost formulas, the time floor and the fraction of a ceiling (tritonforge.bench.costs)."""

from __future__ import annotations

import pytest
import torch

from tritonforge import bench

# From the anchor run on one H200 (2026-11-29): copy ceiling and one Liger RMSNorm row.
ANCHOR_COPY_GBPS = 4150.207870840478
ANCHOR_LIGER_FP32_4096x8192 = {"us": 68.44799965620041, "fraction": 0.9450663052653672}


def test_ceiling_formulas():
    assert bench.copy_bytes(1000, 4) == 8000  # read 4000 bytes + write 4000 bytes
    assert bench.matmul_flops(8192, 8192, 8192) == 2 * 8192**3
    assert bench.matmul_flops(2, 3, 5) == 60


def test_axpy_moves_three_tensors():
    assert bench.axpy_bytes(1000, 2) == 6000
    cost = bench.axpy_cost(1000, torch.float32)
    assert (cost.bytes, cost.flops, cost.ceiling) == (12000, 2000, "copy")
    assert "3·n·elem" in cost.formula


def test_rmsnorm_formulas():
    assert bench.rmsnorm_forward_bytes(4096, 512, 2) == (2 * 4096 * 512 + 512) * 2
    assert bench.rmsnorm_forward_backward_bytes(4096, 512, 4) == (5 * 4096 * 512 + 3 * 512) * 4
    forward = bench.rmsnorm_forward_cost(64, 8192, torch.bfloat16)
    both = bench.rmsnorm_forward_backward_cost(64, 8192, torch.bfloat16)
    assert forward.bytes == (2 * 64 * 8192 + 8192) * 2 and forward.flops == 4 * 64 * 8192
    assert both.bytes == (5 * 64 * 8192 + 3 * 8192) * 2 and both.flops == 13 * 64 * 8192
    assert "write dx" in both.formula and "read dy" in both.formula


def test_dtype_name_and_elem_size():
    assert bench.dtype_name(torch.bfloat16) == "bfloat16"
    assert [bench.elem_size(d) for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16)] == [8, 4, 2, 2]


def test_rmsnorm_formula_reproduces_the_anchor_fraction():
    """Same bytes convention as the peers' anchor table: its fraction comes back exactly."""
    cost = bench.rmsnorm_forward_cost(4096, 8192, torch.float32)
    row = bench.make_row("rmsnorm", "rmsnorm", "liger", torch.float32, [4096, 8192], bytes=cost.bytes,
                         flops=cost.flops, ceiling="copy", us=ANCHOR_LIGER_FP32_4096x8192["us"])  # fmt: skip
    bench.add_throughput(row, bench.Ceilings(ANCHOR_COPY_GBPS, {}))
    assert row["fraction_of_ceiling"] == pytest.approx(ANCHOR_LIGER_FP32_4096x8192["fraction"], rel=1e-9)


def test_throughput_against_a_matmul_ceiling():
    row = bench.make_row("x", "mm", "ours", torch.bfloat16, [8192] * 3, flops=2 * 8192**3, ceiling="matmul-bfloat16", us=2000.0)
    bench.add_throughput(row, bench.Ceilings(4000.0, {"bfloat16": 700.0}))
    assert row["tflops"] == pytest.approx(2 * 8192**3 / 2e-3 / 1e12)
    assert row["fraction_of_ceiling"] == pytest.approx(row["tflops"] / 700.0)
    assert row["gbps"] is None
    bare = bench.make_row("x", "mm", "ours", torch.bfloat16, [8192] * 3, flops=2 * 8192**3, ceiling="matmul", us=2000.0)
    bench.add_throughput(bare, bench.Ceilings(4000.0, {"bfloat16": 700.0}))
    assert bare["fraction_of_ceiling"] == pytest.approx(row["fraction_of_ceiling"])  # "matmul": the row's dtype


# ----------------------------------------------------------------------------------------------
# The time floor
# ----------------------------------------------------------------------------------------------


def test_time_floor_of_bytes_is_bytes_over_bandwidth():
    assert bench.time_floor_us(4_000_000, gbps=4000.0) == pytest.approx(1.0)  # 4 MB at 4 TB/s: 1 µs
    cost = bench.rmsnorm_forward_cost(32768, 8192, torch.bfloat16)
    assert bench.time_floor_us(cost.bytes, gbps=4274.3) == pytest.approx(cost.bytes / 4274.3e9 * 1e6)


def test_time_floor_is_the_longer_of_memory_and_math():
    assert bench.time_floor_us(flops=2e12, tflops=1000.0) == pytest.approx(2000.0)
    memory_bound = bench.time_floor_us(8e6, 1e6, gbps=4000.0, tflops=1000.0)  # 2 µs of bytes, 0.001 µs of math
    compute_bound = bench.time_floor_us(8e6, 1e10, gbps=4000.0, tflops=1000.0)  # 2 µs of bytes, 10 µs of math
    assert memory_bound == pytest.approx(2.0) and compute_bound == pytest.approx(10.0)


def test_time_floor_says_which_rate_is_missing():
    with pytest.raises(ValueError, match="gbps"):
        bench.time_floor_us(1000)
    with pytest.raises(ValueError, match="tflops"):
        bench.time_floor_us(1000, 1000, gbps=1.0)
    with pytest.raises(ValueError, match="give nbytes"):
        bench.time_floor_us(gbps=1.0)


def test_time_floor_agrees_with_the_fraction_of_ceiling():
    """A row's fraction of the copy ceiling is its floor at copy bandwidth over its time."""
    cost = bench.rmsnorm_forward_cost(4096, 8192, torch.float32)
    row = bench.make_row("rmsnorm", "rmsnorm", "x", torch.float32, [4096, 8192], bytes=cost.bytes, ceiling="copy", us=70.0)
    bench.add_throughput(row, bench.Ceilings(4000.0, {}))
    assert bench.time_floor_us(row["bytes"], gbps=4000.0) / row["us"] == pytest.approx(row["fraction_of_ceiling"])
