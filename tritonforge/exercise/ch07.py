r"""Exercises 7a, 7b and 7c (chapter 7): three variants of the FlashAttention-2 forward, each a change
to the plain kernel the notebook hands over: logit soft-capping, an ALiBi bias, a sliding window.

Every exercise computes, for each batch ``b`` and head ``h``, with :math:`\tau = 1/\sqrt{D}`,

.. math::

    s_{ij} = \tau\, q_i \cdot k_j, \qquad
    o_i = \sum_{j \in A(i)} \frac{e^{s'_{ij}}}{\sum_{j' \in A(i)} e^{s'_{ij'}}}\, v_j ,

where :math:`s'` is the exercise's modified score and :math:`A(i)` the keys query ``i`` may see.
Causal masks align the last query with the last key (bottom right): query ``i`` sits at
:math:`\hat\imath = i + N_k - N_q`.

7a: :math:`s' = c \tanh(s / c)` (Gemma 2's soft-capping, ``c`` = ``softcap``), every key visible.

7b: :math:`s'_{ij} = s_{ij} + m_h (j - \hat\imath)` with :math:`m_h = 2^{-8(h+1)/H}` (ALiBi's
slopes), causal: :math:`A(i) = \{j : j \le \hat\imath\}`.

7c: :math:`s' = s`, causal within a window of ``w`` keys:
:math:`A(i) = \{j : \hat\imath - w < j \le \hat\imath\}` (and :math:`j \ge 0`).

The references are float64 PyTorch, written here from the formulas (independent of any
``tritonforge.ops`` module); inputs are ``[B, H, N, D]`` views with unit stride along ``D``.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Optional

import torch

from tritonforge._triton import triton
from tritonforge.exercise.core import (
    Case,
    CaseTemplate,
    Trial,
    Verdict,
    compare_tensors,
    dtype_name,
    guarded_heads,
    head_rows_map,
    largest_difference,
    matches,
    require_heads,
    require_kernel,
    run_one_output,
    with_picture,
)
from tritonforge.reference import TOLERANCE

__all__ = [
    "ATTENTION_BLOCK_M",
    "ATTENTION_BLOCK_N",
    "alibi_attention_ref",
    "alibi_slopes",
    "attention_alibi_cases",
    "attention_softcap_cases",
    "launch_attention_alibi",
    "launch_attention_softcap",
    "launch_sliding_window_attention",
    "sliding_window_attention_cases",
    "sliding_window_attention_ref",
    "softcap_attention_ref",
    "try_attention_alibi",
    "try_attention_softcap",
    "try_sliding_window_attention",
    "visible_keys",
]

NEG_INF = float("-inf")

ATTENTION_BLOCK_M = 16
"""Queries per program in every chapter-7 exercise, fixed by the launchers (``tl.dot`` needs 16)."""

ATTENTION_BLOCK_N = 16
"""Keys per step of the loop in every chapter-7 exercise, fixed by the launchers."""

HEAD_DIMS = (16, 32, 64, 128)
"""The head dimensions the launchers accept: powers of two (``tl.arange``), at least 16 (``tl.dot``)."""


# ----------------------------------------------------------------------------------------------
# The float64 reference and the guarded [B, H, N, D] tensors all three exercises share
# ----------------------------------------------------------------------------------------------


def alibi_slopes(H: int) -> torch.Tensor:
    """ALiBi's slope of each head in float64: ``m_h = 2^(−8(h+1)/H)`` for ``h = 0 … H−1`` (the
    paper's geometric sequence, used here for every ``H``, not only powers of two)."""
    return torch.exp2(-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)


def visible_keys(Nq: int, Nk: int, *, causal: bool = False, window: int = 0, aligned: bool = True) -> torch.Tensor:
    """``[Nq, Nk]`` bool: which keys each query sees. Causal: ``j ≤ î`` with ``î = i + Nk − Nq``
    (bottom right; ``aligned=False``: ``î = i``, top left); a window of ``w > 0`` also needs
    ``j > î − w``."""
    i_hat = torch.arange(Nq)[:, None] + (Nk - Nq if aligned else 0)
    j = torch.arange(Nk)[None, :]
    allowed = torch.ones(Nq, Nk, dtype=torch.bool)
    if causal or window:
        allowed &= j <= i_hat
    if window:
        allowed &= j > i_hat - window
    return allowed


