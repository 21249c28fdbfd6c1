"""RMSNorm: kernels against the float64 reference, with an error budget (STYLE.md 8-11).

Every kernel output buffer is poisoned with NaN before the kernel runs (the autouse fixture
below replaces the launchers' allocator), so an element a kernel forgets to write fails a test.
CPU sizes stay small: the interpreter costs about a millisecond per row.
"""

from __future__ import annotations

import math

import pytest
import torch

from tritonforge import hardware, runtime
from tritonforge.ops import rmsnorm as rms_norm_module
from tritonforge.ops import rmsnorm_backward as rms_norm_backward_module
from tritonforge.ops.gpu import rmsnorm as gpu_rmsnorm
from tritonforge.ops.rmsnorm import rms_norm, rms_norm_fwd
from tritonforge.ops.rmsnorm_backward import rms_norm_bwd
from tritonforge.reference import rms_norm_ref

from ..helpers import assert_within_budget


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _poison_outputs(monkeypatch):
    """Allocate every buffer the kernels must overwrite filled with NaN."""

    def nan_empty(*shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(rms_norm_module, "_empty", nan_empty)
    monkeypatch.setattr(rms_norm_backward_module, "_empty", nan_empty)


def _skip_unsupported(dtype: torch.dtype, device: str) -> None:
    if dtype == torch.bfloat16 and not hardware.supports_bf16(torch.device(device)):
        pytest.skip("bfloat16 kernels need compute capability >= 8.0")


def _assert_kernel_ran() -> None:
    assert runtime.last_path("rms_norm") in ("interpreter", "triton")


def _inputs(shape, dtype, device, *, requires_grad=False):
    """Fresh random x and a non-trivial weight (around 1, never all ones)."""
    x = torch.randn(shape, dtype=dtype, device=device)
    weight = (1.0 + 0.5 * torch.randn(shape[-1], device=device)).to(dtype)
    return x.requires_grad_(requires_grad), weight.requires_grad_(requires_grad)


def _assert_within_budget(actual, oracle, torch_lowp, *, what="output"):
    """The shared error budget (``tests/helpers.py``), labelled with what is compared.

    ``oracle`` is float64 and ``torch_lowp`` is PyTorch's own computation in the kernel's dtype.
    For float64 inputs PyTorch's computation *is* the oracle (error 0), so the floor there allows
    a few roundings of a different summation order.
    """
    floor = 32 * torch.finfo(torch.float64).eps if actual.dtype == torch.float64 else None
    try:
        assert_within_budget(actual, oracle, torch_lowp, floor=floor)
    except AssertionError as exc:
        raise AssertionError(f"{what} ({str(actual.dtype).replace('torch.', '')}): {exc}") from None


def _check_forward(x, weight, eps=1e-6):
    y = rms_norm(x, weight, eps)
    _assert_kernel_ran()
    assert y.dtype == x.dtype and y.shape == x.shape and y.is_contiguous()
    _assert_within_budget(y, rms_norm_ref(x, weight, eps, upcast=True), rms_norm_ref(x, weight, eps))
    return y


def _check_backward(x, weight, eps=1e-6, *, dy=None, need_dx=True, need_dw=True):
    """Kernel gradients against autograd of the float64 reference, budget from autograd of the
    reference in x's dtype."""
    if dy is None:
        dy = torch.randn(x.shape, dtype=x.dtype, device=x.device)
    grads = {}
    for name, fn, dtype in [
        ("kernel", lambda a, b: rms_norm(a, b, eps), x.dtype),
        ("oracle", lambda a, b: rms_norm_ref(a, b, eps, upcast=True), torch.float64),
        ("torch", lambda a, b: rms_norm_ref(a, b, eps), x.dtype),
    ]:
        a = x.detach().to(dtype).requires_grad_(need_dx)
        b = weight.detach().to(dtype).requires_grad_(need_dw)
        fn(a, b).backward(dy.to(dtype))
        if name == "kernel":
            _assert_kernel_ran()
        grads[name] = (a.grad, b.grad)
    for i, what in [(0, "dx"), (1, "dweight")]:
        if (need_dx, need_dw)[i]:
            assert grads["kernel"][i].dtype == x.dtype
            _assert_within_budget(grads["kernel"][i], grads["oracle"][i], grads["torch"][i], what=what)
        else:
            assert grads["kernel"][i] is None


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


# ----------------------------------------------------------------------------------------------
# Forward
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("shape", [(1, 1), (1, 8), (3, 7), (37, 1000), (2, 5, 123), (77,)], ids=str)
def test_forward_matches_reference(shape, dtype, device):
    _skip_unsupported(dtype, device)
    x, weight = _inputs(shape, dtype, device)
    _check_forward(x, weight)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("shape", [(3, 65536), (2, 40000)], ids=str)
def test_forward_long_rows_loop_over_column_blocks(shape, dtype, device):
    _skip_unsupported(dtype, device)
    assert shape[-1] > rms_norm_module.row_config(shape[-1], dtype)[0]  # really the loop path
    x, weight = _inputs(shape, dtype, device)
    _check_forward(x, weight)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_forward_small_block_cap_many_column_blocks(dtype, device, monkeypatch):
    """A tiny block cap sends ordinary rows through the column loop (17 blocks, ragged tail)."""
    _skip_unsupported(dtype, device)
    monkeypatch.setattr(rms_norm_module, "MAX_BLOCK_N", 64)
    assert rms_norm_module.row_config(1000, dtype)[0] < 1000  # the patched cap reaches the cached config
    x, weight = _inputs((5, 1000), dtype, device)
    _check_forward(x, weight)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=lambda d: str(d).replace("torch.", ""))
