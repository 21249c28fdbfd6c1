"""Remembered eager launches (``runtime.remember_launch``): a repeated eager inference call of one
signature skips the checks and decisions it passed before and launches the kernel directly.

On a GPU this is the path every decode step takes; here the switch is forced on so that the same
launches run through the interpreter. What must hold: the remembered call gives the answer the
first call gave (and the float64 reference's), it reads its inputs' values afresh (lengths, masks,
data), it records its route, and anything that needs more than a launch (autograd, a transform,
bad input, a different signature) takes the full path.
"""

from __future__ import annotations

import pytest
import torch

import tritonforge as tfg
from tritonforge import launches, runtime
from tritonforge.ops import attention, attention_decode, attention_prefill, rmsnorm
from tritonforge.reference import flash_attention_ref, rms_norm_ref

from .helpers import nan_empty


@pytest.fixture(autouse=True)
def _forced_on(monkeypatch):
    monkeypatch.setattr(launches, "eager_fast_path", lambda: True)
    monkeypatch.setattr(rmsnorm, "_empty", nan_empty)
    monkeypatch.setattr(attention_prefill, "_empty", nan_empty)
    monkeypatch.setattr(attention_decode, "_empty", nan_empty)
    torch.manual_seed(0)


def _remembered(op: str) -> int:
    return sum(1 for key, launch in launches._eager_launches.items() if key[0] == op and launch is not None)


def test_rms_norm_second_call_is_remembered_and_right(device):
    x = torch.randn(3, 5, 96, device=device)
    w = torch.randn(96, device=device)
    with torch.no_grad(), tfg.strict():
        first = tfg.rms_norm(x, w, 1e-5)
        assert _remembered("rms_norm") == 1
        runtime._last_routes.clear()
        x.copy_(torch.randn_like(x))  # new values, same signature: read afresh
        second = tfg.rms_norm(x, w, 1e-5)
    assert tfg.last_path("rms_norm") in ("triton", "interpreter")
    torch.testing.assert_close(second.double(), rms_norm_ref(x.double(), w.double(), 1e-5), rtol=1e-5, atol=1e-5)
    assert first.shape == second.shape and not torch.equal(first, second)
    with tfg.strict():
        tfg.rms_norm(x, w, 1e-6)  # another eps: another signature
        tfg.rms_norm(x[:2], w, 1e-6)  # another shape
        strided = tfg.rms_norm(x[:, :4], w, 1e-6)  # rows without one stride: copied first, so not remembered
        tfg.rms_norm(x[:, :4], w, 1e-6)
    assert _remembered("rms_norm") == 3
    torch.testing.assert_close(strided.double(), rms_norm_ref(x[:, :4].double(), w.double(), 1e-6), rtol=1e-5, atol=1e-5)


def test_rms_norm_needing_more_than_a_launch_takes_the_full_path(device):
    x = torch.randn(4, 64, device=device, requires_grad=True)
    w = torch.randn(64, device=device)
    with torch.no_grad(), tfg.strict():
        tfg.rms_norm(x, w)
    assert _remembered("rms_norm") == 1
    with tfg.strict():
        y = tfg.rms_norm(x, w)  # a graph to build: the training operator, not the remembered launch
    assert y.grad_fn is not None
    torch.autograd.grad(y.sum(), x)
    with torch.no_grad(), pytest.raises(ValueError, match="weight has 63 elements"):
        tfg.rms_norm(x, torch.randn(63, device=device))  # bad input is still an error
    with torch.no_grad(), pytest.raises(TypeError, match="eps must be a real"):
        tfg.rms_norm(x, w, "1e-6")
    launches.forget()
    assert _remembered("rms_norm") == 0


@pytest.mark.parametrize("shape", [(2, 4, 2, 1, 50, 16), (2, 4, 2, 33, 33, 16)], ids=["decode", "prefill"])
def test_attention_remembered_launch_reads_masks_afresh(shape, monkeypatch, device):
    """Same signature, new lengths and padding each call: the remembered launch reads them from the
    tensors it is given (a decode loop's growing cache), and records its plan and route."""
    if device == "cpu":
        monkeypatch.setattr(attention, "INTERPRETER_SMS", 16)  # several decode splits: the merge kernel too
    B, Hq, Hkv, Nq, Nk, D = shape
    q, k, v = torch.randn(B, Hq, Nq, D, device=device), torch.randn(B, Hkv, Nk, D, device=device), torch.randn(B, Hkv, Nk, D, device=device)
    scale = D**-0.5
    for step, (lens, pad) in enumerate([([50, 41], 3), ([47, 33], 0), ([Nk, Nk], 9)]):
        lens_t = torch.tensor(lens, device=device, dtype=torch.int32).clamp(max=Nk)
        mask = torch.ones(B, Nk, dtype=torch.bool, device=device)
        mask[1, :pad] = False
        key_ids, query_ids = attention.mask_ids(mask)
        with torch.no_grad(), tfg.strict():
            o, lse = attention.attend(q, k, v, True, scale, lens_t, key_ids, query_ids)
        assert _remembered("flash_attention") == 1
        expected, _ = flash_attention_ref(q, k, v, True, scale, kv_lens=lens_t, key_ids=key_ids, query_ids=query_ids, upcast=True)
        torch.testing.assert_close(o.double(), expected, rtol=1e-5, atol=1e-5)
        assert attention.last_plan().strategy == ("decode" if Nq <= attention_decode.DECODE_MAX_QUERIES else "prefill")
        assert tfg.last_path("flash_attention") in ("triton", "interpreter"), step


