"""The Hopper prefill kernel (``tritonforge.ops.gpu.attention``): when the plan routes to it, and on
an sm_90 GPU, that it is right wherever the portable kernel is (awkward N, Nq != Nk, GQA, causal,
kv_lens, key padding, packed sequences, the ``[B, N, H, D]`` layout, CUDA graphs, compile), and
that strides the copy engine refuses go to the portable kernel instead.

On the CPU only the routing is checked (the kernel compiles for sm_90 in
``test_attention.py::test_kernels_compile_for_h200_and_t4``); outputs are poisoned with NaN first.
"""

from __future__ import annotations

import pytest
import torch

import tritonforge as tfg
from tritonforge import hardware
from tritonforge.ops import attention as attention_module
from tritonforge.ops import attention_decode, attention_prefill
from tritonforge.ops.attention import flash_attention, last_plan
from tritonforge.ops.gpu import attention as hopper
from tritonforge.reference import flash_attention_ref

from ..helpers import dtype_name as _name
from ..helpers import nan_empty
from .test_attention import _assert_graph_replays, _check, _inputs, _sliced_oracle
from .test_attention_masks import _oracle, _padding, _poison, _visible


@pytest.fixture(autouse=True)
def _seed_and_poison(monkeypatch):
    torch.manual_seed(0)
    monkeypatch.setattr(attention_prefill, "_empty", nan_empty)
    monkeypatch.setattr(attention_decode, "_empty", nan_empty)


def _on_hopper() -> bool:
    return torch.cuda.is_available() and hopper.available(torch.device("cuda"))


def test_plan_routes_only_what_the_kernel_serves():
    """With ``hopper=True`` (an sm_90 GPU, 16-bit) prefill shapes of a head dim in HOPPER_TILES take
    the Hopper plan; the other head dims (128: the portable kernel measured as fast) and decode
    shapes keep their paths."""
    shared, sms = 232448, 132
    assert 64 in hopper.HOPPER_TILES and 128 not in hopper.HOPPER_TILES
    for D in hopper.HEAD_DIMS:
        p = attention_module._plan_cached(2, 8, 4096, D, 2, 4096, 2, shared, sms, True)
        assert p == (hopper.hopper_plan(D) or attention_prefill.prefill_plan(D, 2, shared))
        assert p.strategy.startswith("hopper") == (D in hopper.HOPPER_TILES)
        assert attention_module._plan_cached(2, 8, 4096, D, 2, 4096, 2, shared, sms, False).strategy == "prefill"
    assert attention_module._plan_cached(2, 32, 1, 64, 8, 4096, 2, shared, sms, True).strategy == "decode"
    assert not hopper.available(torch.device("cpu"))


def test_eligible_strides():
    """The copy engine needs 16-byte aligned rows: a contiguous tensor and the ``[B, N, H, D]``
    view pass; a head dim outside HEAD_DIMS, float32, an odd row stride or a misaligned base fail."""
    x = torch.empty(2, 4, 33, 128, dtype=torch.bfloat16)
    assert hopper.eligible(x, x.transpose(1, 2).contiguous().transpose(1, 2))
    assert not hopper.eligible(torch.empty(2, 4, 33, 80, dtype=torch.bfloat16))
    assert not hopper.eligible(x.float())
    assert not hopper.eligible(torch.empty(2, 4, 33, 129, dtype=torch.bfloat16)[..., :128])  # row stride 258 bytes
    assert not hopper.eligible(torch.empty(2 * 4 * 33 * 128 + 1, dtype=torch.bfloat16)[1:].view(2, 4, 33, 128))


needs_hopper = pytest.mark.skipif(not _on_hopper(), reason="needs an sm_90 GPU (H100/H200) with Triton's tensor descriptors")

