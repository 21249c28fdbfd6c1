"""Every chapter and exercise notebook, run as on a Colab T4 (sm_75): the GPU the book recommends.

``TRITONFORGE_SIMULATE_DEVICE=t4`` makes tritonforge report and decide as on a T4 (capability 7.5,
no bf16, float16 by default, 64 KB of shared memory per block, the T4's datasheet; routing refuses
bf16, and a kernel launched by hand with a bf16 tensor raises: a real T4 would compile and run it,
emulating bf16, but the book runs no bf16 kernel below sm_80, see ``hardware.supports_bf16``)
while tensors stay on the CPU and kernels run in the interpreter. Under it a chapter's benchmark
cells take their live branch, served by a simulated quick run with a T4's rows and keys (float16
only). So a cell that reads a bfloat16 result, labels a T4's numbers with the H200's datasheet or
launches a bf16 kernel fails here, on a machine without a GPU, before a reader meets it in Colab.

The notebooks run through nbval in a child process per chapter (the same options as the plain test run:
``--nbval-lax``, a cell timeout, strict routing inherited from ``conftest.py``). Measured on a
2-core machine: 165 s for all of them in one process (2026-12-03); one test per chapter, so
pytest-xdist spreads them over the cores.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb")) + sorted((ROOT / "exercises").glob("*.ipynb"))


def _part(notebook: pathlib.Path) -> str:
    """The chapter a notebook belongs to: ``chapters/07_*`` and ``exercises/ex07*`` are part "07";
    the appendices are a part of their own."""
    match = re.match(r"(?:ex)?(\d\d)", notebook.name)
    return match.group(1) if match else "appendix"


def _cells(notebook: pathlib.Path) -> int:
    """The code cells nbval runs as tests (every code cell of a notebook without outputs)."""
    return sum(cell["cell_type"] == "code" for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"])


def _ipython_dir(root: pathlib.Path) -> pathlib.Path:
    """An IPython directory whose startup script installs the simulation's guard on hand launches
    when a notebook's kernel starts (the package never patches anything when it is imported), so
    that a cell launching a kernel with a bf16 tensor before anything consults the simulation
    fails as on a T4 too."""
    startup = root / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-tritonforge-simulation.py").write_text("from tritonforge import simulation\n\nsimulation.install_launch_guard()\n")
    return root / "ipython"


PARTS = {part: [nb for nb in NOTEBOOKS if _part(nb) == part] for part in sorted({_part(nb) for nb in NOTEBOOKS})}


def test_there_are_notebooks_to_simulate():
    assert len(NOTEBOOKS) >= 10, NOTEBOOKS
    assert sorted(nb for part in PARTS.values() for nb in part) == sorted(NOTEBOOKS)  # every notebook in exactly one part


@pytest.mark.slow
@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="a CPU machine's check: a GPU machine runs the notebooks for real, and its Triton 3.6 "
    "interpreter cannot loop over runtime scalars with numpy >= 2.4",
)
@pytest.mark.parametrize("part", sorted(PARTS))
def test_every_notebook_runs_as_on_a_t4(part, tmp_path):
    """One chapter's notebooks (the chapter and its exercises) per test, so that the parts run on
    separate cores under pytest-xdist."""
    pytest.importorskip("nbval", reason="nbval runs the notebooks (requirements.txt; the lowest-Triton venv has no notebooks)")
    env = dict(os.environ)
    env.update(
        IPYTHONDIR=str(_ipython_dir(tmp_path)),
        TRITONFORGE_SIMULATE_DEVICE="t4",
        TRITON_INTERPRET="1",  # tensors stay on the CPU even on a machine with a GPU
        CUDA_VISIBLE_DEVICES="",
        TRITONFORGE_STRICT="1",
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-cell-timeout=600",
         "--nbval-current-env", "-o", "addopts=", *[str(p.relative_to(ROOT)) for p in PARTS[part]]],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, (
        "a notebook fails as on a Colab T4 (TRITONFORGE_SIMULATE_DEVICE=t4):\n" + result.stdout[-12000:] + result.stderr[-3000:]
    )
    assert f"{sum(_cells(nb) for nb in PARTS[part])} passed" in result.stdout, result.stdout[-3000:]  # every cell of every notebook ran
