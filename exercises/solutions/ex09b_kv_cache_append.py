"""Solution to exercise 9b: append new keys and values to a static KV cache, per sequence.

Program ``(i, j)`` takes rows ``i·BLOCK_N … i·BLOCK_N + BLOCK_N − 1`` of one head: with
``j = b·Hk + h``, head ``h`` of sequence ``b``. It loads the sequence's two numbers, where its
filled prefix ends (``positions[b]``) and how many of the ``N`` new rows are real
(``lengths[b]``; the rest are padding), and copies row ``n`` of ``k_new`` and ``v_new`` to cache
row ``positions[b] + n`` for ``n < lengths[b]``. One mask serves the loads and the stores: it
keeps the padding rows and the rows past ``N`` out of the cache, and the reads inside the new
rows. Every tensor is addressed with its own strides.
"""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def kv_append_kernel(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_kcb, stride_kch, stride_kcp,
    stride_vcb, stride_vch, stride_vcp,
    Hk, N,
    D: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, D)
    b = tl.program_id(1) // Hk
    h = tl.program_id(1) % Hk
    start = tl.load(positions_ptr + b)  # the sequence's filled prefix: its first new row goes here
    count = tl.load(lengths_ptr + b)  # its real new rows (<= N); the rest are padding
    mask = (rows < count)[:, None]
    k = tl.load(k_ptr + b * stride_kb + h * stride_kh + rows[:, None] * stride_kn + cols[None, :], mask=mask)
    v = tl.load(v_ptr + b * stride_vb + h * stride_vh + rows[:, None] * stride_vn + cols[None, :], mask=mask)
    slots = (start + rows)[:, None]
    tl.store(k_cache_ptr + b * stride_kcb + h * stride_kch + slots * stride_kcp + cols[None, :], k, mask=mask)
    tl.store(v_cache_ptr + b * stride_vcb + h * stride_vch + slots * stride_vcp + cols[None, :], v, mask=mask)
