r"""Grade the learner's own exercise notebooks: ``python -m tritonforge.exercise grade [NOTEBOOK ...]``.

For each notebook (default: every exercise notebook in ``exercises/``) the grader takes the
code the learner wrote — the cell tagged ``exercise-stub``, after the notebook's setup cells
(the code cells above it, less the Colab install cell) — imports it from a file, and runs the
exercise's check on the function it defines, guarded like the notebook's check cell. It prints,
per exercise, ``passed``, ``not attempted`` (the function's body is still the stub's: only
``pass``, ``...``, a docstring or ``raise NotImplementedError``; in a stub that hands over a
kernel, every ``TODO`` part still ``pass``), or ``FAILED`` with each failing
case and the check's own verdict, and the pictures of the output that the check draws for its
first failed cases (:meth:`Report.pictured <tritonforge.exercise.core.Report.pictured>`). The exit
status is 0 only if every graded exercise passed.

Each notebook is graded in a child process, so a kernel that crashes the interpreter (an
unmasked access far outside every buffer can) fails that exercise with a message instead of
ending the grading.

:data:`NOTEBOOKS` maps each notebook's stem to its row of the registry
(:class:`~tritonforge.exercise.registry.Exercise`: the function the learner writes, its check);
the notebook is read with :mod:`tritonforge.exercise.stubs`, which also says whether the stub is
untouched.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Optional

from tritonforge.exercise.core import describe_exception
from tritonforge.exercise.registry import NOTEBOOKS, Exercise
from tritonforge.exercise.stubs import CHECK_TAG, STUB_TAG, is_untouched, source, stub_cell, tags, without_magics

SKIPPED_TAGS = ("colab-install",)

EXIT_PASSED, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

__all__ = ["CHECK_TAG", "NOTEBOOKS", "STUB_TAG", "grade", "grade_one", "identify", "is_untouched", "learner_code", "main", "resolve"]


# ----------------------------------------------------------------------------------------------
# Reading a notebook
# ----------------------------------------------------------------------------------------------


def identify(notebook: dict, path: pathlib.Path) -> Optional[Exercise]:
    """The exercise a notebook holds: by the check its check cell calls (a renamed copy is still
    recognized), else by its file name."""
    for cell in notebook.get("cells", []):
        if CHECK_TAG in tags(cell):
            match = re.search(r"exercise\.(check_\w+)\(", source(cell))
            if match:
                for exercise in NOTEBOOKS.values():
                    if exercise.check.__name__ == match.group(1):
                        return exercise
    return NOTEBOOKS.get(path.stem)


def learner_code(notebook: dict) -> tuple[str, str]:
    """``(setup, stub)``: the code cells above the stub cell (less the Colab install cell), and
    the stub cell as the learner left it. Raises ``ValueError`` if there is not exactly one."""
    cells = notebook.get("cells", [])
    at = stub_cell(notebook)
    setup = [without_magics(source(c)) for c in cells[:at] if c.get("cell_type") == "code" and not any(t in tags(c) for t in SKIPPED_TAGS)]
    return "\n\n".join(setup), source(cells[at])


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
    result = {"exercise": exercise.notebook, "function": exercise.function}
    try:
        setup, stub = learner_code(notebook)
    except ValueError as exc:
        return {**result, "status": "error", "summary": str(exc)}
    if is_untouched(stub, exercise.function):
        return {**result, "status": "not attempted", "summary": "the function is still the stub as shipped: write it in the cell marked 'your code'"}
    with tempfile.TemporaryDirectory(prefix="tritonforge-grade-") as tmp:
        try:
            fn = load_function(setup, stub, exercise.function, pathlib.Path(tmp), f"learner_{exercise.notebook}")
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
    return {"exercise": exercise.notebook, "function": exercise.function} if exercise else {}


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
