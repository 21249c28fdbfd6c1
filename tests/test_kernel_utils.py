"""The shared kernel helpers: rounding on store (in the interpreter too), accumulator dtypes,
and plain launches that stay right when Triton's specialization changes between calls."""

import math

import pytest
import torch

import tritonforge as tfg
from tritonforge import hardware
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, acc_torch_dtype, cast_for_store, exp_shifted, round_bf16_by_hand
from tritonforge.ops.gpu.coop import bf16_pair, bf16_pair_hi, bf16_pair_lo, flagged, pack_floats, packs_bf16_rows, word_hi, word_lo
from tritonforge.ops.rmsnorm import rms_norm_fwd
from tritonforge.reference import rms_norm_ref

from .helpers import assert_within_budget


@triton.jit
def _store_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr, ROUND_BF16: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    value = tl.load(src_ptr + offsets, mask=mask, other=0.0)
    tl.store(dst_ptr + offsets, cast_for_store(value, dst_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_cast_for_store_rounds_to_nearest_even(dtype, device):
    """fp32 -> dtype rounds like PyTorch's own cast (to nearest, ties to even), in the interpreter
    too, where Triton truncates to bf16 unless the bits are rounded by hand; a float32 output is
    never rounded to bf16 precision (the mixed-dtype RMSNorm stores one)."""
    if dtype == torch.bfloat16 and not hardware.supports_bf16(torch.device(device)):
        pytest.skip("bfloat16 kernels need compute capability >= 8.0")
    src = torch.randn(1000, device=device) * 3
    src[:4] = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, float("nan"), -0.0])  # bf16 ties and specials
    dst = torch.full((1000,), float("nan"), dtype=dtype, device=device)
    _store_kernel[(1,)](src, dst, 1000, BLOCK=1024, ROUND_BF16=round_bf16_by_hand(dtype))
    expected = src.to(dtype)
    assert torch.equal(dst[:2], expected[:2]) and torch.isnan(dst[2])
    torch.testing.assert_close(dst[3:], expected[3:], rtol=0, atol=0)


@triton.jit
def _words_kernel(lo_ptr, hi_ptr, packed_ptr, flagged_ptr, lo_out_ptr, hi_out_ptr, flag_out_ptr, n, BLOCK: tl.constexpr):
    """float32 pairs -> pack_floats words and flagged words -> their halves again."""
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    lo = tl.load(lo_ptr + offsets, mask=mask, other=0.0)
    hi = tl.load(hi_ptr + offsets, mask=mask, other=0.0)
    words = pack_floats(lo, hi)
    flags = flagged(lo)
    tl.store(packed_ptr + offsets, words, mask=mask)
    tl.store(flagged_ptr + offsets, flags, mask=mask)
    tl.store(lo_out_ptr + offsets, word_lo(words), mask=mask)
    tl.store(hi_out_ptr + offsets, word_hi(words), mask=mask)
    tl.store(flag_out_ptr + offsets, word_lo(flags), mask=mask)


def test_flag_words(device):
    """The cooperative kernels' flag words (publish_and_wait): two float32 pack into one int64 and
    come back bit for bit, specials and subnormals included; a flagged word is never zero, whatever
    its value, and a softmax state (m, s) with s >= 1 or m = -inf never packs to zero."""
    lo = torch.randn(1000, device=device) * 100
    hi = torch.rand(1000, device=device) * 1000 + 1  # a chunk's sum: >= 1
    specials = torch.tensor([float("-inf"), float("inf"), float("nan"), 0.0, -0.0, 1e-45, -3e38], device=device)
    lo[: len(specials)] = specials
    hi[0] = 0.0  # an all -inf chunk: (-inf, 0)
    packed, flags = (torch.zeros(1000, dtype=torch.int64, device=device) for _ in range(2))
    lo_out, hi_out, flag_out = (torch.empty(1000, device=device) for _ in range(3))
    _words_kernel[(1,)](lo, hi, packed, flags, lo_out, hi_out, flag_out, 1000, BLOCK=1024)
    bits = lambda t: t.view(torch.int32)  # noqa: E731 - compare bit patterns (NaN, -0.0)
    assert torch.equal(bits(lo_out), bits(lo)) and torch.equal(bits(hi_out), bits(hi)) and torch.equal(bits(flag_out), bits(lo))
    assert torch.equal(packed, (bits(lo).long() & 0xFFFFFFFF) | (bits(hi).long() << 32))
    assert bool((packed != 0).all()) and bool((flags != 0).all()) and bool(((flags >> 32) == 1).all())


@triton.jit
def _pairs_kernel(words_ptr, lo_ptr, hi_ptr, src_ptr, packed_ptr, n, BLOCK: tl.constexpr, ROUND_BF16: tl.constexpr):
    """Words -> their two halves in float32; float32 pairs -> rounded words."""
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    words = tl.load(words_ptr + offsets, mask=mask, other=0).to(tl.uint32, bitcast=True)
    tl.store(lo_ptr + offsets, bf16_pair_lo(words), mask=mask)
    tl.store(hi_ptr + offsets, bf16_pair_hi(words), mask=mask)
    lo = tl.load(src_ptr + 2 * offsets, mask=mask, other=0.0)
    hi = tl.load(src_ptr + 2 * offsets + 1, mask=mask, other=0.0)
    tl.store(packed_ptr + offsets, bf16_pair(lo, hi, ROUND_BF16), mask=mask)


