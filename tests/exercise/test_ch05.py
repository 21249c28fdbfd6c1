"""Exercise 5a's check (tritonforge.exercise.ch05) catches a wrong GeGLU: a tanh from exp that
overflows (exp(2z), or e^z and e^-z), the exact erf GELU for the tanh one, the cubic term or the
half left out, gate and up swapped, no masks, one row stride for all; exercise 5b's catches a wrong
SwiGLU backward: the (1 + g(1 - s)) factor forgotten, silu for its derivative, the product rule's
s term dropped, up left out of dgate, dup = dy * s, the outputs swapped, a sigmoid that overflows,
no masks, one row stride; exercise 5c's catches a wrong matmul + bias + SiLU: no mask on the last
slice of K, the last slice dropped, the bias per row, SiLU before the bias, a float16 accumulator,
w taken for contiguous, no store mask, program ids swapped. Each fails its check, the reference
solutions pass."""

from __future__ import annotations

import pytest
import torch

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge import exercise, hardware
from tritonforge.exercise import ch05

import triton
import triton.language as tl

from . import notebooks

# Exercise 5a: GeGLU forward -------------------------------------------------------------------


@triton.jit
def _geglu_body(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr, MISTAKE: tl.constexpr):
    """The right kernel but for one mistake, chosen by MISTAKE (0: none)."""
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    g = tl.load(gate_ptr + row * gate_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(up_ptr + row * (gate_row_stride if MISTAKE == 7 else up_row_stride) + cols, mask=mask, other=0.0).to(tl.float32)
    if MISTAKE == 5:  # gelu(up) * gate
        g, up = up, g
    if MISTAKE == 3:
        z = 0.7978845608028654 * g  # the cubic term left out
    else:
        z = 0.7978845608028654 * (g + 0.044715 * g * g * g)
    if MISTAKE == 1:  # (e^{2z} - 1) / (e^{2z} + 1): inf / inf once z > 44.4
        e2 = tl.exp(2.0 * z)
        tanh_z = (e2 - 1.0) / (e2 + 1.0)
    elif MISTAKE == 2:  # (e^z - e^-z) / (e^z + e^-z): inf / inf once |z| > 88.7
        tanh_z = (tl.exp(z) - tl.exp(-z)) / (tl.exp(z) + tl.exp(-z))
    else:
        e = tl.exp(-2.0 * tl.abs(z))
        t = (1.0 - e) / (1.0 + e)
        tanh_z = tl.where(z < 0, -t, t)
    if MISTAKE == 4:
        gelu = g * (1.0 + tanh_z)  # the 0.5 left out
    elif MISTAKE == 6:
        gelu = 0.5 * g * (1.0 + tl.math.erf(g * 0.7071067811865476))  # the exact GELU, not the tanh one
    else:
        gelu = 0.5 * g * (1.0 + tanh_z)
    tl.store(out_ptr + row * (gate_row_stride if MISTAKE == 7 else out_row_stride) + cols, gelu * up, mask=mask)


@triton.jit
def geglu_tanh_exp_2z_overflows(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _geglu_body(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N, 1)


@triton.jit
def geglu_tanh_exp_z_overflows(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _geglu_body(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N, 2)


@triton.jit
def geglu_forgets_cubic_term(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _geglu_body(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N, 3)


@triton.jit
def geglu_forgets_half(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _geglu_body(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N, 4)


@triton.jit
def geglu_gate_up_swapped(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _geglu_body(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N, 5)


@triton.jit
def geglu_exact_erf_gelu(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _geglu_body(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N, 6)


@triton.jit
def geglu_one_row_stride(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    _geglu_body(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N, 7)


@triton.jit
def geglu_no_masks(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # the last block runs past the row
    g = tl.load(gate_ptr + row * gate_row_stride + cols).to(tl.float32)
    up = tl.load(up_ptr + row * up_row_stride + cols).to(tl.float32)
    z = 0.7978845608028654 * (g + 0.044715 * g * g * g)
    e = tl.exp(-2.0 * tl.abs(z))
    t = (1.0 - e) / (1.0 + e)
    tl.store(out_ptr + row * out_row_stride + cols, 0.5 * g * (1.0 + tl.where(z < 0, -t, t)) * up)


# Exercise 5b: SwiGLU backward -----------------------------------------------------------------


@triton.jit
def _bwd_body(
    gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr,
    gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
    N, BLOCK_N: tl.constexpr, MISTAKE: tl.constexpr,
):  # fmt: skip
    """The right kernel but for one mistake, chosen by MISTAKE (0: none)."""
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    g = tl.load(gate_ptr + row * gate_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(up_ptr + row * up_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * (gate_row_stride if MISTAKE == 8 else dy_row_stride) + cols, mask=mask, other=0.0).to(tl.float32)
    if MISTAKE == 7:  # e^g / (1 + e^g): inf / inf once g > 88.7
        s = tl.exp(g) / (1.0 + tl.exp(g))
    else:
        s = 1.0 / (1.0 + tl.exp(-g))
    if MISTAKE == 1:
        dgate = dy * up * s  # the (1 + g(1 - s)) factor forgotten
    elif MISTAKE == 2:
        dgate = dy * up * g * s  # silu(g), the forward, for its derivative
    elif MISTAKE == 3:
        dgate = dy * up * g * s * (1.0 - s)  # the product rule's s term dropped
    elif MISTAKE == 4:
        dgate = dy * s * (1.0 + g * (1.0 - s))  # up left out
    else:
        dgate = dy * up * s * (1.0 + g * (1.0 - s))
    dup = dy * s if MISTAKE == 5 else dy * g * s  # 5: dy * s, g left out
    if MISTAKE == 6:  # the outputs swapped
        dgate, dup = dup, dgate
    tl.store(dgate_ptr + row * dgate_row_stride + cols, dgate, mask=mask)
    tl.store(dup_ptr + row * dup_row_stride + cols, dup, mask=mask)


@triton.jit
def bwd_forgets_product_factor(
    gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
    N, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _bwd_body(
        gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
        N, BLOCK_N, 1,
    )  # fmt: skip


@triton.jit
def bwd_silu_for_its_derivative(
    gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
    N, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _bwd_body(
        gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
        N, BLOCK_N, 2,
    )  # fmt: skip


@triton.jit
def bwd_drops_sigmoid_term(
    gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
    N, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _bwd_body(
        gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
        N, BLOCK_N, 3,
    )  # fmt: skip


@triton.jit
def bwd_dgate_without_up(
    gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
    N, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _bwd_body(
        gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
        N, BLOCK_N, 4,
    )  # fmt: skip


@triton.jit
def bwd_dup_is_dy_sigmoid(
    gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
    N, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _bwd_body(
        gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
        N, BLOCK_N, 5,
    )  # fmt: skip


@triton.jit
def bwd_outputs_swapped(
    gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
    N, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _bwd_body(
        gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
        N, BLOCK_N, 6,
    )  # fmt: skip


@triton.jit
def bwd_sigmoid_overflows(
    gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
    N, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _bwd_body(
        gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
        N, BLOCK_N, 7,
    )  # fmt: skip


@triton.jit
def bwd_one_row_stride(
    gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
    N, BLOCK_N: tl.constexpr,
):  # fmt: skip
    _bwd_body(
        gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
        N, BLOCK_N, 8,
    )  # fmt: skip


@triton.jit
def bwd_no_masks(
    gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
    N, BLOCK_N: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # the last block runs past the row
    g = tl.load(gate_ptr + row * gate_row_stride + cols).to(tl.float32)
    up = tl.load(up_ptr + row * up_row_stride + cols).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_row_stride + cols).to(tl.float32)
    s = 1.0 / (1.0 + tl.exp(-g))
    tl.store(dgate_ptr + row * dgate_row_stride + cols, dy * up * s * (1.0 + g * (1.0 - s)))
    tl.store(dup_ptr + row * dup_row_stride + cols, dy * g * s)


# Exercise 5c: matmul + bias + SiLU ------------------------------------------------------------


@triton.jit
def _matmul_body(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K,
    stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MISTAKE: tl.constexpr,
):  # fmt: skip
    """The right kernel but for one mistake, chosen by MISTAKE (0: none)."""
    if MISTAKE == 8:  # program ids swapped
        pid_m, pid_n = tl.program_id(1), tl.program_id(0)
    else:
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    if MISTAKE == 6:  # w taken for a contiguous [K, N]: row stride N, column stride 1
        stride_wk, stride_wn = N, 1
    if MISTAKE == 5:  # the accumulator in the inputs' dtype (float16 for float16 inputs)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=x_ptr.dtype.element_ty)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, (K // BLOCK_K) * BLOCK_K if MISTAKE == 2 else K, BLOCK_K):  # 2: whole slices only
        k = k0 + ks
        if MISTAKE == 1:  # the K edge not masked: the last slice reads past K
            x_mask = rows[:, None] < M
            w_mask = cols[None, :] < N
        else:
            x_mask = (rows[:, None] < M) & (k[None, :] < K)
            w_mask = (k[:, None] < K) & (cols[None, :] < N)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + k[None, :] * stride_xk, mask=x_mask, other=0.0)
        w = tl.load(w_ptr + k[:, None] * stride_wk + cols[None, :] * stride_wn, mask=w_mask, other=0.0)
        acc = tl.dot(x, w, acc, input_precision="ieee")
    if MISTAKE == 3:  # b[row] down the rows instead of b[col] along them
        b = tl.load(b_ptr + rows, mask=rows < M, other=0.0).to(tl.float32)
        z = acc.to(tl.float32) + b[:, None]
    else:
        b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        z = acc.to(tl.float32) + b[None, :]
    if MISTAKE == 4:  # SiLU of x @ w, then the bias
        a = acc.to(tl.float32)
        out = a / (1.0 + tl.exp(-a)) + b[None, :]
    else:
        out = z / (1.0 + tl.exp(-z))
    if MISTAKE == 7:  # the whole tile stored, past the edges of out
        tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, out)
    else:
        tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, out, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def matmul_no_k_mask(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    _matmul_body(
        x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on, BLOCK_M, BLOCK_N, BLOCK_K, 1
    )  # fmt: skip


@triton.jit
def matmul_drops_k_tail(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    _matmul_body(
        x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on, BLOCK_M, BLOCK_N, BLOCK_K, 2
    )  # fmt: skip


@triton.jit
def matmul_bias_per_row(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    _matmul_body(
        x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on, BLOCK_M, BLOCK_N, BLOCK_K, 3
    )  # fmt: skip


@triton.jit
def matmul_silu_before_bias(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    _matmul_body(
        x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on, BLOCK_M, BLOCK_N, BLOCK_K, 4
    )  # fmt: skip


@triton.jit
def matmul_accumulates_in_input_dtype(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    _matmul_body(
        x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on, BLOCK_M, BLOCK_N, BLOCK_K, 5
    )  # fmt: skip


@triton.jit
def matmul_w_assumed_contiguous(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    _matmul_body(
        x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on, BLOCK_M, BLOCK_N, BLOCK_K, 6
    )  # fmt: skip


@triton.jit
def matmul_unmasked_store(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    _matmul_body(
        x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on, BLOCK_M, BLOCK_N, BLOCK_K, 7
    )  # fmt: skip


@triton.jit
def matmul_program_ids_swapped(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    _matmul_body(
        x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on, BLOCK_M, BLOCK_N, BLOCK_K, 8
    )  # fmt: skip


STEMS = notebooks.stems(5)
"""This chapter's exercises. Their rows in ``tritonforge.exercise.registry`` name the planted wrong
answers above; the generic tests over every row (stub, planted answers, solution) are in
test_every_exercise.py."""


def test_references_agree_with_pytorch():
    """5a's reference is PyTorch's tanh GELU times up; 5b's formulas are autograd's gradients of
    silu(gate) * up; 5c's is F.silu(F.linear(x, w.T, b)) — all in float64."""
    gen = torch.Generator().manual_seed(0)
    gate, up, dy = (3 * torch.randn(4, 9, generator=gen, dtype=torch.float64) for _ in range(3))
    assert torch.allclose(ch05.geglu_ref(gate, up), torch.nn.functional.gelu(gate, approximate="tanh") * up, rtol=0, atol=1e-15)
    g, u = gate.clone().requires_grad_(True), up.clone().requires_grad_(True)
    dgate, dup = torch.autograd.grad(torch.nn.functional.silu(g) * u, (g, u), dy)
    ref_dgate, ref_dup = ch05.swiglu_grads_ref(gate, up, dy)
    assert torch.allclose(ref_dgate, dgate, rtol=1e-13, atol=1e-13) and torch.allclose(ref_dup, dup, rtol=1e-13, atol=1e-13)
    x, w, b = (torch.randn(*shape, generator=gen, dtype=torch.float64) for shape in ((5, 7), (7, 3), (3,)))
    linear = torch.nn.functional.silu(torch.nn.functional.linear(x, w.t(), b))
    assert torch.allclose(ch05.matmul_bias_silu_ref(x, w, b), linear, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(
    "check, wrong, case_start, text",
    [
        (exercise.check_geglu, geglu_tanh_exp_2z_overflows, "large |gate|", "build tanh from e = exp(−2|z|)"),
        (exercise.check_geglu, geglu_tanh_exp_z_overflows, "large |gate|", "build tanh from e = exp(−2|z|)"),
        (exercise.check_swiglu_bwd, bwd_sigmoid_overflows, "large |gate|", "σ(g) = 1/(1 + exp(−g))"),
    ],
)
def test_an_overflowing_exp_fails_only_the_large_gate_case_and_is_named(check, wrong, case_start, text):
    """A tanh or a sigmoid from exp that overflows is right wherever |gate| is moderate: only the
    case of large gates fails, on every seed, and its verdict names the overflow (not "never
    written")."""
    for seed in notebooks.PLANTED_SEEDS:
        report = check(wrong, seed=seed)
        failed = [r for r in report.rows if not r.passed]
        assert [r.case for r in failed] == [r.case for r in report.rows if r.case.startswith(case_start)], str(report)
        assert all(text in r.detail and "never written" not in r.detail for r in failed), str(report)


def _skip_fp16_accumulator_on_old_interpreter(wrong) -> None:
    """Triton 3.3's interpreter, and the compiler on a GPU (3.6 on the H200), refuse a float16
    accumulator in ``tl.dot`` with ``input_precision="ieee"`` (an error in every float16 case)
    where the 3.4+ interpreter computes it: the mistake still fails (the generic planted-answer
    test runs everywhere), but not only in the case built for it, and the verdict reports the
    compiler's error rather than naming the accumulator."""
    old_interpreter = tuple(int(v) for v in triton.__version__.split(".")[:2]) < (3, 4)
    if wrong is matmul_accumulates_in_input_dtype and (old_interpreter or not hardware.interpreting()):
        pytest.skip("this Triton rejects a float16 tl.dot accumulator outright (the mistake still fails)")


@pytest.mark.parametrize(
    "check, wrong, hint",
    [
        (exercise.check_geglu, geglu_exact_erf_gelu, "the exact GELU"),
        (exercise.check_geglu, geglu_gate_up_swapped, "gelu(up)·gate"),
        (exercise.check_swiglu_bwd, bwd_forgets_product_factor, "misses the factor (1 + g·(1 − σ(g)))"),
        (exercise.check_swiglu_bwd, bwd_silu_for_its_derivative, "silu(g) is the forward"),
        (exercise.check_swiglu_bwd, bwd_drops_sigmoid_term, "first term, σ(g), is missing"),
        (exercise.check_swiglu_bwd, bwd_dgate_without_up, "up is missing from dgate"),
        (exercise.check_swiglu_bwd, bwd_dup_is_dy_sigmoid, "dup = dy·σ(g) misses g"),
        (exercise.check_swiglu_bwd, bwd_outputs_swapped, "dgate and dup are swapped"),
        (exercise.check_matmul_bias_silu, matmul_silu_before_bias, "SiLU came before the bias"),
        (exercise.check_matmul_bias_silu, matmul_drops_k_tail, "the last, partial slice of K is missing"),
        (exercise.check_matmul_bias_silu, matmul_accumulates_in_input_dtype, "keep the accumulator in float32"),
        (exercise.check_matmul_bias_silu, matmul_bias_per_row, "the bias went down the rows"),
    ],
)
def test_the_verdict_names_the_mistake(check, wrong, hint):
    _skip_fp16_accumulator_on_old_interpreter(wrong)
    report = check(wrong)
    failed = [r for r in report.rows if not r.passed and not r.skipped]
    assert failed and any(hint in r.detail for r in failed), str(report)


def test_the_erf_gelu_fails_the_case_built_for_it_on_every_seed():
    """The exact GELU differs from the tanh one by at most 5e-4 (near |g| = 2.7): the case whose
    gates run from −4 to 4 along each row, with |up| >= 1/2, catches it every time."""
    for seed in notebooks.PLANTED_SEEDS:
        report = exercise.check_geglu(geglu_exact_erf_gelu, seed=seed)
        assert any(r.case.startswith("gate from −4 to 4") for r in report.rows if not r.passed), str(report)


@pytest.mark.parametrize(
    "wrong, spared",
    [
        # a K that BLOCK_K divides needs no K mask and has no partial slice to drop; in the outlier
        # case the last slice adds less than the budget (9 products of at most 0.04 next to 3000)
        (matmul_no_k_mask, ("whole tiles",)),
        (matmul_drops_k_tail, ("whole tiles", "float16 20×24")),
        # only float16 inputs leave a float16 accumulator, and only the outlier feature makes it lose enough
        (matmul_accumulates_in_input_dtype, tuple(r.name for r in ch05.matmul_bias_silu_cases() if "outlier" not in r.name)),
    ],
)
def test_ex05c_mistakes_fail_the_cases_built_for_them(wrong, spared):
    _skip_fp16_accumulator_on_old_interpreter(wrong)
    """Each mistake of exercise 5c about K fails every case that can show it, on every seed."""
    for seed in notebooks.PLANTED_SEEDS:
        report = exercise.check_matmul_bias_silu(wrong, seed=seed)
        failed = {r.case for r in report.rows if not r.passed}
        assert failed == {r.case for r in report.rows if not r.case.startswith(spared)}, str(report)


def test_ex05c_draws_the_output_of_a_failed_case():
    report = exercise.check_matmul_bias_silu(matmul_unmasked_store)
    pictured = [r for r in report.rows if r.picture and not r.passed]
    assert pictured and all("!" in r.picture for r in pictured[:2]), str(report)
    assert "outside the output" in pictured[0].detail


@pytest.mark.gpu
@pytest.mark.parametrize("stem", STEMS)
def test_gpu_chapter_5_checks_on_compiled_kernels(stem, tmp_path):
    notebooks.assert_gpu_checks_on_compiled_kernels(stem, tmp_path)
