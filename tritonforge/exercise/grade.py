r"""Grade the learner's own exercise notebooks: ``python -m tritonforge.exercise grade [NOTEBOOK ...]``.

For each notebook (default: every exercise notebook in ``exercises/``) the grader takes the
code the learner wrote — the cell tagged ``exercise-stub``, after the notebook's setup cells
(the code cells above it, less the Colab install cell) — imports it from a file, and runs the
exercise's check on the function it defines, guarded like the notebook's check cell. It prints,
per exercise, ``passed``, ``not attempted`` (the function's body is still the stub's: only
``pass``, ``...``, a docstring or ``raise NotImplementedError``), or ``FAILED`` with each failing
case and the check's own verdict, and the pictures of the output that the check draws for its
first failed cases (:meth:`Report.pictured <tritonforge.exercise.core.Report.pictured>`). The exit
status is 0 only if every graded exercise passed.

Each notebook is graded in a child process, so a kernel that crashes the interpreter (an
unmasked access far outside every buffer can) fails that exercise with a message instead of
ending the grading.

:data:`NOTEBOOKS` maps each notebook's stem to its :class:`Exercise`: the function the learner
writes, its check, and the stub as shipped (:mod:`tritonforge.exercise.stubs`).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Optional

from tritonforge.exercise.ch01 import check_arithmetic_intensity, check_fused_add_rms_norm_traffic, check_roofline_prediction
from tritonforge.exercise.ch02 import check_bias_relu_2d, check_row_max, check_transpose
from tritonforge.exercise.ch03 import check_fused_add_rms_norm, check_layer_norm_fwd, check_rms_norm_long_rows
from tritonforge.exercise.ch04 import check_fused_add_rms_norm_backward, check_rms_norm_dweight, check_rms_norm_dx
from tritonforge.exercise.ch05 import check_geglu, check_matmul_bias_silu, check_swiglu_bwd
from tritonforge.exercise.ch06 import check_cross_entropy, check_log_softmax, check_merge_states
from tritonforge.exercise.ch07 import check_attention_alibi, check_attention_softcap, check_sliding_window_attention
from tritonforge.exercise.ch08 import check_scaled_residual_add
from tritonforge.exercise.ch09 import check_rope
from tritonforge.exercise.core import Report, describe_exception
from tritonforge.exercise.stubs import STUBS

STUB_TAG = "exercise-stub"
CHECK_TAG = "exercise-check"
SKIPPED_TAGS = ("colab-install",)

EXIT_PASSED, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Exercise:
    """One exercise notebook: the function the learner writes, its check, its stub as shipped."""

    stem: str
    function: str
    check: Callable[..., Report]

    @property
    def stub(self) -> str:
        return STUBS[self.stem]


NOTEBOOKS = {
    e.stem: e
    for e in (
        Exercise("ex01a_arithmetic_intensity", "arithmetic_intensity", check_arithmetic_intensity),
        Exercise("ex01b_roofline_prediction", "roofline_prediction", check_roofline_prediction),
        Exercise("ex01c_fused_add_rms_norm_traffic", "fused_add_rms_norm_traffic", check_fused_add_rms_norm_traffic),
        Exercise("ex02a_bias_relu_2d", "bias_relu_2d_kernel", check_bias_relu_2d),
        Exercise("ex02b_row_max", "row_max_kernel", check_row_max),
        Exercise("ex02c_transpose", "transpose_kernel", check_transpose),
        Exercise("ex03a_layer_norm_forward", "layer_norm_fwd_kernel", check_layer_norm_fwd),
        Exercise("ex03b_fused_add_rms_norm", "fused_add_rms_norm_kernel", check_fused_add_rms_norm),
        Exercise("ex03c_rms_norm_long_rows", "rms_norm_long_rows_kernel", check_rms_norm_long_rows),
        Exercise("ex04a_rms_norm_dweight", "rms_norm_dweight_kernel", check_rms_norm_dweight),
        Exercise("ex04b_rms_norm_dx", "rms_norm_dx_kernel", check_rms_norm_dx),
        Exercise("ex04c_fused_add_rms_norm_backward", "fused_add_rms_norm_backward", check_fused_add_rms_norm_backward),
        Exercise("ex05a_geglu_forward", "geglu_kernel", check_geglu),
        Exercise("ex05b_swiglu_backward", "swiglu_bwd_kernel", check_swiglu_bwd),
        Exercise("ex05c_matmul_bias_silu", "matmul_bias_silu_kernel", check_matmul_bias_silu),
        Exercise("ex06a_log_softmax", "log_softmax_kernel", check_log_softmax),
        Exercise("ex06b_merge_softmax_states", "merge_states_kernel", check_merge_states),
        Exercise("ex06c_cross_entropy", "cross_entropy_kernel", check_cross_entropy),
        Exercise("ex07a_softcapping", "attention_softcap_kernel", check_attention_softcap),
        Exercise("ex07b_alibi", "attention_alibi_kernel", check_attention_alibi),
        Exercise("ex07c_sliding_window", "sliding_window_attention_kernel", check_sliding_window_attention),
        Exercise("ex08a_register_an_op", "register_scaled_residual_add", check_scaled_residual_add),
        Exercise("ex09a_fused_rope", "rope_kernel", check_rope),
    )
}
"""Every exercise notebook, by stem, in the book's order."""


