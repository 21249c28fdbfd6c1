"""Rotary embeddings (tfg.rope): forward and backward against float64, layouts read in place, and
how the op composes with PyTorch (autograd twice, compile, vmap, CUDA graphs on the GPU).
Outputs are poisoned with NaN before the kernel writes them."""

from __future__ import annotations

import warnings

import pytest
import torch

import tritonforge as tfg
from tritonforge.models.llama import LlamaConfig, rotary_tables
from tritonforge.ops import rope as rope_module
from tritonforge.reference import rope_bwd_ref, rope_ref

from ..helpers import budget as _budget
from ..helpers import dtype_name as _name
from ..helpers import nan_empty
from ..helpers import skip_unsupported as _skip_unsupported

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
SHAPES = [(2, 4, 37, 16), (1, 3, 1, 128), (5, 24), (3, 9, 40), (2, 2, 3, 17, 32), (1, 1, 70, 24)]  # D = 24: half 12


@pytest.fixture(autouse=True)
def _seed_and_poison(monkeypatch):
    torch.manual_seed(0)
    monkeypatch.setattr(rope_module, "_empty", nan_empty)


def _tables(n, d, dtype, device, start=0):
    cfg = LlamaConfig(hidden_size=d * 2, num_heads=2)
    return rotary_tables(cfg, torch.arange(start, start + n, device=device), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_reference(shape, dtype, device):
    _skip_unsupported(dtype, device)
    x = torch.randn(shape, dtype=dtype, device=device) * 3
    cos, sin = _tables(shape[-2], shape[-1], dtype, device, start=1000)  # large angles
    with tfg.strict():
        y = tfg.rope(x, cos, sin)
    assert tfg.last_path("rope") in ("triton", "interpreter")
    assert y.shape == x.shape and y.dtype == x.dtype and y.is_contiguous()
    _budget(y, rope_ref(x, cos, sin, upcast=True), rope_ref(x, cos, sin), "y")
    x1, x2 = x.chunk(2, dim=-1)  # Hugging Face's formula, written out
    torch.testing.assert_close(rope_ref(x, cos, sin), x * cos + torch.cat([-x2, x1], dim=-1) * sin, rtol=0, atol=0)


def test_any_tables(device):
    """The formula for any cos and sin, not only Llama's (whose halves repeat, which would hide a
    kernel that reads the wrong half): forward and backward."""
    x = torch.randn(2, 3, 21, 24, device=device, requires_grad=True)
    cos, sin = torch.randn(21, 24, device=device), torch.randn(21, 24, device=device)
    dy = torch.randn_like(x)
    with tfg.strict():
        y = tfg.rope(x, cos, sin)
        (dx,) = torch.autograd.grad(y, x, dy)
    x64 = x.detach().double().requires_grad_()
    expected = rope_ref(x64, cos, sin, upcast=True)
    torch.testing.assert_close(y.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dx.double(), torch.autograd.grad(expected, x64, dy.double())[0], rtol=1e-5, atol=1e-5)


def test_layouts_read_in_place(device):
    """q from a projection, ``view(B, N, H, D).transpose(1, 2)``, and a strided head dimension (copied)."""
    B, N, H, D = 2, 33, 4, 32
    cos, sin = _tables(N, D, torch.float32, device)
    for x in (torch.randn(B, N, H, D, device=device).transpose(1, 2), torch.randn(B, H, N, 2 * D, device=device)[..., ::2]):
        with tfg.strict():
            y = tfg.rope(x, cos, sin)
        torch.testing.assert_close(y, rope_ref(x, cos, sin, upcast=True).float(), rtol=1e-6, atol=1e-6)


def test_backward_kernel_and_double_backward(device):
    """dx through the backward kernel equals the float64 reference's autograd; gradcheck and
    gradgradcheck (float64: through the kernels on the interpreter)."""
    x = torch.randn(2, 3, 19, 16, device=device, requires_grad=True)
    cos, sin = _tables(19, 16, torch.float32, device)
    dy = torch.randn(2, 3, 19, 16, device=device)
    with tfg.strict():
        (dx,) = torch.autograd.grad(tfg.rope(x, cos, sin), x, dy)
    assert tfg.last_path("rope_backward") in ("triton", "interpreter")
    x64 = x.detach().double().requires_grad_()
    (expected,) = torch.autograd.grad(rope_ref(x64, cos, sin, upcast=True), x64, dy.double())
    torch.testing.assert_close(dx.double(), expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rope_bwd_ref(dy, cos, sin, upcast=True), expected, rtol=1e-12, atol=1e-12)  # the hand derivation
    if device == "cpu":
        x64 = torch.randn(1, 2, 5, 16, dtype=torch.float64, requires_grad=True)
        c64, s64 = _tables(5, 16, torch.float64, device)
        with tfg.strict(False), warnings.catch_warnings():
            warnings.simplefilter("ignore", tfg.FallbackWarning)
            assert torch.autograd.gradcheck(lambda x: tfg.rope(x, c64, s64), (x64,))
            assert torch.autograd.gradgradcheck(lambda x: tfg.rope(x, c64, s64), (x64,))


def test_table_gradients_take_the_reference_loudly(device):
    x = torch.randn(1, 2, 7, 16, dtype=torch.float64, device=device, requires_grad=True)
    cos, sin = (t.requires_grad_() for t in _tables(7, 16, torch.float64, device))
    with pytest.raises(tfg.FallbackError, match="cos or sin needs a gradient"):
        tfg.rope(x, cos, sin)
    with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="cos or sin"):
        got = torch.autograd.grad(tfg.rope(x, cos, sin).sum(), (x, cos, sin))
    expected = torch.autograd.grad(rope_ref(x, cos, sin).sum(), (x, cos, sin))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


