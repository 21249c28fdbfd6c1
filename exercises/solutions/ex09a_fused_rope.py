"""Solution to exercise 9a: rotary position embeddings on q and k in one launch.

Program ``(i, j)`` takes positions ``i·BLOCK_N … i·BLOCK_N + BLOCK_N − 1`` of one head: with
``j = b·(Hq + Hk) + h``, query head ``h`` of sequence ``b`` when ``h < Hq``, key head ``h − Hq``
otherwise. Each row is split into its halves ``x1 = x[:HALF]``, ``x2 = x[HALF:]`` and rotated
pair by pair (rotate_half form, as Hugging Face's Llama):

    y1 = x1·cos − x2·sin,    y2 = x2·cos + x1·sin,

with ``cos, sin`` the table row of the position, ``offset + n``. In Hugging Face's layout the
table's two halves are equal, so the first half is read once for both. Loads and stores are
masked with ``n < N``; the math is float32, rounded once at each store.
"""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def _rotate_rows(
    x_ptr,  # *x: the first row of one head; position n at x_ptr + n·stride_xn, unit stride along D
    out_ptr,  # *out: the same head of the output
    cos_ptr,  # *cos [P, 2·HALF], contiguous
    sin_ptr,  # *sin [P, 2·HALF], contiguous
    stride_xn,
    stride_on,
    rows,  # [BLOCK_N] positions of this program, from 0
    N,
    offset,  # the position of row 0
    HALF: tl.constexpr,
):
    cols = tl.arange(0, HALF)
    mask = rows[:, None] < N
    x_rows = x_ptr + rows[:, None] * stride_xn + cols[None, :]
    x1 = tl.load(x_rows, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_rows + HALF, mask=mask, other=0.0).to(tl.float32)
    table = (offset + rows)[:, None] * (2 * HALF) + cols[None, :]
    cos = tl.load(cos_ptr + table, mask=mask, other=0.0).to(tl.float32)
    sin = tl.load(sin_ptr + table, mask=mask, other=0.0).to(tl.float32)
    out_rows = out_ptr + rows[:, None] * stride_on + cols[None, :]
    tl.store(out_rows, (x1 * cos - x2 * sin).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_rows + HALF, (x2 * cos + x1 * sin).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rope_kernel(
    q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr,
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_qob, stride_qoh, stride_qon,
    stride_kob, stride_koh, stride_kon,
    Hq, Hk, N, offset,
    HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    b = tl.program_id(1) // (Hq + Hk)
    h = tl.program_id(1) % (Hq + Hk)
    if h < Hq:  # a query head
        _rotate_rows(
            q_ptr + b * stride_qb + h * stride_qh, q_out_ptr + b * stride_qob + h * stride_qoh, cos_ptr, sin_ptr,
            stride_qn, stride_qon, rows, N, offset, HALF,
        )  # fmt: skip
    else:  # key head h − Hq
        _rotate_rows(
            k_ptr + b * stride_kb + (h - Hq) * stride_kh, k_out_ptr + b * stride_kob + (h - Hq) * stride_koh, cos_ptr, sin_ptr,
            stride_kn, stride_kon, rows, N, offset, HALF,
        )  # fmt: skip
