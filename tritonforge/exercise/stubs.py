r"""The stub of every exercise as shipped: the cell tagged ``exercise-stub`` of each notebook in
``exercises/``, word for word.

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
}
"""Notebook stem → the source of its stub cell."""
