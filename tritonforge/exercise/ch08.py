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

import contextlib
import dataclasses
import itertools
import numbers
import re
import warnings
from collections.abc import Callable
from typing import Optional

import torch

from tritonforge import runtime, simulation
from tritonforge._triton import tl, triton
from tritonforge.exercise.core import (
    Case,
    CaseTemplate,
    Trial,
    Verdict,
    compare_tensors,
    describe_exception,
    dtype_name,
    format_values,
    kernel_device,
)
from tritonforge.kernel_utils import acc_dtype, as_rows, cast_for_store, round_bf16_by_hand, split_float
from tritonforge.ops.fused_axpy import _axpy_kernel, axpy_fwd
from tritonforge.ops.swiglu import swiglu_bwd as _swiglu_bwd
from tritonforge.ops.swiglu import swiglu_fwd as _swiglu_fwd
from tritonforge.reference import TOLERANCE, axpy_ref, softmax_ref
from tritonforge.reference import swiglu_bwd_ref as _swiglu_bwd_ref
from tritonforge.reference import swiglu_ref as _swiglu_ref

__all__ = [
    "OP_NAMESPACE",
    "fresh_op_name",
    "launch_scaled_residual_add",
    "launch_row_softmax",
    "launch_swiglu",
    "launch_swiglu_backward",
    "launch_that_fails_to_compile",
    "ROW_SOFTMAX_MAX_N",
    "row_softmax_cases",
    "row_softmax_ref",
    "scaled_residual_add_cases",
    "scaled_residual_add_ref",
    "swiglu_backward_ref",
    "swiglu_cases",
    "swiglu_ref",
    "try_row_softmax",
    "try_scaled_residual_add",
    "try_swiglu",
]

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


SERVED = CaseTemplate(_served_run, _served_expected, _compare_served)


def _served_case(name, shape, dtype, *, strided=False) -> Case:
    return SERVED.case(name, lambda gen: _tensor_inputs(shape, dtype, gen, strided=strided), dtype=dtype)


def _nothing(inputs) -> None:
    """The expected answer of a case that judges what the code does (a registration, an error, a
    route), not a value."""
    return None


def _case(name: str, run, compare, *, shape=(3, 40), dtype=torch.float32, expected=_nothing) -> Case:
    """A case on fresh ``x``, ``residual`` and ``alpha`` of ``shape`` and ``dtype`` (the inputs'
    dtype only: unlike a served case, it runs on every device)."""
    return Case(name=name, inputs=lambda gen: _tensor_inputs(shape, dtype, gen), run=run, expected=expected, compare=compare)


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


@contextlib.contextmanager
def _compiled_fullgraph(fn: Callable):
    """``fn`` under ``torch.compile(fullgraph=True)`` with the ``aot_eager`` backend, strict routing,
    a recompile an error and warnings silenced: yields ``(compiled, graphs)``, ``graphs`` filling
    with each graph Dynamo captures. Dynamo's cache is reset before (the same code object met another
    op name before) and after (dropping the compiled graph and its hold on the learner's op)."""
    from torch._dynamo.backends.registry import lookup_backend

    aot_eager = lookup_backend("aot_eager")
    graphs = []

    def recording_backend(gm, example_inputs):  # aot_eager, keeping each graph Dynamo captured
        graphs.append(gm)
        return aot_eager(gm, example_inputs)

    torch._dynamo.reset()
    try:
        with runtime.strict(True), torch._dynamo.config.patch(error_on_recompile=True), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield torch.compile(fn, fullgraph=True, backend=recording_backend), graphs
    finally:
        torch._dynamo.reset()


def _graph_facts(graphs: list, name: str) -> dict:
    """What the captured graphs say: how many, and the targets of their calls (the op's node among them)."""
    targets = [str(node.target) for g in graphs for node in g.graph.nodes if node.op == "call_function"]
    return {"graphs": len(graphs), "targets": targets, "name": name}


def _graph_problems(got: dict) -> list[str]:
    """One graph, holding the learner's operator as a node: what a fullgraph compile must show."""
    op_target = got["name"].replace("::", ".") + ".default"
    problems = []
    if got["graphs"] != 1:
        problems.append(f"{got['graphs']} graphs captured, expected 1 (a recompile?)")
    if op_target not in got["targets"]:
        problems.append(
            f"the graph has no node {op_target} (nodes: {', '.join(got['targets']) or 'none'}): the public function must call the registered operator"
        )
    return problems


