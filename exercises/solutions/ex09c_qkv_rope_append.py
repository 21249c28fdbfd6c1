"""Solution to exercise 9c: split a fused QKV projection, rotate q and k, append k and v to the cache.

Program ``(i, j)`` takes rows ``n = i·BLOCK_N … i·BLOCK_N + BLOCK_N − 1`` of sequence ``b`` with
``j = b·(Hq + Hk) + h``. Row ``n`` of ``qkv`` holds the query heads, then the key heads, then the
value heads, ``D = 2·HALF`` columns each. For ``h < Hq`` the program rotates query head ``h`` into
``q_out``; otherwise, with ``g = h − Hq``, it rotates key head ``g`` (columns ``(Hq + g)·D …``)
into the key cache and copies value head ``g`` (columns ``(Hq + Hk + g)·D …``) into the value
cache. Each sequence's rows sit at positions ``positions[b] + n``: that is the table row of the
rotation and the cache row of the write. Loads and stores are masked with ``n < N``; the math is
float32, rounded once at each store.
"""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def _rotate_into(
    x_rows,  # [BLOCK_N, 1] pointers to column 0 of one head in each row
    out_rows,  # [BLOCK_N, 1] pointers to column 0 of the output rows
    cos_ptr, sin_ptr,
    slots,  # [BLOCK_N] positions of the rows: their table rows
    mask,  # [BLOCK_N, 1]
    HALF: tl.constexpr,
):  # fmt: skip
    cols = tl.arange(0, HALF)[None, :]
    x1 = tl.load(x_rows + cols, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_rows + HALF + cols, mask=mask, other=0.0).to(tl.float32)
    table = slots[:, None] * (2 * HALF) + cols
    cos = tl.load(cos_ptr + table, mask=mask, other=0.0).to(tl.float32)
    sin = tl.load(sin_ptr + table, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_rows + cols, (x1 * cos - x2 * sin).to(out_rows.dtype.element_ty), mask=mask)
    tl.store(out_rows + HALF + cols, (x2 * cos + x1 * sin).to(out_rows.dtype.element_ty), mask=mask)


@triton.jit
def qkv_rope_append_kernel(
    qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr,
    stride_xb, stride_xn,
    stride_qb, stride_qh, stride_qn,
    stride_cb, stride_ch, stride_cp,
    Hq, Hk, N,
    HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    b = tl.program_id(1) // (Hq + Hk)
    h = tl.program_id(1) % (Hq + Hk)
    mask = (rows < N)[:, None]
    slots = tl.load(positions_ptr + b) + rows  # the rows' positions: table rows and cache rows
    x_rows = qkv_ptr + b * stride_xb + rows[:, None] * stride_xn
    if h < Hq:  # a query head: rotated into q_out
        out_rows = q_out_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qn
        _rotate_into(x_rows + h * (2 * HALF), out_rows, cos_ptr, sin_ptr, slots, mask, HALF)
    else:  # key and value head g = h − Hq: k rotated, v copied, both at cache row positions[b] + n
        g = h - Hq
        cache_rows = b * stride_cb + g * stride_ch + slots[:, None] * stride_cp
        _rotate_into(x_rows + (Hq + g) * (2 * HALF), k_cache_ptr + cache_rows, cos_ptr, sin_ptr, slots, mask, HALF)
        cols = tl.arange(0, 2 * HALF)[None, :]
        v = tl.load(x_rows + (Hq + Hk + g) * (2 * HALF) + cols, mask=mask)
        tl.store(v_cache_ptr + cache_rows + cols, v, mask=mask)
