r"""Exercise checks: run a learner's function on a list of cases and show a verdict per case.

The learner edits a stub in an exercise notebook, tries it with ``exercise.try_<exercise>(fn, ...)``
and runs ``exercise.check_<exercise>(fn)``; both run the learner's code guarded (NaN-padded,
NaN-poisoned buffers) and never raise (an exception from the learner's code is a failed case that
says why). A check returns a :class:`Report` that renders as a table in the notebook and has
``assert_passed()`` for pytest. Checks are deterministic: inputs come from a fixed seed
(``core.DEFAULT_SEED``; ``seed=`` picks another), and the cases are built so that each known
mistake fails whatever the seed. ``python -m tritonforge.exercise grade`` grades the learner's
notebooks from the command line (:mod:`tritonforge.exercise.grade`).

=========  ==========================================================================
module     what it holds
=========  ==========================================================================
``core``   the mechanism: :class:`Case`, :func:`check`, :class:`Report`, and the
           guarded (NaN-margined, NaN-poisoned) tensors every kernel exercise uses
``ch01``   1a: arithmetic intensity of RMSNorm and of a matmul; 1b: the roofline's prediction
           from a datasheet; 1c: the HBM traffic of residual add + RMSNorm, eager and fused
``ch02``   2a: bias + ReLU over a strided 2-D view; 2b: the maximum of each row;
           2c: a transpose into a new tensor, tile by tile
``ch03``   3a: LayerNorm forward; 3b: fused residual add + RMSNorm; 3c: RMSNorm of
           rows longer than one block, in two passes
``ch04``   4a: RMSNorm's weight gradient through per-program partial sums; 4b: its
           input gradient, one row per program; 4c: the backward of the fused residual add
           + RMSNorm (a torch.autograd.Function), against autograd and gradcheck in float64
``ch05``   5a: GeGLU forward with a tanh from exp that cannot overflow; 5b: SwiGLU's
           backward, both gradients from one kernel; 5c: a tiled matmul with a fused
           bias + SiLU epilogue
``ch06``   6a: log-softmax of rows longer than one block; 6b: the merge of two partial
           softmax states (split-KV attention's last step); 6c: softmax + cross-entropy
           loss fused, over vocabulary-length rows
``grade``  the grading command: reads each notebook's stub cell, runs its check
``stubs``  every exercise's stub cell as shipped (the tests' proof that checks fail)
=========  ==========================================================================

Each chapter module gives, per exercise, a float64 reference (``*_ref``), the launcher the
notebook hands the learner (``launch_*``), the cases (``*_cases``), the check (``check_*``) and
the guarded run of the notebook's "try it" cell (``try_*``).
Tolerances come from ``tritonforge.reference.TOLERANCE``. :data:`EXERCISES` maps each
exercise's name to its check.
"""

