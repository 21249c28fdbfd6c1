r"""Exercise 8a (chapter 8): register and route a new op end to end.

The op is a scaled residual add, :math:`\mathrm{out} = \mathrm{residual} + \alpha\, x`, element by
element (a residual branch scaled before it is added back, as in DeepNet-style or LayerScale
blocks). The kernel is given: :func:`launch_scaled_residual_add` runs the package's axpy kernel
(``tfg.axpy``'s, one read of each input and one write). What the learner writes is everything
around it, the way every op of the package is built (:mod:`tritonforge.ops.rmsnorm` is the
template):

- **input checks** that raise ``TypeError``/``ValueError`` naming the argument, before any routing
  (bad input is an error, never a fallback);
- **routing** through :func:`tritonforge.runtime.dispatch`: the kernel when the four checks allow
  it, else the reference, warned once, recorded for ``last_path``, an error under strict routing;
- a **PyTorch operator** (``torch.library.custom_op``) whose body is the routed call, with a fake
  (``register_fake``) so that ``torch.compile(fullgraph=True)`` captures it as one node, and a
  backward (``register_autograd``): ``dx = alpha * dout``, ``dresidual = dout``.

The learner's function is ``register_scaled_residual_add(op_name, launch)``: it registers the
operator ``op_name`` (``"exercise::scaled_residual_add_<n>"``), routes it under that name between
``launch(x, residual, alpha)`` and :func:`scaled_residual_add_ref`, and returns the public
function ``scaled_residual_add(x, residual, alpha)``. The check hands it a fresh name for every
registration (:func:`fresh_op_name`), so running the check again, or the tests running the
solution and every planted mistake in one process, never meets a name already taken; and it hands
over the launcher, so that it can hand over one that fails to compile, to see the fallback routed.
"""

from __future__ import annotations

import itertools
import numbers
import re
import warnings
from collections.abc import Callable
from typing import Optional

import torch

from tritonforge import runtime
from tritonforge.exercise.core import (
    Case,
    Report,
    Trial,
    Verdict,
    check,
    compare_tensors,
    describe_exception,
    dtype_name,
    format_values,
    kernel_device,
    run_trial,
)
from tritonforge.kernel_utils import acc_dtype, round_bf16_by_hand, split_float
from tritonforge.ops.fused_axpy import _axpy_kernel, axpy_fwd
from tritonforge.reference import TOLERANCE, axpy_ref

OP_NAMESPACE = "exercise"
"""The namespace of the learner's operators (``torch.ops.exercise.<name>``): not the package's
``tritonforge``, so an exercise can never replace one of the package's operators."""

SCALED_RESIDUAL_ADD_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

_names = itertools.count()


def fresh_op_name(stem: str = "scaled_residual_add") -> str:
    """A qualified operator name no registration of this process has used: ``exercise::<stem>_<n>``."""
    return f"{OP_NAMESPACE}::{stem}_{next(_names)}"


def scaled_residual_add_ref(x: torch.Tensor, residual: torch.Tensor, alpha: float, *, upcast: bool = False) -> torch.Tensor:
    """``residual + alpha * x`` computed in float32 (float64 for float64 inputs, or with ``upcast``),
    returned in x's dtype (float64 with ``upcast``) as a new contiguous tensor: the op's PyTorch
    reference, its fallback and the check's oracle."""
    return axpy_ref(alpha, x, residual, upcast=upcast).contiguous()


def launch_scaled_residual_add(x: torch.Tensor, residual: torch.Tensor, alpha: float) -> torch.Tensor:
    """The given launcher: ``residual + alpha * x`` by the package's axpy kernel, one pass over
    memory, into a new contiguous tensor of x's shape and dtype.

    It expects validated inputs (float tensors of one shape, dtype and device; a real ``alpha``)
    and refuses anything else with a ``RuntimeError`` instead of reading past a tensor: validating
    is the op's job, before routing."""
    if not (isinstance(x, torch.Tensor) and isinstance(residual, torch.Tensor)):
        raise RuntimeError("launch_scaled_residual_add: x and residual must be tensors (validate the inputs before routing)")
    if x.shape != residual.shape or x.dtype != residual.dtype or x.device != residual.device or x.dtype not in SCALED_RESIDUAL_ADD_DTYPES:
        raise RuntimeError(
            "launch_scaled_residual_add: x and residual must be float tensors of one shape, dtype and device (validate the inputs before routing)"
        )
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise RuntimeError(f"launch_scaled_residual_add: alpha must be a real number, got {type(alpha).__name__}")
    return axpy_fwd(float(alpha), x, residual)


