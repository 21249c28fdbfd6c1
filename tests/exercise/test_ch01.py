"""Exercise 1a's check (tritonforge.exercise.ch01) catches wrong counts: it fails on the shipped
stub and on planted mistakes, passes on the reference solution, and names what is wrong."""

from __future__ import annotations

import pytest
import torch

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge import exercise

from . import notebooks

# Planted wrong answers: the mistakes a learner is most likely to make ---------------------------


def intensity_forgets_weight(op, shape, dtype):
    """RMSNorm bytes without the weight read (2·M·N·elem)."""
    elem = torch.empty((), dtype=dtype).element_size()
    if op == "rms_norm":
        M, N = shape
        flops, nbytes = 4 * M * N, 2 * M * N * elem
    else:
        M, N, K = shape
        flops, nbytes = 2 * M * N * K, (M * K + K * N + M * N) * elem
    return flops, nbytes, flops / nbytes


def intensity_counts_macs(op, shape, dtype):
    """Matmul FLOPs counted as multiply-adds (M·N·K), RMSNorm right."""
    elem = torch.empty((), dtype=dtype).element_size()
    if op == "rms_norm":
        M, N = shape
        flops, nbytes = 4 * M * N, (2 * M * N + N) * elem
    else:
        M, N, K = shape
        flops, nbytes = M * N * K, (M * K + K * N + M * N) * elem
    return flops, nbytes, flops / nbytes


def intensity_assumes_fp32(op, shape, dtype):
    """4 bytes per element whatever the dtype."""
    if op == "rms_norm":
        M, N = shape
        flops, nbytes = 4 * M * N, (2 * M * N + N) * 4
    else:
        M, N, K = shape
        flops, nbytes = 2 * M * N * K, (M * K + K * N + M * N) * 4
    return flops, nbytes, flops / nbytes


TABLE = {
    # notebook stem: (function name in the stub and the solution, the check, planted wrong answers)
    "ex01a_arithmetic_intensity": (
        "arithmetic_intensity",
        exercise.check_arithmetic_intensity,
        [intensity_forgets_weight, intensity_counts_macs, intensity_assumes_fp32],
    ),
}
STEMS = sorted(TABLE)
PLANTED = [(stem, wrong) for stem in STEMS for wrong in TABLE[stem][2]]


@pytest.mark.parametrize("stem", STEMS)
def test_notebook_has_one_stub_and_a_check_of_it(stem):
    name, check, _ = TABLE[stem]
    notebooks.assert_notebook_has_one_stub_and_a_check_of_it(stem, name, check)


@pytest.mark.parametrize("stem", STEMS)
def test_check_fails_every_case_on_the_shipped_stub(stem, tmp_path):
    name, check, _ = TABLE[stem]
    notebooks.assert_check_fails_every_case_on_the_shipped_stub(stem, name, check, tmp_path)


@pytest.mark.parametrize("stem, wrong", PLANTED, ids=[f"{s}-{w.__name__}" for s, w in PLANTED])
def test_check_fails_on_a_planted_wrong_answer(stem, wrong):
    _, check, _ = TABLE[stem]
    notebooks.assert_check_fails_on_every_seed(check, wrong)


@pytest.mark.parametrize("seed", [0, 1, None])
@pytest.mark.parametrize("stem", STEMS)
def test_check_passes_on_the_reference_solution(stem, seed):
    name, check, _ = TABLE[stem]
    check(notebooks.solution(stem, name), seed=seed).assert_passed()


def test_specific_failure_messages():
    """The verdict names the wrong count."""
    counts = exercise.check_arithmetic_intensity(intensity_forgets_weight)
    assert any(r.detail.startswith("bytes: got") for r in counts.rows)
