"""The four routing checks, proven by fault injection; warnings, last_path and strict mode."""

import os
import subprocess
import sys
import warnings

import pytest
import torch

import tritonforge as tfg
from tritonforge import hardware, runtime
from tritonforge._triton import tl, triton

# Where kernels run on this machine: CUDA tensors on a GPU machine, CPU tensors (interpreter) here.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
X = torch.randn(300, device=DEVICE)
Y = torch.randn(300, device=DEVICE)
EXPECTED = 2.0 * X + Y


def _call():
    return tfg.axpy(2.0, X, Y)


def _fallback_warnings(record):
    return [w for w in record if issubclass(w.category, tfg.FallbackWarning)]


# -- check 1: Triton importable -------------------------------------------------------------------


def test_triton_missing_falls_back_with_a_warning(monkeypatch):
    monkeypatch.setattr(runtime, "triton_available", lambda: False)
    with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="triton-missing"):
        out = _call()
    torch.testing.assert_close(out, EXPECTED)
    assert tfg.last_path("axpy") == "torch"
    assert tfg.last_route("axpy").reason == "triton-missing"


def test_triton_really_not_installed_subprocess():
    """A real failing `import triton` (as on macOS): the op still answers, on the torch path."""
    code = (
        "import sys, warnings\n"
        "sys.modules['triton'] = None\n"
        "import torch, tritonforge as tfg\n"
        "with warnings.catch_warnings(record=True) as rec:\n"
        "    warnings.simplefilter('always')\n"
        "    x, y = torch.randn(5), torch.randn(5)\n"
        "    out = tfg.axpy(2.0, x, y); tfg.axpy(2.0, x, y)\n"
        "assert torch.allclose(out, 2.0 * x + y)\n"
        "n = sum(issubclass(w.category, tfg.FallbackWarning) for w in rec)\n"
        "print(tfg.last_path('axpy'), tfg.last_route('axpy').reason, n)\n"
    )
    env = dict(os.environ, TRITONFORGE_STRICT="0")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["torch", "triton-missing", "1"]


# -- check 2: a device Triton can run on -----------------------------------------------------------


def test_no_gpu_and_no_interpreter_falls_back(monkeypatch):
    monkeypatch.setattr(hardware, "interpreting", lambda: False)
    x, y = X.cpu(), Y.cpu()
    with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="tensors are on cpu"):
        out = tfg.axpy(2.0, x, y)
    torch.testing.assert_close(out, EXPECTED.cpu())
    assert tfg.last_route("axpy").reason == "device"


def test_cpu_tensors_take_the_interpreter_here():
    if torch.cuda.is_available():
        pytest.skip("this machine compiles kernels for its GPU")
    torch.testing.assert_close(_call(), EXPECTED)
    assert tfg.last_path("axpy") == "interpreter"


# -- check 3: inputs the kernel supports -----------------------------------------------------------


def test_bf16_on_a_t4_is_unsupported(monkeypatch):
    monkeypatch.setattr(hardware, "device_capability", lambda device: (7, 5))
    reason = hardware.bf16_unsupported(torch.bfloat16, torch.device("cuda"))
    assert reason is not None and "sm_75" in reason and "float16" in reason
    assert hardware.bf16_unsupported(torch.float16, torch.device("cuda")) is None
    monkeypatch.setattr(hardware, "device_capability", lambda device: (9, 0))
    assert hardware.bf16_unsupported(torch.bfloat16, torch.device("cuda")) is None


def test_unsupported_inputs_fall_back():
    with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="unsupported"):
        out = runtime.dispatch(
            "probe", device=X.device, kernel=lambda: pytest.fail("kernel must not run"),
            reference=lambda: "reference", unsupported="this probe supports nothing",
        )
    assert out == "reference"
    assert tfg.last_route("probe") == tfg.Route("probe", "torch", "unsupported", "this probe supports nothing")


