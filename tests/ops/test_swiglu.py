"""SwiGLU (elementwise, forward and backward) and the fused MLP front: kernels against float64.

Every output buffer is poisoned with NaN before the kernels run (the launchers' allocator is
replaced), so an element a kernel forgets to write fails. CPU sizes stay small (the interpreter);
large shapes, the autotuned configurations and the H200's tiles run in the GPU-marked tests.
"""

from __future__ import annotations

import pytest
import torch

import tritonforge as tfg
from tritonforge import hardware
from tritonforge.ops import swiglu as swiglu_module
from tritonforge.ops import swiglu_front as front_module
from tritonforge.ops.swiglu import swiglu, swiglu_bwd
from tritonforge.ops.swiglu_front import swiglu_mlp_front
from tritonforge.reference import swiglu_bwd_ref, swiglu_mlp_front_ref, swiglu_ref

from ..helpers import budget as _budget
from ..helpers import dtype_name as _name
from ..helpers import nan_empty
from ..helpers import skip_unsupported as _skip_unsupported

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
HALF = [torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def _seed_and_poison(monkeypatch):
    torch.manual_seed(0)
    monkeypatch.setattr(swiglu_module, "_empty", nan_empty)
    monkeypatch.setattr(front_module, "_empty", nan_empty)


def _check_forward(gate, up):
    with tfg.strict():
        y = swiglu(gate, up)
    assert tfg.last_path("swiglu") in ("triton", "interpreter")
    assert y.shape == gate.shape and y.dtype == gate.dtype and y.is_contiguous()
    _budget(y, swiglu_ref(gate, up, upcast=True), swiglu_ref(gate, up), "y")
    return y


def _check_backward(gate, up, dy=None):
    dy = torch.randn(gate.shape, dtype=gate.dtype, device=gate.device) if dy is None else dy
    g, u = gate.detach().clone().requires_grad_(), up.detach().clone().requires_grad_()
    with tfg.strict():
        swiglu(g, u).backward(dy)
    assert tfg.last_path("swiglu_backward") in ("triton", "interpreter")
    ref_g, ref_u = swiglu_bwd_ref(dy, gate, up, upcast=True)
    low_g, low_u = swiglu_bwd_ref(dy, gate, up)
    _budget(g.grad, ref_g, low_g, "dgate")
    _budget(u.grad, ref_u, low_u, "dup")


# ----------------------------------------------------------------------------------------------
# The elementwise op
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (37, 1000), (2, 5, 123), (77,), (5, 1300)], ids=str)
def test_forward_and_backward_match_reference(shape, dtype, device):
    _skip_unsupported(dtype, device)
    gate, up = torch.randn(shape, dtype=dtype, device=device), torch.randn(shape, dtype=dtype, device=device)
    _check_forward(gate, up)
    _check_backward(gate, up)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=_name)
def test_packed_gate_up_halves_are_read_in_place(dtype, device, monkeypatch):
    """gate and up as h[..., :F] and h[..., F:] of one packed [..., 2F] projection: no copy."""
    _skip_unsupported(dtype, device)
    h = torch.randn(3, 5, 2 * 123, dtype=dtype, device=device)
    gate, up = h[..., :123], h[..., 123:]
    monkeypatch.setattr(torch.Tensor, "contiguous", lambda self, *a, **k: pytest.fail("copied an input"))
    y = _check_forward(gate, up)
    assert y.shape == (3, 5, 123)
    monkeypatch.undo()
    _check_backward(gate, up)


def test_transposed_and_expanded_inputs(device):
    gate = torch.randn(40, 30, device=device).T  # last dim strided: copied
    up = torch.randn(30, 1, device=device).expand(30, 40)  # broadcast view
    _check_forward(gate, up)
    _check_backward(gate, up, dy=torch.randn(1, 40, device=device).expand(30, 40))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # numpy, in the interpreter
def test_extreme_gates(device):
    """exp(-g) overflows for g < -88 (float32): silu must be -0, not NaN; large g gives g."""
    gate = torch.tensor([[-1e4, -100.0, -88.0, -20.0, 0.0, 20.0, 88.0, 1e4]], device=device)
    up = torch.full_like(gate, 2.0)
    y = _check_forward(gate, up)
    assert torch.isfinite(y).all()
    _check_backward(gate, up)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nan_and_inf_propagate_like_the_reference(device):
    gate = torch.tensor([[float("nan"), 1.0, float("inf"), -float("inf")]], device=device)
    up = torch.tensor([[1.0, float("nan"), 1.0, 1.0]], device=device)
    y = swiglu(gate, up)
    ref = swiglu_ref(gate, up)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    assert torch.equal(y[~torch.isnan(y)], ref[~torch.isnan(ref)])