def test_forward_measured_two_pass_exceptions(dtype, device, monkeypatch):
    """Rows of 4096 with many rows take two passes (16-bit: blocks of 2048; float32: the whole row
    as one block, re-read). MANY_ROWS lowered so that a few rows reach those paths here."""
    _skip_unsupported(dtype, device)
    monkeypatch.setattr(rms_norm_module, "MANY_ROWS", 2)
    block, _, one_pass = rms_norm_module.fwd_config(3, 4096, dtype)
    assert not one_pass and block == (2048 if dtype == torch.bfloat16 else 4096)
    x, weight = _inputs((3, 4096), dtype, device)
    _check_forward(x, weight)


def test_fwd_config_exceptions_apply_only_where_measured():
    cfg = rms_norm_module.fwd_config
    many = rms_norm_module.MANY_ROWS
    assert cfg(many, 4096, torch.bfloat16) == (2048, 8, False)
    assert cfg(many, 4096, torch.float16) == (2048, 8, False)
    assert cfg(many, 4096, torch.float32) == (4096, 16, False)
    assert cfg(many - 1, 4096, torch.bfloat16)[2] and cfg(1, 4096, torch.float32)[2]  # decode: one pass
    for n, dtype in ((8192, torch.bfloat16), (2048, torch.float32), (4096, torch.float64), (512, torch.float16),
                     (3000, torch.bfloat16), (4095, torch.float32)):
        block, warps = rms_norm_module.row_config(n, dtype)
        assert cfg(many, n, dtype) == (block, warps, n <= block)


def test_forward_row_strided_view_is_read_in_place(device):
    big = torch.randn(17, 300, device=device)
    x = big[:, :257]  # row stride 300 != N
    weight = _inputs((257,), torch.float32, device)[1]
    rows = rms_norm_module.as_rows(x, 257)
    assert rows.data_ptr() == x.data_ptr() and rows.stride() == (300, 1)  # no copy
    _check_forward(x, weight)


def test_forward_3d_strided_views(device):
    big = torch.randn(4, 5, 40, device=device)
    weight = _inputs((33,), torch.float32, device)[1]
    mergeable = big[:, :, :33]  # leading dims flatten to one row stride: read in place
    assert rms_norm_module.as_rows(mergeable, 33).data_ptr() == mergeable.data_ptr()
    _check_forward(mergeable, weight)
    _check_forward(big[:, 1:4, :33], weight)  # leading dims don't flatten: copied, still right


def test_forward_last_dim_strided(device):
    base = torch.randn(6, 20, device=device)
    weight = _inputs((10,), torch.float32, device)[1]
    _check_forward(base[:, ::2], weight)  # column stride 2: copied first
    _check_forward(base[:, ::20], weight[:1])  # N = 1 with column stride 20: read in place


def test_forward_transposed_view(device):
    x = torch.randn(64, 20, device=device).t()  # [20, 64], last-dim stride 20: copied first
    weight = _inputs((64,), torch.float32, device)[1]
    _check_forward(x, weight)


def test_forward_expanded_rows(device):
    x = torch.randn(1, 48, device=device).expand(6, 48)  # row stride 0
    weight = _inputs((48,), torch.float32, device)[1]
    y = _check_forward(x, weight)
    assert torch.equal(y[0], y[5])


