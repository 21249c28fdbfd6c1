"""Every cell of an exercise notebook that runs the learner's code runs it guarded.

Statically: outside the stub cell, the learner's function appears only as the first argument of
``exercise.try_*`` or ``exercise.check_*`` (both run it inside NaN-padded buffers and never
raise), or inside ``if report.passed:`` (after the guarded check passed every case). No cell
calls a launcher (``exercise.launch_*``) on it directly: an unmasked kernel on plain tensors can
kill the Jupyter kernel (``free(): invalid pointer``).

Dynamically: each notebook, with a kernel that has no masks at all in place of the stub, runs
from top to bottom in a real Jupyter kernel, and its try and check cells print verdicts.
"""

from __future__ import annotations

import ast
import json
import pathlib

import pytest

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tests.helpers import unix_socket_kernels
from tritonforge.exercise import grade, stubs

from . import notebooks
from .test_grade import write_notebook

STEMS = sorted(grade.NOTEBOOKS)
GUARDED_PREFIXES = ("try_", "check_")


def _code_cells(stem: str) -> list[tuple[int, dict]]:
    nb = json.loads((notebooks.EXERCISES / f"{stem}.ipynb").read_text(encoding="utf-8"))
    return [(i, c) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]


def _guarded_uses(tree: ast.AST, name: str) -> set[int]:
    """ids of the Name nodes for ``name`` that are guarded: ``exercise.try_*(name, ...)``,
    ``exercise.check_*(name, ...)``, or anywhere under ``if report.passed:``."""
    ok: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "exercise"
            and node.func.attr.startswith(GUARDED_PREFIXES)
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == name
        ):
            ok.add(id(node.args[0]))
        if isinstance(node, ast.If) and ast.unparse(node.test) == "report.passed":
            ok.update(id(n) for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id == name)
    return ok


@pytest.mark.parametrize("stem", STEMS)
def test_learner_code_runs_only_through_guarded_calls(stem):
    name = grade.NOTEBOOKS[stem].function
    tried = False
    for index, cell in _code_cells(stem):
        if grade.STUB_TAG in cell["metadata"].get("tags", []):
            continue
        source = stubs.without_magics("".join(cell["source"]))
        tree = ast.parse(source)
        uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name]
        unguarded = [n for n in uses if id(n) not in _guarded_uses(tree, name)]
        assert not unguarded, f"cell {index} uses {name} outside exercise.try_*/check_*:\n{source}"
        assert "exercise.launch_" not in source, f"cell {index} calls a launcher directly (unguarded):\n{source}"
        tried = tried or "exercise.try_" in source and uses
    assert tried, f"{stem} has no try cell (exercise.try_*({name}, ...))"


# Kernels without a single mask, one per kernel exercise: on plain tensors they read and write
# past the ends of the rows (the crash the try cells used to risk).

