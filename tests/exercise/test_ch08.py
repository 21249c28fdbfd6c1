"""Exercise 8a's check (tritonforge.exercise.ch08) catches an op registered or routed wrongly: no
fake (torch.compile fails, opcheck too), no custom op at all (Dynamo traces into the launch: a graph
break), a fake of the wrong dtype, no backward, a silent fallback (the launch's exception caught
inside the kernel callable: the route says "kernel"), a fallback that is not routed at all, the
route recorded under another name, the dtype not given to dispatch (bf16 reaches the launcher on a
T4), errors that do not name the argument, bad input sent to the reference as an "unsupported"
fallback, and the reference computed for every call. Each fails its check on every seed; the
reference solution passes; re-registering (a second check in one process) never meets a name
already taken."""

from __future__ import annotations

import numbers
import warnings

import pytest
import torch

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge import checks, exercise, runtime
from tritonforge.exercise import ch08

from . import notebooks

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _validate(x, residual, alpha):
    checks.check_tensor("x", x, dtypes=DTYPES)
    checks.check_tensor("residual", residual, dtypes=DTYPES)
    checks.check_same_device(x=x, residual=residual)
    checks.check_same_dtype(x=x, residual=residual)
    checks.check_same_shape(x=x, residual=residual)
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a real Python number, got {type(alpha).__name__}")


def _setup_context(ctx, inputs, output):
    ctx.alpha = inputs[2]


def _backward(ctx, dout):
    return ctx.alpha * dout, dout, None


def _build(
    op_name,
    launch,
    *,
    fake=True,
    fake_dtype=None,
    autograd=True,
    custom_op=True,
    route_name=None,
    pass_dtype=True,
    kernel=None,
    validate=_validate,
):
    """The reference solution's shape, with one part changed by a keyword: each planted mistake below
    is this with one argument."""
    name = route_name or op_name

    def routed(x, residual, alpha):
        return runtime.dispatch(
            name, device=x.device, dtype=x.dtype if pass_dtype else None,
            kernel=(lambda: kernel(launch, x, residual, alpha)) if kernel else (lambda: launch(x, residual, alpha)),
            reference=lambda: exercise.scaled_residual_add_ref(x, residual, alpha),
        )  # fmt: skip

    @torch.library.custom_op(op_name, mutates_args=())
    def op(x: torch.Tensor, residual: torch.Tensor, alpha: float) -> torch.Tensor:
        return routed(x, residual, alpha)

    if fake:

        @op.register_fake
        def _(x, residual, alpha):
            return torch.empty_like(x, dtype=fake_dtype or x.dtype, memory_format=torch.contiguous_format)

    if autograd:
        op.register_autograd(_backward, setup_context=_setup_context)

    def public(x, residual, alpha):
        validate(x, residual, alpha)
        if custom_op:
            return op(x, residual, float(alpha))
        return routed(x, residual, float(alpha))

    return public


def srad_without_fake(op_name, launch):
    return _build(op_name, launch, fake=False)


def srad_without_custom_op(op_name, launch):
    """Routes from the public function: Dynamo traces into dispatch and the launch."""
    return _build(op_name, launch, custom_op=False)


def srad_fake_wrong_dtype(op_name, launch):
    """The fake says float32 whatever x is (the compiler would plan the wrong buffers)."""
    return _build(op_name, launch, fake_dtype=torch.float32)


def srad_without_backward(op_name, launch):
    return _build(op_name, launch, autograd=False)


def _swallowing_kernel(launch, x, residual, alpha):
    try:
        return launch(x, residual, alpha)
    except Exception:  # noqa: BLE001 - the planted mistake: a silent fallback
        return exercise.scaled_residual_add_ref(x, residual, alpha)


def srad_silent_fallback(op_name, launch):
    """Catches the launch's exception inside the kernel callable: dispatch records the kernel path."""
    return _build(op_name, launch, kernel=_swallowing_kernel)


