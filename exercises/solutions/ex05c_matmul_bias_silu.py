"""Solution to exercise 5c: ``out = silu(x @ w + b)`` as one tiled matmul with a fused epilogue.

Program ``(pid_m, pid_n)`` owns the ``[BLOCK_M, BLOCK_N]`` tile of ``out`` at rows
``pid_m * BLOCK_M ...`` and columns ``pid_n * BLOCK_N ...``. It walks ``K`` in slices of
``BLOCK_K``: loads a ``[BLOCK_M, BLOCK_K]`` tile of ``x`` and a ``[BLOCK_K, BLOCK_N]`` tile of
``w`` (masked at the edges of ``M``, ``N`` and, in the last slice, ``K``: masked elements load as
0 and add nothing) and accumulates their product in float32. The epilogue adds ``b`` (one value
per column, the same for every row), applies ``silu(z) = z * sigmoid(z)`` and stores the tile:
``x @ w`` never goes to memory.
"""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def matmul_bias_silu_kernel(
    x_ptr,  # *x [M, K], any strides
    w_ptr,  # *w [K, N], any strides (e.g. an nn.Linear weight [N, K], transposed)
    b_ptr,  # *b [N], unit stride
    out_ptr,  # *out [M, N]: out, any strides, x's dtype
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wk,
    stride_wn,
    stride_om,
    stride_on,
    BLOCK_M: tl.constexpr,  # rows of a tile (32)
    BLOCK_N: tl.constexpr,  # columns of a tile (16)
    BLOCK_K: tl.constexpr,  # the slice of K per step (16)
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N]
    ks = tl.arange(0, BLOCK_K)  # [BLOCK_K]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # float32 whatever the inputs' dtype
    for k0 in range(0, K, BLOCK_K):
        k = k0 + ks
        x_mask = (rows[:, None] < M) & (k[None, :] < K)  # [BLOCK_M, BLOCK_K]: the last slice is ragged
        w_mask = (k[:, None] < K) & (cols[None, :] < N)  # [BLOCK_K, BLOCK_N]
        x = tl.load(x_ptr + rows[:, None] * stride_xm + k[None, :] * stride_xk, mask=x_mask, other=0.0)
        w = tl.load(w_ptr + k[:, None] * stride_wk + cols[None, :] * stride_wn, mask=w_mask, other=0.0)
        acc = tl.dot(x, w, acc, input_precision="ieee")  # "ieee": float32 stays float32 on tensor cores (no TF32)
    b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)  # [BLOCK_N]: one per column
    z = acc + b[None, :]
    out = z * (1.0 / (1.0 + tl.exp(-z)))  # silu
    out_mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, out, mask=out_mask)
