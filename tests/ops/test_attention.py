"""FlashAttention forward: both paths (prefill tiles, split-KV decode) against float64, and how
the op composes with PyTorch (compile, autograd through the backward kernels, vmap).

Outputs, lse and the decode path's partial buffers are poisoned with NaN before the kernels run.
On the CPU the interpreter's 16 x 16 tiles make small sequences cross block edges, key tails and
the causal diagonal; the GPU tests run the real tiles at model sizes, beside SDPA.
"""

from __future__ import annotations

import math
import os
import pathlib
import subprocess
import sys
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import tritonforge as tfg
from tritonforge import runtime
from tritonforge._triton import triton
from tritonforge.ops import attention as attention_module
from tritonforge.ops import attention_decode, attention_prefill
from tritonforge.ops.attention import flash_attention, last_plan, plan
from tritonforge.reference import flash_attention_bwd_ref, flash_attention_ref

from ..helpers import budget as _budget
from ..helpers import dtype_name as _name
from ..helpers import nan_empty
from ..helpers import skip_unsupported as _skip_unsupported

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]

# (B, Hq, Hkv, Nq, Nk, D): prefill with GQA and a padded head dim, more queries than keys, MQA
# with batch 3, and decode-sized query counts (<= 16) with GQA groups packed into one tile.
PREFILL = [(2, 4, 2, 37, 53, 24), (1, 2, 2, 53, 37, 32), (3, 3, 1, 33, 33, 16), (1, 1, 1, 17, 64, 64)]
DECODE = [(2, 8, 2, 1, 77, 32), (1, 4, 4, 5, 100, 64), (2, 6, 3, 16, 40, 16), (1, 2, 1, 3, 2, 16)]


@pytest.fixture(autouse=True)
def _seed_and_poison(monkeypatch):
    torch.manual_seed(0)
    monkeypatch.setattr(attention_prefill, "_empty", nan_empty)
    monkeypatch.setattr(attention_decode, "_empty", nan_empty)


def _inputs(B, Hq, Hkv, Nq, Nk, D, dtype=torch.float32, device="cpu", scale=1.0):
    q = torch.randn(B, Hq, Nq, D, dtype=dtype, device=device) * scale
    k = torch.randn(B, Hkv, Nk, D, dtype=dtype, device=device) * scale
    v = torch.randn(B, Hkv, Nk, D, dtype=dtype, device=device)
    return q, k, v