@pytest.mark.parametrize("need", [(True, False), (False, True)], ids=["dgate", "dup"])
def test_backward_only_the_gradient_asked_for(need, device):
    gate, up = torch.randn(7, 33, device=device), torch.randn(7, 33, device=device)
    g, u = gate.clone().requires_grad_(need[0]), up.clone().requires_grad_(need[1])
    dy = torch.randn(7, 33, device=device)
    swiglu(g, u).backward(dy)
    ref_g, ref_u = swiglu_bwd_ref(dy, gate, up, upcast=True)
    if need[0]:
        assert u.grad is None
        _budget(g.grad, ref_g, swiglu_bwd_ref(dy, gate, up)[0], "dgate")
    else:
        assert g.grad is None
        _budget(u.grad, ref_u, swiglu_bwd_ref(dy, gate, up)[1], "dup")


def test_launcher_skips_the_gradient_not_asked_for(device):
    gate, up, dy = (torch.randn(4, 9, device=device) for _ in range(3))
    dgate, dup = swiglu_bwd(dy, gate, up, compute_dgate=False)
    assert dgate is None and not torch.isnan(dup).any()


@pytest.mark.parametrize("shape", [(6, 37), (3, 5, 16), (1, 1)], ids=str)
def test_gradcheck_fp64_through_the_kernels(shape, device):
    gate = torch.randn(shape, dtype=torch.float64, device=device, requires_grad=True)
    up = torch.randn(shape, dtype=torch.float64, device=device, requires_grad=True)
    with tfg.strict():
        assert torch.autograd.gradcheck(swiglu, (gate, up))
    assert tfg.last_path("swiglu_backward") in ("triton", "interpreter")


def test_hugging_face_rounding_order(device):
    """silu(gate) is rounded to the input dtype before the multiply (two eager ops). With one
    rounding (silu and the product in float32) about a quarter of these float16 outputs differ
    from HF's; the kernel may differ only where its float32 silu and PyTorch's differ in the last
    bit before rounding (3 of 16448 on the CPU interpreter)."""
    gate = torch.randn(64, 257, dtype=torch.float16, device=device)
    up = torch.randn(64, 257, dtype=torch.float16, device=device) * 3
    hf = torch.nn.functional.silu(gate) * up
    one_rounding = (gate.float() * torch.sigmoid(gate.float()) * up.float()).half()
    assert (one_rounding != hf).sum() > hf.numel() // 10  # the inputs tell the two orders apart
    assert (swiglu(gate, up) != hf).sum() <= hf.numel() // 1000


@pytest.mark.parametrize("shape", [(0, 8), (4, 0), (2, 0, 16)], ids=str)
def test_empty_input(shape, device):
    gate = torch.randn(shape, device=device, requires_grad=True)
    up = torch.randn(shape, device=device, requires_grad=True)
    y = swiglu(gate, up)
    assert y.shape == gate.shape and tfg.last_route("swiglu").reason == "empty"
    y.sum().backward()
    assert gate.grad.shape == gate.shape


def test_bad_inputs(device):
    gate, up = torch.randn(4, 16, device=device), torch.randn(4, 16, device=device)
    with pytest.raises(TypeError, match="gate"):
        swiglu([[1.0] * 16], up)
    with pytest.raises(TypeError, match="up"):
        swiglu(gate, up.to(torch.int32))
    with pytest.raises(TypeError, match="dtype"):
        swiglu(gate, up.double())
    with pytest.raises(ValueError, match="shape"):
        swiglu(gate, up[:, :15])
    with pytest.raises(ValueError, match="device"):
        swiglu(gate, torch.randn(4, 16, device="meta"))


def test_a_tuned_key_launches_the_plain_kernel_with_the_remembered_choice(monkeypatch):
    """The first call of a key goes through the autotuner; later calls launch the kernel itself
    with the configuration the autotuner chose (no Autotuner.run on the host path)."""
    calls = []
    config = swiglu_module.triton.Config({"BLOCK_M": 2, "BLOCK_F": 64}, num_warps=4, num_stages=2)

    class Fake:
        def __init__(self, name):
            self.name, self.best_config = name, config

        def __getitem__(self, grid):
            return lambda *args, **kwargs: calls.append((self.name, grid if isinstance(grid, tuple) else "tuner-grid", kwargs))

    monkeypatch.setattr(swiglu_module, "_CHOSEN", {})
    grid = lambda meta: (meta["BLOCK_M"] * 10,)  # noqa: E731
    for _ in range(3):
        swiglu_module._launch_tuned(Fake("tuner"), Fake("kernel"), ("k", 1), grid, (1, 2), {"FLAG": True})
    assert [c[0] for c in calls] == ["tuner", "kernel", "kernel"]
    assert calls[1][1] == (20,) and calls[1][2] == {"BLOCK_M": 2, "BLOCK_F": 64, "FLAG": True, "num_warps": 4, "num_stages": 2}
    assert swiglu_module.chosen_configs() == {("k", 1): config}