SHAPES = [(2, 8, 8, 2048, 2048, 64), (3, 8, 2, 1000, 1537, 64), (2, 4, 1, 333, 4099, 64), (1, 4, 4, 17, 17, 64),
          (2, 8, 2, 129, 100, 64), (1, 32, 8, 4097, 4097, 64)]  # fmt: skip


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=_name)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_gpu_hopper_matches_reference(shape, causal, dtype):
    q, k, v = _inputs(*shape, dtype=dtype, device="cuda")
    _check(q, k, v, causal, expected_strategy=hopper.hopper_plan(shape[-1]).strategy)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("plan", [("hopper", 128, 128, 8, 3), ("hopper-ws", 128, 128, 8, 3), ("hopper", 128, 64, 4, 3)], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_hopper_kernel_at_head_dim_128(plan, causal):
    """D = 128 is not routed to the Hopper kernel (the portable one measured as fast), but the
    sweep runs it there: its plans, warp-specialized too, against float64 at awkward N and GQA."""
    q, k, v = _inputs(2, 8, 2, 1000, 1537, 128, dtype=torch.bfloat16, device="cuda")
    o, lse = attention_module.flash_attention_fwd(q, k, v, causal, 128**-0.5, attention_prefill.Plan(*plan))
    o64, lse64 = flash_attention_ref(q, k, v, causal, upcast=True)
    assert (o.double() - o64).abs().max() / o64.abs().max() < 2e-2
    torch.testing.assert_close(lse.double(), lse64, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
@needs_hopper
def test_gpu_hopper_layouts_and_fallback():
    """``[B, N, H, D]`` memory read in place through the Hopper kernel (O in that layout); a
    misaligned base pointer takes the portable kernel, with the same answer."""
    B, H, N, D = 2, 8, 300, 64
    q, k, v = (torch.randn(B, N, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    o, _ = _check(q, k, v, True, expected_strategy=hopper.hopper_plan(D).strategy)
    assert o.stride() == q.stride()
    flat = torch.randn(B * H * N * D + 1, device="cuda", dtype=torch.bfloat16)
    q2 = flat[1:].view(B, H, N, D)  # 2-byte offset: no TMA
    o2, _ = _check(q2, k.contiguous(), v.contiguous(), True)
    assert last_plan().strategy == "prefill"


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kind", ["left", "holes"])
def test_gpu_hopper_masks(kind, causal):
    """Key padding (left, and holes with a row that sees nothing), a static cache's kv_lens, and
    packed sequences, through the Hopper kernel, against float64 on NaN-poisoned keys."""
    B, Hq, Hkv, Nq, Nk, D = 4, 4, 2, 200, 200, 64
    q, k, v = (t.to(torch.bfloat16) for t in _inputs(B, Hq, Hkv, Nq, Nk, D, device="cuda"))
    mask = _padding(B, Nk, kind)
    seen = _visible(B, Nq, Nk, causal, key_padding_mask=mask)
    expected, _ = _oracle(q, k, v, seen)
    k, v = _poison(k, v, seen)
    with tfg.strict():
        o = flash_attention(q, k, v, causal=causal, key_padding_mask=mask.cuda())
    assert last_plan().strategy.startswith("hopper")
    assert not o.isnan().any()
    torch.testing.assert_close(o.double(), expected, rtol=2e-2, atol=2e-2)
    lens = torch.tensor([200, 0, 131, 64], device="cuda", dtype=torch.int32)
    with tfg.strict():
        o = flash_attention(q, k.nan_to_num(), v.nan_to_num(), causal=causal, kv_lens=lens)
    assert last_plan().strategy.startswith("hopper")
    torch.testing.assert_close(o.double(), _sliced_oracle(q, k.nan_to_num(), v.nan_to_num(), causal, lens)[0], rtol=2e-2, atol=2e-2)
    seg = torch.repeat_interleave(torch.arange(4), torch.tensor([50, 70, 1, 79])).expand(B, Nq).contiguous()
    seen = _visible(B, Nq, Nk, True, segment_ids=seg)
    with tfg.strict():
        o = flash_attention(q, k.nan_to_num(), v.nan_to_num(), causal=True, segment_ids=seg.cuda())
    torch.testing.assert_close(o.double(), _oracle(q, k.nan_to_num(), v.nan_to_num(), seen)[0], rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@needs_hopper
def test_gpu_hopper_cuda_graph_and_compile():
    """A hand-captured CUDA graph replays the Hopper kernel on fresh inputs (its descriptors'
    scratch comes from the graph's pool); ``torch.compile`` with CUDA graphs matches eager."""
    fresh = _assert_graph_replays((2, 8, 2, 1024, 1024, 64))
    assert last_plan().strategy.startswith("hopper") and hardware.device_capability(fresh[0].device)[0] == 9
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: flash_attention(q, k, v, causal=True) * 2.0, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):
        torch.testing.assert_close(compiled(*fresh), flash_attention(*fresh, causal=True) * 2.0, rtol=0, atol=0)
