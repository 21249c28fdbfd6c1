"""The exercises as the tests see them, from the registry (``tritonforge.exercise.registry``): the
stub as shipped (the stub cell of the committed notebook, ``tritonforge.exercise.stubs``: never a
notebook a learner has solved in place), the reference solution in ``exercises/solutions/``, the
planted wrong answers (the registry names them; they live in ``test_chNN.py``), and the
assertions every exercise's tests make about them (the check fails every case on the stub, fails
each planted answer on every seed, passes on the solution, and the notebook's check cell calls it)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import pathlib
import sys
from collections.abc import Callable

import pytest
import torch

from tritonforge.exercise.registry import NOTEBOOKS, REGISTRY, Exercise

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXERCISES = ROOT / "exercises"

# What a stub cell may use: the names the notebook's setup cell defines.
STUB_HEADER = "import tritonforge\nimport torch\nimport triton\nimport triton.language as tl\n\n"


def stems(chapter: int) -> list[str]:
    """The notebooks of one chapter's exercises."""
    return [e.notebook for e in REGISTRY if e.chapter == chapter]


def planted(exercise: Exercise) -> list[Callable]:
    """The planted wrong answers the exercise's row names, from ``test_chNN.py`` of its chapter."""
    module = importlib.import_module(f"{__package__}.test_ch{exercise.chapter:02d}")
    return [getattr(module, name) for name in exercise.planted]


def _load_module(path: pathlib.Path, name: str):
    """Import a file as a module (``@triton.jit`` needs a real file to read the source from)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def cells(notebook: pathlib.Path, tag: str) -> list[str]:
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if tag in c.get("metadata", {}).get("tags", [])]


def stub_source(exercise: Exercise) -> str:
    """The stub as shipped; a skip where none can be found (a notebook solved in place, no git)."""
    try:
        return exercise.stub
    except LookupError as exc:
        pytest.skip(str(exc))


def shipped_stub(exercise: Exercise, tmp_path: pathlib.Path):
    """The stub as shipped, written to a file and imported: the function it defines."""
    path = tmp_path / f"stub_{exercise.notebook}.py"
    path.write_text(STUB_HEADER + stub_source(exercise) + "\n", encoding="utf-8")
    return getattr(_load_module(path, f"stub_{exercise.notebook}"), exercise.function)


def solution(stem: str, name: str):
    path = EXERCISES / "solutions" / f"{stem}.py"
    return getattr(_load_module(path, f"solution_{stem}"), name)


def assert_notebook_has_one_stub_and_a_check_of_it(exercise: Exercise) -> None:
    notebook = EXERCISES / f"{exercise.notebook}.ipynb"
    (stub,) = cells(notebook, "exercise-stub")
    assert f"def {exercise.function}(" in stub
    (check_cell,) = cells(notebook, "exercise-check")
    assert f"exercise.{exercise.check.__name__}({exercise.function})" in check_cell


def assert_check_fails_every_case_on_the_shipped_stub(exercise: Exercise, tmp_path: pathlib.Path) -> None:
    report = exercise.check(shipped_stub(exercise, tmp_path))
    assert not report.passed
    assert report.n_passed == 0, str(report)
    assert all(row.detail for row in report.rows), "every failure says why"


PLANTED_SEEDS = (None, 1, 2, 3, 4)
"""A planted wrong answer must fail the check on the default seed and on every other one tried:
a mistake caught by chance on some seeds is not caught."""


def assert_check_fails_on_every_seed(check, wrong) -> None:
    """Only the verdict matters here, so each check stops at its first failed case
    (:func:`tritonforge.exercise.core.until_first_failure`): a report with a failed row has not
    passed, whatever the later cases would say."""
    from tritonforge.exercise.core import until_first_failure

    for seed in PLANTED_SEEDS:
        with until_first_failure():
            report = check(wrong, seed=seed)
        assert not report.passed, f"{wrong.__name__} passed with seed {seed}:\n{report}"


def run_one_case(exercise: Exercise, fn, case_prefix: str, seed) -> tuple:
    """The row of the one case of ``exercise`` whose name starts with ``case_prefix``, on the very
    inputs the whole check gives it with ``seed`` (case ``i`` draws from ``seed + i``), and the
    error budget it was judged by (the dtype's tolerance times ``max(1, max|expected|)``,
    finite answers only)."""
    from tritonforge.exercise.core import DEFAULT_SEED, check
    from tritonforge.reference import TOLERANCE

    cases = exercise.cases()
    (index,) = [i for i, c in enumerate(cases) if c.name.startswith(case_prefix)]
    case = cases[index]
    base = DEFAULT_SEED if seed is None else seed
    (row,) = check(fn, [case], title=exercise.function, seed=base + index).rows
    gen = torch.Generator().manual_seed(base + index)
    expected = case.expected(case.inputs(gen)).double()
    finite = expected[torch.isfinite(expected)]
    scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
    return row, TOLERANCE[case.dtype or torch.float32] * scale


def assert_gpu_checks_on_compiled_kernels(stem: str, tmp_path: pathlib.Path, *, skip=()) -> None:
    """On a GPU: the solution passes, the stub fails every case, every planted mistake (but those
    in ``skip``) fails, all compiled rather than interpreted."""
    from tritonforge import exercise as package

    exercise = NOTEBOOKS[stem]
    assert package.kernel_device() == "cuda"
    exercise.check(solution(stem, exercise.function)).assert_passed()
    assert exercise.check(shipped_stub(exercise, tmp_path)).n_passed == 0
    for wrong in planted(exercise):
        if wrong not in skip:
            assert not exercise.check(wrong).passed, wrong.__name__
