"""The exercise checks on a (simulated) Colab T4: the book runs no bf16 kernel below sm_80, so a
bf16 case is skipped there, said so in the table, and counts neither as a pass nor a failure; the
reference solutions pass every case that runs, and a planted mistake still fails."""

from __future__ import annotations

import pytest
import torch

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge import exercise, simulation
from tritonforge.exercise.registry import NOTEBOOKS

from . import notebooks, test_ch03

NO_BF16_CASES = {"ex05c_matmul_bias_silu"}  # its cases are float32/float16 (bf16 tl.dot is wrong in the interpreter)
KERNELS = [s for s in NOTEBOOKS if "@triton.jit" in (notebooks.EXERCISES / "solutions" / f"{s}.py").read_text(encoding="utf-8")]
WITH_BF16_CASES = sorted(s for s in KERNELS if NOTEBOOKS[s].chapter >= 3 and s not in NO_BF16_CASES)
WITH_BF16_CASES += ["ex08a_register_an_op", "ex08b_row_softmax_limits"]  # no kernel to write (they route an op), but a bfloat16 case


def test_half_dtype_follows_the_device():
    assert exercise.half_dtype() == torch.bfloat16  # the interpreter on a CPU runs bf16
    with simulation.simulate("t4"):
        assert exercise.half_dtype() == torch.float16


@pytest.mark.parametrize("stem", WITH_BF16_CASES)
def test_reference_solution_passes_on_a_t4_with_bf16_cases_skipped(stem):
    with simulation.simulate("t4"):
        report = NOTEBOOKS[stem].check(notebooks.solution(stem, NOTEBOOKS[stem].function))
    report.assert_passed()
    skipped = [row for row in report.rows if row.skipped]
    assert skipped and all("bfloat16" in row.case and "sm_75" in row.detail for row in skipped)
    assert not any(row.passed for row in skipped)
    assert any("float16" in row.case and not row.skipped for row in report.rows)  # 16-bit still checked
    assert "skipped on this device" in report.summary() and "skip" in str(report)


def test_a_planted_mistake_still_fails_on_a_t4():
    with simulation.simulate("t4"):
        report = exercise.check_fused_add_rms_norm(test_ch03.fused_add_normalizes_unrounded_h)
    assert not report.passed


def test_a_report_of_only_skipped_cases_does_not_pass():
    skipped = exercise.Row("bf16 case", False, None, "skipped", skipped=True)
    assert not exercise.Report("t", [skipped], 0).passed
