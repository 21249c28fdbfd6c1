"""Exercise 9a's check (tritonforge.exercise.ch09) catches a wrong rotary embedding: GPT-J's
interleaved pairs instead of rotate_half's halves, the rotation the wrong way (a sign), cos and sin
swapped, no masks, the table read from row 0 instead of the position offset, the program's head
decoded as if Hk were Hq (grouped-query attention), k read with q's strides, k left unrotated.
Each fails its check on every seed, the reference solution passes; the float64 reference is the
model's own apply_rotary."""

from __future__ import annotations

import pytest
import torch

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge import exercise
from tritonforge.exercise import ch09
from tritonforge.models.llama import LlamaConfig, apply_rotary, rotary_tables

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


TABLE = {
    # notebook stem: (function name in the stub and the solution, the check, planted wrong answers)
    "ex09a_fused_rope": (
        "rope_kernel",
        exercise.check_rope,
        [
            rope_interleaved_pairs,
            rope_rotation_sign_flipped,
            rope_cos_sin_swapped,
            rope_no_masks,
            rope_offset_ignored,
            rope_heads_as_if_hk_were_hq,
            rope_k_with_q_strides,
            rope_k_not_rotated,
        ],
    ),
}
STEMS = sorted(TABLE)
"""The generic tests over TABLE (stub, planted answers, solution) are in test_every_exercise.py."""


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


@pytest.mark.gpu
@pytest.mark.parametrize("stem", STEMS)
def test_gpu_chapter_9_checks_on_compiled_kernels(stem, tmp_path):
    name, check, planted = TABLE[stem]
    notebooks.assert_gpu_checks_on_compiled_kernels(stem, name, check, planted, tmp_path)