def _compile_run(public: Callable, name: str, launch: _CountedLaunch, inputs) -> dict:
    x, residual, alpha = inputs

    def model(a, b):  # work before and after the op, as in a model
        return public(a * 2.0, b, alpha) + 1.0

    with _compiled_fullgraph(model) as (compiled, graphs):
        outs = [compiled(x, residual) for _ in range(2)]
        route = _route(name)
        launches = launch.calls
    expected = scaled_residual_add_ref(x * 2.0, residual, alpha, upcast=True) + 1.0
    return {"outs": outs, "route": route, "launches": launches, "expected": expected, **_graph_facts(graphs, name)}


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
    about logging, which describe_exception would pick); a FallbackError inside it (a fallback
    decided while AOTAutograd traced, under strict routing) is the message itself."""
    inner = exc
    while inner is not None and not isinstance(inner, runtime.FallbackError):
        inner = getattr(inner, "inner_exception", None) or inner.__cause__
    if inner is not None:
        return describe_exception(inner, limit=240)
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
    problems = _graph_problems(got)
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
    def wrong_error(error):
        if error is None:
            return f"no error: expected a TypeError or ValueError naming {argument}"
        if not isinstance(error, (TypeError, ValueError)):
            return f"{describe_exception(error, limit=160)}; expected a TypeError or ValueError naming {argument}, raised by your checks"
        return None

    def compare(got: dict, expected, inputs) -> Verdict:
        return _bad_input_verdict(got, argument, "bad input must raise before routing", wrong_error, "launch(...)")

    return compare


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
    with simulation.simulate("t4"), runtime.strict(False), warnings.catch_warnings(record=True) as record:
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
        _case("torch.library.opcheck (float16, 3×37)", _opcheck_run, _compare_opcheck, shape=(3, 37), dtype=torch.float16),
        _case("torch.compile(fullgraph=True, aot_eager)", _compile_or_error, _compare_compile, shape=(4, 37)),
        _case("autograd: dx and dresidual", _autograd_run, _compare_autograd, shape=(5, 24)),
        *(_case(name, _bad_input_run(spoil), _compare_bad_input(argument)) for name, (argument, spoil) in BAD_INPUTS.items()),
        _case("kernel fails to compile: routed fallback", _kernel_error_run, _compare_kernel_error, expected=_served_expected),
        _case("kernel fails to compile, strict: FallbackError", _strict_run, _compare_strict),
        _case("bfloat16 on a simulated T4: unsupported", _unsupported_run, _compare_unsupported, dtype=torch.bfloat16, expected=_served_expected),
    ]


def try_scaled_residual_add(fn: Callable, x: torch.Tensor, residual: torch.Tensor, alpha: float) -> Trial:
    """Register the learner's op under a fresh name, call it once on the given inputs (strict), and
    show the result beside the reference and the route it took; never raises."""

    def show(got, expected):
        if got is None:
            return []
        return [
            ("route", _describe_route(got["route"])),
            ("result", format_values(got["out"])),
            ("expected", format_values(expected)),
        ]

    return SERVED.trial(fn, (x, residual, alpha), title="register_scaled_residual_add", show=show)


# ==============================================================================================
# Exercise 8b: an op with limits of its own (a row softmax whose kernel takes rows of at most
# 1024 elements, and no float64)
# ==============================================================================================

ROW_SOFTMAX_MAX_N = 1024
"""The longest row the given row-softmax kernel holds: one block of ``BLOCK_N`` ≤ 1024 elements."""

ROW_SOFTMAX_KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
"""What the given kernel computes: 16- and 32-bit floats (in float32). No float64."""

ROW_SOFTMAX_DTYPES = (*ROW_SOFTMAX_KERNEL_DTYPES, torch.float64)
"""What the op accepts: float64 too (its reference serves it)."""


@triton.jit
def _row_softmax_kernel(x_ptr, y_ptr, x_row_stride, y_row_stride, N, BLOCK_N: tl.constexpr, ROUND_BF16: tl.constexpr):
    """One program per row, the whole row in one block: ``exp(x - max) / sum``, in float32."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * y_row_stride + cols, cast_for_store(y, y_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


def row_softmax_ref(x: torch.Tensor, *, upcast: bool = False) -> torch.Tensor:
    """Softmax over the last dimension, computed in float32 (float64 for float64 inputs, or with
    ``upcast``), returned in x's dtype (float64 with ``upcast``) as a new contiguous tensor: the op's
    PyTorch reference, its fallback and the check's oracle."""
    return softmax_ref(x, upcast=upcast).contiguous()


def launch_row_softmax(x: torch.Tensor) -> torch.Tensor:
    """The given launcher: softmax over the last dimension of ``x`` by one kernel, one program per
    row, into a new contiguous tensor of x's shape and dtype.

    Its kernel holds a whole row in one block, so it takes rows of 1 to ``ROW_SOFTMAX_MAX_N``
    (1024) elements, and it computes in float32, so float16, bfloat16 and float32 only. Anything
    else (float64, longer rows, an empty tensor, something not a float tensor) it refuses with a
    ``RuntimeError``: deciding what the kernel can serve is the op's job, before routing."""
    if not isinstance(x, torch.Tensor) or x.dtype not in ROW_SOFTMAX_KERNEL_DTYPES:
        what = dtype_name(x.dtype) if isinstance(x, torch.Tensor) else type(x).__name__
        raise RuntimeError(f"launch_row_softmax: the kernel computes float16, bfloat16 and float32, not {what} (decide before routing)")
    if x.dim() == 0 or x.numel() == 0:
        raise RuntimeError(f"launch_row_softmax: nothing to launch for a tensor of shape {tuple(x.shape)} (an empty input is no launch)")
    N = x.shape[-1]
    if N > ROW_SOFTMAX_MAX_N:
        raise RuntimeError(f"launch_row_softmax: rows of {N} elements do not fit the kernel's one block of at most {ROW_SOFTMAX_MAX_N}")
    x_rows = as_rows(x, N)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    y_rows = y.view(-1, N)
    _row_softmax_kernel[(x_rows.shape[0],)](
        x_rows, y_rows, x_rows.stride(0), y_rows.stride(0), N,
        BLOCK_N=triton.next_power_of_2(N), ROUND_BF16=round_bf16_by_hand(x.dtype),
    )  # fmt: skip
    return y


def _register_softmax(fn: Callable) -> tuple[Callable, str, _CountedLaunch]:
    """The learner's public function under a fresh name with a counted launcher: (public, name, launch)."""
    name = fresh_op_name("row_softmax")
    counted = _CountedLaunch(launch_row_softmax)
    public = fn(name, counted)
    if not callable(public):
        raise TypeError(f"make_row_softmax must return the public function, got {type(public).__name__}")
    return public, name, counted


SOFTMAX_ROUTE_HINT = (
    "route the call with runtime.dispatch(op_name, device=x.device, dtype=x.dtype, unsupported=..., "
    "kernel=lambda: launch(x), reference=lambda: exercise.row_softmax_ref(x))"
)


def _softmax_inputs(shape, dtype, gen, *, transposed=False):
    """Logits in [-8, 8) on the kernel device; a transposed view (rows not contiguous) if asked."""
    if transposed:
        x = (16 * torch.rand(*shape[:-2], shape[-1], shape[-2], generator=gen) - 8).transpose(-1, -2)
    else:
        x = 16 * torch.rand(*shape, generator=gen) - 8
    return (x.to(device=kernel_device(), dtype=dtype),)


def _softmax_call(fn, inputs, *, strict: bool, t4: bool = False) -> dict:
    """One call of the learner's op: its output or error, the route, the warnings, the launches."""
    (x,) = inputs
    public, name, launch = _register_softmax(fn)
    x_before = x.clone()
    out = error = None
    context = simulation.simulate("t4") if t4 else contextlib.nullcontext()
    with context, runtime.strict(strict), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            out = public(x)
        except Exception as exc:  # noqa: BLE001 - the case judges the error
            error = exc
    return {
        "out": out, "error": error, "route": _route(name), "name": name, "launches": launch.calls,
        "fallbacks": _fallback_warnings(record), "inputs_changed": not torch.equal(x, x_before),
    }  # fmt: skip


def _softmax_expected(inputs) -> torch.Tensor:
    return row_softmax_ref(inputs[0], upcast=True)