@pytest.mark.parametrize("eps", [0.0, 1e-5, 0.5], ids=str)
def test_forward_eps(eps, device):
    x, weight = _inputs((4, 96), torch.float32, device)
    _check_forward(x * 0.05, weight, eps)  # small x: eps = 0.5 changes the result a lot


def test_forward_launcher_returns_rstd(device):
    x, weight = _inputs((9, 130), torch.float32, device)
    y, rstd = rms_norm_fwd(x, weight, 1e-6)
    expected = torch.rsqrt(x.double().pow(2).mean(-1) + 1e-6)
    assert rstd.dtype == torch.float32 and rstd.shape == (9,)
    torch.testing.assert_close(rstd.double(), expected, rtol=1e-6, atol=0)
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("shape", [(9, 130), (3, 5000)], ids=str)
def test_inference_forward_skips_rstd_and_computes_the_same_y(shape, device, monkeypatch):
    """No gradient wanted: no rstd is allocated or stored, and y is bit-identical to the
    rstd-saving launch (both row paths: 5000 > the patched block of 64 takes the loop)."""
    monkeypatch.setattr(rms_norm_module, "MAX_BLOCK_N", 64 if shape[1] > 1000 else rms_norm_module.MAX_BLOCK_N)
    assert (shape[1] > rms_norm_module.row_config(shape[1], torch.float32)[0]) == (shape[1] > 1000)
    x, weight = _inputs(shape, torch.float32, device)
    y_inference, rstd = rms_norm_fwd(x, weight, 1e-6, save_rstd=False)
    y_training, _ = rms_norm_fwd(x, weight, 1e-6)
    assert rstd is None
    assert torch.equal(y_inference, y_training)  # outputs were NaN-poisoned: every element written
    assert torch.equal(rms_norm(x, weight, 1e-6), y_inference)  # the public call takes this path


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=lambda d: str(d).replace("torch.", ""))
def test_hugging_face_casting(dtype, device):
    """The kernel follows HF LlamaRMSNorm: normalize in float32, round to x.dtype, then scale.

    With the same rounding steps the kernel agrees with the reference bit for bit on almost every
    element (only a different summation order in rstd can flip a rounding). This also catches the
    interpreter's truncating float32 -> bfloat16 cast, which would disagree on about half.
    """
    _skip_unsupported(dtype, device)
    x, weight = _inputs((16, 256), dtype, device)
    h = x.to(torch.float32)
    hf = weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype)
    assert torch.equal(rms_norm_ref(x, weight, 1e-6), hf)
    y = rms_norm(x, weight, 1e-6)
    _assert_kernel_ran()
    assert (y == hf).float().mean().item() >= 0.99


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # numpy, in the interpreter
def test_nan_and_inf_propagate_like_the_reference(device):
    x, weight = _inputs((4, 50), torch.float32, device)
    x[0, 7] = float("nan")
    x[1, 3] = float("inf")
    x[2, 9] = -float("inf")
    y = rms_norm(x, weight)
    _assert_kernel_ran()
    torch.testing.assert_close(y, rms_norm_ref(x, weight), equal_nan=True)
    assert torch.isnan(y[0]).all()
    assert torch.isfinite(y[3]).all()


# ----------------------------------------------------------------------------------------------
# Backward
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (37, 1000), (2, 5, 33), (17, 20000)], ids=str)
def test_backward_matches_reference_fp32(shape, device):
    """(37, ...) and (17, ...) leave the last backward program fewer rows than the others;
    N = 20000 runs the column loop of the backward (block cap 8192 there)."""
    x, weight = _inputs(shape, torch.float32, device)
    _check_backward(x, weight)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=lambda d: str(d).replace("torch.", ""))
def test_backward_matches_reference_other_dtypes(dtype, device):
    _skip_unsupported(dtype, device)
    x, weight = _inputs((19, 300), dtype, device)
    _check_backward(x, weight)


@pytest.mark.parametrize("shape", [(11, 200), (3, 64)], ids=str)
def test_backward_small_block_cap(shape, device, monkeypatch):
    monkeypatch.setattr(rms_norm_module, "MAX_BLOCK_N", 64)  # backward block 32: loop path
    assert shape[1] > rms_norm_module.row_config(shape[1], torch.float32, backward=True)[0]
    x, weight = _inputs(shape, torch.float32, device)
    _check_backward(x, weight)