def srad_unrouted_fallback(op_name, launch):
    """No runtime.dispatch: try the kernel, on any exception return the reference, tell no one."""

    @torch.library.custom_op(op_name, mutates_args=())
    def op(x: torch.Tensor, residual: torch.Tensor, alpha: float) -> torch.Tensor:
        try:
            return launch(x, residual, alpha)
        except Exception:  # noqa: BLE001
            return exercise.scaled_residual_add_ref(x, residual, alpha)

    op.register_fake(lambda x, residual, alpha: torch.empty_like(x, memory_format=torch.contiguous_format))
    op.register_autograd(_backward, setup_context=_setup_context)

    def public(x, residual, alpha):
        _validate(x, residual, alpha)
        return op(x, residual, float(alpha))

    return public


def srad_routes_under_another_name(op_name, launch):
    """Routes as "scaled_residual_add": last_path(op_name) knows nothing of the calls."""
    return _build(op_name, launch, route_name="scaled_residual_add")


def srad_forgets_the_dtype(op_name, launch):
    """dispatch without dtype: bf16 is not refused on a T4 and reaches the launcher."""
    return _build(op_name, launch, pass_dtype=False)


def _unnamed_validate(x, residual, alpha):
    if not isinstance(x, torch.Tensor) or not isinstance(residual, torch.Tensor):
        raise TypeError("expected tensors")
    if x.dtype not in DTYPES or x.dtype != residual.dtype:
        raise TypeError("unsupported or mismatched dtypes")
    if x.shape != residual.shape or x.device != residual.device:
        raise ValueError("the inputs do not match")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError("expected a real number")


def srad_unnamed_errors(op_name, launch):
    """Raises the right exception types, but no message says which argument is wrong."""
    return _build(op_name, launch, validate=_unnamed_validate)


def srad_no_validation(op_name, launch):
    """Lets everything through: the launcher refuses, the reference broadcasts or raises its own error."""
    return _build(op_name, launch, validate=lambda x, residual, alpha: None)


def srad_bad_input_as_fallback(op_name, launch):
    """Sends mismatched inputs to the reference as an "unsupported" fallback instead of raising."""

    @torch.library.custom_op(op_name, mutates_args=())
    def op(x: torch.Tensor, residual: torch.Tensor, alpha: float) -> torch.Tensor:
        unsupported = None
        if x.shape != residual.shape or x.dtype != residual.dtype:
            unsupported = "x and residual differ"
        return runtime.dispatch(op_name, device=x.device, dtype=x.dtype, unsupported=unsupported,
                                kernel=lambda: launch(x, residual, alpha),
                                reference=lambda: exercise.scaled_residual_add_ref(x, residual, alpha))  # fmt: skip

    op.register_fake(lambda x, residual, alpha: torch.empty_like(x, memory_format=torch.contiguous_format))
    op.register_autograd(_backward, setup_context=_setup_context)

    def public(x, residual, alpha):
        checks.check_tensor("x", x, dtypes=DTYPES)
        checks.check_tensor("residual", residual, dtypes=DTYPES)
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
            raise TypeError(f"alpha must be a real Python number, got {type(alpha).__name__}")
        return op(x, residual, float(alpha))

    return public


def srad_reference_as_kernel(op_name, launch):
    """Hands dispatch the reference as the "kernel": the route says kernel, PyTorch computed it."""
    return _build(op_name, launch, kernel=lambda launch, x, residual, alpha: exercise.scaled_residual_add_ref(x, residual, alpha))


# -- Exercise 8b: a row softmax whose kernel has limits of its own -------------------------------

ROW_MAX = exercise.ROW_SOFTMAX_MAX_N


def _softmax_limit(x, *, limit=ROW_MAX, longest=None):
    """The sentence for what the kernel cannot serve, or None (``longest``: a wrong comparison)."""
    n = x.shape[-1]
    too_long = longest(n) if longest else n > limit
    if too_long:
        return f"rows of {n} elements: the kernel holds at most {ROW_MAX}"
    if x.dtype == torch.float64:
        return "float64: the kernel computes in float32"
    return None