def test_compile_and_vmap(device):
    x = torch.randn(3, 2, 4, 11, 16, device=device)
    cos, sin = _tables(11, 16, torch.float32, device)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True), tfg.strict():
        compiled = torch.compile(lambda x: tfg.rope(x * 2.0, cos, sin) + 1.0, fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(x), tfg.rope(x * 2.0, cos, sin) + 1.0, rtol=0, atol=0)
        mapped = torch.func.vmap(lambda x: tfg.rope(x, cos, sin))(x)
    torch._dynamo.reset()
    torch.testing.assert_close(mapped, rope_ref(x, cos, sin, upcast=True).float(), rtol=1e-6, atol=1e-6)
    tables = torch.stack([cos, cos.flip(0), cos * 0.5])  # a table per example: the reference, warned
    with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="vmap over cos/sin"):
        mapped = torch.func.vmap(lambda x, c: tfg.rope(x, c, sin))(x, tables)
    for i in range(3):
        torch.testing.assert_close(mapped[i], rope_ref(x[i], tables[i], sin), rtol=1e-6, atol=1e-6)


def test_empty_input(device):
    x = torch.randn(2, 0, 5, 16, device=device)
    cos, sin = _tables(5, 16, torch.float32, device)
    with tfg.strict():
        assert tfg.rope(x, cos, sin).shape == x.shape
    assert tfg.last_route("rope").reason == "empty"


@pytest.mark.gpu
def test_gpu_llama_sizes_and_cuda_graph():
    """Llama-3-8B's queries at prefill and decode, bf16, against float64 and Hugging Face's
    formula; captured in a CUDA graph and replayed on fresh inputs."""
    for B, H, N in ((1, 32, 2048), (32, 8, 1)):
        x = torch.randn(B, N, H, 128, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
        cos, sin = _tables(N, 128, torch.bfloat16, "cuda", start=4000)
        with tfg.strict():
            y = tfg.rope(x, cos, sin)
        assert tfg.last_path("rope") == "triton"
        _budget(y, rope_ref(x, cos, sin, upcast=True), rope_ref(x, cos, sin), "y")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = tfg.rope(x, cos, sin)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, tfg.rope(x, cos, sin), rtol=0, atol=0)


@pytest.mark.parametrize("rows", [1, 3])
def test_hugging_face_batched_tables(rows, device):
    """Hugging Face's rotary embedding returns ``cos``/``sin`` of ``[B, N, D]`` (one row of positions per
    batch row, different under left padding) or ``[1, N, D]``: ``tfg.rope`` takes them as
    ``apply_rotary_pos_emb`` does, and differentiates x through them (float64 gradcheck)."""
    B, H, N, D = 3, 2, 9, 16
    x = torch.randn(B, H, N, D, device=device, dtype=torch.float64, requires_grad=True)
    starts = torch.tensor([0, 5, 2][:rows])
    cos, sin = (torch.stack(t) for t in zip(*[_tables(N, D, torch.float64, device, start=int(s)) for s in starts]))
    with tfg.strict():
        got = tfg.rope(x, cos, sin)
        assert tfg.last_path("rope_qk") in ("triton", "interpreter")  # served by rope_qk's kernel
        expected = rope_ref(x, cos[:, None], sin[:, None])
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
        assert torch.autograd.gradcheck(lambda t: tfg.rope(t, cos, sin), (x,), fast_mode=True)
    with pytest.raises(ValueError, match="cos must have shape"):
        tfg.rope(x, cos[:, :4], sin[:, :4])  # N unlike x's
    with pytest.raises(ValueError, match="sin"):
        tfg.rope(x, cos, sin[0])  # one table per batch row and one for all