def _eager_lowp(q, k, v, causal, sm_scale=None):
    """Hugging Face's eager attention in the input dtype: scores rounded to it, softmax in float32
    rounded back, ``P @ v`` in the input dtype. The baseline of the error budget."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if sm_scale is None else sm_scale)
    if causal:
        Nq, Nk = q.shape[-2], k.shape[-2]
        keep = torch.ones(Nq, Nk, dtype=torch.bool, device=q.device).tril(Nk - Nq)
        s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s.float(), dim=-1).nan_to_num(0.0).to(q.dtype)  # a row with no key: 0
    return p @ v


def _skip_fp64_without_dot(dtype, device):
    if dtype == torch.float64 and device == "cuda":
        pytest.skip("float64 runs the kernels on the interpreter only")
    if dtype == torch.float64 and not attention_module.fp64_dot_supported():
        pytest.skip(f"Triton {triton.__version__}'s interpreter has no float64 tl.dot (the op routes such calls)")


def _check(q, k, v, causal, expected_strategy=None, sm_scale=None):
    with tfg.strict():
        o, lse = flash_attention(q, k, v, causal=causal, sm_scale=sm_scale, return_lse=True)
    assert tfg.last_path("flash_attention") in ("triton", "interpreter")
    if expected_strategy is not None:
        assert last_plan().strategy == expected_strategy
    assert o.shape == q.shape and o.dtype == q.dtype
    o64, lse64 = flash_attention_ref(q, k, v, causal, sm_scale, upcast=True)
    _budget(o, o64, _eager_lowp(q, k, v, causal, sm_scale), "O")
    seen = torch.isfinite(lse64)
    assert torch.equal(torch.isfinite(lse), seen), "lse is -inf exactly where a query sees no key"
    assert (lse[~seen] == -float("inf")).all()
    if seen.any():  # lse's budget: PyTorch's own logsumexp of the scores in the accumulator's dtype
        # The kernel's lse is (m + log2 l)·ln 2 in base 2 (lg2.approx on a GPU): a few roundings
        # where PyTorch's logsumexp makes one.
        _budget(lse[seen], lse64[seen], flash_attention_ref(q, k, v, causal, sm_scale)[1][seen], "lse", roundings=4)
    return o, lse


@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", PREFILL + DECODE, ids=str)
def test_matches_reference(shape, causal, dtype, device):
    _skip_unsupported(dtype, device)
    _skip_fp64_without_dot(dtype, device)
    expected = "decode" if shape[3] <= attention_decode.DECODE_MAX_QUERIES else "prefill"
    _check(*_inputs(*shape, dtype=dtype, device=device), causal, expected)


def test_rows_with_no_key_are_zero(device):
    """Causal with Nq > Nk: the first Nq - Nk queries see no key: O = 0, lse = -inf (FlashAttention-2),
    on both paths; the other rows are exact."""
    for shape in [(1, 2, 1, 40, 21, 16), (2, 2, 2, 7, 3, 16)]:  # prefill, decode
        o, lse = _check(*_inputs(*shape, device=device), True)
        empty = shape[3] - shape[4]
        assert (o[:, :, :empty] == 0).all() and (lse[:, :, :empty] == -float("inf")).all()


def test_large_scores_do_not_overflow(device):
    """Scores around ±1e3 (exp overflows without the running max)."""
    for shape in (PREFILL[0], DECODE[0]):
        _check(*_inputs(*shape, device=device, scale=6.0), causal=True)
        _check(*_inputs(*shape, device=device), causal=False, sm_scale=40.0)


def test_decode_merges_many_splits(monkeypatch, device):
    """More SMs than the interpreter counts: a split per key block, some splits past the causal
    diagonal of some rows (their partial lse is -inf)."""
    if device == "cpu":
        monkeypatch.setattr(attention_module, "INTERPRETER_SMS", 64)
    q, k, v = _inputs(1, 4, 2, 9, 150, 32, device=device)
    _check(q, k, v, True, "decode")
    assert device == "cuda" or last_plan().splits == math.ceil(150 / attention_prefill.INTERPRETER_BLOCK)


def test_layouts_read_in_place(device):
    """[B, N, H, D] memory through transpose(1, 2) (the output keeps that layout), heads sliced
    out of a packed qkv projection, and a strided head dimension (copied)."""
    B, N, H, D = 2, 45, 4, 32
    q, k, v = (torch.randn(B, N, H, D, device=device).transpose(1, 2) for _ in range(3))
    o, _ = _check(q, k, v, True)
    assert o.transpose(1, 2).is_contiguous()
    qkv = torch.randn(B, N, 3, H, D, device=device)  # one projection, three slices
    _check(*(qkv[:, :, i].transpose(1, 2) for i in range(3)), False)
    wide = torch.randn(B, H, N, 2 * D, device=device)
    _check(wide[..., ::2], wide[..., 1::2], torch.randn(B, H, N, D, device=device), False)  # head dim stride 2
    _check(*(torch.randn(1, 1, 1, D, device=device) for _ in range(3)), True)  # one query, one key


def test_plan():
    """The path by shape, and tiles from the device's shared memory (H200: 227 KB, T4: 64 KB)."""
    cpu = torch.device("cpu")
    assert plan((4, 32, 2048, 128), (4, 8, 2048, 128), torch.bfloat16, cpu).strategy == "prefill"
    p = plan((1, 32, 1, 128), (1, 8, 4096, 128), torch.bfloat16, cpu)
    assert p.strategy == "decode" and p.block_m == 16 and p.splits * p.chunk >= 4096
    assert plan((1, 32, 17, 128), (1, 8, 4096, 128), torch.bfloat16, cpu).strategy == "prefill"  # 17 queries
    assert plan((1, 64, 16, 128), (1, 1, 4096, 128), torch.bfloat16, cpu).strategy == "prefill"  # 1024 rows per KV head
    h200 = attention_module._plan_cached(4, 32, 4096, 128, 8, 4096, 2, 232448, 132)
    assert (h200.block_m, h200.block_n) == attention_prefill.PREFILL_TILES[0][:2]
    t4 = attention_module._plan_cached(4, 32, 4096, 128, 8, 4096, 2, 65536, 40)
    assert attention_prefill._tile_bytes(t4.block_m, t4.block_n, 128, t4.num_stages, 2) <= 65536
    decode = attention_module._plan_cached(1, 32, 1, 128, 8, 32768, 2, 232448, 132)
    assert decode.splits * 8 <= 132 < decode.splits * 8 / 0.95 and decode.splits <= attention_decode.MAX_SPLITS  # one full wave
    assert (decode.splits - 1) * decode.chunk < 32768 <= decode.splits * decode.chunk  # no empty split
    assert attention_module._plan_cached(32, 32, 1, 128, 8, 32768, 2, 232448, 132).splits == 1  # 256 heads: one split
    # Key blocks of 128 for chunks of >= 512 keys where 3 stages fit (H200); 64 on a T4 or for short chunks.
    wide = attention_module._plan_cached(64, 32, 1, 128, 8, 1000, 2, 232448, 132)
    assert (wide.block_n, wide.splits, wide.chunk) == (128, 1, 1024)
    assert attention_module._plan_cached(1, 32, 1, 128, 8, 8192, 2, 232448, 132)[2:] == (128, 4, 3, 16, 512)
    assert attention_module._plan_cached(1, 32, 1, 128, 8, 4096, 2, 232448, 132).block_n == 64  # 16 chunks of 256 keys
    assert attention_module._plan_cached(64, 32, 1, 128, 8, 4096, 2, 65536, 40).block_n < 128  # a T4: 3 stages of 128 keys > 64 KB
    for nk in (1, 511, 512, 1000, 5000, 32768, 100003):
        for b in (1, 8, 64):
            p = attention_module._plan_cached(b, 32, 1, 128, 8, nk, 2, 232448, 132)
            assert p.chunk % p.block_n == 0 and (p.splits - 1) * p.chunk < nk <= p.splits * p.chunk, (b, nk, p)
    for heads in range(1, 140):  # whole waves: the busiest SM sets a memory-bound kernel's time
        splits, chunk = attention_decode._decode_splits(heads, 512, 132)
        assert (splits - 1) * chunk < 512 <= splits * chunk and splits <= attention_decode.MAX_SPLITS
        programs = splits * heads
        assert splits == 1 if heads >= 132 else programs / (132 * -(-programs // 132)) >= 0.9, heads


@pytest.mark.parametrize("shape", [(0, 2, 5, 16), (2, 2, 0, 16)], ids=str)
def test_empty_input(shape, device):
    q = torch.randn(shape, device=device)
    k = torch.randn(shape[0], 2, 7, 16, device=device)
    o = flash_attention(q, k, k)
    assert o.shape == q.shape and tfg.last_route("flash_attention").reason == "empty"


def test_no_keys_at_all(device):
    q = torch.randn(2, 2, 5, 16, device=device)
    kv = torch.randn(2, 1, 0, 16, device=device)
    o, lse = flash_attention(q, kv, kv, return_lse=True)
    assert (o == 0).all() and (lse == -float("inf")).all() and tfg.last_route("flash_attention").reason == "empty"


def test_bad_inputs(device):
    q, k, v = _inputs(1, 4, 2, 8, 8, 16, device=device)
    with pytest.raises(TypeError, match="q"):
        flash_attention(q.tolist(), k, v)
    with pytest.raises(ValueError, match="q must be 4-D"):
        flash_attention(q[0], k, v)
    with pytest.raises(TypeError, match="k has dtype int64"):
        flash_attention(q, k.long(), v)
    with pytest.raises(TypeError, match="v has dtype float16"):
        flash_attention(q, k, v.half())
    with pytest.raises(ValueError, match="v has shape"):
        flash_attention(q, k, v[:, :, :5])
    with pytest.raises(ValueError, match="batch"):
        flash_attention(q, k[:0], v[:0])
    with pytest.raises(ValueError, match="head dim"):
        flash_attention(q, k[..., :8], v[..., :8])
    with pytest.raises(ValueError, match="divide the query heads"):
        flash_attention(q[:, :3], k, v)
    with pytest.raises(TypeError, match="causal"):
        flash_attention(q, k, v, causal=1)
    with pytest.raises(TypeError, match="sm_scale"):
        flash_attention(q, k, v, sm_scale="0.1")
    with pytest.raises(ValueError, match="sm_scale"):
        flash_attention(q, k, v, sm_scale=float("nan"))
    with pytest.raises(TypeError, match="return_lse"):
        flash_attention(q, k, v, return_lse="no")


# ----------------------------------------------------------------------------------------------
# kv_lens: a preallocated KV cache whose filled length lives on the device
# ----------------------------------------------------------------------------------------------


def _sliced_oracle(q, k, v, causal, lens):
    """Per batch row, the float64 reference over that row's first ``lens[b]`` keys only: the
    oracle never sees the buffer's tail."""
    outs, lses = [], []
    for b, n in enumerate(lens.tolist()):
        o, lse = flash_attention_ref(q[b : b + 1], k[b : b + 1, :, :n], v[b : b + 1, :, :n], causal, upcast=True)
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(4, 4, 2, 1, 90, 32), (3, 8, 2, 3, 70, 16), (3, 2, 1, 20, 64, 16)], ids=str)
def test_kv_lens_reads_only_the_filled_keys(shape, causal, monkeypatch, device):
    """Batch rows of different lengths in one buffer, lengths 0 and full included; the tail of the
    buffer is NaN (a key past the length that leaked in would poison the row). Decode (several
    splits, some past every length) and prefill."""
    if device == "cpu":
        monkeypatch.setattr(attention_module, "INTERPRETER_SMS", 16)  # several decode splits
    B, Hq, Hkv, Nq, Nk, D = shape
    q, k, v = _inputs(*shape, device=device)
    lens = torch.tensor([Nk, 0, 37, 17][:B], device=device, dtype=torch.int32)
    for b, n in enumerate(lens.tolist()):
        k[b, :, n:] = float("nan")
        v[b, :, n:] = float("nan")
    with tfg.strict():
        o, lse = flash_attention(q, k, v, causal=causal, return_lse=True, kv_lens=lens)
        o64 = flash_attention(q, k, v, causal=causal, kv_lens=lens.long())  # int64 lengths too
    assert last_plan().strategy == ("decode" if Nq <= attention_decode.DECODE_MAX_QUERIES else "prefill")
    assert last_plan().strategy != "decode" or device == "cuda" or last_plan().splits > 1
    expected, expected_lse = _sliced_oracle(q, k, v, causal, lens)
    assert not o.isnan().any()
    torch.testing.assert_close(o.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(o64, o, rtol=0, atol=0)
    torch.testing.assert_close(lse.double(), expected_lse, rtol=1e-5, atol=1e-5)  # -inf where a row has no key
    ref_o, ref_lse = flash_attention_ref(q, k, v, causal, kv_lens=lens, upcast=True)  # the reference's own kv_lens
    torch.testing.assert_close(ref_o, expected.nan_to_num(), rtol=1e-12, atol=1e-12)


def test_kv_lens_gradients_and_vmap(device):
    """The backward kernels honour kv_lens: gradients equal those of the sliced oracle and are
    zero for keys past the length; vmap folds the lengths with the batch."""
    q, k, v = _leaves((2, 2, 1, 3, 20, 16), device)
    lens = torch.tensor([20, 9], device=device)
    with tfg.strict(device != "cuda" and attention_module.fp64_dot_supported()), warnings.catch_warnings():  # a GPU routes float64 to the reference
        warnings.simplefilter("ignore", tfg.FallbackWarning)
        got = torch.autograd.grad(flash_attention(q, k, v, causal=True, kv_lens=lens).sum(), (q, k, v))
    assert device == "cuda" or not attention_module.fp64_dot_supported() or tfg.last_path("flash_attention_backward") == "interpreter"
    expected = torch.autograd.grad(_sliced_oracle(q, k, v, True, lens)[0].sum(), (q, k, v))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)
    assert (got[1][1, :, 9:] == 0).all() and (got[2][1, :, 9:] == 0).all()
    q, k, v = (t.detach().float() for t in (q, k, v))
    many = torch.stack([lens, lens.flip(0), lens // 2])
    with tfg.strict():
        mapped = torch.func.vmap(lambda n: flash_attention(q, k, v, causal=True, kv_lens=n))(many)
    for i in range(3):
        torch.testing.assert_close(mapped[i].double(), _sliced_oracle(q, k, v, True, many[i])[0], rtol=1e-5, atol=1e-5)


def test_kv_lens_under_compile(device):
    """The lengths are a tensor input of the op's node: one graph serves every length."""
    q, k, v = _inputs(2, 4, 2, 1, 40, 16, device=device)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True), tfg.strict():
        compiled = torch.compile(lambda q, n: flash_attention(q, k, v, causal=True, kv_lens=n) * 2.0, fullgraph=True, backend="aot_eager")
        for n in ([40, 3], [1, 39]):
            lens = torch.tensor(n, device=device)
            torch.testing.assert_close(compiled(q, lens), flash_attention(q, k, v, causal=True, kv_lens=lens) * 2.0, rtol=0, atol=0)
    torch._dynamo.reset()


def test_kv_lens_bad_inputs(device):
    q, k, v = _inputs(2, 4, 2, 1, 30, 16, device=device)
    with pytest.raises(TypeError, match="kv_lens must be a tensor"):
        flash_attention(q, k, v, kv_lens=[3, 4])
    with pytest.raises(TypeError, match="kv_lens must be int32 or int64"):
        flash_attention(q, k, v, kv_lens=torch.tensor([3.0, 4.0], device=device))
    with pytest.raises(ValueError, match=r"kv_lens must have shape \[B\] = \[2\]"):
        flash_attention(q, k, v, kv_lens=torch.tensor([3], device=device))
    with pytest.raises(ValueError, match=r"kv_lens must lie in \[0, 30\].*\[31\]"):
        flash_attention(q, k, v, kv_lens=torch.tensor([3, 31], device=device))
    with pytest.raises(ValueError, match="kv_lens must lie"):
        flash_attention(q, k, v, kv_lens=torch.tensor([-1, 4], device=device))
    with pytest.raises(ValueError, match="kv_lens is on meta"):
        flash_attention(q, k, v, kv_lens=torch.tensor([3, 4], device="meta"))


# ----------------------------------------------------------------------------------------------
# Autograd: the backward kernels (tests/ops/test_attention_backward.py tests them in depth)
# ----------------------------------------------------------------------------------------------


def _leaves(shape, device, dtype=torch.float64):
    return [t.requires_grad_() for t in _inputs(*shape, dtype=dtype, device=device)]


def test_backward_runs_the_kernels(device):
    """Strict mode allows the backward (the kernels serve it), and it is exact: the gradients of O
    and of lse equal autograd through the float64 reference."""
    dtype = torch.float32 if device == "cuda" or not attention_module.fp64_dot_supported() else torch.float64
    q, k, v = _leaves((2, 4, 2, 19, 23, 16), device, dtype)
    do = torch.randn(2, 4, 19, 16, dtype=dtype, device=device)
    dlse = torch.randn(2, 4, 19, dtype=dtype, device=device)
    with tfg.strict():
        o, lse = flash_attention(q, k, v, causal=True, return_lse=True)
        got = torch.autograd.grad((o, lse), (q, k, v), (do, dlse))
    route = tfg.last_route("flash_attention_backward")
    assert (route.path, route.reason) == ("triton" if device == "cuda" else "interpreter", None)
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    do, dlse = do.double(), dlse.double()
    expected = torch.autograd.grad(flash_attention_ref(q, k, v, True, upcast=True), (q, k, v), (do, dlse))
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-4, atol=2e-5)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.double(), e, **tol)
    for g, e in zip(flash_attention_bwd_ref(do, q, k, v, True, dlse=dlse, upcast=True), expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)  # the hand-derived formulas