def _attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    softcap: float = 0.0,
    slopes: Optional[torch.Tensor] = None,
    allowed: Optional[torch.Tensor] = None,
    bias_sign: float = 1.0,
    scale_after_cap: bool = False,
) -> torch.Tensor:
    """The attention of the module docstring in float64 (``bias_sign`` and ``scale_after_cap``
    build known wrong answers, to name them in a verdict). Keys no query sees take no part at all
    (a case may fill them with NaN)."""
    q, k, v = q.double().cpu(), k.double().cpu(), v.double().cpu()
    Nq, D = q.shape[2], q.shape[3]
    Nk = k.shape[2]
    if allowed is None:
        allowed = torch.ones(Nq, Nk, dtype=torch.bool)
    seen = allowed.any(dim=0)[:, None]  # [Nk, 1]
    k = torch.where(seen, k, torch.zeros_like(k))
    v = torch.where(seen, v, torch.zeros_like(v))
    tau = 1.0 / math.sqrt(D)
    s = q @ k.transpose(-1, -2)  # [B, H, Nq, Nk]
    if softcap and scale_after_cap:
        s = softcap * torch.tanh(s / softcap) * tau
    else:
        s = s * tau
        if softcap:
            s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        distance = (torch.arange(Nk)[None, :] - torch.arange(Nq)[:, None] - (Nk - Nq)).double()  # j − î
        s = s + bias_sign * slopes.double()[:, None, None] * distance
    s = s.masked_fill(~allowed, NEG_INF)
    return torch.softmax(s, dim=-1) @ v


def softcap_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softcap: float) -> torch.Tensor:
    """Exercise 7a's answer in float64: softmax over every key of ``softcap·tanh(q·k/√D / softcap)``, times v."""
    return _attention_ref(q, k, v, softcap=softcap)


def alibi_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Exercise 7b's answer in float64: causal (bottom right) attention with ALiBi's bias
    ``m_h·(j − î)`` added to the scaled scores."""
    H, Nq, Nk = q.shape[1], q.shape[2], k.shape[2]
    return _attention_ref(q, k, v, slopes=alibi_slopes(H), allowed=visible_keys(Nq, Nk, causal=True))


def sliding_window_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """Exercise 7c's answer in float64: causal attention within a window of ``window`` keys,
    ``î − window < j ≤ î``."""
    Nq, Nk = q.shape[2], k.shape[2]
    return _attention_ref(q, k, v, allowed=visible_keys(Nq, Nk, causal=True, window=window))


def _require_heads(**tensors: torch.Tensor) -> None:
    require_heads(**tensors)
    D = tensors["q"].shape[3]
    if D not in HEAD_DIMS:
        raise ValueError(f"head dimension {D}: the launchers take {HEAD_DIMS} (tl.arange and tl.dot need a power of two ≥ 16)")


def _launch(kernel, q, k, v, out, extra: tuple, *, causal_shapes: bool) -> torch.Tensor:
    """One program per block of ``ATTENTION_BLOCK_M`` queries (axis 0) and per (batch, head)
    (axis 1, ``b·H + h``)."""
    require_kernel(kernel)
    B, H, Nq, D = q.shape
    Nk = k.shape[2]
    if out is None:
        out = torch.empty((B, H, Nq, D), dtype=q.dtype, device=q.device)
    _require_heads(q=q, k=k, v=v, out=out)
    if causal_shapes and Nq > Nk:
        raise ValueError(f"causal attention here needs Nq ≤ Nk (got Nq = {Nq}, Nk = {Nk}): every query sees at least key 0")
    grid = (triton.cdiv(Nq, ATTENTION_BLOCK_M), B * H)
    kernel[grid](
        q, k, v, out,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        H, Nq, Nk,
        1.0 / math.sqrt(D),
        *extra,
        HEAD_DIM=D, BLOCK_M=ATTENTION_BLOCK_M, BLOCK_N=ATTENTION_BLOCK_N,
    )  # fmt: skip
    return out


def launch_attention_softcap(kernel, q, k, v, softcap: float, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The given launcher of exercise 7a: ``q [B, H, Nq, D]``, ``k``, ``v [B, H, Nk, D]``, any
    strides but unit stride along ``D``; grid ``(cdiv(Nq, 16), B·H)``; the kernel gets the four
    pointers, three strides of each (batch, head, row), ``H, Nq, Nk``, ``sm_scale = 1/√D``,
    ``softcap``, and ``HEAD_DIM = D, BLOCK_M = BLOCK_N = 16``. Returns ``out`` (new unless given)."""
    return _launch(kernel, q, k, v, out, (float(softcap),), causal_shapes=False)


