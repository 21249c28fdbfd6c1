"""Eager inference without the host's repetition: what a decode loop calls thousands of times.

A repeated eager inference call of one signature (shapes, strides, dtypes, devices, scalars) skips
the checks and decisions it passed before and launches the kernels directly (:func:`run_remembered`,
:func:`remember_served`); the launch goes through the compiled kernel's own launcher
(:func:`bound_launch`). :class:`OpEntry` is the decision every public op makes about a checked
call (compile, empty, autograd mode, vmap, eager), written once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Optional

import torch

from tritonforge import _triton, runtime, simulation

EAGER_LAUNCHES_MAX = 4096
"""Signatures remembered at most (then no more are added): a decode loop repeats a few dozen."""

_eager_launches: dict = {}


def forget() -> None:
    """Forget every remembered launch (and every barred signature): tests start from none."""
    _eager_launches.clear()


def eager_fast_path() -> bool:
    """Whether remembered launches are used at all: compiled kernels on a GPU (on the interpreter a
    kernel costs milliseconds, and the simulation decides as another device would), outside a
    region Dynamo traces (there the graph holds the op, and a lookup would become a guard)."""
    if torch.compiler.is_compiling():
        return False
    return _triton.HAVE_TRITON and not _triton.INTERPRETING and simulation.simulated_device() is None


MISS = object()
"""What :func:`run_remembered` returns when no remembered launch serves the call."""


def plain_inference(*tensors: Optional[torch.Tensor]) -> bool:
    """No autograd graph to build for ``tensors`` (``None`` entries skipped), no ``torch.func``
    transform, no forward-mode tangent, no Dynamo trace: the conditions under which a remembered
    launch may serve a call."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        return False
    if torch.compiler.is_compiling() or torch._C._functorch.peek_interpreter_stack() is not None:
        return False
    return torch.autograd.forward_ad._current_level < 0


def run_remembered(key, *args):
    """Serve a call by the launch remembered for ``key`` (``None``: none) with ``args`` (its tensors,
    ``None`` for an absent optional one), or return :data:`MISS`: nothing remembered, or the call
    needs more than the launch (:func:`plain_inference`), or the launch raised. A launch that raises
    is forgotten and its signature never remembered again, so that the op's full path serves every
    later call (a kernel error there being a routed fallback); in strict mode the error is raised,
    so that a broken remembered launch cannot hide behind the full path."""
    launch = _eager_launches.get(key) if key is not None else None
    if launch is None or not plain_inference(*args):
        return MISS
    try:
        return launch(*args)
    except Exception:
        _eager_launches[key] = None  # forgotten, and never remembered again (see remember_served)
        if runtime.is_strict():
            raise
        return MISS


def remembered(key) -> Optional[Callable]:
    """The launch remembered for ``key`` (a :func:`signature`), or ``None``."""
    return _eager_launches.get(key)


def remember_served(op: str, key, build: Callable[[], Optional[Callable]]) -> None:
    """After a call of ``op`` with signature ``key`` that the kernel served (its route not
    ``torch``), remember ``build()``: a launch of the same arguments whose every decision (tiles,
    grid, flags) depends on nothing but the signature, so that it only allocates the outputs and
    launches; or ``None`` where the call needs more than a launch (a copy of an input, say). The
    launch is wrapped so that it records the same route. The key holds the op's name and the
    call's shapes, strides, dtypes, devices and scalar arguments; the checks that passed for it
    hold for every call of that key."""
    if key is None or key in _eager_launches:  # remembered already, or barred (a launch that raised)
        return
    route = runtime.last_routes().get(op)
    if route is None or route.path == "torch":
        return
    launch = build()
    if launch is None:
        return

    def served(*args):
        out = launch(*args)
        runtime.record(route)
        return out

    if len(_eager_launches) < EAGER_LAUNCHES_MAX:
        _eager_launches[key] = served


def signature(op: str, tensors: tuple, scalars: tuple = ()):
    """The key of an eager inference call for :func:`run_remembered`: the op, each tensor's shape,
    strides, dtype and device (``None`` for an absent optional one), each scalar argument with its
    type (``True`` and ``1`` are different calls: only one passes the checks). ``None`` when
    remembered launches are off (:func:`eager_fast_path`) or an argument is not what the op takes
    (its checks then say what is wrong)."""
    if not eager_fast_path():
        return None
    try:
        return (op, *[None if t is None else (t.shape, t.stride(), t.dtype, t.device) for t in tensors],
                *[(type(s), s) for s in scalars])  # fmt: skip
    except (AttributeError, TypeError):
        return None