def test_gradcheck_and_gradgradcheck(device):
    """The kernels' forward and backward against finite differences of the forward kernel
    (float64 on the interpreter); and the second derivative through the reference backward
    (create_graph: a routed fallback, hence strict off)."""
    _skip_fp64_without_dot(torch.float64, device)
    q, k, v = _leaves((1, 2, 1, 5, 19, 16), device)
    with tfg.strict(False), warnings.catch_warnings():
        warnings.simplefilter("ignore", tfg.FallbackWarning)
        fn = lambda q, k, v: flash_attention(q, k, v, causal=True)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (q, k, v), fast_mode=True)
        assert torch.autograd.gradgradcheck(fn, (q, k, v), fast_mode=True)
    assert tfg.last_path("flash_attention") == "interpreter"


def test_forward_mode_ad_and_torch_func_are_right_or_raise(device):
    q, k, v = _inputs(1, 4, 2, 6, 20, 16, dtype=torch.float64, device=device)
    tangent = torch.randn_like(q)
    ref = lambda q: flash_attention_ref(q, k, v, True)[0]  # noqa: E731
    ours = lambda q: flash_attention(q, k, v, causal=True)  # noqa: E731
    _, expected = torch.func.jvp(ref, (q,), (tangent,))
    with fwAD.dual_level():
        dual = fwAD.make_dual(q, tangent)
        with pytest.raises(tfg.FallbackError, match="forward-mode AD"):
            flash_attention(dual, k, v, causal=True)
        with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="forward-mode AD"):
            got = fwAD.unpack_dual(flash_attention(dual, k, v, causal=True)).tangent
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    runtime.reset_routing_state()  # a fallback warns once per op and reason: forget the one above
    with pytest.raises(tfg.FallbackError, match="torch.func"):
        torch.func.grad(lambda q: ours(q).pow(2).sum())(q)
    with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="torch.func"):
        got = torch.func.grad(lambda q: ours(q).pow(2).sum())(q)
    torch.testing.assert_close(got, torch.func.grad(lambda q: ref(q).pow(2).sum())(q), rtol=1e-12, atol=1e-12)


