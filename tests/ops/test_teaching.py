"""Chapter 2's teaching ops (tritonforge.ops.teaching): vector_add, add_2d, program_map."""

import pytest
import torch

import tritonforge as tfg
from tritonforge import hardware
from tritonforge.ops import teaching
from tritonforge.reference import add_ref, program_map_ref

from ..helpers import assert_within_budget

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _randn(shape, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device=device, dtype=dtype)


# ----------------------------------------------------------------------------------------------
# vector_add
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (7,), (1023,), (1025,), (3, 7, 5), (5, 123, 123)])
def test_vector_add_matches_float64(shape, dtype, device):
    x, y = _randn(shape, dtype, device, 1), _randn(shape, dtype, device, 2)
    out = teaching.vector_add(x, y)
    assert tfg.last_path("vector_add") in ("triton", "interpreter")
    assert out.dtype == dtype and out.shape == x.shape and out.is_contiguous()
    assert_within_budget(out, add_ref(x, y, upcast=True), x + y)


def _truncated_to_bf16(value: torch.Tensor) -> torch.Tensor:
    """float32 -> bfloat16 rounded toward zero (the low 16 bits cleared): what Triton's CPU
    interpreter makes of ``.to(tl.bfloat16)`` (``_convert_float`` without a rounding mode)."""
    return (value.float().view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rounds_once(dtype, device):
    """float32 sum cast once with ``.to(out dtype)``: rounded to nearest-even, bit-equal to the
    reference that does that, on a GPU (either dtype) and in the interpreter for float16.

    The teaching kernels are kept free of the interpreter's bf16 workaround (chapter 2 shows them
    as the reader's first kernels; ``kernel_utils.cast_for_store`` comes in chapter 3), so in the
    interpreter a bf16 result is the float32 sum *truncated*. That case is checked exactly too:
    bit-equal to the truncated float32 sum, and (below) a real difference from rounding on these
    inputs, so the test would notice if the interpreter started rounding."""
    x, y = _randn((70, 90), dtype, device, 12), _randn((90, 70), dtype, device, 13).t()
    if dtype == torch.bfloat16 and hardware.interpreting():
        expected = _truncated_to_bf16(x.float() + y.float())
        assert not torch.equal(expected, add_ref(x, y)), "these inputs should tell truncation from rounding"
    else:
        expected = add_ref(x, y)
    assert torch.equal(teaching.vector_add(x, y), expected)
    assert torch.equal(teaching.add_2d(x, y), expected)


def test_vector_add_writes_every_element(device):
    x, y = _randn((3001,), torch.float32, device, 3), _randn((3001,), torch.float32, device, 4)
    out = torch.full_like(x, float("nan"))
    teaching.vector_add_fwd(x, y, out=out)
    torch.testing.assert_close(out, x + y)


def test_vector_add_on_a_strided_view(device):
    base = _randn((40, 50), torch.float32, device, 5)
    x, y = base[:, ::2], base.t()[::2, :40].t()
    out = teaching.vector_add(x, y)
    assert tfg.last_path("vector_add") in ("triton", "interpreter")
    torch.testing.assert_close(out, x + y)


# ----------------------------------------------------------------------------------------------
# add_2d: strides are passed, nothing is copied
# ----------------------------------------------------------------------------------------------


def _layouts(M, N, dtype, device, seed):
    """[M, N] tensors with different strides and storage offsets."""
    return {
        "contiguous": _randn((M, N), dtype, device, seed),
        "transposed": _randn((N, M), dtype, device, seed + 1).t(),
        "every-other-column": _randn((M, 2 * N), dtype, device, seed + 2)[:, ::2],
        "every-third-row": _randn((3 * M, N), dtype, device, seed + 3)[::3],
        "interior-slice": _randn((M + 5, N + 9), dtype, device, seed + 4)[2 : 2 + M, 7 : 7 + N],
    }


@pytest.mark.parametrize("shape", [(1, 1), (1, 300), (300, 1), (37, 203), (129, 65)])
@pytest.mark.parametrize("x_layout", ["contiguous", "transposed", "every-other-column", "every-third-row", "interior-slice"])
def test_add_2d_on_views_matches_float64(shape, x_layout, device):
    M, N = shape
    x = _layouts(M, N, torch.float32, device, 10)[x_layout]
    y = _layouts(M, N, torch.float32, device, 20)["transposed"]
    out = teaching.add_2d(x, y)
    assert tfg.last_path("add_2d") in ("triton", "interpreter")
    assert out.shape == (M, N) and out.is_contiguous()
    assert_within_budget(out, add_ref(x, y, upcast=True), x + y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_2d_dtypes(dtype, device):
    layouts = _layouts(45, 301, dtype, device, 30)
    x, y = layouts["transposed"], layouts["interior-slice"]
    out = teaching.add_2d(x, y)
    assert out.dtype == dtype
    assert_within_budget(out, add_ref(x, y, upcast=True), x + y)


def test_add_2d_awkward_large_shape(device):
    x = _randn((781, 523), torch.float32, device, 40).t()  # [523, 781], transposed
    y = _randn((523, 781), torch.float32, device, 41)
    out = teaching.add_2d(x, y)
    assert_within_budget(out, add_ref(x, y, upcast=True), x + y)


def test_add_2d_writes_every_element_of_a_strided_output(device):
    x, y = _randn((37, 70), torch.float32, device, 50), _randn((70, 37), torch.float32, device, 51).t()
    buffer = torch.full((40, 90), float("nan"), device=device)
    out = buffer[1:38, 3:73]  # strided output inside a NaN margin
    teaching.add_2d_fwd(x, y, out=out)
    torch.testing.assert_close(out, x + y)
    margin = buffer.clone()
    margin[1:38, 3:73] = float("nan")
    assert torch.isnan(margin).all(), "the kernel wrote outside its output view"


def test_add_2d_does_not_write_inputs(device):
    x, y = _randn((20, 30), torch.float32, device, 60).t(), _randn((30, 20), torch.float32, device, 61)
    x0, y0 = x.clone(), y.clone()
    teaching.add_2d(x, y)
    assert torch.equal(x, x0) and torch.equal(y, y0)


def test_empty_inputs(device):
    assert teaching.vector_add(torch.empty(0, 3, device=device), torch.empty(0, 3, device=device)).shape == (0, 3)
    assert teaching.add_2d(torch.empty(4, 0, device=device), torch.empty(4, 0, device=device)).shape == (4, 0)
    for op in ("vector_add", "add_2d"):  # recorded, and not a fallback (strict mode allows it)
        assert tfg.last_route(op).path == "torch" and tfg.last_route(op).reason == "empty"


def test_nan_propagates(device):
    x, y = _randn((9, 70), torch.float32, device, 70), _randn((9, 70), torch.float32, device, 71)
    x[3, 5] = float("nan")
    out = teaching.add_2d(x, y)
    torch.testing.assert_close(out, x + y, equal_nan=True)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda x, y: teaching.vector_add(x.to(torch.int32), y), TypeError, "x has dtype int32"),
        (lambda x, y: teaching.vector_add(x, y.double()), TypeError, "y has dtype float64"),
        (lambda x, y: teaching.vector_add(x, y[:-1]), ValueError, "y has shape"),
        (lambda x, y: teaching.vector_add(x.tolist(), y), TypeError, "x must be a torch.Tensor"),
        (lambda x, y: teaching.add_2d(x, y.half()), TypeError, "y has dtype float16"),
        (lambda x, y: teaching.add_2d(x, y.t()), ValueError, "y has shape"),
        (lambda x, y: teaching.add_2d(x[None], y[None]), ValueError, "x must be 2-D"),
        (lambda x, y: teaching.add_2d(x, y.to("meta")), ValueError, "y is on meta"),
    ],
)
def test_bad_input_names_the_argument(call, error, match, device):
    x, y = _randn((6, 9), torch.float32, device, 80), _randn((6, 9), torch.float32, device, 81)
    with pytest.raises(error, match=match):
        call(x, y)