def test_a_fallback_is_never_remembered(device):
    q = torch.randn(1, 2, 3, 300, device=device)  # head dim above MAX_HEAD_DIM: the reference serves it
    k = torch.randn(1, 2, 5, 300, device=device)
    with torch.no_grad(), tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="head dim"):
        attention.attend(q, k, k, False, 0.1)
    with torch.no_grad(), tfg.strict(False):
        attention.attend(q, k, k, False, 0.1)
    assert _remembered("flash_attention") == 0
    assert tfg.last_route("flash_attention").reason == "unsupported"


def test_rope_qk_and_mlp_front_remembered(monkeypatch, device):
    """The other two ops a decode step of a patched Hugging Face model calls."""
    from tritonforge.ops import rope_pair, swiglu_front
    from tritonforge.reference import rope_ref, swiglu_mlp_front_ref

    monkeypatch.setattr(rope_pair, "_empty", nan_empty)
    monkeypatch.setattr(swiglu_front, "_empty", nan_empty)
    q, k = torch.randn(2, 1, 8, 32, device=device).transpose(1, 2), torch.randn(2, 2, 1, 32, device=device)  # q: a projection's view
    cos, sin = torch.randn(2, 1, 32, device=device), torch.randn(2, 1, 32, device=device)
    front = torch.bfloat16 if device == "cuda" else torch.float32  # the GPU kernel is 16-bit (float32 is a fallback there)
    x = torch.randn(2, 1, 48, device=device, dtype=front)
    w_gate, w_up = (torch.randn(80, 48, device=device, dtype=front).T / 7 for _ in range(2))  # nn.Linear weights, transposed views
    with torch.no_grad(), tfg.strict():
        for step in range(3):
            q.copy_(torch.randn_like(q))
            x.copy_(torch.randn_like(x))
            yq, yk = tfg.rope_qk(q, k, cos, sin)
            y = tfg.swiglu_mlp_front(x, w_gate, w_up)
            assert _remembered("rope_qk") == 1 and _remembered("swiglu_mlp_front") == 1, step
            torch.testing.assert_close(yq.double(), rope_ref(q.double(), cos.double()[:, None], sin.double()[:, None], upcast=True),
                                       rtol=1e-5, atol=1e-5)  # fmt: skip
            tol = 1e-4 if front == torch.float32 else 3e-2
            torch.testing.assert_close(y.double(), swiglu_mlp_front_ref(x.double(), w_gate.double(), w_up.double()), rtol=tol, atol=tol)
    assert tfg.last_path("rope_qk") in ("triton", "interpreter") and tfg.last_path("swiglu_mlp_front") in ("triton", "interpreter")


def test_public_flash_attention_remembered(device):
    q, k, v = torch.randn(2, 4, 1, 16, device=device), torch.randn(2, 2, 30, 16, device=device), torch.randn(2, 2, 30, 16, device=device)
    with torch.no_grad(), tfg.strict():
        first = tfg.flash_attention(q, k, v)
        o, lse = tfg.flash_attention(q, k, v, return_lse=True)  # another key: the lse is returned too
        assert _remembered("flash_attention") == 3  # attend's, and the public function's two
        again = tfg.flash_attention(q, k, v)
        with pytest.raises(TypeError, match="causal must be a bool"):
            tfg.flash_attention(q, k, v, causal=1)  # not the same signature: checked
    ref_o, ref_lse = flash_attention_ref(q, k, v, upcast=True)
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    torch.testing.assert_close(o.double(), ref_o, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-5, atol=1e-5)