@dataclasses.dataclass(frozen=True)
class OpEntry:
    """The decisions every public op makes about a checked call, written once; an op states what is
    its own. :meth:`serve` takes, in this order:

    1. **traced by Dynamo** (``torch.compile``): the graph holds the operator — ``train`` when a
       gradient may be asked for, else ``op``; a gradient the kernels have no rule for
       (``grad_inputs``) traces the reference instead, and so does forward-mode AD
       (``torch.func.jvp``), a routed fallback;
    2. **empty input** (``empty``): nothing to launch, the reference's (differentiable) empty answer;
    3. **an autograd mode the kernels cannot serve** (forward-mode AD, ``torch.func`` transforms
       other than ``vmap``, ``vmap`` when ``vmap`` is False or a gradient is needed, a gradient for
       an input past ``grad_inputs``): the reference, a routed fallback;
    4. **a gradient to build**: ``train`` (or ``op`` when it is differentiable itself);
    5. **vmap**: ``op``, whose vmap rule serves it;
    6. **eager inference**: ``eager``, the routed body of the operator without the dispatcher's
       host time, and the launch it made remembered for the next call of the same signature
       (``launch``; :func:`remember_served`).

    Every callable takes the call's arguments as :meth:`serve` was given them: tensors, then scalars."""

    name: str  # the op's public name, the key of last_path
    op: Callable  # the inference operator (torch.library): traced graphs and vmap
    eager: Callable  # the routed forward the operator's body calls (runtime.dispatch)
    reference: Callable  # the PyTorch reference, differentiable by autograd and every transform
    train: Optional[Callable] = None  # the differentiable operator, when it is not ``op``
    launch: Optional[Callable] = None  # builds a remembered launch for these arguments, or returns None
    vmap: bool = True  # the operator has a vmap rule
    grad_inputs: Optional[int] = None  # the leading tensors the kernels differentiate (None: all)
    empty: bool = True  # an empty first tensor is answered by the reference without routing
    no_grad_rule: str = ""  # names the inputs past grad_inputs, for the fallback's sentence

    def serve(self, tensors: tuple, scalars: tuple = (), key=None):
        """Serve a call whose arguments passed the op's checks (``key``: its :func:`signature`)."""
        args = (*tensors, *scalars)
        grad = torch.is_grad_enabled()
        split = len(tensors) if self.grad_inputs is None else self.grad_inputs
        needs_grad = grad and any(t is not None and t.requires_grad for t in tensors[:split])
        other_grad = grad and any(t is not None and t.requires_grad for t in tensors[split:])
        if torch.compiler.is_compiling():
            if other_grad:
                return self.reference(*args)
            mode = runtime.traced_mode_unsupported()
            if mode is not None:
                return runtime.dispatch_reference(self.name, "autograd", mode, lambda: self.reference(*args))
            return (self.train or self.op)(*args) if needs_grad else self.op(*args)
        if self.empty and tensors[0].numel() == 0:
            runtime.record_empty(self.name)
            return self.reference(*args)
        mode = runtime.eager_mode_unsupported(*(t for t in tensors if t is not None), vmap_ok=self.vmap and not needs_grad)
        if mode is None and other_grad:
            mode = f"{self.no_grad_rule} needs a gradient: the kernels have no rule for it; the PyTorch reference"
        if mode is not None:
            return runtime.dispatch_reference(self.name, "autograd", mode, lambda: self.reference(*args))
        if needs_grad:
            return (self.train or self.op)(*args)
        if torch._C._functorch.peek_interpreter_stack() is not None:
            return self.op(*args)
        out = self.eager(*args)
        if key is not None and self.launch is not None:
            remember_served(self.name, key, lambda: self.launch(*args))
        return out


DIRECT_LAUNCHES = True
"""Whether a :class:`BoundLaunch` launches its compiled kernel directly (False: always through
``kernel[grid]``; ``benchmarks/experiments/host_per_call.py`` times both in one run)."""

