"""Exercise 9a's check (tritonforge.exercise.ch09) catches a wrong rotary embedding: GPT-J's
interleaved pairs instead of rotate_half's halves, the rotation the wrong way (a sign), cos and sin
swapped, no masks, the table read from row 0 instead of the position offset, the program's head
decoded as if Hk were Hq (grouped-query attention), k read with q's strides, k left unrotated.
Each fails its check on every seed, the reference solution passes; the float64 reference is the
model's own apply_rotary.

Exercise 9b's check catches a wrong KV-cache append: rows written from cache row 0, every sequence
at sequence 0's position, the padding rows written, no masks, k and v swapped, the cache addressed
with the new rows' strides, v read with k's strides, the first row one past the filled prefix; its
reference is the model's KVCache.append.

Exercise 9c's check catches a wrong fused split, rotation and cache write: v rotated, k not
rotated, the table or the cache read from row n, the value heads looked for as if Hk were Hq, no
masks, qkv's row stride taken from its width, every sequence at sequence 0's position; its
reference is the model's own steps (apply_rotary, KVCache.append)."""

from __future__ import annotations

import pytest
import torch

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge import exercise
from tritonforge.exercise import ch09
from tritonforge.models.llama import KVCache, LlamaConfig, apply_rotary, rotary_tables

import triton
import triton.language as tl

from . import notebooks