from tritonforge.exercise.ch01 import (
    ROOFLINE_KINDS,
    arithmetic_intensity_cases,
    arithmetic_intensity_ref,
    check_arithmetic_intensity,
    check_fused_add_rms_norm_traffic,
    check_roofline_prediction,
    eager_rms_norm_kernels,
    fused_add_rms_norm_traffic_cases,
    fused_add_rms_norm_traffic_ref,
    roofline_prediction_cases,
    roofline_prediction_ref,
    try_arithmetic_intensity,
    try_fused_add_rms_norm_traffic,
    try_roofline_prediction,
)
from tritonforge.exercise.ch02 import (
    BIAS_RELU_BLOCK_M,
    BIAS_RELU_BLOCK_N,
    ROW_MAX_BLOCK_N,
    ROW_MAX_SENTINEL,
    TRANSPOSE_BLOCK_M,
    TRANSPOSE_BLOCK_N,
    bias_relu_2d_cases,
    bias_relu_2d_ref,
    check_bias_relu_2d,
    check_row_max,
    check_transpose,
    launch_bias_relu_2d,
    launch_row_max,
    launch_transpose,
    row_max_cases,
    row_max_ref,
    transpose_cases,
    transpose_ref,
    try_bias_relu_2d,
    try_row_max,
    try_transpose,
)
from tritonforge.exercise.ch03 import (
    FUSED_ADD_MAX_MISMATCH,
    FUSED_ADD_RMS_NORM_EPS,
    LAYER_NORM_EPS,
    RMS_NORM_LONG_ROWS_BLOCK_N,
    RMS_NORM_LONG_ROWS_EPS,
    check_fused_add_rms_norm,
    check_layer_norm_fwd,
    check_rms_norm_long_rows,
    fused_add_rms_norm_cases,
    fused_add_rms_norm_ref,
    launch_fused_add_rms_norm,
    launch_layer_norm_fwd,
    launch_rms_norm_long_rows,
    layer_norm_fwd_cases,
    layer_norm_ref,
    rms_norm_long_rows_cases,
    try_fused_add_rms_norm,
    try_layer_norm_fwd,
    try_rms_norm_long_rows,
)
from tritonforge.exercise.ch04 import (
    FUSED_ADD_BWD_EPS,
    check_fused_add_rms_norm_backward,
    check_rms_norm_dweight,
    check_rms_norm_dx,
    fused_add_rms_norm_backward_cases,
    fused_add_rms_norm_function,
    fused_add_rms_norm_fwd_ref,
    launch_rms_norm_dweight,
    launch_rms_norm_dx,
    rms_norm_dweight_cases,
    rms_norm_dweight_partials_ref,
    rms_norm_dx_cases,
    rms_norm_dx_ref,
    try_fused_add_rms_norm_backward,
    try_rms_norm_dweight,
    try_rms_norm_dx,
)
from tritonforge.exercise.ch05 import (
    GLU_BLOCK_N,
    MATMUL_BLOCK_K,
    MATMUL_BLOCK_M,
    MATMUL_BLOCK_N,
    check_geglu,
    check_matmul_bias_silu,
    check_swiglu_bwd,
    geglu_cases,
    geglu_ref,
    gelu_tanh_ref,
    launch_geglu,
    launch_matmul_bias_silu,
    launch_swiglu_bwd,
    matmul_bias_silu_cases,
    matmul_bias_silu_ref,
    swiglu_bwd_cases,
    swiglu_grads_ref,
    try_geglu,
    try_matmul_bias_silu,
    try_swiglu_bwd,
)
from tritonforge.exercise.ch06 import (
    CROSS_ENTROPY_BLOCK_N,
    IGNORE_INDEX,
    LOG_SOFTMAX_BLOCK_N,
    check_cross_entropy,
    check_log_softmax,
    check_merge_states,
    cross_entropy_cases,
    cross_entropy_ref,
    launch_cross_entropy,
    launch_log_softmax,
    launch_merge_states,
    log_softmax_cases,
    log_softmax_ref,
    merge_block_d,
    merge_states_cases,
    merge_states_ref,
    softmax_state,
    try_cross_entropy,
    try_log_softmax,
    try_merge_states,
)
from tritonforge.exercise.core import (
    Case,
    Guarded,
    Report,
    Row,
    Trial,
    Verdict,
    case_unsupported,
    check,
    compare_tensors,
    describe_exception,
    element_map,
    guarded,
    half_dtype,
    kernel_device,
    poisoned_output,
    run_trial,
)

EXERCISES = {
    "arithmetic_intensity": check_arithmetic_intensity,
    "roofline_prediction": check_roofline_prediction,
    "fused_add_rms_norm_traffic": check_fused_add_rms_norm_traffic,
    "bias_relu_2d": check_bias_relu_2d,
    "row_max": check_row_max,
    "transpose": check_transpose,
    "layer_norm_fwd": check_layer_norm_fwd,
    "fused_add_rms_norm": check_fused_add_rms_norm,
    "rms_norm_long_rows": check_rms_norm_long_rows,
    "rms_norm_dweight": check_rms_norm_dweight,
    "rms_norm_dx": check_rms_norm_dx,
    "fused_add_rms_norm_backward": check_fused_add_rms_norm_backward,
    "geglu": check_geglu,
    "swiglu_bwd": check_swiglu_bwd,
    "matmul_bias_silu": check_matmul_bias_silu,
    "log_softmax": check_log_softmax,
    "merge_states": check_merge_states,
    "cross_entropy": check_cross_entropy,
}
"""Every exercise's check, by name, in the book's order."""

