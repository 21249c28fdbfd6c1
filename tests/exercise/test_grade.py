"""The grading command (``python -m tritonforge.exercise grade``): it finds the learner's code in a
notebook, passes the reference solutions, names the failing case of a wrong answer (and draws its
output), says "not attempted" for an untouched stub, survives a crash, and exits 0 only when every
exercise passed. And the stub as shipped is read from the committed notebook, also once a learner
has solved the exercise in place."""

from __future__ import annotations

import inspect
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge.exercise import grade, stubs

from . import notebooks, test_ch02, test_ch03

STEMS = sorted(grade.NOTEBOOKS)


def shipped(stem: str) -> str:
    return notebooks.stub_source(grade.NOTEBOOKS[stem])


def write_notebook(stem: str, stub_source: str, dest: pathlib.Path) -> pathlib.Path:
    """A copy of an exercise notebook whose stub cell holds ``stub_source`` (as a learner would
    leave it), written in the notebooks' own format."""
    nb = json.loads((notebooks.EXERCISES / f"{stem}.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if grade.STUB_TAG in cell.get("metadata", {}).get("tags", []):
            cell["source"] = stub_source.splitlines(keepends=True)
    dest.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return dest


def solution_source(stem: str) -> str:
    return (notebooks.EXERCISES / "solutions" / f"{stem}.py").read_text(encoding="utf-8")


def planted_source(wrong, name: str) -> str:
    """A planted wrong answer's source, renamed to the function the notebook asks for."""
    source = inspect.getsource(getattr(wrong, "fn", wrong))
    return source.replace(f"def {wrong.__name__}(", f"def {name}(", 1)


def run_grade(*args: str, cwd: pathlib.Path = notebooks.ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tritonforge.exercise", "grade", *args], cwd=cwd, capture_output=True, text=True, timeout=900)


# The notebooks and their stubs ----------------------------------------------------------------


def test_every_exercise_notebook_is_recognized():
    for stem in STEMS:
        path = notebooks.EXERCISES / f"{stem}.ipynb"
        assert grade.identify(json.loads(path.read_text(encoding="utf-8")), path) is grade.NOTEBOOKS[stem]


@pytest.mark.parametrize("stem", STEMS)
def test_untouched_means_the_stub(stem):
    exercise = grade.NOTEBOOKS[stem]
    stub = shipped(stem)
    assert grade.is_untouched(stub, exercise.function)
    assert not grade.is_untouched(solution_source(stem), exercise.function)
    assert not grade.is_untouched(stub.replace("pass", "x = 1").replace("raise NotImplementedError", "return"), exercise.function)


def test_untouched_kernel_stubs_are_told_by_their_todo_parts():
    """Chapter 7's stubs hand over a working kernel: untouched while every TODO part holds only
    ``pass``, whatever the comments and the layout; written in as soon as one part holds code."""
    stub = shipped("ex07b_alibi")
    function = grade.NOTEBOOKS["ex07b_alibi"].function
    assert stub.count("# ---- TODO") == 2
    assert grade.is_untouched(stub.replace("    pass\n", "    pass  # not yet\n\n"), function)
    first, second = stub.split("    pass\n", 1)
    assert not grade.is_untouched(first + "    slope = 1.0\n" + second, function)
    assert not grade.is_untouched(stub.replace("# ---- end of TODO ----", "# done", 1), function)  # a part without its end


def test_a_todo_part_may_close_the_function():
    """Exercise 7d's stub ends in its TODO part: the part's end marker is a comment after the
    function's last statement, and still counts."""
    stub = shipped("ex07d_attention_bwd_preprocess")
    function = grade.NOTEBOOKS["ex07d_attention_bwd_preprocess"].function
    assert stub.rstrip().endswith("# ---- end of TODO ----")
    assert grade.is_untouched(stub, function)
    assert grade.is_untouched(stub + "\n\n# a comment of the cell, not of the kernel\n", function)
    assert not grade.is_untouched(stub.replace("    pass\n", "    delta = 0.0\n"), function)
    assert not grade.is_untouched(stub.replace("    # ---- end of TODO ----", "    # done"), function)


def test_the_shipped_stub_is_read_from_the_committed_notebook(tmp_path):
    """A notebook solved in place: the stub as shipped comes from the newest commit of the notebook
    whose stub cell is untouched; in a folder outside git there is none, and it says so."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    stem, exercise = "ex02b_row_max", grade.NOTEBOOKS["ex02b_row_max"]
    stub = shipped(stem)
    path = write_notebook(stem, stub, tmp_path / f"{stem}.ipynb")

    def run(*args):
        subprocess.run([git, "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True, capture_output=True)

    run("init", "-q")
    run("add", path.name)
    run("commit", "-q", "-m", "shipped")
    write_notebook(stem, solution_source(stem), path)
    run("commit", "-q", "-am", "solved, and committed")
    write_notebook(stem, solution_source(stem).replace("BLOCK_N", "BLOCK_N "), path)  # and changed again, not committed
    assert stubs.shipped_stub(stem, exercise.function, tmp_path).rstrip() == stub.rstrip()

    elsewhere = tmp_path / "copy"
    elsewhere.mkdir()
    write_notebook(stem, solution_source(stem), elsewhere / f"{stem}.ipynb")
    with pytest.raises(LookupError, match="no committed version"):
        stubs.shipped_stub(stem, exercise.function, elsewhere)


def test_learner_code_takes_the_setup_cells_without_the_install_cell(tmp_path):
    path = write_notebook("ex03b_fused_add_rms_norm", shipped("ex03b_fused_add_rms_norm"), tmp_path / "ex03b.ipynb")
    setup, stub = grade.learner_code(json.loads(path.read_text(encoding="utf-8")))
    assert "cast_for_store" in setup and "import triton" in setup
    assert "google.colab" not in setup and "%pip" not in setup
    assert stub.rstrip() == shipped("ex03b_fused_add_rms_norm").rstrip()


# The command ----------------------------------------------------------------------------------


@pytest.mark.slow  # a child process per notebook; test_every_exercise checks each solution in the quick tier
def test_grade_passes_every_reference_solution(tmp_path):
    paths = [str(write_notebook(stem, solution_source(stem), tmp_path / f"{stem}.ipynb")) for stem in STEMS]
    proc = run_grade(*paths)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for stem in STEMS:
        assert f"{stem} {grade.NOTEBOOKS[stem].function}: passed" in proc.stdout
    assert f"{len(STEMS)} passed" in proc.stdout


@pytest.mark.slow  # a child process per notebook, as above
def test_grade_names_what_failed_and_why(tmp_path):
    """One run over a mix: a planted wrong answer (in a renamed copy), an untouched stub, a syntax
    error, a function that kills the process, and a solved exercise after them."""
    wrong = write_notebook("ex02b_row_max", planted_source(test_ch02.row_max_reads_past_row, "row_max_kernel"), tmp_path / "my_row_max.ipynb")
    eps = write_notebook(
        "ex03b_fused_add_rms_norm", planted_source(test_ch03.fused_add_forgets_eps, "fused_add_rms_norm_kernel"), tmp_path / "ex03b.ipynb"
    )
    stub = write_notebook("ex04a_rms_norm_dweight", shipped("ex04a_rms_norm_dweight"), tmp_path / "ex04a_rms_norm_dweight.ipynb")
    broken = write_notebook("ex03a_layer_norm_forward", "def layer_norm_fwd_kernel(:\n    pass\n", tmp_path / "ex03a_layer_norm_forward.ipynb")
    crash = write_notebook(
        "ex01a_arithmetic_intensity",
        "def arithmetic_intensity(op, shape, dtype):\n    import os\n\n    os.abort()\n",
        tmp_path / "ex01a_arithmetic_intensity.ipynb",
    )
    solved = write_notebook("ex02a_bias_relu_2d", solution_source("ex02a_bias_relu_2d"), tmp_path / "ex02a_bias_relu_2d.ipynb")
    proc = run_grade(*map(str, (wrong, eps, stub, broken, crash, solved)))
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    lines = out.splitlines()

    (row_max,) = [line for line in lines if line.startswith("my_row_max (ex02b_row_max)")]
    assert "FAILED" in row_max
    assert "    ✘ 7×100, mixed signs: wrong values" in out and "a load read past the end of a row" in out
    # under the list, the check's pictures of its first failed cases: the last row read past its end
    assert "\n\n    7×100, mixed signs:\n      out [7]:\n      ······x|\n      · right" in out

    (fused,) = [line for line in lines if line.startswith("ex03b (ex03b_fused_add_rms_norm)")]
    assert "FAILED" in fused
    assert "✘ float32 4×500, tiny values" in out and "look at eps" in out

    assert "ex04a_rms_norm_dweight rms_norm_dweight_kernel: not attempted" in out
    assert "ex03a_layer_norm_forward layer_norm_fwd_kernel: FAILED — the code in the cell marked 'your code' did not run: SyntaxError" in out
    assert "ex01a_arithmetic_intensity arithmetic_intensity: FAILED — your code crashed the Python process (killed by SIGABRT)" in out
    assert "ex02a_bias_relu_2d bias_relu_2d_kernel: passed" in out
    assert lines[lines.index("ex02a_bias_relu_2d bias_relu_2d_kernel: passed — bias_relu_2d_kernel: all 7 cases pass") + 1] == "", "no picture"
    assert "6 exercise notebook(s): 1 passed, 4 failed, 1 not attempted" in out


def test_grade_of_untouched_notebooks_is_not_attempted_and_fails(tmp_path):
    """Notebooks as shipped, graded by name (a prefix will do) from a folder given with --dir."""
    for stem in STEMS:
        write_notebook(stem, shipped(stem), tmp_path / f"{stem}.ipynb")
    proc = run_grade("--dir", str(tmp_path), "ex02b", "ex04a_rms_norm_dweight")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.count("not attempted — the function is still the stub as shipped") == 2
    assert "2 exercise notebook(s): 2 not attempted" in proc.stdout


def test_grade_usage_errors_exit_2():
    proc = run_grade("ex99_no_such_exercise")
    assert proc.returncode == 2
    assert "not a notebook path, nor the name of one exercise" in proc.stderr