def _softmax_result(got: dict, expected: torch.Tensor, x: torch.Tensor, problems: list[str]) -> Optional[float]:
    """Compare the output with float64 (appending to ``problems``); the largest error."""
    out = got["out"]
    if got["error"] is not None:
        problems.insert(0, describe_exception(got["error"], limit=200))
        return None
    if not isinstance(out, torch.Tensor):
        problems.insert(0, f"the public function returned {type(out).__name__}, not a tensor")
        return None
    if out.dtype != x.dtype:
        problems.insert(0, f"the output is {dtype_name(out.dtype)}; it must have x's dtype, {dtype_name(x.dtype)}")
        return None
    verdict = compare_tensors({"out": out, "inputs_changed": got["inputs_changed"]}, expected, rtol=TOLERANCE[x.dtype])
    if not verdict.passed:
        problems.insert(0, verdict.detail)
    return verdict.error


def _softmax_served(fn, inputs) -> dict:
    return _softmax_call(fn, inputs, strict=True)


def _compare_softmax_served(got: dict, expected: torch.Tensor, inputs) -> Verdict:
    x = inputs[0]
    problems: list[str] = []
    error = _softmax_result(got, expected, x, problems)
    route = got["route"]
    if got["error"] is None:
        if route is None:
            problems.append(f"no route recorded under the op's name: {SOFTMAX_ROUTE_HINT}")
        elif route.path != _kernel_path():
            problems.append(
                f"the call was served by {_describe_route(route)}{': ' + route.detail if route.detail else ''}, not the kernel "
                f"({_kernel_path()}): rows of 1 to {ROW_SOFTMAX_MAX_N} elements in float16, bfloat16 or float32 are the kernel's"
            )
    if isinstance(got["error"], runtime.FallbackError):
        problems.append(f"the kernel takes rows of 1 to {ROW_SOFTMAX_MAX_N} elements in float16, bfloat16 and float32: this one is its to serve")
    if got["error"] is None and got["launches"] != 1:
        problems.append(f"launch(x) was called {got['launches']} times; the kernel must serve the call, once")
    if problems:
        return Verdict(False, error, "; ".join(problems))
    return Verdict(True, error, f"served by the kernel ({route.path})")


SOFTMAX_SERVED = CaseTemplate(_softmax_served, _softmax_expected, _compare_softmax_served)


def _softmax_limit_run(*, strict: bool, t4: bool = False):
    def run(fn, inputs):
        return _softmax_call(fn, inputs, strict=strict, t4=t4)

    return run


def _compare_softmax_limit(words: tuple[str, ...], what: str, hint: str = ""):
    """An input past the kernel's limits: routed to the reference (torch, unsupported), a detail
    naming the limit (one of ``words``), a warning, no launch, the right answer."""

    def compare(got: dict, expected: torch.Tensor, inputs) -> Verdict:
        x = inputs[0]
        problems: list[str] = []
        error = _softmax_result(got, expected, x, problems)
        route, name = got["route"], got["name"]
        if route is None:
            problems.append(f"nothing recorded under {name}: {SOFTMAX_ROUTE_HINT}")
        elif (route.path, route.reason) != ("torch", "unsupported"):
            advice = hint or (
                "the launcher refused it and dispatch caught that: decide before routing, and pass the reason as unsupported=..."
                if route.reason == "kernel-error"
                else "pass unsupported=<a sentence naming the limit> to runtime.dispatch"
            )
            problems.append(f"recorded {_describe_route(route)}; expected torch (unsupported) for {what}: {advice}")
        elif not any(word in (route.detail or "") for word in words):
            problems.append(f"the route's detail {route.detail!r} does not name the limit: say {' or '.join(map(repr, words))}")
        if got["launches"]:
            problems.append(f"launch(x) ran {got['launches']} time(s): {what} must not reach the kernel")
        if not any(name in m for m in got["fallbacks"]):
            problems.append("no FallbackWarning naming the op: a fallback is never silent")
        if problems:
            return Verdict(False, error, "; ".join(problems))
        return Verdict(True, error, f"the reference served it: torch (unsupported): {route.detail}")

    return compare


def _compare_softmax_strict(got: dict, expected, inputs) -> Verdict:
    error, name = got["error"], got["name"]
    problems = []
    if isinstance(error, runtime.FallbackError):
        if name not in str(error):
            problems.append(f"FallbackError, but under another op name: {describe_exception(error, limit=160)}")
    elif error is None:
        problems.append("no error: under strict routing an input the kernel cannot serve must raise FallbackError, not fall back quietly")
    else:
        problems.append(
            f"{describe_exception(error, limit=160)}; expected tritonforge's FallbackError (runtime.dispatch raises it under strict routing)"
        )
    if got["launches"]:
        problems.append(f"launch(x) ran {got['launches']} time(s): rows past the limit must not reach the kernel")
    if problems:
        return Verdict(False, None, "; ".join(problems))
    return Verdict(True, None, "FallbackError: strict routing forbids the fallback")


def _compare_softmax_empty(got: dict, expected: torch.Tensor, inputs) -> Verdict:
    x = inputs[0]
    out, route = got["out"], got["route"]
    problems = []
    if got["error"] is not None:
        problems.append(f"{describe_exception(got['error'], limit=200)}: an empty input is nothing to compute, not an error or a fallback")
    elif not isinstance(out, torch.Tensor) or out.shape != x.shape or out.dtype != x.dtype:
        what = f"{type(out).__name__}" if not isinstance(out, torch.Tensor) else f"{dtype_name(out.dtype)} {tuple(out.shape)}"
        problems.append(f"returned {what}; expected an empty {dtype_name(x.dtype)} tensor of shape {tuple(x.shape)}")
    if route is None:
        problems.append(f"nothing recorded under {got['name']}: call runtime.record_empty(op_name) for an empty input")
    elif (route.path, route.reason) != ("torch", "empty"):
        problems.append(f"recorded {_describe_route(route)}; expected torch (empty): runtime.record_empty(op_name), no dispatch")
    if got["fallbacks"]:
        problems.append("a FallbackWarning: an empty input is not a fallback (record_empty warns nothing)")
    if got["launches"]:
        problems.append(f"launch(x) ran {got['launches']} time(s): an empty input launches nothing")
    if problems:
        return Verdict(False, None, "; ".join(problems))
    return Verdict(True, None, "recorded torch (empty): no launch, no warning, fine under strict routing")


