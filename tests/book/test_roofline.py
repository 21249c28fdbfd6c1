"""The roofline model (tritonforge.book.roofline): its costs and predictions are the harness's."""

from __future__ import annotations

import pytest
import torch

from tritonforge import bench
from tritonforge.book import roofline


def test_rmsnorm_cost_is_the_harness_cost():
    assert roofline.rmsnorm_cost(4096, 8192, torch.bfloat16) == bench.rmsnorm_forward_cost(4096, 8192, torch.bfloat16)


def test_prediction_is_the_time_floor():
    cost = roofline.matmul_cost(4096, 14336, 4096, torch.bfloat16)
    prediction = roofline.predict(cost, gbps=4000.0, tflops=700.0)
    assert prediction.memory_us == pytest.approx(bench.time_floor_us(cost.bytes, gbps=4000.0))
    assert prediction.math_us == pytest.approx(bench.time_floor_us(flops=cost.flops, tflops=700.0))
    assert prediction.us == pytest.approx(bench.time_floor_us(cost.bytes, cost.flops, gbps=4000.0, tflops=700.0))
    assert prediction.bound == "compute-bound"
    assert roofline.predict_on(roofline.rmsnorm_cost(4096, 4096, torch.bfloat16), "H200", torch.bfloat16,
                               matmul_like=False).bound == "memory-bound"  # fmt: skip


def test_datasheet_devices():
    assert set(roofline.DEVICES) == {"T4", "A100", "H100", "H200"}
    with pytest.raises(ValueError, match="bf16"):
        roofline.DEVICES["T4"].peak_tflops(torch.bfloat16)


def test_two_ridges_per_device():
    """Matmul-like work meets the tensor-core ridge; elementwise and reduction ops the fp32 one."""
    h200 = roofline.DEVICES["H200"]
    assert h200.ridge_point_fp16 == pytest.approx(989e12 / 4800e9)  # about 206 FLOP/B
    assert h200.ridge_point_fp32 == pytest.approx(67e12 / 4800e9)  # about 14 FLOP/B
    rmsnorm = roofline.predict_on(roofline.rmsnorm_cost(4096, 4096, torch.bfloat16), "H200", torch.bfloat16, matmul_like=False)
    assert rmsnorm.ridge == pytest.approx(h200.ridge_point_fp32)