def test_no_autotuner_is_built_off_the_gpu(device):
    """Autotuners are made on the first GPU call, never at import or in the interpreter (Triton 3.3
    asks the GPU driver for a benchmarker when an autotuner is built: that failed without a GPU)."""
    if device == "cuda":
        pytest.skip("on a GPU the first call builds the autotuner")
    swiglu(torch.randn(3, 70), torch.randn(3, 70))
    assert swiglu_module.elementwise_tuner.cache_info().currsize == 0
    assert front_module.front_tuner.cache_info().currsize == 0


def test_interpreter_config_and_pruning():
    assert swiglu_module.interpreter_elementwise_config(14336) == {"BLOCK_M": 1, "BLOCK_F": 1024}
    assert swiglu_module.interpreter_elementwise_config(100) == {"BLOCK_M": 8, "BLOCK_F": 128}
    kept = swiglu_module.prune_elementwise(swiglu_module.ELEMENTWISE_CONFIGS, {"F": 100})
    assert kept and all(c.kwargs["BLOCK_F"] <= 128 for c in kept)
    assert len(swiglu_module.prune_elementwise(swiglu_module.ELEMENTWISE_CONFIGS, {"F": 14336})) == len(swiglu_module.ELEMENTWISE_CONFIGS)
    assert len(swiglu_module.ELEMENTWISE_CONFIGS) >= 4
    assert [swiglu_module.rows_class(m) for m in (1, 2, 16, 64, 4096, 100000)] == [0, 1, 2, 3, 6, 6]


# ----------------------------------------------------------------------------------------------
# The fused MLP front
# ----------------------------------------------------------------------------------------------


def _front_inputs(m, d, f, dtype, device):
    x = torch.randn(m, d, dtype=dtype, device=device)
    w_gate = (torch.randn(d, f, device=device) * d**-0.5).to(dtype)
    w_up = (torch.randn(d, f, device=device) * d**-0.5).to(dtype)
    return x, w_gate, w_up


def _check_front(x, w_gate, w_up):
    with tfg.strict():
        y = swiglu_mlp_front(x, w_gate, w_up)
    assert tfg.last_path("swiglu_mlp_front") in ("triton", "interpreter")
    assert y.shape == (*x.shape[:-1], w_gate.shape[1]) and y.dtype == x.dtype
    # PyTorch's own error: the eager two-matmul formula in x's dtype.
    _budget(y, swiglu_mlp_front_ref(x, w_gate, w_up, upcast=True), swiglu_mlp_front_ref(x, w_gate, w_up), "y")
    return y


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=_name)
@pytest.mark.parametrize("mdf", [(1, 16, 16), (5, 40, 70), (37, 33, 29), (17, 64, 100)], ids=str)
def test_front_matches_reference_on_the_interpreter(mdf, dtype, device):
    if device == "cuda":
        pytest.skip("small fp32 shapes are the interpreter's; the GPU tests below cover 16-bit sizes")
    _check_front(*_front_inputs(*mdf, dtype, device))


def test_front_leading_shape_and_transposed_weights(device):
    dtype = torch.float16 if device == "cuda" else torch.float32
    x = torch.randn(2, 3, 40, dtype=dtype, device=device)
    gate_linear = torch.randn(50, 40, dtype=dtype, device=device) / 7  # nn.Linear(40, 50).weight layout
    up_linear = torch.randn(50, 40, dtype=dtype, device=device) / 7
    _check_front(x, gate_linear.T, up_linear.T)


def test_front_backward_matches_reference(device):
    dtype = torch.float16 if device == "cuda" else torch.float32
    x, w_gate, w_up = (t.requires_grad_() for t in _front_inputs(6, 24, 20, dtype, device))
    dy = torch.randn(6, 20, dtype=dtype, device=device)
    with tfg.strict():
        swiglu_mlp_front(x, w_gate, w_up).backward(dy)
    leaves = [t.detach().double().requires_grad_() for t in (x, w_gate, w_up)]
    swiglu_mlp_front_ref(*leaves, upcast=True).backward(dy.double())
    for name, t, ref in zip(("dx", "dw_gate", "dw_up"), (x, w_gate, w_up), leaves):
        assert t.grad.shape == t.shape, name
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        assert (t.grad.double() - ref.grad).abs().max() <= tol * ref.grad.abs().max(), name