UNCOMPILABLE_BLOCK = 1000
"""The block size of :func:`launch_that_fails_to_compile`: not a power of two, which ``tl.arange``
refuses at compile time (on a GPU and in the interpreter alike)."""


def launch_that_fails_to_compile(x: torch.Tensor, residual: torch.Tensor, alpha: float) -> torch.Tensor:
    """The same kernel launched with a block of 1000 elements: Triton refuses to compile it
    (``arange``'s range must be a power of 2). What a kernel broken by a bad edit, a Triton upgrade
    or an unsupported GPU looks like to the router: an exception from the launch (check 4)."""
    x_flat, residual_flat = x.contiguous().view(-1), residual.contiguous().view(-1)
    out = torch.empty_like(x_flat)
    hi, lo = split_float(float(alpha))
    _axpy_kernel[(1,)](
        x_flat, residual_flat, out, hi, lo, x_flat.numel(),
        BLOCK=UNCOMPILABLE_BLOCK, ROUND_BF16=round_bf16_by_hand(x.dtype), ACC_DTYPE=acc_dtype(x.dtype),
    )  # fmt: skip
    return out.view(x.shape)


class _CountedLaunch:
    """A launcher that counts its calls: the check knows whether the kernel was tried."""

    def __init__(self, launch: Callable):
        self.launch = launch
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.launch(*args, **kwargs)


# ----------------------------------------------------------------------------------------------
# Running the learner's registration
# ----------------------------------------------------------------------------------------------


def _kernel_path() -> str:
    return "triton" if kernel_device() == "cuda" else "interpreter"


def _register(fn: Callable, launch: Callable) -> tuple[Callable, str, _CountedLaunch]:
    """Register the learner's op under a fresh name with a counted ``launch``: (public, name, launch)."""
    name = fresh_op_name()
    counted = _CountedLaunch(launch)
    public = fn(name, counted)
    if not callable(public):
        raise TypeError(f"register_scaled_residual_add must return the public function, got {type(public).__name__}")
    return public, name, counted


def _route(name: str) -> Optional[runtime.Route]:
    try:
        return runtime.last_route(name)
    except KeyError:
        return None


def _operator(name: str):
    """The registered operator ``torch.ops.<namespace>.<name>.default``, or None."""
    namespace, short = name.split("::")
    try:
        return getattr(getattr(torch.ops, namespace), short).default
    except (AttributeError, RuntimeError):
        return None


def _fallback_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, runtime.FallbackWarning)]


def _describe_route(route: Optional[runtime.Route]) -> str:
    if route is None:
        return "nothing recorded"
    return route.path + (f" ({route.reason})" if route.reason else "")


NO_ROUTE_HINT = (
    "route the call with runtime.dispatch(op_name, device=..., dtype=..., kernel=lambda: launch(...), "
    "reference=lambda: exercise.scaled_residual_add_ref(...)): it records the route under op_name"
)


# ----------------------------------------------------------------------------------------------
# The cases
# ----------------------------------------------------------------------------------------------


