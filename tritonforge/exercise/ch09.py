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

Exercise 9b: the new keys and values of a batch written into a static cache ``[B, Hk, P, D]``,
row ``n < lengths[b]`` of sequence ``b`` at cache row ``positions[b] + n`` (per-sequence positions
and lengths, as a serving engine's batch has), in one launch; the reference is checked against
:meth:`tritonforge.models.llama.KVCache.append`.

Exercise 9c: both at once, from a fused projection ``qkv [B, N, (Hq + 2·Hk)·D]``: the query heads
rotated into ``q_out``, the key heads rotated and the value heads copied into the caches, table
row and cache row ``positions[b] + n`` for each sequence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Optional

import torch

from tritonforge._triton import triton
from tritonforge.exercise.core import (
    Case,
    CaseTemplate,
    Guarded,
    Trial,
    Verdict,
    compare_tensors,
    dtype_name,
    guarded,
    guarded_heads,
    head_rows_map,
    kernel_device,
    largest_difference,
    matches,
    require_heads,
    require_kernel,
    run_guarded,
    with_picture,
)
from tritonforge.reference import TOLERANCE

__all__ = [
    "KV_APPEND_BLOCK_N",
    "ROPE_BLOCK_N",
    "kv_append_cases",
    "kv_append_ref",
    "launch_kv_append",
    "launch_qkv_rope_append",
    "launch_rope",
    "qkv_rope_append_cases",
    "qkv_rope_append_ref",
    "rope_cases",
    "rope_ref",
    "rope_tables",
    "try_kv_append",
    "try_qkv_rope_append",
    "try_rope",
]

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
    require_heads(q=q, k=k)
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
    require_heads(q_out=q_out, k_out=k_out)
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
    one (:func:`~tritonforge.exercise.core.guarded_heads`). ``min_size``: at least that many
    elements (k's buffers are made as large as q's, so a kernel that walks k with q's strides or
    head count stays inside them)."""
    return guarded_heads(x, layout, pad=PAD, fill=fill, min_size=min_size)


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
    inputs = (q, k, inp["cos"], inp["sin"])
    _, inputs_changed = run_guarded(launch_rope, fn, inputs, (q_out, k_out), inp["offset"])
    return {
        "q": {"out": q_out.view, "outside": q_out.outside_written(), "inputs_changed": inputs_changed, "guard": q_out},
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
    picture = head_rows_map([(q_out, q_expected), (k_out, k_expected)], rtol=rtol, name="positions by (batch, head)")
    head, *rest = picture.splitlines()
    return "\n".join([f"{head} q: rows 1–{q_out.shape[0] * q_out.shape[1]}, k: the rest", *rest])


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


ROPE = CaseTemplate(_rope_run, _rope_expected, _rope_compare)


def _rope_case(name: str, spec: _RopeSpec) -> Case:
    return ROPE.case(name, lambda gen: _rope_inputs(spec, gen), dtype=spec.dtype)


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
    rtol = TOLERANCE[q.dtype]

    def show(got, expected):
        return [
            ("max |q_out − reference|:", largest_difference(got["q"]["out"], expected["q"])),
            ("max |k_out − reference|:", largest_difference(got["k"]["out"], expected["k"])),
            ("picture:", position_map(got["q"]["out"], expected["q"], got["k"]["out"], expected["k"], rtol=rtol)),
        ]

    B, Hq, N, D = q.shape
    title = f"rope_kernel, B={B} Hq={Hq} Hk={k.shape[1]} N={N} D={D} from {offset}, {dtype_name(q.dtype)}"
    return ROPE.trial(kernel, inputs, title=title, show=show)


# ==============================================================================================
# Exercise 9b: append new keys and values to a static KV cache, per sequence
# ==============================================================================================
#
# A static cache holds ``[B, Hk, P, D]`` keys and values for every sequence of a batch, allocated
# once for P positions. Sequence b has ``positions[b]`` rows filled; a forward call brings N new
# rows per sequence (``k_new, v_new [B, Hk, N, D]``), of which the first ``lengths[b]`` are real and
# the rest padding (a batch of prompts of different lengths, padded on the right; in decode
# N = 1 and a finished sequence has length 0). The kernel writes row n < lengths[b] of sequence b
# at cache row ``positions[b] + n``, and nothing else.

KV_APPEND_BLOCK_N = 16
"""New rows per program in exercises 9b and 9c, fixed by the launchers whatever ``N`` is."""

KV_FILL = 5.0
"""What fills the new rows' buffers around ``k_new`` and ``v_new``: finite, so a store without a
mask writes numbers the check finds where the cache must not change."""

KV_PAD = KV_APPEND_BLOCK_N + 2
"""Rows past each head's last row in every guarded tensor: an unmasked store stays inside them."""


def _require_rows(name: str, t: torch.Tensor, B: int, device: torch.device) -> None:
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or tuple(t.shape) != (B,) or t.device != device:
        raise ValueError(f"{name} must be an int32 tensor of shape ({B},) on {device}")


def kv_append_ref(
    k_cache: torch.Tensor, v_cache: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, positions: torch.Tensor, lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The caches after the append, in float64 (new tensors): row ``n < lengths[b]`` of sequence
    ``b`` of ``k_new, v_new [B, Hk, N, D]`` at row ``positions[b] + n`` of ``k_cache, v_cache
    [B, Hk, P, D]``; every other row as it was."""
    k_out, v_out = k_cache.detach().double().cpu().clone(), v_cache.detach().double().cpu().clone()
    k_new, v_new = k_new.detach().double().cpu(), v_new.detach().double().cpu()
    for b, (start, count) in enumerate(zip(positions.tolist(), lengths.tolist())):
        k_out[b, :, start : start + count] = k_new[b, :, :count]
        v_out[b, :, start : start + count] = v_new[b, :, :count]
    return k_out, v_out


def launch_kv_append(
    kernel,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    positions: torch.Tensor,
    lengths: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The given launcher of exercise 9b: ``k_new, v_new [B, Hk, N, D]`` and ``k_cache, v_cache
    [B, Hk, P, D]`` (any strides, unit stride along ``D``, one dtype), ``positions, lengths [B]``
    int32 on their device with ``lengths[b] ≤ N`` and ``positions[b] + lengths[b] ≤ P``. Grid
    ``(cdiv(N, 16), B·Hk)``: axis 1 is ``b·Hk + h``. The kernel gets the six pointers, three
    strides (batch, head, row) of each of the four tensors, ``Hk, N`` and ``D, BLOCK_N = 16`` as
    constants. Writes into the caches in place and returns them."""
    require_kernel(kernel)
    require_heads(k_new=k_new, v_new=v_new, k_cache=k_cache, v_cache=v_cache)
    B, Hk, N, D = k_new.shape
    P = k_cache.shape[2]
    if tuple(v_new.shape) != (B, Hk, N, D):
        raise ValueError(f"k_new {tuple(k_new.shape)} and v_new {tuple(v_new.shape)} must have one shape")
    if tuple(k_cache.shape) != (B, Hk, P, D) or tuple(v_cache.shape) != (B, Hk, P, D):
        raise ValueError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} must be [B={B}, Hk={Hk}, P, D={D}]")
    if len({k_new.dtype, v_new.dtype, k_cache.dtype, v_cache.dtype}) != 1:
        raise ValueError("k_new, v_new, k_cache and v_cache must have one dtype")
    if D not in ROPE_HEAD_DIMS:
        raise ValueError(f"head dimension {D}: the launcher takes {ROPE_HEAD_DIMS} (a power of two, for tl.arange)")
    for name, t in (("positions", positions), ("lengths", lengths)):
        _require_rows(name, t, B, k_new.device)
    starts, counts = positions.tolist(), lengths.tolist()
    for b, (start, count) in enumerate(zip(starts, counts)):
        if not (0 <= count <= N) or start < 0 or start + count > P:
            raise ValueError(f"sequence {b}: {count} new rows at position {start} do not fit N = {N} new rows and a cache of P = {P}")
    grid = (triton.cdiv(N, KV_APPEND_BLOCK_N), B * Hk)
    kernel[grid](
        k_new, v_new, k_cache, v_cache, positions, lengths,
        k_new.stride(0), k_new.stride(1), k_new.stride(2),
        v_new.stride(0), v_new.stride(1), v_new.stride(2),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        Hk, N,
        D=D, BLOCK_N=KV_APPEND_BLOCK_N,
    )  # fmt: skip
    return k_cache, v_cache


@dataclasses.dataclass(frozen=True)
class _AppendSpec:
    """One case of 9b: ``B`` sequences of ``Hk`` heads, ``N`` new rows each, a cache of ``P``."""

    Hk: int
    N: int
    P: int
    positions: tuple[int, ...]
    lengths: tuple[int, ...]
    D: int = 32
    dtype: torch.dtype = torch.float32
    k_layout: str = "bhnd"  # or "bnhd": k_new in a [B, N, H, D] projection's storage
    v_layout: str = "bhnd"

    @property
    def B(self) -> int:
        return len(self.positions)


def _cache_guard(values: torch.Tensor) -> Guarded:
    """A cache ``[B, Hk, P, D]`` holding ``values`` (old rows), NaN for :data:`KV_PAD` rows past
    every head's last one: a write past P lands there."""
    return guarded_heads(values, "bhnd", pad=KV_PAD)


def _index_rows(values, device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device=device)


def _append_inputs(spec: _AppendSpec, gen: torch.Generator) -> dict:
    B, Hk, N, P, D = spec.B, spec.Hk, spec.N, spec.P, spec.D
    k_new, v_new = (torch.randn(B, Hk, N, D, generator=gen).to(spec.dtype) for _ in range(2))
    k_old, v_old = (torch.randn(B, Hk, P, D, generator=gen).to(spec.dtype) for _ in range(2))
    device = kernel_device()
    k_guard = guarded_heads(k_new, spec.k_layout, pad=KV_PAD, fill=KV_FILL)
    return {
        "k_new": k_guard,
        "v_new": guarded_heads(v_new, spec.v_layout, pad=KV_PAD, fill=KV_FILL, min_size=k_guard.buffer.numel()),
        "k_old": k_old,
        "v_old": v_old,
        "positions": _index_rows(spec.positions, device),
        "lengths": _index_rows(spec.lengths, device),
    }


def _append_run(fn, inp: dict) -> dict:
    k_cache, v_cache = _cache_guard(inp["k_old"]), _cache_guard(inp["v_old"])
    positions, lengths = inp["positions"], inp["lengths"]
    index_before = (positions.clone(), lengths.clone())
    _, changed = run_guarded(launch_kv_append, fn, (inp["k_new"], inp["v_new"]), (k_cache, v_cache), positions, lengths)
    changed = changed or not (torch.equal(positions, index_before[0]) and torch.equal(lengths, index_before[1]))
    return {
        "k": {"out": k_cache.view, "outside": k_cache.outside_written(), "inputs_changed": changed, "guard": k_cache},
        "v": {"out": v_cache.view, "outside": v_cache.outside_written(), "inputs_changed": False, "guard": v_cache},
    }


def _append_expected(inp: dict) -> dict:
    k, v = kv_append_ref(inp["k_old"], inp["v_old"], inp["k_new"].view, inp["v_new"].view, inp["positions"], inp["lengths"])
    return {"k": k, "v": v}


KV_APPEND_HINT = (
    "program (i, b·Hk + h) copies rows n = 16·i … 16·i + 15 of head h of sequence b, those with n < lengths[b], "
    "from k_new and v_new (their strides) to cache row positions[b] + n (the caches' strides)"
)


def _append_hint(got: dict, inp: dict, rtol: float) -> str:
    """Name a known mistake if both caches match it, else say what each program does."""
    k_old, v_old, k_new, v_new = inp["k_old"], inp["v_old"], inp["k_new"].view, inp["v_new"].view
    positions, lengths = inp["positions"], inp["lengths"]
    N = k_new.shape[2]
    out = (got["k"]["out"], got["v"]["out"])
    candidates = [
        (
            (k_old, v_old, k_new, v_new, torch.zeros_like(positions), lengths),
            "the new rows went to cache rows 0, 1, …: row n of sequence b goes to positions[b] + n",
        ),
        (
            (k_old, v_old, k_new, v_new, positions[:1].expand_as(positions), lengths),
            "every sequence was written at sequence 0's position: load positions[b] for the program's own b",
        ),
        (
            (k_old, v_old, k_new, v_new, positions, torch.full_like(lengths, N)),
            "the padding rows were written too: only rows n < lengths[b] are new (a finished sequence has length 0)",
        ),
        (
            (k_old, v_old, k_new, v_new, positions + 1, lengths),
            "the first new row went to positions[b] + 1: rows 0 … positions[b] − 1 are filled, so the next is row positions[b]",
        ),
        ((k_old, v_old, v_new, k_new, positions, lengths), "k and v are swapped: k_new goes to k_cache, v_new to v_cache"),
        ((k_old, v_old, k_new, v_new, positions, torch.zeros_like(lengths)), "the caches are unchanged: nothing was written"),
    ]
    for args, text in candidates:
        try:
            want = kv_append_ref(*args)
        except RuntimeError:  # a candidate that does not fit this case's cache
            continue
        if all(matches(o, w, rtol) for o, w in zip(out, want)):
            return text
    return KV_APPEND_HINT


def cache_map(k_cache: torch.Tensor, k_expected: torch.Tensor, v_cache: torch.Tensor, v_expected: torch.Tensor, *, rtol: float) -> str:
    """A picture of both caches: one line per (batch, head), k's first, then v's; one character
    per cache row (``·`` right, ``x`` wrong, ``?`` NaN)."""
    picture = head_rows_map([(k_cache, k_expected), (v_cache, v_expected)], rtol=rtol, name="cache rows by (batch, head)")
    head, *rest = picture.splitlines()
    return "\n".join([f"{head} k_cache: rows 1–{k_cache.shape[0] * k_cache.shape[1]}, v_cache: the rest", *rest])


def _two_cache_compare(got: dict, expected: dict, rtol: float, hint: Callable[[], str]) -> Verdict:
    verdicts = {name: compare_tensors(got[name], expected[name], rtol=rtol) for name in ("k", "v")}
    errors = [v.error for v in verdicts.values() if v.error is not None and v.error == v.error]
    error = max(errors) if errors else None
    if all(v.passed for v in verdicts.values()):
        return Verdict(True, error, "")
    detail = "; ".join(f"{name}_cache: {v.detail}" for name, v in verdicts.items() if not v.passed)
    verdict = Verdict(False, error, f"{detail}. {hint()}")
    return dataclasses.replace(verdict, picture=cache_map(got["k"]["out"], expected["k"], got["v"]["out"], expected["v"], rtol=rtol))


def _append_compare(got: dict, expected: dict, inp: dict) -> Verdict:
    rtol = TOLERANCE[inp["k_old"].dtype]
    return _two_cache_compare(got, expected, rtol, lambda: _append_hint(got, inp, rtol))


KV_APPEND = CaseTemplate(_append_run, _append_expected, _append_compare)


def _append_case(name: str, spec: _AppendSpec) -> Case:
    return KV_APPEND.case(name, lambda gen: _append_inputs(spec, gen), dtype=spec.dtype)


def kv_append_cases() -> list[Case]:
    return [
        _append_case("prefill: B=1 Hk=2, 16 rows at 0, P=40", _AppendSpec(2, 16, 40, (0,), (16,))),
        _append_case("ragged batch: 21, 13 and 5 rows at 4, 7 and 30; D=64", _AppendSpec(2, 21, 64, (4, 7, 30), (21, 13, 5), 64)),
        _append_case("decode: B=4, one row each at 3, 17, 0, 40, one sequence finished", _AppendSpec(2, 1, 48, (3, 17, 0, 40), (1, 1, 0, 1))),
        _append_case("MQA: Hk=1, N=37 (a ragged block), 37 and 20 rows at 2 and 9", _AppendSpec(1, 37, 50, (2, 9), (37, 20), 16)),
        _append_case("k_new in [B, N, H, D] storage, Hk=4, 24 and 17 rows", _AppendSpec(4, 24, 40, (5, 11), (24, 17), k_layout="bnhd")),
        _append_case("the cache's last rows: 19 rows to P=45, 3 rows to P", _AppendSpec(2, 19, 45, (26, 42), (19, 3), v_layout="bnhd")),
        _append_case("float16, B=2 Hk=2, N=19, D=64", _AppendSpec(2, 19, 33, (14, 0), (19, 11), 64, dtype=torch.float16)),
        _append_case("bfloat16, B=2 Hk=1, N=9, D=128", _AppendSpec(1, 9, 20, (11, 4), (9, 6), 128, dtype=torch.bfloat16)),
    ]


def try_kv_append(kernel, k_new, v_new, positions, lengths, k_cache, v_cache) -> Trial:
    """Exercise 9b's "try it": the kernel on copies of ``k_new, v_new`` and of the caches in
    guarded buffers (the caches' contents kept as their old rows); shows the largest difference of
    each cache from the right answer, a picture of which cache rows are right, and the verdict."""
    k_guard = guarded_heads(k_new.detach().cpu(), "bhnd", pad=KV_PAD, fill=KV_FILL)
    inputs = {
        "k_new": k_guard,
        "v_new": guarded_heads(v_new.detach().cpu(), "bhnd", pad=KV_PAD, fill=KV_FILL, min_size=k_guard.buffer.numel()),
        "k_old": k_cache.detach().cpu(),
        "v_old": v_cache.detach().cpu(),
        "positions": positions.detach().to(device=kernel_device(), dtype=torch.int32),
        "lengths": lengths.detach().to(device=kernel_device(), dtype=torch.int32),
    }
    rtol = TOLERANCE[k_new.dtype]

    def show(got, expected):
        return [
            ("max |k_cache − right|:", largest_difference(got["k"]["out"], expected["k"])),
            ("max |v_cache − right|:", largest_difference(got["v"]["out"], expected["v"])),
            ("picture:", cache_map(got["k"]["out"], expected["k"], got["v"]["out"], expected["v"], rtol=rtol)),
        ]

    B, Hk, N, D = k_new.shape
    title = f"kv_append_kernel, B={B} Hk={Hk} N={N} D={D} into P={k_cache.shape[2]}, {dtype_name(k_new.dtype)}"
    return KV_APPEND.trial(kernel, inputs, title=title, show=show)


# ==============================================================================================
# Exercise 9c: split a fused QKV projection, rotate q and k, append k and v to the cache
# ==============================================================================================
#
# A Llama layer projects the normed hidden states once, ``qkv = h @ [wq | wk | wv]``: per row
# ``(Hq + 2·Hk)·D`` numbers, the query heads, then the key heads, then the value heads. One
# kernel then does what the model does in three steps: rotate the query heads into ``q_out``,
# rotate the key heads and write them into the key cache, copy the value heads into the value
# cache, each at the sequence's own position ``positions[b] + n`` (the table row and the cache row).


def qkv_rope_append_ref(
    qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    Hq: int,
    *,
    rotate_k: bool = True,
    rotate_v: bool = False,
    table_rows: Optional[torch.Tensor] = None,
    cache_rows: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(q_out [B, Hq, N, D], k_cache, v_cache)`` in float64 (new tensors) from ``qkv [B, N,
    (Hq + 2·Hk)·D]``: the query heads rotated by the table rows ``positions[b] + n``, the key heads
    rotated alike and the value heads as they are, written at cache rows ``positions[b] + n``.
    The keywords make the known wrong answers the verdict names (``table_rows``, ``cache_rows``:
    the first row of each sequence, instead of ``positions``)."""
    B, N, width = qkv.shape
    Hk, D = k_cache.shape[1], k_cache.shape[3]
    if width != (Hq + 2 * Hk) * D:
        raise ValueError(f"qkv has {width} columns; Hq = {Hq}, Hk = {Hk}, D = {D} make {(Hq + 2 * Hk) * D}")
    heads = qkv.detach().double().cpu().view(B, N, Hq + 2 * Hk, D).transpose(1, 2)  # [B, Hq + 2Hk, N, D]
    q, k, v = heads[:, :Hq], heads[:, Hq : Hq + Hk], heads[:, Hq + Hk :]
    table_rows = (positions if table_rows is None else table_rows).tolist()
    cache_rows = (positions if cache_rows is None else cache_rows).tolist()
    q_out = torch.empty(B, Hq, N, D, dtype=torch.float64)
    k_out, v_out = k_cache.detach().double().cpu().clone(), v_cache.detach().double().cpu().clone()
    for b in range(B):
        q_out[b] = rope_ref(q[b : b + 1], cos, sin, table_rows[b])[0]
        k_b = rope_ref(k[b : b + 1], cos, sin, table_rows[b])[0] if rotate_k else k[b]
        v_b = rope_ref(v[b : b + 1], cos, sin, table_rows[b])[0] if rotate_v else v[b]
        k_out[b, :, cache_rows[b] : cache_rows[b] + N] = k_b
        v_out[b, :, cache_rows[b] : cache_rows[b] + N] = v_b
    return q_out, k_out, v_out


def launch_qkv_rope_append(
    kernel,
    qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    q_out: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The given launcher of exercise 9c: ``qkv [B, N, (Hq + 2·Hk)·D]`` (any batch and row
    strides, unit stride along the last dimension), ``cos, sin [P', D]`` contiguous,
    ``positions [B]`` int32 on the device, ``q_out [B, Hq, N, D]`` and the caches ``k_cache,
    v_cache [B, Hk, P, D]`` (one set of strides for both; unit stride along ``D``) with
    ``positions[b] + N ≤ min(P, P')``. ``Hq`` and ``Hk`` come from ``q_out`` and the caches.
    Grid ``(cdiv(N, 16), B·(Hq + Hk))``: axis 1 is ``b·(Hq + Hk) + h``, query head ``h`` for
    ``h < Hq``, else key and value head ``h − Hq``. The kernel gets the seven pointers, qkv's
    two strides (batch, row), three (batch, head, row) of ``q_out`` and three of the caches,
    ``Hq, Hk, N`` and ``HALF = D/2, BLOCK_N = 16``. Returns ``(q_out, k_cache, v_cache)``."""
    require_kernel(kernel)
    require_heads(q_out=q_out, k_cache=k_cache, v_cache=v_cache)
    B, Hq, N, D = q_out.shape
    Hk, P = k_cache.shape[1], k_cache.shape[2]
    if qkv.dim() != 3 or qkv.stride(2) != 1 or tuple(qkv.shape) != (B, N, (Hq + 2 * Hk) * D):
        raise ValueError(f"qkv must be [B={B}, N={N}, (Hq + 2·Hk)·D = {(Hq + 2 * Hk) * D}] with unit stride along its last dimension")
    if tuple(k_cache.shape) != (B, Hk, P, D) or tuple(v_cache.shape) != (B, Hk, P, D) or k_cache.stride() != v_cache.stride():
        raise ValueError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} must be [B, Hk, P, D] with one set of strides")
    if len({qkv.dtype, q_out.dtype, k_cache.dtype, v_cache.dtype}) != 1:
        raise ValueError("qkv, q_out, k_cache and v_cache must have one dtype")
    if D not in ROPE_HEAD_DIMS:
        raise ValueError(f"head dimension {D}: the launcher takes {ROPE_HEAD_DIMS} (D/2 must be a power of two)")
    for name, t in (("cos", cos), ("sin", sin)):
        if t.dim() != 2 or t.shape[1] != D or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous [P, {D}] table")
    _require_rows("positions", positions, B, qkv.device)
    for b, start in enumerate(positions.tolist()):
        if start < 0 or start + N > min(P, cos.shape[0], sin.shape[0]):
            raise ValueError(f"sequence {b}: {N} rows at position {start} do not fit the cache ({P}) and the tables ({cos.shape[0]})")
    grid = (triton.cdiv(N, KV_APPEND_BLOCK_N), B * (Hq + Hk))
    kernel[grid](
        qkv, cos, sin, positions, q_out, k_cache, v_cache,
        qkv.stride(0), qkv.stride(1),
        q_out.stride(0), q_out.stride(1), q_out.stride(2),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        Hq, Hk, N,
        HALF=D // 2, BLOCK_N=KV_APPEND_BLOCK_N,
    )  # fmt: skip
    return q_out, k_cache, v_cache


@dataclasses.dataclass(frozen=True)
class _QkvSpec:
    """One case of 9c: ``Hq`` query and ``Hk`` key/value heads, ``N`` rows per sequence at
    ``positions``, a cache of ``P``; qkv's rows ``row_pad`` elements wider than they are."""

    Hq: int
    Hk: int
    N: int
    P: int
    positions: tuple[int, ...]
    D: int = 32
    dtype: torch.dtype = torch.float32
    row_pad: int = 0
    theta: float = 10000.0

    @property
    def B(self) -> int:
        return len(self.positions)


def _qkv_guard(qkv: torch.Tensor, row_pad: int) -> Guarded:
    """``qkv [B, N, W]`` in rows ``W + row_pad`` wide, :data:`KV_PAD` rows past every sequence's
    last one, in a buffer of :data:`KV_FILL`."""
    B, N, W = qkv.shape
    row = W + row_pad
    return guarded(qkv, ((N + KV_PAD) * row, row, 1), margin=(0, KV_PAD, 0), device=kernel_device(), fill=KV_FILL)


def _qkv_inputs(spec: _QkvSpec, gen: torch.Generator) -> dict:
    B, N, D = spec.B, spec.N, spec.D
    qkv = torch.randn(B, N, (spec.Hq + 2 * spec.Hk) * D, generator=gen).to(spec.dtype)
    k_old, v_old = (torch.randn(B, spec.Hk, spec.P, D, generator=gen).to(spec.dtype) for _ in range(2))
    cos, sin = rope_tables(spec.P, D, theta=spec.theta, dtype=spec.dtype)
    return {
        "qkv": _qkv_guard(qkv, spec.row_pad),
        "cos": _table_guard(cos),
        "sin": _table_guard(sin),
        "positions": _index_rows(spec.positions, kernel_device()),
        "k_old": k_old,
        "v_old": v_old,
        "Hq": spec.Hq,
    }


def _qkv_run(fn, inp: dict) -> dict:
    B, N, _ = inp["qkv"].view.shape
    D = inp["k_old"].shape[3]
    q_out = _heads_guard(torch.full((B, inp["Hq"], N, D), float("nan"), dtype=inp["k_old"].dtype), "bhnd", fill=float("nan"))
    k_cache, v_cache = _cache_guard(inp["k_old"]), _cache_guard(inp["v_old"])
    positions = inp["positions"]
    before = positions.clone()
    inputs = (inp["qkv"], inp["cos"], inp["sin"])
    _, changed = run_guarded(launch_qkv_rope_append, fn, inputs, (q_out, k_cache, v_cache), positions)
    changed = changed or not torch.equal(positions, before)
    return {
        "q": {"out": q_out.view, "outside": q_out.outside_written(), "inputs_changed": changed, "guard": q_out},
        "k": {"out": k_cache.view, "outside": k_cache.outside_written(), "inputs_changed": False, "guard": k_cache},
        "v": {"out": v_cache.view, "outside": v_cache.outside_written(), "inputs_changed": False, "guard": v_cache},
    }


def _qkv_reference(inp: dict, **mistake) -> dict:
    q, k, v = qkv_rope_append_ref(
        inp["qkv"].view, inp["cos"].view, inp["sin"].view, inp["positions"], inp["k_old"], inp["v_old"], inp["Hq"], **mistake
    )
    return {"q": q, "k": k, "v": v}


def _qkv_expected(inp: dict) -> dict:
    return _qkv_reference(inp)


QKV_HINT = (
    "program (i, b·(Hq + Hk) + h): for h < Hq, rotate qkv columns h·D … h·D + D − 1 into q_out; else, with j = h − Hq, "
    "rotate columns (Hq + j)·D … into k_cache and copy columns (Hq + Hk + j)·D … into v_cache at row positions[b] + n; "
    "the table row is positions[b] + n too; every load and store masked with n < N"
)


def _qkv_hint(got: dict, inp: dict, rtol: float) -> str:
    zeros = torch.zeros_like(inp["positions"])
    first = inp["positions"][:1].expand_as(inp["positions"])
    candidates = [
        ({"rotate_v": True}, "v was rotated too: the value heads go to the cache as they are"),
        ({"rotate_k": False}, "k was not rotated: the key heads are rotated like the query heads before they are cached"),
        ({"table_rows": zeros}, "the table rows start at 0: the angle of row n is that of position positions[b] + n"),
        ({"cache_rows": zeros}, "the cache rows start at 0: row n goes to cache row positions[b] + n"),
        ({"table_rows": first, "cache_rows": first}, "every sequence used sequence 0's position: load positions[b] for the program's b"),
    ]
    for mistake, text in candidates:
        try:
            want = _qkv_reference(inp, **mistake)
        except RuntimeError:  # a candidate that does not fit this case's cache
            continue
        if all(matches(got[name]["out"], want[name], rtol) for name in ("q", "k", "v")):
            return text
    return QKV_HINT


def _qkv_compare(got: dict, expected: dict, inp: dict) -> Verdict:
    rtol = TOLERANCE[inp["k_old"].dtype]
    names = {"q": "q_out", "k": "k_cache", "v": "v_cache"}
    verdicts = {name: compare_tensors(got[name], expected[name], rtol=rtol) for name in names}
    errors = [v.error for v in verdicts.values() if v.error is not None and v.error == v.error]
    error = max(errors) if errors else None
    if all(v.passed for v in verdicts.values()):
        return Verdict(True, error, "")
    detail = "; ".join(f"{names[name]}: {v.detail}" for name, v in verdicts.items() if not v.passed)
    picture = _qkv_map(got, expected, rtol)
    return Verdict(False, error, f"{detail}. {_qkv_hint(got, inp, rtol)}", picture=picture)


def _qkv_map(got: dict, expected: dict, rtol: float) -> str:
    """Two pictures: q_out's rows by (batch, head), then both caches' (:func:`cache_map`)."""
    q = head_rows_map([(got["q"]["out"], expected["q"])], rtol=rtol, name="q_out rows by (batch, head)")
    return q + "\n" + cache_map(got["k"]["out"], expected["k"], got["v"]["out"], expected["v"], rtol=rtol)


QKV_ROPE_APPEND = CaseTemplate(_qkv_run, _qkv_expected, _qkv_compare)


def _qkv_case(name: str, spec: _QkvSpec) -> Case:
    return QKV_ROPE_APPEND.case(name, lambda gen: _qkv_inputs(spec, gen), dtype=spec.dtype)


def qkv_rope_append_cases() -> list[Case]:
    return [
        _qkv_case("prefill: B=1 Hq=Hk=2, N=16 from 0, D=32", _QkvSpec(2, 2, 16, 40, (0,))),
        _qkv_case("GQA: Hq=8 over Hk=2, B=2, N=21 from 3 and 30, D=16", _QkvSpec(8, 2, 21, 64, (3, 30), 16)),
        _qkv_case("decode: B=3, one row at 5, 40 and 0, Hq=4 Hk=1, D=64", _QkvSpec(4, 1, 1, 48, (5, 40, 0), 64)),
        _qkv_case("qkv rows 24 wider than (Hq + 2·Hk)·D, N=19 from 7 and 0", _QkvSpec(4, 2, 19, 40, (7, 0), row_pad=24)),
        _qkv_case("positions 8000-8016, theta 500000 (Llama 3), D=64", _QkvSpec(2, 1, 17, 8020, (8000,), 64, theta=500000.0)),
        _qkv_case("float16, B=2 Hq=4 Hk=2, N=33 from 2 and 9", _QkvSpec(4, 2, 33, 48, (2, 9), dtype=torch.float16)),
        _qkv_case("bfloat16, B=2 Hq=2 Hk=1, N=9 from 11 and 4", _QkvSpec(2, 1, 9, 24, (11, 4), dtype=torch.bfloat16)),
    ]


def try_qkv_rope_append(kernel, qkv, cos, sin, positions, k_cache, v_cache, Hq: int) -> Trial:
    """Exercise 9c's "try it": the kernel on copies of ``qkv``, the tables and the caches in
    guarded buffers, ``q_out`` poisoned with NaN; shows the largest difference of each output from
    the float64 answer, a picture of which rows are right, and the verdict."""
    inputs = {
        "qkv": _qkv_guard(qkv.detach().cpu(), 0),
        "cos": _table_guard(cos.detach().cpu().contiguous()),
        "sin": _table_guard(sin.detach().cpu().contiguous()),
        "positions": positions.detach().to(device=kernel_device(), dtype=torch.int32),
        "k_old": k_cache.detach().cpu(),
        "v_old": v_cache.detach().cpu(),
        "Hq": int(Hq),
    }
    rtol = TOLERANCE[qkv.dtype]

    def show(got, expected):
        names = {"q": "q_out", "k": "k_cache", "v": "v_cache"}
        return [(f"max |{names[n]} − reference|:", largest_difference(got[n]["out"], expected[n])) for n in names] + [
            ("picture:", _qkv_map(got, expected, rtol)),
        ]

    B, N, _ = qkv.shape
    title = f"qkv_rope_append_kernel, B={B} Hq={Hq} Hk={k_cache.shape[1]} N={N} D={k_cache.shape[3]}, {dtype_name(qkv.dtype)}"
    return QKV_ROPE_APPEND.trial(kernel, inputs, title=title, show=show)