@triton.jit
def _rotate_body(x_ptr, out_ptr, cos_ptr, sin_ptr, stride_xn, stride_on, rows, N, offset, HALF: tl.constexpr, MISTAKE: tl.constexpr):
    """The right rotation of one head's block of positions but for one mistake (0: none)."""
    cols = tl.arange(0, HALF)
    if MISTAKE == 4:  # no masks: the last block runs past the head's last position
        mask = rows[:, None] >= 0
    else:
        mask = rows[:, None] < N
    position = rows if MISTAKE == 5 else offset + rows  # 5: the table read from row 0
    if MISTAKE == 1:  # GPT-J: neighbours (2i, 2i+1) rotated by θ_i
        even = tl.load(x_ptr + rows[:, None] * stride_xn + 2 * cols[None, :], mask=mask, other=0.0).to(tl.float32)
        odd = tl.load(x_ptr + rows[:, None] * stride_xn + 2 * cols[None, :] + 1, mask=mask, other=0.0).to(tl.float32)
        table = position[:, None] * (2 * HALF) + cols[None, :]
        c = tl.load(cos_ptr + table, mask=mask, other=0.0).to(tl.float32)
        s = tl.load(sin_ptr + table, mask=mask, other=0.0).to(tl.float32)
        out_rows = out_ptr + rows[:, None] * stride_on + 2 * cols[None, :]
        tl.store(out_rows, (even * c - odd * s).to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(out_rows + 1, (odd * c + even * s).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        x_rows = x_ptr + rows[:, None] * stride_xn + cols[None, :]
        x1 = tl.load(x_rows, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(x_rows + HALF, mask=mask, other=0.0).to(tl.float32)
        table = position[:, None] * (2 * HALF) + cols[None, :]
        c = tl.load(cos_ptr + table, mask=mask, other=0.0).to(tl.float32)
        s = tl.load(sin_ptr + table, mask=mask, other=0.0).to(tl.float32)
        if MISTAKE == 2:  # the rotation the wrong way: rotate_half taken as (x2, −x1)
            s = -s
        if MISTAKE == 3:  # cos and sin swapped
            c, s = s, c
        y1 = x1 * c - x2 * s
        y2 = x2 * c + x1 * s
        if MISTAKE == 8:  # not rotated at all (the caller passes this for k only)
            y1 = x1
            y2 = x2
        out_rows = out_ptr + rows[:, None] * stride_on + cols[None, :]
        tl.store(out_rows, y1.to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(out_rows + HALF, y2.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_body(
    q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
    stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset,
    HALF: tl.constexpr, BLOCK_N: tl.constexpr, MISTAKE: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    if MISTAKE == 6:  # the heads per sequence taken as 2·Hq: right only when Hk = Hq
        b = tl.program_id(1) // (2 * Hq)
        h = tl.program_id(1) % (2 * Hq)
    else:
        b = tl.program_id(1) // (Hq + Hk)
        h = tl.program_id(1) % (Hq + Hk)
    if h < Hq:
        _rotate_body(
            q_ptr + b * stride_qb + h * stride_qh, q_out_ptr + b * stride_qob + h * stride_qoh, cos_ptr, sin_ptr,
            stride_qn, stride_qon, rows, N, offset, HALF, MISTAKE if MISTAKE != 8 else 0,
        )  # fmt: skip
    elif MISTAKE == 7:  # k read and written with q's strides
        _rotate_body(
            k_ptr + b * stride_qb + (h - Hq) * stride_qh, k_out_ptr + b * stride_qob + (h - Hq) * stride_qoh, cos_ptr, sin_ptr,
            stride_qn, stride_qon, rows, N, offset, HALF, 0,
        )  # fmt: skip
    else:
        _rotate_body(
            k_ptr + b * stride_kb + (h - Hq) * stride_kh, k_out_ptr + b * stride_kob + (h - Hq) * stride_koh, cos_ptr, sin_ptr,
            stride_kn, stride_kon, rows, N, offset, HALF, MISTAKE,
        )  # fmt: skip


@triton.jit
def rope_interleaved_pairs(
    q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
    stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """GPT-J's convention: neighbours (2i, 2i+1) rotated, not x_i with x_(i+D/2)"""
    _rope_body(
        q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
        stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF, BLOCK_N, 1,
    )  # fmt: skip


@triton.jit
def rope_rotation_sign_flipped(
    q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
    stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """the rotation the wrong way: y1 = x1·cos + x2·sin"""
    _rope_body(
        q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
        stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF, BLOCK_N, 2,
    )  # fmt: skip


@triton.jit
def rope_cos_sin_swapped(
    q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
    stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """cos and sin swapped"""
    _rope_body(
        q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
        stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF, BLOCK_N, 3,
    )  # fmt: skip


@triton.jit
def rope_no_masks(
    q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
    stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """no masks: the last block's positions past N are loaded and stored"""
    _rope_body(
        q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
        stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF, BLOCK_N, 4,
    )  # fmt: skip


@triton.jit
def rope_offset_ignored(
    q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
    stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """the table read from row n, not offset + n (wrong in decode)"""
    _rope_body(
        q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
        stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF, BLOCK_N, 5,
    )  # fmt: skip


@triton.jit
def rope_heads_as_if_hk_were_hq(
    q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
    stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """the program's sequence and head decoded with 2·Hq heads per sequence"""
    _rope_body(
        q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
        stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF, BLOCK_N, 6,
    )  # fmt: skip


@triton.jit
def rope_k_with_q_strides(
    q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
    stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """k read and written with q's strides"""
    _rope_body(
        q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
        stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF, BLOCK_N, 7,
    )  # fmt: skip


@triton.jit
def rope_k_not_rotated(
    q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
    stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """q rotated, k copied through unrotated"""
    _rope_body(
        q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
        stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF, BLOCK_N, 8,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Exercise 9b: the KV-cache append
# ----------------------------------------------------------------------------------------------


@triton.jit
def _append_body(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D: tl.constexpr, BLOCK_N: tl.constexpr,
    MISTAKE: tl.constexpr,
):  # fmt: skip
    """The right append but for one mistake (0: none)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, D)
    b = tl.program_id(1) // Hk
    h = tl.program_id(1) % Hk
    start = tl.load(positions_ptr) if MISTAKE == 2 else tl.load(positions_ptr + b)  # 2: sequence 0's position for all
    count = tl.load(lengths_ptr + b)
    if MISTAKE == 3:  # the padding rows written too
        mask = (rows < N)[:, None]
    elif MISTAKE == 4:  # no masks
        mask = (rows >= 0)[:, None]
    else:
        mask = (rows < count)[:, None]
    if MISTAKE == 7:  # v read with k's strides
        stride_vb, stride_vh, stride_vn = stride_kb, stride_kh, stride_kn
    if MISTAKE == 6:  # the k cache addressed with k_new's strides
        stride_kcb, stride_kch, stride_kcp = stride_kb, stride_kh, stride_kn
    k = tl.load(k_ptr + b * stride_kb + h * stride_kh + rows[:, None] * stride_kn + cols[None, :], mask=mask)
    v = tl.load(v_ptr + b * stride_vb + h * stride_vh + rows[:, None] * stride_vn + cols[None, :], mask=mask)
    if MISTAKE == 1:  # cache rows from 0
        slots = rows[:, None]
    elif MISTAKE == 8:  # one past the filled prefix
        slots = (start + rows + 1)[:, None]
    else:
        slots = (start + rows)[:, None]
    if MISTAKE == 5:  # k and v swapped
        k, v = v, k
    tl.store(k_cache_ptr + b * stride_kcb + h * stride_kch + slots * stride_kcp + cols[None, :], k, mask=mask)
    tl.store(v_cache_ptr + b * stride_vcb + h * stride_vch + slots * stride_vcp + cols[None, :], v, mask=mask)


@triton.jit
def append_at_row_zero(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """the new rows written from cache row 0, not positions[b]"""
    _append_body(
        k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D, BLOCK_N, 1,
    )  # fmt: skip


@triton.jit
def append_position_of_sequence_0(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """every sequence written at positions[0]"""
    _append_body(
        k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D, BLOCK_N, 2,
    )  # fmt: skip


@triton.jit
def append_ignores_lengths(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """the padding rows (n >= lengths[b]) written too"""
    _append_body(
        k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D, BLOCK_N, 3,
    )  # fmt: skip


@triton.jit
def append_no_masks(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """no masks: every row of the last block loaded and stored"""
    _append_body(
        k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D, BLOCK_N, 4,
    )  # fmt: skip


@triton.jit
def append_k_and_v_swapped(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """k_new written to v_cache, v_new to k_cache"""
    _append_body(
        k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D, BLOCK_N, 5,
    )  # fmt: skip


@triton.jit
def append_cache_with_new_strides(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """k_cache addressed with k_new's strides"""
    _append_body(
        k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D, BLOCK_N, 6,
    )  # fmt: skip


@triton.jit
def append_v_with_k_strides(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """v_new read with k_new's strides"""
    _append_body(
        k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D, BLOCK_N, 7,
    )  # fmt: skip


@triton.jit
def append_one_past_the_prefix(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """the first new row written at positions[b] + 1"""
    _append_body(
        k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
        stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D, BLOCK_N, 8,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Exercise 9c: the fused QKV split, rotary and cache append
# ----------------------------------------------------------------------------------------------


@triton.jit
def _qkv_rotate(x_rows, out_rows, cos_ptr, sin_ptr, slots, mask, HALF: tl.constexpr, ROTATE: tl.constexpr):
    cols = tl.arange(0, HALF)[None, :]
    x1 = tl.load(x_rows + cols, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_rows + HALF + cols, mask=mask, other=0.0).to(tl.float32)
    table = slots[:, None] * (2 * HALF) + cols
    c = tl.load(cos_ptr + table, mask=mask, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + table, mask=mask, other=0.0).to(tl.float32)
    if ROTATE:
        y1 = x1 * c - x2 * s
        y2 = x2 * c + x1 * s
    else:
        y1 = x1
        y2 = x2
    tl.store(out_rows + cols, y1.to(out_rows.dtype.element_ty), mask=mask)
    tl.store(out_rows + HALF + cols, y2.to(out_rows.dtype.element_ty), mask=mask)


@triton.jit
def _qkv_body(
    qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
    stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF: tl.constexpr, BLOCK_N: tl.constexpr, MISTAKE: tl.constexpr,
):  # fmt: skip
    """The right kernel but for one mistake (0: none)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    b = tl.program_id(1) // (Hq + Hk)
    h = tl.program_id(1) % (Hq + Hk)
    mask = (rows >= 0)[:, None] if MISTAKE == 6 else (rows < N)[:, None]  # 6: no masks
    start = tl.load(positions_ptr) if MISTAKE == 8 else tl.load(positions_ptr + b)  # 8: sequence 0's position for all
    slots = start + rows
    table_slots = rows if MISTAKE == 3 else slots  # 3: the table read from row n
    cache_slots = rows if MISTAKE == 4 else slots  # 4: the cache written from row n
    row_stride = (Hq + 2 * Hk) * (2 * HALF) if MISTAKE == 7 else stride_xn  # 7: rows taken as exactly (Hq + 2Hk)·D wide
    x_rows = qkv_ptr + b * stride_xb + rows[:, None] * row_stride
    if h < Hq:
        out_rows = q_out_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qn
        _qkv_rotate(x_rows + h * (2 * HALF), out_rows, cos_ptr, sin_ptr, table_slots, mask, HALF, True)
    else:
        g = h - Hq
        cache_rows = b * stride_cb + g * stride_ch + cache_slots[:, None] * stride_cp
        _qkv_rotate(x_rows + (Hq + g) * (2 * HALF), k_cache_ptr + cache_rows, cos_ptr, sin_ptr, table_slots, mask, HALF, MISTAKE != 2)
        v_start = (2 * Hq + g) * (2 * HALF) if MISTAKE == 5 else (Hq + Hk + g) * (2 * HALF)  # 5: v found as if Hk were Hq
        if MISTAKE == 1:  # v rotated like k
            _qkv_rotate(x_rows + v_start, v_cache_ptr + cache_rows, cos_ptr, sin_ptr, table_slots, mask, HALF, True)
        else:
            cols = tl.arange(0, 2 * HALF)[None, :]
            tl.store(v_cache_ptr + cache_rows + cols, tl.load(x_rows + v_start + cols, mask=mask), mask=mask)


@triton.jit
def qkv_v_rotated(
    qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
    stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """the value heads rotated like the keys"""
    _qkv_body(
        qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
        stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF, BLOCK_N, 1,
    )  # fmt: skip


@triton.jit
def qkv_k_not_rotated(
    qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
    stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """the key heads cached unrotated"""
    _qkv_body(
        qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
        stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF, BLOCK_N, 2,
    )  # fmt: skip


@triton.jit
def qkv_table_row_n(
    qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
    stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """the table read from row n, not positions[b] + n"""
    _qkv_body(
        qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
        stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF, BLOCK_N, 3,
    )  # fmt: skip


@triton.jit
def qkv_cache_row_n(
    qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
    stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """k and v written from cache row n, not positions[b] + n"""
    _qkv_body(
        qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
        stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF, BLOCK_N, 4,
    )  # fmt: skip


@triton.jit
def qkv_v_as_if_hk_were_hq(
    qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
    stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """the value heads looked for after 2·Hq heads"""
    _qkv_body(
        qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
        stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF, BLOCK_N, 5,
    )  # fmt: skip


@triton.jit
def qkv_no_masks(
    qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
    stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """no masks: the last block's rows past N loaded and stored"""
    _qkv_body(
        qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
        stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF, BLOCK_N, 6,
    )  # fmt: skip


@triton.jit
def qkv_row_stride_from_width(
    qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
    stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """qkv's row stride taken as (Hq + 2·Hk)·D, not stride_xn"""
    _qkv_body(
        qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
        stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF, BLOCK_N, 7,
    )  # fmt: skip


@triton.jit
def qkv_position_of_sequence_0(
    qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
    stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """every sequence at positions[0]"""
    _qkv_body(
        qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
        stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF, BLOCK_N, 8,
    )  # fmt: skip


STEMS = notebooks.stems(9)
"""This chapter's exercises. Their rows in ``tritonforge.exercise.registry`` name the planted wrong
answers above; the generic tests over every row (stub, planted answers, solution) are in
test_every_exercise.py."""


def test_reference_is_the_models_apply_rotary():
    """rope_ref (float64, from the exercise's own tables) equals apply_rotary with the model's
    rotary_tables at the same positions, and rope_tables equals rotary_tables."""
    config = LlamaConfig(hidden_size=128, num_heads=4)  # head_dim 32
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 7, 32, generator=gen, dtype=torch.float64)
    cos, sin = ch09.rope_tables(20, 32, theta=config.rope_theta, dtype=torch.float64)
    model_cos, model_sin = rotary_tables(config, torch.arange(9, 16), torch.float64)
    torch.testing.assert_close(cos[9:16], model_cos, rtol=0, atol=1e-6)  # the model's angles are float32
    torch.testing.assert_close(sin[9:16], model_sin, rtol=0, atol=1e-6)
    torch.testing.assert_close(ch09.rope_ref(x, cos, sin, 9), apply_rotary(x, cos[9:16], sin[9:16]), rtol=0, atol=1e-13)


def test_the_interleaved_reference_differs_only_in_which_components_pair():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, 1, 5, 16, generator=gen, dtype=torch.float64)
    cos, sin = ch09.rope_tables(5, 16, dtype=torch.float64)
    perm = torch.cat([torch.arange(0, 16, 2), torch.arange(1, 16, 2)])  # (x0, x2, …, x1, x3, …): pairs become halves
    torch.testing.assert_close(ch09.rope_interleaved_ref(x, cos, sin)[..., perm], ch09.rope_ref(x[..., perm], cos, sin), rtol=0, atol=1e-14)
    # a rotation keeps each pair's length: |y|² = |x|² row by row
    torch.testing.assert_close(ch09.rope_ref(x, cos, sin).square().sum(-1), x.square().sum(-1), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "wrong, cases",
    [
        (rope_offset_ignored, ("decode", "chunked prefill", "positions 8000", "float16", "bfloat16")),
        (rope_heads_as_if_hk_were_hq, ("GQA", "MQA")),
    ],
)
def test_a_mistake_that_is_right_elsewhere_fails_exactly_the_cases_built_for_it(wrong, cases):
    """Right whenever the offset is 0; right whenever Hk = Hq (and, by the accident of contiguous
    heads, when Hq = 2·Hk: batch b's key heads are batch b − 1's heads past Hk). Each fails the
    cases built for it (positions from an offset; Hq = 4·Hk with B > 1), and only those."""
    for seed in notebooks.PLANTED_SEEDS:
        report = exercise.check_rope(wrong, seed=seed)
        failed = {r.case for r in report.rows if not r.passed}
        assert failed == {r.case for r in report.rows if r.case.startswith(cases)}, str(report)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (rope_interleaved_pairs, "GPT-J's interleaved convention"),
        (rope_rotation_sign_flipped, "the rotation goes the wrong way"),
        (rope_cos_sin_swapped, "cos and sin are swapped"),
        (rope_offset_ignored, "position n of this call is offset + n"),
        (rope_no_masks, "outside the output"),
        (rope_k_not_rotated, "q is right and k is not"),
        (rope_heads_as_if_hk_were_hq, "b·(Hq + Hk) + h"),
    ],
)
def test_the_verdict_names_the_mistake(wrong, hint):
    report = exercise.check_rope(wrong)
    failed = [r for r in report.rows if not r.passed and not r.skipped]
    assert failed and any(hint in r.detail for r in failed), str(report)


def test_a_failed_case_draws_the_positions_of_every_head():
    report = exercise.check_rope(rope_offset_ignored)
    pictured = report.pictured()
    assert pictured and all("positions by (batch, head)" in r.picture and "x" in r.picture for r in pictured), str(report)
    assert all(len(line) <= 76 for r in pictured for line in r.picture.splitlines())


def test_the_launcher_refuses_what_the_kernel_cannot_take():
    q, k = torch.randn(1, 2, 5, 16), torch.randn(1, 1, 5, 16)
    cos, sin = ch09.rope_tables(8, 16)
    with pytest.raises(ValueError, match="share B, N and D"):
        ch09.launch_rope(rope_no_masks, q, k[:, :, :4], cos, sin)
    with pytest.raises(ValueError, match="head dimension"):
        ch09.launch_rope(rope_no_masks, q[..., :8], k[..., :8], cos[:, :8], sin[:, :8])
    with pytest.raises(ValueError, match="do not fit"):
        ch09.launch_rope(rope_no_masks, q, k, cos, sin, offset=4)
    with pytest.raises(ValueError, match="unit stride along D"):
        ch09.launch_rope(rope_no_masks, q.transpose(2, 3), k, cos, sin)
    with pytest.raises(TypeError, match="triton.jit"):
        ch09.launch_rope(lambda *a: None, q, k, cos, sin)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (append_at_row_zero, "went to cache rows 0, 1"),
        (append_position_of_sequence_0, "at sequence 0's position"),
        (append_ignores_lengths, "the padding rows were written too"),
        (append_k_and_v_swapped, "k and v are swapped"),
        (append_one_past_the_prefix, "positions[b] + 1"),
        (append_no_masks, "a store needs a mask"),
    ],
)
def test_the_append_verdict_names_the_mistake(wrong, hint):
    report = exercise.check_kv_append(wrong)
    failed = [r for r in report.rows if not r.passed and not r.skipped]
    assert failed and any(hint in r.detail for r in failed), str(report)


def test_the_append_fails_where_only_its_cases_can_see_it():
    """A sequence-0 position is right for a batch of one; v read with k's strides is right
    wherever both have one layout: each fails the cases built for it, and only those."""
    for wrong, cases in ((append_position_of_sequence_0, "prefill"), (append_v_with_k_strides, ("k_new in", "the cache's last"))):
        report = exercise.check_kv_append(wrong)
        failed = {r.case for r in report.rows if not r.passed}
        if wrong is append_position_of_sequence_0:
            assert failed == {r.case for r in report.rows if not r.case.startswith(cases)}, str(report)
        else:
            assert failed == {r.case for r in report.rows if r.case.startswith(cases)}, str(report)


def test_the_append_reference_is_the_models_cache_write():
    """kv_append_ref equals KVCache.append for sequences in step, and a per-sequence slice
    assignment for ragged ones; the old rows survive."""
    config = LlamaConfig(hidden_size=64, num_heads=4, num_kv_heads=2, num_layers=1, max_positions=24)
    cache = KVCache(config, batch=2, dtype=torch.float64, device="cpu")
    gen = torch.Generator().manual_seed(3)
    old_k, old_v = (torch.randn(2, 2, 24, 16, generator=gen, dtype=torch.float64) for _ in range(2))
    cache.keys[0].copy_(old_k)
    cache.values[0].copy_(old_v)
    cache.length = 5
    k, v = (torch.randn(2, 2, 7, 16, generator=gen, dtype=torch.float64) for _ in range(2))
    cache.append(0, k, v)
    five = torch.full((2,), 5, dtype=torch.int32)
    ref_k, ref_v = ch09.kv_append_ref(old_k, old_v, k, v, five, torch.full((2,), 7, dtype=torch.int32))
    assert torch.equal(ref_k, cache.keys[0]) and torch.equal(ref_v, cache.values[0])
    ragged_k, _ = ch09.kv_append_ref(old_k, old_v, k, v, torch.tensor([0, 9], dtype=torch.int32), torch.tensor([7, 2], dtype=torch.int32))
    assert torch.equal(ragged_k[1, :, 9:11], k[1, :, :2]) and torch.equal(ragged_k[1, :, 11:], old_k[1, :, 11:])
    assert torch.equal(ragged_k[1, :, :9], old_k[1, :, :9]) and torch.equal(ragged_k[0, :, :7], k[0])


def test_the_append_launcher_refuses_what_the_kernel_cannot_take():
    k, cache = torch.randn(2, 1, 4, 16), torch.randn(2, 1, 10, 16)
    at, n = torch.tensor([0, 6], dtype=torch.int32), torch.tensor([4, 4], dtype=torch.int32)
    ch09.launch_kv_append(append_at_row_zero, k, k, at, n, cache.clone(), cache.clone())  # fits: 6 + 4 = 10
    with pytest.raises(ValueError, match="do not fit"):
        ch09.launch_kv_append(append_at_row_zero, k, k, at + 1, n, cache, cache)
    with pytest.raises(ValueError, match="do not fit"):
        ch09.launch_kv_append(append_at_row_zero, k, k, at, n + 1, cache, cache)
    with pytest.raises(ValueError, match="int32"):
        ch09.launch_kv_append(append_at_row_zero, k, k, at.long(), n, cache, cache)
    with pytest.raises(ValueError, match="one dtype"):
        ch09.launch_kv_append(append_at_row_zero, k, k, at, n, cache.double(), cache.double())
    with pytest.raises(TypeError, match="triton.jit"):
        ch09.launch_kv_append(lambda *a: None, k, k, at, n, cache, cache)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (qkv_v_rotated, "v was rotated too"),
        (qkv_k_not_rotated, "k was not rotated"),
        (qkv_table_row_n, "the table rows start at 0"),
        (qkv_cache_row_n, "the cache rows start at 0"),
        (qkv_position_of_sequence_0, "sequence 0's position"),
        (qkv_no_masks, "a store needs a mask"),
    ],
)
def test_the_qkv_verdict_names_the_mistake(wrong, hint):
    report = exercise.check_qkv_rope_append(wrong)
    failed = [r for r in report.rows if not r.passed and not r.skipped]
    assert failed and any(hint in r.detail for r in failed), str(report)


def test_the_qkv_reference_is_the_models_split_rotation_and_cache():
    """qkv_rope_append_ref equals the model's steps: the projection viewed as heads, apply_rotary
    with rotary_tables at the sequence's positions, KVCache.append."""
    config = LlamaConfig(hidden_size=64, num_heads=4, num_kv_heads=2, num_layers=1, max_positions=30)
    gen = torch.Generator().manual_seed(5)
    B, N, D, start = 2, 6, 16, 9
    qkv = torch.randn(B, N, (4 + 2 * 2) * D, generator=gen, dtype=torch.float64)
    old = torch.randn(B, 2, 30, D, generator=gen, dtype=torch.float64)
    cos, sin = ch09.rope_tables(30, D, theta=config.rope_theta, dtype=torch.float64)
    q_out, k_out, v_out = ch09.qkv_rope_append_ref(qkv, cos, sin, torch.full((B,), start, dtype=torch.int32), old, old, 4)
    heads = qkv.view(B, N, 8, D).transpose(1, 2)
    model_cos, model_sin = rotary_tables(config, torch.arange(start, start + N), torch.float64)
    cache = KVCache(config, batch=B, dtype=torch.float64, device="cpu")
    cache.keys[0].copy_(old)
    cache.values[0].copy_(old)
    cache.length = start
    cache.append(0, apply_rotary(heads[:, 4:6], model_cos, model_sin), heads[:, 6:])
    torch.testing.assert_close(q_out, apply_rotary(heads[:, :4], model_cos, model_sin), rtol=0, atol=1e-6)
    torch.testing.assert_close(k_out, cache.keys[0], rtol=0, atol=1e-6)  # the model's angles are float32
    assert torch.equal(v_out, cache.values[0])


def test_the_qkv_launcher_refuses_what_the_kernel_cannot_take():
    B, Hq, Hk, N, D, P = 2, 2, 1, 5, 16, 12
    qkv, q_out = torch.randn(B, N, (Hq + 2 * Hk) * D), torch.empty(B, Hq, N, D)
    cache, (cos, sin) = torch.randn(B, Hk, P, D), ch09.rope_tables(P, D)
    at = torch.tensor([0, 7], dtype=torch.int32)
    ch09.launch_qkv_rope_append(qkv_cache_row_n, qkv, cos, sin, at, q_out, cache.clone(), cache.clone())  # fits: 7 + 5 = 12
    with pytest.raises(ValueError, match="do not fit"):
        ch09.launch_qkv_rope_append(qkv_cache_row_n, qkv, cos, sin, at + 1, q_out, cache, cache)
    with pytest.raises(ValueError, match="do not fit"):
        ch09.launch_qkv_rope_append(qkv_cache_row_n, qkv, cos[:10], sin[:10], at, q_out, cache, cache)
    with pytest.raises(ValueError, match=r"\(Hq \+ 2·Hk\)·D"):
        ch09.launch_qkv_rope_append(qkv_cache_row_n, qkv[..., :-D], cos, sin, at, q_out, cache, cache)
    with pytest.raises(ValueError, match="one set of strides"):
        ch09.launch_qkv_rope_append(qkv_cache_row_n, qkv, cos, sin, at, q_out, cache, torch.randn(B, Hk, P + 3, D)[:, :, :P])


@pytest.mark.gpu
@pytest.mark.parametrize("stem", STEMS)
def test_gpu_chapter_9_checks_on_compiled_kernels(stem, tmp_path):
    notebooks.assert_gpu_checks_on_compiled_kernels(stem, tmp_path)
