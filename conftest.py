"""Test-wide settings (unit tests and nbval notebooks): strict routing, fresh routing state,
the gpu marker, the slow marker on nbval's notebook cells, and nbval's kernels over Unix sockets.
The environment variable is inherited by the notebook kernels nbval starts."""

import os

# Strict before anything routes: a fallback in a test is a failure, not a quiet pass.
os.environ.setdefault("TRITONFORGE_STRICT", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import tritonforge  # noqa: E402,F401  (first, so the interpreter flag precedes import triton)
from tritonforge import launches, runtime  # noqa: E402


def _notebook_kernels_over_unix_sockets() -> None:
    """nbval's notebook kernels talk to pytest over Unix sockets (:func:`tests.helpers.unix_socket_kernels`)."""
    try:
        import nbval.kernel
    except ImportError:  # the lowest-Triton venv has no notebooks
        return
    from tests.helpers import unix_socket_kernels

    nbval.kernel.KernelManager = unix_socket_kernels(nbval.kernel.KernelManager)


_notebook_kernels_over_unix_sockets()


@pytest.fixture(autouse=True)
def _fresh_routing_state():
    runtime.reset_routing_state()
    launches.forget()
    yield
    runtime.reset_routing_state()
    launches.forget()


@pytest.fixture(params=["cooperative launch", "ordinary launch"])
def coop_launch(request, monkeypatch):
    """Each way the cooperative rows launch (``tritonforge.ops.gpu.coop.COOPERATIVE_LAUNCH``): a GPU
    test of the cooperative kernels runs under both."""
    from tritonforge.ops.gpu import coop

    monkeypatch.setattr(coop, "COOPERATIVE_LAUNCH", request.param == "cooperative launch")
    launches.forget()
    yield request.param
    launches.forget()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.suffix == ".ipynb":  # an nbval cell (pytest-xdist's --dist loadfile keeps a notebook's cells on one worker)
            item.add_marker(pytest.mark.slow)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run scripts/gpu_check.sh on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> str:
    """Where Triton kernels run here: cuda on a GPU machine, cpu (interpreter) otherwise."""
    return "cuda" if torch.cuda.is_available() else "cpu"