__all__ = [
    # the mechanism
    "Case",
    "Guarded",
    "Report",
    "Row",
    "Trial",
    "Verdict",
    "check",
    "compare_tensors",
    "describe_exception",
    "element_map",
    "guarded",
    "case_unsupported",
    "half_dtype",
    "kernel_device",
    "poisoned_output",
    "run_trial",
    # chapter 1
    "arithmetic_intensity_cases",
    "arithmetic_intensity_ref",
    "check_arithmetic_intensity",
    "try_arithmetic_intensity",
    "ROOFLINE_KINDS",
    "check_roofline_prediction",
    "roofline_prediction_cases",
    "roofline_prediction_ref",
    "try_roofline_prediction",
    "check_fused_add_rms_norm_traffic",
    "eager_rms_norm_kernels",
    "fused_add_rms_norm_traffic_cases",
    "fused_add_rms_norm_traffic_ref",
    "try_fused_add_rms_norm_traffic",
    # chapter 2
    "BIAS_RELU_BLOCK_M",
    "BIAS_RELU_BLOCK_N",
    "ROW_MAX_BLOCK_N",
    "ROW_MAX_SENTINEL",
    "bias_relu_2d_cases",
    "bias_relu_2d_ref",
    "check_bias_relu_2d",
    "check_row_max",
    "launch_bias_relu_2d",
    "launch_row_max",
    "row_max_cases",
    "row_max_ref",
    "try_bias_relu_2d",
    "try_row_max",
    "TRANSPOSE_BLOCK_M",
    "TRANSPOSE_BLOCK_N",
    "check_transpose",
    "launch_transpose",
    "transpose_cases",
    "transpose_ref",
    "try_transpose",
    # chapter 3
    "FUSED_ADD_MAX_MISMATCH",
    "FUSED_ADD_RMS_NORM_EPS",
    "LAYER_NORM_EPS",
    "RMS_NORM_LONG_ROWS_BLOCK_N",
    "RMS_NORM_LONG_ROWS_EPS",
    "check_fused_add_rms_norm",
    "check_layer_norm_fwd",
    "check_rms_norm_long_rows",
    "fused_add_rms_norm_cases",
    "fused_add_rms_norm_ref",
    "launch_fused_add_rms_norm",
    "launch_layer_norm_fwd",
    "launch_rms_norm_long_rows",
    "layer_norm_fwd_cases",
    "layer_norm_ref",
    "rms_norm_long_rows_cases",
    "try_fused_add_rms_norm",
    "try_layer_norm_fwd",
    "try_rms_norm_long_rows",
    # chapter 4
    "FUSED_ADD_BWD_EPS",
    "check_fused_add_rms_norm_backward",
    "check_rms_norm_dweight",
    "check_rms_norm_dx",
    "fused_add_rms_norm_backward_cases",
    "fused_add_rms_norm_function",
    "fused_add_rms_norm_fwd_ref",
    "launch_rms_norm_dweight",
    "launch_rms_norm_dx",
    "rms_norm_dweight_cases",
    "rms_norm_dweight_partials_ref",
    "rms_norm_dx_cases",
    "rms_norm_dx_ref",
    "try_fused_add_rms_norm_backward",
    "try_rms_norm_dweight",
    "try_rms_norm_dx",
    # chapter 5
    "GLU_BLOCK_N",
    "MATMUL_BLOCK_K",
    "MATMUL_BLOCK_M",
    "MATMUL_BLOCK_N",
    "check_geglu",
    "check_matmul_bias_silu",
    "check_swiglu_bwd",
    "geglu_cases",
    "geglu_ref",
    "gelu_tanh_ref",
    "launch_geglu",
    "launch_matmul_bias_silu",
    "launch_swiglu_bwd",
    "matmul_bias_silu_cases",
    "matmul_bias_silu_ref",
    "swiglu_bwd_cases",
    "swiglu_grads_ref",
    "try_geglu",
    "try_matmul_bias_silu",
    "try_swiglu_bwd",
    # chapter 6
    "CROSS_ENTROPY_BLOCK_N",
    "IGNORE_INDEX",
    "LOG_SOFTMAX_BLOCK_N",
    "check_cross_entropy",
    "check_log_softmax",
    "check_merge_states",
    "cross_entropy_cases",
    "cross_entropy_ref",
    "launch_cross_entropy",
    "launch_log_softmax",
    "launch_merge_states",
    "log_softmax_cases",
    "log_softmax_ref",
    "merge_block_d",
    "merge_states_cases",
    "merge_states_ref",
    "softmax_state",
    "try_cross_entropy",
    "try_log_softmax",
    "try_merge_states",
    # the registry
    "EXERCISES",
]