def test_bf16_pairs(device):
    """A bf16 row read as int32 words: the halves widen exactly to the elements (even, odd), and
    float32 pairs pack back rounded to nearest even, in the interpreter too: what the packed
    cooperative softmax backward holds across its barrier."""
    if not hardware.supports_bf16(torch.device(device)):
        pytest.skip("bfloat16 kernels need compute capability >= 8.0")
    x = (torch.randn(2000, device=device) * 3).to(torch.bfloat16)
    x[:4] = torch.tensor([float("-inf"), float("nan"), -0.0, 1e-40])  # specials and a subnormal
    src = torch.randn(2000, device=device) * 3
    src[:2] = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8])  # ties
    lo, hi = (torch.empty(1000, device=device) for _ in range(2))
    packed = torch.zeros(1000, dtype=torch.int32, device=device)
    _pairs_kernel[(1,)](x.view(torch.int32), lo, hi, src, packed, 1000, BLOCK=1024, ROUND_BF16=round_bf16_by_hand(torch.bfloat16))
    torch.testing.assert_close(lo, x[0::2].float(), rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(hi, x[1::2].float(), rtol=0, atol=0, equal_nan=True)
    assert torch.equal(packed.view(torch.bfloat16), src.to(torch.bfloat16))


@triton.jit
def _exp_kernel(x_ptr, out_ptr, m, n, BLOCK: tl.constexpr, DTYPE: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, exp_shifted(x, m, DTYPE), mask=mask)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_exp_shifted(dtype, device):
    """exp(x - m) in float32 to a few float32 ulps plus the product's rounding whatever the final
    dtype (the 16-bit form is exp2 of the same product as tl.exp's, not a less accurate one), -inf to 0; where the result is rounded to
    16 bits in the end, a GPU flushes an exp below 2^-126 to zero (ex2.approx.ftz), float32 keeps it."""
    m = 37.25
    x = m - torch.cat([torch.rand(2000) * 80, torch.tensor([0.0, float("inf"), 86.0, 88.0, 95.0])]).to(device)
    out = torch.full_like(x, float("nan"))
    _exp_kernel[(1,)](x, out, m, x.numel(), BLOCK=2048, DTYPE={torch.bfloat16: tl.bfloat16, torch.float16: tl.float16,
                                                                torch.float32: tl.float32}[dtype])  # fmt: skip
    ref = torch.exp(x.double() - m)
    normal = ref >= 2.0**-126
    # the rounded product (x - m) * log2(e) is off by up to |x - m| 2^-24 relative: as tl.exp on a GPU
    t = (x.double() - m).abs()[normal] * math.log2(math.e)
    err = (out[normal].double() - ref[normal]).abs() / ref[normal]
    assert (err <= (4 + t) * 2.0**-23).all(), (err / ((4 + t) * 2.0**-23)).max()
    assert out[2001] == 0.0  # exp(-inf)
    tiny = out[~normal & (ref > 0)]
    if x.is_cuda and dtype != torch.float32:
        assert (tiny == 0).all(), tiny  # flushed
    elif x.is_cuda:
        assert (tiny > 0).all(), tiny  # subnormal results kept


def test_packs_bf16_rows():
    rows = torch.zeros(8, 100, dtype=torch.bfloat16)
    assert packs_bf16_rows(rows, rows[:, :50])
    assert not packs_bf16_rows(rows.float())  # not bf16
    assert not packs_bf16_rows(rows[:, :99])  # odd length
    assert not packs_bf16_rows(torch.zeros(8, 101, dtype=torch.bfloat16)[:, :100])  # odd row stride
    assert not packs_bf16_rows(rows[:, 1:51])  # odd offset
    assert not packs_bf16_rows(rows, rows[:, ::2])  # no unit column stride


def test_round_flag_and_accumulators():
    assert round_bf16_by_hand(torch.bfloat16) == hardware.interpreting()
    assert not round_bf16_by_hand(torch.float16) and not round_bf16_by_hand(torch.float32)
    assert acc_dtype(torch.float64) == tl.float64 and acc_dtype(torch.bfloat16) == tl.float32
    assert acc_torch_dtype(torch.float64) == torch.float64 and acc_torch_dtype(torch.float16) == torch.float32


@pytest.mark.gpu
def test_plain_launches_stay_correct_when_the_specialization_changes():
    """Alternate aligned and misaligned views, row strides that are and aren't multiples of 16,
    N = 1: every call must match the reference (Triton compiles one binary per specialization)."""
    torch.manual_seed(0)
    big = torch.randn(70, 4100, device="cuda")
    cases = [(0, 4096), (1, 4096), (0, 4095), (3, 1000), (0, 1), (4, 64), (1, 4096), (0, 4096)]
    for offset, n in cases * 2:
        x = big[3:67, offset : offset + n]  # row stride 4100 (not a multiple of 16)
        for view in (x, x.contiguous()):
            w = torch.randn(n, device="cuda")
            y, _ = rms_norm_fwd(view, w, 1e-6)
            assert_within_budget(y, rms_norm_ref(view, w, upcast=True), rms_norm_ref(view, w))
    assert tfg.rms_norm(big[:, 1:], torch.ones(4099, device="cuda")).shape == (70, 4099)


def test_split_float_beyond_float32_is_infinite_not_nan():
    """inf - inf would be NaN: past float32's range the high half is +-inf and the low half 0."""
    from tritonforge.kernel_utils import split_float

    assert split_float(1e39) == (math.inf, 0.0) and split_float(-math.inf) == (-math.inf, 0.0)
    hi, lo = split_float(math.nan)
    assert math.isnan(hi) and lo == 0.0
    hi, lo = split_float(0.1)
    assert hi != 0.1 and hi + lo == 0.1
