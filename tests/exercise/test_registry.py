"""The registry (``tritonforge.exercise.registry``), the exercise notebooks in ``exercises/`` and the
reference solutions in ``exercises/solutions/`` agree one to one; what the package exports, the
checks, ``EXERCISES`` and the grader's list all come from the rows; every row's chapter module
gives the functions the row's name promises, and every planted wrong answer it names exists."""

from __future__ import annotations

import ast
import inspect

import pytest

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge import exercise
from tritonforge.exercise import grade
from tritonforge.exercise.registry import CHAPTERS, EXERCISES, NOTEBOOKS, REGISTRY

from . import notebooks

STEMS = [e.notebook for e in REGISTRY]


def _definition(source: str, name: str) -> ast.FunctionDef:
    (fn,) = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == name]
    return fn


def _parameters(source: str, name: str) -> list[str]:
    args = _definition(source, name).args
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]


def test_registry_notebooks_and_solutions_agree_one_to_one():
    notebook_stems = sorted(p.stem for p in notebooks.EXERCISES.glob("*.ipynb"))
    solution_stems = sorted(p.stem for p in (notebooks.EXERCISES / "solutions").glob("*.py"))
    assert sorted(STEMS) == notebook_stems == solution_stems
    assert len(set(STEMS)) == len(STEMS) == len({e.name for e in REGISTRY}) == len({e.function for e in REGISTRY})


def test_the_rows_are_in_the_books_order():
    assert STEMS == sorted(STEMS)
    assert list(NOTEBOOKS) == STEMS and list(grade.NOTEBOOKS) == STEMS
    assert list(EXERCISES) == [e.name for e in REGISTRY]
    assert [m.__name__ for m in CHAPTERS] == [f"tritonforge.exercise.ch{n:02d}" for n in range(1, 10)]


@pytest.mark.parametrize("stem", STEMS)
def test_notebook_stub_and_solution_define_the_rows_function(stem):
    """The notebook's stub cell defines the row's function, its check cell calls the row's check
    on it, and the solution defines it with the stub's parameters (the learner writes the body)."""
    row = NOTEBOOKS[stem]
    stub = notebooks.stub_source(row)
    solution = (notebooks.EXERCISES / "solutions" / f"{stem}.py").read_text(encoding="utf-8")
    assert _parameters(solution, row.function) == _parameters(stub, row.function)
    notebooks.assert_notebook_has_one_stub_and_a_check_of_it(row)


@pytest.mark.parametrize("stem", STEMS)
def test_the_rows_names_are_exported(stem):
    """check_<name>, try_<name>, <name>_cases, the reference and launch_<name> (where the exercise
    has one) are names of tritonforge.exercise, the chapter module lists them in its __all__, and
    the check is the row's own."""
    row = NOTEBOOKS[stem]
    public = row.public()
    assert {f"check_{row.name}", f"try_{row.name}", f"{row.name}_cases", row.reference.__name__} <= set(public)
    for name, value in public.items():
        assert getattr(exercise, name) is value and name in exercise.__all__
        if not name.startswith("check_"):
            assert name in row.module.__all__, f"{name} is not in {row.module.__name__}.__all__"
    assert exercise.EXERCISES[row.name] is row.check is getattr(exercise, f"check_{row.name}")
    assert row.check.__doc__.startswith(f"Exercise {row.label}: ")


def test_chapter_modules_export_distinct_names_that_exist():
    seen = {}
    for module in CHAPTERS:
        for name in module.__all__:
            assert name not in seen, f"{name} is exported by {seen.get(name)} and {module.__name__}"
            seen[name] = module.__name__
            assert getattr(exercise, name) is getattr(module, name)


def test_a_check_runs_its_rows_cases_under_its_title():
    row = NOTEBOOKS["ex02b_row_max"]
    report = row.check(lambda *args: None, seed=3)
    assert report.title == row.function == "row_max_kernel" and report.seed == 3
    assert [r.case for r in report.rows] == [c.name for c in row.cases()]
    assert inspect.signature(row.check).parameters["seed"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("stem", STEMS)
def test_the_planted_wrong_answers_exist(stem):
    """Each row names at least one planted wrong answer, all different, each a function of the
    chapter's test module taking the stub's parameters."""
    row = NOTEBOOKS[stem]
    planted = notebooks.planted(row)
    assert planted and len(set(planted)) == len(planted)
    stub_parameters = _parameters(notebooks.stub_source(row), row.function)
    for wrong in planted:
        fn = getattr(wrong, "fn", wrong)  # a @triton.jit kernel wraps the function
        assert list(inspect.signature(fn).parameters) == stub_parameters, wrong.__name__