_ONCE = ()  # BoundLaunch._direct after one call (falsy, like the False of a launch that never goes direct)


class BoundLaunch:
    """``kernel[grid]`` with its ``tl.constexpr`` flags and launch options fixed: call it with the
    kernel's other arguments, positionally, in order (see :func:`bound_launch`)."""

    __slots__ = ("kernel", "grid", "options", "_launch", "_direct")

    def __init__(self, kernel, grid: tuple, options: dict):
        self.kernel, self.grid, self.options = kernel, grid, options
        self._launch = kernel[grid]
        self._direct = None  # after the second call: (runner, constexpr values, tensor positions, [(position, scalar)]) or False

    def __call__(self, *args) -> None:
        direct = self._direct
        if direct and DIRECT_LAUNCHES:
            runner, tail, tensors, scalars = direct
            for i in tensors:  # plain loops: a generator per check would cost as much as the checks
                if args[i].data_ptr() & 15:
                    break
            else:
                for i, value in scalars:
                    if args[i] is not value and args[i] != value:
                        break
                else:
                    runner(*args, *tail)
                    return
        compiled = self._launch(*args, **self.options)
        if direct is None:  # the first call: a launch called once (the full path builds one per call) stays as it is
            self._direct = _ONCE
        elif direct is _ONCE:
            self._direct = _direct_launch(self.kernel, self.grid, self.options, compiled, args)

    def __repr__(self) -> str:
        return f"BoundLaunch({getattr(self.kernel, '__name__', self.kernel)}, grid={self.grid}, direct={self._direct is not None})"


def _direct_launch(kernel, grid, options, compiled, args):
    """What :class:`BoundLaunch` needs to launch ``compiled`` itself, or ``False`` (never: the
    interpreter, which returns no compiled kernel; an argument left to its default; a pointer that
    was not 16-byte aligned, for which Triton compiled a kernel without that assumption)."""
    names = getattr(kernel, "arg_names", None)
    if names is None or not hasattr(compiled, "function") or not hasattr(compiled, "__getitem__"):
        return False
    try:
        tail = tuple(options[name] for name in names[len(args):])
    except KeyError:
        return False
    tensors = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
    if any(args[i].data_ptr() & 15 for i in tensors):
        return False
    scalars = tuple((i, a) for i, a in enumerate(args) if not isinstance(a, torch.Tensor))
    grid3 = (*grid, 1, 1)[:3]  # the compiled kernel's launcher reads three dimensions
    return compiled[grid3], tail, tensors, scalars


def bound_launch(kernel, grid: tuple, **options) -> BoundLaunch:
    """``kernel[grid]`` with ``options`` (its constexpr flags, ``num_warps``, ``num_stages``) fixed:
    a function of the kernel's remaining arguments, for the launches an op builds once per
    signature (:func:`remember_served`) and calls on every decode step.

    The first two calls go through Triton's own launch (``JITFunction.run``: argument binding,
    specialization, the compile cache), which hands back the compiled kernel. Later calls launch
    that kernel through its own launcher (``CompiledKernel[grid]``, Triton's API for a compiled
    kernel, the same in Triton 3.3-3.9), skipping the per-call binding and cache lookup. That is
    right only for the specialization Triton compiled: so a later call goes the direct way only
    when every scalar argument equals the first call's and every tensor is 16-byte aligned (what
    Triton assumes of a pointer that was aligned when it compiled); any other call takes
    Triton's launch, which specializes afresh. In the interpreter every call takes it."""
    return BoundLaunch(kernel, grid, options)


def backward_or_reference(op: str, kernel: Callable, reference: Callable):
    """What every op's autograd backward computes its gradients with: ``kernel()`` (the routed
    backward operator), or, when autograd records the backward itself (``create_graph=True``: a
    Hessian, a gradient penalty, double backward) outside a traced region, ``reference()``, the
    differentiable PyTorch backward: a routed fallback (reason ``autograd``; warned once, an error in
    strict mode), so a second derivative is exact, never zeros."""
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():
        return runtime.dispatch_reference(
            op, "autograd", "create_graph=True: the backward kernel is not differentiable; the PyTorch reference backward is, "
            "so double backward is exact", reference)  # fmt: skip
    return kernel()
