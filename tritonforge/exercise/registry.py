r"""The exercises, one row each: the one place an exercise is registered.

A row names the exercise (``name``), its notebook in ``exercises/`` (whose stem also names its
reference solution in ``exercises/solutions/`` and, by its two digits, its chapter), the function
the learner writes in the stub cell (also the title of the check's report), its float64 reference,
what its check proves (the check's docstring), and the planted wrong answers the tests prove the
check fails on: functions of that name in ``tests/exercise/test_chNN.py``.

Everything else comes from the rows:

- the chapter module (:mod:`tritonforge.exercise.ch02` for ``ex02b_row_max``) supplies, by name,
  the cases ``<name>_cases``, the notebook's "try it" ``try_<name>`` and, for a kernel, the
  launcher ``launch_<name>``;
- the check ``check_<name>(fn, *, seed=None)`` is made here: it runs those cases
  (:func:`tritonforge.exercise.core.check`);
- :mod:`tritonforge.exercise` exports the checks and every chapter module's ``__all__``;
  :data:`EXERCISES` maps each name to its check;
- the grader's notebooks (:data:`tritonforge.exercise.grade.NOTEBOOKS`) are :data:`NOTEBOOKS`;
- each row's stub (:attr:`Exercise.stub`) is read from its committed notebook
  (:mod:`tritonforge.exercise.stubs`).

Adding an exercise is a row here, the notebook and its solution, and the chapter module's
reference, cases, try and launcher; ``tests/exercise/test_registry.py`` proves the rows, the
notebooks and the solutions agree one to one.
"""

from __future__ import annotations

import dataclasses
import importlib
import types
from collections.abc import Callable
from typing import Any, Optional

from tritonforge.exercise import ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, stubs
from tritonforge.exercise.core import Case, Report, Trial, check


@dataclasses.dataclass(frozen=True)
class Exercise:
    """One exercise: what is registered, and what follows from it."""

    name: str  # check_<name>, try_<name>, launch_<name>, <name>_cases
    notebook: str  # the stem of exercises/<notebook>.ipynb and of exercises/solutions/<notebook>.py
    function: str  # what the learner writes in the stub cell; the title of the check's report
    reference: Callable[..., Any]  # the float64 answer the cases compare with
    summary: str  # what the check proves: its docstring
    planted: tuple[str, ...]  # wrong answers in tests/exercise/test_chNN.py that the check must fail
    check: Callable[..., Report] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "check", _check_of(self))

    @property
    def chapter(self) -> int:
        return int(self.notebook[2:4])

    @property
    def label(self) -> str:
        """``2b`` for ``ex02b_row_max``: how the book names the exercise."""
        return f"{self.chapter}{self.notebook[4]}"

    @property
    def module(self) -> types.ModuleType:
        """The chapter module: ``tritonforge.exercise.chNN``."""
        return importlib.import_module(f"tritonforge.exercise.ch{self.chapter:02d}")

    @property
    def cases(self) -> Callable[[], list[Case]]:
        return getattr(self.module, f"{self.name}_cases")

    @property
    def trial(self) -> Callable[..., Trial]:
        return getattr(self.module, f"try_{self.name}")

    @property
    def launch(self) -> Optional[Callable[..., Any]]:
        """The launcher the notebook hands over, if the exercise has one."""
        return getattr(self.module, f"launch_{self.name}", None)

    @property
    def stub(self) -> str:
        """The stub cell as shipped, read from the committed notebook."""
        return stubs.shipped_stub(self.notebook, self.function)

    def public(self) -> dict[str, Callable[..., Any]]:
        """The names this exercise gives :mod:`tritonforge.exercise`."""
        named = [self.cases, self.trial, self.reference] + ([self.launch] if self.launch else [])
        return {self.check.__name__: self.check, **{f.__name__: f for f in named}}


