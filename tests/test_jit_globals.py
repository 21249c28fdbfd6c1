"""Every ``@triton.jit`` function reads only the globals a compiled kernel may read.

The interpreter runs a kernel as Python, so it reads any module global; the compiler accepts only
``tl.constexpr`` values, modules, functions and classes (Triton 3.6: "Cannot access global
variable X from within @jit'ed function"). A planted mistake of exercise 7 compared ``KIND`` with
a plain ``int`` global: every CPU test passed and all of them failed on the H200. This test finds
such reads without a GPU, by walking each jit function's source."""

import ast
import importlib
import inspect
import pkgutil
import textwrap
import types
from pathlib import Path

import pytest

import tritonforge
from tritonforge._triton import HAVE_TRITON, tl

ROOT = Path(__file__).resolve().parents[1]


def _modules():
    names = [m.name for m in pkgutil.walk_packages(tritonforge.__path__, "tritonforge.") if not m.name.endswith("__main__")]
    names += [f"tests.exercise.{p.stem}" for p in sorted((ROOT / "tests" / "exercise").glob("test_ch*.py"))]
    names += [f"tests.{p.stem}" for p in sorted((ROOT / "tests").glob("test_*.py")) if p.stem != "test_jit_globals"]
    names += [f"tests.ops.{p.stem}" for p in sorted((ROOT / "tests" / "ops").glob("test_*.py"))]
    return names


def _jit_functions(module):
    for value in vars(module).values():
        fn = getattr(value, "fn", None)
        if isinstance(fn, types.FunctionType) and fn.__module__ == module.__name__ and hasattr(value, "arg_names"):
            yield fn


def _allowed(value) -> bool:
    return isinstance(value, (tl.constexpr, types.ModuleType)) or callable(value)  # functions, classes, jit functions


def _bad_globals(fn) -> list[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    local = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    local |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
            if node.id in fn.__globals__ and not _allowed(fn.__globals__[node.id]):
                bad.append(f"{fn.__module__}.{fn.__name__} reads {node.id} = {fn.__globals__[node.id]!r}")
    return bad


@pytest.mark.skipif(not HAVE_TRITON, reason="Triton is not installed")
def test_jit_functions_read_only_constexpr_globals():
    found, bad = 0, []
    for name in _modules():
        module = importlib.import_module(name)
        for fn in _jit_functions(module):
            found += 1
            bad += _bad_globals(fn)
    assert found > 50, f"found only {found} jit functions: the walk is broken"
    assert not bad, "a compiled kernel may read only tl.constexpr globals:\n" + "\n".join(bad)


_PLANTED_KIND = 3
_PLANTED_CONSTEXPR = tl.constexpr(3)


def _planted(x):  # the mistake: a plain int global
    return x == _PLANTED_KIND


def _planted_fixed(x):
    return x == _PLANTED_CONSTEXPR


def test_the_check_catches_a_plain_int_global():
    assert _bad_globals(_planted) == [f"{__name__}._planted reads _PLANTED_KIND = 3"]
    assert _bad_globals(_planted_fixed) == []
