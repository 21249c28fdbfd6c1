"""Shared test helpers: the error budget of STYLE.md rule 8; notebook kernels over Unix sockets."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
import uuid

import torch


def max_rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| / max(|ref|), in float64. NaN anywhere in ``out`` gives NaN (fails budgets)."""
    diff = (out.double() - ref.double()).abs().max().item()
    scale = ref.double().abs().max().item()
    return diff / max(scale, 1e-30)


def assert_within_budget(out: torch.Tensor, ref: torch.Tensor, baseline: torch.Tensor, *, factor: float = 2.0, floor: float | None = None) -> None:
    """The kernel's error against the float64 ``ref`` may be at most ``factor`` times the error that
    PyTorch's own computation in the input dtype (``baseline``) makes, plus ``floor``.

    This scales with dtype automatically: fp32 kernels get an fp32-sized budget, bf16 a bf16 one.
    The default ``floor`` is one rounding of the output dtype (``finfo.eps``): on a tiny tensor
    PyTorch's own error can be zero by luck, and no kernel can beat one rounding.
    """
    if floor is None:
        floor = torch.finfo(out.dtype).eps
    assert out.shape == ref.shape, f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert not torch.isnan(out).any(), "output has NaN (an element the kernel never wrote?)"
    err = max_rel_error(out, ref)
    base = max_rel_error(baseline, ref)
    budget = factor * base + floor
    assert err <= budget, f"relative error {err:.3e} exceeds budget {budget:.3e} (PyTorch's own: {base:.3e})"


# ---- shared by the op test modules (tests/ops/test_swiglu.py, test_softmax.py) ----------------


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"`` (test ids and messages)."""
    return str(dtype).replace("torch.", "")


def nan_empty(*shape, dtype, device) -> torch.Tensor:
    """A stand-in for ``torch.empty`` in a launcher: the buffer starts as NaN, so an element a
    kernel forgets to write fails the test (monkeypatch it over the module's ``_empty``)."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def skip_unsupported(dtype: torch.dtype, device: str) -> None:
    """Skip (with the reason) a bf16 case on a GPU the package runs no bf16 kernel on."""
    import pytest

    from tritonforge import hardware

    if dtype == torch.bfloat16 and not hardware.supports_bf16(torch.device(device)):
        pytest.skip("bfloat16 kernels need compute capability >= 8.0")


def budget(out: torch.Tensor, oracle: torch.Tensor, lowp: torch.Tensor, what: str, *, roundings: int = 1) -> None:
    """:func:`assert_within_budget`, labelled with what is compared; float64 outputs get a floor of
    a few roundings (PyTorch's own float64 computation *is* the oracle there: its error is 0).
    ``roundings``: the floor in units of the output's eps where a kernel provably rounds more than
    once where PyTorch rounds once (e.g. a GPU's ``tl.exp``, ``ex2.approx.f32`` of ``x·log2 e``)."""
    floor = 32 * torch.finfo(torch.float64).eps if out.dtype == torch.float64 else roundings * torch.finfo(out.dtype).eps
    try:
        assert_within_budget(out, oracle, lowp, floor=floor)
    except AssertionError as exc:
        raise AssertionError(f"{what} ({dtype_name(out.dtype)}): {exc}") from None


def front_op(dtype: torch.dtype = torch.float32) -> str:
    """The op that serves a model's MLP front in ``dtype``: the fused GEMM kernel
    (``swiglu_mlp_front``) where it runs, else cuBLAS then the elementwise ``swiglu`` (float32 on a GPU)."""
    from tritonforge.ops.swiglu_front import front_is_fused

    return "swiglu_mlp_front" if front_is_fused(dtype) else "swiglu"


@functools.cache
def unix_socket_kernels(manager_class: type) -> type:
    """``manager_class`` (a jupyter_client kernel manager) whose kernels talk over Unix sockets
    (the ``ipc`` transport), each at a path of its own, instead of TCP ports. Over TCP,
    jupyter_client picks a kernel's five ports by binding port 0 and closing the socket, and the
    kernel binds them a moment later: two pytest-xdist workers (or the simulated-T4 runs beside
    them) starting kernels at once can take each other's ports, and the kernel dies before it
    replies (``ZMQError: Address already in use``; a clean CI run lost the simulated-T4 run of
    ex04c to "Kernel died before replying to kernel_info"). A path cannot be taken that way."""
    from traitlets import CaselessStrEnum, default

    sockets = tempfile.mkdtemp(prefix="tritonforge-kernels-")
    atexit.register(shutil.rmtree, sockets, ignore_errors=True)

    class UnixSocketKernelManager(manager_class):
        transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc")

        @default("ip")
        def _own_socket_path(self):
            return os.path.join(sockets, uuid.uuid4().hex[:12])

    return UnixSocketKernelManager
