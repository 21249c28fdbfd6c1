"""The rotation of one block of positions of one head, the body both rotary kernels share:
:mod:`tritonforge.ops.rope` (one tensor, ``tfg.rope``) and :mod:`tritonforge.ops.rope_pair`
(queries and keys in one launch, ``tfg.rope_qk``). The math is in :mod:`tritonforge.ops.rope`'s
docstring."""

from __future__ import annotations

import torch

from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import cast_for_store

ROPE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TILE_ELEMENTS = 2048
"""Pairs one program rotates: ``BLOCK_N`` positions times the half head dimension."""


@triton.jit
def rotate_block(x_ptr, y_ptr, cos_ptr, sin_ptr, b, h, H, N, HALF, x_sb, x_sh, x_sn, c_sb, c_sn, s_sb, s_sn,
            BLOCK_N: tl.constexpr, HALF_P2: tl.constexpr, BACKWARD: tl.constexpr, ACC_DTYPE: tl.constexpr,
            ROUND_BF16: tl.constexpr):  # fmt: skip
    """BLOCK_N rows of head h of batch b: x (strides x_sb, x_sh, x_sn, 1) rotated into y, a
    contiguous ``[B, H, N, D]``; cos and sin ``[B or 1, N, D]`` (batch stride 0: one table)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, HALF_P2)
    mask = (rows < N)[:, None] & (cols < HALF)[None, :]
    x1_ptrs = x_ptr + b * x_sb + h * x_sh + rows.to(tl.int64)[:, None] * x_sn + cols[None, :]
    x1 = tl.load(x1_ptrs, mask=mask, other=0.0).to(ACC_DTYPE)
    x2 = tl.load(x1_ptrs + HALF, mask=mask, other=0.0).to(ACC_DTYPE)
    c_ptrs = cos_ptr + b * c_sb + rows[:, None] * c_sn + cols[None, :]
    s_ptrs = sin_ptr + b * s_sb + rows[:, None] * s_sn + cols[None, :]
    c1 = tl.load(c_ptrs, mask=mask, other=0.0).to(ACC_DTYPE)
    c2 = tl.load(c_ptrs + HALF, mask=mask, other=0.0).to(ACC_DTYPE)
    s1 = tl.load(s_ptrs, mask=mask, other=0.0).to(ACC_DTYPE)
    s2 = tl.load(s_ptrs + HALF, mask=mask, other=0.0).to(ACC_DTYPE)
    if BACKWARD:
        y1 = x1 * c1 + x2 * s2
        y2 = x2 * c2 - x1 * s1
    else:
        y1 = x1 * c1 - x2 * s1
        y2 = x2 * c2 + x1 * s2
    y1_ptrs = y_ptr + ((b * H + h) * N + rows[:, None]) * (2 * HALF) + cols[None, :]
    tl.store(y1_ptrs, cast_for_store(y1, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)
    tl.store(y1_ptrs + HALF, cast_for_store(y2, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)
