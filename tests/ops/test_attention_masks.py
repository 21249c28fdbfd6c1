"""FlashAttention under the masks a Hugging Face model passes: a key-padding mask (left, right,
holes), packed sequences (segment ids), and either over a preallocated cache (``kv_lens``).

The oracle is independent of the package: for every (row, query, key) it decides visibility from
the rule written out here, and computes float64 attention over the clean keys. The kernels get
keys and values that are NaN wherever no query may see them: a padded key that leaked into any
output would poison it.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import tritonforge as tfg
from tritonforge.ops import attention as attention_module
from tritonforge.ops import attention_decode, attention_prefill
from tritonforge.ops.attention import flash_attention, last_plan, mask_ids
from tritonforge.reference import flash_attention_ref

from ..helpers import nan_empty


@pytest.fixture(autouse=True)
def _seed_and_poison(monkeypatch):
    torch.manual_seed(0)
    monkeypatch.setattr(attention_prefill, "_empty", nan_empty)
    monkeypatch.setattr(attention_decode, "_empty", nan_empty)


def _visible(B, Nq, Nk, causal, kv_lens=None, key_padding_mask=None, segment_ids=None):
    """``[B, Nq, Nk]`` bool: whether query i of row b may see key j, by the rules spelled out."""
    seen = torch.ones(B, Nq, Nk, dtype=torch.bool)
    for b in range(B):
        n = Nk if kv_lens is None else int(kv_lens[b])
        for i in range(Nq):
            for j in range(Nk):
                ok = j < n and (not causal or j <= i + n - Nq)
                if key_padding_mask is not None:
                    ok = ok and bool(key_padding_mask[b, j])
                if segment_ids is not None:
                    ok = ok and int(segment_ids[b, j]) == int(segment_ids[b, i]) and int(segment_ids[b, j]) >= 0
                seen[b, i, j] = ok
    return seen


def _oracle(q, k, v, seen):
    """Float64 attention where ``seen [B, Nq, Nk]`` allows; a query that sees nothing gets 0 and lse -inf."""
    group = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    s = (q.double() @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    s = s.masked_fill(~seen[:, None].to(q.device), float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.where(torch.isfinite(lse)[..., None], torch.exp(s - lse[..., None].nan_to_num(neginf=0.0)), 0.0)
    return p @ v, lse


def _poison(k, v, seen):
    """NaN in every key and value that no query of its row sees."""
    k, v = k.clone(), v.clone()
    unseen = ~seen.any(1)  # [B, Nk]
    for b, j in unseen.nonzero().tolist():
        k[b, :, j] = float("nan")
        v[b, :, j] = float("nan")
    return k, v


def _inputs(B, Hq, Hkv, Nq, Nk, D, device, dtype=torch.float32):
    return (torch.randn(B, Hq, Nq, D, device=device, dtype=dtype), torch.randn(B, Hkv, Nk, D, device=device, dtype=dtype),
            torch.randn(B, Hkv, Nk, D, device=device, dtype=dtype))  # fmt: skip


def _padding(B, Nk, kind):
    """A key-padding mask: left padding, right padding, or holes anywhere (a row fully padded too)."""
    mask = torch.ones(B, Nk, dtype=torch.bool)
    for b in range(B):
        cut = [0, 5, 17, Nk // 2][b % 4]
        if kind == "left":
            mask[b, :cut] = False
        elif kind == "right":
            mask[b, Nk - cut :] = False
        else:  # holes
            mask[b, torch.randperm(Nk)[: Nk // 3]] = False
    if kind == "holes":
        mask[-1] = False  # a row that sees nothing at all
    return mask


SHAPES = [(4, 4, 2, 37, 37, 16), (3, 4, 1, 20, 53, 32), (4, 8, 2, 1, 70, 16), (2, 4, 2, 5, 40, 16)]


@pytest.mark.parametrize("kind", ["left", "right", "holes"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_key_padding_mask(shape, causal, kind, monkeypatch, device):
    """Prefill (the tiled kernel) and decode (split KV, several splits) under a padding mask."""
    if device == "cpu":
        monkeypatch.setattr(attention_module, "INTERPRETER_SMS", 16)  # several decode splits
    B, Hq, Hkv, Nq, Nk, D = shape
    q, k, v = _inputs(*shape, device)
    mask = _padding(B, Nk, kind)
    seen = _visible(B, Nq, Nk, causal, key_padding_mask=mask)
    expected, expected_lse = _oracle(q, k, v, seen)
    k, v = _poison(k, v, seen)
    with tfg.strict():
        o, lse = flash_attention(q, k, v, causal=causal, return_lse=True, key_padding_mask=mask.to(device))
    assert tfg.last_path("flash_attention") != "torch"
    assert last_plan().strategy == ("decode" if Nq <= attention_decode.DECODE_MAX_QUERIES else "prefill")
    assert not o.isnan().any()
    torch.testing.assert_close(o.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), expected_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 4, 2, 1, 64, 16), (2, 2, 1, 6, 64, 16), (2, 4, 2, 24, 64, 16)], ids=str)
def test_padding_over_a_static_cache(shape, monkeypatch, device):
    """A left-padded batch in a preallocated cache: kv_lens marks the filled keys, the mask the
    padding at the front; queries sit at the end of the filled keys (bottom-right causal)."""
    if device == "cpu":
        monkeypatch.setattr(attention_module, "INTERPRETER_SMS", 16)
    B, Hq, Hkv, Nq, Nk, D = shape
    q, k, v = _inputs(*shape, device)
    lens = torch.tensor([40, 33])
    mask = torch.ones(B, Nk, dtype=torch.bool)
    mask[1, :7] = False
    mask[:, 50:] = False  # what HF passes: the 2D mask zero-padded to the buffer
    seen = _visible(B, Nq, Nk, True, kv_lens=lens, key_padding_mask=mask)
    expected, _ = _oracle(q, k, v, seen)
    k, v = _poison(k, v, seen)
    with tfg.strict():
        o = flash_attention(q, k, v, causal=True, kv_lens=lens.to(device), key_padding_mask=mask.to(device))
    torch.testing.assert_close(o.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 4, 2, 45, 45, 16), (1, 2, 1, 12, 12, 32)], ids=str)
def test_packed_sequences(shape, device):
    """Segment ids: each packed sequence attends causally within itself only; a padded tail (-1)
    is seen by no query. The decode path serves N <= 16."""
    B, Hq, Hkv, N, _, D = shape
    q, k, v = _inputs(*shape, device)
    lengths = [[7, 20, 1, 10], [16, 16, 13]] if N == 45 else [[3, 5, 2]]  # 45 - 38 and 12 - 10 padded (-1)
    seg = torch.full((B, N), -1, dtype=torch.int64)
    for b, parts in enumerate(lengths):
        seg[b, : sum(parts)] = torch.repeat_interleave(torch.arange(len(parts)), torch.tensor(parts))
    seen = _visible(B, N, N, True, segment_ids=seg)
    expected, expected_lse = _oracle(q, k, v, seen)
    k, v = _poison(k, v, seen)
    with tfg.strict():
        o, lse = flash_attention(q, k, v, causal=True, return_lse=True, segment_ids=seg.to(device))
        o32 = flash_attention(q, k, v, causal=True, segment_ids=seg.to(device, torch.int32))
    assert not o.isnan().any()
    torch.testing.assert_close(o.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), expected_lse, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(o32, o, rtol=0, atol=0)


def test_padding_and_segments_together(device):
    q, k, v = _inputs(2, 2, 1, 30, 30, 16, device)
    seg = torch.tensor([[0] * 10 + [1] * 20, [0] * 30])
    mask = torch.ones(2, 30, dtype=torch.bool)
    mask[1, :4] = False
    mask[0, 12] = False
    seen = _visible(2, 30, 30, True, key_padding_mask=mask, segment_ids=seg)
    expected, _ = _oracle(q, k, v, seen)
    k, v = _poison(k, v, seen)
    with tfg.strict():
        o = flash_attention(q, k, v, causal=True, key_padding_mask=mask.to(device), segment_ids=seg.to(device))
    torch.testing.assert_close(o.double(), expected, rtol=1e-5, atol=1e-5)


def test_reference_takes_the_same_masks(device):
    """The PyTorch reference (the fallback and the backward's forward) agrees with the oracle."""
    q, k, v = _inputs(3, 4, 2, 9, 21, 16, device, torch.float64)
    mask = _padding(3, 21, "holes")
    seen = _visible(3, 9, 21, True, key_padding_mask=mask)
    k, v = _poison(k, v, seen)  # the oracle below gets NaN too where nothing sees: masked_fill keeps it out
    key_ids, query_ids = mask_ids(mask.to(device))
    o, lse = flash_attention_ref(q, k, v, True, key_ids=key_ids, query_ids=query_ids, upcast=True)
    expected, expected_lse = _oracle(q, k.nan_to_num(), v.nan_to_num(), seen)
    torch.testing.assert_close(o, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, expected_lse, rtol=1e-12, atol=1e-12)


def test_masks_through_autograd_vmap_and_compile(device):
    """Gradients through the backward kernels equal the oracle's (zero for padded keys); vmap
    folds the mask with the batch; under compile the mask is a tensor input (one graph)."""
    q, k, v = (t.double().requires_grad_() for t in _inputs(2, 2, 1, 7, 15, 16, device))
    mask = _padding(2, 15, "left")
    seen = _visible(2, 7, 15, True, key_padding_mask=mask)
    with tfg.strict(device != "cuda" and attention_module.fp64_dot_supported()), warnings.catch_warnings():  # a GPU routes float64 to the reference
        warnings.simplefilter("ignore", tfg.FallbackWarning)
        got = torch.autograd.grad(flash_attention(q, k, v, causal=True, key_padding_mask=mask.to(device)).sum(), (q, k, v))
    assert device == "cuda" or not attention_module.fp64_dot_supported() or tfg.last_path("flash_attention_backward") == "interpreter"
    expected = torch.autograd.grad(_oracle(q, k, v, seen)[0].sum(), (q, k, v))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)
    assert (got[2][1, :, :5] == 0).all()
    q, k, v = (t.detach().float() for t in (q, k, v))
    masks = torch.stack([mask, mask.flip(0), torch.ones_like(mask)]).to(device)
    with tfg.strict():
        mapped = torch.func.vmap(lambda m: flash_attention(q, k, v, causal=True, key_padding_mask=m))(masks)
    for i in range(3):
        want, _ = _oracle(q, k, v, _visible(2, 7, 15, True, key_padding_mask=masks[i].cpu()))
        torch.testing.assert_close(mapped[i].double(), want, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True), tfg.strict():
        compiled = torch.compile(lambda q, m: flash_attention(q, k, v, causal=True, key_padding_mask=m) * 2.0, fullgraph=True,
                                 backend="aot_eager")  # fmt: skip
        for m in (masks[0], masks[1]):
            torch.testing.assert_close(compiled(q, m), flash_attention(q, k, v, causal=True, key_padding_mask=m) * 2.0, rtol=0, atol=0)
    torch._dynamo.reset()


