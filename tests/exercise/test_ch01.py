"""Exercise 1a's check (tritonforge.exercise.ch01) catches wrong counts: it fails on the shipped
stub and on planted mistakes, passes on the reference solution, and names what is wrong."""

from __future__ import annotations

import pytest
import torch

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge import exercise

from . import notebooks

# Planted wrong answers: the mistakes a learner is most likely to make ---------------------------


def intensity_forgets_weight(op, shape, dtype):
    """RMSNorm bytes without the weight read (2·M·N·elem)."""
    elem = torch.empty((), dtype=dtype).element_size()
    if op == "rms_norm":
        M, N = shape
        flops, nbytes = 4 * M * N, 2 * M * N * elem
    else:
        M, N, K = shape
        flops, nbytes = 2 * M * N * K, (M * K + K * N + M * N) * elem
    return flops, nbytes, flops / nbytes


def intensity_counts_macs(op, shape, dtype):
    """Matmul FLOPs counted as multiply-adds (M·N·K), RMSNorm right."""
    elem = torch.empty((), dtype=dtype).element_size()
    if op == "rms_norm":
        M, N = shape
        flops, nbytes = 4 * M * N, (2 * M * N + N) * elem
    else:
        M, N, K = shape
        flops, nbytes = M * N * K, (M * K + K * N + M * N) * elem
    return flops, nbytes, flops / nbytes


def intensity_assumes_fp32(op, shape, dtype):
    """4 bytes per element whatever the dtype."""
    if op == "rms_norm":
        M, N = shape
        flops, nbytes = 4 * M * N, (2 * M * N + N) * 4
    else:
        M, N, K = shape
        flops, nbytes = 2 * M * N * K, (M * K + K * N + M * N) * 4
    return flops, nbytes, flops / nbytes


def _roofs(device, kind, dtype):
    from tritonforge.book import roofline

    spec = roofline.DEVICES[device]
    tensor = {torch.float16: spec.fp16_tensor_tflops, torch.bfloat16: spec.bf16_tensor_tflops}.get(dtype, spec.fp32_tflops)
    return spec, (tensor if kind == "matmul" else spec.fp32_tflops)


def prediction_adds_the_times(device, kind, flops, nbytes, dtype):
    """Memory time plus math time, as if they did not overlap."""
    spec, tflops = _roofs(device, kind, dtype)
    memory_us, math_us = nbytes / spec.hbm_gbps / 1e3, flops / tflops / 1e6
    return memory_us + math_us, "memory-bound" if memory_us >= math_us else "compute-bound"


def prediction_tensor_cores_for_everything(device, kind, flops, nbytes, dtype):
    """Every op under a tensor-core roof: its dtype's, the fp16 one for float32."""
    from tritonforge.book import roofline

    spec = roofline.DEVICES[device]
    tflops = {torch.float16: spec.fp16_tensor_tflops, torch.bfloat16: spec.bf16_tensor_tflops}.get(dtype, spec.fp16_tensor_tflops)
    memory_us, math_us = nbytes / spec.hbm_gbps / 1e3, flops / tflops / 1e6
    return max(memory_us, math_us), "memory-bound" if memory_us >= math_us else "compute-bound"


def prediction_fp16_rate_for_every_matmul(device, kind, flops, nbytes, dtype):
    """A float32 matmul under the fp16 tensor-core roof (as if TF32 or fp16 were free)."""
    spec, tflops = _roofs(device, kind, dtype)
    if kind == "matmul":
        tflops = spec.fp16_tensor_tflops
    memory_us, math_us = nbytes / spec.hbm_gbps / 1e3, flops / tflops / 1e6
    return max(memory_us, math_us), "memory-bound" if memory_us >= math_us else "compute-bound"


def prediction_in_seconds(device, kind, flops, nbytes, dtype):
    """The right floor, in seconds."""
    spec, tflops = _roofs(device, kind, dtype)
    memory_s, math_s = nbytes / (spec.hbm_gbps * 1e9), flops / (tflops * 1e12)
    return max(memory_s, math_s), "memory-bound" if memory_s >= math_s else "compute-bound"


