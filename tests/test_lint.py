"""The code passes ``ruff check`` (configuration: ``[tool.ruff]`` in pyproject.toml).

Covers the package, the tests, the scripts and benchmarks, the notebooks (ruff reads their code
cells) and the book's Sphinx extension. ``ruff format`` is not enforced: the code keeps its
hand-aligned continuation lines (see the ``# fmt: skip`` markers), which the formatter would
rewrite across some 30 files.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.version_free  # ruff over the source: the same on any Triton (the lowest-Triton pass of .ci/run leaves it out)

ROOT = Path(__file__).resolve().parent.parent
PATHS = ["tritonforge", "tests", "scripts", "benchmarks", "chapters", "exercises", "conftest.py", "_ext"]


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed (pip install -r requirements.txt)")
def test_ruff_check_is_clean():
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "full", *PATHS],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"ruff check found problems (fix them, or `ruff check --fix` the safe ones):\n{proc.stdout}{proc.stderr}"