@pytest.mark.parametrize("need_dx,need_dw", [(True, False), (False, True)])
def test_backward_only_the_gradients_asked_for(need_dx, need_dw, device, monkeypatch):
    x, weight = _inputs((10, 70), torch.float32, device)
    _check_backward(x, weight, need_dx=need_dx, need_dw=need_dw)
    monkeypatch.setattr(rms_norm_module, "MAX_BLOCK_N", 32)
    assert 70 > rms_norm_module.row_config(70, torch.float32, backward=True)[0]  # now the column loop
    _check_backward(x, weight, need_dx=need_dx, need_dw=need_dw)


def test_backward_non_contiguous_dy(device):
    x, weight = _inputs((12, 40), torch.float32, device)
    _check_backward(x, weight, dy=torch.randn(40, 12, device=device).t())  # transposed dy
    _check_backward(x, weight, dy=torch.randn(1, 40, device=device).expand(12, 40))  # row stride 0


def test_backward_strided_x(device):
    big = torch.randn(9, 80, device=device)
    weight = _inputs((50,), torch.float32, device)[1]
    _check_backward(big[:, 10:60], weight)
    _check_backward(torch.randn(50, 9, device=device).t(), weight)


def test_backward_sum_of_outputs_gives_expanded_dy(device):
    x, weight = _inputs((6, 24), torch.float32, device, requires_grad=True)
    rms_norm(x, weight).sum().backward()  # dy is a stride-0 expanded tensor of ones
    _assert_kernel_ran()
    x64 = x.detach().double().requires_grad_()
    w64 = weight.detach().double().requires_grad_()
    rms_norm_ref(x64, w64, upcast=True).sum().backward()
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(weight.grad.double(), w64.grad, rtol=1e-5, atol=1e-6)


def test_backward_dweight_is_deterministic(device):
    x, weight = _inputs((29, 128), torch.float32, device)
    dy = torch.randn_like(x)
    results = []
    for _ in range(2):
        a, b = x.clone().requires_grad_(), weight.clone().requires_grad_()
        rms_norm(a, b).backward(dy)
        results.append((a.grad, b.grad))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


def test_poisoning_catches_unwritten_rows(device, monkeypatch):
    """The NaN fixture really works: a backward grid one program short leaves rows of dx unset."""
    x, weight = _inputs((16, 32), torch.float32, device)
    y, rstd = rms_norm_fwd(x, weight, 1e-6)
    programs, rows = rms_norm_backward_module.bwd_grid(16, x.device)
    monkeypatch.setattr(rms_norm_backward_module, "bwd_grid", lambda M, dev, per_sm=1: (programs - 1, rows))
    dx, _ = rms_norm_bwd(torch.randn_like(x), x, weight, rstd, compute_dweight=False)
    assert torch.isnan(dx[-rows:]).all() and not torch.isnan(dx[:-rows]).any()


def test_backward_route_is_recorded(device):
    x, weight = _inputs((5, 40), torch.float32, device, requires_grad=True)
    rms_norm(x, weight).sum().backward()
    assert runtime.last_path("rms_norm_backward") == runtime.last_path("rms_norm") in ("interpreter", "triton")


@pytest.mark.parametrize("shape", [(6, 37), (3, 5, 16), (1, 1)], ids=str)
def test_gradcheck_fp64_through_the_kernels(shape, device):
    x, weight = _inputs(shape, torch.float64, device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rms_norm(a, b), (x, weight), fast_mode=True)
    _assert_kernel_ran()


def test_gradcheck_fp64_column_loop(device, monkeypatch):
    monkeypatch.setattr(rms_norm_module, "MAX_BLOCK_N", 64)  # fp64: fwd block 32, bwd block 16
    assert rms_norm_module.row_config(75, torch.float64) == (32, 4)
    assert rms_norm_module.row_config(75, torch.float64, backward=True)[0] == 16
    x, weight = _inputs((5, 75), torch.float64, device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rms_norm(a, b, 1e-3), (x, weight), fast_mode=True)
    _assert_kernel_ran()