def _softmax_build(op_name, launch, *, limit=_softmax_limit, pass_dtype=True, empty="record", validate=True):
    def row_softmax(x):
        if validate:
            checks.check_tensor("x", x, dtypes=DTYPES, ndim_min=1)
        if x.numel() == 0 and empty == "record":
            runtime.record_empty(op_name)
            return torch.empty(x.shape, dtype=x.dtype, device=x.device)
        unsupported = limit(x)
        if x.numel() == 0 and empty == "fallback":
            unsupported = "empty input"
        return runtime.dispatch(op_name, device=x.device, dtype=x.dtype if pass_dtype else None, unsupported=unsupported,
                                kernel=lambda: launch(x), reference=lambda: exercise.row_softmax_ref(x))  # fmt: skip

    return row_softmax


def softmax_no_limits_of_its_own(op_name, launch):
    """Hands everything to the launcher: it refuses long rows and float64, dispatch catches that as
    a kernel error (after a launch) instead of an unsupported input."""
    return _softmax_build(op_name, launch, limit=lambda x: None)


def softmax_limit_off_by_one(op_name, launch):
    """``n >= 1024`` for the limit: rows of exactly 1024, which the kernel takes, go to the reference."""
    return _softmax_build(op_name, launch, limit=lambda x: _softmax_limit(x, longest=lambda n: n >= ROW_MAX))


def softmax_forgets_the_dtype(op_name, launch):
    """Its own limits, but no dtype= for dispatch: bf16 reaches the launcher on a T4."""
    return _softmax_build(op_name, launch, pass_dtype=False)


def softmax_limits_raise(op_name, launch):
    """Treats the kernel's limits as bad input: a ValueError for long rows and float64, no fallback."""
    build = _softmax_build(op_name, launch)

    def row_softmax(x):
        if isinstance(x, torch.Tensor) and x.numel() and _softmax_limit(x):
            raise ValueError(f"x: {_softmax_limit(x)}")
        return build(x)

    return row_softmax


def softmax_silent_reference(op_name, launch):
    """Decides the limits itself and returns the reference without dispatch: no warning, no record,
    nothing raised under strict routing."""
    build = _softmax_build(op_name, launch)

    def row_softmax(x):
        checks.check_tensor("x", x, dtypes=DTYPES, ndim_min=1)
        if x.numel() and _softmax_limit(x):
            return exercise.row_softmax_ref(x)
        return build(x)

    return row_softmax


def softmax_vague_detail(op_name, launch):
    """Routes past the limits as unsupported, but the detail names no limit."""
    return _softmax_build(op_name, launch, limit=lambda x: "input not supported by the kernel" if _softmax_limit(x) else None)


def softmax_empty_as_fallback(op_name, launch):
    """An empty input routed as an unsupported fallback: a warning, and FallbackError under strict routing."""
    return _softmax_build(op_name, launch, empty="fallback")


def softmax_empty_to_the_kernel(op_name, launch):
    """No empty case: the launcher refuses an empty tensor, dispatch reports a kernel error."""
    return _softmax_build(op_name, launch, empty="dispatch")


def softmax_int_as_fallback(op_name, launch):
    """No dtype check: an int32 tensor is sent to the reference as "unsupported" instead of a TypeError."""
    build = _softmax_build(op_name, launch, validate=False)

    def row_softmax(x):
        if isinstance(x, torch.Tensor) and not x.is_floating_point():
            return runtime.dispatch(op_name, device=x.device, dtype=x.dtype, unsupported=f"{x.dtype} is not a float",
                                    kernel=lambda: launch(x), reference=lambda: exercise.row_softmax_ref(x.float()))  # fmt: skip
        return build(x)

    return row_softmax


# -- Exercise 8c: a differentiable SwiGLU under every autograd mode ------------------------------


