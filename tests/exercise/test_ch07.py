"""Exercise 7a's check (tritonforge.exercise.ch07) catches a wrong soft-capped attention: tanh from
exp(2x) (overflows for scores near ±3000), the cap taken after the max is subtracted, before the
scale, without the division inside tanh, tanh's sign lost, the key tail masked before the cap
(cap·tanh(−inf) = −cap lets it back in); exercise 7b's catches a wrong ALiBi: the bias's sign
flipped, the causal mask aligned top left, the slope of the wrong head (2^(−8h/H)) or of
program_id(1) (which counts the batch too), the bias added before the scale, no causal mask;
exercise 7c's catches a wrong sliding window: no lower loop bound (blocks before every window
loaded: NaN there), the lower bound not clamped at key 0, one key too many, the window aligned
top left, no shift for a row whose max is still −inf, the window masked in the first block only,
the lower bound rounded up; exercise 7d's catches a wrong preprocess of the backward: δ without
− dlse or with + dlse, lse2 in natural-log units or times ln 2, −inf kept for a query that sees no
key, no mask on the rows; exercise 7e's catches a wrong dK/dV loop: exp where exp2 belongs, dk
without sm_scale or scaled by qk_scale, dS without − δ, δ broadcast along the keys, dk from P, the
query tail loaded without a mask, the key tail stored without one. Each fails its check on every
seed (each by a wide margin, or with NaN or a write where no output lies), with a verdict that
names it; the reference solutions pass."""

from __future__ import annotations

import math

import pytest
import torch

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge import exercise
from tritonforge.exercise import ch07

import triton
import triton.language as tl

from . import notebooks

# constexpr: a compiled kernel may read a module global only if it is a tl.constexpr
SOFTCAP, ALIBI, WINDOW = tl.constexpr(1), tl.constexpr(2), tl.constexpr(3)