# ----------------------------------------------------------------------------------------------
# Heuristics, empty inputs, bad inputs
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("N", [1, 7, 1000, 4096, 8192, 16384, 65536, 131072])
def test_row_config(N):
    for dtype in DTYPES:
        for backward in (False, True):
            block, warps = rms_norm_module.row_config(N, dtype, backward=backward)
            assert block & (block - 1) == 0 and warps in (4, 8, 16)
            assert block <= rms_norm_module.MAX_BLOCK_N
            if N <= rms_norm_module.MAX_BLOCK_N // 4:  # every config keeps such rows in one block
                assert block >= N


@pytest.mark.parametrize("M", [1, 7, 8, 37, 1000])
def test_bwd_grid_covers_every_row_once(M, monkeypatch):
    programs, rows = rms_norm_backward_module.bwd_grid(M, torch.device("cpu"))
    assert programs * rows >= M > (programs - 1) * rows  # the last program has >= 1 row
    monkeypatch.setattr(hardware, "interpreting", lambda: False)  # the GPU sizing, any SM count
    monkeypatch.setattr(hardware, "sm_count", lambda index: 132)
    for per_sm in (1, 2, 3):
        programs, rows = rms_norm_backward_module.bwd_grid(M, torch.device("cuda", 0), per_sm)
        assert programs * rows >= M > (programs - 1) * rows and programs <= 132 * per_sm


def test_bwd_programs_per_sm_follows_the_measured_rule():
    """Two programs per SM for row blocks of 8 KB, three below, one from 16 KB on or unpipelined."""
    per_sm = rms_norm_backward_module.bwd_programs_per_sm
    assert [per_sm(kb * 1024, 3) for kb in (2, 4, 8, 12, 16, 32)] == [3, 3, 2, 2, 1, 1]
    assert per_sm(4096, 1) == 1


@pytest.mark.parametrize("shape", [(0, 8), (4, 0), (2, 0, 16)], ids=str)
def test_empty_input(shape, device):
    x, weight = _inputs(shape, torch.float32, device, requires_grad=True)
    y = rms_norm(x, weight)
    assert y.shape == x.shape and y.dtype == x.dtype
    y.sum().backward()
    assert x.grad.shape == x.shape and weight.grad.shape == weight.shape


def test_bad_inputs(device):
    x, weight = _inputs((4, 16), torch.float32, device)
    with pytest.raises(TypeError, match="x"):
        rms_norm([[1.0] * 16], weight)
    with pytest.raises(TypeError, match="x"):
        rms_norm(x.to(torch.int32), weight)
    with pytest.raises(TypeError, match="weight"):
        rms_norm(x, weight.to(torch.int64))
    with pytest.raises(TypeError, match="weight"):
        rms_norm(x, weight.to(torch.float64))  # dtypes must agree
    with pytest.raises(ValueError, match="x"):
        rms_norm(torch.tensor(1.0, device=device), weight[:1])  # 0-d x
    with pytest.raises(ValueError, match="weight"):
        rms_norm(x, weight[:15])  # wrong length
    with pytest.raises(ValueError, match="weight"):
        rms_norm(x, weight.reshape(4, 4))  # 2-D
    with pytest.raises(ValueError, match="weight"):
        rms_norm(x, torch.randn(16, device="meta"))  # another device
    with pytest.raises(ValueError, match="eps"):
        rms_norm(x, weight, -1e-6)
    with pytest.raises(ValueError, match="eps"):
        rms_norm(x, weight, math.nan)
    with pytest.raises(TypeError, match="eps"):
        rms_norm(x, weight, "1e-6")
    with pytest.raises(TypeError, match="eps"):
        rms_norm(x, weight, True)