def prediction_bound_from_the_tensor_core_ridge(device, kind, flops, nbytes, dtype):
    """The right time, but the bound read off the 16-bit tensor-core ridge for every op."""
    spec, tflops = _roofs(device, kind, dtype)
    memory_us, math_us = nbytes / spec.hbm_gbps / 1e3, flops / tflops / 1e6
    return max(memory_us, math_us), "memory-bound" if flops / nbytes < spec.ridge_point_fp16 else "compute-bound"


def prediction_matmul_means_compute_bound(device, kind, flops, nbytes, dtype):
    """The right time, but every matmul called compute-bound and every elementwise op memory-bound."""
    spec, tflops = _roofs(device, kind, dtype)
    memory_us, math_us = nbytes / spec.hbm_gbps / 1e3, flops / tflops / 1e6
    return max(memory_us, math_us), "compute-bound" if kind == "matmul" else "memory-bound"


TABLE = {
    # notebook stem: (function name in the stub and the solution, the check, planted wrong answers)
    "ex01a_arithmetic_intensity": (
        "arithmetic_intensity",
        exercise.check_arithmetic_intensity,
        [intensity_forgets_weight, intensity_counts_macs, intensity_assumes_fp32],
    ),
    "ex01b_roofline_prediction": (
        "roofline_prediction",
        exercise.check_roofline_prediction,
        [
            prediction_adds_the_times,
            prediction_tensor_cores_for_everything,
            prediction_fp16_rate_for_every_matmul,
            prediction_in_seconds,
            prediction_bound_from_the_tensor_core_ridge,
            prediction_matmul_means_compute_bound,
        ],
    ),
}
STEMS = sorted(TABLE)
PLANTED = [(stem, wrong) for stem in STEMS for wrong in TABLE[stem][2]]


@pytest.mark.parametrize("stem", STEMS)
def test_notebook_has_one_stub_and_a_check_of_it(stem):
    name, check, _ = TABLE[stem]
    notebooks.assert_notebook_has_one_stub_and_a_check_of_it(stem, name, check)


@pytest.mark.parametrize("stem", STEMS)
def test_check_fails_every_case_on_the_shipped_stub(stem, tmp_path):
    name, check, _ = TABLE[stem]
    notebooks.assert_check_fails_every_case_on_the_shipped_stub(stem, name, check, tmp_path)


@pytest.mark.parametrize("stem, wrong", PLANTED, ids=[f"{s}-{w.__name__}" for s, w in PLANTED])
def test_check_fails_on_a_planted_wrong_answer(stem, wrong):
    _, check, _ = TABLE[stem]
    notebooks.assert_check_fails_on_every_seed(check, wrong)


@pytest.mark.parametrize("seed", [0, 1, None])
@pytest.mark.parametrize("stem", STEMS)
def test_check_passes_on_the_reference_solution(stem, seed):
    name, check, _ = TABLE[stem]
    check(notebooks.solution(stem, name), seed=seed).assert_passed()


def test_specific_failure_messages():
    """The verdict names the wrong count."""
    counts = exercise.check_arithmetic_intensity(intensity_forgets_weight)
    assert any(r.detail.startswith("bytes: got") for r in counts.rows)


def test_roofline_prediction_failure_messages():
    """The verdicts say which number is wrong, and name a unit mistake."""
    seconds = exercise.check_roofline_prediction(prediction_in_seconds)
    assert all("in seconds: return microseconds" in r.detail for r in seconds.rows)
    ridge = exercise.check_roofline_prediction(prediction_bound_from_the_tensor_core_ridge)
    (failed,) = [r for r in ridge.rows if not r.passed]
    assert "A100" in failed.case and failed.detail == "bound: got 'memory-bound', expected 'compute-bound'"
