"""Every public op composes with PyTorch like a built-in op (the op template of issue 10).

One table, :data:`OPS`, lists each public op with inputs and its float64 reference; every test
below runs for every op in it, so a new op joins by adding one row. Checked here:

- ``torch.compile(fullgraph=True)``: no graph break, no recompilation across repeated calls of the
  same shapes, forward and backward equal to eager (CPU: the ``aot_eager`` backend and one
  Inductor run; GPU: Inductor, ``mode="reduce-overhead"`` and a hand-captured CUDA graph);
- ``last_path`` inside a compiled region reports the path that served the call;
- autograd beyond one ``backward()``: double backward, forward-mode AD and ``torch.func``
  transforms are right, or (strict mode) raise — never zeros, never a dropped tangent.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import tritonforge as tfg
from tritonforge import hardware, reference, runtime
from tritonforge.ops import rmsnorm_backward as rms_norm_backward_module


@dataclasses.dataclass(frozen=True)
class OpCase:
    name: str  # the op's name for last_path
    call: Callable  # (*tensors) -> tensor, through the public function
    ref: Callable  # (*tensors) -> tensor, the PyTorch reference (differentiable)
    make: Callable  # (dtype, device) -> tuple of fresh random inputs


def _rms_inputs(dtype, device, shape=(6, 40)):
    return torch.randn(shape, dtype=dtype, device=device), (1 + 0.5 * torch.randn(shape[-1], device=device)).to(dtype)


OPS = [
    OpCase("rms_norm", lambda x, w: tfg.rms_norm(x, w, 1e-5), lambda x, w: reference.rms_norm_ref(x, w, 1e-5), _rms_inputs),
    OpCase(
        "axpy",
        lambda x, y: tfg.axpy(1.5, x, y),
        lambda x, y: reference.axpy_ref(1.5, x, y),
        lambda dtype, device: (torch.randn(6, 40, dtype=dtype, device=device), torch.randn(6, 40, dtype=dtype, device=device)),
    ),
    OpCase(
        "swiglu",
        tfg.swiglu,
        reference.swiglu_ref,
        lambda dtype, device: (torch.randn(6, 40, dtype=dtype, device=device), torch.randn(6, 40, dtype=dtype, device=device)),
    ),
    # Logits with spread (std 4), so that the softmax is peaked and its Hessian far from zero.
    OpCase("softmax", tfg.softmax, reference.softmax_ref, lambda dtype, device: (4 * torch.randn(6, 40, dtype=dtype, device=device),)),
]
KERNEL_BACKWARD = ("rms_norm", "swiglu", "softmax")
SAVES_OUTPUT = ("softmax",)
"""Ops whose backward reads their output (as ``torch.softmax``'s does): an in-place change of the
output before backward is an autograd error, exactly as with the PyTorch op."""
"""The ops whose backward is a kernel: under create_graph they take the reference backward."""
IDS = [op.name for op in OPS]


def _kernel_path(device) -> str:
    return "triton" if torch.device(device).type == "cuda" else "interpreter"


def _wrapped(op: OpCase):
    """A model-like function around the op: work before and after it for the compiler to fuse."""
    return lambda *t: op.call(*(a * 2.0 for a in t)) + 1.0


def _grads(fn, inputs):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    fn(*leaves).pow(2).sum().backward()
    return [t.grad for t in leaves]


# ----------------------------------------------------------------------------------------------
# torch.compile
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_compile_fullgraph_no_recompiles_forward_and_backward(op, device):
    """aot_eager runs Dynamo and AOTAutograd (the graph capture and the backward graph) without
    Inductor's code generation, so it runs on the interpreter path; the GPU test below adds
    Inductor and CUDA graphs."""
    inputs = op.make(torch.float32, device)
    eager = _wrapped(op)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True):
        compiled = torch.compile(eager, fullgraph=True, backend="aot_eager")
        for _ in range(3):
            runtime.reset_routing_state()
            out = compiled(*inputs)
            assert tfg.last_path(op.name) == _kernel_path(device)  # the op's body ran, routed
        torch.testing.assert_close(out, eager(*inputs), rtol=0, atol=0)
        torch._dynamo.reset()  # Dynamo caches per code object: the training graph starts afresh
        compiled_bwd = torch.compile(eager, fullgraph=True, backend="aot_eager")
        for _ in range(2):
            got = _grads(compiled_bwd, inputs)
    for g, e in zip(got, _grads(eager, inputs), strict=True):
        torch.testing.assert_close(g, e, rtol=1e-6, atol=1e-6)


def test_compile_with_inductor_on_cpu(device):
    """The whole stack, Inductor included, with the op inside: one op, CPU tensors (Inductor
    writes C++ for the work around it and calls the operator)."""
    op = OPS[0]
    inputs = op.make(torch.float32, device)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True):
        compiled = torch.compile(_wrapped(op), fullgraph=True)
        for _ in range(2):
            out = compiled(*inputs)
    torch.testing.assert_close(out, _wrapped(op)(*inputs), rtol=1e-6, atol=1e-6)
    assert tfg.last_path(op.name) == _kernel_path(device)


@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS, ids=IDS)
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_gpu_compile_inductor_and_cuda_graphs(op, mode):
    """Inductor with and without CUDA graphs (reduce-overhead records a graph on an early call and
    replays it after): forward equal to eager, forward+backward close, no recompilation."""
    dtype = torch.bfloat16
    inputs = op.make(dtype, "cuda")
    eager = _wrapped(op)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True):
        compiled = torch.compile(eager, fullgraph=True, mode=mode)
        for _ in range(4):
            out = compiled(*inputs).clone()
        torch.testing.assert_close(out, eager(*inputs), rtol=2e-2, atol=2e-2)
        assert tfg.last_path(op.name) == "triton"
        torch._dynamo.reset()  # Dynamo caches per code object: the training graph starts afresh
        compiled_bwd = torch.compile(eager, fullgraph=True, mode=mode)
        for _ in range(3):
            got = _grads(compiled_bwd, inputs)
    for g, e in zip(got, _grads(eager, inputs), strict=True):
        torch.testing.assert_close(g, e, rtol=3e-2, atol=3e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_gpu_hand_captured_cuda_graph(op):
    """Inside torch.cuda.graph the op's kernels are recorded once and replayed on new data."""
    inputs = op.make(torch.float32, "cuda")
    static = [t.clone() for t in inputs]
    op.call(*static)  # warm up: compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = op.call(*static)
    fresh = op.make(torch.float32, "cuda")
    for s, f in zip(static, fresh):
        s.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(static_out, op.call(*fresh), rtol=0, atol=0)


# ----------------------------------------------------------------------------------------------
# Autograd beyond one backward: right or loud
# ----------------------------------------------------------------------------------------------


def _fallback_reasons(record):
    return [str(w.message) for w in record if issubclass(w.category, tfg.FallbackWarning)]


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_double_backward_is_exact_or_raises_under_strict(op, device):
    inputs = op.make(torch.float64, device)
    hessian = torch.autograd.functional.hessian
    x = inputs[0][0]  # one row: the Hessian is [40, 40]
    rest = [t[0] if t.shape == inputs[0].shape else t for t in inputs[1:]]
    expected = hessian(lambda a: op.ref(a, *rest).pow(2).sum(), x)
    # A real second derivative, far above the tolerance below, so zeros would fail. Not a fixed
    # size: a peaked softmax row of fresh random logits has a Hessian near 0.08.
    assert expected.abs().max() > 1e-6
    if op.name in KERNEL_BACKWARD:  # create_graph takes the reference backward
        with pytest.raises(tfg.FallbackError, match="create_graph"):
            hessian(lambda a: op.call(a, *rest).pow(2).sum(), x)
    with tfg.strict(False), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = hessian(lambda a: op.call(a, *rest).pow(2).sum(), x)
        leaves = [t.detach().clone().requires_grad_() for t in inputs]
        assert torch.autograd.gradgradcheck(op.call, leaves, fast_mode=True)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    if op.name in KERNEL_BACKWARD:
        assert any("create_graph" in m for m in _fallback_reasons(record))


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_forward_mode_ad_carries_the_tangent_or_raises(op, device):
    inputs = op.make(torch.float64, device)
    tangent = torch.randn_like(inputs[0])
    _, expected = torch.func.jvp(lambda a: op.ref(a, *inputs[1:]), (inputs[0],), (tangent,))
    with fwAD.dual_level():
        dual = fwAD.make_dual(inputs[0], tangent)
        with pytest.raises(tfg.FallbackError, match="forward-mode AD"):
            op.call(dual, *inputs[1:])
        with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="forward-mode AD"):
            got = fwAD.unpack_dual(op.call(dual, *inputs[1:])).tangent
    assert got is not None
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert tfg.last_route(op.name).reason == "autograd"