def _swiglu_build(op_name, backward_name, launch, launch_backward, *, backward_route=None, create_graph="reference",
                  routed_backward=True, forward_mode="reference", backward_operator=True):  # fmt: skip
    backward_route = backward_route or backward_name

    @torch.library.custom_op(op_name, mutates_args=())
    def op(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return runtime.dispatch(op_name, device=gate.device, dtype=gate.dtype, kernel=lambda: launch(gate, up),
                                reference=lambda: exercise.swiglu_ref(gate, up))  # fmt: skip

    op.register_fake(lambda gate, up: torch.empty_like(gate, memory_format=torch.contiguous_format))

    def kernel_backward(dy, gate, up):
        if not routed_backward:
            return launch_backward(dy, gate, up)
        return runtime.dispatch(backward_route, device=gate.device, dtype=gate.dtype, kernel=lambda: launch_backward(dy, gate, up),
                                reference=lambda: exercise.swiglu_backward_ref(dy, gate, up))  # fmt: skip

    if backward_operator:
        backward_op = torch.library.custom_op(backward_name, mutates_args=())(_typed_backward(kernel_backward))
        backward_op.register_fake(lambda dy, gate, up: (torch.empty_like(gate), torch.empty_like(up)))
        kernel_backward = backward_op

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        recording = dy.requires_grad if create_graph == "by_requires_grad" else torch.is_grad_enabled()
        recording = recording and not torch.compiler.is_compiling()
        if recording and create_graph == "silent":
            return exercise.swiglu_backward_ref(dy, gate, up)
        if recording and create_graph == "detached":
            with torch.no_grad():
                grads = exercise.swiglu_backward_ref(dy, gate, up)
            return runtime.dispatch_reference(backward_name, "autograd", "create_graph=True", lambda: grads)
        if recording and create_graph in ("reference", "by_requires_grad"):
            return runtime.dispatch_reference(backward_name, "autograd", "create_graph=True",
                                              lambda: exercise.swiglu_backward_ref(dy, gate, up))  # fmt: skip
        return kernel_backward(dy, gate, up)

    op.register_autograd(backward, setup_context=setup_context)

    def swiglu(gate, up):
        checks.check_tensor("gate", gate, dtypes=DTYPES)
        checks.check_tensor("up", up, dtypes=DTYPES)
        checks.check_same_shape(gate=gate, up=up)
        mode = runtime.autograd_mode_unsupported(gate, up)
        if mode and forward_mode == "reference":
            return runtime.dispatch_reference(op_name, "autograd", mode, lambda: exercise.swiglu_ref(gate, up))
        if mode and forward_mode == "silent":
            return exercise.swiglu_ref(gate, up)
        return op(gate, up)

    return swiglu


def _typed_backward(body):
    """``body`` with the annotations ``torch.library.custom_op`` reads its schema from."""

    def swiglu_backward(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return body(dy, gate, up)

    return swiglu_backward


def swiglu_backward_not_an_operator(op_name, backward_name, launch, launch_backward):
    """Routes the backward in the registered autograd function itself (no operator of its own):
    right in eager mode, but AOTAutograd traces the launch with fake tensors (opcheck's AOT dispatch
    test, a compiled training step)."""
    return _swiglu_build(op_name, backward_name, launch, launch_backward, backward_operator=False)


def swiglu_backward_under_forward_name(op_name, backward_name, launch, launch_backward):
    """Routes the backward under the forward's name: last_route(backward_name) knows nothing of it."""
    return _swiglu_build(op_name, backward_name, launch, launch_backward, backward_route=op_name)


def swiglu_backward_not_routed(op_name, backward_name, launch, launch_backward):
    """Calls the backward kernel directly: no route recorded, no fallback if it fails."""
    return _swiglu_build(op_name, backward_name, launch, launch_backward, routed_backward=False)


def swiglu_kernel_under_create_graph(op_name, backward_name, launch, launch_backward):
    """The backward kernel even under create_graph=True: its gradients are constants to autograd."""
    return _swiglu_build(op_name, backward_name, launch, launch_backward, create_graph="kernel")


def swiglu_create_graph_silently(op_name, backward_name, launch, launch_backward):
    """The reference backward under create_graph=True, but not through dispatch_reference: silent, and
    nothing raises under strict routing."""
    return _swiglu_build(op_name, backward_name, launch, launch_backward, create_graph="silent")


def swiglu_detached_reference_under_create_graph(op_name, backward_name, launch, launch_backward):
    """Routes create_graph=True to the reference backward, loudly, but computes it under no_grad:
    the second derivative vanishes."""
    return _swiglu_build(op_name, backward_name, launch, launch_backward, create_graph="detached")


def swiglu_create_graph_by_requires_grad(op_name, backward_name, launch, launch_backward):
    """Tells create_graph by dy.requires_grad instead of grad mode: a plain dy with create_graph=True
    takes the kernel, whose gradients autograd cannot differentiate."""
    return _swiglu_build(op_name, backward_name, launch, launch_backward, create_graph="by_requires_grad")


def swiglu_no_forward_mode_check(op_name, backward_name, launch, launch_backward):
    """Always calls the operator: forward-mode AD drops the tangent, torch.func.jvp gives zeros,
    torch.func.grad raises."""
    return _swiglu_build(op_name, backward_name, launch, launch_backward, forward_mode="operator")


def swiglu_forward_mode_silently(op_name, backward_name, launch, launch_backward):
    """Sends forward-mode AD and torch.func to the reference without dispatch_reference: silent, no
    FallbackError under strict routing."""
    return _swiglu_build(op_name, backward_name, launch, launch_backward, forward_mode="silent")


STEMS = notebooks.stems(8)
"""This chapter's exercises. Their rows in ``tritonforge.exercise.registry`` name the planted wrong
answers above; the generic tests over every row (stub, planted answers, solution) are in
test_every_exercise.py."""


def _failed(report) -> set[str]:
    return {row.case for row in report.rows if not (row.passed or row.skipped)}


# Where each mistake must fail: the requirement it breaks, named by its case.
EXPECTED_FAILURES = {
    srad_without_fake: {"torch.library.opcheck (float16, 3×37)", "torch.compile(fullgraph=True, aot_eager)"},
    srad_without_custom_op: {"torch.compile(fullgraph=True, aot_eager)", "autograd: dx and dresidual"},
    srad_fake_wrong_dtype: {"torch.library.opcheck (float16, 3×37)"},
    srad_without_backward: {"torch.library.opcheck (float16, 3×37)", "autograd: dx and dresidual"},
    srad_silent_fallback: {"kernel fails to compile: routed fallback", "kernel fails to compile, strict: FallbackError"},
    srad_unrouted_fallback: {"float32 3×50: served by the kernel", "kernel fails to compile: routed fallback"},
    srad_routes_under_another_name: {"float32 3×50: served by the kernel", "kernel fails to compile: routed fallback"},
    srad_forgets_the_dtype: {"bfloat16 on a simulated T4: unsupported"},
    srad_unnamed_errors: {f"bad input: {what}" for what in ("residual of another shape", "alpha given as a string", "x a list")},
    srad_no_validation: {"bad input: residual of another shape", "bad input: alpha given as a string"},
    srad_bad_input_as_fallback: {"bad input: residual of another shape", "bad input: residual of another dtype"},
    srad_reference_as_kernel: {"float32 3×50: served by the kernel"},
}


@pytest.mark.parametrize("wrong", list(EXPECTED_FAILURES), ids=lambda w: w.__name__)
def test_each_mistake_fails_where_it_should(wrong):
    """Not only does the check fail: it fails at the requirement the mistake breaks, and says so."""
    report = exercise.check_scaled_residual_add(wrong)
    missing = EXPECTED_FAILURES[wrong] - _failed(report)
    assert not missing, f"{wrong.__name__} passed {sorted(missing)}:\n{report}"


def test_every_planted_mistake_has_its_expected_failures():
    assert set(EXPECTED_FAILURES) == set(notebooks.planted(exercise.registry.NOTEBOOKS["ex08a_register_an_op"]))


def test_the_verdicts_say_what_to_fix():
    report = exercise.check_scaled_residual_add(srad_without_fake)
    assert "register_fake" in str(report)
    report = exercise.check_scaled_residual_add(srad_silent_fallback)
    assert "silent fallback" in str(report)
    report = exercise.check_scaled_residual_add(srad_unnamed_errors)
    assert "must name the argument 'residual'" in str(report)
    report = exercise.check_scaled_residual_add(srad_without_custom_op)
    # the interpreter: a graph break (or no op node); a GPU, where Dynamo traces the Triton launch: a recompile
    assert "graph break" in str(report) or "no node" in str(report)
    assert "must call the custom op" in str(report) or "must call the registered operator" in str(report)


def test_checking_twice_in_one_process_registers_fresh_names():
    """Every registration gets a name of its own (exercise::scaled_residual_add_<n>), so a second
    check of the same code, in the same process, passes again; the names are all distinct."""
    solution = notebooks.solution("ex08a_register_an_op", "register_scaled_residual_add")
    names = [exercise.fresh_op_name() for _ in range(3)]
    assert len(set(names)) == 3 and all(n.startswith(f"{exercise.OP_NAMESPACE}::") for n in names)
    exercise.check_scaled_residual_add(solution).assert_passed()
    exercise.check_scaled_residual_add(solution).assert_passed()


def test_the_solution_really_routes():
    """Outside the check: the solution's op serves a call on the kernel path, falls back (warned,
    recorded) when its kernel fails to compile, and raises under strict routing."""
    solution = notebooks.solution("ex08a_register_an_op", "register_scaled_residual_add")
    x, residual = (torch.randn(4, 50, device=exercise.kernel_device()) for _ in range(2))
    name = exercise.fresh_op_name()
    op = solution(name, ch08.launch_scaled_residual_add)
    torch.testing.assert_close(op(x, residual, 0.5), residual + 0.5 * x)
    assert tritonforge.last_path(name) == ("triton" if exercise.kernel_device() == "cuda" else "interpreter")
    broken_name = exercise.fresh_op_name()
    broken = solution(broken_name, exercise.launch_that_fails_to_compile)
    with runtime.strict(False), pytest.warns(runtime.FallbackWarning, match="power of 2"):
        torch.testing.assert_close(broken(x, residual, 0.5), residual + 0.5 * x)
    assert tritonforge.last_route(broken_name).reason == "kernel-error"
    with pytest.raises(runtime.FallbackError, match=broken_name):
        broken(x, residual, 0.5)


def test_the_given_launcher_refuses_unvalidated_inputs():
    x = torch.randn(3, 8)
    with pytest.raises(RuntimeError, match="validate the inputs"):
        ch08.launch_scaled_residual_add(x, torch.randn(8), 1.0)
    with pytest.raises(RuntimeError, match="validate the inputs"):
        ch08.launch_scaled_residual_add(x, x.half(), 1.0)


def test_the_reference_is_residual_plus_alpha_x():
    gen = torch.Generator().manual_seed(0)
    x, residual = torch.randn(5, 7, generator=gen, dtype=torch.float64), torch.randn(5, 7, generator=gen, dtype=torch.float64)
    assert torch.equal(ch08.scaled_residual_add_ref(x, residual, 0.75), residual + 0.75 * x)
    half = ch08.scaled_residual_add_ref(x.half(), residual.half(), 0.75)
    assert half.dtype == torch.float16 and half.is_contiguous()


def test_the_try_helper_shows_the_route():
    solution = notebooks.solution("ex08a_register_an_op", "register_scaled_residual_add")
    x, residual = torch.randn(2, 6), torch.randn(2, 6)
    trial = exercise.try_scaled_residual_add(solution, x, residual, 0.5)
    assert trial.passed and "interpreter" in str(trial) or "triton" in str(trial)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the stub's verdict comes without a warning under it
        stub_trial = exercise.try_scaled_residual_add(lambda op_name, launch: exec("raise NotImplementedError('write it')"), x, residual, 0.5)
    assert not stub_trial.passed and "NotImplementedError" in str(stub_trial)


@pytest.mark.gpu
def test_gpu_checks_on_compiled_kernels(tmp_path):
    for stem in STEMS:
        notebooks.assert_gpu_checks_on_compiled_kernels(stem, tmp_path)


# -- Exercise 8b ---------------------------------------------------------------------------------

LONG_ROWS = {f"float32 3×{ROW_MAX + 1}: too long for the kernel", "float16 2×3000: too long for the kernel"}
FLOAT64 = {"float64 5×40: not the kernel's dtype"}
STRICT_LONG = {f"float32 2×{ROW_MAX + 1}, strict: FallbackError"}
EMPTY = {"empty 0×64, strict: recorded, no warning", "empty 3×0, strict: recorded, no warning"}

SOFTMAX_EXPECTED_FAILURES = {
    softmax_no_limits_of_its_own: LONG_ROWS | FLOAT64 | STRICT_LONG,
    softmax_limit_off_by_one: {f"float16 3×{ROW_MAX}: the longest row the kernel takes"},
    softmax_forgets_the_dtype: {"bfloat16 4×40 on a simulated T4: unsupported"},
    softmax_limits_raise: LONG_ROWS | FLOAT64 | STRICT_LONG,
    softmax_silent_reference: LONG_ROWS | FLOAT64 | STRICT_LONG,
    softmax_vague_detail: LONG_ROWS | FLOAT64,
    softmax_empty_as_fallback: EMPTY,
    softmax_empty_to_the_kernel: EMPTY,
    softmax_int_as_fallback: {"bad input: x an int32 tensor"},
}


@pytest.mark.parametrize("wrong", list(SOFTMAX_EXPECTED_FAILURES), ids=lambda w: w.__name__)
def test_each_row_softmax_mistake_fails_where_it_should(wrong):
    report = exercise.check_row_softmax(wrong)
    missing = SOFTMAX_EXPECTED_FAILURES[wrong] - _failed(report)
    assert not missing, f"{wrong.__name__} passed {sorted(missing)}:\n{report}"


def test_every_row_softmax_mistake_has_its_expected_failures():
    assert set(SOFTMAX_EXPECTED_FAILURES) == set(notebooks.planted(exercise.registry.NOTEBOOKS["ex08b_row_softmax_limits"]))


def test_the_row_softmax_verdicts_say_what_to_fix():
    assert "dispatch caught that: decide before routing" in str(exercise.check_row_softmax(softmax_no_limits_of_its_own))
    assert "pass dtype=x.dtype" in str(exercise.check_row_softmax(softmax_forgets_the_dtype))
    assert "does not name the limit: say '1024'" in str(exercise.check_row_softmax(softmax_vague_detail))
    assert "record_empty" in str(exercise.check_row_softmax(softmax_empty_as_fallback))
    assert "a fallback is never silent" in str(exercise.check_row_softmax(softmax_silent_reference))


def test_the_row_softmax_solution_really_routes():
    """Outside the check: the kernel serves rows up to 1024, the reference (warned, recorded, with
    the limit named) longer rows without a launch, FallbackError under strict routing."""
    solution = notebooks.solution("ex08b_row_softmax_limits", "make_row_softmax")
    name = exercise.fresh_op_name("row_softmax")
    op = solution(name, ch08.launch_row_softmax)
    x = torch.randn(3, ROW_MAX, device=exercise.kernel_device())
    torch.testing.assert_close(op(x), torch.softmax(x, -1))
    assert tritonforge.last_path(name) == ("triton" if exercise.kernel_device() == "cuda" else "interpreter")
    long = torch.randn(2, ROW_MAX + 1, device=exercise.kernel_device())
    with runtime.strict(False), pytest.warns(runtime.FallbackWarning, match="1024"):
        torch.testing.assert_close(op(long), torch.softmax(long, -1))
    assert tritonforge.last_route(name).reason == "unsupported"
    with runtime.strict(True), pytest.raises(runtime.FallbackError, match=name):
        op(long)


def test_the_row_softmax_launcher_refuses_what_its_kernel_cannot_serve():
    for x in (torch.randn(2, ROW_MAX + 1), torch.randn(2, 8, dtype=torch.float64), torch.randn(0, 8)):
        with pytest.raises(RuntimeError, match="launch_row_softmax"):
            ch08.launch_row_softmax(x)


# -- Exercise 8c ---------------------------------------------------------------------------------

SWIGLU_BACKWARD = {"float32 3×50: backward by its kernel, under its own name", "float16 2×3×24: backward by its kernel"}
CREATE_GRAPH = {"float64 3×16, create_graph=True: second derivatives", "create_graph=True, strict: FallbackError"}
FORWARD_MODES = {
    "float64 3×20, forward-mode AD (make_dual)", "float64 2×3×12, torch.func.jvp", "torch.func.jvp, strict: FallbackError",
    "float64 4×10, torch.func.grad",
}  # fmt: skip

SWIGLU_EXPECTED_FAILURES = {
    swiglu_backward_under_forward_name: SWIGLU_BACKWARD,
    swiglu_backward_not_routed: SWIGLU_BACKWARD,
    swiglu_kernel_under_create_graph: CREATE_GRAPH,
    swiglu_create_graph_silently: CREATE_GRAPH,
    swiglu_detached_reference_under_create_graph: {"float64 3×16, create_graph=True: second derivatives"},
    swiglu_create_graph_by_requires_grad: CREATE_GRAPH,
    swiglu_no_forward_mode_check: FORWARD_MODES,
    swiglu_forward_mode_silently: FORWARD_MODES,
    swiglu_backward_not_an_operator: {"torch.library.opcheck: both operators (float32 3×24)",
                                      "torch.compile(fullgraph=True, aot_eager): a training step"},
}


@pytest.mark.parametrize("wrong", list(SWIGLU_EXPECTED_FAILURES), ids=lambda w: w.__name__)
def test_each_swiglu_mistake_fails_where_it_should(wrong):
    report = exercise.check_swiglu(wrong)
    missing = SWIGLU_EXPECTED_FAILURES[wrong] - _failed(report)
    assert not missing, f"{wrong.__name__} passed {sorted(missing)}:\n{report}"


def test_every_swiglu_mistake_has_its_expected_failures():
    assert set(SWIGLU_EXPECTED_FAILURES) == set(notebooks.planted(exercise.registry.NOTEBOOKS["ex08c_differentiable_swiglu"]))


def test_the_swiglu_verdicts_say_what_to_fix():
    assert "second derivative would be zero" in str(exercise.check_swiglu(swiglu_detached_reference_under_create_graph))
    report = str(exercise.check_swiglu(swiglu_no_forward_mode_check))
    assert "no tangent" in report and "all zeros" in report and "autograd_mode_unsupported" in report
    assert "nothing recorded under exercise::swiglu_backward_" in str(exercise.check_swiglu(swiglu_backward_under_forward_name))


def test_the_swiglu_solution_is_right_under_every_mode():
    """Outside the check: the kernels serve a training step; create_graph=True, jvp and make_dual
    take the reference (warned, recorded, reason autograd) with exact float64 derivatives, checked
    by torch.autograd.gradgradcheck; strict routing raises."""
    solution = notebooks.solution("ex08c_differentiable_swiglu", "register_swiglu")
    name, backward_name = exercise.fresh_op_name("swiglu"), exercise.fresh_op_name("swiglu_backward")
    op = solution(name, backward_name, ch08.launch_swiglu, ch08.launch_swiglu_backward)
    device = exercise.kernel_device()
    gate, up = (torch.randn(3, 7, dtype=torch.float64, device=device, requires_grad=True) for _ in range(2))
    with runtime.strict(True):
        op(gate, up).sum().backward()
    assert tritonforge.last_path(backward_name) == ("triton" if device == "cuda" else "interpreter")
    with runtime.strict(False), warnings.catch_warnings():
        warnings.simplefilter("ignore", runtime.FallbackWarning)
        assert torch.autograd.gradgradcheck(op, (gate, up))
        assert tritonforge.last_route(backward_name).reason == "autograd"
        _, tangent = torch.func.jvp(op, (gate.detach(), up.detach()), (torch.ones_like(gate), torch.zeros_like(up)))
        assert tritonforge.last_route(name).reason == "autograd"
    g = gate.detach()
    torch.testing.assert_close(tangent, torch.sigmoid(g) * (1 + g * (1 - torch.sigmoid(g))) * up.detach())
    with runtime.strict(True), pytest.raises(runtime.FallbackError, match=name):
        torch.func.jvp(op, (gate.detach(), up.detach()), (torch.ones_like(gate), torch.zeros_like(up)))
