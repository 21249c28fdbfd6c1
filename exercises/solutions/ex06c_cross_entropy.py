"""Solution to exercise 6c: softmax + cross-entropy loss fused, one row of logits per program.

``loss = logsumexp(x) − x[target]`` with ``logsumexp(x) = m + log Σ exp(x − m)``: the row is walked
once in blocks of ``BLOCK_N`` logits with the online normalizer (running max ``m``, running sum
``s`` rescaled by ``exp(m − m_new)`` when a block raises the max; masked lanes load as ``−inf`` and
add 0), and the target's logit is one scalar load at ``row·row_stride + target``. A row whose target
is ``ignore_index`` (a padding token) gets loss 0 and reads nothing. The softmax itself is never
stored: a vocabulary-length row is read once and one float32 number is written.
"""

import tritonforge  # noqa: F401  (first: it switches Triton's interpreter on when there is no GPU)

import triton
import triton.language as tl


@triton.jit
def cross_entropy_kernel(
    logits_ptr,  # *logits [M, N]: row stride logits_row_stride, unit column stride
    target_ptr,  # *target [M] int64: the right class of each row, or ignore_index
    loss_ptr,  # *loss [M] float32: out
    logits_row_stride,
    N,  # vocabulary size: any, larger or smaller than BLOCK_N
    ignore_index,  # a target that means "no loss for this row" (−100)
    BLOCK_N: tl.constexpr,  # logits per step of the loop (fixed by the launcher)
):
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(target_ptr + row)
    row_ptr = logits_ptr + row * logits_row_stride
    loss = 0.0
    if target != ignore_index:
        cols = tl.arange(0, BLOCK_N)
        m = float("-inf")
        s = 0.0
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(row_ptr + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))  # finite from the first block on (N ≥ 1)
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
        x_target = tl.load(row_ptr + target).to(tl.float32)
        loss = (m - x_target) + tl.log(s)  # m − x[target] first: exact, where m + log(s) would round
    tl.store(loss_ptr + row, loss)
