"""The tests every exercise gets, over one table: each chapter's test module lists its exercises
(``TABLE``: notebook stem -> (function name, check, planted wrong answers)); here every exercise's
notebook has one stub and a check of it, the check fails every case on the stub as shipped, fails
each planted wrong answer on every seed, and passes on the reference solution."""

from __future__ import annotations

import pytest

from tritonforge import runtime

from . import notebooks, test_ch01, test_ch02, test_ch03, test_ch04, test_ch05, test_ch06, test_ch07, test_ch08, test_ch09

TABLE = {
    **test_ch01.TABLE,
    **test_ch02.TABLE,
    **test_ch03.TABLE,
    **test_ch04.TABLE,
    **test_ch05.TABLE,
    **test_ch06.TABLE,
    **test_ch07.TABLE,
    **test_ch08.TABLE,
    **test_ch09.TABLE,
}
STEMS = sorted(TABLE)
PLANTED = [(stem, wrong) for stem in STEMS for wrong in TABLE[stem][2]]
INTERPRETER_ONLY_MISTAKES = test_ch03.INTERPRETER_ONLY_MISTAKES


@pytest.mark.parametrize("stem", STEMS)
def test_notebook_has_one_stub_and_a_check_of_it(stem):
    name, check, _ = TABLE[stem]
    notebooks.assert_notebook_has_one_stub_and_a_check_of_it(stem, name, check)


@pytest.mark.parametrize("stem", STEMS)
def test_check_fails_every_case_on_the_shipped_stub(stem, tmp_path):
    name, check, _ = TABLE[stem]
    notebooks.assert_check_fails_every_case_on_the_shipped_stub(stem, name, check, tmp_path)


# A planted mistake fails on PyTorch's comparison of its output; the reference solutions (below)
# prove the kernels on each Triton, so the lowest-Triton pass of .ci/run leaves these out.
# Five seeds for each of 172 mistakes: the full tier's sweep; the quick tier keeps each chapter's
# tests that a named mistake gets its verdict (test_chNN.py).
@pytest.mark.version_free
@pytest.mark.slow
@pytest.mark.parametrize("stem, wrong", PLANTED, ids=[f"{s}-{w.__name__}" for s, w in PLANTED])
def test_check_fails_on_a_planted_wrong_answer(stem, wrong):
    if wrong in INTERPRETER_ONLY_MISTAKES and not runtime.interpreting():
        pytest.skip(f"{wrong.__name__} is only a mistake in the interpreter (a GPU's .to() rounds to nearest)")
    _, check, _ = TABLE[stem]
    notebooks.assert_check_fails_on_every_seed(check, wrong)


@pytest.mark.parametrize("seed", [None, 1])  # None: the default seed, 0
@pytest.mark.parametrize("stem", STEMS)
def test_check_passes_on_the_reference_solution(stem, seed):
    name, check, _ = TABLE[stem]
    check(notebooks.solution(stem, name), seed=seed).assert_passed()