def test_front_bad_inputs(device):
    x, w_gate, w_up = _front_inputs(4, 16, 8, torch.float32, device)
    with pytest.raises(ValueError, match="w_gate"):
        swiglu_mlp_front(x, w_gate.T, w_up.T)  # [F, D]: nn.Linear's layout, not [D, F]
    with pytest.raises(ValueError, match="shape"):
        swiglu_mlp_front(x, w_gate, w_up[:, :7])
    with pytest.raises(TypeError, match="dtype"):
        swiglu_mlp_front(x, w_gate, w_up.double())
    with pytest.raises(TypeError, match="x"):
        swiglu_mlp_front(x.to(torch.int64), w_gate, w_up)
    with pytest.raises(ValueError, match="w_gate"):
        swiglu_mlp_front(x, w_gate[None], w_up[None])


SIMULATED = {"T4": 64 * 1024, "A10/L4": 99 * 1024, "A100": 163 * 1024, "H100/H200": 227 * 1024}


@pytest.mark.parametrize("name", SIMULATED)
@pytest.mark.parametrize("block_m", [0, 16, 32, 64], ids=lambda b: f"block_m={b}")
def test_front_configurations_fit_the_device(name, block_m):
    shared = SIMULATED[name]
    configs = front_module.front_configs(shared, block_m, 2)
    assert configs, f"no configuration fits {name}"
    for c in configs:
        k = c.kwargs
        assert c.num_stages * (k["BLOCK_M"] * k["BLOCK_K"] + 2 * k["BLOCK_K"] * k["BLOCK_N"]) * 2 <= shared
        if block_m:
            assert k["BLOCK_M"] == block_m
    if name == "T4":  # the H200's deepest pipelines do not fit there
        assert len(configs) < len(front_module.front_configs(SIMULATED["H100/H200"], block_m, 2))


def test_front_block_m():
    assert [front_module.front_block_m(m) for m in (1, 16, 17, 33, 64, 65, 4096)] == [16, 16, 32, 64, 64, 0, 0]


# ----------------------------------------------------------------------------------------------
# GPU only: large shapes, the autotuned configurations, the H200's tiles
# ----------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape,dtype",
    [((4096, 14336), torch.bfloat16), ((1823, 781), torch.float16), ((64, 14336), torch.float32),
     ((5, 123, 123), torch.bfloat16), ((1, 14336), torch.bfloat16), ((16384, 4096), torch.float32)],
    ids=str,
)  # fmt: skip
def test_gpu_elementwise_large(shape, dtype):
    _skip_unsupported(dtype, "cuda")
    gate, up = torch.randn(shape, dtype=dtype, device="cuda"), torch.randn(shape, dtype=dtype, device="cuda")
    _check_forward(gate, up)
    _check_backward(gate, up)
    assert tfg.last_path("swiglu") == "triton"
    chosen = swiglu_module.chosen_configs()
    for name in ("swiglu_fwd", "swiglu_bwd"):
        assert any(key[0] == name and key[1] == shape[-1] for key in chosen), f"no {name} choice recorded"
    y = swiglu(gate, up)  # the remembered configuration, launched without the autotuner
    assert torch.equal(y, swiglu(gate, up))
    _check_forward(gate, up)


@pytest.fixture
def front_configs_narrowed(monkeypatch):
    """Each new (N, K, M class) key autotunes every configuration (16-19, a compile and a timing
    each): minutes for the shapes below. Their correctness does not depend on which configuration
    wins, so they tune over the first three; test_gpu_front_every_configuration checks them all."""
    full = front_module.front_configs
    monkeypatch.setattr(front_module, "front_configs", lambda *args: full(*args)[:3])
    front_module.front_tuner.cache_clear()
    swiglu_module._CHOSEN.clear()
    yield
    front_module.front_tuner.cache_clear()
    swiglu_module._CHOSEN.clear()