# ----------------------------------------------------------------------------------------------
# program_map: the index arithmetic of a 2-D grid
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, block", [((10, 12), (4, 8)), ((1, 1), (1, 1)), ((37, 53), (8, 16)), ((5, 100), (16, 2))])
def test_program_map_matches_the_index_arithmetic(shape, block, device):
    out = teaching.program_map(*shape, *block, device=device)
    assert tfg.last_path("program_map") in ("triton", "interpreter")
    assert torch.equal(out.cpu(), program_map_ref(*shape, *block))


@pytest.mark.parametrize(
    "args, match",
    [((0, 4, 2, 2), "M must be a positive int"), ((4, 4, 3, 2), "block_m must be a power of two"), ((4, 4, 2, 2.0), "block_n")],
)
def test_program_map_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        teaching.program_map(*args)


@pytest.mark.gpu
def test_gpu_kernels_take_the_triton_path():
    x = _randn((4096, 1000), torch.bfloat16, "cuda", 90).t()
    y = _randn((1000, 4096), torch.bfloat16, "cuda", 91)
    out = teaching.add_2d(x, y)
    assert tfg.last_path("add_2d") == "triton"
    assert_within_budget(out, add_ref(x, y, upcast=True), x + y)
    v = _randn((2**24 + 3,), torch.float16, "cuda", 92)
    assert_within_budget(teaching.vector_add(v, v), add_ref(v, v, upcast=True), v + v)
    assert tfg.last_path("vector_add") == "triton"