@pytest.mark.parametrize("op", OPS, ids=IDS)
@pytest.mark.parametrize("transform", ["grad", "jvp"])
def test_torch_func_grad_and_jvp_are_right_or_raise(op, transform, device):
    inputs = op.make(torch.float64, device)
    rest = inputs[1:]
    tangent = torch.randn_like(inputs[0])

    def run(fn):
        if transform == "grad":
            return torch.func.grad(lambda a: fn(a, *rest).pow(2).sum())(inputs[0])
        return torch.func.jvp(lambda a: fn(a, *rest), (inputs[0],), (tangent,))[1]

    with pytest.raises(tfg.FallbackError, match="torch.func"):
        run(op.call)
    with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="torch.func"):
        got = run(op.call)
    torch.testing.assert_close(got, run(op.ref), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", OPS, ids=IDS)
@pytest.mark.parametrize("transform", ["jvp", "make_dual", "grad"])
def test_transforms_inside_torch_compile_are_right_or_raise(op, transform, device):
    """The same transforms inside a compiled region (``aot_eager``): the graph would hold the
    operator, which has no forward-mode rule, so a compiled jvp gave zero tangents until the
    traced call took the reference for forward-mode AD; ``torch.func.grad`` raises there."""
    inputs = op.make(torch.float64, device)
    rest = inputs[1:]
    tangent = torch.randn_like(inputs[0])

    def run(fn, x):
        if transform == "jvp":
            return torch.func.jvp(lambda a: fn(a, *rest), (x,), (tangent,))[1]
        if transform == "make_dual":
            with fwAD.dual_level():
                return fwAD.unpack_dual(fn(fwAD.make_dual(x, tangent), *rest)).tangent
        return torch.func.grad(lambda a: fn(a, *rest).pow(2).sum())(x)

    expected = run(op.ref, inputs[0])
    assert expected.abs().max() > 1e-3  # a real derivative, so zeros would fail
    torch._dynamo.reset()
    try:
        with tfg.strict(False), warnings.catch_warnings():
            warnings.simplefilter("ignore", tfg.FallbackWarning)
            try:
                got = torch.compile(lambda x: run(op.call, x), backend="aot_eager")(inputs[0])
            except Exception as exc:  # loud is allowed; only a wrong answer is not
                assert transform == "grad", f"compiled {transform} raised: {exc}"
                return
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
        if transform != "grad":
            assert tfg.last_route(op.name).reason == "autograd"
    finally:
        torch._dynamo.reset()


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_vmap_runs_the_kernels(op, device):
    """vmap is served by each operator's vmap rule, on the kernel path (strict: no fallback)."""
    arity = len(op.make(torch.float32, device))
    batch = [torch.stack([op.make(torch.float32, device)[i] for _ in range(3)]) for i in range(arity)]
    for in_dims in [(0, None), (0, 0), (None, 0), (1, None)] if arity == 2 else [(0,), (1,)]:
        args = [b if d is not None else b[0] for b, d in zip(batch, in_dims)]
        if in_dims[0] == 1:
            args[0] = args[0].movedim(0, 1).contiguous()
        got = torch.func.vmap(op.call, in_dims=in_dims)(*args)
        expected = torch.stack([op.ref(*(a.select(d, i) if d is not None else a for a, d in zip(args, in_dims))) for i in range(3)])
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        assert tfg.last_path(op.name) == _kernel_path(device)


# ----------------------------------------------------------------------------------------------
# Outputs, dtypes, empty inputs: as PyTorch would have it
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS, ids=IDS)
@pytest.mark.parametrize("shape", [(40,), (2, 3, 40)], ids=str)
def test_outputs_own_their_storage(op, shape, device):
    """Any input rank: the output is no view, so in-place ops work on it, with autograd too."""
    if op.name == "rms_norm":
        inputs = list(_rms_inputs(torch.float32, device, shape))
    else:
        inputs = [torch.randn(shape, device=device) for _ in op.make(torch.float32, device)]
    y = op.call(*inputs)
    assert y._base is None
    y.mul_(2)
    leaves = [t.clone().requires_grad_() for t in inputs]
    out = op.call(*leaves)
    out.mul_(2)
    if op.name in SAVES_OUTPUT:  # its backward needs the output: modifying it is an error, as in PyTorch
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()
        return
    out.sum().backward()
    assert all(t.grad is not None for t in leaves)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_rms_norm_fp32_weight_promotes_like_hugging_face(dtype, device):
    """A 16-bit activation with an fp32 weight (torch.autocast training, HF fp32 norms): the
    output is float32, ``weight * normalized.to(x.dtype)``; gradients in each input's dtype."""
    if dtype == torch.bfloat16 and not hardware.supports_bf16(torch.device(device)):
        pytest.skip("bfloat16 kernels need compute capability >= 8.0")
    x = torch.randn(9, 130, dtype=dtype, device=device)
    w = 1 + 0.5 * torch.randn(130, device=device)
    y = tfg.rms_norm(x, w)
    assert y.dtype == torch.float32 and tfg.last_path("rms_norm") == _kernel_path(device)
    hf = w * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype)
    assert (y == hf).float().mean() >= 0.99  # HF's rounding order, bit for bit almost everywhere
    torch.testing.assert_close(y, hf, rtol=1e-2, atol=1e-2)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    dy = torch.randn(9, 130, device=device)
    tfg.rms_norm(xg, wg).backward(dy)
    assert xg.grad.dtype == dtype and wg.grad.dtype == torch.float32
    dx, dw = reference.rms_norm_bwd_ref(dy.double(), x.double(), w.double(), 1e-6)
    torch.testing.assert_close(xg.grad.double(), dx, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(wg.grad.double(), dw, rtol=1e-4, atol=1e-3)


def test_rms_norm_fp64_eps_is_exact(device):
    """eps reaches the kernel in two float32 halves: float64 with a large eps keeps ~1e-16."""
    x = torch.randn(4, 64, dtype=torch.float64, device=device) * 1e-3  # x² small next to eps
    w = torch.randn(64, dtype=torch.float64, device=device)
    for eps in (0.1, 1e-6, 1 / 3):
        y = tfg.rms_norm(x, w, eps)
        ref = reference.rms_norm_ref(x, w, eps, upcast=True)
        assert ((y - ref).abs().max() / ref.abs().max()).item() < 1e-14


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_empty_input_records_its_route(op, device):
    if op.name in ("axpy", "swiglu", "softmax"):
        inputs = [t[:0] for t in op.make(torch.float32, device)]
    else:
        inputs = [torch.randn(0, 8, device=device), torch.randn(8, device=device)]
    out = op.call(*inputs)
    assert out.numel() == 0
    route = tfg.last_route(op.name)
    assert route.path == "torch" and route.reason == "empty"  # recorded, and allowed under strict


# ----------------------------------------------------------------------------------------------
# The backward is routed like the forward
# ----------------------------------------------------------------------------------------------


def _broken_backward(*args, **kwargs):
    raise RuntimeError("injected backward launch failure")


def test_backward_kernel_failure_falls_back_with_a_warning(device, monkeypatch):
    x, w = _rms_inputs(torch.float64, device)
    monkeypatch.setattr(rms_norm_backward_module, "rms_norm_bwd", _broken_backward)
    leaves = [x.clone().requires_grad_(), w.clone().requires_grad_()]
    with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="rms_norm_backward.*kernel-error"):
        tfg.rms_norm(*leaves, 1e-5).pow(2).sum().backward()
    route = tfg.last_route("rms_norm_backward")
    assert route.path == "torch" and route.reason == "kernel-error" and "injected" in route.detail
    assert tfg.last_path("rms_norm") == _kernel_path(device)  # the forward still ran the kernel
    expected = _grads(lambda a, b: reference.rms_norm_ref(a, b, 1e-5), (x, w))
    for g, e in zip((leaves[0].grad, leaves[1].grad), expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


def test_backward_kernel_failure_raises_under_strict(device, monkeypatch):
    x, w = _rms_inputs(torch.float32, device)
    monkeypatch.setattr(rms_norm_backward_module, "rms_norm_bwd", _broken_backward)
    leaves = [x.clone().requires_grad_(), w.clone().requires_grad_()]
    with pytest.raises(tfg.FallbackError, match="rms_norm_backward.*kernel-error") as info:
        tfg.rms_norm(*leaves).sum().backward()
    assert "injected" in str(info.value.__cause__)
