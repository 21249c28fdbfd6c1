"""Exercise 1a's check (tritonforge.exercise.ch01) catches wrong counts: it fails on the shipped
stub and on planted mistakes, passes on the reference solution, and names what is wrong."""

from __future__ import annotations

import torch

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge import exercise

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


def _traffic(M, N, dtype, *, casts=None, row_stats=True, weight=True, f32_intermediates=True, fused_writes_h=True):
    """The counts of exercise 1c with one piece of the convention switched off (a planted mistake)."""
    e = torch.empty((), dtype=dtype).element_size()
    f = 4 if f32_intermediates else e
    s = 4 if row_stats else 0
    MN = M * N
    if casts is None:
        casts = dtype != torch.float32
    kernels = [(2 * MN * e, MN * e), (MN * f, MN * f), (MN * f, M * s), (M * s, M * s), (M * s, M * s), (MN * f + M * s, MN * f)]
    kernels.append(((N * e if weight else 0) + MN * e, MN * e))
    if casts:
        kernels += [(MN * e, MN * f), (MN * f, MN * e)]
    fused = (2 * MN + (N if weight else 0)) * e + (2 if fused_writes_h else 1) * MN * e
    return sum(r + w for r, w in kernels), len(kernels), fused


def traffic_casts_in_float32(M, N, dtype):
    """Counts the two casts even when they are no-ops (float32)."""
    return _traffic(M, N, dtype, casts=True)


def traffic_without_row_statistics(M, N, dtype):
    """Leaves out the [M] float32 tensors (variance, + eps, rsqrt), as chapter 1's table does."""
    return _traffic(M, N, dtype, row_stats=False)


def traffic_intermediates_in_dtype(M, N, dtype):
    """Counts the float32 intermediates at the input's element size."""
    return _traffic(M, N, dtype, f32_intermediates=False)


def traffic_fused_forgets_h(M, N, dtype):
    """The fused kernel writes only out, not the residual stream h."""
    return _traffic(M, N, dtype, fused_writes_h=False)


def traffic_forgets_weight(M, N, dtype):
    """No weight read, eager or fused."""
    return _traffic(M, N, dtype, weight=False)


# This chapter's exercises: their rows in tritonforge.exercise.registry name the planted wrong
# answers above; the generic tests over every row (stub, planted answers, solution) are in
# test_every_exercise.py.


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


def test_traffic_agrees_with_chapter_1_and_the_harness():
    """Per element, the eager RMSNorm is chapter 1's table (36 bytes in bf16, 28 in float32, in 8
    and 6 kernels); the fused chain is the harness's RMSNorm bytes plus a read of residual and a
    write of h; the planted helper with nothing switched off is the reference."""
    from tritonforge.bench import costs

    M, N = 64, 32
    for dtype, per_element, kernels in ((torch.bfloat16, 36, 8), (torch.float32, 28, 6)):
        rms = exercise.eager_rms_norm_kernels(M, N, dtype)
        assert len(rms) == kernels
        assert sum(r + w for _, r, w in rms) == per_element * M * N + 6 * 4 * M + N * costs.elem_size(dtype)
        eager, n_kernels, fused = exercise.fused_add_rms_norm_traffic_ref(M, N, dtype)
        assert fused == costs.rmsnorm_forward_bytes(M, N, costs.elem_size(dtype)) + 2 * M * N * costs.elem_size(dtype)
        assert n_kernels == kernels + 1 and (eager, n_kernels, fused) == _traffic(M, N, dtype)