def test_vmap_runs_the_kernels(device):
    q, k, v = (torch.stack([t] * 3) * torch.arange(1, 4, device=device).view(3, 1, 1, 1, 1)
               for t in _inputs(2, 4, 2, 9, 21, 16, device=device))  # fmt: skip
    with tfg.strict():
        got = torch.func.vmap(lambda q, k, v: flash_attention(q, k, v, causal=True))(q, k, v)
        shared_kv = torch.func.vmap(lambda q: flash_attention(q, k[0], v[0]), in_dims=1)(q.movedim(0, 1))
    assert tfg.last_path("flash_attention") == ("triton" if device == "cuda" else "interpreter")
    for i in range(3):
        torch.testing.assert_close(got[i], flash_attention_ref(q[i], k[i], v[i], True)[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(shared_kv[i], flash_attention_ref(q[i], k[0], v[0])[0], rtol=1e-5, atol=1e-5)


def test_compile_fullgraph_no_recompiles(device):
    """Dynamo + AOTAutograd (``aot_eager``) around the op: one graph, no recompiles, the op's body
    routed; forward and backward (the backward kernels) equal to eager."""
    q, k, v = _inputs(2, 4, 2, 19, 33, 16, device=device)

    def model(q, k, v):
        return flash_attention(q * 2.0, k, v, causal=True).sin() + 1.0

    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True):
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
        for _ in range(3):
            runtime.reset_routing_state()
            out = compiled(q, k, v)
            assert tfg.last_path("flash_attention") == ("triton" if device == "cuda" else "interpreter")
        torch.testing.assert_close(out, model(q, k, v), rtol=0, atol=0)
        torch._dynamo.reset()
        with tfg.strict():
            compiled_bwd = torch.compile(model, fullgraph=True, backend="aot_eager")
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            compiled_bwd(*leaves).pow(2).sum().backward()
            assert tfg.last_path("flash_attention_backward") == ("triton" if device == "cuda" else "interpreter")
            eager = [t.clone().requires_grad_() for t in (q, k, v)]
            model(*eager).pow(2).sum().backward()
    for a, b in zip(leaves, eager, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# GPU only: the real tiles at model sizes, beside SDPA; compile and CUDA graphs
# ----------------------------------------------------------------------------------------------


def _sdpa(q, k, v, causal):
    from torch.nn.attention.bias import causal_lower_right

    mask = causal_lower_right(q.shape[2], k.shape[2]) if causal else None
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=_name)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "shape",
    [(2, 8, 8, 2048, 2048, 128), (3, 8, 2, 1000, 1537, 64), (2, 4, 1, 333, 4099, 128), (4, 32, 8, 1, 8193, 128),
     (3, 32, 8, 16, 2049, 128), (2, 4, 4, 129, 129, 256), (5, 2, 2, 77, 77, 80)],
    ids=str,
)  # fmt: skip
def test_gpu_large(shape, causal, dtype):
    _skip_unsupported(dtype, "cuda")
    q, k, v = _inputs(*shape, dtype=dtype, device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        o, _ = _check(q, k, v, causal)
    assert tfg.last_path("flash_attention") == "triton"
    if not (causal and shape[3] > shape[4]):  # SDPA's bottom-right mask leaves such rows NaN
        torch.testing.assert_close(o.float(), _sdpa(q, k, v, causal).float(), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_gpu_compile_and_cuda_graphs(mode):
    q, k, v = _inputs(2, 8, 2, 300, 300, 128, dtype=torch.bfloat16, device="cuda")
    dq, dk, dv = _inputs(2, 8, 2, 1, 1500, 128, dtype=torch.bfloat16, device="cuda")

    def model(q, k, v):
        return flash_attention(q, k, v, causal=True) * 2.0

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, mode=mode)
    for args in [(q, k, v), (dq, dk, dv)] * 2:
        torch.testing.assert_close(compiled(*args), model(*args), rtol=0, atol=0)


def _assert_graph_replays(shape):
    """``flash_attention`` (causal, bf16) captured by hand in a CUDA graph over static inputs of
    ``shape``, replayed after fresh inputs are copied in: the same answer as an eager call on them.
    Returns the fresh inputs."""
    static = _inputs(*shape, dtype=torch.bfloat16, device="cuda")
    flash_attention(*static, causal=True)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flash_attention(*static, causal=True)
    fresh = _inputs(*shape, dtype=torch.bfloat16, device="cuda")
    for s, f in zip(static, fresh):
        s.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, flash_attention(*fresh, causal=True), rtol=0, atol=0)
    return fresh


