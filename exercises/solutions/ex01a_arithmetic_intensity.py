"""Solution to exercise 1a: FLOPs, bytes and arithmetic intensity (see the notebook for the
counting convention)."""

import torch


def arithmetic_intensity(op: str, shape: tuple, dtype: torch.dtype) -> tuple[int, int, float]:
    elem = torch.empty((), dtype=dtype).element_size()  # bytes per element
    if op == "rms_norm":
        M, N = shape
        flops = 4 * M * N  # square, accumulate, scale by 1/rms, scale by weight
        nbytes = (2 * M * N + N) * elem  # read x, write y, read weight once
    elif op == "matmul":
        M, N, K = shape
        flops = 2 * M * N * K  # one multiply and one add per (m, n, k)
        nbytes = (M * K + K * N + M * N) * elem  # read A and B, write C
    else:
        raise ValueError(f"unknown op {op!r}")
    return flops, nbytes, flops / nbytes