def test_mask_bad_inputs(device):
    q, k, v = _inputs(2, 4, 2, 3, 30, 16, device)
    with pytest.raises(TypeError, match="key_padding_mask must be bool"):
        flash_attention(q, k, v, key_padding_mask=torch.ones(2, 30, device=device))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \[B, Nk\] = \[2, 30\]"):
        flash_attention(q, k, v, key_padding_mask=torch.ones(2, 3, dtype=torch.bool, device=device))
    with pytest.raises(ValueError, match="key_padding_mask is on meta"):
        flash_attention(q, k, v, key_padding_mask=torch.ones(2, 30, dtype=torch.bool, device="meta"))
    with pytest.raises(TypeError, match="key_padding_mask must be a tensor"):
        flash_attention(q, k, v, key_padding_mask=[[True] * 30] * 2)
    with pytest.raises(ValueError, match="segment_ids needs as many queries as keys"):
        flash_attention(q, k, v, segment_ids=torch.zeros(2, 3, dtype=torch.int64, device=device))
    q2 = torch.randn(2, 4, 30, 16, device=device)
    with pytest.raises(TypeError, match="segment_ids must be int32 or int64"):
        flash_attention(q2, k, v, segment_ids=torch.zeros(2, 30, device=device))
    with pytest.raises(ValueError, match=r"segment_ids must have shape \[B, N\] = \[2, 30\]"):
        flash_attention(q2, k, v, segment_ids=torch.zeros(2, 29, dtype=torch.int32, device=device))