def _check_of(exercise: Exercise) -> Callable[..., Report]:
    def run_check(fn: Callable, *, seed: Optional[int] = None) -> Report:
        return check(fn, exercise.cases(), title=exercise.function, seed=seed)

    run_check.__name__ = run_check.__qualname__ = f"check_{exercise.name}"
    run_check.__module__ = "tritonforge.exercise"
    run_check.__doc__ = f"Exercise {exercise.label}: {exercise.summary}"
    return run_check


REGISTRY: tuple[Exercise, ...] = (
    Exercise(
        "arithmetic_intensity", "ex01a_arithmetic_intensity", "arithmetic_intensity", ch01.arithmetic_intensity_ref,
        "``fn(op, shape, dtype) -> (flops, bytes, flop_per_byte)``; exact counts.",
        ("intensity_forgets_weight", "intensity_counts_macs", "intensity_assumes_fp32"),
    ),
    Exercise(
        "roofline_prediction", "ex01b_roofline_prediction", "roofline_prediction", ch01.roofline_prediction_ref,
        "``fn(device, kind, flops, nbytes, dtype) -> (microseconds, bound)`` on the book's datasheets; times to 1e-9, the bound exactly.",
        (
            "prediction_adds_the_times", "prediction_tensor_cores_for_everything", "prediction_fp16_rate_for_every_matmul",
            "prediction_in_seconds", "prediction_bound_from_the_tensor_core_ridge", "prediction_matmul_means_compute_bound",
        ),
    ),
    Exercise(
        "fused_add_rms_norm_traffic", "ex01c_fused_add_rms_norm_traffic", "fused_add_rms_norm_traffic", ch01.fused_add_rms_norm_traffic_ref,
        "``fn(M, N, dtype) -> (eager_bytes, eager_kernels, fused_bytes)``; exact counts.",
        (
            "traffic_casts_in_float32", "traffic_without_row_statistics", "traffic_intermediates_in_dtype", "traffic_fused_forgets_h",
            "traffic_forgets_weight",
        ),
    ),
    Exercise(
        "bias_relu_2d", "ex02a_bias_relu_2d", "bias_relu_2d_kernel", ch02.bias_relu_2d_ref,
        "the learner's ``bias_relu_2d_kernel`` on views with awkward shapes and strides.",
        (
            "bias_relu_ignores_stride_xn", "bias_relu_assumes_contiguous_out", "bias_relu_bias_by_row", "bias_relu_unmasked_store",
            "bias_relu_no_masks",
        ),
    ),
    Exercise(
        "row_max", "ex02b_row_max", "row_max_kernel", ch02.row_max_ref,
        "the learner's ``row_max_kernel`` on rows that are long, odd, negative, strided.",
        (
            "row_max_other_zero", "row_max_zero_init", "row_max_mean_instead", "row_max_first_block_only", "row_max_off_by_one_mask",
            "row_max_reads_past_row", "row_max_no_load_mask",
        ),
    ),
    Exercise(
        "transpose", "ex02c_transpose", "transpose_kernel", ch02.transpose_ref,
        "the learner's ``transpose_kernel`` writes ``x.T`` into a new tensor, from views with awkward shapes and strides; "
        "a failed case comes with a picture of the output.",
        (
            "transpose_copies_instead", "transpose_store_mask_swapped", "transpose_assumes_contiguous_out", "transpose_ignores_stride_xn",
            "transpose_program_ids_swapped", "transpose_unmasked_store", "transpose_block_sizes_swapped",
        ),
    ),
    Exercise(
        "layer_norm_fwd", "ex03a_layer_norm_forward", "layer_norm_fwd_kernel", ch03.layer_norm_ref,
        "the learner's ``layer_norm_fwd_kernel`` on odd, strided, large-mean and 16-bit rows.",
        (
            "layer_norm_naive_variance", "layer_norm_unmasked_centering", "layer_norm_unbiased_variance", "layer_norm_divides_by_block",
            "layer_norm_forgets_eps", "layer_norm_bias_before_weight", "layer_norm_ignores_row_stride", "layer_norm_eps_outside_sqrt",
            "layer_norm_eps_added_to_rstd",
        ),
    ),
    Exercise(
        "fused_add_rms_norm", "ex03b_fused_add_rms_norm", "fused_add_rms_norm_kernel", ch03.fused_add_rms_norm_ref,
        "the learner's ``fused_add_rms_norm_kernel``: ``h`` bit-exact, ``y`` in the Hugging Face order.",
        (
            "fused_add_normalizes_unrounded_h", "fused_add_rounds_once", "fused_add_truncating_casts", "fused_add_normalizes_x",
            "fused_add_forgets_h", "fused_add_one_row_stride", "fused_add_forgets_eps", "fused_add_eps_outside_sqrt", "fused_add_eps_added_to_rstd",
        ),
    ),
    Exercise(
        "rms_norm_long_rows", "ex03c_rms_norm_long_rows", "rms_norm_long_rows_kernel", ch03.rms_norm_long_rows_ref,
        "the learner's ``rms_norm_long_rows_kernel`` with ``BLOCK_N = 32`` on rows of 1 to 300.",
        (
            "long_rows_first_block_mask", "long_rows_divides_by_block_n", "long_rows_first_block_only", "long_rows_divides_by_padded_n",
            "long_rows_one_pass", "long_rows_stores_first_block_only",
        ),
    ),
    Exercise(
        "rms_norm_dweight", "ex04a_rms_norm_dweight", "rms_norm_dweight_kernel", ch04.rms_norm_dweight_partials_ref,
        "the learner's ``rms_norm_dweight_kernel``: every partial row, then their sum.",
        (
            "dweight_forgets_rstd", "dweight_double_counts_last_group", "dweight_interleaved_rows", "dweight_inclusive_end",
            "dweight_no_clamp_to_m", "dweight_skips_empty_programs", "dweight_accumulates_into_buffer",
        ),
    ),
    Exercise(
        "rms_norm_dx", "ex04b_rms_norm_dx", "rms_norm_dx_kernel", ch04.rms_norm_dx_ref,
        "the learner's ``rms_norm_dx_kernel`` against the boxed formula in float64.",
        (
            "dx_forgets_correction", "dx_squares_rstd", "dx_forgets_outer_rstd", "dx_mean_without_weight", "dx_x_for_xhat",
            "dx_divides_by_block_n", "dx_x_stride_for_dy", "dx_no_masks",
        ),
    ),
    Exercise(
        "fused_add_rms_norm_backward", "ex04c_fused_add_rms_norm_backward", "fused_add_rms_norm_backward", ch04.fused_add_rms_norm_fwd_ref,
        "the learner's ``fused_add_rms_norm_backward`` against autograd of the float64 reference, and through ``torch.autograd.gradcheck``.",
        (
            "bwd_forgets_dh", "bwd_only_dh", "bwd_forgets_correction", "bwd_residual_gets_only_dh", "bwd_dweight_from_h",
            "bwd_three_gradients", "bwd_mean_over_rows",
        ),
    ),
    Exercise(
        "geglu", "ex05a_geglu_forward", "geglu_kernel", ch05.geglu_ref,
        'the learner\'s ``geglu_kernel`` against ``gelu(gate, approximate="tanh") * up`` in float64, with gates up to ±30 in one case.',
        (
            "geglu_tanh_exp_2z_overflows", "geglu_tanh_exp_z_overflows", "geglu_forgets_cubic_term", "geglu_forgets_half",
            "geglu_gate_up_swapped", "geglu_exact_erf_gelu", "geglu_one_row_stride", "geglu_no_masks",
        ),
    ),
    Exercise(
        "swiglu_bwd", "ex05b_swiglu_backward", "swiglu_bwd_kernel", ch05.swiglu_grads_ref,
        "the learner's ``swiglu_bwd_kernel``: ``dgate`` and ``dup`` against the float64 formulas, with gates up to ±120 in one case.",
        (
            "bwd_forgets_product_factor", "bwd_silu_for_its_derivative", "bwd_drops_sigmoid_term", "bwd_dgate_without_up",
            "bwd_dup_is_dy_sigmoid", "bwd_outputs_swapped", "bwd_sigmoid_overflows", "bwd_one_row_stride", "bwd_no_masks",
        ),
    ),
    Exercise(
        "matmul_bias_silu", "ex05c_matmul_bias_silu", "matmul_bias_silu_kernel", ch05.matmul_bias_silu_ref,
        "the learner's ``matmul_bias_silu_kernel`` against ``silu(x @ w + b)`` in float64 on ragged, strided and transposed operands; "
        "a failed case comes with a picture of the output.",
        (
            "matmul_no_k_mask", "matmul_drops_k_tail", "matmul_bias_per_row", "matmul_silu_before_bias", "matmul_accumulates_in_input_dtype",
            "matmul_w_assumed_contiguous", "matmul_unmasked_store", "matmul_program_ids_swapped",
        ),
    ),
    Exercise(
        "log_softmax", "ex06a_log_softmax", "log_softmax_kernel", ch06.log_softmax_ref,
        "the learner's ``log_softmax_kernel`` (``BLOCK_N = 32``) against ``torch.log_softmax`` in float64, on rows of 1 to 150, "
        "values near ±10⁴ and near −10⁷, and masked columns (rows whose first blocks are all −inf).",
        (
            "log_softmax_without_max", "log_softmax_reads_past_the_row", "log_softmax_masked_lanes_zero", "log_softmax_sum_counts_masked_lanes",
            "log_softmax_drops_ragged_block", "log_softmax_sum_not_rescaled", "log_softmax_rescale_upside_down", "log_softmax_stores_softmax",
            "log_softmax_one_row_stride", "log_softmax_nan_after_masked_block", "log_softmax_no_masks", "log_softmax_lse_rounded",
        ),
    ),
    Exercise(
        "merge_states", "ex06b_merge_softmax_states", "merge_states_kernel", ch06.merge_states_ref,
        "the learner's ``merge_states_kernel``: ``m`` exactly, ``s`` and ``o`` against the float64 merge, with maxima in either order, "
        "ties, empty halves and logits near 100.",
        (
            "merge_first_side_not_rescaled", "merge_rescale_upside_down", "merge_nan_when_both_empty", "merge_weights_swapped",
            "merge_max_is_m1", "merge_o_not_divided", "merge_exp_unshifted", "merge_one_row_stride", "merge_no_mask",
        ),
    ),
    Exercise(
        "cross_entropy", "ex06c_cross_entropy", "cross_entropy_kernel", ch06.cross_entropy_ref,
        'the learner\'s ``cross_entropy_kernel`` (``BLOCK_N = 128``) against ``F.cross_entropy(reduction="none")`` in float64, '
        "with logits near ±200, ignored targets and a padded vocabulary.",
        (
            "cross_entropy_without_max", "cross_entropy_target_with_row_length", "cross_entropy_target_from_row_0",
            "cross_entropy_ignore_index_not_handled", "cross_entropy_masked_lanes_add_one", "cross_entropy_max_left_out",
            "cross_entropy_sign_flipped", "cross_entropy_drops_ragged_block", "cross_entropy_no_masks",
        ),
    ),
    Exercise(
        "attention_softcap", "ex07a_softcapping", "attention_softcap_kernel", ch07.softcap_attention_ref,
        "the learner's ``attention_softcap_kernel`` against soft-capped attention in float64, with ragged key blocks, Nq ≠ Nk both "
        "ways, scores near ±3000, a cap of 1 that every score saturates, and a [B, N, H, D] layout.",
        (
            "softcap_tanh_overflows", "softcap_after_max_subtracted", "softcap_before_scale", "softcap_tanh_of_s", "softcap_sign_lost",
            "softcap_tail_masked_before_cap",
        ),
    ),
    Exercise(
        "attention_alibi", "ex07b_alibi", "attention_alibi_kernel", ch07.alibi_attention_ref,
        "the learner's ``attention_alibi_kernel`` against causal ALiBi attention in float64: Nq < Nk (bottom-right alignment), "
        "one to twelve heads, batches > 1, a [B, N, H, D] layout.",
        (
            "alibi_sign_flipped", "alibi_causal_top_left", "alibi_slope_one_head_off", "alibi_slope_of_program_id", "alibi_bias_before_scale",
            "alibi_not_causal",
        ),
    ),
    Exercise(
        "sliding_window_attention", "ex07c_sliding_window", "sliding_window_attention_kernel", ch07.sliding_window_attention_ref,
        "the learner's ``sliding_window_attention_kernel`` against causal attention within a window in float64: windows from 1 key "
        "to 33, windows that start before key 0, Nq < Nk, and two cases whose keys before every window are NaN (a kernel must "
        "not load them).",
        (
            "window_no_lower_bound", "window_lower_bound_not_clamped", "window_one_key_too_many", "window_top_left",
            "window_no_shift_for_empty_blocks", "window_masked_in_first_block_only", "window_lower_bound_rounded_up",
        ),
    ),
    Exercise(
        "attention_bwd_preprocess", "ex07d_attention_bwd_preprocess", "attention_bwd_preprocess_kernel", ch07.attention_bwd_preprocess_ref,
        "the learner's ``attention_bwd_preprocess_kernel`` against the backward's row statistics in float64: δ = rowsum(dO ⊙ O) − dlse "
        "and lse2 = lse · log2(e), +inf for queries that see no key; ragged rows, one query, O and dO in different layouts, float16, "
        "bfloat16.",
        (
            "preprocess_forgets_dlse", "preprocess_adds_dlse", "preprocess_lse_in_natural_units", "preprocess_lse_times_ln2",
            "preprocess_empty_rows_minus_inf", "preprocess_no_row_mask",
        ),
    ),
    Exercise(
        "attention_dkdv", "ex07e_attention_dv_block", "attention_dkdv_kernel", ch07.attention_dkdv_ref,
        "the learner's ``attention_dkdv_kernel`` (a program per block of 16 keys, the queries walked in blocks of 16, not causal) "
        "against dk and dv in float64 from the same lse2 and δ: ragged queries and keys, one query, one key past a block, "
        "Nq > Nk, a [B, N, H, D] layout, float16, bfloat16.",
        (
            "dkdv_exp_not_exp2", "dkdv_forgets_scale", "dkdv_dk_scaled_by_qk_scale", "dkdv_forgets_delta", "dkdv_delta_on_wrong_axis",
            "dkdv_dk_from_p", "dkdv_query_tail_unmasked", "dkdv_unmasked_store",
        ),
    ),
    Exercise(
        "scaled_residual_add", "ex08a_register_an_op", "register_scaled_residual_add", ch08.scaled_residual_add_ref,
        "``fn(op_name, launch)`` registers a routed ``scaled_residual_add``.",
        (
            "srad_without_fake", "srad_without_custom_op", "srad_fake_wrong_dtype", "srad_without_backward", "srad_silent_fallback",
            "srad_unrouted_fallback", "srad_routes_under_another_name", "srad_forgets_the_dtype", "srad_unnamed_errors", "srad_no_validation",
            "srad_bad_input_as_fallback", "srad_reference_as_kernel",
        ),
    ),
    Exercise(
        "row_softmax", "ex08b_row_softmax_limits", "make_row_softmax", ch08.row_softmax_ref,
        "``fn(op_name, launch)`` returns a routed ``row_softmax(x)`` whose kernel takes rows of at most 1024 and no float64: "
        "the kernel for what it serves, the reference (unsupported, the limit named, no launch) for the rest, "
        "``FallbackError`` under strict routing, bf16 refused on a simulated T4, empty inputs recorded, an int tensor a TypeError.",
        (
            "softmax_no_limits_of_its_own", "softmax_limit_off_by_one", "softmax_forgets_the_dtype", "softmax_limits_raise",
            "softmax_silent_reference", "softmax_vague_detail", "softmax_empty_as_fallback", "softmax_empty_to_the_kernel",
            "softmax_int_as_fallback",
        ),
    ),
    Exercise(
        "swiglu", "ex08c_differentiable_swiglu", "register_swiglu", ch08.swiglu_ref,
        "``fn(op_name, backward_name, launch, launch_backward)`` registers a differentiable, routed ``swiglu(gate, up)``: "
        "forward and backward by their kernels (the backward under its own name), create_graph=True through the reference "
        "backward (second derivatives exact in float64), forward-mode AD, torch.func.jvp and torch.func.grad through the "
        "reference, loudly, never zeros; FallbackError under strict routing; the backward an operator of its own, so that "
        "opcheck and a training step under torch.compile(fullgraph=True) pass.",
        (
            "swiglu_backward_under_forward_name", "swiglu_backward_not_routed", "swiglu_kernel_under_create_graph",
            "swiglu_create_graph_silently", "swiglu_detached_reference_under_create_graph", "swiglu_create_graph_by_requires_grad",
            "swiglu_no_forward_mode_check", "swiglu_forward_mode_silently", "swiglu_backward_not_an_operator",
        ),
    ),
    Exercise(
        "rope", "ex09a_fused_rope", "rope_kernel", ch09.rope_ref,
        "the learner's ``rope_kernel`` against rotary embeddings in float64 (rotate_half form) on q and k together: ragged blocks, "
        "D = 16/32/64, GQA and MQA head counts, positions from an offset (decode, chunked prefill, 8000), q in a [B, N, H, D] "
        "layout, float16, bfloat16.",
        (
            "rope_interleaved_pairs", "rope_rotation_sign_flipped", "rope_cos_sin_swapped", "rope_no_masks", "rope_offset_ignored",
            "rope_heads_as_if_hk_were_hq", "rope_k_with_q_strides", "rope_k_not_rotated",
        ),
    ),
    Exercise(
        "kv_append", "ex09b_kv_cache_append", "kv_append_kernel", ch09.kv_append_ref,
        "the learner's ``kv_append_kernel``: both caches afterwards, exactly, with per-sequence positions and lengths (padding rows, "
        "a finished sequence), decode, MQA, a ragged block, new rows in [B, N, H, D] storage, rows up to the cache's end, "
        "float16, bfloat16.",
        (
            "append_at_row_zero", "append_position_of_sequence_0", "append_ignores_lengths", "append_no_masks", "append_k_and_v_swapped",
            "append_cache_with_new_strides", "append_v_with_k_strides", "append_one_past_the_prefix",
        ),
    ),
    Exercise(
        "qkv_rope_append", "ex09c_qkv_rope_append", "qkv_rope_append_kernel", ch09.qkv_rope_append_ref,
        "the learner's ``qkv_rope_append_kernel`` against the split, the rotation (rotate_half) and the cache writes in float64: "
        "q_out, both caches, per-sequence positions, GQA, decode, padded qkv rows, positions near 8000, float16, bfloat16.",
        (
            "qkv_v_rotated", "qkv_k_not_rotated", "qkv_table_row_n", "qkv_cache_row_n", "qkv_v_as_if_hk_were_hq", "qkv_no_masks",
            "qkv_row_stride_from_width", "qkv_position_of_sequence_0",
        ),
    ),
)  # fmt: skip
"""Every exercise, in the book's order."""

NOTEBOOKS: dict[str, Exercise] = {exercise.notebook: exercise for exercise in REGISTRY}
"""Every exercise by its notebook's stem, in the book's order."""

EXERCISES: dict[str, Callable[..., Report]] = {exercise.name: exercise.check for exercise in REGISTRY}
"""Every exercise's check, by name, in the book's order."""

CHAPTERS: tuple[types.ModuleType, ...] = tuple(dict.fromkeys(exercise.module for exercise in REGISTRY))
"""The chapter modules, in the book's order."""
