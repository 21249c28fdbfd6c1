"""tfg.rope_qk: queries and keys rotated in one launch, with one cos/sin table or one per batch row
(Hugging Face's position embeddings under left padding), against float64; its gradients, compile."""

from __future__ import annotations

import warnings

import pytest
import torch

import tritonforge as tfg
from tritonforge.ops import rope_pair as rope_module
from tritonforge.reference import rope_ref

from ..helpers import nan_empty


@pytest.fixture(autouse=True)
def _seed_and_poison(monkeypatch):
    torch.manual_seed(0)
    monkeypatch.setattr(rope_module, "_empty", nan_empty)


def _tables(B, N, D, device, per_row: bool):
    """cos and sin as transformers builds them: positions (per batch row when ``per_row``) times
    the inverse frequencies, the table repeated twice along D."""
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, device=device, dtype=torch.float64) / D))
    pos = torch.arange(N, device=device, dtype=torch.float64)
    pos = pos[None] - torch.arange(B, device=device)[:, None] * 3 if per_row else pos[None]  # left padding shifts positions
    emb = torch.cat([pos[..., None] * inv, pos[..., None] * inv], -1)  # [B or 1, N, D]
    return emb.cos().float(), emb.sin().float()


def _expected(x, cos, sin):
    return rope_ref(x.double(), cos.double()[:, None], sin.double()[:, None], upcast=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("per_row", [False, True], ids=["one-table", "per-row"])
def test_rope_qk_matches_float64(per_row, dtype, device):
    B, Hq, Hk, N, D = 3, 4, 2, 13, 32
    q = torch.randn(B, N, Hq, D, device=device, dtype=dtype).transpose(1, 2)  # a projection's view, read in place
    k = torch.randn(B, Hk, N, D, device=device, dtype=dtype)
    cos, sin = _tables(B, N, D, device, per_row)
    with tfg.strict():
        yq, yk = tfg.rope_qk(q, k, cos, sin)
    assert tfg.last_path("rope_qk") in ("triton", "interpreter")
    assert yq.is_contiguous() and yk.is_contiguous() and yq.dtype == dtype
    tol = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
    torch.testing.assert_close(yq.double(), _expected(q, cos, sin), rtol=tol, atol=tol)
    torch.testing.assert_close(yk.double(), _expected(k, cos, sin), rtol=tol, atol=tol)
    if not per_row:  # one table: the same as two calls of tfg.rope
        with tfg.strict():
            torch.testing.assert_close(yq, tfg.rope(q, cos[0], sin[0]), rtol=0, atol=0)


def test_rope_qk_gradients_and_compile(device):
    B, Hq, Hk, N, D = 2, 2, 1, 7, 16
    q = torch.randn(B, Hq, N, D, device=device, dtype=torch.float64, requires_grad=True)
    k = torch.randn(B, Hk, N, D, device=device, dtype=torch.float64, requires_grad=True)
    cos, sin = (t.double() for t in _tables(B, N, D, device, True))
    with tfg.strict(False), warnings.catch_warnings():
        warnings.simplefilter("ignore", tfg.FallbackWarning)  # float64 on a GPU: the reference
        torch.autograd.gradcheck(lambda q, k: tfg.rope_qk(q, k, cos, sin), (q, k), fast_mode=True)
        dq, dk = torch.randn_like(q), torch.randn_like(k)
        got = torch.autograd.grad(tfg.rope_qk(q, k, cos, sin), (q, k), (dq, dk))
    want = torch.autograd.grad((_expected(q, cos, sin), _expected(k, cos, sin)), (q, k), (dq, dk))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    qf, kf, cf, sf = (t.detach().float() for t in (q, k, cos, sin))
    torch._dynamo.reset()
    with tfg.strict():
        compiled = torch.compile(lambda q, k: tfg.rope_qk(q, k, cf, sf), fullgraph=True, backend="aot_eager")
        for a, b in zip(compiled(qf, kf), tfg.rope_qk(qf, kf, cf, sf), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch._dynamo.reset()


def test_rope_qk_bad_inputs(device):
    q, k = torch.randn(2, 4, 5, 16, device=device), torch.randn(2, 2, 5, 16, device=device)
    cos = torch.randn(5, 16, device=device)
    with pytest.raises(ValueError, match=r"k must be \[B, Hk, N, D\]"):
        tfg.rope_qk(q, torch.randn(2, 2, 6, 16, device=device), cos, cos)
    with pytest.raises(ValueError, match="cos must have shape"):
        tfg.rope_qk(q, k, torch.randn(3, 5, 16, device=device), cos)
    with pytest.raises(TypeError, match="k has dtype float16 but q has float32"):
        tfg.rope_qk(q, k.half(), cos, cos)
    with pytest.raises(ValueError, match="q must be 4-D"):
        tfg.rope_qk(q[0], k, cos, cos)
    with pytest.raises(ValueError, match="must be even"):
        tfg.rope_qk(q[..., :15], k[..., :15], cos[:, :15], cos[:, :15])