@pytest.mark.gpu
def test_gpu_hand_captured_cuda_graph():
    _assert_graph_replays((4, 32, 8, 1, 4096, 128))  # decode: split + merge


@pytest.mark.gpu
def test_gpu_cuda_graph_with_kv_lens_follows_the_lengths():
    """One captured decode step over a static cache serves every length: the lengths are read
    from the device at replay (what a CUDA-graph decode loop needs)."""
    q, k, v = _inputs(2, 32, 8, 1, 4096, 128, dtype=torch.bfloat16, device="cuda")
    lens = torch.tensor([100, 4096], device="cuda", dtype=torch.int32)
    flash_attention(q, k, v, causal=True, kv_lens=lens)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flash_attention(q, k, v, causal=True, kv_lens=lens)
    for n in ([1, 2000], [4095, 7], [3000, 3001]):
        lens.copy_(torch.tensor(n))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, flash_attention(q, k, v, causal=True, kv_lens=lens), rtol=0, atol=0)
        expected = _sliced_oracle(q, k, v, True, lens)[0]
        torch.testing.assert_close(out.double(), expected, rtol=2e-2, atol=2e-2)


# ----------------------------------------------------------------------------------------------
# Compile-only, no GPU needed: the GPU kernels build for an H200 and a T4
# ----------------------------------------------------------------------------------------------


def test_kernels_compile_for_h200_and_t4():
    """The prefill, decode and merge kernels compile for sm_90 and sm_75 with the tiles ``plan``
    picks there, within each device's shared memory (scripts/attention_compile_probe.py)."""
    if tuple(int(part) for part in triton.__version__.split(".")[:2]) < (3, 6):
        pytest.skip(f"the probe uses the ASTSource API of Triton >= 3.6 (this is {triton.__version__})")
    root = pathlib.Path(__file__).resolve().parents[2]
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, str(root / "scripts" / "attention_compile_probe.py"), "--quick"], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("\nok ") == 5, done.stdout  # prefill and decode on each device, Hopper's prefill
