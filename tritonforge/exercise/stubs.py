r"""The stub of every exercise as shipped: the cell tagged ``exercise-stub`` of each notebook in
``exercises/``, word for word.

Most stubs are an empty function; chapter 7's hand over a working FlashAttention-2 forward with
the exercise's part marked ``TODO`` (a ``pass`` where the learner's code goes).

The tests prove each check fails on these, not on the notebook in the working tree (where a
learner may have solved it in place); ``tests/exercise/test_grade.py`` keeps them equal to the
notebooks' stub cells while those are untouched.
"""

STUBS = {
    "ex01a_arithmetic_intensity": '''\
def arithmetic_intensity(op: str, shape: tuple, dtype: torch.dtype) -> tuple[int, int, float]:
    """(flops, bytes, flops / bytes) of one call of `op` on `shape` in `dtype`."""
    # your code here
    raise NotImplementedError("write arithmetic_intensity")
''',
    "ex01b_roofline_prediction": '''\
def roofline_prediction(device: str, kind: str, flops: int, nbytes: int, dtype: torch.dtype) -> tuple[float, str]:
    """(microseconds, "memory-bound" or "compute-bound"): the roofline's floor for one call on `device`'s datasheet."""
    # your code here
    raise NotImplementedError("write roofline_prediction")
''',
    "ex01c_fused_add_rms_norm_traffic": '''\
def fused_add_rms_norm_traffic(M: int, N: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """(eager_bytes, eager_kernels, fused_bytes) of h = x + residual; out = rms_norm(h) * weight on [M, N]."""
    # your code here
    raise NotImplementedError("write fused_add_rms_norm_traffic")
''',
    "ex02a_bias_relu_2d": """\
@triton.jit
def bias_relu_2d_kernel(
    x_ptr, bias_ptr, out_ptr,
    M, N,
    stride_xm, stride_xn,
    stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # your code here
    pass
""",
    "ex02b_row_max": """\
@triton.jit
def row_max_kernel(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
    # your code here
    pass
""",
    "ex02c_transpose": """\
@triton.jit
def transpose_kernel(
    x_ptr, out_ptr,
    M, N,
    stride_xm, stride_xn,
    stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # your code here
    pass
""",
    "ex03a_layer_norm_forward": """\
@triton.jit
def layer_norm_fwd_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    x_row_stride, y_row_stride,
    N, eps,
    BLOCK_N: tl.constexpr,
):
    # your code here
    pass
""",
    "ex03b_fused_add_rms_norm": """\
@triton.jit
def fused_add_rms_norm_kernel(
    x_ptr, residual_ptr, w_ptr, h_ptr, y_ptr,
    x_row_stride, residual_row_stride, h_row_stride, y_row_stride,
    N, eps,
    BLOCK_N: tl.constexpr, ROUND_BF16: tl.constexpr,
):
    # your code here
    pass
""",
    "ex03c_rms_norm_long_rows": """\
@triton.jit
def rms_norm_long_rows_kernel(
    x_ptr, w_ptr, y_ptr,
    x_row_stride, y_row_stride,
    N, eps,
    BLOCK_N: tl.constexpr,
):
    # your code here
    pass
""",
    "ex04a_rms_norm_dweight": """\
@triton.jit
def rms_norm_dweight_kernel(
    dy_ptr, x_ptr, rstd_ptr, partial_ptr,
    dy_row_stride, x_row_stride, partial_row_stride,
    M, N, rows_per_program,
    BLOCK_N: tl.constexpr,
):
    # your code here
    pass
""",
    "ex04b_rms_norm_dx": """\
@triton.jit
def rms_norm_dx_kernel(
    dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr,
    dy_row_stride, x_row_stride, dx_row_stride,
    N,
    BLOCK_N: tl.constexpr,
):
    # your code here
    pass
""",
    "ex04c_fused_add_rms_norm_backward": '''\
def fused_add_rms_norm_backward(ctx, dh, dy):
    """(dx, dresidual, dweight, None) from dh = dL/dh and dy = dL/dy; ctx.saved_tensors is (h, weight, rstd)."""
    # your code here
    raise NotImplementedError("write fused_add_rms_norm_backward")
''',
    "ex05a_geglu_forward": """\
@triton.jit
def geglu_kernel(
    gate_ptr, up_ptr, out_ptr,
    gate_row_stride, up_row_stride, out_row_stride,
    N,
    BLOCK_N: tl.constexpr,
):
    # your code here
    pass
""",
    "ex05b_swiglu_backward": """\
@triton.jit
def swiglu_bwd_kernel(
    gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr,
    gate_row_stride, up_row_stride, dy_row_stride, dgate_row_stride, dup_row_stride,
    N,
    BLOCK_N: tl.constexpr,
):
    # your code here
    pass
""",
    "ex05c_matmul_bias_silu": """\
@triton.jit
def matmul_bias_silu_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr,
    M, N, K,
    stride_xm, stride_xk,
    stride_wk, stride_wn,
    stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # your code here
    pass
""",
    "ex06a_log_softmax": """\
@triton.jit
def log_softmax_kernel(
    x_ptr, out_ptr,
    x_row_stride, out_row_stride,
    N,
    BLOCK_N: tl.constexpr,
):
    # your code here
    pass
""",
    "ex06b_merge_softmax_states": """\
@triton.jit
def merge_states_kernel(
    m1_ptr, s1_ptr, o1_ptr,
    m2_ptr, s2_ptr, o2_ptr,
    m_ptr, s_ptr, o_ptr,
    o1_row_stride, o2_row_stride, o_row_stride,
    D,
    BLOCK_D: tl.constexpr,
):
    # your code here
    pass
""",
    "ex06c_cross_entropy": """\
@triton.jit
def cross_entropy_kernel(
    logits_ptr, target_ptr, loss_ptr,
    logits_row_stride,
    N,
    ignore_index,
    BLOCK_N: tl.constexpr,
):
    # your code here
    pass
""",
    "ex07a_softcapping": """\
@triton.jit
def attention_softcap_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    H, Nq, Nk,
    sm_scale, softcap,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # Given: plain FlashAttention-2 forward, one program per (query block, b·H + h).
    start_m = tl.program_id(0) * BLOCK_M
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    offs_m = start_m + tl.arange(0, BLOCK_M)  # this program's queries
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = q_ptr + b * stride_qb + h * stride_qh
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    q_mask = offs_m[:, None] < Nq
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=q_mask, other=0.0)
    q = q.to(tl.float32)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running max
    l_i = tl.zeros((BLOCK_M,), tl.float32)  # running sum
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)  # unnormalized output
    for start_n in range(0, Nk, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = offs_n[:, None] < Nk
        k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
        k = k.to(tl.float32)
        v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * sm_scale
        # ---- TODO (exercise 7a): s = softcap * tanh(s / softcap), tanh from tl.exp ----
        pass
        # ---- end of TODO ----
        s = tl.where(offs_n[None, :] < Nk, s, float("-inf"))  # the key tail
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)  # rescales what came before
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    out_base = out_ptr + b * stride_ob + h * stride_oh
    out_ptrs = out_base + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=q_mask)
""",
    "ex07b_alibi": """\
@triton.jit
def attention_alibi_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    H, Nq, Nk,
    sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # Given: plain FlashAttention-2 forward, one program per (query block, b·H + h).
    start_m = tl.program_id(0) * BLOCK_M
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    offs_m = start_m + tl.arange(0, BLOCK_M)  # this program's queries
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = q_ptr + b * stride_qb + h * stride_qh
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    q_mask = offs_m[:, None] < Nq
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=q_mask, other=0.0)
    q = q.to(tl.float32)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running max
    l_i = tl.zeros((BLOCK_M,), tl.float32)  # running sum
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)  # unnormalized output
    # ---- TODO (exercise 7b): this head's slope, 2^(-8 (h + 1) / H) ----
    pass
    # ---- end of TODO ----
    for start_n in range(0, Nk, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = offs_n[:, None] < Nk
        k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
        k = k.to(tl.float32)
        v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * sm_scale
        # ---- TODO (exercise 7b): + slope * (j - i_hat), and the causal mask ----
        pass
        # ---- end of TODO ----
        s = tl.where(offs_n[None, :] < Nk, s, float("-inf"))  # the key tail
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)  # rescales what came before
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    out_base = out_ptr + b * stride_ob + h * stride_oh
    out_ptrs = out_base + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=q_mask)
""",
    "ex07c_sliding_window": """\
@triton.jit
def sliding_window_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    H, Nq, Nk,
    sm_scale, window,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # Given: plain FlashAttention-2 forward, one program per (query block, b·H + h).
    start_m = tl.program_id(0) * BLOCK_M
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    offs_m = start_m + tl.arange(0, BLOCK_M)  # this program's queries
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = q_ptr + b * stride_qb + h * stride_qh
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    q_mask = offs_m[:, None] < Nq
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=q_mask, other=0.0)
    q = q.to(tl.float32)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running max
    l_i = tl.zeros((BLOCK_M,), tl.float32)  # running sum
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)  # unnormalized output
    # Causal (bottom right): query i sits at key i + Nk - Nq; keys past the
    # block's last query are skipped whole.
    hi = tl.minimum(Nk, start_m + BLOCK_M + Nk - Nq)
    lo = 0
    # ---- TODO (exercise 7c): start at the block of the first window key ----
    pass
    # ---- end of TODO ----
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = offs_n[:, None] < Nk
        k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
        k = k.to(tl.float32)
        v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * sm_scale
        i_hat = offs_m[:, None] + Nk - Nq
        visible = (offs_n[None, :] <= i_hat) & (offs_n[None, :] < Nk)
        # ---- TODO (exercise 7c): keep only the window, i_hat - window < j ----
        pass
        # ---- end of TODO ----
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)  # rescales what came before
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    out_base = out_ptr + b * stride_ob + h * stride_oh
    out_ptrs = out_base + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=q_mask)
""",
    "ex08a_register_an_op": '''\
def register_scaled_residual_add(op_name: str, launch):
    """Register the operator `op_name`, (x, residual, alpha) -> residual + alpha * x, routed
    between launch(x, residual, alpha) and the reference; return the public function."""
    # your code here
    raise NotImplementedError("write register_scaled_residual_add")
''',
    "ex09a_fused_rope": """\
@triton.jit
def rope_kernel(
    q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr,
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_qob, stride_qoh, stride_qon,
    stride_kob, stride_koh, stride_kon,
    Hq, Hk, N, offset,
    HALF: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # your code here
    pass
""",
}
"""Notebook stem → the source of its stub cell."""