# ----------------------------------------------------------------------------------------------
# GPU only (skipped without CUDA): large shapes
# ----------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape,dtype",
    [((4096, 8192), torch.bfloat16), ((32768, 4096), torch.float16), ((4096, 8192), torch.float32),
     ((1823, 781), torch.bfloat16), ((5, 123, 123), torch.float16), ((64, 65536), torch.bfloat16),
     ((16, 131072), torch.float32), ((3001, 4096), torch.float32), ((2048, 4096), torch.bfloat16),
     ((2048, 3000), torch.bfloat16), ((1000, 32768), torch.bfloat16), ((300, 30000), torch.float32),
     ((100, 16385), torch.float64)],
    ids=str,
)  # fmt: skip
def test_gpu_forward_large(shape, dtype):
    _skip_unsupported(dtype, "cuda")
    x, weight = _inputs(shape, dtype, "cuda")
    _check_forward(x, weight)
    assert runtime.last_path("rms_norm") == "triton"


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape,dtype",
    [((4096, 4096), torch.bfloat16), ((8192, 8192), torch.float32), ((1823, 781), torch.float16),
     ((64, 65536), torch.float32), ((16, 131072), torch.bfloat16), ((4096, 8192), torch.bfloat16),
     ((3001, 4096), torch.float32), ((5001, 2048), torch.bfloat16), ((2999, 2048), torch.float32)],
    ids=str,
)  # fmt: skip
def test_gpu_backward_large(shape, dtype):
    """Many rows per program: the software-pipelined row loop (rows up to 16 KB: bf16 8192,
    fp32 4096, fp16 781) with one, two (rows of 8 KB) or three (shorter rows) programs per SM,
    and the plain one (fp32 8192), uneven row counts included."""
    _skip_unsupported(dtype, "cuda")
    x, weight = _inputs(shape, dtype, "cuda")
    _check_backward(x, weight)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape,dtype",
    [((300, 40001), torch.bfloat16), ((150, 131075), torch.float32), ((64, 65536), torch.float16),
     ((40, 20000), torch.float64), ((72, 49152), torch.bfloat16)],  # the last: three whole chunks, unmasked
    ids=str,
)  # fmt: skip
def test_gpu_cooperative_rows(shape, dtype, coop_launch):
    """Rows longer than a block, held by several programs that meet at a per-row barrier (a row
    count of chunks that is not a power of two included), under either launch (a cooperative one
    loops each program over rows): y, the saved rstd and the gradients that use it, and a row
    strided inside a wider tensor."""
    _skip_unsupported(dtype, "cuda")
    x, weight = _inputs(shape, dtype, "cuda")
    assert rms_norm_module.fwd_coop_splits(*x.shape, dtype, x.device) > 1
    _check_forward(x, weight)
    y, rstd = rms_norm_fwd(x, weight, 1e-6)
    expected = torch.rsqrt(x.double().pow(2).mean(-1) + 1e-6)
    assert torch.allclose(rstd.double(), expected, rtol=8 * torch.finfo(rstd.dtype).eps, atol=0), "rstd"
    _check_forward(torch.randn(shape[0], shape[1] + 77, dtype=dtype, device="cuda")[:, : shape[1]], weight)
    _check_backward(x[:48], weight)


def test_cooperative_path_only_for_rows_past_a_block(monkeypatch):
    """The cooperative path holds rows no single program can: rows that fit one block keep their
    planned path, the measured two-pass exceptions of 4096-wide rows included (16-bit blocks of
    2048 once took a one-chunk "cooperative" program behind a barrier of one), and a row of one
    chunk is never cooperative (plans as on an H200: 132 SMs, compiled kernels)."""
    monkeypatch.setattr(hardware, "gpu_sm_count", lambda device: 132)
    monkeypatch.setattr(hardware, "interpreting", lambda: False)
    rms_norm_module._row_config_cached.cache_clear()
    try:
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for m in (1024, 2048, 16384):
                assert rms_norm_module.fwd_coop_splits(m, 4096, dtype, torch.device("cuda")) == 0, (m, dtype)
        assert rms_norm_module.fwd_coop_splits(4096, 65536, torch.bfloat16, torch.device("cuda")) > 1
    finally:
        rms_norm_module._row_config_cached.cache_clear()
    from tritonforge.ops.gpu.coop import coop_splits
    # masks dropped only where measured to pay: bf16 rows of whole chunks
    assert gpu_rmsnorm.unmasked(torch.bfloat16, 65536) and gpu_rmsnorm.unmasked(torch.bfloat16, 49152)
    assert not gpu_rmsnorm.unmasked(torch.bfloat16, 40001) and not gpu_rmsnorm.unmasked(torch.float32, 65536)

    assert coop_splits(4096, 8192, torch.bfloat16, 132) == 0  # one chunk
    assert coop_splits(4096, 8193, torch.bfloat16, 132) == 2


SIMULATED_DEVICES = {  # name: (compute capability, shared memory per block, opt-in, bytes)
    "T4": ((7, 5), 64 * 1024),
    "A10/L4": ((8, 6), 99 * 1024),
    "A100": ((8, 0), 163 * 1024),
    "H100/H200": ((9, 0), 227 * 1024),
}


