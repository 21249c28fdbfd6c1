"""Solution to exercise 1b: the roofline's time floor on a datasheet, and which roof sets it."""

import torch

from tritonforge.book import roofline


def roofline_prediction(device: str, kind: str, flops: int, nbytes: int, dtype: torch.dtype) -> tuple[float, str]:
    spec = roofline.DEVICES[device]
    if kind == "matmul" and dtype == torch.float16:
        tflops = spec.fp16_tensor_tflops  # tensor cores
    elif kind == "matmul" and dtype == torch.bfloat16:
        tflops = spec.bf16_tensor_tflops  # tensor cores (None on a T4: no bf16)
    else:
        tflops = spec.fp32_tflops  # elementwise/reduction ops compute in float32 on the CUDA cores; so does a float32 matmul (TF32 off)
    memory_us = nbytes / (spec.hbm_gbps * 1e9) * 1e6  # GB/s are 1e9 bytes per second
    math_us = flops / (tflops * 1e12) * 1e6
    bound = "memory-bound" if memory_us >= math_us else "compute-bound"
    return max(memory_us, math_us), bound  # the two run at the same time: the slower one sets the floor