def test_dispatch_given_a_dtype_refuses_bf16_where_the_gpu_lacks_it(monkeypatch):
    """Every op passes its dtype; dispatch itself applies the shared bf16 limit (check 3)."""
    monkeypatch.setattr(runtime, "_device_route", lambda op, device: tfg.Route(op, "triton"))
    monkeypatch.setattr(hardware, "device_capability", lambda device: (7, 5))
    cuda = torch.device("cuda", 0)
    with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="sm_75"):
        out = runtime.dispatch("probe", device=cuda, dtype=torch.bfloat16,
                               kernel=lambda: pytest.fail("kernel must not run"), reference=lambda: "reference")  # fmt: skip
    assert out == "reference" and tfg.last_route("probe").reason == "unsupported"
    out = runtime.dispatch("probe", device=cuda, dtype=torch.float16, kernel=lambda: "kernel", reference=lambda: "reference")
    assert out == "kernel"


# -- check 4: the kernel compiles and launches ----------------------------------------------------


@triton.jit
def _broken_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)  # BLOCK=100 is not a power of two: rejected at compile time
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


def test_compile_error_falls_back():
    buf = torch.randn(10, device=DEVICE)

    def launch():
        _broken_kernel[(1,)](buf, 10, BLOCK=100)
        return "kernel"

    with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="kernel-error"):
        out = runtime.dispatch("broken", device=buf.device, kernel=launch, reference=lambda: "reference")
    assert out == "reference"
    assert tfg.last_route("broken").reason == "kernel-error"
    assert "power of 2" in tfg.last_route("broken").detail


def test_compile_error_raises_under_strict():
    buf = torch.randn(10, device=DEVICE)
    with pytest.raises(tfg.FallbackError, match="kernel-error") as info:
        runtime.dispatch("broken", device=buf.device, kernel=lambda: _broken_kernel[(1,)](buf, 10, BLOCK=100), reference=lambda: None)
    assert info.value.__cause__ is not None  # the compiler's own error is kept


# -- once-only warnings, last_path, strict mode ----------------------------------------------------


def test_warns_once_per_op_and_reason(monkeypatch):
    monkeypatch.setattr(runtime, "triton_available", lambda: False)
    with tfg.strict(False), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            _call()
        runtime.dispatch("other_op", device=X.device, kernel=lambda: None, reference=lambda: None)
    messages = [str(w.message) for w in _fallback_warnings(record)]
    assert len(messages) == 2, messages
    assert messages[0].startswith("tritonforge.axpy") and messages[1].startswith("tritonforge.other_op")


def test_last_path_follows_the_latest_call(monkeypatch):
    with pytest.raises(KeyError, match="axpy"):
        tfg.last_path("axpy")
    _call()
    kernel_path = tfg.last_path("axpy")
    assert kernel_path in ("triton", "interpreter")
    monkeypatch.setattr(runtime, "triton_available", lambda: False)
    with tfg.strict(False), pytest.warns(tfg.FallbackWarning):
        _call()
    assert tfg.last_path("axpy") == "torch"
    monkeypatch.undo()
    _call()
    assert tfg.last_path("axpy") == kernel_path


def test_strict_env_var_turns_fallback_into_error(monkeypatch):
    monkeypatch.setattr(runtime, "triton_available", lambda: False)
    monkeypatch.setenv("TRITONFORGE_STRICT", "1")
    assert tfg.is_strict()
    with pytest.raises(tfg.FallbackError, match="axpy.*triton-missing"):
        _call()
    monkeypatch.setenv("TRITONFORGE_STRICT", "0")
    assert not tfg.is_strict()
    with pytest.warns(tfg.FallbackWarning):
        _call()


def test_strict_context_manager_nests(monkeypatch):
    monkeypatch.setenv("TRITONFORGE_STRICT", "0")
    with tfg.strict():
        assert tfg.is_strict()
        with tfg.strict(False):
            assert not tfg.is_strict()
        assert tfg.is_strict()
    assert not tfg.is_strict()


def test_suite_runs_strict():
    assert os.environ.get("TRITONFORGE_STRICT") == "1" and tfg.is_strict()


# -- the environment report -------------------------------------------------------------------------


def test_environment_report():
    env = tfg.environment()
    assert env.path in runtime.PATHS
    assert env.torch_version == torch.__version__
    text = str(env)
    for label in ("execution path", "device", "compute capability", "bf16 kernels", "default dtype", "torch", "triton"):
        assert label in text
    assert "<table>" in env._repr_html_()
    if not torch.cuda.is_available():
        assert env.path == "interpreter" and env.default_dtype == torch.float32 and env.device_type == "cpu"


