"""FlashAttention's backward kernels (``tritonforge.ops.attention_backward``) against the float64
reference backward, under strict routing (a fallback fails the test).

On the CPU the interpreter's 16 x 16 tiles make small sequences cross block edges, the key and
query tails and the causal diagonal; every buffer the launcher allocates starts as NaN, so an
element the kernels forget to write fails. The GPU tests run the real tiles at model sizes,
beside SDPA's backward.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import warnings

import pytest
import torch

import tritonforge as tfg
from tritonforge._triton import triton
from tritonforge.ops import attention as attention_module
from tritonforge.ops import attention_backward, attention_decode, attention_prefill
from tritonforge.ops.attention import flash_attention, mask_ids
from tritonforge.reference import TOLERANCE, flash_attention_bwd_ref, flash_attention_ref

from ..helpers import max_rel_error, nan_empty
from ..helpers import skip_unsupported as _skip_unsupported

OP = "flash_attention_backward"


@pytest.fixture(autouse=True)
def _seed_and_poison(monkeypatch):
    torch.manual_seed(0)
    for module in (attention_prefill, attention_decode, attention_backward):
        monkeypatch.setattr(module, "_empty", nan_empty)


def _kernel_path(device) -> str:
    return "triton" if torch.device(device).type == "cuda" else "interpreter"


def _skip_fp64(dtype, device):
    if dtype == torch.float64 and device == "cuda":
        pytest.skip("float64 runs the kernels on the interpreter only")
    if dtype == torch.float64 and not attention_module.fp64_dot_supported():
        pytest.skip(f"Triton {triton.__version__}'s interpreter has no float64 tl.dot (the op routes such calls)")


def _leaves(B, Hq, Hkv, Nq, Nk, D, dtype, device):
    q = torch.randn(B, Hq, Nq, D, dtype=dtype, device=device)
    k = torch.randn(B, Hkv, Nk, D, dtype=dtype, device=device)
    v = torch.randn(B, Hkv, Nk, D, dtype=dtype, device=device)
    return [t.requires_grad_() for t in (q, k, v)]


def _acc(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_grads(got, q, k, v, do, dlse, causal, dtype, sm_scale=None, **masks):
    """Each gradient against the float64 reference backward, relative to its largest element."""
    expected = flash_attention_bwd_ref(do, q.detach(), k.detach(), v.detach(), causal, sm_scale, dlse=dlse, upcast=True, **masks)
    for name, g, e in zip(("dq", "dk", "dv"), got, expected, strict=True):
        assert g.dtype == dtype and g.shape == e.shape, name
        assert not g.isnan().any(), f"{name} has NaN"
        assert max_rel_error(g, e) <= TOLERANCE[dtype], f"{name}: relative error {max_rel_error(g, e):.2e}"


def _run(q, k, v, causal, device, *, lse_grad=True, sm_scale=None, **kwargs):
    """Forward and backward through the kernels, strict: ``(grads, do, dlse)``."""
    do = torch.randn(q.shape, dtype=q.dtype, device=device)
    dlse = torch.randn(q.shape[:3], dtype=_acc(q.dtype), device=device) if lse_grad else None
    with tfg.strict():
        o, lse = flash_attention(q, k, v, causal=causal, sm_scale=sm_scale, return_lse=True, **kwargs)
        outputs, grads = ((o, lse), (do, dlse)) if lse_grad else ((o,), (do,))
        got = torch.autograd.grad(outputs, (q, k, v), grads)
    route = tfg.last_route(OP)
    assert (route.path, route.reason) == (_kernel_path(device), None), route
    return got, do, dlse


# (B, Hq, Hkv, Nq, Nk, D): one query and one key, GQA and MQA, Nq > Nk (causal rows that see no
# key), Nq < Nk, padded head dims (24, 80), head dims 64 and 128, decode-sized forwards (Nq <= 16).
SHAPES = [
    (1, 1, 1, 1, 1, 16),
    (2, 4, 2, 17, 17, 64),
    (1, 4, 2, 129, 100, 32),
    (1, 2, 2, 33, 70, 24),
    (1, 3, 1, 5, 40, 16),
    (1, 2, 1, 40, 19, 128),
    (1, 2, 2, 20, 35, 80),
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_float32(shape, causal, device):
    q, k, v = _leaves(*shape, torch.float32, device)
    got, do, dlse = _run(q, k, v, causal, device)
    _check_grads(got, q, k, v, do, dlse, causal, torch.float32)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(2, 4, 2, 100, 129, 32), (1, 2, 1, 17, 17, 24), (1, 2, 2, 1, 33, 16), (1, 1, 1, 30, 9, 64)], ids=str)
def test_float64(shape, causal, device):
    _skip_fp64(torch.float64, device)
    q, k, v = _leaves(*shape, torch.float64, device)
    got, do, dlse = _run(q, k, v, causal, device, sm_scale=0.3)
    _check_grads(got, q, k, v, do, dlse, causal, torch.float64, sm_scale=0.3)


def test_layouts_and_gradient_of_o_only(device):
    """``[B, N, H, D]`` memory read in place (a projection's transpose view), a ``dO`` that
    ``.sum()`` makes (stride 0), no gradient for lse."""
    B, Hq, Hkv, N, D = 2, 4, 2, 21, 32
    q, k, v = (torch.randn(B, N, H, D, device=device).transpose(1, 2).requires_grad_() for H in (Hq, Hkv, Hkv))
    with tfg.strict():
        got = torch.autograd.grad(flash_attention(q, k, v, causal=True).sum(), (q, k, v))
    assert tfg.last_path(OP) == _kernel_path(device)
    _check_grads(got, q, k, v, torch.ones(B, Hq, N, D, device=device), None, True, torch.float32)
    q, k, v = _leaves(1, 2, 1, 19, 23, 16, torch.float32, device)
    got, do, _ = _run(q, k, v, True, device, lse_grad=False)
    _check_grads(got, q, k, v, do, None, True, torch.float32)


def test_gradient_of_lse(device):
    """A loss of O and lse, and one of lse alone: the ``- dlse`` in δ, against autograd through
    the float64 reference forward (not the hand-derived backward)."""
    _skip_fp64(torch.float64, device)
    q, k, v = _leaves(1, 4, 2, 29, 37, 16, torch.float64, device)
    for loss in (lambda o, lse: (o * o).sum() + (lse * torch.arange(29, device=device)).sum(), lambda o, lse: lse.exp().sum()):
        with tfg.strict():
            got = torch.autograd.grad(loss(*flash_attention(q, k, v, causal=True, return_lse=True)), (q, k, v))
        assert tfg.last_path(OP) == _kernel_path(device)
        expected = torch.autograd.grad(loss(*flash_attention_ref(q, k, v, True, upcast=True)), (q, k, v), allow_unused=True)
        for g, e, t in zip(got, expected, (q, k, v), strict=True):
            e = torch.zeros_like(t) if e is None else e  # lse alone does not read v
            assert max_rel_error(g, e) <= TOLERANCE[torch.float64] and not g.isnan().any()


def _poison(k, v, hidden):
    """NaN in the keys and values of ``hidden [B, Nk]``: no gradient may read them."""
    k, v = k.detach().clone(), v.detach().clone()
    k[hidden[:, None, :, None].expand_as(k)] = float("nan")
    v[hidden[:, None, :, None].expand_as(v)] = float("nan")
    return k.requires_grad_(), v.requires_grad_()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_masks(dtype, device):
    """kv_lens, a key-padding mask with holes, packed sequences, and two at once; the keys no query
    may see are NaN and get zero gradients."""
    _skip_fp64(dtype, device)
    B, Hq, Hkv, N, D = 2, 4, 2, 37, 16
    q, k, v = _leaves(B, Hq, Hkv, N, N, D, dtype, device)
    lens = torch.tensor([N, 20], device=device)
    padding = torch.ones(B, N, dtype=torch.bool, device=device)
    padding[0, 3:9] = False
    padding[1, :5] = False
    segments = torch.tensor([[0] * 10 + [1] * 16 + [2] * 11, [0] * 30 + [-1] * 7], device=device)
    beyond = torch.arange(N, device=device)[None, :] >= lens[:, None]
    cases = [
        (dict(kv_lens=lens), beyond),
        (dict(key_padding_mask=padding), ~padding),
        (dict(segment_ids=segments), segments < 0),
        (dict(key_padding_mask=padding, kv_lens=lens), ~padding | beyond),
    ]
    for causal in (False, True):
        for kwargs, hidden in cases:
            kk, vv = _poison(k, v, hidden)
            got, do, dlse = _run(q, kk, vv, causal, device, **kwargs)
            key_ids, query_ids = mask_ids(kwargs.get("key_padding_mask"), kwargs.get("segment_ids"))
            masks = dict(kv_lens=kwargs.get("kv_lens"), key_ids=key_ids, query_ids=query_ids)
            _check_grads(got, q, kk.nan_to_num(), vv.nan_to_num(), do, dlse, causal, dtype, **masks)
            for g in got[1:]:
                assert (g.transpose(1, 2)[hidden] == 0).all(), f"{kwargs}: a hidden key has a gradient"


def test_gradcheck_through_the_kernels(device):
    """Finite differences of the kernels' forward against the kernels' backward, float64, through
    O and lse, strict (a fallback fails): causal GQA, then kv_lens with a key-padding mask."""
    _skip_fp64(torch.float64, device)
    q, k, v = _leaves(1, 4, 2, 18, 21, 16, torch.float64, device)
    padding = torch.ones(1, 21, dtype=torch.bool, device=device)
    padding[0, 4:7] = False
    with tfg.strict():
        fn = lambda q, k, v: flash_attention(q, k, v, causal=True, return_lse=True)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (q, k, v), fast_mode=True)
        assert tfg.last_path(OP) == _kernel_path(device)
        lens = torch.tensor([17], device=device)
        fn = lambda q, k, v: flash_attention(q, k, v, kv_lens=lens, key_padding_mask=padding, return_lse=True)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (q, k, v), fast_mode=True)
        assert tfg.last_path(OP) == _kernel_path(device)


def test_double_backward_takes_the_reference(device):
    """create_graph: the differentiable reference backward (reason ``autograd``; strict refuses
    it), so the second derivative is exact."""
    _skip_fp64(torch.float64, device)
    q, k, v = _leaves(1, 2, 1, 9, 13, 16, torch.float64, device)

    routes = []

    def grad_norm(attend):
        (dq,) = torch.autograd.grad(attend(q, k, v)[0].pow(2).sum(), q, create_graph=True)
        routes.append(tfg.last_route(OP) if attend is ours else None)
        return torch.autograd.grad(dq.pow(2).sum(), (q, k, v))  # through dO = 2 O too: the kernels, once

    ours = lambda q, k, v: flash_attention(q, k, v, causal=True, return_lse=True)  # noqa: E731
    with tfg.strict(), pytest.raises(tfg.FallbackError, match="create_graph"):
        grad_norm(ours)
    with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="create_graph"):
        got = grad_norm(ours)
    assert routes[-1].reason == "autograd"
    assert tfg.last_path(OP) == _kernel_path(device)
    expected = grad_norm(lambda q, k, v: flash_attention_ref(q, k, v, True, upcast=True))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)
    with tfg.strict(False), warnings.catch_warnings():
        warnings.simplefilter("ignore", tfg.FallbackWarning)
        assert torch.autograd.gradgradcheck(lambda q, k, v: flash_attention(q, k, v, causal=True), (q, k, v), fast_mode=True)


def test_fallback_is_loud_and_right(device, monkeypatch):
    """When no tile fits, strict mode refuses the reference; otherwise it warns, records the reason
    and its gradients are right."""
    monkeypatch.setattr(attention_backward, "plan", lambda *args: None)
    q, k, v = _leaves(1, 2, 1, 11, 13, 16, torch.float32, device)
    with tfg.strict(), pytest.raises(tfg.FallbackError, match="no backward tile"):
        flash_attention(q, k, v, causal=True).sum().backward()
    do = torch.randn(q.shape, device=device)
    with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="no backward tile"):
        got = torch.autograd.grad(flash_attention(q, k, v, causal=True), (q, k, v), do)
    assert tfg.last_route(OP).reason == "unsupported"
    _check_grads(got, q, k, v, do, None, True, torch.float32)


def test_empty(device):
    for shape in ((1, 2, 1, 0, 5, 16), (1, 2, 1, 4, 0, 16)):
        q, k, v = _leaves(*shape, torch.float32, device)
        with tfg.strict():
            got = torch.autograd.grad(flash_attention(q, k, v, causal=True).sum(), (q, k, v), allow_unused=True)
        assert tfg.last_route(OP).reason == "empty"
        for g, t in zip(got, (q, k, v), strict=True):
            assert g is None or (g.shape == t.shape and (g == 0).all())


def test_compile_aot_eager_backward(device):
    """Dynamo + AOTAutograd: the backward operator in the compiled graph runs the kernels."""
    q, k, v = _leaves(2, 4, 2, 19, 33, 16, torch.float32, device)

    def model(q, k, v):
        return flash_attention(q * 2.0, k, v, causal=True).sin() + 1.0

    torch._dynamo.reset()
    with tfg.strict():
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
        got = torch.autograd.grad(compiled(q, k, v).pow(2).sum(), (q, k, v))
        assert tfg.last_path(OP) == _kernel_path(device)
        expected = torch.autograd.grad(model(q, k, v).pow(2).sum(), (q, k, v))
    torch._dynamo.reset()
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


# ----------------------------------------------------------------------------------------------
# GPU only: the real tiles at model sizes, beside SDPA's backward
# ----------------------------------------------------------------------------------------------


def _sdpa_grads(q, k, v, causal, do):
    from torch.nn.attention.bias import causal_lower_right

    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    mask = causal_lower_right(q.shape[2], k.shape[2]) if causal else None
    o = torch.nn.functional.scaled_dot_product_attention(*leaves, attn_mask=mask, enable_gqa=True)
    return torch.autograd.grad(o, leaves, do)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(2, 8, 2, 1024, 1024, 128), (1, 4, 4, 777, 1333, 64), (2, 4, 1, 333, 200, 80), (1, 2, 2, 257, 257, 256)],
                         ids=str)  # fmt: skip
def test_gpu_beside_sdpa(shape, causal, dtype):
    """Each gradient's error against float64 at most twice SDPA's own (plus a few roundings)."""
    _skip_unsupported(dtype, "cuda")
    q, k, v = _leaves(*shape, dtype, "cuda")
    do = torch.randn(q.shape, dtype=dtype, device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        got = torch.autograd.grad(flash_attention(q, k, v, causal=causal), (q, k, v), do)
    assert tfg.last_path(OP) == "triton"
    expected = flash_attention_bwd_ref(do, q.detach(), k.detach(), v.detach(), causal, upcast=True)
    theirs = _sdpa_grads(q, k, v, causal, do)
    for name, g, e, s in zip(("dq", "dk", "dv"), got, expected, theirs, strict=True):
        assert not g.isnan().any(), name
        floor = 4 * torch.finfo(dtype).eps
        assert max_rel_error(g, e) <= 2 * max_rel_error(s, e) + floor, (name, max_rel_error(g, e), max_rel_error(s, e))


@pytest.mark.gpu
def test_gpu_masks():
    q, k, v = _leaves(2, 8, 2, 300, 300, 128, torch.bfloat16, "cuda")
    padding = torch.ones(2, 300, dtype=torch.bool, device="cuda")
    padding[1, :77] = False
    lens = torch.tensor([300, 211], device="cuda")
    got, do, dlse = _run(q, k, v, True, "cuda", key_padding_mask=padding, kv_lens=lens)
    key_ids, query_ids = mask_ids(padding)
    expected = flash_attention_bwd_ref(do, q.detach(), k.detach(), v.detach(), True, dlse=dlse, upcast=True, kv_lens=lens,
                                       key_ids=key_ids, query_ids=query_ids)  # fmt: skip
    for g, e in zip(got, expected, strict=True):
        assert max_rel_error(g, e) <= 2e-2


def _direct_backward(q, k, v, causal, p, **masks):
    """The forward's (O, lse) and the backward kernels launched directly under plan ``p``, against
    the float64 reference: ``(grads, expected)``."""
    key_ids, query_ids = mask_ids(masks.pop("key_padding_mask", None))
    q, k, v = (t.detach() for t in (q, k, v))
    do = torch.randn(q.shape, dtype=q.dtype, device=q.device)
    o, lse = flash_attention_ref(q, k, v, causal, key_ids=key_ids, query_ids=query_ids, **masks)
    got = attention_backward.flash_attention_bwd(do, None, q, k, v, o.to(q.dtype), lse, causal, q.shape[-1] ** -0.5, p,
                                                 key_ids=key_ids, query_ids=query_ids, **masks)  # fmt: skip
    expected = flash_attention_bwd_ref(do, q, k, v, causal, upcast=True, key_ids=key_ids, query_ids=query_ids, **masks)
    return got, expected


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(2, 4, 2, 37, 53, 16), (1, 2, 1, 40, 29, 32), (1, 3, 3, 17, 17, 24)], ids=str)
def test_atomic_dq_order(shape, causal, device):
    """FlashAttention-2's other order (``BackwardPlan.dq_atomic``: dq added from the dK/dV loop with
    atomics, no dQ kernel) gives the same gradients, GQA and padded head dims included; with
    padding and kv_lens too."""
    q, k, v = _leaves(*shape, torch.float32, device)
    p = attention_backward.plan(shape[-1], torch.float32, torch.device(device))._replace(dq_atomic=True)
    got, expected = _direct_backward(q, k, v, causal, p)
    for name, g, e in zip(("dq", "dk", "dv"), got, expected, strict=True):
        assert g.dtype == torch.float32 and not g.isnan().any(), name
        assert max_rel_error(g, e) <= TOLERANCE[torch.float32], f"{name}: {max_rel_error(g, e):.2e}"
    B, Nk = shape[0], shape[4]
    padding = torch.ones(B, Nk, dtype=torch.bool, device=device)
    padding[-1, : Nk // 3] = False
    lens = torch.full((B,), Nk - 5, device=device, dtype=torch.int32)
    got, expected = _direct_backward(q, k, v, causal, p, key_padding_mask=padding, kv_lens=lens)
    for name, g, e in zip(("dq", "dk", "dv"), got, expected, strict=True):
        assert max_rel_error(g, e) <= TOLERANCE[torch.float32], f"{name} (masks): {max_rel_error(g, e):.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_atomic_dq_order(causal):
    q, k, v = _leaves(2, 8, 2, 1000, 1537, 128, torch.bfloat16, "cuda")
    p = attention_backward.plan(128, torch.bfloat16, torch.device("cuda"))._replace(dq_atomic=True)
    got, expected = _direct_backward(q, k, v, causal, p)
    for g, e in zip(got, expected, strict=True):
        assert max_rel_error(g, e) <= 2e-2


# ----------------------------------------------------------------------------------------------
# Compile-only, no GPU needed: the kernels build for an H200 and a T4
# ----------------------------------------------------------------------------------------------


def test_kernels_compile_for_h200_and_t4():
    """The three kernels compile for sm_90 and sm_75 with the tiles ``plan`` picks there, within each
    device's shared memory (scripts/attention_backward_compile_probe.py)."""
    if tuple(int(part) for part in triton.__version__.split(".")[:2]) < (3, 6):
        pytest.skip(f"the probe uses the ASTSource API of Triton >= 3.6 (this is {triton.__version__})")
    root = pathlib.Path(__file__).resolve().parents[2]
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, str(root / "scripts" / "attention_backward_compile_probe.py"), "--quick"], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("\nok ") == 2, done.stdout
