"""The exercise notebooks as the tests see them: the stub as shipped (the package's copy of the
cell tagged ``exercise-stub``, ``tritonforge.exercise.stubs``: never the notebook in the working
tree, which a learner may have solved in place), the reference solution in
``exercises/solutions/``, and the assertions every exercise's tests make about them (the check
fails every case on the stub, passes on the solution, and the notebook's check cell calls it)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXERCISES = ROOT / "exercises"

# What a stub cell may use: the names the notebook's setup cell defines.
STUB_HEADER = "import tritonforge\nimport torch\nimport triton\nimport triton.language as tl\n\n"


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


def shipped_stub(stem: str, name: str, tmp_path: pathlib.Path):
    """The stub as shipped (``tritonforge.exercise.stubs``), written to a file and imported."""
    from tritonforge.exercise.stubs import STUBS

    path = tmp_path / f"stub_{stem}.py"
    path.write_text(STUB_HEADER + STUBS[stem] + "\n", encoding="utf-8")
    return getattr(_load_module(path, f"stub_{stem}"), name)


def solution(stem: str, name: str):
    path = EXERCISES / "solutions" / f"{stem}.py"
    return getattr(_load_module(path, f"solution_{stem}"), name)


def assert_notebook_has_one_stub_and_a_check_of_it(stem: str, name: str, check) -> None:
    notebook = EXERCISES / f"{stem}.ipynb"
    (stub,) = cells(notebook, "exercise-stub")
    assert f"def {name}(" in stub
    (check_cell,) = cells(notebook, "exercise-check")
    assert f"exercise.{check.__name__}({name})" in check_cell


def assert_check_fails_every_case_on_the_shipped_stub(stem: str, name: str, check, tmp_path: pathlib.Path) -> None:
    report = check(shipped_stub(stem, name, tmp_path))
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


def assert_gpu_checks_on_compiled_kernels(stem: str, name: str, check, planted, tmp_path: pathlib.Path, *, skip=()) -> None:
    """On a GPU: the solution passes, the stub fails every case, every planted mistake (but those
    in ``skip``) fails, all compiled rather than interpreted."""
    from tritonforge import exercise

    assert exercise.kernel_device() == "cuda"
    check(solution(stem, name)).assert_passed()
    assert check(shipped_stub(stem, name, tmp_path)).n_passed == 0
    for wrong in planted:
        if wrong not in skip:
            assert not check(wrong).passed, wrong.__name__