def test_environment_on_a_t4_defaults_to_fp16(monkeypatch):
    monkeypatch.setattr(hardware, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # what a T4 really answers
    env = tfg.environment()
    assert (env.path, env.device, env.bf16, env.default_dtype) == ("triton", "Tesla T4", False, torch.float16)
    assert env.compute_capability == "7.5 (sm_75)"


@pytest.mark.gpu
def test_gpu_environment_and_compiled_path():
    env = tfg.environment()
    assert env.path == "triton" and env.compute_capability is not None
    x = torch.randn(4096, device="cuda")
    tfg.axpy(1.0, x, x)
    assert tfg.last_path("axpy") == "triton"


def test_a_device_the_interpreter_cannot_run_is_a_device_fallback():
    """Meta tensors on the interpreter path: routed to the reference (reason "device"), not sent
    to a kernel that fails copying them (which read as a kernel error)."""
    if not hardware.interpreting():
        pytest.skip("the interpreter's device check")
    route = runtime.choose_route("rms_norm", torch.device("meta"))
    assert route.path == "torch" and route.reason == "device" and "meta" in route.detail
    assert runtime.choose_route("rms_norm", torch.device("cpu")).path == "interpreter"


# -- a fallback decided while AOTAutograd traces -------------------------------------------------


def _failing_launch(x):
    raise RuntimeError("this launch cannot run on the tracer's fake tensors")


def _routed_in_a_traced_backward(op_name: str):
    """An operator whose registered backward routes in itself (no operator of its own): Dynamo
    puts the operator in its graph, and AOTAutograd runs the backward's routing once, with fake
    tensors, while it compiles the backward."""

    @torch.library.custom_op(f"tritonforge_test::{op_name}", mutates_args=())
    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 3.0

    scale.register_fake(lambda x: torch.empty_like(x))

    def backward(ctx, dy):
        return runtime.dispatch(op_name, device=dy.device, dtype=dy.dtype, kernel=lambda: _failing_launch(dy),
                                reference=lambda: dy * 3.0)  # fmt: skip

    scale.register_autograd(backward)
    return torch.compile(lambda x: scale(x).sum(), fullgraph=True, backend="aot_eager")


def test_a_fallback_decided_while_aot_autograd_traces_is_not_silent():
    """That trace is the only time the routing's Python runs (the compiled graph keeps the
    reference), so strict routing must raise there, and otherwise it is warned and recorded."""
    torch._dynamo.reset()
    x = torch.randn(5, requires_grad=True)
    with tfg.strict(True), pytest.raises(Exception, match="strict routing") as caught:
        _routed_in_a_traced_backward("traced_backward_strict")(x).backward()
    assert "decided while torch.compile traced" in str(caught.value)
    torch._dynamo.reset()
    with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="traced_backward_loose"):
        _routed_in_a_traced_backward("traced_backward_loose")(x).backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 3.0))
    assert tfg.last_route("traced_backward_loose").reason == "kernel-error"
    torch._dynamo.reset()


def test_a_kernel_error_while_dynamo_traces_names_the_op_under_strict_routing():
    """An autograd.Function's backward is traced by Dynamo itself: a launch that fails there (the
    interpreter's, or one on fake tensors) is a FallbackError naming the op, not an error about a
    message Dynamo cannot fold into a constant."""

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 3.0

        @staticmethod
        def backward(ctx, dy):
            return runtime.dispatch("dynamo_traced_backward", device=dy.device, dtype=dy.dtype, kernel=lambda: _failing_launch(dy),
                                    reference=lambda: dy * 3.0)  # fmt: skip

    torch._dynamo.reset()
    step = torch.compile(lambda x: Scale.apply(x).sum(), fullgraph=True, backend="aot_eager")
    with tfg.strict(True), pytest.raises(Exception, match="dynamo_traced_backward: the Triton path is unavailable"):
        step(torch.randn(5, requires_grad=True)).backward()
    torch._dynamo.reset()
