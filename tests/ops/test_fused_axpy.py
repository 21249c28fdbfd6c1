"""axpy: the teaching op that proves the routing mechanism end to end."""

import pytest
import torch

import tritonforge as tfg
from tritonforge.ops.fused_axpy import axpy_fwd
from tritonforge.reference import axpy_ref

from ..helpers import assert_within_budget

SHAPES = [(1,), (7,), (1000,), (1025,), (3, 7, 5), (2**16 + 3,)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _inputs(shape, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    y = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    return x, y


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_float64_reference(shape, dtype, device):
    x, y = _inputs(shape, dtype, device, seed=sum(shape) + DTYPES.index(dtype))
    alpha = -1.75
    out = tfg.axpy(alpha, x, y)
    assert tfg.last_path("axpy") in ("triton", "interpreter")
    assert out.dtype == dtype and out.shape == x.shape
    ref = axpy_ref(alpha, x, y, upcast=True)
    baseline = alpha * x + y  # PyTorch eager in the input dtype
    assert_within_budget(out, ref, baseline)


def test_every_element_written(device):
    x, y = _inputs((3000,), torch.float32, device)
    out = torch.full_like(x, float("nan"))
    axpy_fwd(0.5, x, y, out=out)
    torch.testing.assert_close(out, 0.5 * x + y)


def test_strided_views(device):
    base, other = _inputs((64, 50), torch.float32, device, seed=3)
    x = base[:, ::2]  # non-contiguous
    y = other.t()[::2, :].t()  # transposed, sliced: same shape as x, other strides
    out = tfg.axpy(3.0, x, y)
    assert tfg.last_path("axpy") in ("triton", "interpreter")
    torch.testing.assert_close(out, 3.0 * x + y)
    assert out.is_contiguous()


def test_does_not_write_inputs(device):
    x, y = _inputs((513,), torch.float32, device, seed=5)
    x0, y0 = x.clone(), y.clone()
    tfg.axpy(2.0, x, y)
    assert torch.equal(x, x0) and torch.equal(y, y0)


def test_empty_input_gives_empty_output(device):
    x = torch.empty(0, 4, device=device)
    out = tfg.axpy(2.0, x, x)
    assert out.shape == (0, 4)


def test_nan_and_inf_propagate(device):
    x, y = _inputs((2048,), torch.float32, device, seed=6)
    x[10], x[1500], y[20] = float("nan"), float("inf"), float("-inf")
    out = tfg.axpy(2.0, x, y)
    torch.testing.assert_close(out, 2.0 * x + y, equal_nan=True)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda x, y: tfg.axpy("2", x, y), TypeError, "alpha"),
        (lambda x, y: tfg.axpy(True, x, y), TypeError, "alpha"),
        (lambda x, y: tfg.axpy(2.0, x.to(torch.int32), y), TypeError, "x has dtype int32"),
        (lambda x, y: tfg.axpy(2.0, x, y.double()), TypeError, "y has dtype float64"),
        (lambda x, y: tfg.axpy(2.0, x, y.half()), TypeError, "y has dtype float16"),
        (lambda x, y: tfg.axpy(2.0, x, y[:-1]), ValueError, "y has shape"),
        (lambda x, y: tfg.axpy(2.0, x, y.to("meta")), ValueError, "y is on meta"),
        (lambda x, y: tfg.axpy(2.0, x.tolist(), y), TypeError, "x must be a torch.Tensor"),
    ],
)
def test_bad_input_names_the_argument(call, error, match, device):
    x, y = _inputs((16,), torch.float32, device)
    with pytest.raises(error, match=match):
        call(x, y)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_large_compiled(dtype):
    x, y = _inputs((2**26 + 17,), dtype, "cuda", seed=7)
    out = tfg.axpy(0.25, x, y)
    assert tfg.last_path("axpy") == "triton"
    assert_within_budget(out, axpy_ref(0.25, x, y, upcast=True), 0.25 * x + y)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rounds_once_to_nearest(dtype, device):
    """The fp32 result is rounded to the output dtype once, to nearest-even: bit-equal to the
    reference that does exactly that. (Triton's interpreter truncates fp32 -> bf16 unless the
    kernel rounds by hand: this test caught it.)"""
    x, y = _inputs((5000,), dtype, device, seed=11)
    assert torch.equal(tfg.axpy(-1.75, x, y), axpy_ref(-1.75, x, y))
