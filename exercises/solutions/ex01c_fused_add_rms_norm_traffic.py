"""Solution to exercise 1c: the HBM traffic of residual add + RMSNorm, eager (one kernel per line
of PyTorch) and fused (one kernel), in bytes, and the eager chain's kernel count."""

import torch


def fused_add_rms_norm_traffic(M: int, N: int, dtype: torch.dtype) -> tuple[int, int, int]:
    e = torch.empty((), dtype=dtype).element_size()  # bytes per element of x, residual, weight, h, out
    f32 = 4  # the intermediates and the row statistics are float32
    MN = M * N
    casts = dtype != torch.float32  # .to() to the dtype a tensor already has launches nothing
    kernels = [
        (2 * MN * e, MN * e),  # h = x + residual: read x and residual, write h
        (MN * f32, MN * f32),  # h32.pow(2)
        (MN * f32, M * f32),  # .mean(-1, keepdim=True): writes one float32 per row
        (M * f32, M * f32),  # variance + eps
        (M * f32, M * f32),  # torch.rsqrt
        (MN * f32 + M * f32, MN * f32),  # h32 * rsqrt(...): reads the [M, 1] factor too
        (N * e + MN * e, MN * e),  # weight * y: reads the weight once
    ]
    if casts:
        kernels += [
            (MN * e, MN * f32),  # h.to(float32)
            (MN * f32, MN * e),  # y.to(dtype)
        ]
    eager_bytes = sum(read + written for read, written in kernels)
    fused_bytes = (2 * MN + N) * e + 2 * MN * e  # read x, residual (M·N each) and weight (N); write h and out
    return eager_bytes, len(kernels), fused_bytes