def _tensor_inputs(shape, dtype, gen, *, strided=False):
    """Fresh random x (a strided view if asked) and residual on the kernel device; alpha."""
    device = kernel_device()
    if strided:  # x every other column of a wider tensor: not contiguous
        wide = torch.randn(*shape[:-1], 2 * shape[-1], generator=gen, dtype=torch.float32)
        x = wide.to(device=device, dtype=dtype)[..., ::2]
    else:
        x = torch.randn(*shape, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
    residual = torch.randn(*shape, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
    alpha = 0.25 + float(torch.rand((), generator=gen))  # in [0.25, 1.25)
    return x, residual, alpha


def _served_run(fn, inputs) -> dict:
    """One strict call with the working launcher: the output, the route, the launches."""
    x, residual, alpha = inputs
    public, name, launch = _register(fn, launch_scaled_residual_add)
    x_before, residual_before = x.clone(), residual.clone()
    with runtime.strict(True):
        out = public(x, residual, alpha)
    return {
        "out": out,
        "route": _route(name),
        "launches": launch.calls,
        "inputs_changed": not (torch.equal(x, x_before) and torch.equal(residual, residual_before)),
        "aliases": isinstance(out, torch.Tensor) and (out.data_ptr() in (x.data_ptr(), residual.data_ptr())),
    }


def _served_expected(inputs) -> torch.Tensor:
    x, residual, alpha = inputs
    return scaled_residual_add_ref(x, residual, alpha, upcast=True)


def _compare_served(got: dict, expected: torch.Tensor, inputs) -> Verdict:
    x = inputs[0]
    out = got["out"]
    if not isinstance(out, torch.Tensor):
        return Verdict(False, None, f"the public function returned {type(out).__name__}, not a tensor")
    if out.dtype != x.dtype:
        return Verdict(False, None, f"the output is {dtype_name(out.dtype)}; it must have x's dtype, {dtype_name(x.dtype)}")
    problems = []
    route = got["route"]
    if route is None:
        problems.append(f"no route recorded under the op's name: {NO_ROUTE_HINT}")
    elif route.path != _kernel_path():
        problems.append(f"the call was served by {_describe_route(route)}, not the kernel ({_kernel_path()})")
    if got["launches"] != 1:
        problems.append(f"launch(...) was called {got['launches']} times; the kernel must serve the call, once")
    if got["aliases"]:
        problems.append("the output shares memory with an input; return the launcher's new tensor")
    verdict = compare_tensors({"out": out, "inputs_changed": got["inputs_changed"]}, expected, rtol=TOLERANCE[x.dtype])
    if not verdict.passed:
        problems.insert(0, verdict.detail)
    if problems:
        return Verdict(False, verdict.error, "; ".join(problems))
    return Verdict(True, verdict.error, f"served by the kernel ({route.path})")


def _served_case(name, shape, dtype, *, strided=False) -> Case:
    return Case(
        name=name,
        inputs=lambda gen: _tensor_inputs(shape, dtype, gen, strided=strided),
        run=_served_run,
        expected=_served_expected,
        compare=_compare_served,
        dtype=dtype,
    )


# -- the operator: torch.library.opcheck ---------------------------------------------------------


def _opcheck_run(fn, inputs) -> dict:
    x, residual, alpha = inputs
    _, name, _ = _register(fn, launch_scaled_residual_add)
    op = _operator(name)
    if op is None:
        return {"missing": name}
    with runtime.strict(True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = torch.library.opcheck(op, (x.requires_grad_(), residual, alpha), raise_exception=False)
    return {"result": result, "schema": str(op._schema)}


def _compare_opcheck(got: dict, expected, inputs) -> Verdict:
    if "missing" in got:
        return Verdict(
            False,
            None,
            f"no operator torch.ops.{got['missing'].replace('::', '.')}: register it with "
            "@torch.library.custom_op(op_name, mutates_args=()) on a function of "
            "(x: torch.Tensor, residual: torch.Tensor, alpha: float) -> torch.Tensor",
        )
    failed = {test: outcome for test, outcome in got["result"].items() if outcome != "SUCCESS"}
    if not failed:
        return Verdict(True, None, f"{got['schema']}: schema, fake, autograd registration all pass")
    parts = []
    for test, outcome in failed.items():
        text = describe_exception(outcome, limit=200) if isinstance(outcome, BaseException) else str(outcome)
        parts.append(f"{test}: {text}")
    hint = ""
    if "test_faketensor" in failed:
        hint = (
            " The fake (op.register_fake) must return an empty tensor with the real output's shape, dtype and strides "
            "(x's shape and dtype, contiguous)."
        )
    elif "test_autograd_registration" in failed:
        hint = " Register the backward with op.register_autograd(backward, setup_context=...)."
    return Verdict(False, None, "opcheck failed: " + "; ".join(parts) + hint)


# -- torch.compile ------------------------------------------------------------------------------


def _compile_run(public: Callable, name: str, launch: _CountedLaunch, inputs) -> dict:
    x, residual, alpha = inputs
    from torch._dynamo.backends.registry import lookup_backend

    aot_eager = lookup_backend("aot_eager")
    graphs = []

    def recording_backend(gm, example_inputs):  # aot_eager, keeping each graph Dynamo captured
        graphs.append(gm)
        return aot_eager(gm, example_inputs)

    def model(a, b):  # work before and after the op, as in a model
        return public(a * 2.0, b, alpha) + 1.0

    torch._dynamo.reset()  # a fresh cache: the same code object met another op name before
    try:
        with runtime.strict(True), torch._dynamo.config.patch(error_on_recompile=True), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = torch.compile(model, fullgraph=True, backend=recording_backend)
            outs = [compiled(x, residual) for _ in range(2)]
            route = _route(name)
            launches = launch.calls
        expected = scaled_residual_add_ref(x * 2.0, residual, alpha, upcast=True) + 1.0
        targets = [str(node.target) for g in graphs for node in g.graph.nodes if node.op == "call_function"]
        return {"outs": outs, "route": route, "launches": launches, "targets": targets, "graphs": len(graphs), "name": name, "expected": expected}
    finally:
        torch._dynamo.reset()  # drop the compiled graph (and its hold on this op)


def _compile_hint(text: str) -> str:
    if "fake" in text.lower():
        return "register a fake: @op.register_fake, returning an empty tensor like the output"
    if "Unsupported" in text or "graph break" in text.lower() or "Recompil" in text:
        # A graph break where Dynamo meets the routing's Python; on a GPU, where Dynamo can trace a
        # Triton launch, a recompile instead (the routing's state changes from call to call).
        return (
            "Dynamo traced into the routing or the launch (a graph break, or a recompile when the routing's state "
            "changed between calls): the public function must call the custom op, whose body (opaque to Dynamo) routes"
        )
    return "the compiled call must run as the eager one does"


def _compile_or_error(fn, inputs) -> dict:
    public, name, launch = _register(fn, launch_scaled_residual_add)  # its errors are the learner's, not the compiler's
    try:
        return _compile_run(public, name, launch, inputs)
    except Exception as exc:  # noqa: BLE001 - a graph break or a missing fake: the verdict says which
        return {"compile_error": _describe_compile_error(exc)}


def _describe_compile_error(exc: BaseException) -> str:
    """Dynamo's error in one line: its first line and its explanation (its last line is advice
    about logging, which describe_exception would pick)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    explanation = [line for line in lines if line.startswith("Explanation:")]
    text = " ".join(lines[:1] + explanation[:1])
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= 240 else text[:239] + "…"


def _compare_compile(got: dict, expected, inputs) -> Verdict:
    if "compile_error" in got:
        text = got["compile_error"]
        return Verdict(False, None, f"torch.compile(fullgraph=True) failed: {text} ({_compile_hint(text)})")
    op_target = got["name"].replace("::", ".") + ".default"
    problems = []
    if got["graphs"] != 1:
        problems.append(f"{got['graphs']} graphs captured, expected 1 (a recompile?)")
    if op_target not in got["targets"]:
        problems.append(
            f"the graph has no node {op_target} (nodes: {', '.join(got['targets']) or 'none'}): the public function must call the registered operator"
        )
    route = got["route"]
    if route is None or route.path != _kernel_path():
        problems.append(f"last route after the compiled calls: {_describe_route(route)}; expected {_kernel_path()}: route inside the op's body")
    if got["launches"] != 2:
        problems.append(f"launch ran {got['launches']} times in 2 compiled calls; the op's body routes on every call")
    x = inputs[0]
    worst = 0.0
    for out in got["outs"]:
        verdict = compare_tensors({"out": out}, got["expected"], rtol=TOLERANCE[x.dtype])
        worst = max(worst, verdict.error or 0.0)
        if not verdict.passed:
            problems.append("compiled result: " + verdict.detail)
            break
    if problems:
        return Verdict(False, worst, "; ".join(problems))
    return Verdict(True, worst, f"one node {op_target}, no graph break, no recompile; routed per call")


def _compile_case() -> Case:
    return Case(
        name="torch.compile(fullgraph=True, aot_eager)",
        inputs=lambda gen: _tensor_inputs((4, 37), torch.float32, gen),
        run=_compile_or_error,
        expected=lambda inputs: None,
        compare=_compare_compile,
    )


# -- autograd -----------------------------------------------------------------------------------


def _autograd_run(fn, inputs) -> dict:
    x, residual, alpha = inputs
    public, _, _ = _register(fn, launch_scaled_residual_add)
    x, residual = x.clone().requires_grad_(), residual.clone().requires_grad_()
    dout = torch.randn(x.shape, generator=torch.Generator().manual_seed(int(alpha * 1e6)), dtype=torch.float32).to(x.device, x.dtype)
    with runtime.strict(True):
        out = public(x, residual, alpha)
        if not (isinstance(out, torch.Tensor) and out.requires_grad):
            raise RuntimeError(
                "the output does not require grad although x and residual do: "
                "register the backward with op.register_autograd(backward, setup_context=...)"
            )
        out.backward(dout)
    return {"dx": x.grad, "dresidual": residual.grad, "dout": dout}


def _compare_autograd(got: dict, expected, inputs) -> Verdict:
    alpha = inputs[2]
    dout = got["dout"].double()
    problems, worst = [], 0.0
    for label, grad, want in (("dx", got["dx"], alpha * dout), ("dresidual", got["dresidual"], dout)):
        if grad is None:
            problems.append(f"{label} is None: the backward must return a gradient for {label[1:]}")
            continue
        verdict = compare_tensors({"out": grad}, want, rtol=TOLERANCE[inputs[0].dtype])
        worst = max(worst, verdict.error or 0.0)
        if not verdict.passed:
            problems.append(f"{label}: {verdict.detail}")
    if problems:
        hint = " (dx = alpha * dout, dresidual = dout, None for alpha)"
        return Verdict(False, worst, "; ".join(problems) + hint)
    return Verdict(True, worst, "dx = alpha·dout and dresidual = dout")


# -- bad input: an error naming the argument, never a fallback ----------------------------------


def _other_device(x: torch.Tensor) -> str:
    return "cpu" if x.device.type != "cpu" else "meta"


BAD_INPUTS = {
    # case name: (the argument the error must name, how to spoil the inputs)
    "bad input: residual of another shape": ("residual", lambda x, r, a: (x, r[0], a)),
    "bad input: residual of another dtype": ("residual", lambda x, r, a: (x, r.to(torch.float16), a)),
    "bad input: residual on another device": ("residual", lambda x, r, a: (x, r.to(_other_device(x)), a)),
    "bad input: alpha given as a string": ("alpha", lambda x, r, a: (x, r, str(a))),
    "bad input: x an int32 tensor": ("x", lambda x, r, a: (x.to(torch.int32), r, a)),
    "bad input: x a list": ("x", lambda x, r, a: (x.tolist(), r, a)),
}


def _names_argument(message: str, argument: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(argument)}(?!\w)", message) is not None


def _bad_input_run(spoil):
    def run(fn, inputs):
        x, residual, alpha = spoil(*inputs)
        public, name, launch = _register(fn, launch_scaled_residual_add)
        error = None
        with runtime.strict(False), warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            try:
                public(x, residual, alpha)
            except Exception as exc:  # noqa: BLE001 - the error is what the case looks at
                error = exc
        return {"error": error, "fallbacks": _fallback_warnings(record), "route": _route(name), "launches": launch.calls}

    return run


def _compare_bad_input(argument: str):
    def compare(got: dict, expected, inputs) -> Verdict:
        error = got["error"]
        problems = []
        if got["fallbacks"] or (got["route"] is not None and got["route"].path == "torch"):
            problems.append("the call was routed to the reference (a fallback); bad input must raise before routing")
        if error is None:
            problems.append(f"no error: expected a TypeError or ValueError naming {argument}")
        elif not isinstance(error, (TypeError, ValueError)):
            problems.append(f"{describe_exception(error, limit=160)}; expected a TypeError or ValueError naming {argument}, raised by your checks")
        elif not _names_argument(str(error), argument):
            problems.append(f"{describe_exception(error, limit=160)}: the message must name the argument {argument!r}")
        if got["launches"]:
            problems.append("launch(...) ran: validate before routing")
        if problems:
            return Verdict(False, None, "; ".join(problems))
        return Verdict(True, None, describe_exception(error, limit=120))

    return compare


def _bad_input_case(name: str) -> Case:
    argument, spoil = BAD_INPUTS[name]
    return Case(
        name=name,
        inputs=lambda gen: _tensor_inputs((3, 40), torch.float32, gen),
        run=_bad_input_run(spoil),
        expected=lambda inputs: None,
        compare=_compare_bad_input(argument),
    )


# -- the fallbacks ------------------------------------------------------------------------------


def _kernel_error_run(fn, inputs) -> dict:
    x, residual, alpha = inputs
    public, name, launch = _register(fn, launch_that_fails_to_compile)
    with runtime.strict(False), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        outs = [public(x, residual, alpha) for _ in range(2)]
    return {"outs": outs, "fallbacks": _fallback_warnings(record), "route": _route(name), "launches": launch.calls, "name": name}


def _compare_kernel_error(got: dict, expected: torch.Tensor, inputs) -> Verdict:
    problems = []
    route, name = got["route"], got["name"]
    if got["launches"] == 0:
        problems.append("the kernel was never tried: launch(...) must run first, the reference only if it raises")
    if route is None:
        problems.append(f"nothing recorded under {name}: {NO_ROUTE_HINT}")
    elif (route.path, route.reason) != ("torch", "kernel-error"):
        problems.append(
            f"recorded {_describe_route(route)} for a kernel that failed to compile: a silent fallback "
            "(expected torch, kernel-error: let runtime.dispatch catch the launch's exception)"
        )
    warned = [m for m in got["fallbacks"] if name in m]
    if len(warned) != 1:
        problems.append(f"{len(warned)} FallbackWarning(s) naming {name} over two calls; expected one (warned once per op and reason)")
    verdict = compare_tensors({"out": got["outs"][-1]}, expected, rtol=TOLERANCE[inputs[0].dtype])
    if not verdict.passed:
        problems.append("the fallback's result: " + verdict.detail)
    if problems:
        return Verdict(False, verdict.error, "; ".join(problems))
    return Verdict(True, verdict.error, "the reference served it: warned once, recorded torch (kernel-error)")


def _strict_run(fn, inputs) -> dict:
    x, residual, alpha = inputs
    public, name, launch = _register(fn, launch_that_fails_to_compile)
    error = None
    with runtime.strict(True), warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            public(x, residual, alpha)
        except Exception as exc:  # noqa: BLE001
            error = exc
    return {"error": error, "launches": launch.calls, "name": name}


def _compare_strict(got: dict, expected, inputs) -> Verdict:
    error = got["error"]
    if isinstance(error, runtime.FallbackError):
        if got["name"] not in str(error):
            return Verdict(False, None, f"FallbackError, but under another op name: {describe_exception(error, limit=160)}")
        return Verdict(True, None, "FallbackError: strict routing forbids the fallback")
    if error is None:
        return Verdict(False, None, "no error: under strict routing a kernel that fails to compile must raise FallbackError, not fall back quietly")
    return Verdict(
        False, None, f"{describe_exception(error, limit=160)}; expected tritonforge's FallbackError (runtime.dispatch raises it under strict routing)"
    )


def _unsupported_run(fn, inputs) -> dict:
    x, residual, alpha = inputs
    public, name, launch = _register(fn, launch_scaled_residual_add)
    with runtime.simulate("t4"), runtime.strict(False), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = public(x, residual, alpha)
    return {"out": out, "fallbacks": _fallback_warnings(record), "route": _route(name), "launches": launch.calls, "name": name}


def _compare_unsupported(got: dict, expected: torch.Tensor, inputs) -> Verdict:
    problems = []
    route = got["route"]
    if route is None:
        problems.append(f"nothing recorded under {got['name']}: {NO_ROUTE_HINT}")
    elif (route.path, route.reason) != ("torch", "unsupported"):
        problems.append(
            f"recorded {_describe_route(route)}; expected torch (unsupported): pass dtype=x.dtype to runtime.dispatch, "
            "which then refuses bf16 below sm_80 before launching"
        )
    if got["launches"]:
        problems.append("launch(...) ran: an unsupported input must not reach the kernel")
    if not any(got["name"] in m for m in got["fallbacks"]):
        problems.append("no FallbackWarning: a fallback is never silent")
    verdict = compare_tensors({"out": got["out"]}, expected, rtol=TOLERANCE[torch.bfloat16])
    if not verdict.passed:
        problems.append("the reference's result: " + verdict.detail)
    if problems:
        return Verdict(False, verdict.error, "; ".join(problems))
    return Verdict(True, verdict.error, "refused before launching: torch (unsupported), warned")


def scaled_residual_add_cases() -> list[Case]:
    """The cases of exercise 8a: served by the kernel (three dtypes, a strided 3-D view), the
    operator (opcheck), torch.compile, autograd, six bad inputs, and three fallbacks (a kernel that
    fails to compile, with and without strict routing; bf16 on a simulated T4)."""
    return [
        _served_case("float32 3×50: served by the kernel", (3, 50), torch.float32),
        _served_case("float16 2×5×33, x a strided view", (2, 5, 33), torch.float16, strided=True),
        _served_case("bfloat16 4×40", (4, 40), torch.bfloat16),
        Case(
            name="torch.library.opcheck (float16, 3×37)",
            inputs=lambda gen: _tensor_inputs((3, 37), torch.float16, gen),
            run=_opcheck_run,
            expected=lambda inputs: None,
            compare=_compare_opcheck,
        ),
        _compile_case(),
        Case(
            name="autograd: dx and dresidual",
            inputs=lambda gen: _tensor_inputs((5, 24), torch.float32, gen),
            run=_autograd_run,
            expected=lambda inputs: None,
            compare=_compare_autograd,
        ),
        *(_bad_input_case(name) for name in BAD_INPUTS),
        Case(
            name="kernel fails to compile: routed fallback",
            inputs=lambda gen: _tensor_inputs((3, 40), torch.float32, gen),
            run=_kernel_error_run,
            expected=_served_expected,
            compare=_compare_kernel_error,
        ),
        Case(
            name="kernel fails to compile, strict: FallbackError",
            inputs=lambda gen: _tensor_inputs((3, 40), torch.float32, gen),
            run=_strict_run,
            expected=lambda inputs: None,
            compare=_compare_strict,
        ),
        Case(
            name="bfloat16 on a simulated T4: unsupported",
            inputs=lambda gen: _tensor_inputs((3, 40), torch.bfloat16, gen),
            run=_unsupported_run,
            expected=_served_expected,
            compare=_compare_unsupported,
        ),
    ]


def check_scaled_residual_add(fn: Callable, *, seed: Optional[int] = None) -> Report:
    """Check exercise 8a: ``fn(op_name, launch)`` registers a routed ``scaled_residual_add``."""
    return check(fn, scaled_residual_add_cases(), title="register_scaled_residual_add", seed=seed)


def try_scaled_residual_add(fn: Callable, x: torch.Tensor, residual: torch.Tensor, alpha: float) -> Trial:
    """Register the learner's op under a fresh name, call it once on the given inputs (strict), and
    show the result beside the reference and the route it took; never raises."""
    case = _served_case("try", tuple(x.shape), x.dtype)

    def show(got, expected):
        if got is None:
            return []
        return [
            ("route", _describe_route(got["route"])),
            ("result", format_values(got["out"])),
            ("expected", format_values(expected)),
        ]

    return run_trial(fn, case, (x, residual, alpha), title="register_scaled_residual_add", show=show)
