r"""Exercise 9a (chapter 9): rotary position embeddings applied to queries and keys in one kernel.

For a head vector :math:`x = (x_1, x_2)` of dimension :math:`D` (two halves of :math:`D/2`) at
position :math:`p`, with the angles :math:`\theta_i = p\,\beta^{-2i/D}` (:math:`\beta` is the
model's ``rope_theta``) and the tables :math:`\cos = (\cos\theta, \cos\theta)`,
:math:`\sin = (\sin\theta, \sin\theta)` (Hugging Face's layout: the frequencies repeated twice),

.. math::

    \operatorname{rope}(x) = x \odot \cos + \operatorname{rotate\_half}(x) \odot \sin,
    \qquad \operatorname{rotate\_half}(x_1, x_2) = (-x_2, x_1),

that is :math:`y_1 = x_1 \cos\theta - x_2 \sin\theta` and :math:`y_2 = x_2 \cos\theta + x_1 \sin\theta`:
component :math:`i` of the first half and component :math:`i` of the second half are rotated as
one pair by :math:`\theta_i` (not neighbours :math:`2i, 2i+1`, which is GPT-J's convention).

The kernel rotates ``q [B, Hq, N, D]`` and ``k [B, Hk, N, D]`` (grouped-query attention:
``Hk`` may be smaller than ``Hq``) in one launch. The tables hold every position of the
sequence so far (``[P, D]``, as a serving engine precomputes them once); the ``N`` rows of ``q``
and ``k`` sit at positions ``offset … offset + N − 1`` (``offset > 0`` in decode and in chunked
prefill). The reference is float64 PyTorch, independent of :mod:`tritonforge.models`, and the
tests check it against :func:`tritonforge.models.llama.apply_rotary`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from tritonforge._triton import triton
from tritonforge.exercise.core import (
    Case,
    Guarded,
    Report,
    Trial,
    Verdict,
    changed,
    check,
    compare_tensors,
    dtype_name,
    element_map,
    guarded,
    kernel_device,
    largest_difference,
    matches,
    quiet,
    require_kernel,
    run_trial,
    snapshot,
    synchronize,
    with_picture,
)
from tritonforge.reference import TOLERANCE

ROPE_BLOCK_N = 16
"""Positions per program in exercise 9a, fixed by the launcher whatever ``N`` is."""

ROPE_HEAD_DIMS = (16, 32, 64, 128)
"""The head dimensions the launcher accepts: ``D/2`` must be a power of two (``tl.arange``)."""

ROPE_FILL = 5.0
"""What fills the input buffers around ``q`` and ``k`` (finite, unlike the outputs' NaN): a kernel
without a store mask writes finite values past the last position, and the check finds them there."""


# ----------------------------------------------------------------------------------------------
# Tables and float64 references
# ----------------------------------------------------------------------------------------------


def rope_tables(positions: int, head_dim: int, *, theta: float = 10000.0, dtype: torch.dtype = torch.float32):
    """``cos, sin [positions, head_dim]`` for positions ``0 … positions − 1`` in Hugging Face's
    layout (``angles = p·theta^(−2i/D)`` for ``i < D/2``, repeated twice), computed in float64
    and rounded to ``dtype``."""
    half = head_dim // 2
    inv_freq = theta ** (-torch.arange(half, dtype=torch.float64) / half)
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _rows(table: torch.Tensor, offset: int, n: int) -> torch.Tensor:
    return table.detach().double().cpu()[offset : offset + n]


def rope_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """``x [B, H, N, D]`` rotated in float64 (rotate_half form) by the table rows
    ``offset … offset + N − 1``: ``x·cos + rotate_half(x)·sin``."""
    x = x.detach().double().cpu()
    c, s = _rows(cos, offset, x.shape[2]), _rows(sin, offset, x.shape[2])
    x1, x2 = x.chunk(2, dim=-1)
    return x * c + torch.cat([-x2, x1], dim=-1) * s


def rope_interleaved_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """GPT-J's convention, a known wrong answer here: neighbours ``(x[2i], x[2i+1])`` rotated as a
    pair by the angle ``θ_i`` (the tables' first half)."""
    x = x.detach().double().cpu()
    half = x.shape[-1] // 2
    c, s = _rows(cos, offset, x.shape[2])[:, :half], _rows(sin, offset, x.shape[2])[:, :half]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * c - odd * s
    out[..., 1::2] = odd * c + even * s
    return out


# ----------------------------------------------------------------------------------------------
# The launcher the notebook hands over
# ----------------------------------------------------------------------------------------------


def _require_heads(name: str, t: torch.Tensor) -> None:
    if t.dim() != 4 or t.stride(3) != 1:
        raise ValueError(f"{name} must be [B, H, N, D] with unit stride along D (any other strides)")


def launch_rope(
    kernel,
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    offset: int = 0,
    q_out: Optional[torch.Tensor] = None,
    k_out: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The given launcher of exercise 9a: ``q [B, Hq, N, D]``, ``k [B, Hk, N, D]`` (any strides,
    unit stride along ``D``), ``cos, sin [P, D]`` contiguous with ``P ≥ offset + N``. Grid
    ``(cdiv(N, 16), B·(Hq + Hk))``: axis 1 is ``b·(Hq + Hk) + h``, a query head for ``h < Hq``,
    key head ``h − Hq`` otherwise. The kernel gets the six pointers, three strides (batch, head,
    position) of each of ``q, k, q_out, k_out``, ``Hq, Hk, N, offset`` and ``HALF = D/2,
    BLOCK_N = 16``. Returns ``(q_out, k_out)`` (new tensors in q's and k's dtypes unless given)."""
    require_kernel(kernel)
    _require_heads("q", q)
    _require_heads("k", k)
    B, Hq, N, D = q.shape
    Hk = k.shape[1]
    if (k.shape[0], k.shape[2], k.shape[3]) != (B, N, D):
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must share B, N and D")
    if D not in ROPE_HEAD_DIMS:
        raise ValueError(f"head dimension {D}: the launcher takes {ROPE_HEAD_DIMS} (D/2 must be a power of two)")
    offset = int(offset)
    for name, t in (("cos", cos), ("sin", sin)):
        if t.dim() != 2 or t.shape[1] != D or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous [P, {D}] table")
        if offset < 0 or offset + N > t.shape[0]:
            raise ValueError(f"{name} holds {t.shape[0]} positions; offset {offset} + N {N} do not fit")
    q_out = torch.empty_like(q) if q_out is None else q_out
    k_out = torch.empty_like(k) if k_out is None else k_out
    _require_heads("q_out", q_out)
    _require_heads("k_out", k_out)
    grid = (triton.cdiv(N, ROPE_BLOCK_N), B * (Hq + Hk))
    kernel[grid](
        q, k, cos, sin, q_out, k_out,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        q_out.stride(0), q_out.stride(1), q_out.stride(2),
        k_out.stride(0), k_out.stride(1), k_out.stride(2),
        Hq, Hk, N, offset,
        HALF=D // 2, BLOCK_N=ROPE_BLOCK_N,
    )  # fmt: skip
    return q_out, k_out


# ----------------------------------------------------------------------------------------------
# Cases, runs and verdicts
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _RopeSpec:
    """One case: ``B`` sequences, ``Hq`` query and ``Hk`` key heads, ``N`` positions from ``offset``."""

    B: int
    Hq: int
    Hk: int
    N: int
    D: int = 32
    offset: int = 0
    dtype: torch.dtype = torch.float32
    q_layout: str = "bhnd"  # or "bnhd": q (and q_out) in a [B, N, H, D] tensor's storage
    theta: float = 10000.0


PAD = ROPE_BLOCK_N + 2
"""Rows past each head's last position in every guarded tensor: a store without a mask lands there."""


def _heads_guard(x: torch.Tensor, layout: str, *, fill: float, min_size: int = 0) -> Guarded:
    """``x [B, H, N, D]`` in a buffer of ``fill`` with :data:`PAD` rows past every head's last
    one. ``"bhnd"``: each head's rows contiguous; ``"bnhd"``: the storage of ``[B, N, H, D]``.
    ``min_size``: at least that many elements (k's buffers are made as large as q's, so a kernel
    that walks k with q's strides or head count stays inside them)."""
    B, H, N, D = x.shape
    rows = N + PAD
    strides = (rows * H * D, D, H * D, 1) if layout == "bnhd" else (H * rows * D, rows * D, D, 1)
    return guarded(x, strides, margin=(0, 0, PAD, 0), device=kernel_device(), fill=fill, min_size=min_size)


def _table_guard(table: torch.Tensor) -> Guarded:
    """A contiguous table with NaN rows past its end (a tail read shows as NaN)."""
    P, D = table.shape
    return guarded(table, (D, 1), margin=(ROPE_BLOCK_N, 0), device=kernel_device())


def _rope_inputs(spec: _RopeSpec, gen: torch.Generator) -> dict:
    q = torch.randn(spec.B, spec.Hq, spec.N, spec.D, generator=gen)
    k = torch.randn(spec.B, spec.Hk, spec.N, spec.D, generator=gen)
    positions = spec.offset + spec.N + ROPE_BLOCK_N  # the cache's table reaches past the last position
    cos, sin = rope_tables(positions, spec.D, theta=spec.theta, dtype=spec.dtype)
    q_guard = _heads_guard(q.to(spec.dtype), spec.q_layout, fill=ROPE_FILL)
    return {
        "q": q_guard,
        "k": _heads_guard(k.to(spec.dtype), "bhnd", fill=ROPE_FILL, min_size=q_guard.buffer.numel()),
        "cos": _table_guard(cos),
        "sin": _table_guard(sin),
        "offset": spec.offset,
        "q_layout": spec.q_layout,
    }


def _rope_run(fn, inp: dict) -> dict:
    q, k = inp["q"], inp["k"]
    q_out = _heads_guard(torch.full(tuple(q.view.shape), float("nan"), dtype=q.view.dtype), inp["q_layout"], fill=float("nan"))
    k_nan = torch.full(tuple(k.view.shape), float("nan"), dtype=k.view.dtype)
    k_out = _heads_guard(k_nan, "bhnd", fill=float("nan"), min_size=q_out.buffer.numel())
    before = snapshot(q, k, inp["cos"], inp["sin"])
    quiet(launch_rope, fn, q.view, k.view, inp["cos"].view, inp["sin"].view, inp["offset"], q_out.view, k_out.view)
    synchronize(q_out.view)
    changed_inputs = changed((q, k, inp["cos"], inp["sin"]), before)
    return {
        "q": {"out": q_out.view, "outside": q_out.outside_written(), "inputs_changed": changed_inputs, "guard": q_out},
        "k": {"out": k_out.view, "outside": k_out.outside_written(), "inputs_changed": False, "guard": k_out},
    }


def _rope_expected(inp: dict) -> dict:
    cos, sin, offset = inp["cos"].view, inp["sin"].view, inp["offset"]
    return {"q": rope_ref(inp["q"].view, cos, sin, offset), "k": rope_ref(inp["k"].view, cos, sin, offset)}


ROPE_HINT = (
    "y1 = x1·cos − x2·sin and y2 = x2·cos + x1·sin, where x1, x2 are the first and second halves of D "
    "and cos, sin the table row offset + n; every load and store masked with n < N"
)


def _rope_hint(got: dict, inp: dict, rtol: float) -> str:
    """Name a known mistake if one of the outputs matches it, else the formula."""
    cos, sin, offset = inp["cos"].view, inp["sin"].view, inp["offset"]
    x = {"q": inp["q"].view, "k": inp["k"].view}
    out = {name: got[name]["out"] for name in x}
    right = {name: matches(out[name], rope_ref(x[name], cos, sin, offset), rtol) for name in x}
    if right["q"] != right["k"]:
        ok, wrong = ("q", "k") if right["q"] else ("k", "q")
        return (
            f"{ok} is right and {wrong} is not: program_id(1) = b·(Hq + Hk) + h covers Hq query heads, then Hk key "
            f"heads; each tensor has its own strides (Hq ≠ Hk in grouped-query attention)"
        )
    candidates = [
        (rope_interleaved_ref, "this is GPT-J's interleaved convention (pairs 2i, 2i+1): here x_i pairs with x_(i+D/2)"),
        (lambda t, c, s, o: rope_ref(t, c, -s, o), "the rotation goes the wrong way: y1 = x1·cos − x2·sin, y2 = x2·cos + x1·sin"),
        (lambda t, c, s, o: rope_ref(t, s, c, o), "cos and sin are swapped: x·cos + rotate_half(x)·sin"),
        (lambda t, c, s, o: rope_ref(t, c, s, 0), "the table rows start at 0: position n of this call is offset + n"),
        (lambda t, c, s, o: t.detach().double().cpu(), "the output is the input: nothing was rotated"),
    ]
    for candidate, text in candidates:
        if all(matches(out[name], candidate(x[name], cos, sin, offset), rtol) for name in x):
            return text
    return ROPE_HINT


def position_map(q_out: torch.Tensor, q_expected: torch.Tensor, k_out: torch.Tensor, k_expected: torch.Tensor, *, rtol: float) -> str:
    """A picture of both outputs: one line per (batch, head), the query heads first, then the key
    heads; one character per position (``·`` every element right, ``x`` some wrong, ``?`` some NaN)."""
    lines = []
    for out, expected in ((q_out, q_expected), (k_out, k_expected)):
        o, e = out.detach().double().cpu(), expected.double().cpu()
        tol = rtol * max(1.0, float(e.abs().max()))
        nan = o.isnan().any(dim=-1)
        wrong = ((o - e).abs() > tol).any(dim=-1)
        lines.append(torch.where(nan, float("nan"), torch.where(wrong, 1.0, 0.0)).reshape(-1, o.shape[2]))
    cells = torch.cat(lines)
    Hq = q_out.shape[0] * q_out.shape[1]
    picture = element_map(cells, torch.zeros_like(cells), rtol=0.25, limit=(24, 64), name="positions by (batch, head)")
    head, *rest = picture.splitlines()
    return "\n".join([f"{head} q: rows 1–{Hq}, k: the rest", *rest])


def _rope_compare(got: dict, expected: dict, inp: dict) -> Verdict:
    rtol = TOLERANCE[inp["q"].view.dtype]
    verdicts = {name: compare_tensors(got[name], expected[name], rtol=rtol) for name in ("q", "k")}
    errors = [v.error for v in verdicts.values() if v.error is not None]
    error = max(errors) if errors else None
    if all(v.passed for v in verdicts.values()):
        return Verdict(True, error, "")
    detail = "; ".join(f"{name}_out: {v.detail}" for name, v in verdicts.items() if not v.passed)
    written = [name for name in ("q", "k") if not bool(got[name]["out"].detach().isnan().all())]
    if written:
        detail += f". {_rope_hint(got, inp, rtol)}"
    verdict = Verdict(False, error, detail)
    return with_picture(
        verdict,
        lambda: position_map(got["q"]["out"], expected["q"], got["k"]["out"], expected["k"], rtol=rtol),
        got["q"]["guard"],
        got["k"]["guard"],
    )


def _rope_case(name: str, spec: _RopeSpec) -> Case:
    return Case(name, lambda gen: _rope_inputs(spec, gen), _rope_run, _rope_expected, _rope_compare, dtype=spec.dtype)


def rope_cases() -> list[Case]:
    return [
        _rope_case("float32 B=1 Hq=Hk=2, N=32, D=32: whole blocks", _RopeSpec(1, 2, 2, 32)),
        _rope_case("N=37 (a ragged block), B=2 Hq=Hk=3, D=64", _RopeSpec(2, 3, 3, 37, 64)),
        _rope_case("GQA: Hq=8 over Hk=2, B=2, N=20, D=16", _RopeSpec(2, 8, 2, 20, 16)),
        _rope_case("MQA: Hq=4, Hk=1, B=3, N=5, D=32", _RopeSpec(3, 4, 1, 5)),
        _rope_case("decode: N=1 at position 41, B=2 Hq=4 Hk=2, D=64", _RopeSpec(2, 4, 2, 1, 64, offset=41)),
        _rope_case("chunked prefill: N=19 from position 30, Hq=Hk=2", _RopeSpec(1, 2, 2, 19, offset=30)),
        _rope_case("q in [B, N, H, D] storage, B=2 Hq=4 Hk=2, N=24", _RopeSpec(2, 4, 2, 24, q_layout="bnhd")),
        _rope_case("positions 8000-8016, theta 500000 (Llama 3), D=64", _RopeSpec(1, 2, 1, 17, 64, offset=8000, theta=500000.0)),
        _rope_case("float16, B=2 Hq=4 Hk=2, N=33 from position 7", _RopeSpec(2, 4, 2, 33, offset=7, dtype=torch.float16)),
        _rope_case("bfloat16, B=2 Hq=2 Hk=1, N=21 from position 3", _RopeSpec(2, 2, 1, 21, offset=3, dtype=torch.bfloat16)),
    ]


def check_rope(kernel, *, seed: Optional[int] = None) -> Report:
    """Exercise 9a: the learner's ``rope_kernel`` against rotary embeddings in float64 (rotate_half
    form) on q and k together: ragged blocks, D = 16/32/64, GQA and MQA head counts, positions
    from an offset (decode, chunked prefill, 8000), q in a [B, N, H, D] layout, float16, bfloat16."""
    return check(kernel, rope_cases(), title="rope_kernel", seed=seed)


def try_rope(kernel, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, offset: int = 0) -> Trial:
    """Exercise 9a's "try it": the kernel on copies of ``q, k [B, H, N, D]`` and of the tables in
    guarded buffers, the outputs poisoned with NaN; shows the largest difference of each output
    from the float64 answer, a picture of which positions are right, and the verdict."""
    q_guard = _heads_guard(q.detach().cpu(), "bhnd", fill=ROPE_FILL)
    inputs = {
        "q": q_guard,
        "k": _heads_guard(k.detach().cpu(), "bhnd", fill=ROPE_FILL, min_size=q_guard.buffer.numel()),
        "cos": _table_guard(cos.detach().cpu().contiguous()),
        "sin": _table_guard(sin.detach().cpu().contiguous()),
        "offset": int(offset),
        "q_layout": "bhnd",
    }
    case = Case("try", lambda gen: inputs, _rope_run, _rope_expected, _rope_compare)
    rtol = TOLERANCE[q.dtype]

    def show(got, expected):
        return [
            ("max |q_out − reference|:", largest_difference(got["q"]["out"], expected["q"])),
            ("max |k_out − reference|:", largest_difference(got["k"]["out"], expected["k"])),
            ("picture:", position_map(got["q"]["out"], expected["q"], got["k"]["out"], expected["k"], rtol=rtol)),
        ]

    B, Hq, N, D = q.shape
    title = f"rope_kernel, B={B} Hq={Hq} Hk={k.shape[1]} N={N} D={D} from {offset}, {dtype_name(q.dtype)}"
    return run_trial(kernel, case, inputs, title=title, show=show)