@triton.jit
def _attention_body(
    q_ptr, k_ptr, v_ptr, out_ptr,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
    H, Nq, Nk, sm_scale, extra,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KIND: tl.constexpr, MISTAKE: tl.constexpr,
):  # fmt: skip
    """The right kernel of exercise KIND (1: soft-cap ``extra``, 2: ALiBi, 3: window ``extra``) but
    for one mistake, chosen by MISTAKE (0: none)."""
    start_m = tl.program_id(0) * BLOCK_M
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_mask = offs_m[:, None] < Nq
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :], mask=q_mask, other=0.0)
    q = q.to(tl.float32)
    i_hat = offs_m[:, None] + Nk - Nq
    if MISTAKE == 22:  # 7b: the causal mask aligned top left
        i_mask = offs_m[:, None]
    else:
        i_mask = i_hat
    if MISTAKE == 23:  # 7b: 2^(−8h/H), one head off
        slope = tl.exp2(-8.0 * h.to(tl.float32) / H)
    elif MISTAKE == 24:  # 7b: the slope of program_id(1) = b·H + h
        slope = tl.exp2(-8.0 * (tl.program_id(1) + 1).to(tl.float32) / H)
    else:
        slope = tl.exp2(-8.0 * (h + 1).to(tl.float32) / H)
    lo = 0
    hi = Nk
    if KIND == WINDOW:
        hi = tl.minimum(Nk, start_m + BLOCK_M + Nk - Nq)
        if MISTAKE == 31:  # no lower bound: every block from key 0, the mask alone keeps the window
            lo = 0
        elif MISTAKE == 32:  # not clamped: negative for windows that start before key 0
            lo = start_m + Nk - Nq - extra + 1
        elif MISTAKE == 34:  # aligned top left (from i, not î), in the bound as in the mask
            lo = tl.maximum(start_m - extra + 1, 0) // BLOCK_N * BLOCK_N
        elif MISTAKE == 37:  # rounded up: the block holding the first window key is skipped
            lo = tl.cdiv(tl.maximum(start_m + Nk - Nq - extra + 1, 0), BLOCK_N) * BLOCK_N
        else:
            lo = tl.maximum(start_m + Nk - Nq - extra + 1, 0) // BLOCK_N * BLOCK_N
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = offs_n[:, None] < Nk
        k = tl.load(k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
        k = k.to(tl.float32)
        v = v.to(tl.float32)
        if MISTAKE == 13:  # 7a: capped before the scale
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * sm_scale
        if MISTAKE == 16:  # 7a: the key tail masked before the cap: cap·tanh(−inf) = −cap
            s = tl.where(offs_n[None, :] < Nk, s, float("-inf"))
        if KIND == SOFTCAP and MISTAKE != 12:
            x = s / extra
            if MISTAKE == 14:  # 7a: cap·tanh(s), no division inside
                x = s
            if MISTAKE == 11:  # 7a: the textbook tanh, (e^{2x} − 1)/(e^{2x} + 1): inf/inf past x = 44
                e2 = tl.exp(2.0 * x)
                t = (e2 - 1.0) / (e2 + 1.0)
            else:
                e = tl.exp(-2.0 * tl.abs(x))
                t = (1.0 - e) / (1.0 + e)
                if MISTAKE != 15:  # 7a: the sign lost, tanh(|x|)
                    t = tl.where(x < 0, -t, t)
            s = extra * t
            if MISTAKE == 13:
                s = s * sm_scale
        if KIND == ALIBI:
            if MISTAKE == 21:  # the bias's sign flipped
                s = s - slope * (offs_n[None, :] - i_hat).to(tl.float32)
            elif MISTAKE == 25:  # the bias added to the unscaled score
                s = (s / sm_scale + slope * (offs_n[None, :] - i_hat).to(tl.float32)) * sm_scale
            else:
                s = s + slope * (offs_n[None, :] - i_hat).to(tl.float32)
            if MISTAKE != 26:  # 26: no causal mask
                s = tl.where(offs_n[None, :] <= i_mask, s, float("-inf"))
        if KIND == WINDOW:
            visible = (offs_n[None, :] <= i_hat) & (offs_n[None, :] < Nk)
            if MISTAKE == 33:  # one key too many: j ≥ î − w
                visible = visible & (offs_n[None, :] >= i_hat - extra)
            elif MISTAKE == 34:  # aligned top left: j > i − w
                visible = visible & (offs_n[None, :] > offs_m[:, None] - extra)
            elif MISTAKE == 36:  # the window masked in the loop's first block only
                visible = visible & ((offs_n[None, :] > i_hat - extra) | (start_n != lo))
            else:
                visible = visible & (offs_n[None, :] > i_hat - extra)
            s = tl.where(visible, s, float("-inf"))
        if MISTAKE != 16:
            s = tl.where(offs_n[None, :] < Nk, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        if MISTAKE == 12:  # 7a: capped after the max is subtracted
            x = (s - m_new[:, None]) / extra
            e = tl.exp(-2.0 * tl.abs(x))
            t = (1.0 - e) / (1.0 + e)
            p = tl.exp(extra * tl.where(x < 0, -t, t))
            alpha = tl.exp(m_i - m_new)
        else:
            if KIND == WINDOW and MISTAKE != 35:  # 35: no shift while the max is −inf
                shift = tl.where(m_new == float("-inf"), 0.0, m_new)
            else:
                shift = m_new
            alpha = tl.exp(m_i - shift)
            p = tl.exp(s - shift[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(out_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :], out.to(out_ptr.dtype.element_ty), mask=q_mask)


# Exercise 7a: soft-capping --------------------------------------------------------------------
# Each planted kernel takes the stub's arguments (the grading test renames them to the stub's function).


@triton.jit
def softcap_tanh_overflows(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, softcap, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, softcap, HEAD_DIM, BLOCK_M, BLOCK_N, 1, 11,
    )  # fmt: skip


@triton.jit
def softcap_after_max_subtracted(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, softcap, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, softcap, HEAD_DIM, BLOCK_M, BLOCK_N, 1, 12,
    )  # fmt: skip


@triton.jit
def softcap_before_scale(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, softcap, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, softcap, HEAD_DIM, BLOCK_M, BLOCK_N, 1, 13,
    )  # fmt: skip


@triton.jit
def softcap_tanh_of_s(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, softcap, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, softcap, HEAD_DIM, BLOCK_M, BLOCK_N, 1, 14,
    )  # fmt: skip


@triton.jit
def softcap_sign_lost(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, softcap, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, softcap, HEAD_DIM, BLOCK_M, BLOCK_N, 1, 15,
    )  # fmt: skip


@triton.jit
def softcap_tail_masked_before_cap(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, softcap, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, softcap, HEAD_DIM, BLOCK_M, BLOCK_N, 1, 16,
    )  # fmt: skip


# Exercise 7b: ALiBi ---------------------------------------------------------------------------


@triton.jit
def alibi_sign_flipped(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, 0, HEAD_DIM, BLOCK_M, BLOCK_N, 2, 21,
    )  # fmt: skip


@triton.jit
def alibi_causal_top_left(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, 0, HEAD_DIM, BLOCK_M, BLOCK_N, 2, 22,
    )  # fmt: skip


@triton.jit
def alibi_slope_one_head_off(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, 0, HEAD_DIM, BLOCK_M, BLOCK_N, 2, 23,
    )  # fmt: skip


@triton.jit
def alibi_slope_of_program_id(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, 0, HEAD_DIM, BLOCK_M, BLOCK_N, 2, 24,
    )  # fmt: skip


@triton.jit
def alibi_bias_before_scale(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, 0, HEAD_DIM, BLOCK_M, BLOCK_N, 2, 25,
    )  # fmt: skip


@triton.jit
def alibi_not_causal(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, 0, HEAD_DIM, BLOCK_M, BLOCK_N, 2, 26,
    )  # fmt: skip


# Exercise 7c: sliding window ------------------------------------------------------------------


@triton.jit
def window_no_lower_bound(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM, BLOCK_M, BLOCK_N, 3, 31,
    )  # fmt: skip


@triton.jit
def window_lower_bound_not_clamped(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM, BLOCK_M, BLOCK_N, 3, 32,
    )  # fmt: skip


@triton.jit
def window_one_key_too_many(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM, BLOCK_M, BLOCK_N, 3, 33,
    )  # fmt: skip


@triton.jit
def window_top_left(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM, BLOCK_M, BLOCK_N, 3, 34,
    )  # fmt: skip


@triton.jit
def window_no_shift_for_empty_blocks(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM, BLOCK_M, BLOCK_N, 3, 35,
    )  # fmt: skip


@triton.jit
def window_masked_in_first_block_only(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM, BLOCK_M, BLOCK_N, 3, 36,
    )  # fmt: skip


@triton.jit
def window_lower_bound_rounded_up(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _attention_body(
        q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM, BLOCK_M, BLOCK_N, 3, 37,
    )  # fmt: skip


# Exercise 7d: the backward's preprocess ----------------------------------------------------------


@triton.jit
def _preprocess_body(
    o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, stride_ob, stride_oh, stride_om, stride_dob, stride_doh, stride_dom,
    stride_lh, H, Nq, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MISTAKE: tl.constexpr,
):  # fmt: skip
    """Exercise 7d's right kernel but for one mistake, chosen by MISTAKE (0: none)."""
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    if MISTAKE == 46:  # no mask on the rows: a block past Nq reads and writes past the head's rows
        row_ok = rows >= 0
    else:
        row_ok = rows < Nq
    stats = tl.program_id(1) * stride_lh + rows
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :], mask=row_ok[:, None], other=0.0)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + rows[:, None] * stride_dom + dims[None, :], mask=row_ok[:, None], other=0.0)
    dlse = tl.load(dlse_ptr + stats, mask=row_ok, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    if MISTAKE == 42:  # + dlse
        delta = delta + dlse
    elif MISTAKE != 41:  # 41: dlse forgotten
        delta = delta - dlse
    lse = tl.load(lse_ptr + stats, mask=row_ok, other=0.0)
    if MISTAKE == 43:  # natural-log units
        scaled = lse
    elif MISTAKE == 44:  # lse · ln 2
        scaled = lse * 0.6931471805599453
    else:
        scaled = lse * 1.4426950408889634
    if MISTAKE == 45:  # −inf kept for rows that see no key
        lse2 = scaled
    else:
        lse2 = tl.where(lse == float("-inf"), float("inf"), scaled)
    tl.store(delta_ptr + stats, delta, mask=row_ok)
    tl.store(lse2_ptr + stats, lse2, mask=row_ok)


@triton.jit
def preprocess_forgets_dlse(
    o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, stride_ob, stride_oh, stride_om, stride_dob, stride_doh, stride_dom,
    stride_lh, H, Nq, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    _preprocess_body(o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, stride_ob, stride_oh, stride_om, stride_dob, stride_doh,
                     stride_dom, stride_lh, H, Nq, HEAD_DIM, BLOCK_M, 41)  # fmt: skip


@triton.jit
def preprocess_adds_dlse(
    o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, stride_ob, stride_oh, stride_om, stride_dob, stride_doh, stride_dom,
    stride_lh, H, Nq, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    _preprocess_body(o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, stride_ob, stride_oh, stride_om, stride_dob, stride_doh,
                     stride_dom, stride_lh, H, Nq, HEAD_DIM, BLOCK_M, 42)  # fmt: skip


@triton.jit
def preprocess_lse_in_natural_units(
    o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, stride_ob, stride_oh, stride_om, stride_dob, stride_doh, stride_dom,
    stride_lh, H, Nq, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    _preprocess_body(o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, stride_ob, stride_oh, stride_om, stride_dob, stride_doh,
                     stride_dom, stride_lh, H, Nq, HEAD_DIM, BLOCK_M, 43)  # fmt: skip


@triton.jit
def preprocess_lse_times_ln2(
    o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, stride_ob, stride_oh, stride_om, stride_dob, stride_doh, stride_dom,
    stride_lh, H, Nq, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    _preprocess_body(o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, stride_ob, stride_oh, stride_om, stride_dob, stride_doh,
                     stride_dom, stride_lh, H, Nq, HEAD_DIM, BLOCK_M, 44)  # fmt: skip


@triton.jit
def preprocess_empty_rows_minus_inf(
    o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, stride_ob, stride_oh, stride_om, stride_dob, stride_doh, stride_dom,
    stride_lh, H, Nq, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    _preprocess_body(o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, stride_ob, stride_oh, stride_om, stride_dob, stride_doh,
                     stride_dom, stride_lh, H, Nq, HEAD_DIM, BLOCK_M, 45)  # fmt: skip


@triton.jit
def preprocess_no_row_mask(
    o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, stride_ob, stride_oh, stride_om, stride_dob, stride_doh, stride_dom,
    stride_lh, H, Nq, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    _preprocess_body(o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, stride_ob, stride_oh, stride_om, stride_dob, stride_doh,
                     stride_dom, stride_lh, H, Nq, HEAD_DIM, BLOCK_M, 46)  # fmt: skip


# Exercise 7e: dk and dv of a block of keys ------------------------------------------------------


@triton.jit
def _dkdv_body(
    q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
    stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    MISTAKE: tl.constexpr,
):  # fmt: skip
    """Exercise 7e's right kernel but for one mistake, chosen by MISTAKE (0: none)."""
    start_n = tl.program_id(0) * BLOCK_N
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_mask = offs_n[:, None] < Nk
    k = tl.load(k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
    k = k.to(tl.float32)
    v = v.to(tl.float32)
    dk = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    stats = tl.program_id(1) * stride_lh
    for start_m in range(0, Nq, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        m_mask = offs_m < Nq
        q_ptrs = q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
        do_ptrs = do_ptr + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom + offs_d[None, :]
        if MISTAKE == 57:  # the query rows past Nq loaded without a mask
            q = tl.load(q_ptrs)
            do = tl.load(do_ptrs)
        else:
            q = tl.load(q_ptrs, mask=m_mask[:, None], other=0.0)
            do = tl.load(do_ptrs, mask=m_mask[:, None], other=0.0)
        q = q.to(tl.float32)
        do = do.to(tl.float32)
        lse2 = tl.load(lse2_ptr + stats + offs_m, mask=m_mask, other=float("inf"))
        delta = tl.load(delta_ptr + stats + offs_m, mask=m_mask, other=0.0)
        s = tl.dot(k, tl.trans(q), input_precision="ieee") * qk_scale
        if MISTAKE == 51:  # exp, where lse2 and s are in base 2
            p = tl.exp(s - lse2[None, :])
        else:
            p = tl.exp2(s - lse2[None, :])
        dv += tl.dot(p, do, input_precision="ieee")
        dp = tl.dot(v, tl.trans(do), input_precision="ieee")
        if MISTAKE == 54:  # − δ forgotten
            ds = p * dp
        elif MISTAKE == 55:  # δ of the key's row index: δ[:, None] in the keys × queries tile
            ds = p * (dp - delta[:, None])
        else:
            ds = p * (dp - delta[None, :])
        if MISTAKE == 56:  # dk from P
            dk += tl.dot(p, q, input_precision="ieee")
        else:
            dk += tl.dot(ds, q, input_precision="ieee")
    if MISTAKE == 53:  # scaled by qk_scale (log2(e) included)
        dk = dk * qk_scale
    elif MISTAKE != 52:  # 52: the scale forgotten
        dk = dk * sm_scale
    out_k = dk_ptr + b * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :]
    out_v = dv_ptr + b * stride_dvb + h * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :]
    if MISTAKE == 58:  # keys past Nk stored too
        tl.store(out_k, dk.to(dk_ptr.dtype.element_ty))
        tl.store(out_v, dv.to(dv_ptr.dtype.element_ty))
    else:
        tl.store(out_k, dk.to(dk_ptr.dtype.element_ty), mask=kv_mask)
        tl.store(out_v, dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)


@triton.jit
def dkdv_exp_not_exp2(
    q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
    stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _dkdv_body(
        q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
        stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
        stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM, BLOCK_M, BLOCK_N, 51,
    )  # fmt: skip


@triton.jit
def dkdv_forgets_scale(
    q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
    stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _dkdv_body(
        q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
        stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
        stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM, BLOCK_M, BLOCK_N, 52,
    )  # fmt: skip


@triton.jit
def dkdv_dk_scaled_by_qk_scale(
    q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
    stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _dkdv_body(
        q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
        stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
        stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM, BLOCK_M, BLOCK_N, 53,
    )  # fmt: skip


@triton.jit
def dkdv_forgets_delta(
    q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
    stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _dkdv_body(
        q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
        stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
        stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM, BLOCK_M, BLOCK_N, 54,
    )  # fmt: skip


@triton.jit
def dkdv_delta_on_wrong_axis(
    q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
    stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _dkdv_body(
        q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
        stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
        stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM, BLOCK_M, BLOCK_N, 55,
    )  # fmt: skip


@triton.jit
def dkdv_dk_from_p(
    q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
    stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _dkdv_body(
        q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
        stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
        stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM, BLOCK_M, BLOCK_N, 56,
    )  # fmt: skip


@triton.jit
def dkdv_query_tail_unmasked(
    q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
    stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _dkdv_body(
        q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
        stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
        stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM, BLOCK_M, BLOCK_N, 57,
    )  # fmt: skip


@triton.jit
def dkdv_unmasked_store(
    q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
    stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _dkdv_body(
        q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
        stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
        stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM, BLOCK_M, BLOCK_N, 58,
    )  # fmt: skip


STEMS = notebooks.stems(7)
"""This chapter's exercises. Their rows in ``tritonforge.exercise.registry`` name the planted wrong
answers above; the generic tests over every row (stub, planted answers, solution) are in
test_every_exercise.py."""


def test_references_agree_with_the_formulas():
    """The float64 references, element by element: 7a's scores are capped below the cap; 7b's
    slopes are ALiBi's for 8 heads (1/2 … 1/256) and its causal mask sits bottom right; 7c with a
    window as long as the keys is plain causal attention, with a window of 1 each query's own
    value row; NaN in keys no query sees changes nothing."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 5, 16, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 3, 9, 16, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 3, 9, 16, generator=gen, dtype=torch.float64)
    s = q @ k.transpose(-1, -2) / 4.0
    capped = 2.0 * torch.tanh(s / 2.0)
    want = torch.softmax(capped, dim=-1) @ v
    assert torch.allclose(ch07.softcap_attention_ref(q, k, v, 2.0), want, rtol=0, atol=1e-13)
    assert torch.allclose(ch07.alibi_slopes(8), torch.tensor([2.0**-i for i in range(1, 9)], dtype=torch.float64), rtol=0, atol=0)
    allowed = ch07.visible_keys(5, 9, causal=True)
    assert allowed[0].tolist() == [True] * 5 + [False] * 4 and bool(allowed[4].all())
    bias = ch07.alibi_slopes(3)[:, None, None] * (torch.arange(9)[None, :] - torch.arange(5)[:, None] - 4)
    want = torch.softmax((s + bias).masked_fill(~allowed, float("-inf")), dim=-1) @ v
    assert torch.allclose(ch07.alibi_attention_ref(q, k, v), want, rtol=0, atol=1e-13)
    causal = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1) @ v
    assert torch.allclose(ch07.sliding_window_attention_ref(q, k, v, 9), causal, rtol=0, atol=1e-13)
    assert torch.allclose(ch07.sliding_window_attention_ref(q, k, v, 1), v[:, :, 4:], rtol=0, atol=1e-13)
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[:, :, :2] = v_nan[:, :, :2] = float("nan")  # window 3 from key 4 on: keys 0 and 1 are seen by no query
    assert torch.equal(ch07.sliding_window_attention_ref(q, k_nan, v_nan, 3), ch07.sliding_window_attention_ref(q, k, v, 3))


def test_unseen_blocks_end_is_the_first_programs_first_window_block():
    assert ch07.unseen_blocks_end(16, 100, 16) == 64  # query 0 sits at key 84, its window starts at 69: block 64 … 79
    assert ch07.unseen_blocks_end(40, 97, 5) == 48  # query 0 sits at key 57, its window starts at 53
    assert ch07.unseen_blocks_end(64, 64, 20) == 0


@pytest.mark.parametrize(
    "check, wrong, cases",
    [
        (exercise.check_attention_softcap, softcap_tanh_overflows, ("scores near ±3000",)),
        (exercise.check_attention_alibi, alibi_slope_of_program_id, ("Nq=37 < Nk=100", "H=1 (slope", "[B, N, H, D] storage", "float16")),
        (exercise.check_sliding_window_attention, window_no_lower_bound, ("NaN before every window",)),
    ],
)
def test_a_mistake_that_is_right_elsewhere_fails_exactly_the_cases_built_for_it(check, wrong, cases):
    """These mistakes give the right answer on ordinary inputs: each fails the cases built for it
    (huge scores; batches > 1; keys before every window), and only those, on every seed."""
    for seed in notebooks.PLANTED_SEEDS:
        report = check(wrong, seed=seed)
        failed = {r.case for r in report.rows if not r.passed}
        assert failed == {r.case for r in report.rows if r.case.startswith(cases)}, str(report)


BACKWARD_PLANTED = {
    "ex07d_attention_bwd_preprocess": [
        (preprocess_forgets_dlse, "δ = rowsum(dO ⊙ O) misses − dlse"),
        (preprocess_adds_dlse, "δ has + dlse where it needs − dlse"),
        (preprocess_lse_in_natural_units, "lse2 = lse: the kernels compute P with exp2"),
        (preprocess_lse_times_ln2, "lse2 = lse · ln 2"),
        (preprocess_empty_rows_minus_inf, "whose query sees no key (lse = −inf) hold -inf, expected +inf"),
        (preprocess_no_row_mask, "lse2: wrote"),
    ],
    "ex07e_attention_dv_block": [
        (dkdv_exp_not_exp2, "P from exp where it needs exp2"),
        (dkdv_forgets_scale, "dk misses the factor sm_scale"),
        (dkdv_dk_scaled_by_qk_scale, "dk scaled by qk_scale"),
        (dkdv_forgets_delta, "dS misses − δ"),
        (dkdv_delta_on_wrong_axis, "δ broadcast along the wrong axis"),
        (dkdv_dk_from_p, "dk from P where it needs dS"),
        (dkdv_query_tail_unmasked, "load q and dO with the mask offs_m < Nq"),
        (dkdv_unmasked_store, "dk: wrote"),
    ],
}
BACKWARD_CASES = [(stem, wrong, hint) for stem, rows in BACKWARD_PLANTED.items() for wrong, hint in rows]
STRUCTURAL = ("wrote", "NaN", "expected +inf")
"""A failure that is not a matter of degree: a store where no output lies, NaN, −inf for +inf."""


def test_the_backward_rows_name_exactly_these_mistakes():
    for stem, rows in BACKWARD_PLANTED.items():
        assert notebooks.planted(notebooks.NOTEBOOKS[stem]) == [wrong for wrong, _ in rows]


@pytest.mark.parametrize("stem, wrong, hint", BACKWARD_CASES, ids=[w.__name__ for _, w, _ in BACKWARD_CASES])
def test_ex07d_ex07e_a_mistake_gets_its_verdict_by_a_wide_margin_on_every_seed(stem, wrong, hint):
    """On every seed the first case the mistake fails names it, and fails it by at least 1000
    times the case's error budget, or structurally (NaN, a write outside the output, −inf where
    +inf belongs)."""
    from tritonforge.exercise.core import until_first_failure
    from tritonforge.reference import TOLERANCE

    exercise_row = notebooks.NOTEBOOKS[stem]
    cases = exercise_row.cases()
    for seed in notebooks.PLANTED_SEEDS:
        with until_first_failure():
            report = exercise_row.check(wrong, seed=seed)
        (row,) = [r for r in report.rows if not r.passed and not r.skipped]
        assert hint in row.detail, (seed, str(report))
        if any(mark in row.detail for mark in STRUCTURAL):
            continue
        index = [c.name for c in cases].index(row.case)
        gen = torch.Generator().manual_seed((seed or 0) + index)
        expected = cases[index].expected(cases[index].inputs(gen))
        scale = max(1.0, *(float(t[torch.isfinite(t)].abs().max()) for t in expected.values()))
        assert row.error >= 1000 * TOLERANCE[cases[index].dtype] * scale, (seed, row.case, row.error)


def test_ex07d_ex07e_references_are_autograds_gradients():
    """δ and lse2 (7d) fed to 7e's formula give autograd's dk and dv of attention in float64 for a
    loss Σ O ⊙ dO + Σ lse ⊙ dlse (7e is not causal); causal with queries that see no key, 7d's
    lse2 is +inf on those rows and lse · log2(e) on the others."""
    gen = torch.Generator().manual_seed(0)
    for causal, (Nq, Nk) in ((False, (21, 35)), (True, (30, 18))):
        q, k, v = (torch.randn(2, 3, n, 16, generator=gen, dtype=torch.float64, requires_grad=True) for n in (Nq, Nk, Nk))
        do = torch.randn(2, 3, Nq, 16, generator=gen, dtype=torch.float64)
        dlse = torch.randn(2, 3, Nq, generator=gen, dtype=torch.float64)
        allowed = ch07.visible_keys(Nq, Nk, causal=causal)
        s = (q @ k.transpose(-1, -2) / 4.0).masked_fill(~allowed, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        p = torch.nan_to_num(torch.exp(s - lse[..., None]))
        o = p @ v
        hidden = torch.isinf(lse)
        ((o * do).sum() + (lse.masked_fill(hidden, 0.0) * dlse).sum()).backward()
        delta, lse2 = ch07.attention_bwd_preprocess_ref(o.detach(), do, lse.detach(), dlse)
        assert bool((lse2[hidden] == float("inf")).all()) and int(hidden.sum()) == (2 * 3 * (Nq - Nk) if causal else 0)
        torch.testing.assert_close(lse2[~hidden], lse.detach()[~hidden] / math.log(2.0), rtol=0, atol=1e-12)
        if causal:
            continue
        dk, dv = ch07.attention_dkdv_ref(q.detach(), k.detach(), v.detach(), do, lse2, delta)
        torch.testing.assert_close(dv, v.grad, rtol=0, atol=1e-12)
        torch.testing.assert_close(dk, k.grad, rtol=0, atol=1e-12)


def test_ex07e_the_wrong_axis_answer_uses_the_statistic_of_the_keys_row_index():
    stat = torch.arange(1.0, 21.0).reshape(1, 1, 20)  # 20 queries: a block of 16 and a ragged one
    wrong = ch07._wrong_axis(stat, 18, -1.0)  # [1, 1, 20, 18]
    assert wrong[0, 0, 3, 5] == stat[0, 0, 5] and wrong[0, 0, 3, 17] == stat[0, 0, 1]  # key 17 is row 1 of its block
    assert wrong[0, 0, 17, 2] == stat[0, 0, 18] and wrong[0, 0, 17, 9] == -1.0  # query block 2: query 16 + 9 > 19


def test_the_backward_launchers_refuse_what_the_kernels_cannot_take():
    o = torch.randn(1, 2, 20, 16)
    lse = torch.randn(1, 2, 20)
    with pytest.raises(ValueError, match="float32"):
        ch07.launch_attention_bwd_preprocess(preprocess_adds_dlse, o, o, lse.double(), lse)
    with pytest.raises(ValueError, match=r"\[B, H, Nq\]"):
        ch07.launch_attention_bwd_preprocess(preprocess_adds_dlse, o, o, lse[:, :1], lse)
    with pytest.raises(ValueError, match="one layout"):
        ch07.launch_attention_bwd_preprocess(preprocess_adds_dlse, o, o, lse, torch.randn(1, 2, 30)[..., :20])
    with pytest.raises(ValueError, match="one head per KV head"):
        ch07.launch_attention_dkdv(dkdv_forgets_scale, o, o[:, :1], o[:, :1], o, lse, lse)
    with pytest.raises(TypeError, match="triton.jit"):
        ch07.launch_attention_dkdv(lambda *a: None, o, o, o, o, lse, lse)


def test_top_left_alignment_fails_exactly_where_nq_differs_from_nk():
    """A top-left causal mask is the bottom-right one when Nq = Nk: it fails every case with Nq < Nk."""
    report = exercise.check_attention_alibi(alibi_causal_top_left)
    failed = {r.case for r in report.rows if not r.passed}
    assert failed == {r.case for r in report.rows if "Nq=Nk" not in r.case and "Nq=45" not in r.case and "Nk=45" not in r.case}, str(report)


@pytest.mark.parametrize(
    "check, wrong, hint",
    [
        (exercise.check_attention_softcap, softcap_tanh_overflows, "build tanh from e = exp(−2|x|)"),
        (exercise.check_attention_softcap, softcap_before_scale, "the cap came before the scale"),
        (exercise.check_attention_softcap, softcap_tail_masked_before_cap, "cap applied after the mask"),
        (exercise.check_attention_softcap, softcap_tail_masked_before_cap, "masked logits must stay −inf"),
        (exercise.check_attention_alibi, alibi_sign_flipped, "the bias has the wrong sign"),
        (exercise.check_attention_alibi, alibi_causal_top_left, "aligned top left"),
        (exercise.check_attention_alibi, alibi_slope_one_head_off, "the slope of the wrong head"),
        (exercise.check_attention_alibi, alibi_slope_of_program_id, "program_id(1) counts b·H + h"),
        (exercise.check_attention_alibi, alibi_not_causal, "no causal mask"),
        (exercise.check_sliding_window_attention, window_no_lower_bound, "rather than starting its loop at the block"),
        (exercise.check_sliding_window_attention, window_lower_bound_not_clamped, "window starts before key 0"),
        (exercise.check_sliding_window_attention, window_one_key_too_many, "one key too many"),
        (exercise.check_sliding_window_attention, window_top_left, "aligned top left"),
        (exercise.check_sliding_window_attention, window_no_shift_for_empty_blocks, "shift by 0 while the max is still −inf"),
    ],
)
def test_the_verdict_names_the_mistake(check, wrong, hint):
    report = check(wrong)
    failed = [r for r in report.rows if not r.passed and not r.skipped]
    assert failed and any(hint in r.detail for r in failed), str(report)


def test_ex07a_the_cap_after_the_mask_fails_a_case_built_for_it_by_a_wide_margin():
    """With a cap of 1 every score saturates near ±1: the 15 masked lanes of the last key block,
    let back in at −1, weigh as much as the 17 real keys, so the error is thousands of times the
    budget on every seed (in the other cases they sit near −cap, far below the max, and add ~1e-5)."""
    for seed in notebooks.PLANTED_SEEDS:
        row, budget = notebooks.run_one_case(notebooks.NOTEBOOKS["ex07a_softcapping"], softcap_tail_masked_before_cap, "cap 1, Nk=17", seed)
        assert not row.passed and "cap applied after the mask" in row.detail, row.detail
        assert row.error is not None and row.error >= 1000 * budget, (seed, row.error, budget)


def test_ex07c_draws_the_query_rows_of_a_failed_case():
    report = exercise.check_sliding_window_attention(window_one_key_too_many)
    pictured = report.pictured()
    assert pictured and all("query rows" in r.picture and "x" in r.picture for r in pictured), str(report)
    assert all(len(line) <= 76 for r in pictured for line in r.picture.splitlines())


def test_the_launchers_refuse_what_the_kernels_cannot_take():
    q = torch.randn(1, 1, 20, 16)
    k = torch.randn(1, 1, 10, 16)
    with pytest.raises(ValueError, match="Nq ≤ Nk"):
        ch07.launch_attention_alibi(softcap_sign_lost, q, k, k)
    with pytest.raises(ValueError, match="window ≥ 1"):
        ch07.launch_sliding_window_attention(window_top_left, k, k, k, 0)
    with pytest.raises(ValueError, match="head dimension"):
        ch07.launch_attention_softcap(softcap_sign_lost, q[..., :8], k[..., :8], k[..., :8], 5.0)
    with pytest.raises(TypeError, match="triton.jit"):
        ch07.launch_attention_softcap(lambda *a: None, q, k, k, 5.0)


@pytest.mark.gpu
@pytest.mark.parametrize("stem", STEMS)
def test_gpu_chapter_7_checks_on_compiled_kernels(stem, tmp_path):
    notebooks.assert_gpu_checks_on_compiled_kernels(stem, tmp_path)
