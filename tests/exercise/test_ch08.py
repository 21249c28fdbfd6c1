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
from tritonforge import exercise, runtime
from tritonforge.exercise import ch08

from . import notebooks

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _validate(x, residual, alpha):
    runtime.check_tensor("x", x, dtypes=DTYPES)
    runtime.check_tensor("residual", residual, dtypes=DTYPES)
    runtime.check_same_device(x=x, residual=residual)
    runtime.check_same_dtype(x=x, residual=residual)
    runtime.check_same_shape(x=x, residual=residual)
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
        runtime.check_tensor("x", x, dtypes=DTYPES)
        runtime.check_tensor("residual", residual, dtypes=DTYPES)
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
            raise TypeError(f"alpha must be a real Python number, got {type(alpha).__name__}")
        return op(x, residual, float(alpha))

    return public


def srad_reference_as_kernel(op_name, launch):
    """Hands dispatch the reference as the "kernel": the route says kernel, PyTorch computed it."""
    return _build(op_name, launch, kernel=lambda launch, x, residual, alpha: exercise.scaled_residual_add_ref(x, residual, alpha))


TABLE = {
    # notebook stem: (function name in the stub and the solution, the check, planted wrong answers)
    "ex08a_register_an_op": (
        "register_scaled_residual_add",
        exercise.check_scaled_residual_add,
        [
            srad_without_fake,
            srad_without_custom_op,
            srad_fake_wrong_dtype,
            srad_without_backward,
            srad_silent_fallback,
            srad_unrouted_fallback,
            srad_routes_under_another_name,
            srad_forgets_the_dtype,
            srad_unnamed_errors,
            srad_no_validation,
            srad_bad_input_as_fallback,
            srad_reference_as_kernel,
        ],
    ),
}
STEMS = sorted(TABLE)
"""The generic tests over TABLE (stub, planted answers, solution) are in test_every_exercise.py."""


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
    assert set(EXPECTED_FAILURES) == set(TABLE["ex08a_register_an_op"][2])


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
        name, check, planted = TABLE[stem]
        notebooks.assert_gpu_checks_on_compiled_kernels(stem, name, check, planted, tmp_path)