# ----------------------------------------------------------------------------------------------
# Reading a notebook
# ----------------------------------------------------------------------------------------------


def _tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _without_magics(source: str) -> str:
    """IPython's ``%magic`` and ``!shell`` lines become ``pass  # %magic``: the code runs as a
    plain module (and an ``if`` around a magic keeps its body)."""

    def plain(line: str) -> str:
        body = line.lstrip()
        return f"{line[: len(line) - len(body)]}pass  # {body}" if body.startswith(("%", "!")) else line

    return "\n".join(plain(line) for line in source.splitlines())


def identify(notebook: dict, path: pathlib.Path) -> Optional[Exercise]:
    """The exercise a notebook holds: by the check its check cell calls (a renamed copy is still
    recognized), else by its file name."""
    for cell in notebook.get("cells", []):
        if CHECK_TAG in _tags(cell):
            match = re.search(r"exercise\.(check_\w+)\(", _source(cell))
            if match:
                for exercise in NOTEBOOKS.values():
                    if exercise.check.__name__ == match.group(1):
                        return exercise
    return NOTEBOOKS.get(path.stem)


def learner_code(notebook: dict) -> tuple[str, str]:
    """``(setup, stub)``: the code cells above the stub cell (less the Colab install cell), and
    the stub cell as the learner left it. Raises ``ValueError`` if there is not exactly one."""
    cells = notebook.get("cells", [])
    stub_at = [i for i, c in enumerate(cells) if STUB_TAG in _tags(c)]
    if len(stub_at) != 1:
        raise ValueError(f"expected one cell tagged {STUB_TAG!r} (the cell marked 'your code'), found {len(stub_at)}")
    setup = [
        _without_magics(_source(c))
        for c in cells[: stub_at[0]]
        if c.get("cell_type") == "code" and not any(t in _tags(c) for t in SKIPPED_TAGS)
    ]
    return "\n\n".join(setup), _source(cells[stub_at[0]])


def _shipped_definitions(function: str) -> list[str]:
    """``ast.dump`` of ``function``'s definition in every shipped stub that defines it."""
    dumps = []
    for source in STUBS.values():
        tree = ast.parse(source)
        dumps += [ast.dump(n) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function]
    return dumps