@pytest.mark.parametrize("name", SIMULATED_DEVICES)
def test_backward_configurations_fit_the_device(name, monkeypatch):
    """Every configuration the backward heuristics pick fits the simulated device's shared memory
    per block (read from the driver, never inferred from the capability): each row length from
    1 to 2**17 in every dtype. Pipelining needs cp.async (sm_80+), so the T4 never pipelines."""
    capability, shared = SIMULATED_DEVICES[name]
    monkeypatch.setattr(hardware, "interpreting", lambda: False)
    monkeypatch.setattr(hardware, "device_capability", lambda device: capability)
    monkeypatch.setattr(hardware, "shared_memory_per_block", lambda device: shared)
    cuda = torch.device("cuda", 0)
    pipelined = set()
    for N in [2**k for k in range(18)] + [781, 3000, 5000]:
        for dtype in DTYPES:
            block_n, _ = rms_norm_module.row_config(N, dtype, backward=True)
            stages = rms_norm_backward_module.bwd_stages(block_n, dtype, cuda) if N <= block_n else 1
            assert rms_norm_backward_module.bwd_shared_bytes(block_n, dtype.itemsize, stages) <= shared, (N, dtype, stages)
            if stages > 1:
                pipelined.add(stages)
    assert pipelined == ({3} if name in ("A10/L4", "A100", "H100/H200") else set())


def test_backward_pipelines_only_where_it_fits(monkeypatch):
    """3 stages for row blocks up to 16 KB where 96 KB of buffers fit; 2 where only they fit;
    never for long rows or off the compiled path."""
    monkeypatch.setattr(hardware, "interpreting", lambda: False)
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(hardware, "device_capability", lambda device: (9, 0))
    monkeypatch.setattr(hardware, "shared_memory_per_block", lambda device: 227 * 1024)
    stages = rms_norm_backward_module.bwd_stages
    assert stages(8192, torch.bfloat16, cuda) == 3 and stages(4096, torch.float32, cuda) == 3
    assert stages(8192, torch.float32, cuda) == 1 and stages(16384, torch.float16, cuda) == 1
    assert stages(8192, torch.bfloat16, torch.device("cpu")) == 1
    monkeypatch.setattr(hardware, "shared_memory_per_block", lambda device: 80 * 1024)  # a smaller part
    assert stages(8192, torch.bfloat16, cuda) == 2 and stages(2048, torch.bfloat16, cuda) == 3
    monkeypatch.setattr(hardware, "device_capability", lambda device: (7, 5))
    assert stages(1024, torch.float16, cuda) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("N,dtype", [(8192, torch.bfloat16), (4096, torch.float32), (2048, torch.float16), (781, torch.float16)], ids=str)
def test_gpu_backward_shared_memory_estimate_bounds_the_compiled_kernel(N, dtype):
    """bwd_shared_bytes is an upper bound of what Triton really allocates (the compiled kernel's
    metadata), so a configuration that fits by the estimate fits on the device."""
    kernel = rms_norm_backward_module._rms_norm_bwd_kernel
    kernel.device_caches.clear()  # only this test's compilation is inspected below
    x, weight = _inputs((4096, N), dtype, "cuda", requires_grad=True)
    rms_norm(x, weight).sum().backward()
    block_n, _ = rms_norm_module.row_config(N, dtype, backward=True)
    stages = rms_norm_backward_module.bwd_stages(block_n, dtype, x.device)
    used = [compiled.metadata.shared for cache in kernel.device_caches.values() for compiled in cache[0].values()]
    assert len(used) == 1 and stages > 1
    assert used[0] <= rms_norm_backward_module.bwd_shared_bytes(block_n, dtype.itemsize, stages), (used, stages)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(6, 37), (3, 5, 16), (4, 9000)], ids=str)
def test_gpu_gradcheck_fp64(shape):
    x, weight = _inputs(shape, torch.float64, "cuda", requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rms_norm(a, b), (x, weight), fast_mode=True)
    assert runtime.last_path("rms_norm") == "triton"


def test_autograd_only_when_a_gradient_can_be_asked_for(device):
    """Without requires_grad (or under no_grad) the call skips the operator's autograd (and its
    dispatcher: host time); with it, the output carries the operator's backward."""
    x = torch.randn(4, 33, device=device)
    w = torch.randn(33, device=device)
    plain = rms_norm(x, w)
    assert plain.grad_fn is None
    x.requires_grad_(True)
    with torch.no_grad():
        assert rms_norm(x, w).grad_fn is None
    tracked = rms_norm(x, w)
    assert tracked.grad_fn is not None
    torch.testing.assert_close(tracked.detach(), plain)