def launch_attention_alibi(kernel, q, k, v, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The given launcher of exercise 7b: as 7a's without ``softcap`` (the kernel computes each
    head's slope from ``h`` and ``H``); causal, so ``Nq ≤ Nk``."""
    return _launch(kernel, q, k, v, out, (), causal_shapes=True)


def launch_sliding_window_attention(kernel, q, k, v, window: int, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The given launcher of exercise 7c: as 7a's with ``window`` (≥ 1 keys) for ``softcap``;
    causal, so ``Nq ≤ Nk``."""
    if int(window) < 1:
        raise ValueError(f"window = {window}: a query sees at least itself (window ≥ 1)")
    return _launch(kernel, q, k, v, out, (int(window),), causal_shapes=True)


# ----------------------------------------------------------------------------------------------
# Cases, runs and verdicts, shared
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _HeadsSpec:
    """One case: ``B`` batches of ``H`` heads, ``Nq`` queries against ``Nk`` keys of dimension ``D``."""

    B: int
    H: int
    Nq: int
    Nk: int
    D: int = 16
    dtype: torch.dtype = torch.float32
    layout: str = "bhnd"  # or "bnhd": q, k, v and out in a [B, N, H, D] tensor's storage
    spread: float = 1.0  # standard deviation of q and k: the scores' is spread² (before 1/√D·√D)
    softcap: float = 0.0  # 7a
    window: int = 0  # 7c
    unseen_nan: bool = False  # 7c: keys in whole blocks before every query's window hold NaN


KEY_PAD = ATTENTION_BLOCK_N + 2
"""NaN rows past each head's last query and key: a load past the end without a mask reads NaN."""


def unseen_blocks_end(Nq: int, Nk: int, window: int) -> int:
    """Exercise 7c: the first key of the block that holds the first program's first window key,
    ``max(0, Nk − Nq − window + 1)`` rounded down to a multiple of ``BLOCK_N``. No program has a
    reason to load a key below it: the check's NaN keys (one of its cases) lie there."""
    return max(0, Nk - Nq - window + 1) // ATTENTION_BLOCK_N * ATTENTION_BLOCK_N


def _heads_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, *, softcap: float = 0.0, window: int = 0, unseen: int = 0) -> dict:
    """What a case's run reads: ``q, k, v`` guarded (:data:`KEY_PAD` NaN rows past each head's
    last; before key 0, room for a loop that starts a window and two blocks below it), the
    layout, the exercise's ``softcap`` or ``window``, and (7c) how many keys hold NaN."""
    before = window + 2 * ATTENTION_BLOCK_N
    return {
        "q": guarded_heads(q, layout, pad=KEY_PAD),
        "k": guarded_heads(k, layout, pad=KEY_PAD, before=before),
        "v": guarded_heads(v, layout, pad=KEY_PAD, before=before),
        "layout": layout,
        "softcap": softcap,
        "window": window,
        "unseen": unseen,  # 7c: keys 0 … unseen − 1 hold NaN
    }


def _spec_inputs(spec: _HeadsSpec, gen: torch.Generator) -> dict:
    B, H, Nq, Nk, D = spec.B, spec.H, spec.Nq, spec.Nk, spec.D
    q = spec.spread * torch.randn(B, H, Nq, D, generator=gen)
    k = spec.spread * torch.randn(B, H, Nk, D, generator=gen)
    v = torch.randn(B, H, Nk, D, generator=gen)
    unseen = unseen_blocks_end(Nq, Nk, spec.window) if spec.unseen_nan else 0
    k[:, :, :unseen] = float("nan")
    v[:, :, :unseen] = float("nan")
    q, k, v = (t.to(spec.dtype) for t in (q, k, v))
    return _heads_inputs(q, k, v, spec.layout, softcap=spec.softcap, window=spec.window, unseen=unseen)


def _heads_run(launch, extra):
    def run(fn, inp: dict) -> dict:
        q = inp["q"].view
        out = guarded_heads(torch.full(tuple(q.shape), float("nan"), dtype=q.dtype), inp["layout"], pad=KEY_PAD)
        with warnings.catch_warnings():  # numpy's "All-NaN slice" from a max over NaN: the verdict says it
            warnings.simplefilter("ignore", RuntimeWarning)
            return run_one_output(launch, fn, (inp["q"], inp["k"], inp["v"]), out, *extra(inp))

    return run


def query_map(out: torch.Tensor, expected: torch.Tensor, *, rtol: float, width: int = 64) -> str:
    """A picture of ``out [B, H, Nq, D]``: one line per (batch, head), one character per query
    row (``·`` every element right, ``x`` some wrong, ``?`` some NaN), folded past ``width`` queries."""
    return head_rows_map([(out, expected)], rtol=rtol, name="query rows by (batch, head)", width=width)


def _verdict(got: dict, expected: torch.Tensor, inp: dict, hint) -> Verdict:
    """compare_tensors, a hint for wrong or NaN values, a picture of the query rows."""
    rtol = TOLERANCE[inp["q"].view.dtype]
    verdict = compare_tensors(got, expected, rtol=rtol)
    if verdict.passed:
        return verdict
    out = got["out"].detach().double().cpu()
    if bool(out.isnan().all()):  # nothing written, or NaN everywhere
        return dataclasses.replace(verdict, detail=f"{verdict.detail}. If your kernel does store: {hint(out, expected, inp, rtol)}")
    if "wrong values" in verdict.detail or "NaN" in verdict.detail:
        verdict = dataclasses.replace(verdict, detail=f"{verdict.detail}. {hint(out, expected, inp, rtol)}")
    return with_picture(verdict, lambda: query_map(got["out"], expected, rtol=rtol), got["guard"])


def _nan_rows(out: torch.Tensor) -> torch.Tensor:
    """``[Nq]`` bool: query rows with a NaN in some batch, head or element."""
    return out.isnan().any(dim=-1).any(dim=0).any(dim=0)


def _template(launch, extra, expected, hint) -> CaseTemplate:
    """The cases of one exercise: ``launch`` with ``extra(inputs)`` after ``q, k, v``, judged
    against ``expected`` by :func:`_verdict` with the exercise's ``hint``."""
    return CaseTemplate(_heads_run(launch, extra), expected, lambda got, exp, inp: _verdict(got, exp, inp, hint))


def _trial(kernel, template: CaseTemplate, q, k, v, title: str, *, softcap: float = 0.0, window: int = 0) -> Trial:
    """A "try it" of any of the three: the kernel on copies of ``q, k, v`` in guarded buffers."""
    inputs = _heads_inputs(*(t.detach().cpu() for t in (q, k, v)), "bhnd", softcap=float(softcap), window=int(window))
    rtol = TOLERANCE[inputs["q"].view.dtype]
    shape = _shape_text(inputs["q"].view, inputs["k"].view)

    def show(got, expected):
        return [
            ("inputs:", shape + (f", window {inputs['window']}" if inputs["window"] else "")),
            ("max |out − reference|:", largest_difference(got["out"], expected)),
            ("picture:", query_map(got["out"], expected, rtol=rtol, width=48)),  # indented: 76 characters in all
        ]

    return template.trial(kernel, inputs, title=title, show=show)


def _shape_text(q: torch.Tensor, k: torch.Tensor) -> str:
    B, H, Nq, D = q.shape
    return f"B={B} H={H} Nq={Nq} Nk={k.shape[2]} D={D} {dtype_name(q.dtype)}"


# ----------------------------------------------------------------------------------------------
# Exercise 7a (chapter 7): logit soft-capping (Gemma 2)
# ----------------------------------------------------------------------------------------------

TANH_OVERFLOW = 44.0
"""Above this ``|s / softcap|`` the textbook ``(e^{2x} − 1)/(e^{2x} + 1)`` overflows float32
(``e^{88.7}`` is its largest value) and gives inf/inf = NaN."""


def _softcap_expected(inp: dict) -> torch.Tensor:
    return softcap_attention_ref(inp["q"].view, inp["k"].view, inp["v"].view, inp["softcap"])


SOFTCAP_HINT = (
    "after the scale and before the mask: s = softcap·tanh(s / softcap), with tanh(x) = sign(x)·(1 − e)/(1 + e), "
    "e = exp(−2|x|) (never overflows); then the online softmax as given"
)


def _softcap_hint(out: torch.Tensor, expected: torch.Tensor, inp: dict, rtol: float) -> str:
    q, k, v, cap = inp["q"].view, inp["k"].view, inp["v"].view, inp["softcap"]
    finite = torch.isfinite(out)
    if not bool(finite.all()):
        tau = 1.0 / math.sqrt(q.shape[3])
        largest = float((q.double().cpu() @ k.double().cpu().transpose(-1, -2)).abs().max()) * tau / cap
        if largest > TANH_OVERFLOW:
            return (
                f"NaN or inf where |s / softcap| reaches {largest:.0f}: exp(2x) overflows float32 past x = 44.4 "
                "(inf / inf = NaN); build tanh from e = exp(−2|x|) ≤ 1 and put the sign back"
            )
        return f"NaN or inf in the output: {SOFTCAP_HINT}"
    if matches(out, _attention_ref(q, k, v), rtol):
        return "this is plain attention: the scores were not soft-capped"
    if matches(out, _attention_ref(q, k, v, softcap=cap, scale_after_cap=True), rtol):
        return "the cap came before the scale: cap the scaled scores, softcap·tanh(q·k·sm_scale / softcap)"
    Nk = k.shape[2]
    if Nk % ATTENTION_BLOCK_N:
        # the key tail masked before the cap: cap·tanh(−inf) = −cap, so the masked keys count again
        padded = torch.nn.functional.pad(k.double().cpu(), (0, 0, 0, -Nk % ATTENTION_BLOCK_N))
        padded_v = torch.nn.functional.pad(v.double().cpu(), (0, 0, 0, -Nk % ATTENTION_BLOCK_N))
        s = q.double().cpu() @ padded.transpose(-1, -2) / math.sqrt(q.shape[3])
        s = cap * torch.tanh(s / cap)
        s[..., Nk:] = -cap
        if matches(out, torch.softmax(s, dim=-1) @ padded_v, rtol):
            return (
                "cap applied after the mask: the output matches attention whose masked key tail scored −softcap "
                "(softcap·tanh(−inf) = −softcap) instead of −inf, so the masked keys count again; masked logits must "
                "stay −inf: cap the scores first, then mask the tail"
            )
    return SOFTCAP_HINT


SOFTCAP = _template(launch_attention_softcap, lambda inp: (inp["softcap"],), _softcap_expected, _softcap_hint)


def _softcap_case(name: str, spec: _HeadsSpec) -> Case:
    return SOFTCAP.case(name, lambda gen: _spec_inputs(spec, gen), dtype=spec.dtype)


def attention_softcap_cases() -> list[Case]:
    # spread² is the scores' standard deviation: every case puts most scores well past the cap
    return [
        _softcap_case("float32 whole blocks: B=1 H=2, Nq=Nk=64, cap 5", _HeadsSpec(1, 2, 64, 64, spread=3.0, softcap=5.0)),
        _softcap_case("ragged keys: Nq=37 Nk=100, B=2 H=3, D=32, cap 10", _HeadsSpec(2, 3, 37, 100, 32, spread=4.0, softcap=10.0)),
        _softcap_case("Nq=100 > Nk=29, D=16, cap 8", _HeadsSpec(1, 2, 100, 29, spread=3.5, softcap=8.0)),
        # every score saturates at ±1, so 15 masked keys at −cap would weigh as much as the 17 real ones
        _softcap_case("cap 1, Nk=17: one key and 15 masked lanes in the last block", _HeadsSpec(1, 2, 20, 17, spread=2.0, softcap=1.0)),
        _softcap_case("one query (decode), Nk=77, H=4, cap 20", _HeadsSpec(1, 4, 1, 77, 32, spread=6.0, softcap=20.0)),
        _softcap_case("scores near ±3000, cap 30: no overflow in tanh", _HeadsSpec(1, 2, 40, 50, spread=55.0, softcap=30.0)),
        _softcap_case("Gemma 2's cap 50, scores to ±200, Nq=Nk=45", _HeadsSpec(2, 1, 45, 45, spread=9.0, softcap=50.0)),
        _softcap_case("[B, N, H, D] storage, B=2 H=2, Nq=Nk=50", _HeadsSpec(2, 2, 50, 50, layout="bnhd", spread=3.0, softcap=6.0)),
        _softcap_case("float16, Nq=40, Nk=70, cap 10", _HeadsSpec(1, 2, 40, 70, dtype=torch.float16, spread=4.0, softcap=10.0)),
        _softcap_case("bfloat16, Nq=33, Nk=60, cap 10", _HeadsSpec(1, 2, 33, 60, dtype=torch.bfloat16, spread=4.0, softcap=10.0)),
    ]


def try_attention_softcap(kernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softcap: float) -> Trial:
    """Exercise 7a's "try it": the kernel on copies of ``q, k, v [B, H, N, D]`` in NaN-padded
    buffers, ``out`` poisoned with NaN; shows the largest difference from the float64 answer, a
    picture of which query rows are right, and the verdict."""
    return _trial(kernel, SOFTCAP, q, k, v, f"attention_softcap_kernel, cap {softcap:g}", softcap=softcap)


# ----------------------------------------------------------------------------------------------
# Exercise 7b (chapter 7): ALiBi, causal
# ----------------------------------------------------------------------------------------------


def _alibi_expected(inp: dict) -> torch.Tensor:
    return alibi_attention_ref(inp["q"].view, inp["k"].view, inp["v"].view)


ALIBI_HINT = "h = program_id(1) % H, slope = 2^(−8(h+1)/H); add slope·(j − î) to the scaled scores, î = i + Nk − Nq, and mask j > î with −inf"


def _alibi_hint(out: torch.Tensor, expected: torch.Tensor, inp: dict, rtol: float) -> str:
    q, k, v = inp["q"].view, inp["k"].view, inp["v"].view
    B, H, Nq, _ = q.shape
    Nk = k.shape[2]
    if not bool(torch.isfinite(out).all()):
        return f"NaN or inf in the output: {ALIBI_HINT}"
    causal = visible_keys(Nq, Nk, causal=True)
    slopes = alibi_slopes(H)
    candidates = [
        (_attention_ref(q, k, v, slopes=slopes), "no causal mask: query i sees keys j ≤ î = i + Nk − Nq only"),
        (_attention_ref(q, k, v), "this is plain attention: no ALiBi bias and no causal mask"),
        (_attention_ref(q, k, v, allowed=causal), "the causal mask is right, but no bias was added: + slope·(j − î)"),
        (
            _attention_ref(q, k, v, slopes=slopes, allowed=causal, bias_sign=-1.0),
            "the bias has the wrong sign: slope·(j − î) ≤ 0, far keys pulled down",
        ),
        (
            _attention_ref(q, k, v, slopes=slopes, allowed=visible_keys(Nq, Nk, causal=True, aligned=False)),
            "the causal mask is aligned top left (j ≤ i): with Nq < Nk the last query is the last key, î = i + Nk − Nq",
        ),
        (
            _attention_ref(q, k, v, slopes=torch.exp2(-8.0 * torch.arange(H, dtype=torch.float64) / H), allowed=causal),
            "the slope of the wrong head: head h (from 0) has 2^(−8(h+1)/H), not 2^(−8h/H)",
        ),
    ]
    for candidate, text in candidates:
        if matches(out, candidate, rtol):
            return text
    if B > 1:  # slopes of program_id(1) = b·H + h: right in batch 0 only
        first = out[:1]
        later = out[1:]
        if matches(first, expected[:1], rtol) and not matches(later, expected[1:], rtol):
            return "right in batch 0 only: program_id(1) counts b·H + h; the head is h = program_id(1) % H"
    return ALIBI_HINT


ALIBI = _template(launch_attention_alibi, lambda inp: (), _alibi_expected, _alibi_hint)


def _alibi_case(name: str, spec: _HeadsSpec) -> Case:
    return ALIBI.case(name, lambda gen: _spec_inputs(spec, gen), dtype=spec.dtype)


def attention_alibi_cases() -> list[Case]:
    return [
        _alibi_case("float32 B=1 H=4, Nq=Nk=64, D=16: whole blocks", _HeadsSpec(1, 4, 64, 64)),
        _alibi_case("Nq=37 < Nk=100 (bottom right), B=2 H=3, D=32", _HeadsSpec(2, 3, 37, 100, 32)),
        _alibi_case("one query (decode), Nk=77, H=8", _HeadsSpec(1, 8, 1, 77)),
        _alibi_case("H=12 (not a power of two), Nq=20, Nk=90", _HeadsSpec(1, 12, 20, 90)),
        _alibi_case("H=1 (slope 1/256), B=3, Nq=Nk=45", _HeadsSpec(3, 1, 45, 45, spread=1.5)),
        _alibi_case("[B, N, H, D] storage, B=2 H=2, Nq=50, Nk=66", _HeadsSpec(2, 2, 50, 66, layout="bnhd")),
        _alibi_case("float16, B=2 H=2, Nq=40, Nk=70", _HeadsSpec(2, 2, 40, 70, dtype=torch.float16)),
        _alibi_case("bfloat16, H=4, Nq=33, Nk=60", _HeadsSpec(1, 4, 33, 60, dtype=torch.bfloat16)),
    ]


def try_attention_alibi(kernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Trial:
    """Exercise 7b's "try it": as 7a's, against causal ALiBi attention in float64."""
    return _trial(kernel, ALIBI, q, k, v, "attention_alibi_kernel")


# ----------------------------------------------------------------------------------------------
# Exercise 7c (chapter 7): a sliding window (local attention), causal
# ----------------------------------------------------------------------------------------------


def _window_expected(inp: dict) -> torch.Tensor:
    return sliding_window_attention_ref(inp["q"].view, inp["k"].view, inp["v"].view, inp["window"])


WINDOW_HINT = (
    "keep j with î − window < j ≤ î (î = i + Nk − Nq); loop from lo = max(0, start_m + Nk − Nq − window + 1) "
    "rounded down to a multiple of BLOCK_N, to the causal end; shift by 0 while a row's max is still −inf"
)


UNSEEN_HINT = (
    "this case fills the keys of the whole blocks before every query's window with NaN: a kernel that loads them, "
    "rather than starting its loop at the block of its first window key, turns its rows into NaN. Or: a row "
    "whose every key in a block is outside its window has m = −inf after it; shift by 0 while the max is −inf"
)


def _window_hint(out: torch.Tensor, expected: torch.Tensor, inp: dict, rtol: float) -> str:
    q, k, v, w = inp["q"].view, inp["k"].view, inp["v"].view, inp["window"]
    Nq, Nk = q.shape[2], k.shape[2]
    nan = _nan_rows(out)
    if bool(nan.any()):
        first_key = torch.arange(Nq) + Nk - Nq - w + 1  # of each query's window
        if bool((first_key[nan] < 0).all()):
            return (
                "NaN only in rows whose window starts before key 0: the loop read keys −1, −2, … (NaN here); "
                "start it at lo = max(0, …), and keep the mask's j ≥ 0"
            )
        if inp.get("unseen"):
            return UNSEEN_HINT
        return (
            "NaN: a row whose every key in a block lies outside its window has m = −inf after that block, "
            "and exp(−inf − (−inf)) is NaN; shift by 0 while the max is still −inf"
        )
    seen = visible_keys(Nq, Nk, causal=True)
    candidates = [
        (_attention_ref(q, k, v, allowed=seen), "this is plain causal attention: no window (keep j > î − window)"),
        (
            _attention_ref(q, k, v, allowed=visible_keys(Nq, Nk, causal=True, window=w + 1)),
            "one key too many: the window holds w keys, î − w < j ≤ î",
        ),
    ]
    if w > 1:
        candidates.append(
            (
                _attention_ref(q, k, v, allowed=visible_keys(Nq, Nk, causal=True, window=w - 1)),
                "one key too few: the window holds w keys, î − w < j ≤ î",
            )
        )
    if Nq < Nk:  # the window's start from i, not î: j > i − w (wider; the causal end still at î)
        top_left = torch.arange(Nk)[None, :] > torch.arange(Nq)[:, None] - w
        candidates.append(
            (
                _attention_ref(q, k, v, allowed=seen & top_left),
                "the window is aligned top left (j > i − w): it ends at î = i + Nk − Nq, so it starts at î − w",
            )
        )
    for candidate, text in candidates:
        if matches(out, candidate, rtol):
            return text
    return WINDOW_HINT


WINDOW = _template(launch_sliding_window_attention, lambda inp: (inp["window"],), _window_expected, _window_hint)


def _window_case(name: str, spec: _HeadsSpec) -> Case:
    return WINDOW.case(name, lambda gen: _spec_inputs(spec, gen), dtype=spec.dtype)


def sliding_window_attention_cases() -> list[Case]:
    return [
        _window_case("float32 B=1 H=2, Nq=Nk=64, window 20", _HeadsSpec(1, 2, 64, 64, window=20)),
        _window_case("Nq=37 < Nk=100, B=2 H=3, D=32, window 24", _HeadsSpec(2, 3, 37, 100, 32, window=24)),
        _window_case("window 1 (each query sees its own key), Nq=Nk=40", _HeadsSpec(1, 2, 40, 40, window=1)),
        _window_case("window 7 < BLOCK_N, Nq=50, Nk=61", _HeadsSpec(2, 1, 50, 61, window=7)),
        _window_case("one query (decode), Nk=90, window 33, H=4", _HeadsSpec(1, 4, 1, 90, window=33)),
        _window_case("NaN before every window: Nq=16 Nk=100, window 16", _HeadsSpec(1, 2, 16, 100, window=16, unseen_nan=True)),
        _window_case("NaN before every window: Nq=40, Nk=97, window 5", _HeadsSpec(2, 1, 40, 97, window=5, unseen_nan=True)),
        _window_case("[B, N, H, D] storage: B=2 H=2 Nq=Nk=50 window 17", _HeadsSpec(2, 2, 50, 50, layout="bnhd", window=17)),
        _window_case("float16, H=2, Nq=40, Nk=70, window 20", _HeadsSpec(1, 2, 40, 70, dtype=torch.float16, window=20)),
        _window_case("bfloat16, H=2, Nq=33, Nk=60, window 12", _HeadsSpec(1, 2, 33, 60, dtype=torch.bfloat16, window=12)),
    ]


def try_sliding_window_attention(kernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> Trial:
    """Exercise 7c's "try it": as 7a's, against causal attention within ``window`` keys in float64."""
    return _trial(kernel, WINDOW, q, k, v, "sliding_window_attention_kernel", window=window)