def _bad_input_verdict(got: dict, argument: str, fallback: str, wrong_error, launched: str) -> Verdict:
    """The verdict on a bad input (exercises 8b and 8c): an error naming ``argument``, raised
    before routing (no fallback recorded, no launch). ``wrong_error(error)`` is the problem text
    when ``error`` (possibly None) is not the expected kind, else None."""
    error = got["error"]
    problems = []
    if got["fallbacks"] or (got["route"] is not None and got["route"].path == "torch"):
        problems.append(f"the call was routed to the reference (a fallback); {fallback}")
    wrong = wrong_error(error)
    if wrong:
        problems.append(wrong)
    elif not _names_argument(str(error), argument):
        problems.append(f"{describe_exception(error, limit=160)}: the message must name the argument '{argument}'")
    if got["launches"]:
        problems.append(f"{launched} ran: validate before routing")
    if problems:
        return Verdict(False, None, "; ".join(problems))
    return Verdict(True, None, describe_exception(error, limit=120))


def _compare_softmax_bad(got: dict, expected, inputs) -> Verdict:
    def wrong_error(error):
        if error is None:
            return "no error: expected a TypeError naming x"
        if not isinstance(error, TypeError):
            return f"{describe_exception(error, limit=160)}; expected a TypeError naming x, raised by your checks"
        return None

    return _bad_input_verdict(got, "x", "an integer tensor is bad input, an error before routing", wrong_error, "launch(x)")


def _softmax_case(name, run, compare, shape, dtype, *, expected=_softmax_expected, case_dtype=None) -> Case:
    return Case(name=name, inputs=lambda gen: _softmax_inputs(shape, dtype, gen), run=run, expected=expected, compare=compare, dtype=case_dtype)


def row_softmax_cases() -> list[Case]:
    """The cases of exercise 8b: served by the kernel (float32; float16 rows of exactly 1024; a
    transposed 3-D float16 view), past the kernel's limits (rows of 1025, float64: the reference,
    unsupported, the limit named, no launch; strict: FallbackError), bfloat16 on a simulated T4,
    empty inputs (recorded, no warning, under strict routing) and an int32 tensor (a TypeError)."""
    limit_words = (str(ROW_SOFTMAX_MAX_N),)
    return [
        SOFTMAX_SERVED.case("float32 4×100: served by the kernel", lambda gen: _softmax_inputs((4, 100), torch.float32, gen)),
        SOFTMAX_SERVED.case(
            f"float16 3×{ROW_SOFTMAX_MAX_N}: the longest row the kernel takes",
            lambda gen: _softmax_inputs((3, ROW_SOFTMAX_MAX_N), torch.float16, gen),
        ),
        SOFTMAX_SERVED.case(
            "float16 2×5×33, a transposed view", lambda gen: _softmax_inputs((2, 5, 33), torch.float16, gen, transposed=True)
        ),
        _softmax_case(
            f"float32 3×{ROW_SOFTMAX_MAX_N + 1}: too long for the kernel", _softmax_limit_run(strict=False),
            _compare_softmax_limit(limit_words, f"rows longer than {ROW_SOFTMAX_MAX_N}"), (3, ROW_SOFTMAX_MAX_N + 1), torch.float32,
        ),
        _softmax_case(
            "float16 2×3000: too long for the kernel", _softmax_limit_run(strict=False),
            _compare_softmax_limit(limit_words, f"rows longer than {ROW_SOFTMAX_MAX_N}"), (2, 3000), torch.float16,
        ),
        _softmax_case(
            "float64 5×40: not the kernel's dtype", _softmax_limit_run(strict=False),
            _compare_softmax_limit(("float64", "double"), "float64"), (5, 40), torch.float64,
        ),
        _softmax_case(
            f"float32 2×{ROW_SOFTMAX_MAX_N + 1}, strict: FallbackError", _softmax_limit_run(strict=True), _compare_softmax_strict,
            (2, ROW_SOFTMAX_MAX_N + 1), torch.float32, expected=_nothing,
        ),
        _softmax_case(
            "bfloat16 4×40 on a simulated T4: unsupported", _softmax_limit_run(strict=False, t4=True),
            _compare_softmax_limit(
                ("bf16", "bfloat16"), "bfloat16 on a T4",
                "pass dtype=x.dtype to runtime.dispatch (with unsupported=None when your own limits allow the call): it refuses bf16 below sm_80",
            ), (4, 40), torch.bfloat16, case_dtype=torch.bfloat16,
        ),
        _softmax_case("empty 0×64, strict: recorded, no warning", _softmax_limit_run(strict=True), _compare_softmax_empty, (0, 64), torch.float32),
        _softmax_case("empty 3×0, strict: recorded, no warning", _softmax_limit_run(strict=True), _compare_softmax_empty, (3, 0), torch.float16),
        _softmax_case("bad input: x an int32 tensor", _softmax_limit_run(strict=False), _compare_softmax_bad, (3, 8), torch.int32, expected=_nothing),
    ]  # fmt: skip


def try_row_softmax(fn: Callable, x: torch.Tensor) -> Trial:
    """Make the learner's op under a fresh name, call it once on ``x`` (not strict: a fallback is
    shown, not raised), and show the result beside the reference with the route it took; never
    raises. The verdict is that of a call the kernel should serve, or that of a fallback past the
    kernel's limits."""
    within = x.dtype in ROW_SOFTMAX_KERNEL_DTYPES and 0 < x.shape[-1] <= ROW_SOFTMAX_MAX_N and x.numel() > 0

    run = _softmax_served if within else _softmax_limit_run(strict=False)
    compare = _compare_softmax_served if within else _compare_softmax_limit((str(ROW_SOFTMAX_MAX_N), "float64"), "this input")

    def show(got, expected):
        if got is None:
            return []
        route = got["route"]
        return [
            ("route", _describe_route(route) + (f": {route.detail}" if route is not None and route.detail else "")),
            ("launches", str(got["launches"])),
            ("result", format_values(got["out"]) if isinstance(got["out"], torch.Tensor) else repr(got["out"])),
            ("expected", format_values(expected)),
        ]

    return CaseTemplate(run, _softmax_expected, compare).trial(fn, (x,), title="make_row_softmax", show=show)


# ==============================================================================================
# Exercise 8c: a differentiable op, right under every autograd mode (SwiGLU around given
# forward and backward kernels)
# ==============================================================================================

SWIGLU_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def swiglu_ref(gate: torch.Tensor, up: torch.Tensor, *, upcast: bool = False) -> torch.Tensor:
    """``silu(gate) * up`` in PyTorch ops (differentiable by every autograd mode): the op's
    reference, its fallback, and (with ``upcast``, in float64) the check's oracle."""
    return _swiglu_ref(gate, up, upcast=upcast).contiguous()