NO_MASKS = {
    "ex02a_bias_relu_2d": '''\
@triton.jit
def bias_relu_2d_kernel(x_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn).to(tl.float32)
    bias = tl.load(bias_ptr + cols).to(tl.float32)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, tl.maximum(x + bias[None, :], 0.0))
''',
    "ex02b_row_max": '''\
@triton.jit
def row_max_kernel(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.full([BLOCK_N], float("-inf"), tl.float32)
    for start in range(0, N, BLOCK_N):
        acc = tl.maximum(acc, tl.load(x_ptr + row * stride_xm + start + cols).to(tl.float32))
    tl.store(out_ptr + row, tl.max(acc, axis=0))
''',
    "ex02c_transpose": '''\
@triton.jit
def transpose_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    tile = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn)
    tl.store(out_ptr + cols[None, :] * stride_om + rows[:, None] * stride_on, tile)
''',
    "ex03a_layer_norm_forward": '''\
@triton.jit
def layer_norm_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * x_row_stride + cols).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    var = tl.sum((x - mean) * (x - mean), axis=0) / N
    y = (x - mean) / tl.sqrt(var + eps) * tl.load(w_ptr + cols).to(tl.float32) + tl.load(b_ptr + cols).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, y)
''',
    "ex03b_fused_add_rms_norm": '''\
@triton.jit
def fused_add_rms_norm_kernel(
    x_ptr, residual_ptr, w_ptr, h_ptr, y_ptr, x_row_stride, residual_row_stride, h_row_stride, y_row_stride,
    N, eps, BLOCK_N: tl.constexpr, ROUND_BF16: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    h = tl.load(x_ptr + row * x_row_stride + cols).to(tl.float32) + tl.load(residual_ptr + row * residual_row_stride + cols).to(tl.float32)
    tl.store(h_ptr + row * h_row_stride + cols, cast_for_store(h, h_ptr.dtype.element_ty, ROUND_BF16))
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N + eps)
    y = h * rstd * tl.load(w_ptr + cols).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, cast_for_store(y, y_ptr.dtype.element_ty, ROUND_BF16))
''',
    "ex03c_rms_norm_long_rows": '''\
@triton.jit
def rms_norm_long_rows_kernel(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        x = tl.load(x_ptr + row * x_row_stride + start + cols).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        x = tl.load(x_ptr + row * x_row_stride + start + cols).to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + start + cols, x * rstd * tl.load(w_ptr + start + cols).to(tl.float32))
''',
    "ex04a_rms_norm_dweight": '''\
@triton.jit
def rms_norm_dweight_kernel(
    dy_ptr, x_ptr, rstd_ptr, partial_ptr, dy_row_stride, x_row_stride, partial_row_stride, M, N, rows_per_program, BLOCK_N: tl.constexpr
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in range(pid * rows_per_program, pid * rows_per_program + rows_per_program):
        dy = tl.load(dy_ptr + row * dy_row_stride + cols).to(tl.float32)
        x = tl.load(x_ptr + row * x_row_stride + cols).to(tl.float32)
        acc += dy * x * tl.load(rstd_ptr + row)
    tl.store(partial_ptr + pid * partial_row_stride + cols, acc)
''',
    "ex04b_rms_norm_dx": '''\
@triton.jit
def rms_norm_dx_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    dy_w = tl.load(dy_ptr + row * dy_row_stride + cols).to(tl.float32) * tl.load(w_ptr + cols).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    x_hat = tl.load(x_ptr + row * x_row_stride + cols).to(tl.float32) * rstd
    tl.store(dx_ptr + row * dx_row_stride + cols, rstd * (dy_w - x_hat * (tl.sum(dy_w * x_hat, axis=0) / N)))
''',
    "ex05a_geglu_forward": '''\
@triton.jit
def geglu_kernel(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    g = tl.load(gate_ptr + row * gate_row_stride + cols).to(tl.float32)
    e = tl.exp(-2.0 * tl.abs(0.7978845608028654 * (g + 0.044715 * g * g * g)))
    tanh_z = tl.where(g < 0, -1.0, 1.0) * (1.0 - e) / (1.0 + e)
    tl.store(out_ptr + row * out_row_stride + cols, 0.5 * g * (1.0 + tanh_z) * tl.load(up_ptr + row * up_row_stride + cols).to(tl.float32))
''',
    "ex05b_swiglu_backward": '''\
@triton.jit
def swiglu_bwd_kernel(
    gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
    N, BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    g = tl.load(gate_ptr + row * gate_row_stride + cols).to(tl.float32)
    up = tl.load(up_ptr + row * up_row_stride + cols).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_row_stride + cols).to(tl.float32)
    s = 1.0 / (1.0 + tl.exp(-g))
    tl.store(dgate_ptr + row * dgate_row_stride + cols, dy * up * s * (1.0 + g * (1.0 - s)))
    tl.store(dup_ptr + row * dup_row_stride + cols, dy * g * s)
''',
    "ex05c_matmul_bias_silu": '''\
@triton.jit
def matmul_bias_silu_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rows[:, None] * stride_xm + (k0 + ks)[None, :] * stride_xk)
        w = tl.load(w_ptr + (k0 + ks)[:, None] * stride_wk + cols[None, :] * stride_wn)
        acc = tl.dot(x, w, acc)
    z = acc + tl.load(b_ptr + cols).to(tl.float32)[None, :]
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, z / (1.0 + tl.exp(-z)))
''',
    "ex06a_log_softmax": '''\
@triton.jit
def log_softmax_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    m = float("-inf")
    s = 0.0
    for start in range(0, N, BLOCK_N):
        x = tl.load(x_ptr + row * x_row_stride + start + cols).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for start in range(0, N, BLOCK_N):
        x = tl.load(x_ptr + row * x_row_stride + start + cols).to(tl.float32)
        tl.store(out_ptr + row * out_row_stride + start + cols, (x - m) - tl.log(s))
''',
    "ex06b_merge_softmax_states": '''\
@triton.jit
def merge_states_kernel(
    m1_ptr, s1_ptr, o1_ptr, m2_ptr, s2_ptr, o2_ptr, m_ptr, s_ptr, o_ptr, o1_row_stride, o2_row_stride, o_row_stride, D,
    BLOCK_D: tl.constexpr,
):
    row = tl.program_id(0)
    m1 = tl.load(m1_ptr + row)
    m2 = tl.load(m2_ptr + row)
    m = tl.maximum(m1, m2)
    w1 = tl.load(s1_ptr + row) * tl.exp(m1 - m)
    w2 = tl.load(s2_ptr + row) * tl.exp(m2 - m)
    cols = tl.arange(0, BLOCK_D)
    o1 = tl.load(o1_ptr + row * o1_row_stride + cols).to(tl.float32)
    o2 = tl.load(o2_ptr + row * o2_row_stride + cols).to(tl.float32)
    tl.store(m_ptr + row, m)
    tl.store(s_ptr + row, w1 + w2)
    tl.store(o_ptr + row * o_row_stride + cols, (w1 * o1 + w2 * o2) / (w1 + w2))
''',
    "ex06c_cross_entropy": '''\
@triton.jit
def cross_entropy_kernel(logits_ptr, target_ptr, loss_ptr, logits_row_stride, N, ignore_index, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    m = float("-inf")
    s = 0.0
    for start in range(0, N, BLOCK_N):
        x = tl.load(logits_ptr + row * logits_row_stride + start + cols).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    target = tl.load(target_ptr + row)
    x_target = tl.load(logits_ptr + row * logits_row_stride + target).to(tl.float32)
    tl.store(loss_ptr + row, m + tl.log(s) - x_target)
''',
    "ex07a_softcapping": '''\
@triton.jit
def attention_softcap_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, softcap, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]).to(tl.float32)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    for start_n in range(0, Nk, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]).to(tl.float32)
        v = tl.load(v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]).to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    tl.store(out_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :], acc / l_i[:, None])
''',
    "ex07b_alibi": '''\
@triton.jit
def attention_alibi_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]).to(tl.float32)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    for start_n in range(0, Nk, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]).to(tl.float32)
        v = tl.load(v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]).to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    tl.store(out_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :], acc / l_i[:, None])
''',
    "ex07c_sliding_window": '''\
@triton.jit
def sliding_window_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, H, Nq, Nk, sm_scale, window, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]).to(tl.float32)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    for start_n in range(0, Nk, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]).to(tl.float32)
        v = tl.load(v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]).to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    tl.store(out_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :], acc / l_i[:, None])
''',
    "ex07d_attention_bwd_preprocess": '''\
@triton.jit
def attention_bwd_preprocess_kernel(
    o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, stride_ob, stride_oh, stride_om, stride_dob, stride_doh, stride_dom,
    stride_lh, H, Nq, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
):
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    stats = tl.program_id(1) * stride_lh + rows
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :]).to(tl.float32)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + rows[:, None] * stride_dom + dims[None, :]).to(tl.float32)
    tl.store(delta_ptr + stats, tl.sum(o * do, axis=1) - tl.load(dlse_ptr + stats))
    tl.store(lse2_ptr + stats, tl.load(lse_ptr + stats) * 1.4426950408889634)
''',
    "ex07e_attention_dv_block": '''\
@triton.jit
def attention_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh,
    stride_dvn, stride_lh, H, Nq, Nk, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    k = tl.load(k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]).to(tl.float32)
    v = tl.load(v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]).to(tl.float32)
    dk = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    for start_m in range(0, Nq, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]).to(tl.float32)
        do = tl.load(do_ptr + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom + offs_d[None, :]).to(tl.float32)
        lse2 = tl.load(lse2_ptr + tl.program_id(1) * stride_lh + offs_m)
        delta = tl.load(delta_ptr + tl.program_id(1) * stride_lh + offs_m)
        p = tl.exp2(tl.dot(k, tl.trans(q)) * sm_scale * 1.4426950408889634 - lse2[None, :])
        dv += tl.dot(p, do)
        dk += tl.dot(p * (tl.dot(v, tl.trans(do)) - delta[None, :]), q)
    tl.store(dk_ptr + b * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :], dk * sm_scale)
    tl.store(dv_ptr + b * stride_dvb + h * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :], dv)
''',
    "ex09a_fused_rope": '''\
@triton.jit
def rope_kernel(
    q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
    stride_qob, stride_qoh, stride_qon, stride_kob, stride_koh, stride_kon, Hq, Hk, N, offset, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, HALF)
    b = tl.program_id(1) // (Hq + Hk)
    h = tl.program_id(1) % (Hq + Hk)
    if h < Hq:
        x_ptr = q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qn + cols[None, :]
        o_ptr = q_out_ptr + b * stride_qob + h * stride_qoh + rows[:, None] * stride_qon + cols[None, :]
    else:
        x_ptr = k_ptr + b * stride_kb + (h - Hq) * stride_kh + rows[:, None] * stride_kn + cols[None, :]
        o_ptr = k_out_ptr + b * stride_kob + (h - Hq) * stride_koh + rows[:, None] * stride_kon + cols[None, :]
    x1 = tl.load(x_ptr).to(tl.float32)
    x2 = tl.load(x_ptr + HALF).to(tl.float32)
    c = tl.load(cos_ptr + (offset + rows)[:, None] * (2 * HALF) + cols[None, :]).to(tl.float32)
    s = tl.load(sin_ptr + (offset + rows)[:, None] * (2 * HALF) + cols[None, :]).to(tl.float32)
    tl.store(o_ptr, x1 * c - x2 * s)
    tl.store(o_ptr + HALF, x2 * c + x1 * s)
''',
    "ex09b_kv_cache_append": '''\
@triton.jit
def kv_append_kernel(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, positions_ptr, lengths_ptr, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_kcb, stride_kch, stride_kcp, stride_vcb, stride_vch, stride_vcp, Hk, N, D: tl.constexpr, BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, D)
    b = tl.program_id(1) // Hk
    h = tl.program_id(1) % Hk
    start = tl.load(positions_ptr + b)
    k = tl.load(k_ptr + b * stride_kb + h * stride_kh + rows[:, None] * stride_kn + cols[None, :])
    v = tl.load(v_ptr + b * stride_vb + h * stride_vh + rows[:, None] * stride_vn + cols[None, :])
    tl.store(k_cache_ptr + b * stride_kcb + h * stride_kch + (start + rows)[:, None] * stride_kcp + cols[None, :], k)
    tl.store(v_cache_ptr + b * stride_vcb + h * stride_vch + (start + rows)[:, None] * stride_vcp + cols[None, :], v)
''',
    "ex09c_qkv_rope_append": '''\
@triton.jit
def qkv_rope_append_kernel(
    qkv_ptr, cos_ptr, sin_ptr, positions_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, stride_xb, stride_xn, stride_qb, stride_qh, stride_qn,
    stride_cb, stride_ch, stride_cp, Hq, Hk, N, HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, HALF)[None, :]
    b = tl.program_id(1) // (Hq + Hk)
    h = tl.program_id(1) % (Hq + Hk)
    slots = tl.load(positions_ptr + b) + rows
    x_rows = qkv_ptr + b * stride_xb + rows[:, None] * stride_xn
    c = tl.load(cos_ptr + slots[:, None] * (2 * HALF) + cols).to(tl.float32)
    s = tl.load(sin_ptr + slots[:, None] * (2 * HALF) + cols).to(tl.float32)
    if h < Hq:
        x = x_rows + h * (2 * HALF) + cols
        out = q_out_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qn + cols
    else:
        x = x_rows + h * (2 * HALF) + cols
        out = k_cache_ptr + b * stride_cb + (h - Hq) * stride_ch + slots[:, None] * stride_cp + cols
        v = x_rows + (h + Hk) * (2 * HALF) + cols
        v_out = v_cache_ptr + b * stride_cb + (h - Hq) * stride_ch + slots[:, None] * stride_cp + cols
        tl.store(v_out, tl.load(v))
        tl.store(v_out + HALF, tl.load(v + HALF))
    x1 = tl.load(x).to(tl.float32)
    x2 = tl.load(x + HALF).to(tl.float32)
    tl.store(out, x1 * c - x2 * s)
    tl.store(out + HALF, x2 * c + x1 * s)
''',
}


