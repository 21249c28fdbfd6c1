"""Exercise 6a's check (tritonforge.exercise.ch06) catches a wrong log-softmax: no max subtracted
(exp overflows near 10⁴, underflows near −10⁴), loads past the row, masked lanes loaded as 0 (for
the max and the sum, or the sum alone), the ragged last block dropped, an online sum not rescaled
or rescaled upside down, a block of −inf turned into NaN, x − (m + log s) (m + log s rounded to
float32's step at m), the softmax for its log, one row stride, no masks; exercise 6b's catches a
wrong merge of two softmax states: one side not rescaled, the factor upside down, two empty halves
turned into NaN, the weights swapped, m = m1, o not divided by s, exp(m) taken unshifted, one row
stride, no mask; exercise 6c's catches a wrong cross-entropy:
no max, the target's logit read with the row length for the row stride or from row 0,
ignore_index not handled, masked lanes adding exp(0), the max left out of logsumexp, the sign
flipped, the ragged last block dropped, no masks. Each fails its check on every seed, the
reference solutions pass."""

from __future__ import annotations

import pytest
import torch

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge import exercise
from tritonforge.exercise import ch06

import triton
import triton.language as tl

from . import notebooks

# Exercise 6a: log-softmax ---------------------------------------------------------------------


@triton.jit
def _log_softmax_body(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr, MISTAKE: tl.constexpr):
    """The right kernel (online, then a second pass) but for one mistake, chosen by MISTAKE (0: none)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    end = (N // BLOCK_N) * BLOCK_N if MISTAKE == 5 else N  # 5: whole blocks only, the ragged one dropped
    m = float("-inf")
    s = 0.0
    for start in range(0, end, BLOCK_N):
        mask = start + cols < N
        if MISTAKE == 2:  # no load mask: the last block reads past the row
            x = tl.load(x_ptr + row * x_row_stride + start + cols).to(tl.float32)
        elif MISTAKE == 3 or MISTAKE == 4:  # masked lanes load as 0
            x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        else:
            x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        if MISTAKE == 1:  # no max: s = Σ exp(x)
            s += tl.sum(tl.where(mask, tl.exp(x), 0.0), axis=0)
            m = 0.0
        else:
            if MISTAKE == 4:  # the max ignores masked lanes, the sum does not (exp(0 − m) each)
                m_new = tl.maximum(m, tl.max(tl.where(mask, x, float("-inf")), axis=0))
            else:
                m_new = tl.maximum(m, tl.max(x, axis=0))
            if MISTAKE == 10:  # no guard: a block of −inf gives exp(−inf − (−inf)) = NaN
                shift = m_new
            else:
                shift = tl.where(m_new == float("-inf"), 0.0, m_new)
            if MISTAKE == 6:  # the sum so far is not rescaled when the max grows
                s = s + tl.sum(tl.exp(x - shift), axis=0)
            elif MISTAKE == 7:  # rescaled upside down: exp(m_new − m)
                s = s * tl.exp(shift - m) + tl.sum(tl.exp(x - shift), axis=0)
            else:
                s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
            m = m_new
    log_s = tl.log(s)
    for start in range(0, end, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        if MISTAKE == 11:  # m + log(s) first: it rounds to float32's step at m, (x − m) is exact
            out = x - (m + log_s)
        else:
            out = (x - m) - log_s
        if MISTAKE == 8:  # the softmax, not its log
            out = tl.exp(out)
        tl.store(out_ptr + row * (x_row_stride if MISTAKE == 9 else out_row_stride) + start + cols, out, mask=mask)


@triton.jit
def log_softmax_without_max(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _log_softmax_body(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N, 1)


@triton.jit
def log_softmax_reads_past_the_row(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _log_softmax_body(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N, 2)


@triton.jit
def log_softmax_masked_lanes_zero(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _log_softmax_body(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N, 3)


@triton.jit
def log_softmax_sum_counts_masked_lanes(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _log_softmax_body(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N, 4)


@triton.jit
def log_softmax_drops_ragged_block(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _log_softmax_body(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N, 5)


@triton.jit
def log_softmax_sum_not_rescaled(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _log_softmax_body(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N, 6)


@triton.jit
def log_softmax_rescale_upside_down(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _log_softmax_body(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N, 7)


@triton.jit
def log_softmax_stores_softmax(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _log_softmax_body(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N, 8)


@triton.jit
def log_softmax_one_row_stride(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _log_softmax_body(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N, 9)


@triton.jit
def log_softmax_nan_after_masked_block(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _log_softmax_body(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N, 10)


@triton.jit
def log_softmax_lse_rounded(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _log_softmax_body(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N, 11)


@triton.jit
def log_softmax_no_masks(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    m = float("-inf")
    s = 0.0
    for start in range(0, N, BLOCK_N):  # every block whole: the last one runs past the row
        x = tl.load(x_ptr + row * x_row_stride + start + cols).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for start in range(0, N, BLOCK_N):
        x = tl.load(x_ptr + row * x_row_stride + start + cols).to(tl.float32)
        tl.store(out_ptr + row * out_row_stride + start + cols, (x - m) - tl.log(s))


# Exercise 6b: merging two softmax states ------------------------------------------------------


@triton.jit
def _merge_body(
    m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D,
    BLOCK_D: tl.constexpr, MISTAKE: tl.constexpr,
):  # fmt: skip
    """The right kernel but for one mistake, chosen by MISTAKE (0: none)."""
    row = tl.program_id(0)
    m1 = tl.load(m1_ptr + row)
    s1 = tl.load(s1_ptr + row)
    m2 = tl.load(m2_ptr + row)
    s2 = tl.load(s2_ptr + row)
    m = m1 if MISTAKE == 5 else tl.maximum(m1, m2)  # 5: the first half's max taken for the row's
    shift = m if MISTAKE == 3 else tl.where(m == float("-inf"), 0.0, m)  # 3: exp(−inf − (−inf)) = NaN
    if MISTAKE == 1:  # the first half not rescaled
        w1 = s1
    elif MISTAKE == 2:  # upside down: exp(m − m1)
        w1 = s1 * tl.exp(shift - m1)
    elif MISTAKE == 7:  # exp(m1) unshifted, then exp(−m): exp(m1) overflows for m1 > 88.7
        w1 = s1 * tl.exp(m1) * tl.exp(-shift)
    else:
        w1 = s1 * tl.exp(m1 - shift)
    if MISTAKE == 2:
        w2 = s2 * tl.exp(shift - m2)
    elif MISTAKE == 7:
        w2 = s2 * tl.exp(m2) * tl.exp(-shift)
    else:
        w2 = s2 * tl.exp(m2 - shift)
    s = w1 + w2
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    if MISTAKE == 9:
        o1 = tl.load(o1_ptr + row * o1_row_stride + cols).to(tl.float32)
        o2 = tl.load(o2_ptr + row * o2_row_stride + cols).to(tl.float32)
    else:
        o1 = tl.load(o1_ptr + row * o1_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        o2 = tl.load(o2_ptr + row * (o1_row_stride if MISTAKE == 8 else o2_row_stride) + cols, mask=mask, other=0.0).to(tl.float32)
    if MISTAKE == 4:  # the weights swapped
        acc = w2 * o1 + w1 * o2
    else:
        acc = w1 * o1 + w2 * o2
    if MISTAKE == 6:  # not divided by s
        o = acc
    elif MISTAKE == 3:
        o = acc / s
    else:
        o = acc / tl.where(s > 0, s, 1.0)
    tl.store(m_ptr + row, m)
    tl.store(s_ptr + row, s)
    if MISTAKE == 9:
        tl.store(o_ptr + row * o_row_stride + cols, o)
    else:
        tl.store(o_ptr + row * (o1_row_stride if MISTAKE == 8 else o_row_stride) + cols, o, mask=mask)


@triton.jit
def merge_first_side_not_rescaled(
    m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D: tl.constexpr
):  # fmt: skip
    _merge_body(m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D, 1)


@triton.jit
def merge_rescale_upside_down(
    m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D: tl.constexpr
):  # fmt: skip
    _merge_body(m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D, 2)


@triton.jit
def merge_nan_when_both_empty(
    m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D: tl.constexpr
):  # fmt: skip
    _merge_body(m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D, 3)


@triton.jit
def merge_weights_swapped(
    m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D: tl.constexpr
):  # fmt: skip
    _merge_body(m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D, 4)


@triton.jit
def merge_max_is_m1(
    m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D: tl.constexpr
):  # fmt: skip
    _merge_body(m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D, 5)


@triton.jit
def merge_o_not_divided(
    m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D: tl.constexpr
):  # fmt: skip
    _merge_body(m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D, 6)


@triton.jit
def merge_exp_unshifted(
    m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D: tl.constexpr
):  # fmt: skip
    _merge_body(m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D, 7)


@triton.jit
def merge_one_row_stride(
    m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D: tl.constexpr
):  # fmt: skip
    _merge_body(m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D, 8)


@triton.jit
def merge_no_mask(
    m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D: tl.constexpr
):  # fmt: skip
    _merge_body(m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D, BLOCK_D, 9)


# Exercise 6c: cross-entropy -------------------------------------------------------------------


@triton.jit
def _cross_entropy_body(
    logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N: tl.constexpr, MISTAKE: tl.constexpr
):  # fmt: skip
    """The right kernel but for one mistake, chosen by MISTAKE (0: none)."""
    row = tl.program_id(0)
    target = tl.load(target_ptr + row)
    row_ptr = logits_ptr + row * logits_row_stride
    cols = tl.arange(0, BLOCK_N)
    end = (N // BLOCK_N) * BLOCK_N if MISTAKE == 8 else N  # 8: the ragged last block dropped
    m = float("-inf")
    s = 0.0
    for start in range(0, end, BLOCK_N):
        mask = start + cols < N
        if MISTAKE == 9:
            x = tl.load(row_ptr + start + cols).to(tl.float32)
        elif MISTAKE == 5:  # masked lanes load as 0 and add exp(0 − m) each
            x = tl.load(row_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        else:
            x = tl.load(row_ptr + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        if MISTAKE == 1:  # no max
            s += tl.sum(tl.where(mask, tl.exp(x), 0.0), axis=0)
            m = 0.0
        else:
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
    live = target != ignore_index
    if MISTAKE == 2:  # the row length taken for the row stride
        x_target = tl.load(logits_ptr + row * N + target, mask=live, other=0.0).to(tl.float32)
    elif MISTAKE == 3:  # the target's logit read from row 0
        x_target = tl.load(logits_ptr + target, mask=live, other=0.0).to(tl.float32)
    elif MISTAKE == 4:  # ignore_index not handled: x[row, −100] read, the loss kept
        x_target = tl.load(row_ptr + target).to(tl.float32)
    else:
        x_target = tl.load(row_ptr + target, mask=live, other=0.0).to(tl.float32)
    if MISTAKE == 6:  # the max left out of logsumexp
        loss = tl.log(s) - x_target
    elif MISTAKE == 7:  # the sign flipped
        loss = x_target - (m + tl.log(s))
    else:
        loss = (m - x_target) + tl.log(s)
    if MISTAKE != 4:
        loss = tl.where(live, loss, 0.0)
    tl.store(loss_ptr + row, loss)


@triton.jit
def cross_entropy_without_max(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N: tl.constexpr):
    _cross_entropy_body(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N, 1)


@triton.jit
def cross_entropy_target_with_row_length(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N: tl.constexpr):
    _cross_entropy_body(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N, 2)


@triton.jit
def cross_entropy_target_from_row_0(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N: tl.constexpr):
    _cross_entropy_body(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N, 3)


@triton.jit
def cross_entropy_ignore_index_not_handled(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N: tl.constexpr):
    _cross_entropy_body(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N, 4)


@triton.jit
def cross_entropy_masked_lanes_add_one(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N: tl.constexpr):
    _cross_entropy_body(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N, 5)


@triton.jit
def cross_entropy_max_left_out(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N: tl.constexpr):
    _cross_entropy_body(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N, 6)


@triton.jit
def cross_entropy_sign_flipped(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N: tl.constexpr):
    _cross_entropy_body(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N, 7)


@triton.jit
def cross_entropy_drops_ragged_block(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N: tl.constexpr):
    _cross_entropy_body(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N, 8)


@triton.jit
def cross_entropy_no_masks(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N: tl.constexpr):
    _cross_entropy_body(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N, 9)


STEMS = notebooks.stems(6)
"""This chapter's exercises. Their rows in ``tritonforge.exercise.registry`` name the planted wrong
answers above; the generic tests over every row (stub, planted answers, solution) are in
test_every_exercise.py."""


def test_references_agree_with_pytorch():
    """6a's reference is torch.log_softmax; 6b's merge of the two halves' states is the state of
    the whole row (o = softmax(x) @ v), with an empty half changing nothing and two empty halves
    giving (−inf, 0, 0); 6c's is F.cross_entropy, 0 where the target is −100."""
    gen = torch.Generator().manual_seed(0)
    x = 3 * torch.randn(5, 37, generator=gen, dtype=torch.float64)
    v = torch.randn(37, 6, generator=gen, dtype=torch.float64)
    assert torch.allclose(torch.exp(ch06.log_softmax_ref(x)).sum(dim=1), torch.ones(5, dtype=torch.float64), rtol=0, atol=1e-13)
    whole = ch06.softmax_state(x, v)
    merged = ch06.merge_states_ref(*ch06.softmax_state(x[:, :11], v[:11]), *ch06.softmax_state(x[:, 11:], v[11:]))
    for got, want in zip(merged, whole):
        assert torch.allclose(got, want, rtol=1e-13, atol=1e-13)
    assert torch.allclose(whole[2], torch.softmax(x, dim=1) @ v, rtol=1e-13, atol=1e-13)
    empty = ch06.softmax_state(x[:, :0], v[:0])
    for got, want in zip(ch06.merge_states_ref(*empty, *whole), whole):
        assert torch.equal(got, want)
    m, s, o = ch06.merge_states_ref(*empty, *empty)
    assert bool(torch.isneginf(m).all()) and not s.any() and not o.any()
    target = torch.tensor([0, 36, -100, 5, 17])
    loss = ch06.cross_entropy_ref(x, target)
    lse = torch.logsumexp(x, dim=1)
    want = torch.where(target == -100, torch.zeros(5, dtype=torch.float64), lse - x[torch.arange(5), target.clamp(min=0)])
    assert torch.allclose(loss, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(
    "check, wrong, cases",
    [
        # exp overflows (or underflows to 0) only where the values are far from 0
        (exercise.check_log_softmax, log_softmax_without_max, ("values near +10⁴", "values near −10⁴", "values near −10⁷")),
        (exercise.check_log_softmax, log_softmax_nan_after_masked_block, ("first 40 columns −inf", "−inf prefixes")),
        (exercise.check_merge_states, merge_nan_when_both_empty, ("both halves empty",)),
        (exercise.check_merge_states, merge_exp_unshifted, ("logits near 100",)),
        (exercise.check_cross_entropy, cross_entropy_without_max, ("logits near +200", "logits near −200")),
        (exercise.check_cross_entropy, cross_entropy_target_with_row_length, ("padded vocabulary",)),
        (exercise.check_cross_entropy, cross_entropy_ignore_index_not_handled, ("targets = -100",)),
    ],
)
def test_a_mistake_that_is_right_elsewhere_fails_exactly_the_cases_built_for_it(check, wrong, cases):
    """These mistakes give the right answer on ordinary rows: each fails the cases built for it,
    and only those, on every seed."""
    for seed in notebooks.PLANTED_SEEDS:
        report = check(wrong, seed=seed)
        failed = {r.case for r in report.rows if not r.passed}
        assert failed == {r.case for r in report.rows if r.case.startswith(cases)}, str(report)


def test_the_online_rescale_fails_the_rising_rows_on_every_seed():
    """Rows that rise along their length raise the max in every block: an online sum that is not
    rescaled, or rescaled upside down, is wrong there whatever the seed."""
    for wrong in (log_softmax_sum_not_rescaled, log_softmax_rescale_upside_down):
        for seed in notebooks.PLANTED_SEEDS:
            report = exercise.check_log_softmax(wrong, seed=seed)
            assert any(r.case.startswith("rising rows") for r in report.rows if not r.passed), str(report)


@pytest.mark.parametrize(
    "check, wrong, hint",
    [
        (exercise.check_log_softmax, log_softmax_without_max, "subtract the row's maximum before exp"),
        (exercise.check_log_softmax, log_softmax_reads_past_the_row, "read past the end of a row"),
        (exercise.check_log_softmax, log_softmax_stores_softmax, "this is the softmax"),
        (exercise.check_log_softmax, log_softmax_nan_after_masked_block, "shift by 0 while the running max is still −inf"),
        (exercise.check_log_softmax, log_softmax_nan_after_masked_block, "likely a missing −inf guard"),
        (exercise.check_log_softmax, log_softmax_sum_not_rescaled, "running sum not rescaled when the max grows"),
        (exercise.check_log_softmax, log_softmax_lse_rounded, "large-magnitude rows lose precision"),
        (exercise.check_log_softmax, log_softmax_lse_rounded, "compute (x − m) − log(s)"),
        (exercise.check_merge_states, merge_nan_when_both_empty, "both halves are empty"),
        (exercise.check_merge_states, merge_first_side_not_rescaled, "one side was not rescaled"),
        (exercise.check_merge_states, merge_rescale_upside_down, "upside down"),
        (exercise.check_merge_states, merge_weights_swapped, "the weights are swapped"),
        (exercise.check_merge_states, merge_o_not_divided, "o is not divided by s"),
        (exercise.check_merge_states, merge_exp_unshifted, "exp(m_j) overflowed"),
        (exercise.check_merge_states, merge_max_is_m1, "expected max(m1, m2)"),
        (exercise.check_cross_entropy, cross_entropy_without_max, "subtract the row's maximum m before exp"),
        (exercise.check_cross_entropy, cross_entropy_ignore_index_not_handled, "their loss is 0"),
        (exercise.check_cross_entropy, cross_entropy_sign_flipped, "the sign is flipped"),
        (exercise.check_cross_entropy, cross_entropy_max_left_out, "the max is missing from logsumexp"),
        (exercise.check_cross_entropy, cross_entropy_target_with_row_length, "the wrong address for x[target]"),
    ],
)
def test_the_verdict_names_the_mistake(check, wrong, hint):
    report = check(wrong)
    failed = [r for r in report.rows if not r.passed and not r.skipped]
    assert failed and any(hint in r.detail for r in failed), str(report)


@pytest.mark.parametrize(
    "wrong, case, named",
    [
        (log_softmax_nan_after_masked_block, "−inf prefixes", "NaN in the rows whose first block of 32 is all −inf (rows 2, 3 and 4 of 5)"),
        (log_softmax_sum_not_rescaled, "rising rows", "running sum not rescaled when the max grows"),
        (log_softmax_lse_rounded, "values near −10⁷", "large-magnitude rows lose precision"),
    ],
)
def test_ex06a_a_case_built_for_the_mistake_fails_it_by_a_wide_margin_and_names_it(wrong, case, named):
    """On every seed the case built for the mistake fails it far outside the tolerance (NaN where
    the answer is finite, or an error at least 1000 times the budget), and its verdict names it."""
    for seed in notebooks.PLANTED_SEEDS:
        row, budget = notebooks.run_one_case(notebooks.NOTEBOOKS["ex06a_log_softmax"], wrong, case, seed)
        assert not row.passed and named in row.detail, row.detail
        assert row.error is not None and (row.error != row.error or row.error >= 1000 * budget), (seed, row.error, budget)


def test_ex06a_draws_the_output_of_a_failed_case():
    report = exercise.check_log_softmax(log_softmax_drops_ragged_block)
    pictured = [r for r in report.rows if r.picture and not r.passed]
    assert pictured and all("?" in r.picture for r in pictured[:2]), str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("stem", STEMS)
def test_gpu_chapter_6_checks_on_compiled_kernels(stem, tmp_path):
    notebooks.assert_gpu_checks_on_compiled_kernels(stem, tmp_path)