def swiglu_backward_ref(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, *, upcast: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dgate, dup)`` by the hand-derived formulas of chapter 5, with ``s = sigmoid(gate)``:
    ``dgate = dy * up * s * (1 + gate * (1 - s))``, ``dup = dy * silu(gate)``. PyTorch ops, so
    autograd can differentiate them again: the backward's reference, its fallback, and the path
    for ``create_graph=True``."""
    return _swiglu_bwd_ref(dy, gate, up, upcast=upcast)


def _swiglu_launch_check(name: str, *tensors: torch.Tensor) -> None:
    first = tensors[0]
    if not all(isinstance(t, torch.Tensor) for t in tensors) or any(
        t.shape != first.shape or t.dtype != first.dtype or t.device != first.device or t.dtype not in SWIGLU_DTYPES for t in tensors
    ):
        raise RuntimeError(f"{name}: expects float tensors of one shape, dtype and device (validate the inputs before routing)")


def launch_swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The given forward launcher: ``silu(gate) * up`` by the package's SwiGLU kernel (chapter 5),
    into a new contiguous tensor. It refuses unvalidated inputs with a ``RuntimeError``."""
    _swiglu_launch_check("launch_swiglu", gate, up)
    return _swiglu_fwd(gate, up)


def launch_swiglu_backward(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The given backward launcher: ``(dgate, dup)`` by the package's SwiGLU backward kernel, new
    tensors. Its results are plain numbers to autograd: nothing records how they were computed,
    so they cannot be differentiated again."""
    _swiglu_launch_check("launch_swiglu_backward", dy, gate, up)
    return _swiglu_bwd(dy, gate, up)


@dataclasses.dataclass
class _SwigluOp:
    public: Callable
    name: str
    backward_name: str
    launch: _CountedLaunch
    launch_backward: _CountedLaunch


def _register_swiglu(fn: Callable) -> _SwigluOp:
    name, backward_name = fresh_op_name("swiglu"), fresh_op_name("swiglu_backward")
    launch, launch_backward = _CountedLaunch(launch_swiglu), _CountedLaunch(launch_swiglu_backward)
    public = fn(name, backward_name, launch, launch_backward)
    if not callable(public):
        raise TypeError(f"register_swiglu must return the public function, got {type(public).__name__}")
    return _SwigluOp(public, name, backward_name, launch, launch_backward)


def _swiglu_inputs(shape, dtype, gen):
    """gate in [-6, 6), up, dy and two more directions (tangents, or the weights of a second
    derivative): float32 draws on the kernel device in ``dtype``."""
    device = kernel_device()
    draw = [12 * torch.rand(*shape, generator=gen) - 6] + [torch.randn(*shape, generator=gen) for _ in range(4)]
    return tuple(t.to(device=device, dtype=dtype) for t in draw)  # gate, up, dy, v_gate, v_up


def _swiglu_context(strict: bool):
    stack = contextlib.ExitStack()
    stack.enter_context(runtime.strict(strict))
    record = stack.enter_context(warnings.catch_warnings(record=True))
    warnings.simplefilter("always")
    return stack, record


def _swiglu_routes(op: _SwigluOp, record) -> dict:
    return {
        "route": _route(op.name), "backward_route": _route(op.backward_name), "name": op.name, "backward_name": op.backward_name,
        "launches": op.launch.calls, "backward_launches": op.launch_backward.calls, "fallbacks": _fallback_warnings(record),
    }  # fmt: skip


def _route_problem(route, name: str, want: tuple, what: str, hint: str) -> Optional[str]:
    if route is None:
        return f"nothing recorded under {name} ({what}): {hint}"
    if (route.path, route.reason) != want:
        wanted = want[0] + (f" ({want[1]})" if want[1] else "")
        return f"{what} recorded {_describe_route(route)} under {name}; expected {wanted}: {hint}"
    return None


BACKWARD_ROUTE_HINT = (
    "in the backward, runtime.dispatch(backward_name, device=..., dtype=..., kernel=lambda: launch_backward(dy, gate, up), "
    "reference=lambda: exercise.swiglu_backward_ref(dy, gate, up))"
)
CREATE_GRAPH_HINT = (
    "when torch.is_grad_enabled() inside the backward (create_graph=True), return "
    'runtime.dispatch_reference(backward_name, "autograd", <why>, lambda: exercise.swiglu_backward_ref(dy, gate, up)): '
    "PyTorch ops that autograd records"
)
FORWARD_MODE_HINT = (
    "in the public function, before the operator: if runtime.autograd_mode_unsupported(gate, up) gives a reason, return "
    'runtime.dispatch_reference(op_name, "autograd", reason, lambda: exercise.swiglu_ref(gate, up))'
)


def _compare_values(label: str, got, want: torch.Tensor, rtol: float, problems: list[str]) -> float:
    if not isinstance(got, torch.Tensor):
        problems.append(f"{label} is {type(got).__name__}, not a tensor")
        return 0.0
    verdict = compare_tensors({"out": got.detach()}, want, rtol=rtol)
    if not verdict.passed:
        problems.append(f"{label}: {verdict.detail}")
    return verdict.error or 0.0


# -- the kernels serve forward and backward -----------------------------------------------------


def _swiglu_forward_run(fn, inputs) -> dict:
    gate, up = inputs[:2]
    op = _register_swiglu(fn)
    stack, record = _swiglu_context(True)
    with stack:
        out = op.public(gate, up)
    return {"out": out, **_swiglu_routes(op, record)}


def _compare_swiglu_forward(got: dict, expected, inputs) -> Verdict:
    gate = inputs[0]
    problems: list[str] = []
    error = _compare_values("out", got["out"], swiglu_ref(*inputs[:2], upcast=True), TOLERANCE[gate.dtype], problems)
    problem = _route_problem(got["route"], got["name"], (_kernel_path(), None), "the forward", "the kernel serves it: route with runtime.dispatch")
    problems += [problem] if problem else []
    if got["launches"] != 1:
        problems.append(f"launch(gate, up) ran {got['launches']} times; the kernel must serve the call, once")
    if problems:
        return Verdict(False, error, "; ".join(problems))
    return Verdict(True, error, f"served by the kernel ({_kernel_path()})")


def _swiglu_backward_run(fn, inputs) -> dict:
    gate, up, dy = (t.clone() for t in inputs[:3])
    gate.requires_grad_()
    up.requires_grad_()
    op = _register_swiglu(fn)
    stack, record = _swiglu_context(True)
    with stack:
        out = op.public(gate, up)
        if not (isinstance(out, torch.Tensor) and out.requires_grad):
            raise RuntimeError("the output does not require grad although gate and up do: register the backward (op.register_autograd)")
        out.backward(dy)
    return {"dgate": gate.grad, "dup": up.grad, **_swiglu_routes(op, record)}


def _compare_swiglu_backward(got: dict, expected, inputs) -> Verdict:
    gate, up, dy = inputs[:3]
    dgate, dup = swiglu_backward_ref(dy, gate, up, upcast=True)
    problems: list[str] = []
    worst = max(
        _compare_values("dgate", got["dgate"], dgate, TOLERANCE[gate.dtype], problems),
        _compare_values("dup", got["dup"], dup, TOLERANCE[gate.dtype], problems),
    )
    problem = _route_problem(got["backward_route"], got["backward_name"], (_kernel_path(), None), "the backward", BACKWARD_ROUTE_HINT)
    problems += [problem] if problem else []
    if got["backward_launches"] != 1:
        problems.append(f"launch_backward ran {got['backward_launches']} times; the backward kernel must serve the backward, once")
    if problems:
        return Verdict(False, worst, "; ".join(problems))
    return Verdict(True, worst, f"dgate and dup by the backward kernel, routed under the backward's name ({_kernel_path()})")


# -- create_graph=True: the reference backward, so the second derivative is exact -----------------


def _second_derivative(f, gate, up, dy, v_gate, v_up):
    """``(dgate, dup)`` of ``f`` with create_graph, then the gradient of ``<dgate, v_gate> + <dup, v_up>``."""
    gate, up = gate.detach().clone().requires_grad_(), up.detach().clone().requires_grad_()
    out = f(gate, up)
    dgate, dup = torch.autograd.grad(out, (gate, up), dy, create_graph=True)
    if not (dgate.requires_grad or dup.requires_grad):
        raise RuntimeError(
            "the gradients from create_graph=True do not require grad: autograd recorded nothing of the backward, "
            "so the second derivative would be zero: under create_graph the backward must return the reference backward "
            "computed with grad on (not the kernel's results, no torch.no_grad, no .detach())"
        )
    hgate, hup = torch.autograd.grad((dgate * v_gate).sum() + (dup * v_up).sum(), (gate, up), allow_unused=True)
    return dgate, dup, hgate, hup


def _double_backward_run(fn, inputs) -> dict:
    op = _register_swiglu(fn)
    stack, record = _swiglu_context(False)
    with stack:
        try:
            got = dict(zip(("dgate", "dup", "hgate", "hup"), _second_derivative(op.public, *inputs)))
        except Exception as exc:  # noqa: BLE001 - the verdict names the error
            got = {"error": exc}
    return {**got, **_swiglu_routes(op, record)}


def _double_backward_expected(inputs):
    return _second_derivative(lambda g, u: swiglu_ref(g, u, upcast=True), *(t.double() for t in inputs))


def _compare_double_backward(got: dict, expected, inputs) -> Verdict:
    problems: list[str] = []
    worst = 0.0
    if "error" in got:
        problems.append(describe_exception(got["error"], limit=200))
    else:
        for label, want in zip(("dgate", "dup", "hgate", "hup"), expected):
            value = got[label]
            if value is None:
                problems.append(f"{label} is None: the second derivative must not vanish")
                continue
            worst = max(worst, _compare_values(label, value, want.detach(), 1e-9, problems))
    problem = _route_problem(
        got["backward_route"], got["backward_name"], ("torch", "autograd"), "the backward under create_graph=True", CREATE_GRAPH_HINT
    )
    problems += [problem] if problem else []
    if problem is None and not any(got["backward_name"] in m for m in got["fallbacks"]):
        problems.append("no FallbackWarning naming the backward: a fallback is never silent")
    if problems:
        return Verdict(False, worst or None, "; ".join(problems))
    return Verdict(True, worst, "the reference backward under create_graph: second derivatives exact, recorded torch (autograd), warned")


def _double_backward_strict_run(fn, inputs) -> dict:
    op = _register_swiglu(fn)
    error = None
    stack, record = _swiglu_context(True)
    with stack:
        try:
            _second_derivative(op.public, *inputs)
        except Exception as exc:  # noqa: BLE001
            error = exc
    return {"error": error, **_swiglu_routes(op, record)}


def _compare_strict_named(which: str, hint: str):
    def compare(got: dict, expected, inputs) -> Verdict:
        error, name = got["error"], got[which]
        if isinstance(error, runtime.FallbackError):
            if name not in str(error):
                return Verdict(False, None, f"FallbackError, but not naming {name}: {describe_exception(error, limit=160)}; {hint}")
            return Verdict(True, None, "FallbackError: strict routing forbids the fallback")
        if error is None:
            return Verdict(False, None, f"no error: under strict routing the reference is a fallback, and must raise FallbackError; {hint}")
        return Verdict(False, None, f"{describe_exception(error, limit=160)}; expected tritonforge's FallbackError naming {name}; {hint}")

    return compare


# -- forward-mode AD and torch.func: the reference, loudly ----------------------------------------


def _tangent_expected(inputs):
    gate, up, _, t_gate, t_up = (t.double() for t in inputs)
    return torch.func.jvp(lambda g, u: swiglu_ref(g, u, upcast=True), (gate, up), (t_gate, t_up))


def _dual_run(fn, inputs) -> dict:
    gate, up, _, t_gate, t_up = inputs
    op = _register_swiglu(fn)
    out = tangent = error = None
    stack, record = _swiglu_context(False)
    with stack:
        try:
            with torch.autograd.forward_ad.dual_level():
                dual = op.public(torch.autograd.forward_ad.make_dual(gate, t_gate), torch.autograd.forward_ad.make_dual(up, t_up))
                out, tangent = torch.autograd.forward_ad.unpack_dual(dual)
        except Exception as exc:  # noqa: BLE001
            error = exc
    return {"out": out, "tangent": tangent, "error": error, **_swiglu_routes(op, record)}


def _jvp_run(fn, inputs) -> dict:
    gate, up, _, t_gate, t_up = inputs
    op = _register_swiglu(fn)
    out = tangent = error = None
    stack, record = _swiglu_context(False)
    with stack:
        try:
            out, tangent = torch.func.jvp(op.public, (gate, up), (t_gate, t_up))
        except Exception as exc:  # noqa: BLE001
            error = exc
    return {"out": out, "tangent": tangent, "error": error, **_swiglu_routes(op, record)}


def _compare_tangent(got: dict, expected, inputs) -> Verdict:
    error = got["error"]
    if isinstance(error, (runtime.FallbackError, NotImplementedError)):
        return Verdict(True, None, f"refused loudly: {describe_exception(error, limit=120)}")
    problems: list[str] = []
    worst = 0.0
    want_out, want_tangent = expected
    if error is not None:
        problems.append(describe_exception(error, limit=200))
    elif got["tangent"] is None:
        problems.append("the result has no tangent: the operator dropped it (a custom op has no forward-mode rule)")
    else:
        if not got["tangent"].abs().any() and want_tangent.abs().any():
            problems.append("the tangent is all zeros: torch.func.jvp saw no derivative through the operator")
        else:
            worst = _compare_values("tangent", got["tangent"], want_tangent, 1e-9, problems)
        _compare_values("out", got["out"], want_out, 1e-9, problems)
    if not problems:
        problem = _route_problem(got["route"], got["name"], ("torch", "autograd"), "the call", FORWARD_MODE_HINT)
        if problem:
            problems.append(problem)
        elif not any(got["name"] in m for m in got["fallbacks"]):
            problems.append("no FallbackWarning naming the op: a fallback is never silent")
    elif error is None:
        problems.append(FORWARD_MODE_HINT)
    if problems:
        return Verdict(False, worst or None, "; ".join(problems))
    return Verdict(True, worst, "the reference carried the tangent: recorded torch (autograd), warned")


def _jvp_strict_run(fn, inputs) -> dict:
    gate, up, _, t_gate, t_up = inputs
    op = _register_swiglu(fn)
    error = None
    stack, record = _swiglu_context(True)
    with stack:
        try:
            torch.func.jvp(op.public, (gate, up), (t_gate, t_up))
        except Exception as exc:  # noqa: BLE001
            error = exc
    return {"error": error, **_swiglu_routes(op, record)}


def _func_grad_run(fn, inputs) -> dict:
    gate, up, dy = inputs[:3]
    op = _register_swiglu(fn)
    grads = error = None
    stack, record = _swiglu_context(False)
    with stack:
        try:
            grads = torch.func.grad(lambda g, u: (op.public(g, u) * dy).sum(), argnums=(0, 1))(gate, up)
        except Exception as exc:  # noqa: BLE001
            error = exc
    return {"grads": grads, "error": error, **_swiglu_routes(op, record)}


def _compare_func_grad(got: dict, expected, inputs) -> Verdict:
    gate, up, dy = inputs[:3]
    problems: list[str] = []
    worst = 0.0
    if isinstance(got["error"], (runtime.FallbackError, NotImplementedError)):
        return Verdict(True, None, f"refused loudly: {describe_exception(got['error'], limit=120)}")
    if got["error"] is not None:
        problems.append(f"{describe_exception(got['error'], limit=200)} ({FORWARD_MODE_HINT})")
    else:
        for label, value, want in zip(("dgate", "dup"), got["grads"], swiglu_backward_ref(dy, gate, up, upcast=True)):
            worst = max(worst, _compare_values(label, value, want, 1e-9, problems))
        problem = _route_problem(got["route"], got["name"], ("torch", "autograd"), "the call", FORWARD_MODE_HINT)
        problems += [problem] if problem else []
    if problems:
        return Verdict(False, worst or None, "; ".join(problems))
    return Verdict(True, worst, "the reference under torch.func.grad: recorded torch (autograd)")


def _swiglu_bad_run(fn, inputs) -> dict:
    gate, up = inputs[:2]
    op = _register_swiglu(fn)
    error = None
    stack, record = _swiglu_context(False)
    with stack:
        try:
            op.public(gate, up[..., :-1])
        except Exception as exc:  # noqa: BLE001
            error = exc
    return {"error": error, **_swiglu_routes(op, record)}


def _compare_swiglu_bad(got: dict, expected, inputs) -> Verdict:
    def wrong_error(error):
        if isinstance(error, (TypeError, ValueError)):
            return None
        return f"{'no error' if error is None else describe_exception(error, limit=160)}; expected a ValueError naming up"

    return _bad_input_verdict(got, "up", "bad input must raise before routing", wrong_error, "launch(gate, up)")


# -- the operators under torch.library.opcheck and torch.compile ------------------------------------


OPERATOR_HINT = (
    "register the backward as an operator of its own, @torch.library.custom_op(backward_name, mutates_args=()) on "
    "(dy, gate, up) -> tuple[torch.Tensor, torch.Tensor] whose body routes, with a fake; the registered autograd "
    "backward calls it: AOTAutograd then traces a node, not the launch"
)


def _swiglu_opcheck_run(fn, inputs) -> dict:
    gate, up, dy = (t.detach().clone() for t in inputs[:3])
    op = _register_swiglu(fn)
    forward, backward = _operator(op.name), _operator(op.backward_name)
    if forward is None or backward is None:
        return {"missing": [name for name, found in ((op.name, forward), (op.backward_name, backward)) if found is None]}
    with runtime.strict(True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = {
            op.name: torch.library.opcheck(forward, (gate.requires_grad_(), up.requires_grad_()), raise_exception=False),
            op.backward_name: torch.library.opcheck(backward, (dy, gate.detach(), up.detach()), raise_exception=False),
        }
    return {"results": results}


def _compare_swiglu_opcheck(got: dict, expected, inputs) -> Verdict:
    if "missing" in got:
        missing = ", ".join("torch.ops." + name.replace("::", ".") for name in got["missing"])
        return Verdict(False, None, f"no operator {missing}: {OPERATOR_HINT}")
    parts = []
    for name, result in got["results"].items():
        for test, outcome in result.items():
            if outcome != "SUCCESS":
                text = describe_exception(outcome, limit=160) if isinstance(outcome, BaseException) else str(outcome)
                parts.append(f"{name} {test}: {text}")
    if not parts:
        return Verdict(True, None, "both operators: schema, fake, autograd registration and AOT dispatch pass")
    hint = f" ({OPERATOR_HINT})" if any("aot_dispatch" in part for part in parts) else ""
    return Verdict(False, None, "opcheck failed: " + "; ".join(parts) + hint)


def _swiglu_compile_step_run(fn, inputs) -> dict:
    """Two steps of ``loss = <swiglu(2 gate, up), dy>`` under torch.compile(fullgraph=True, aot_eager)."""
    gate, up, dy = (t.detach().clone() for t in inputs[:3])
    op = _register_swiglu(fn)

    def step(g, u):
        return (op.public(g * 2.0, u) * dy).sum()

    try:
        with _compiled_fullgraph(step) as (compiled, graphs):
            grads = []
            for _ in range(2):
                g, u = gate.clone().requires_grad_(), up.clone().requires_grad_()
                compiled(g, u).backward()
                grads.append((g.grad, u.grad))
        return {"grads": grads, **_swiglu_routes(op, []), **_graph_facts(graphs, op.name)}
    except Exception as exc:  # noqa: BLE001 - a graph break or a traced launch: the verdict says which
        return {"compile_error": _describe_compile_error(exc)}


def _compare_swiglu_compile_step(got: dict, expected, inputs) -> Verdict:
    if "compile_error" in got:
        text = got["compile_error"]
        return Verdict(False, None, f"torch.compile(fullgraph=True) of a training step failed: {text} ({_compile_hint(text)}; {OPERATOR_HINT})")
    gate, up, dy = inputs[:3]
    want = swiglu_backward_ref(dy, 2.0 * gate, up, upcast=True)
    want = (2.0 * want[0], want[1])
    problems: list[str] = []
    worst = 0.0
    for grads in got["grads"]:
        for label, value, reference in zip(("dgate", "dup"), grads, want):
            worst = max(worst, _compare_values(f"compiled {label}", value, reference, TOLERANCE[gate.dtype], problems))
    op_target = got["name"].replace("::", ".") + ".default"
    problems += _graph_problems(got)
    for which, name, launches in (("forward", got["name"], got["launches"]), ("backward", got["backward_name"], got["backward_launches"])):
        route = got["route" if which == "forward" else "backward_route"]
        if route is None or route.path != _kernel_path():
            problems.append(f"the compiled {which} recorded {_describe_route(route)} under {name}; expected {_kernel_path()}")
        if launches != 2:
            problems.append(f"the {which} kernel ran {launches} times in 2 compiled steps; expected once a step")
    if problems:
        return Verdict(False, worst or None, "; ".join(dict.fromkeys(problems)))
    return Verdict(True, worst, f"one graph with {op_target}; both kernels served both compiled steps")


def _swiglu_case(name, run, compare, shape, dtype, *, expected=_nothing, case_dtype=None) -> Case:
    return Case(name=name, inputs=lambda gen: _swiglu_inputs(shape, dtype, gen), run=run, expected=expected, compare=compare, dtype=case_dtype)


def swiglu_cases() -> list[Case]:
    """The cases of exercise 8c: the forward and the backward served by their kernels (the
    backward routed under its own name), double backward (create_graph=True: the reference backward,
    second derivatives exact in float64; strict: FallbackError), forward-mode AD, torch.func.jvp
    and torch.func.grad (the reference, loudly; strict: FallbackError), a bad input, both operators
    under ``torch.library.opcheck``, and a training step under ``torch.compile(fullgraph=True)``."""
    return [
        _swiglu_case("float32 4×40: forward by the kernel", _swiglu_forward_run, _compare_swiglu_forward, (4, 40), torch.float32),
        _swiglu_case(
            "float32 3×50: backward by its kernel, under its own name", _swiglu_backward_run, _compare_swiglu_backward, (3, 50), torch.float32,
        ),
        _swiglu_case("float16 2×3×24: backward by its kernel", _swiglu_backward_run, _compare_swiglu_backward, (2, 3, 24), torch.float16),
        _swiglu_case(
            "float64 3×16, create_graph=True: second derivatives", _double_backward_run, _compare_double_backward, (3, 16), torch.float64,
            expected=_double_backward_expected,
        ),
        _swiglu_case(
            "create_graph=True, strict: FallbackError", _double_backward_strict_run, _compare_strict_named("backward_name", CREATE_GRAPH_HINT),
            (2, 8), torch.float64,
        ),
        _swiglu_case("float64 3×20, forward-mode AD (make_dual)", _dual_run, _compare_tangent, (3, 20), torch.float64, expected=_tangent_expected),
        _swiglu_case("float64 2×3×12, torch.func.jvp", _jvp_run, _compare_tangent, (2, 3, 12), torch.float64, expected=_tangent_expected),
        _swiglu_case(
            "torch.func.jvp, strict: FallbackError", _jvp_strict_run, _compare_strict_named("name", FORWARD_MODE_HINT), (2, 8), torch.float64,
        ),
        _swiglu_case("float64 4×10, torch.func.grad", _func_grad_run, _compare_func_grad, (4, 10), torch.float64),
        _swiglu_case("bad input: up of another shape", _swiglu_bad_run, _compare_swiglu_bad, (3, 16), torch.float32),
        _swiglu_case("torch.library.opcheck: both operators (float32 3×24)", _swiglu_opcheck_run, _compare_swiglu_opcheck, (3, 24),
                     torch.float32),
        _swiglu_case("torch.compile(fullgraph=True, aot_eager): a training step", _swiglu_compile_step_run, _compare_swiglu_compile_step,
                     (4, 40), torch.float32),
    ]  # fmt: skip


def try_swiglu(fn: Callable, gate: torch.Tensor, up: torch.Tensor) -> Trial:
    """Register the learner's op and its backward under fresh names, run a forward and a backward
    (strict) on ``gate`` and ``up``, and show the gradients beside the reference's, with the routes;
    never raises."""
    dy = torch.ones_like(gate)

    def show(got, expected):
        if got is None:
            return []
        want = swiglu_backward_ref(dy, gate, up, upcast=True)
        return [
            ("forward route", _describe_route(got["route"])),
            ("backward route", _describe_route(got["backward_route"])),
            ("dgate", format_values(got["dgate"]) if isinstance(got["dgate"], torch.Tensor) else repr(got["dgate"])),
            ("expected dgate", format_values(want[0])),
            ("dup", format_values(got["dup"]) if isinstance(got["dup"], torch.Tensor) else repr(got["dup"])),
            ("expected dup", format_values(want[1])),
        ]

    inputs = (gate, up, dy, dy, dy)
    return CaseTemplate(_swiglu_backward_run, _nothing, _compare_swiglu_backward).trial(fn, inputs, title="register_swiglu", show=show)
