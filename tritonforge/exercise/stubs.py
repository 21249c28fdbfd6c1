r"""The stub of every exercise as shipped, read from its notebook: the cell tagged
``exercise-stub`` of ``exercises/<notebook>.ipynb`` as committed. No copy of a stub is kept in the
package.

Most stubs are an empty function (``pass``, ``...``, a docstring or ``raise NotImplementedError``);
chapter 7's hand over a working FlashAttention-2 forward with the exercise's parts marked
``# ---- TODO ...`` / ``# ---- end of TODO ----``, a ``pass`` in each. :func:`is_untouched` knows
both shapes: it says whether the learner has written anything yet, from the cell alone.

:func:`shipped_stub` is what the tests prove a check fails on. A learner may solve an exercise in
place, in the notebook itself, and ``pytest`` must stay green: so the stub is the notebook's stub
cell while that is untouched, and otherwise the newest committed version of the notebook whose
stub cell is (git's history of the file).
"""

from __future__ import annotations

import ast
import functools
import itertools
import json
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Optional

STUB_TAG = "exercise-stub"
CHECK_TAG = "exercise-check"

EXERCISES_DIR = pathlib.Path(__file__).resolve().parents[2] / "exercises"
"""The exercise notebooks of the checkout the package was imported from."""

TODO_START = "# ---- TODO"
TODO_END = "# ---- end of TODO ----"


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def source(cell: dict) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def tagged_cells(notebook: dict, tag: str) -> list[int]:
    """The indices of the notebook's cells tagged ``tag``."""
    return [i for i, cell in enumerate(notebook.get("cells", [])) if tag in tags(cell)]


def stub_cell(notebook: dict) -> int:
    """The index of the stub cell; ``ValueError`` unless there is exactly one."""
    found = tagged_cells(notebook, STUB_TAG)
    if len(found) != 1:
        raise ValueError(f"expected one cell tagged {STUB_TAG!r} (the cell marked 'your code'), found {len(found)}")
    return found[0]


def without_magics(text: str) -> str:
    """IPython's ``%magic`` and ``!shell`` lines become ``pass  # %magic``: the code runs as a
    plain module (and an ``if`` around a magic keeps its body)."""

    def plain(line: str) -> str:
        body = line.lstrip()
        return f"{line[: len(line) - len(body)]}pass  # {body}" if body.startswith(("%", "!")) else line

    return "\n".join(plain(line) for line in text.splitlines())


def _is_placeholder(stmt: ast.stmt) -> bool:
    """``pass``, a docstring, ``...`` or ``raise NotImplementedError(...)``."""
    if isinstance(stmt, ast.Pass):
        return True
    constant = stmt.value.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) else None
    if isinstance(constant, str) or constant is Ellipsis:
        return True
    if isinstance(stmt, ast.Raise) and stmt.exc is not None:
        exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def _last_line(definition: ast.FunctionDef, lines: list[str]) -> int:
    """The function's last line, the comments after its last statement included (the syntax tree
    ends at the statement: a ``TODO`` part that closes the function ends in a comment after it)."""
    indent = len(lines[definition.lineno - 1]) - len(lines[definition.lineno - 1].lstrip())
    last = definition.end_lineno
    for number in range(definition.end_lineno + 1, len(lines) + 1):
        text = lines[number - 1]
        if not text.strip():
            continue
        if not text.lstrip().startswith("#") or len(text) - len(text.lstrip()) <= indent:
            break
        last = number
    return last


def _todo_parts_untouched(definition: ast.FunctionDef, lines: list[str]) -> bool:
    """True if the function holds at least one ``TODO`` part and every statement in every part is
    still ``pass`` (comments, blank lines and layout aside)."""
    parts, start = [], None
    for number in range(definition.lineno, _last_line(definition, lines) + 1):
        text = lines[number - 1].strip()
        opens, closes = text.startswith(TODO_START), text.startswith(TODO_END)
        if not (opens or closes):
            continue
        if opens == (start is not None):
            return False  # a part opened inside another, or closed outside one: the markers were edited
        if opens:
            start = number
        else:
            parts.append((start, number))
            start = None
    if not parts or start is not None:
        return False
    statements = [node for node in ast.walk(definition) if isinstance(node, ast.stmt) and node is not definition]
    return all(isinstance(s, ast.Pass) for s in statements if any(first < s.lineno < last for first, last in parts))


def is_untouched(stub: str, function: str) -> bool:
    """True if ``function`` in ``stub`` (a stub cell's source) is still as shipped: its body only a
    docstring, ``pass``, ``...``, comments or ``raise NotImplementedError(...)``; or, for a stub
    that hands over a working kernel with parts left to write (chapter 7's), every ``TODO`` part
    still ``pass``."""
    code = without_magics(stub)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    if not defs:
        return False
    definition = defs[-1]
    if all(_is_placeholder(stmt) for stmt in definition.body):
        return True
    return _todo_parts_untouched(definition, code.splitlines())


def _git(directory: pathlib.Path, *args: str) -> Optional[str]:
    try:
        proc = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _committed_versions(path: pathlib.Path) -> Iterator[str]:
    """The notebook as each commit that touched it left it, newest first (nothing outside git)."""
    log = _git(path.parent, "log", "--format=%H", "--", path.name)
    for commit in (log or "").split():
        text = _git(path.parent, "show", f"{commit}:./{path.name}")
        if text is not None:
            yield text


def _stub_of(text: str) -> Optional[str]:
    try:
        notebook = json.loads(text)
        return source(notebook["cells"][stub_cell(notebook)])
    except (ValueError, KeyError, IndexError):
        return None


@functools.cache
def shipped_stub(notebook: str, function: str, directory: pathlib.Path = EXERCISES_DIR) -> str:
    """The stub cell of ``directory/<notebook>.ipynb`` as shipped: the cell in the working tree
    while ``function`` there is untouched (:func:`is_untouched`), else the newest committed
    version of the notebook in which it is. ``LookupError`` if there is none (a notebook solved
    in place, outside a git checkout)."""
    path = pathlib.Path(directory) / f"{notebook}.ipynb"
    for text in itertools.chain([path.read_text(encoding="utf-8")], _committed_versions(path)):  # git only if needed
        stub = _stub_of(text)
        if stub is not None and is_untouched(stub, function):
            return stub
    raise LookupError(
        f"no stub as shipped for {notebook}: {function} in the cell tagged {STUB_TAG!r} of {path} has been written, "
        "and no committed version of the notebook holds it untouched (is this a git checkout?)"
    )