def test_every_kernel_exercise_has_a_maskless_kernel():
    assert sorted(NO_MASKS) == sorted(s for s in STEMS if "@triton.jit" in notebooks.stub_source(grade.NOTEBOOKS[s]))


def _text_outputs(cell: dict) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif "data" in output:
            parts.append(output["data"].get("text/plain", ""))
    return "".join(parts)


def _client(nbclient, nb):
    """A notebook client in the exercises' folder whose kernel talks over a Unix socket."""
    from jupyter_client.manager import AsyncKernelManager

    return nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", kernel_manager_class=unix_socket_kernels(AsyncKernelManager),
                                   resources={"metadata": {"path": str(notebooks.EXERCISES)}})  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("stem", sorted(NO_MASKS))
def test_a_maskless_kernel_gets_verdicts_not_a_dead_kernel(stem, tmp_path):
    """The whole notebook, with a kernel without masks as the learner's answer, runs in a Jupyter
    kernel without an error or a crash; its try cell says what is wrong, and so does the check."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    path = write_notebook(stem, NO_MASKS[stem], tmp_path / f"{stem}.ipynb")
    nb = nbformat.read(path, as_version=4)
    client = _client(nbclient, nb)
    client.execute()  # raises CellExecutionError on an error, DeadKernelError on a crash
    tries = [c for c in nb.cells if c.cell_type == "code" and "exercise.try_" in c.source]
    checks = [c for c in nb.cells if grade.CHECK_TAG in c.metadata.get("tags", [])]
    assert len(tries) == 1 and len(checks) == 1
    tried = _text_outputs(tries[0])
    assert "not right yet" in tried, tried
    assert "cases pass" in _text_outputs(checks[0])
    assert "0 of" in _text_outputs(checks[0]) or "FAIL" in _text_outputs(checks[0])


@pytest.mark.slow
def test_ex01a_try_cell_reports_an_exception(tmp_path):
    """The one exercise without a kernel: its try cell turns the learner's exception into a verdict."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    source = "def arithmetic_intensity(op: str, shape: tuple, dtype: torch.dtype) -> tuple[int, int, float]:\n    return 1 / 0\n"
    path = write_notebook("ex01a_arithmetic_intensity", source, tmp_path / "ex01a.ipynb")
    nb = nbformat.read(path, as_version=4)
    _client(nbclient, nb).execute()
    (tried,) = [_text_outputs(c) for c in nb.cells if c.cell_type == "code" and "exercise.try_" in c.source]
    assert "not right yet: ZeroDivisionError" in tried, tried


def test_paths_exist():
    assert all((notebooks.EXERCISES / f"{stem}.ipynb").exists() for stem in STEMS)
    assert isinstance(notebooks.EXERCISES, pathlib.Path)
