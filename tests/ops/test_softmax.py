"""Softmax: the strategies (one pass, cooperative on a GPU, online, split) against float64, forward and backward.

Outputs and the split kernels' state buffers are poisoned with NaN before the kernels run. On the
CPU the strategies are reached at small sizes by lowering the row-fit limit and the loop block
(the ``strategy`` fixture); the GPU tests run the real limits at vocabulary-sized rows.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import tritonforge as tfg
from tritonforge.ops import softmax as softmax_module
from tritonforge.ops import softmax_backward
from tritonforge.ops.gpu import softmax as gpu_softmax
from tritonforge.ops.softmax import plan, softmax
from tritonforge.reference import softmax_bwd_ref, softmax_ref

from ..helpers import budget as _budget
from ..helpers import dtype_name as _name
from ..helpers import nan_empty
from ..helpers import skip_unsupported as _skip_unsupported

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
SMALL = {"one-pass": (32768, 4096), "online": (64, 32), "split": (64, 32)}  # (ROW_FIT_LIMIT, LOOP_BLOCK_N)


@pytest.fixture(autouse=True)
def _seed_and_poison(monkeypatch):
    torch.manual_seed(0)
    monkeypatch.setattr(softmax_module, "_empty", nan_empty)


@pytest.fixture(params=list(SMALL))
def strategy(request, monkeypatch, device):
    """Lower the limits on the CPU so that small rows take each strategy (GPU: real limits)."""
    if device == "cpu":
        fit, block = SMALL[request.param]
        monkeypatch.setattr(softmax_module, "ROW_FIT_LIMIT", fit)
        monkeypatch.setattr(softmax_module, "LOOP_BLOCK_N", block)
    return request.param


def _rows_for(strategy: str, shape):
    """A shape whose rows take ``strategy`` under the lowered CPU limits: few long rows split,
    many long rows loop online, short rows fit."""
    return {"one-pass": shape, "online": (9, *shape[1:-1], max(shape[-1], 300)), "split": (5, max(shape[-1], 333))}[strategy]


def _check(x, expected_strategy=None):
    M, N = x.numel() // x.shape[-1], x.shape[-1]
    if expected_strategy is not None:
        assert plan(M, N, x.dtype, x.device).strategy == expected_strategy
    with tfg.strict():
        y = softmax(x)
    assert tfg.last_path("softmax") in ("triton", "interpreter")
    assert y.shape == x.shape and y.dtype == x.dtype and y.is_contiguous()
    # On a GPU tl.exp is ex2.approx.f32 of x·log2(e) (2 ulp, and the product rounds), then y = e·(1/s):
    # about four roundings where torch.softmax's expf and division make one or two.
    roundings = 4 if x.is_cuda else 1
    _budget(y, softmax_ref(x, upcast=True), softmax_ref(x), "y", roundings=roundings)
    dy = torch.randn(x.shape, dtype=x.dtype, device=x.device)
    leaf = x.detach().clone().requires_grad_()
    with tfg.strict():
        softmax(leaf).backward(dy)
    assert tfg.last_path("softmax_backward") in ("triton", "interpreter")
    _check_dx(leaf.grad, dy, x, roundings)


def _check_dx(got, dy, x, roundings):
    """``got`` (the backward's dx for the upstream gradient ``dy`` at input ``x``) within budget."""
    y64 = softmax_ref(x, upcast=True)
    dx64 = softmax_bwd_ref(dy, y64, upcast=True)
    # dx = y * (dy - <dy, y>) cancels where one y is near 1: a float32 rounding of dy - <dy, y> is
    # eps of |dy| + |<dy, y>|, not of the difference, so PyTorch's own error and ours are both that
    # large, each by its own luck, and their ratio is noise (a budget of 2x PyTorch's failed 2-5% of
    # float32 calls on the CPU). The floor adds two such float32 roundings at their size relative to
    # max |dx|: about 10 float32 eps at these inputs, nothing next to a bf16 output's own eps.
    dot = (dy.double() * y64).sum(-1, keepdim=True)
    cancel = ((y64 * (dy.double().abs() + dot.abs())).abs().max() / dx64.abs().max().clamp_min(1e-300)).item()
    extra = 2 * cancel * torch.finfo(torch.float32).eps / torch.finfo(x.dtype).eps if x.dtype != torch.float64 else 0.0
    _budget(got, dx64, softmax_bwd_ref(dy, softmax_ref(x)), "dx", roundings=roundings + extra)


@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("shape", [(3, 7), (37, 1000), (2, 5, 123), (1, 1)], ids=str)
def test_matches_reference(strategy, shape, dtype, device):
    _skip_unsupported(dtype, device)
    if strategy != "one-pass" and device == "cuda":
        pytest.skip("on the GPU the real limits apply: the large-shape tests reach each strategy")
    if shape == (1, 1) and strategy != "one-pass":
        pytest.skip("a single element always fits")
    shape = _rows_for(strategy, shape)
    _check(torch.randn(shape, dtype=dtype, device=device) * 4, strategy)


def test_large_logits_do_not_overflow(strategy, device):
    """Values around ±1e4: exp overflows without the max subtraction."""
    x = torch.randn(_rows_for(strategy, (5, 300)), device=device) * 1e4
    _check(x)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_masked_rows_like_pytorch(strategy, device):
    """A fully masked (-inf) row is NaN, as in torch.softmax; partly masked rows (a mask covering
    a whole block or a whole split chunk) are exact; +inf and NaN give NaN rows."""
    shape = _rows_for(strategy, (6, 300))
    x = torch.randn(shape, device=device)
    x[0] = -float("inf")
    x[1, : shape[-1] // 2] = -float("inf")  # whole blocks and chunks of -inf
    x[2, 5:] = -float("inf")
    x[3, 7] = float("inf")
    x[4, 3] = float("nan")  # (rows 0-4 exist for every strategy: at least 5 rows)
    y = softmax(x)
    ref = torch.softmax(x, -1)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    finite = ~torch.isnan(ref)
    torch.testing.assert_close(y[finite], ref[finite], rtol=1e-6, atol=1e-7)


def test_strided_and_transposed_inputs(device):
    big = torch.randn(7, 500, device=device)
    _check(big[:, :333])  # row stride 500: read in place
    _check(torch.randn(300, 9, device=device).T)  # last dim strided: copied


def test_plan(monkeypatch):
    cpu = torch.device("cpu")
    assert plan(4096, 1024, torch.bfloat16, cpu) == softmax_module.Plan("one-pass", 1024, 4)
    assert plan(4096, 32768, torch.float32, cpu).strategy == "one-pass"
    assert plan(4096, 131072, torch.float32, cpu).strategy == "online"
    p = plan(1, 131072, torch.float32, cpu)  # the interpreter counts 4 SMs: 16 chunks of 8192
    assert p.strategy == "split" and p.splits == 16 and p.chunk == 8192 and p.splits * p.chunk >= 131072
    assert plan(1, 262144, torch.float64, cpu).block_n == softmax_module.LOOP_BLOCK_N // 2
    for M, N in [(1, 40000), (3, 100000), (7, 33000), (1, 10**6)]:
        p = plan(M, N, torch.bfloat16, cpu)
        if p.strategy == "split":
            assert p.splits & (p.splits - 1) == 0 and p.splits <= softmax_module.MAX_SPLITS
            assert p.chunk % p.block_n == 0 and p.splits * p.chunk >= N


def test_cooperative_plan_keeps_a_row_within_the_gpu():
    """The cooperative path (GPU only) holds a row in cdiv(N, 8192) programs that wait for each
    other: never more than the SM count (so they fit at once), and only with enough rows."""
    sm90 = dict(dtype=torch.float32, sms=132, fit=32768, loop_block=4096, max_splits=64, on_gpu=True)
    assert softmax_module._plan_cached(4096, 131072, **sm90) == softmax_module.Plan("cooperative", 8192, 4, 16, 8192)
    assert softmax_module._plan_cached(4096, 131072, **sm90, backward=True) == softmax_module.Plan("cooperative", 8192, 8, 16, 8192)
    assert softmax_module._plan_cached(4096, 131072, **{**sm90, "on_gpu": False}).strategy == "online"
    assert softmax_module._plan_cached(8, 131072, **sm90).strategy == "split"  # 128 programs < 132 SMs
    assert softmax_module._plan_cached(4096, 40 * 8192, **{**sm90, "sms": 40}).strategy == "cooperative"  # a T4
    assert softmax_module._plan_cached(4096, 41 * 8192, **{**sm90, "sms": 40}).strategy == "online"
    # masks dropped only where measured to pay: float32 rows of whole chunks
    assert gpu_softmax.coop_unmasked(torch.float32, 131072, 8192) and not gpu_softmax.coop_unmasked(torch.float32, 131073, 8192)
    assert not gpu_softmax.coop_unmasked(torch.bfloat16, 131072, 8192)


def _check_nan_rows(dtype, device):
    """7 rows of 37 (an odd count: a last program with rows past M where programs take several):
    an all -inf row and a NaN give NaN exactly where torch.softmax does; the rest matches."""
    x = torch.randn(7, 37, dtype=dtype, device=device)
    x[2] = -float("inf")
    x[6, 3] = float("nan")
    y = softmax(x)
    expected = torch.softmax(x.double(), -1)
    assert torch.equal(torch.isnan(y), torch.isnan(expected))
    ok = ~torch.isnan(expected)
    assert torch.allclose(y.double()[ok], expected[ok], rtol=0, atol=4 * torch.finfo(dtype).eps)


def test_no_pipelined_plan():
    """The pipelined one-pass kernel is retired: the plan reached it only for fewer 16-bit rows of
    16K-32K than the GPU has SMs (more go cooperative), so each persistent program walked one row and
    nothing was pipelined. Those rows now take a program each, as they do everywhere else."""
    h200 = dict(sms=132, fit=32768, loop_block=4096, max_splits=64, on_gpu=True)
    assert softmax_module._plan_cached(16, 32768, torch.bfloat16, **h200) == softmax_module.Plan("one-pass", 32768, 16)
    assert softmax_module._plan_cached(3, 20001, torch.float16, **h200) == softmax_module.Plan("one-pass", 32768, 16)
    assert "stages" not in softmax_module.Plan._fields


def test_short_rows_cooperative_plan():
    """The forward's rows of 16K-32K elements (one block of ROW_FIT_LIMIT) on a GPU: cooperative in
    chunks of 4096 (16-bit at any row count that fills the GPU; float32 below 32 rows an SM), not
    rows of 16K or less, not the backward, not float64, not too few rows."""
    h200 = dict(sms=132, fit=32768, loop_block=4096, max_splits=64, on_gpu=True)
    chunk = gpu_softmax.SHORT_COOP_CHUNK
    assert softmax_module._plan_cached(16384, 32768, torch.bfloat16, **h200) == softmax_module.Plan("cooperative", chunk, 4, 8, chunk)
    assert softmax_module._plan_cached(2048, 20001, torch.float16, **h200) == softmax_module.Plan("cooperative", chunk, 4, 5, chunk)
    assert softmax_module._plan_cached(4096, 32768, torch.float32, **h200).strategy == "cooperative"
    assert softmax_module._plan_cached(32 * 132, 32768, torch.float32, **h200) == softmax_module.Plan("one-pass", 32768, 16)
    assert softmax_module._plan_cached(17, 32768, torch.bfloat16, **h200).strategy == "cooperative"  # 136 programs
    assert softmax_module._plan_cached(16, 32768, torch.bfloat16, **h200).strategy == "one-pass"  # 128 < 132 SMs
    assert softmax_module._plan_cached(16384, 16384, torch.bfloat16, **h200).strategy == "one-pass"
    assert softmax_module._plan_cached(16384, 32768, torch.bfloat16, **h200, backward=True).strategy == "one-pass"
    assert softmax_module._plan_cached(100, 16384, torch.float64, **h200).strategy == "one-pass"
    assert softmax_module._plan_cached(16384, 32768, torch.bfloat16, **{**h200, "on_gpu": False}).strategy == "one-pass"


def test_rows_per_program_plan_only_for_short_16_bit_rows_on_a_gpu():
    """Two whole rows a program for 16-bit rows of 512-2K on a GPU (measured faster there), with
    2 warps per 1K of a row; not float32 (measured no faster), not rows outside the range, not the
    interpreter; and the backward of such a call keeps a program per row."""
    h200 = dict(sms=132, fit=32768, loop_block=4096, max_splits=64, on_gpu=True)
    rows = gpu_softmax.ROWS_PER_PROGRAM
    assert softmax_module._plan_cached(16384, 1024, torch.bfloat16, **h200) == softmax_module.Plan("one-pass", 1024, 2, rows=rows)
    assert softmax_module._plan_cached(16384, 512, torch.float16, **h200) == softmax_module.Plan("one-pass", 512, 2, rows=rows)
    assert softmax_module._plan_cached(5, 1500, torch.bfloat16, **h200) == softmax_module.Plan("one-pass", 2048, 4, rows=rows)
    for M, N, dtype in [(16384, 1024, torch.float32), (16384, 256, torch.bfloat16), (16384, 4096, torch.bfloat16)]:
        assert softmax_module._plan_cached(M, N, dtype, **h200).rows == 1, (M, N, dtype)
    assert softmax_module._plan_cached(16384, 1024, torch.bfloat16, **{**h200, "on_gpu": False}).rows == 1
    assert plan(16384, 1024, torch.bfloat16, torch.device("cpu")).rows == 1
    assert softmax_module._plan_cached(16384, 1024, torch.bfloat16, **h200, backward=True) == softmax_module.Plan("one-pass", 1024, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=_name)
def test_rows_per_program_kernel(monkeypatch, dtype, device):
    """The several-rows kernel at any size (its plan forced, 2 and 4 rows a program): a last
    program with rows past M, masked columns, a strided row, and the rows torch.softmax gives NaN
    for; the backward beside it keeps its own plan."""
    _skip_unsupported(dtype, device)
    real_plan = softmax_module.plan
    for rows in (2, 4):

        def forced(M, N, dtype, device, backward=False, rows=rows):
            p = real_plan(M, N, dtype, device, backward)
            return p._replace(rows=rows, num_warps=2) if p.strategy == "one-pass" and not backward else p

        monkeypatch.setattr(softmax_module, "plan", forced)
        for M, N in [(7, 37), (301, 100)] if device == "cpu" else [(7, 37), (301, 1000), (4097, 2048)]:
            _check(torch.randn(M, N, dtype=dtype, device=device) * 3)
            _check(torch.randn(M, N + 9, dtype=dtype, device=device)[:, :N])
        _check_nan_rows(dtype, device)


# (2, 3, 16) rather than (3, 5, 16): still two leading dims, but 96 inputs, not 240, for the full
# Jacobian of the one-pass plan (36 s of the interpreter's time for 240 on a 2-core machine).
@pytest.mark.parametrize("shape", [(6, 37), (2, 3, 16)], ids=str)
def test_gradcheck_fp64_through_the_kernels(strategy, shape, device):
    """Past the lowered limits for online and split (rows of 71 > 64): gradcheck's fast mode (a
    random projection of the Jacobian) keeps the interpreter's time small."""
    if strategy != "one-pass":
        shape = (9, 71) if strategy == "online" else (5, 71)
    x = torch.randn(shape, dtype=torch.float64, device=device)
    assert plan(x.numel() // x.shape[-1], x.shape[-1], x.dtype, x.device).strategy == strategy or device == "cuda"
    with tfg.strict():
        assert torch.autograd.gradcheck(softmax, (x.requires_grad_(),), fast_mode=strategy != "one-pass")
    assert tfg.last_path("softmax_backward") in ("triton", "interpreter")


@pytest.mark.parametrize("shape", [(0, 8), (4, 0), (2, 0, 16)], ids=str)
def test_empty_input(shape, device):
    x = torch.randn(shape, device=device, requires_grad=True)
    y = softmax(x)
    assert y.shape == x.shape and tfg.last_route("softmax").reason == "empty"
    y.sum().backward()
    assert x.grad.shape == x.shape


def test_bad_inputs(device):
    with pytest.raises(TypeError, match="x"):
        softmax([1.0, 2.0])
    with pytest.raises(TypeError, match="x"):
        softmax(torch.arange(6, device=device).reshape(2, 3))
    with pytest.raises(ValueError, match="x"):
        softmax(torch.tensor(1.0, device=device))


# ----------------------------------------------------------------------------------------------
# GPU only: the real limits, vocabulary-sized rows
# ----------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape,dtype",
    [((4096, 1000), torch.bfloat16), ((1823, 32768), torch.float32), ((300, 40001), torch.bfloat16),
     ((1, 131072), torch.float32), ((3, 262144), torch.bfloat16), ((64, 131072), torch.float16),
     ((5, 7, 4099), torch.float32), ((1, 1000003), torch.float32)],
    ids=str,
)  # fmt: skip
def test_gpu_large(shape, dtype):
    x = torch.randn(shape, dtype=dtype, device="cuda") * 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        _check(x)
    assert tfg.last_path("softmax") == "triton"


@pytest.mark.gpu
def test_gpu_each_strategy_is_reached():
    device = torch.device("cuda")
    assert plan(4096, 4096, torch.bfloat16, device).strategy == "one-pass"
    assert plan(4096, 131072, torch.bfloat16, device).strategy == "cooperative"
    assert plan(64, 131072, torch.float32, device).strategy == "cooperative"
    assert plan(1, 131072, torch.bfloat16, device).strategy == "split"
    assert plan(4096, 2_000_000, torch.float32, device).strategy == "online"  # over COOP_MAX_SPLITS chunks
    assert plan(16384, 1024, torch.bfloat16, device).rows == gpu_softmax.ROWS_PER_PROGRAM
    assert plan(16384, 32768, torch.bfloat16, device).chunk == gpu_softmax.SHORT_COOP_CHUNK


@pytest.mark.gpu
@pytest.mark.parametrize("shape,dtype", [((300, 40001), torch.bfloat16), ((150, 1000003), torch.float32),
                                         ((64, 131072), torch.float16), ((40, 20000), torch.float64),
                                         ((96, 65538), torch.bfloat16), ((72, 49152), torch.float32),
                                         ((300, 20001), torch.float16), ((100, 32768), torch.float32)], ids=str)  # fmt: skip
def test_gpu_cooperative_rows(shape, dtype, coop_launch):
    """Rows held by several programs that meet at a per-row barrier (chunk counts that are not a
    power of two included), under either launch (a cooperative one loops each program over rows):
    y and dx within budget, a row strided inside a wider tensor, and
    the rows PyTorch gives NaN or zeros for: all -inf, a whole chunk of -inf, a NaN, and a whole
    chunk of -inf in a row whose max is far below 0 (the empty chunk's factor exp(0 - m_row) would
    overflow to inf, and 0 * inf is NaN)."""
    x = torch.randn(shape, dtype=dtype, device="cuda") * 3
    assert plan(*shape, dtype, x.device).strategy == "cooperative"
    _check(x)
    _check(torch.randn(shape[0], shape[1] + 77, dtype=dtype, device="cuda")[:, : shape[1]])
    x[0] = -float("inf")
    x[1, : shape[1] // 2] = -float("inf")  # every chunk of the first half empty
    x[2, 5] = float("nan")
    x[3] -= 1000
    x[3, : shape[1] // 2] = -float("inf")
    y = softmax(x)
    expected = torch.softmax(x.double(), -1)
    assert torch.equal(torch.isnan(y), torch.isnan(expected)), "NaN exactly where torch.softmax has NaN"
    ok = ~torch.isnan(expected)
    assert torch.allclose(y.double()[ok], expected[ok], rtol=0, atol=4 * torch.finfo(dtype).eps)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,dtype", [((300, 40001), torch.bfloat16), ((4096, 131072), torch.float32)], ids=str)
def test_gpu_cooperative_rows_in_a_cuda_graph(shape, dtype, coop_launch):
    """A cooperative row's launch (forward and backward) captured in a CUDA graph and replayed on
    new inputs: the answer follows the inputs (the grid and its per-launch zeroed words are part of
    the graph)."""
    x = torch.randn(shape, dtype=dtype, device="cuda") * 3
    dy = torch.randn_like(x)
    assert plan(*shape, dtype, x.device).strategy == "cooperative"
    softmax(x)  # compiled and remembered before the capture
    softmax_backward.softmax_bwd(dy, softmax(x))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = softmax(x)
        dx = softmax_backward.softmax_bwd(dy, y)
    for _ in range(2):
        x.copy_(torch.randn_like(x) * 3)
        dy.copy_(torch.randn_like(dy))
        graph.replay()
        assert torch.allclose(y.double(), torch.softmax(x.double(), -1), rtol=0, atol=4 * torch.finfo(dtype).eps), "y"
        expected_dx = softmax_bwd_ref(dy, y, upcast=True)  # float64, from the kernel's own y
        assert (dx.double() - expected_dx).abs().max() <= 8 * torch.finfo(dtype).eps * expected_dx.abs().max(), "dx"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4, 1000), (4, 4096), (300, 40001), (5, 200000)], ids=str)
def test_gpu_bf16_tiny_probabilities(shape):
    """A 16-bit softmax takes exp2 of (x - m) log2(e) (ex2.approx.ftz, kernel_utils.exp_shifted)
    on every path: a bf16 probability below 2^-126 (a bf16 subnormal, 1.2e-38)
    may come out 0, and nothing else changes: probabilities down to 2^-126 within two bf16 ulps of
    float64, one pass, cooperative and split rows alike."""
    x = torch.randn(shape, device="cuda") * 3
    x[:, 1] = x[:, 0] = 20.0
    x[:, 2:7] = torch.tensor([20.0 - 80.0, 20.0 - 86.0, 20.0 - 87.0, 20.0 - 88.5, 20.0 - 95.0])  # 1e-35 ... 1e-42
    x = x.to(torch.bfloat16)
    y = softmax(x).double()
    expected = torch.softmax(x.double(), -1)
    normal = expected >= 2.0**-126
    ulp = torch.exp2(torch.floor(torch.log2(expected[normal])) - 7)
    assert ((y[normal] - expected[normal]).abs() <= 2 * ulp).all()
    assert ((y[~normal] == 0) | ((y[~normal] - expected[~normal]).abs() <= 2.0**-133)).all()  # 0 or the bf16 subnormal


@pytest.mark.gpu
def test_gpu_packed_cooperative_backward_layouts():
    """The cooperative backward reads bf16 rows of even length as 32-bit words, two elements each,
    where the layout allows it (dy in place with an even row stride) and keeps the float32 kernel
    where it does not (an odd row stride, an odd offset, an odd length): every layout within budget."""
    x = torch.randn(96, 65538, dtype=torch.bfloat16, device="cuda") * 3
    assert plan(*x.shape, x.dtype, x.device, backward=True).strategy == "cooperative"
    y = softmax(x)
    wide = torch.randn(96, 65538 + 2, dtype=x.dtype, device="cuda")
    odd = torch.randn(96, 65538 + 1, dtype=x.dtype, device="cuda")
    layouts = {"contiguous": (wide[:, :-2].contiguous(), True), "row stride 65540": (wide[:, :-2], True),
               "row stride 65539": (odd[:, :-1], False), "offset 1": (odd[:, 1:], False)}  # fmt: skip
    for name, (dy, packs) in layouts.items():
        assert gpu_softmax.packs_bf16_rows(dy, y) == packs, name
        with tfg.strict():
            dx = softmax_backward.softmax_bwd(dy, y)
        _check_dx(dx, dy, x, roundings=4)
    x_odd = torch.randn(96, 65537, dtype=torch.bfloat16, device="cuda") * 3
    dy = torch.randn_like(x_odd)
    assert not gpu_softmax.packs_bf16_rows(dy, softmax(x_odd))
    _check_dx(softmax_backward.softmax_bwd(dy, softmax(x_odd)), dy, x_odd, roundings=4)


@pytest.mark.gpu
def test_gpu_gradcheck_fp64_cooperative():
    x = torch.randn(40, 20000, dtype=torch.float64, device="cuda", requires_grad=True)
    assert plan(40, 20000, x.dtype, x.device).strategy == "cooperative"
    with tfg.strict():
        assert torch.autograd.gradcheck(softmax, (x,), fast_mode=True)