def is_untouched(stub: str, function: str) -> bool:
    """True if ``function``'s body in ``stub`` is still a stub's: only a docstring, ``pass``,
    ``...``, comments or ``raise NotImplementedError(...)``; or, for a stub that hands over a
    working kernel with a part left to write (chapter 7's), still that kernel as shipped (the
    same code; comments and layout aside)."""
    try:
        tree = ast.parse(_without_magics(stub))
    except SyntaxError:
        return False
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    if not defs:
        return False
    if ast.dump(defs[-1]) in _shipped_definitions(function):
        return True
    for stmt in defs[-1].body:
        if isinstance(stmt, ast.Pass):
            continue
        constant = stmt.value.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) else None
        if isinstance(constant, str) or constant is Ellipsis:
            continue
        if isinstance(stmt, ast.Raise) and stmt.exc is not None:
            exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                continue
        return False
    return True


def load_function(setup: str, stub: str, function: str, directory: pathlib.Path, module_name: str):
    """Write ``setup`` and ``stub`` to a file, import it and return ``function`` from it (``@triton.jit``
    reads a kernel's source from its file)."""
    path = directory / f"{module_name}.py"
    path.write_text(f"{setup}\n\n\n{stub}\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    if not hasattr(module, function):
        raise NameError(f"the cell marked 'your code' does not define {function}")
    return getattr(module, function)


# ----------------------------------------------------------------------------------------------
# Grading one notebook (in a child process) and many (in this one)
# ----------------------------------------------------------------------------------------------


def grade_one(path: pathlib.Path) -> dict:
    """Grade one notebook in this process: ``{"status": "passed" | "failed" | "not attempted" |
    "error", "exercise", "function", "summary", "failures": [[case, detail], ...], "pictures":
    [[case, picture], ...]}``."""
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {"status": "error", "summary": f"cannot read the notebook: {describe_exception(exc)}"}
    exercise = identify(notebook, path)
    if exercise is None:
        return {"status": "error", "summary": "not an exercise notebook (no exercise.check_… call in a cell tagged 'exercise-check')"}
    result = {"exercise": exercise.stem, "function": exercise.function}
    try:
        setup, stub = learner_code(notebook)
    except ValueError as exc:
        return {**result, "status": "error", "summary": str(exc)}
    if is_untouched(stub, exercise.function):
        return {**result, "status": "not attempted", "summary": "the function is still the stub as shipped: write it in the cell marked 'your code'"}
    with tempfile.TemporaryDirectory(prefix="tritonforge-grade-") as tmp:
        try:
            fn = load_function(setup, stub, exercise.function, pathlib.Path(tmp), f"learner_{exercise.stem}")
        except BaseException as exc:  # noqa: BLE001 - a SyntaxError or NameError in the learner's cell
            return {**result, "status": "failed", "summary": f"the code in the cell marked 'your code' did not run: {describe_exception(exc)}"}
        report = exercise.check(fn)
    failures = [[r.case, r.detail] for r in report.rows if not (r.passed or r.skipped)]
    pictures = [[r.case, r.picture] for r in report.pictured()]
    return {**result, "status": "passed" if report.passed else "failed", "summary": report.summary(), "failures": failures, "pictures": pictures}


def _crash_text(returncode: int, stderr: str) -> str:
    if returncode < 0:
        try:
            how = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"killed by signal {-returncode}"
    else:
        how = f"exit status {returncode}"
    last = [line for line in stderr.strip().splitlines() if line.strip()][-1:] or [""]
    text = f"your code crashed the Python process ({how})"
    text += f": {last[0].strip()[:200]}" if last[0] else ""
    return text + " — usually a load or store far outside the tensors: check every mask and every offset"


def grade_in_child(path: pathlib.Path, *, timeout: float) -> dict:
    """Grade one notebook in a child process; a crash or a hang is a failed exercise."""
    with tempfile.TemporaryDirectory(prefix="tritonforge-grade-") as tmp:
        out = pathlib.Path(tmp) / "result.json"
        command = [sys.executable, "-m", "tritonforge.exercise", "_grade_one", str(path), str(out)]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except subprocess.TimeoutExpired:
            return {**_which(path), "status": "failed", "summary": f"no verdict within {timeout:g} s: does a loop in your code never end?"}
        if out.exists():
            return json.loads(out.read_text(encoding="utf-8"))
        return {**_which(path), "status": "failed", "summary": _crash_text(proc.returncode, proc.stderr)}


def _which(path: pathlib.Path) -> dict:
    """The exercise and function of a notebook, for a verdict its child process could not give."""
    try:
        exercise = identify(json.loads(path.read_text(encoding="utf-8")), path)
    except (OSError, ValueError):
        exercise = None
    return {"exercise": exercise.stem, "function": exercise.function} if exercise else {}


def resolve(names: Sequence[str], directory: pathlib.Path) -> list[pathlib.Path]:
    """Paths of the notebooks to grade: each name is a path, a stem (``ex02b_row_max``) or a
    prefix of one (``ex02b``); none means every exercise notebook in ``directory``."""
    if not names:
        return [directory / f"{stem}.ipynb" for stem in NOTEBOOKS]
    paths = []
    for name in names:
        path = pathlib.Path(name)
        if path.suffix == ".ipynb" or path.exists():
            paths.append(path)
            continue
        stems = [s for s in NOTEBOOKS if s == name or s.startswith(name)]
        if len(stems) != 1:
            raise ValueError(f"{name!r} is not a notebook path, nor the name of one exercise ({', '.join(NOTEBOOKS)})")
        paths.append(directory / f"{stems[0]}.ipynb")
    return paths


def _label(path: pathlib.Path, result: dict) -> str:
    return path.stem if result.get("exercise") in (None, path.stem) else f"{path.stem} ({result['exercise']})"


def grade(paths: Sequence[pathlib.Path], *, timeout: float = 600.0, out=None) -> int:
    """Grade each notebook, print one verdict per exercise, return the exit status."""
    out = out or sys.stdout
    counts = {"passed": 0, "failed": 0, "not attempted": 0, "error": 0}
    for path in paths:
        if not path.exists():
            result = {"status": "error", "summary": f"no such notebook: {path}"}
        else:
            result = grade_in_child(path, timeout=timeout)
        status = result["status"]
        counts[status] += 1
        function = f" {result['function']}:" if result.get("function") else ""
        word = {"passed": "passed", "failed": "FAILED", "not attempted": "not attempted", "error": "ERROR"}[status]
        print(f"{_label(path, result)}{function} {word} — {result['summary']}", file=out)
        for case, detail in result.get("failures", []):
            print(f"    ✘ {case}: {detail}", file=out)
        for case, picture in result.get("pictures", []):  # under the list, each with its case
            print(f"\n    {case}:", file=out)
            for line in picture.splitlines():
                print(f"      {line}", file=out)
        if result.get("pictures"):
            print(file=out)
    parts = [f"{n} {status}" for status, n in counts.items() if n]
    print(f"\n{len(paths)} exercise notebook(s): " + ", ".join(parts), file=out)
    return EXIT_PASSED if counts["passed"] == len(paths) and paths else EXIT_FAILED


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_grade_one"]:  # the child: grade one notebook, write the verdict as JSON
        _, path, result = argv
        pathlib.Path(result).write_text(json.dumps(grade_one(pathlib.Path(path))), encoding="utf-8")
        return EXIT_PASSED
    parser = argparse.ArgumentParser(
        prog="python -m tritonforge.exercise",
        description="Grade your exercise notebooks: run each exercise's check on the code in its cell marked 'your code'.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    grade_parser = commands.add_parser("grade", help="grade exercise notebooks (default: all of them)")
    grade_parser.add_argument("notebooks", nargs="*", help="notebook paths, or exercise names such as ex02b_row_max or ex02b")
    grade_parser.add_argument("--dir", default="exercises", help="where the exercise notebooks are (default: exercises)")
    grade_parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per notebook (default: 600)")
    args = parser.parse_args(argv)
    try:
        paths = resolve(args.notebooks, pathlib.Path(args.dir))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return grade(paths, timeout=args.timeout)
