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
from tritonforge import runtime
from tritonforge.ops import attention, rmsnorm
from tritonforge.reference import flash_attention_ref, rms_norm_ref

from .helpers import nan_empty


@pytest.fixture(autouse=True)
def _forced_on(monkeypatch):
    monkeypatch.setattr(runtime, "eager_fast_path", lambda: True)
    monkeypatch.setattr(rmsnorm, "_empty", nan_empty)
    monkeypatch.setattr(attention, "_empty", nan_empty)
    torch.manual_seed(0)


def _remembered(op: str) -> int:
    return sum(1 for key in runtime._eager_launches if key[0] == op)


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
    runtime.reset_routing_state()
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
        assert attention.last_plan().strategy == ("decode" if Nq <= attention.DECODE_MAX_QUERIES else "prefill")
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