def test_swiglu_softmax_and_rope_remembered(monkeypatch, device):
    """The remaining row-wise ops: a second call of one signature is served by the launch the first
    made, reads its inputs afresh, and records its route; a strided view is remembered with its
    strides (its own signature)."""
    from tritonforge.ops import rope, softmax, swiglu
    from tritonforge.reference import rope_ref, softmax_ref, swiglu_ref

    for module in (rope, softmax, swiglu):
        monkeypatch.setattr(module, "_empty", nan_empty)
    h = torch.randn(3, 2 * 40, device=device)
    gate, up = h[:, :40], h[:, 40:]  # halves of a packed projection: strided rows, read in place
    x = torch.randn(2, 3, 33, device=device)
    xr, cos, sin = torch.randn(1, 2, 5, 16, device=device), torch.randn(5, 16, device=device), torch.randn(5, 16, device=device)
    with torch.no_grad(), tfg.strict():
        for step in range(3):
            for t in (h, x, xr):
                t.copy_(torch.randn_like(t))
            runtime._last_routes.clear()
            got = (tfg.swiglu(gate, up), tfg.softmax(x), tfg.rope(xr, cos, sin))
            assert all(_remembered(op) == 1 for op in ("swiglu", "softmax", "rope")), step
            assert all(tfg.last_path(op) in ("triton", "interpreter") for op in ("swiglu", "softmax", "rope")), step
            expected = (swiglu_ref(gate.double(), up.double()), softmax_ref(x.double()), rope_ref(xr.double(), cos.double(), sin.double()))
            for g, e in zip(got, expected):
                torch.testing.assert_close(g.double(), e, rtol=1e-5, atol=1e-5)


def test_a_remembered_signature_keeps_the_types_of_its_scalars(device):
    """``causal=True`` and ``causal=1`` compare equal, but only one passes the checks: the key holds
    each scalar's type, so the second call is checked (and refused) rather than served."""
    q, k = torch.randn(1, 2, 1, 16, device=device), torch.randn(1, 2, 9, 16, device=device)
    with torch.no_grad(), tfg.strict():
        tfg.flash_attention(q, k, k, causal=True)
        tfg.flash_attention(q, k, k, causal=True)
        with pytest.raises(TypeError, match="causal must be a bool"):
            tfg.flash_attention(q, k, k, causal=1)


def test_bound_launch_takes_triton_launch_where_it_cannot_go_direct(device):
    """``launches.bound_launch``: the same answers as ``kernel[grid]`` on every call; on the
    interpreter it never launches directly (there is no compiled kernel); on a GPU it goes direct
    from the third call, and a tensor at an address Triton did not compile for (not 16-byte
    aligned) or a different scalar takes Triton's own launch again."""
    from tritonforge.ops.teaching import _vector_add_kernel

    n = 100
    x, y = torch.randn(n + 1, device=device), torch.randn(n + 1, device=device)
    launch = launches.bound_launch(_vector_add_kernel, (1,), BLOCK=128)
    for _ in range(3):
        out = torch.full((n,), float("nan"), device=device)
        launch(x[:n], y[:n], out, n)
        torch.testing.assert_close(out, x[:n] + y[:n], rtol=0, atol=0)
    assert bool(launch._direct) == (device == "cuda")
    out = torch.full((n,), float("nan"), device=device)
    launch(x[1:], y[1:], out, n)  # 4 bytes past an aligned address
    torch.testing.assert_close(out, x[1:] + y[1:], rtol=0, atol=0)
    shorter = torch.full((n - 3,), float("nan"), device=device)
    launch(x, y, shorter, n - 3)  # another scalar: Triton's launch specializes afresh
    torch.testing.assert_close(shorter, (x + y)[: n - 3], rtol=0, atol=0)


def test_a_remembered_launch_that_raises_is_loud_in_strict_mode_and_barred(device):
    """A remembered launch that breaks is never a silent detour: strict routing raises its error;
    otherwise the full path serves the call (the right answer) and the signature is not remembered
    again, so a broken launch is not retried on every call."""
    x, w = torch.randn(4, 32, device=device), torch.randn(32, device=device)
    with torch.no_grad(), tfg.strict():
        tfg.rms_norm(x, w)
    (key,) = [k for k in launches._eager_launches if k[0] == "rms_norm"]

    def broken(*args):
        raise RuntimeError("a planted launch error")

    launches._eager_launches[key] = broken
    with torch.no_grad(), tfg.strict(), pytest.raises(RuntimeError, match="planted launch error"):
        tfg.rms_norm(x, w)
    assert launches._eager_launches[key] is None and _remembered("rms_norm") == 0
    launches._eager_launches[key] = broken
    with torch.no_grad(), tfg.strict(False):
        y = tfg.rms_norm(x, w)
        tfg.rms_norm(x, w)
    torch.testing.assert_close(y.double(), rms_norm_ref(x.double(), w.double(), 1e-6), rtol=1e-5, atol=1e-5)
    assert launches._eager_launches[key] is None and _remembered("rms_norm") == 0