@pytest.mark.gpu
@pytest.mark.usefixtures("front_configs_narrowed")
@pytest.mark.parametrize("dtype", HALF, ids=_name)
@pytest.mark.parametrize("m", [1, 16, 33, 64, 65, 300, 4096], ids=lambda m: f"M={m}")
def test_gpu_front(m, dtype):
    _skip_unsupported(dtype, "cuda")
    _check_front(*_front_inputs(m, 4096, 1000, dtype, "cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [16, 300], ids=lambda m: f"M={m}")
def test_gpu_front_every_configuration(m, monkeypatch):
    """Every configuration the device is offered, one at a time (a tuner of one configuration runs
    it without timing), on a shape with masked edges in M, N and K."""
    device = torch.device("cuda")
    shared = hardware.shared_memory_per_block(device)
    configs = front_module.front_configs(shared, front_module.front_block_m(m), 2)
    inputs = _front_inputs(m, 1000, 333, torch.float16, "cuda")
    try:
        for config in configs:
            monkeypatch.setattr(front_module, "front_configs", lambda *args, config=config: (config,))
            front_module.front_tuner.cache_clear()
            swiglu_module._CHOSEN.clear()
            _check_front(*inputs)
    finally:
        front_module.front_tuner.cache_clear()
        swiglu_module._CHOSEN.clear()


@pytest.mark.gpu
@pytest.mark.usefixtures("front_configs_narrowed")
def test_gpu_front_awkward_sizes():
    _check_front(*_front_inputs(37, 1000, 333, torch.float16, "cuda"))
    _check_front(*_front_inputs(129, 72, 4100, torch.bfloat16, "cuda"))


@pytest.mark.gpu
def test_gpu_front_float32_is_a_routed_fallback():
    x, w_gate, w_up = _front_inputs(4, 32, 16, torch.float32, "cuda")
    with pytest.raises(tfg.FallbackError, match="float32"):
        with tfg.strict():
            swiglu_mlp_front(x, w_gate, w_up)


# ----------------------------------------------------------------------------------------------
# The MLP front composes like a PyTorch op (the elementwise op is in test_composition's table)
# ----------------------------------------------------------------------------------------------


def _front_model(x, w_gate, w_up):
    return swiglu_mlp_front(x * 2.0, w_gate, w_up) + 1.0


def test_front_compile_fullgraph_no_recompiles(device):
    dtype = torch.float16 if device == "cuda" else torch.float32
    inputs = _front_inputs(5, 32, 24, dtype, device)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True):
        compiled = torch.compile(_front_model, fullgraph=True, backend="aot_eager")
        for _ in range(3):
            out = compiled(*inputs)
            assert tfg.last_path("swiglu_mlp_front") in ("triton", "interpreter")
        torch.testing.assert_close(out, _front_model(*inputs), rtol=0, atol=0)
        torch._dynamo.reset()
        leaves = [t.clone().requires_grad_() for t in inputs]
        torch.compile(_front_model, fullgraph=True, backend="aot_eager")(*leaves).pow(2).sum().backward()
    eager = [t.clone().requires_grad_() for t in inputs]
    _front_model(*eager).pow(2).sum().backward()
    for got, expected in zip(leaves, eager):
        torch.testing.assert_close(got.grad, expected.grad, rtol=1e-5, atol=1e-5)


def test_front_forward_mode_ad_and_vmap_take_the_reference_loudly(device):
    x, w_gate, w_up = _front_inputs(3, 16, 8, torch.float32, device)
    with pytest.raises(tfg.FallbackError, match="torch.func"):
        with tfg.strict():
            torch.func.vmap(swiglu_mlp_front, in_dims=(0, None, None))(x[None].expand(2, 3, 16), w_gate, w_up)
    with tfg.strict(False), pytest.warns(tfg.FallbackWarning):
        got = torch.func.jvp(lambda a: swiglu_mlp_front(a, w_gate, w_up), (x,), (torch.ones_like(x),))[1]
    expected = torch.func.jvp(lambda a: swiglu_mlp_front_ref(a, w_gate, w_up), (x,), (torch.ones_like(x),))[1]
    torch.testing.assert_close(got, expected)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_gpu_front_compiled_and_cuda_graphs(mode):
    inputs = _front_inputs(16, 256, 512, torch.bfloat16, "cuda")
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True):
        compiled = torch.compile(_front_model, fullgraph=True, mode=mode)
        for _ in range(4):
            out = compiled(*inputs).clone()
    torch.testing.assert_close(out, _front_model(*inputs), rtol=0, atol=0)
    assert tfg.last_path("swiglu_mlp_front") == "triton"


@pytest.mark.gpu
def test_gpu_front_hand_captured_cuda_graph():
    static = list(_front_inputs(8, 512, 1024, torch.float16, "cuda"))
    swiglu_mlp_front(*static)  # warm up: autotune and compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = swiglu_mlp_front(*static)
    fresh = _front_inputs(8, 512, 1024, torch.float16, "cuda")
    for s, f in zip(static, fresh):
        s.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, swiglu_mlp_front(*fresh), rtol=0, atol=0)
