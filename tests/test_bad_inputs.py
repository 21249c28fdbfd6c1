"""Bad input for every public op, in one table: each row breaks one argument of an otherwise good
call, and the op must raise ``TypeError``/``ValueError`` whose message names that argument
(DESIGN.md: bad input is an error naming the argument, never a fallback). Empty inputs are not
bad input: each op answers them with an empty (or, for attention with no keys, zero) result and
records the route ``torch``/``empty``, allowed under strict routing.

Device checks are exercised with the ``meta`` device against CPU tensors (this machine has no
GPU): every op compares its tensors' devices before anything routes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import NamedTuple

import pytest
import torch

import tritonforge as tfg


def _good(op: str) -> dict:
    """Keyword arguments of a good call (fresh random float32 tensors on the CPU)."""
    r = torch.randn
    return {
        "rms_norm": lambda: dict(x=r(4, 16), weight=r(16), eps=1e-6),
        "swiglu": lambda: dict(gate=r(4, 16), up=r(4, 16)),
        "swiglu_mlp_front": lambda: dict(x=r(4, 8), w_gate=r(8, 12), w_up=r(8, 12)),
        "softmax": lambda: dict(x=r(4, 16)),
        "flash_attention": lambda: dict(q=r(1, 4, 8, 16), k=r(1, 2, 8, 16), v=r(1, 2, 8, 16), causal=False, sm_scale=None),
        "axpy": lambda: dict(alpha=2.0, x=r(4, 16), y=r(4, 16)),
        "rope": lambda: dict(x=r(1, 2, 8, 16), cos=r(8, 16), sin=r(8, 16)),
    }[op]()


FUNCTIONS: dict[str, Callable] = {
    "rms_norm": tfg.rms_norm,
    "swiglu": tfg.swiglu,
    "swiglu_mlp_front": tfg.swiglu_mlp_front,
    "softmax": tfg.softmax,
    "flash_attention": tfg.flash_attention,
    "axpy": tfg.axpy,
    "rope": tfg.rope,
}

TENSOR_ARGS = {
    "rms_norm": ("x", "weight"),
    "swiglu": ("gate", "up"),
    "swiglu_mlp_front": ("x", "w_gate", "w_up"),
    "softmax": ("x",),
    "flash_attention": ("q", "k", "v"),
    "axpy": ("x", "y"),
    "rope": ("x", "cos", "sin"),
}


class Bad(NamedTuple):
    op: str
    arg: str  # the argument broken, which the message must name
    how: str  # a few words for the test id
    change: Callable[[dict], None]  # breaks the good keyword arguments in place
    error: type[Exception]


def _set(arg: str, make: Callable[[torch.Tensor | object], object]) -> Callable[[dict], None]:
    """A change that replaces ``kwargs[arg]`` by ``make(kwargs[arg])``."""

    def change(kwargs: dict) -> None:
        kwargs[arg] = make(kwargs[arg])

    return change


def _both(a: str, b: str, make: Callable) -> Callable[[dict], None]:
    """Break two arguments the same way (e.g. k and v together, so only the named check fires)."""

    def change(kwargs: dict) -> None:
        kwargs[a], kwargs[b] = make(kwargs[a]), make(kwargs[b])

    return change


def _generic_rows() -> list[Bad]:
    """For every tensor argument of every op: an integer tensor, a nested list, a Python float,
    None, and the tensor on the meta device beside CPU tensors."""
    rows = []
    for op, args in TENSOR_ARGS.items():
        for arg in args:
            rows += [
                Bad(op, arg, "int64 tensor", _set(arg, lambda t: t.to(torch.int64)), TypeError),
                Bad(op, arg, "list", _set(arg, lambda t: t.tolist()), TypeError),
                Bad(op, arg, "float", _set(arg, lambda t: 1.0), TypeError),
                Bad(op, arg, "None", _set(arg, lambda t: None), TypeError),
            ]
            if len(args) > 1:  # a device mismatch needs two tensors
                rows.append(Bad(op, arg, "meta device beside cpu", _set(arg, lambda t: t.to("meta")), ValueError))
    return rows


NAN, INF = float("nan"), float("inf")

SPECIFIC = [
    # rope
    Bad("rope", "x", "1-D", _set("x", lambda t: t[0, 0, 0]), ValueError),
    Bad("rope", "x", "odd head dim", _both("x", "cos", lambda t: t[..., :15]), ValueError),
    Bad("rope", "cos", "wrong length", _set("cos", lambda t: t[:7]), ValueError),
    Bad("rope", "sin", "broadcastable [1, N, D]", _set("sin", lambda t: t[None]), ValueError),
    # rms_norm
    Bad("rms_norm", "x", "0-d", _set("x", lambda t: t[0, 0]), ValueError),
    Bad("rms_norm", "weight", "2-D", _set("weight", lambda t: t[None]), ValueError),
    Bad("rms_norm", "weight", "wrong length", _set("weight", lambda t: t[:15]), ValueError),
    Bad("rms_norm", "weight", "float64 beside float32 x", _set("weight", lambda t: t.double()), TypeError),
    Bad("rms_norm", "weight", "float16 beside float32 x", _set("weight", lambda t: t.half()), TypeError),
    Bad("rms_norm", "x", "float16 x beside a float64 weight", _both("x", "weight", lambda t: t.half() if t.dim() == 2 else t.double()), TypeError),
    Bad("rms_norm", "eps", "negative", _set("eps", lambda e: -1e-6), ValueError),
    Bad("rms_norm", "eps", "NaN", _set("eps", lambda e: NAN), ValueError),
    Bad("rms_norm", "eps", "inf", _set("eps", lambda e: INF), ValueError),
    Bad("rms_norm", "eps", "string", _set("eps", lambda e: "1e-6"), TypeError),
    Bad("rms_norm", "eps", "bool", _set("eps", lambda e: True), TypeError),
    Bad("rms_norm", "eps", "None", _set("eps", lambda e: None), TypeError),
    Bad("rms_norm", "eps", "tensor", _set("eps", lambda e: torch.tensor(1e-6)), TypeError),
    # swiglu
    Bad("swiglu", "up", "mismatched last dim", _set("up", lambda t: t[:, :15]), ValueError),
    Bad("swiglu", "up", "broadcastable shape", _set("up", lambda t: t[:1]), ValueError),
    Bad("swiglu", "up", "extra dim", _set("up", lambda t: t[None]), ValueError),
    Bad("swiglu", "up", "float16 beside float32 gate", _set("up", lambda t: t.half()), TypeError),
    Bad("swiglu", "gate", "bool tensor", _set("gate", lambda t: t > 0), TypeError),
    # swiglu_mlp_front
    Bad("swiglu_mlp_front", "x", "0-d", _set("x", lambda t: t[0, 0]), ValueError),
    Bad("swiglu_mlp_front", "x", "float64 (unsupported)", lambda kw: kw.update({k: v.double() for k, v in kw.items()}), TypeError),
    Bad("swiglu_mlp_front", "w_gate", "1-D", _both("w_gate", "w_up", lambda t: t[:, 0]), ValueError),
    Bad("swiglu_mlp_front", "w_gate", "3-D", _both("w_gate", "w_up", lambda t: t[None]), ValueError),
    Bad("swiglu_mlp_front", "w_gate", "wrong D (an nn.Linear weight untransposed)", _both("w_gate", "w_up", lambda t: t.T), ValueError),
    Bad("swiglu_mlp_front", "w_up", "mismatched F", _set("w_up", lambda t: t[:, :11]), ValueError),
    Bad("swiglu_mlp_front", "w_up", "1-D", _set("w_up", lambda t: t[:, 0]), ValueError),
    Bad("swiglu_mlp_front", "w_up", "float16 beside float32", _set("w_up", lambda t: t.half()), TypeError),
    # softmax
    Bad("softmax", "x", "0-d", _set("x", lambda t: t[0, 0]), ValueError),
    Bad("softmax", "x", "complex", _set("x", lambda t: t.to(torch.complex64)), TypeError),
    Bad("softmax", "dim", "out of range", lambda kw: kw.update(dim=2), IndexError),
    Bad("softmax", "dim", "float", lambda kw: kw.update(dim=1.0), TypeError),
    # flash_attention
    Bad("flash_attention", "q", "3-D", _set("q", lambda t: t[0]), ValueError),
    Bad("flash_attention", "k", "5-D", _both("k", "v", lambda t: t[None]), ValueError),
    Bad("flash_attention", "v", "3-D", _set("v", lambda t: t[0]), ValueError),
    Bad("flash_attention", "v", "fewer keys than k", _set("v", lambda t: t[:, :, :5]), ValueError),
    Bad("flash_attention", "k", "batch unlike q's", _both("k", "v", lambda t: torch.cat([t, t])), ValueError),
    Bad("flash_attention", "k", "head dim unlike q's", _both("k", "v", lambda t: t[..., :8]), ValueError),
    Bad("flash_attention", "k", "heads not dividing q's (GQA)", _both("k", "v", lambda t: torch.cat([t, t[:, :1]], 1)), ValueError),
    Bad("flash_attention", "k", "no KV heads", _both("k", "v", lambda t: t[:, :0]), ValueError),
    Bad("flash_attention", "k", "float16 beside float32 q", _set("k", lambda t: t.half()), TypeError),
    Bad("flash_attention", "causal", "int", _set("causal", lambda c: 1), TypeError),
    Bad("flash_attention", "causal", "None", _set("causal", lambda c: None), TypeError),
    Bad("flash_attention", "causal", "string", _set("causal", lambda c: "yes"), TypeError),
    Bad("flash_attention", "causal", "tensor", _set("causal", lambda c: torch.tensor(True)), TypeError),
    # sm_scale: a non-finite value is a ValueError, as rms_norm's eps.
    Bad("flash_attention", "sm_scale", "NaN", _set("sm_scale", lambda s: NAN), ValueError),
    Bad("flash_attention", "sm_scale", "inf", _set("sm_scale", lambda s: INF), ValueError),
    Bad("flash_attention", "sm_scale", "-inf", _set("sm_scale", lambda s: -INF), ValueError),
    Bad("flash_attention", "sm_scale", "string", _set("sm_scale", lambda s: "0.1"), TypeError),
    Bad("flash_attention", "sm_scale", "bool", _set("sm_scale", lambda s: True), TypeError),
    Bad("flash_attention", "sm_scale", "tensor", _set("sm_scale", lambda s: torch.tensor(0.1)), TypeError),
    Bad("flash_attention", "sm_scale", "negative", _set("sm_scale", lambda s: -1.0), ValueError),
    Bad("flash_attention", "sm_scale", "zero", _set("sm_scale", lambda s: 0.0), ValueError),
    Bad("flash_attention", "causal", "numpy int", _set("causal", lambda c: __import__("numpy").int64(1)), TypeError),
    # axpy
    Bad("axpy", "alpha", "string", _set("alpha", lambda a: "2"), TypeError),
    Bad("axpy", "alpha", "None", _set("alpha", lambda a: None), TypeError),
    Bad("axpy", "alpha", "bool", _set("alpha", lambda a: True), TypeError),
    Bad("axpy", "alpha", "complex", _set("alpha", lambda a: 1j), TypeError),
    Bad("axpy", "alpha", "tensor", _set("alpha", lambda a: torch.tensor(2.0)), TypeError),
    Bad("axpy", "y", "mismatched shape", _set("y", lambda t: t[:, :15]), ValueError),
    Bad("axpy", "y", "broadcastable shape", _set("y", lambda t: t[:1]), ValueError),
    Bad("axpy", "y", "float64 beside float32 x", _set("y", lambda t: t.double()), TypeError),
]

TABLE = _generic_rows() + SPECIFIC


def _id(bad: Bad) -> str:
    return f"{bad.op}-{bad.arg}-{bad.how}"


def _names(message: str, arg: str) -> bool:
    """Whether ``message`` names ``arg`` as a word (``x`` in "x has dtype", not in "expected")."""
    return re.search(rf"(?<![\w.]){re.escape(arg)}(?!\w)", message) is not None


def test_table_breaks_every_argument_of_every_op():
    """Every public op, and every one of its arguments (tensors and scalars), has a row."""
    import inspect

    for op, fn in FUNCTIONS.items():
        params = [p for p in inspect.signature(fn).parameters.values() if p.kind is not p.KEYWORD_ONLY]
        broken = {bad.arg for bad in TABLE if bad.op == op}
        assert broken == {p.name for p in params}, f"{op}: rows for {sorted(broken)}, parameters {[p.name for p in params]}"


@pytest.mark.parametrize("bad", TABLE, ids=_id)
def test_bad_input_raises_naming_the_argument(bad: Bad):
    kwargs = _good(bad.op)
    bad.change(kwargs)
    with tfg.strict(), pytest.raises((TypeError, ValueError, IndexError)) as info:
        FUNCTIONS[bad.op](**kwargs)
    assert type(info.value) is bad.error, f"{type(info.value).__name__} (expected {bad.error.__name__}): {info.value}"
    assert _names(str(info.value), bad.arg), f"the message does not name {bad.arg!r}: {info.value}"
    with pytest.raises(KeyError):  # rejected before routing: nothing recorded
        tfg.last_route(bad.op)


def test_return_lse_must_be_a_bool():
    """``return_lse`` (keyword-only, attention) is checked like ``causal``: a non-bool is refused."""
    q = torch.randn(1, 2, 4, 16)
    with pytest.raises(TypeError, match="return_lse"):
        tfg.flash_attention(q, q, q, return_lse="no")


# ----------------------------------------------------------------------------------------------
# Empty input: not an error; an empty result, route torch/empty (allowed under strict)
# ----------------------------------------------------------------------------------------------


class Empty(NamedTuple):
    op: str
    how: str
    kwargs: Callable[[], dict]
    shape: tuple  # of the result (O for attention)


E = torch.randn
EMPTY = [
    Empty("rms_norm", "no rows", lambda: dict(x=E(0, 16), weight=E(16)), (0, 16)),
    Empty("rms_norm", "empty rows", lambda: dict(x=E(4, 0), weight=E(0)), (4, 0)),
    Empty("rms_norm", "3-D, no rows", lambda: dict(x=E(2, 0, 16), weight=E(16)), (2, 0, 16)),
    Empty("swiglu", "no rows", lambda: dict(gate=E(0, 16), up=E(0, 16)), (0, 16)),
    Empty("swiglu", "empty rows", lambda: dict(gate=E(4, 0), up=E(4, 0)), (4, 0)),
    Empty("swiglu_mlp_front", "no tokens", lambda: dict(x=E(0, 8), w_gate=E(8, 12), w_up=E(8, 12)), (0, 12)),
    Empty("swiglu_mlp_front", "F = 0", lambda: dict(x=E(4, 8), w_gate=E(8, 0), w_up=E(8, 0)), (4, 0)),
    Empty("swiglu_mlp_front", "D = 0 (silu(0) * 0 = 0)", lambda: dict(x=E(4, 0), w_gate=E(0, 12), w_up=E(0, 12)), (4, 12)),
    Empty("softmax", "no rows", lambda: dict(x=E(0, 16)), (0, 16)),
    Empty("softmax", "empty rows", lambda: dict(x=E(4, 0)), (4, 0)),
    Empty("flash_attention", "no queries", lambda: dict(q=E(1, 4, 0, 16), k=E(1, 2, 8, 16), v=E(1, 2, 8, 16)), (1, 4, 0, 16)),
    Empty("flash_attention", "batch 0", lambda: dict(q=E(0, 4, 8, 16), k=E(0, 2, 8, 16), v=E(0, 2, 8, 16)), (0, 4, 8, 16)),
    Empty(
        "flash_attention", "no keys (O = 0, lse = -inf)", lambda: dict(q=E(1, 4, 8, 16), k=E(1, 2, 0, 16), v=E(1, 2, 0, 16)), (1, 4, 8, 16)
    ),  # fmt: skip
    Empty("flash_attention", "no query heads", lambda: dict(q=E(1, 0, 8, 16), k=E(1, 2, 8, 16), v=E(1, 2, 8, 16)), (1, 0, 8, 16)),
    Empty("axpy", "no rows", lambda: dict(alpha=2.0, x=E(0, 4), y=E(0, 4)), (0, 4)),
    Empty("axpy", "1-D empty", lambda: dict(alpha=2.0, x=E(0), y=E(0)), (0,)),
]


@pytest.mark.parametrize("case", EMPTY, ids=lambda c: f"{c.op}-{c.how}")
def test_empty_input_is_a_recorded_route_not_an_error(case: Empty):
    kwargs = case.kwargs()
    if case.op == "flash_attention":
        kwargs["return_lse"] = True
    with tfg.strict():
        out = FUNCTIONS[case.op](**kwargs)
    route = tfg.last_route(case.op)
    assert (route.path, route.reason) == ("torch", "empty")
    if case.op == "flash_attention":
        out, lse = out
        assert lse.shape == case.shape[:3] and lse.dtype == torch.float32
        if kwargs["k"].shape[2] == 0:
            assert (out == 0).all() and (lse == -math.inf).all()
    assert tuple(out.shape) == case.shape and out.dtype == torch.float32
    if case.op == "swiglu_mlp_front" and out.numel():
        assert (out == 0).all()


@pytest.mark.parametrize("odd", ["k", "v"])
def test_a_head_dim_mismatch_blames_the_tensor_that_differs_from_q(odd):
    """q sets the head dim: the tensor whose head dim differs from q's is named first (a mismatch of k
    alone used to be reported as v's shape against k's)."""
    kwargs = _good("flash_attention")
    kwargs[odd] = kwargs[odd][..., :8]
    with pytest.raises(ValueError, match=rf"^{odd} has head dim 8 but q has 16"):
        tfg.flash_attention(**kwargs)


def test_numpy_bools_are_bools():
    """``causal=np.bool_(True)`` (what ``array.any()`` gives) is a bool: accepted, with the same answer
    as ``True``; a wrong type is named with its module (``numpy.int64``, not an ambiguous ``int64``)."""
    import numpy as np

    kwargs = _good("flash_attention")
    with tfg.strict():
        expected = tfg.flash_attention(**{**kwargs, "causal": True})
        got = tfg.flash_attention(**{**kwargs, "causal": np.bool_(True)}, return_lse=np.bool_(False))
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    with pytest.raises(TypeError, match="causal must be a bool, got numpy.int64"):
        tfg.flash_attention(**{**kwargs, "causal": np.int64(1)})


@pytest.mark.parametrize("dim", [0, 1, -2, 2, -1])
def test_softmax_takes_a_dim_as_torch_does(dim):
    x = torch.randn(3, 5, 7)
    with tfg.strict():
        got = tfg.softmax(x, dim=dim)
    torch.testing.assert_close(got.double(), torch.softmax(x.double(), dim), rtol=1e-6, atol=1e-7)
    assert got.is_contiguous() and tfg.last_path("softmax") in ("triton", "interpreter")


@pytest.mark.parametrize("dim, error", [(3, IndexError), (-4, IndexError), (1.0, TypeError), ("1", TypeError), (True, TypeError)])
def test_softmax_refuses_a_bad_dim_naming_it(dim, error):
    with pytest.raises(error, match="dim"):
        tfg.softmax(torch.randn(3, 5, 7), dim=dim)
