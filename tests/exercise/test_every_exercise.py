"""The tests every exercise gets, over the registry (``tritonforge.exercise.registry.REGISTRY``: a
row per exercise, naming its notebook, the function the learner writes, its check and its planted
wrong answers, which live in the chapter's test module): every exercise's notebook has one stub
and a check of it, the check fails every case on the stub as shipped, fails each planted wrong
answer on every seed, and passes on the reference solution."""

from __future__ import annotations

import pytest

from tritonforge import hardware
from tritonforge.exercise.registry import NOTEBOOKS

from . import notebooks, test_ch03

STEMS = sorted(NOTEBOOKS)
PLANTED = [(stem, wrong) for stem in STEMS for wrong in notebooks.planted(NOTEBOOKS[stem])]
INTERPRETER_ONLY_MISTAKES = test_ch03.INTERPRETER_ONLY_MISTAKES


@pytest.mark.parametrize("stem", STEMS)
def test_notebook_has_one_stub_and_a_check_of_it(stem):
    notebooks.assert_notebook_has_one_stub_and_a_check_of_it(NOTEBOOKS[stem])


@pytest.mark.parametrize("stem", STEMS)
def test_check_fails_every_case_on_the_shipped_stub(stem, tmp_path):
    notebooks.assert_check_fails_every_case_on_the_shipped_stub(NOTEBOOKS[stem], tmp_path)


# A planted mistake fails on PyTorch's comparison of its output; the reference solutions (below)
# prove the kernels on each Triton, so the lowest-Triton pass of .ci/run leaves these out.
# Five seeds for each of 205 mistakes: the full tier's sweep; the quick tier keeps each chapter's
# tests that a named mistake gets its verdict (test_chNN.py).
@pytest.mark.version_free
@pytest.mark.slow
@pytest.mark.parametrize("stem, wrong", PLANTED, ids=[f"{s}-{w.__name__}" for s, w in PLANTED])
def test_check_fails_on_a_planted_wrong_answer(stem, wrong):
    if wrong in INTERPRETER_ONLY_MISTAKES and not hardware.interpreting():
        pytest.skip(f"{wrong.__name__} is only a mistake in the interpreter (a GPU's .to() rounds to nearest)")
    notebooks.assert_check_fails_on_every_seed(NOTEBOOKS[stem].check, wrong)


@pytest.mark.parametrize("seed", [None, 1])  # None: the default seed, 0
@pytest.mark.parametrize("stem", STEMS)
def test_check_passes_on_the_reference_solution(stem, seed):
    exercise = NOTEBOOKS[stem]
    exercise.check(notebooks.solution(stem, exercise.function), seed=seed).assert_passed()
