r"""Exercises 7a, 7b and 7c (chapter 7): three variants of the FlashAttention-2 forward, each a change
to the plain kernel the notebook hands over: logit soft-capping, an ALiBi bias, a sliding window.
Exercises 7d and 7e (chapter 7b): the FlashAttention-2 backward's preprocess (δ and lse2 per query
row) and its dK/dV loop for one head, not causal (their section at the end of this module).

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
    "attention_bwd_preprocess_cases",
    "attention_bwd_preprocess_ref",
    "attention_dkdv_cases",
    "attention_dkdv_ref",
    "attention_softcap_cases",
    "launch_attention_alibi",
    "launch_attention_bwd_preprocess",
    "launch_attention_dkdv",
    "launch_attention_softcap",
    "launch_sliding_window_attention",
    "sliding_window_attention_cases",
    "sliding_window_attention_ref",
    "softcap_attention_ref",
    "try_attention_alibi",
    "try_attention_bwd_preprocess",
    "try_attention_dkdv",
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
    D = next(iter(tensors.values())).shape[3]
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


# ----------------------------------------------------------------------------------------------
# Exercises 7d and 7e (chapter 7b): the FlashAttention-2 backward's preprocess and its dK/dV loop
# ----------------------------------------------------------------------------------------------

LOG2E = math.log2(math.e)
"""``log2(e)``: the backward kernels keep the logsumexp in base-2 units, ``lse2 = lse · log2(e)``."""

INF = float("inf")

STAT_PAD = ATTENTION_BLOCK_M + 2
"""NaN entries between the heads' rows of a ``[B, H, Nq]`` statistic (lse, dlse, δ, lse2): a load
or store past a head's last query without a mask lands there, not in the next head's rows."""


def attention_bwd_preprocess_ref(o: torch.Tensor, do: torch.Tensor, lse: torch.Tensor, dlse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exercise 7d's answer in float64: ``(δ, lse2)`` with ``δ = Σ_d dO·O − dlse`` per query row
    and ``lse2 = lse · log2(e)``, ``+inf`` where ``lse = −inf`` (a query that sees no key: then
    ``P = 2^(s − lse2) = 0``)."""
    delta = (o.double().cpu() * do.double().cpu()).sum(-1) - dlse.double().cpu()
    lse64 = lse.double().cpu()
    return delta, torch.where(torch.isneginf(lse64), INF, lse64 * LOG2E)


def attention_dkdv_ref(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, lse2: torch.Tensor, delta: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exercise 7e's answer in float64, not causal, from the kernel's inputs: with
    ``c = 1/√D``, ``P = 2^(c·log2(e)·q kᵀ − lse2)`` (the forward's probabilities when ``lse2`` is
    its logsumexp in base 2), ``dv = Pᵀ dO``, ``dP = dO vᵀ``, ``dS = P ⊙ (dP − δ)``,
    ``dk = c · dSᵀ q``. Returns ``(dk, dv)``, ``[B, H, Nk, D]`` each."""
    return _dkdv(*(t.double().cpu() for t in (q, k, v, do)), lse2.double().cpu()[..., None], delta.double().cpu()[..., None])


def _dkdv(q, k, v, do, lse2, delta, *, exp2: bool = True, scale: Optional[float] = None, use_delta: bool = True, dk_from_p: bool = False):
    """dk, dv of the formula with per-(query, key) statistics ``lse2`` and ``delta``
    (``[..., Nq, 1]`` for the right answer, ``[..., Nq, Nk]`` to build a wrong one) and the knobs
    that build the known wrong answers."""
    c = q.shape[-1] ** -0.5
    s = q @ k.transpose(-1, -2) * (c * LOG2E) - lse2
    p = torch.exp2(s) if exp2 else torch.exp(s)
    dp = do @ v.transpose(-1, -2)
    ds = p * (dp - delta) if use_delta else p * dp
    dv = p.transpose(-1, -2) @ do
    dk = (p if dk_from_p else ds).transpose(-1, -2) @ q * (c if scale is None else scale)
    return dk, dv


def _wrong_axis(stat: torch.Tensor, Nk: int, other: float) -> torch.Tensor:
    """``[B, H, Nq]`` → ``[B, H, Nq, Nk]``: the statistic a dK/dV program uses for (query i, key j)
    when it broadcasts it along the keys of its transposed tile (``stat[:, None]`` where
    ``stat[None, :]`` is right): the entry of query ``16·(i // 16) + j % 16``, ``other`` past Nq."""
    Nq = stat.shape[-1]
    block = ATTENTION_BLOCK_M
    padded = torch.nn.functional.pad(stat, (0, block), value=other)
    index = (torch.arange(Nq)[:, None] // block) * block + torch.arange(Nk)[None, :] % block  # [Nq, Nk]
    return padded[..., index]


def _stat_stride(B: int, H: int, Nq: int, **stats: torch.Tensor) -> int:
    """The one stride ``s`` of the ``[B, H, Nq]`` statistics: head ``b·H + h`` starts at
    ``(b·H + h)·s``; ``ValueError`` naming the tensor otherwise."""
    found = set()
    for name, t in stats.items():
        if tuple(t.shape) != (B, H, Nq):
            raise ValueError(f"{name} must be [B, H, Nq] = {[B, H, Nq]}, got {list(t.shape)}")
        if t.dtype != torch.float32:
            raise ValueError(f"{name} must be float32 (the backward's statistics are), got {dtype_name(t.dtype)}")
        s = t.stride(1) if H > 1 else (t.stride(0) if B > 1 else max(Nq, 1))
        if (Nq > 1 and t.stride(2) != 1) or (B > 1 and t.stride(0) != H * s) or s < Nq:
            raise ValueError(f"{name}: the rows of head b·H + h must start at (b·H + h)·s with unit stride along Nq")
        found.add(s)
    if len(found) != 1:
        raise ValueError(f"the [B, H, Nq] statistics must share one layout (head strides {sorted(found)})")
    return found.pop()


def _stat_guard(values: torch.Tensor, pad: int = STAT_PAD, fill: float = float("nan")) -> Guarded:
    """``values [B, H, Nq]`` in a buffer of ``fill`` (NaN unless a case needs a value a wrong read
    cannot hide), ``pad`` entries of it after each head's row."""
    B, H, Nq = values.shape
    S = Nq + pad
    return guarded(values, (H * S, S, 1), margin=(0, 0, pad), device=kernel_device(), fill=fill)


def _stat_picture(pairs, rtol: float, name: str) -> str:
    """:func:`head_rows_map` of ``[B, H, N]`` or ``[B, H, N, D]`` outputs; a ``+inf`` that is right
    is drawn right (the map's tolerance scales with the largest finite value)."""
    shown = []
    for out, expected in pairs:
        o, e = out.detach().double().cpu(), expected.double().cpu()
        if o.dim() == 3:
            o, e = o[..., None], e[..., None]
        same_inf = torch.isinf(e) & (o == e)
        shown.append((torch.where(same_inf, 0.0, o), torch.where(torch.isinf(e), 0.0, e)))
    return head_rows_map(shown, rtol=rtol, name=name, width=48)


# ---- Exercise 7d: δ and lse2 -------------------------------------------------------------------


def launch_attention_bwd_preprocess(kernel, o, do, lse, dlse, delta: Optional[torch.Tensor] = None, lse2: Optional[torch.Tensor] = None):
    """The given launcher of exercise 7d: ``o``, ``do [B, H, Nq, D]`` (any strides, unit along
    ``D``), ``lse``, ``dlse`` float32 ``[B, H, Nq]``; grid ``(cdiv(Nq, 16), B·H)``; the kernel gets
    the six pointers (``delta`` and ``lse2``, float32 ``[B, H, Nq]``, last), three strides of ``o``
    and of ``do`` (batch, head, row), ``stride_lh`` (head ``b·H + h``'s row of each statistic
    starts at ``(b·H + h)·stride_lh``), ``H, Nq``, and ``HEAD_DIM = D, BLOCK_M = 16``. Returns
    ``(delta, lse2)`` (new unless given)."""
    require_kernel(kernel)
    _require_heads(o=o, do=do)
    if tuple(o.shape) != tuple(do.shape):
        raise ValueError(f"o and do must have one shape, got {list(o.shape)} and {list(do.shape)}")
    B, H, Nq, D = o.shape
    if delta is None:
        delta = torch.empty((B, H, Nq), dtype=torch.float32, device=o.device)
    if lse2 is None:
        lse2 = torch.empty((B, H, Nq), dtype=torch.float32, device=o.device)
    stride_lh = _stat_stride(B, H, Nq, lse=lse, dlse=dlse, delta=delta, lse2=lse2)
    grid = (triton.cdiv(Nq, ATTENTION_BLOCK_M), B * H)
    kernel[grid](
        o, do, lse, dlse, delta, lse2,
        o.stride(0), o.stride(1), o.stride(2),
        do.stride(0), do.stride(1), do.stride(2),
        stride_lh, H, Nq,
        HEAD_DIM=D, BLOCK_M=ATTENTION_BLOCK_M,
    )  # fmt: skip
    return delta, lse2


@dataclasses.dataclass(frozen=True)
class _BwdSpec:
    """One backward case: the forward's inputs (``Nq`` queries against ``Nk`` keys, causal or not),
    ``dO`` and ``dlse`` random; q, k, v, O and dO in ``dtype`` and ``layout``."""

    B: int
    H: int
    Nq: int
    Nk: int
    D: int = 16
    dtype: torch.dtype = torch.float32
    layout: str = "bhnd"
    causal: bool = False  # with Nq > Nk the first Nq − Nk queries see no key: O = 0, lse = −inf
    do_layout: Optional[str] = None  # dO's own layout (default: layout)


def _forward64(q, k, v, causal: bool):
    """O and lse of (bottom-right causal) attention in float64: O = 0 and lse = −inf for a query
    that sees no key."""
    allowed = visible_keys(q.shape[2], k.shape[2], causal=causal)
    s = (q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[3])).masked_fill(~allowed, NEG_INF)
    lse = torch.logsumexp(s, dim=-1)
    seen = torch.isfinite(lse)[..., None]
    p = torch.where(seen, torch.exp(s - torch.where(seen, lse[..., None], 0.0)), 0.0)
    return p @ v.double(), lse


def _backward_tensors(spec: _BwdSpec, gen: torch.Generator) -> dict:
    """Fresh q, k, v, dO in the spec's dtype, the forward's O (rounded to it) and float32 lse, a
    float32 dlse, and the statistics the dK/dV kernel reads: lse2 and δ (float32)."""
    B, H, Nq, Nk, D = spec.B, spec.H, spec.Nq, spec.Nk, spec.D
    q, k, v, do = (torch.randn(B, H, n, D, generator=gen).to(spec.dtype) for n in (Nq, Nk, Nk, Nq))
    o, lse = _forward64(q, k, v, spec.causal)
    dlse = torch.randn(B, H, Nq, generator=gen).float()
    o = o.to(spec.dtype)
    delta, lse2 = attention_bwd_preprocess_ref(o, do, lse.float(), dlse)
    return {"q": q, "k": k, "v": v, "do": do, "o": o, "lse": lse.float(), "dlse": dlse, "delta": delta.float(), "lse2": lse2.float()}


def _preprocess_inputs(o, do, lse, dlse, layout: str, do_layout: Optional[str] = None) -> dict:
    return {
        "o": guarded_heads(o, layout, pad=KEY_PAD),
        "do": guarded_heads(do, do_layout or layout, pad=KEY_PAD),
        # 0 around lse, not NaN: an unmasked row past Nq then stores lse2 = 0 where no output
        # lies, which shows (a stored NaN would not: the margins are NaN)
        "lse": _stat_guard(lse.float(), fill=0.0),
        "dlse": _stat_guard(dlse.float()),
    }


def _preprocess_run(fn, inp: dict) -> dict:
    o = inp["o"].view
    B, H, Nq, _ = o.shape
    delta, lse2 = (_stat_guard(torch.full((B, H, Nq), float("nan"))) for _ in range(2))
    _, inputs_changed = run_guarded(launch_attention_bwd_preprocess, fn, (inp["o"], inp["do"], inp["lse"], inp["dlse"]), (delta, lse2))
    return {
        "delta": delta.view,
        "lse2": lse2.view,
        "outside": {"delta": delta.outside_written(), "lse2": lse2.outside_written()},
        "inputs_changed": inputs_changed,
        "guards": (delta, lse2),
    }


def _preprocess_expected(inp: dict) -> dict:
    delta, lse2 = attention_bwd_preprocess_ref(inp["o"].view, inp["do"].view, inp["lse"].view, inp["dlse"].view)
    return {"delta": delta, "lse2": lse2}


PREPROCESS_RTOL = TOLERANCE[torch.float32]
"""δ and lse2 are float32 whatever the dtype of O and dO: a kernel that sums in float32 is that close."""

DELTA_HINT = "δ = Σ_d dO·O − dlse for each query row: load both tiles as float32 (rows past Nq masked), multiply, sum over axis 1"
LSE2_HINT = "lse2 = lse · log2(e), and +inf where lse = −inf"


def _delta_hint(got: torch.Tensor, inp: dict, rtol: float) -> str:
    o, do, dlse = inp["o"].view, inp["do"].view, inp["dlse"].view.double().cpu()
    rowsum = (o.double().cpu() * do.double().cpu()).sum(-1)
    known = [
        (rowsum, "δ = rowsum(dO ⊙ O) misses − dlse: the logsumexp's gradient adds P ⊙ dlse to dS, which is − dlse in δ"),
        (rowsum + dlse, "δ has + dlse where it needs − dlse: dS = P ⊙ (dP − rowsum(dO ⊙ O) + dlse) = P ⊙ (dP − δ)"),
        (dlse - rowsum, "δ has the wrong sign: δ = rowsum(dO ⊙ O) − dlse"),
    ]
    for candidate, hint in known:
        if matches(got, candidate, rtol):
            return hint
    return DELTA_HINT


def _lse2_hint(got: torch.Tensor, inp: dict, rtol: float) -> str:
    lse = inp["lse"].view.double().cpu()
    finite = torch.isfinite(lse)
    g = got.detach().double().cpu()
    for candidate, hint in (
        (lse, "lse2 = lse: the kernels compute P with exp2 (one instruction on a GPU), so the logsumexp goes to base 2, lse2 = lse · log2(e)"),
        (lse * math.log(2.0), "lse2 = lse · ln 2: to base 2 multiply by log2(e) = 1/ln 2, not by ln 2"),
    ):
        if matches(g[finite], candidate[finite], rtol):
            return hint
    return LSE2_HINT


def _compare_preprocess(got: dict, expected: dict, inp: dict) -> Verdict:
    rtol = PREPROCESS_RTOL
    problems, errors = [], []
    delta = compare_tensors(
        {"out": got["delta"], "outside": got["outside"]["delta"], "inputs_changed": got["inputs_changed"]}, expected["delta"], rtol=rtol
    )
    if delta.error is not None:
        errors.append(delta.error)
    if not delta.passed:
        hint = f". {_delta_hint(got['delta'], inp, rtol)}" if "wrong values" in delta.detail else ""
        problems.append(f"delta: {delta.detail}{hint}")
    lse2, want = got["lse2"].detach().double().cpu(), expected["lse2"]
    empty = torch.isposinf(want)
    wrong_empty = empty & ~torch.isnan(lse2) & (lse2 != INF)
    if bool(wrong_empty.any()):
        value = lse2[wrong_empty][0].item()
        problems.append(
            f"lse2: {int(wrong_empty.sum())} row(s) whose query sees no key (lse = −inf) hold {value:g}, expected +inf: "
            "then P = 2^(s − lse2) is 0 there, where −inf would make it inf"
        )
        errors.append(INF)
    shown = torch.where(empty & ~torch.isnan(lse2), 0.0, lse2)
    finite = compare_tensors({"out": shown, "outside": got["outside"]["lse2"]}, torch.where(empty, 0.0, want), rtol=rtol)
    if finite.error is not None:
        errors.append(finite.error)
    if not finite.passed:
        hint = f". {_lse2_hint(lse2, inp, rtol)}" if "wrong values" in finite.detail else ""
        problems.append(f"lse2: {finite.detail}{hint}")
    numbers = [e for e in errors if not math.isnan(e)]
    error = max(numbers) if numbers else (float("nan") if errors else None)
    verdict = Verdict(not problems, error, "; ".join(problems))
    pairs = [(got["delta"], expected["delta"]), (got["lse2"], expected["lse2"])]
    return with_picture(verdict, lambda: _stat_picture(pairs, rtol, "query rows by (batch, head): δ, then lse2"), *got["guards"])


PREPROCESS = CaseTemplate(_preprocess_run, _preprocess_expected, _compare_preprocess)


def _preprocess_case(name: str, spec: _BwdSpec) -> Case:
    def inputs(gen):
        t = _backward_tensors(spec, gen)
        return _preprocess_inputs(t["o"], t["do"], t["lse"], t["dlse"], spec.layout, spec.do_layout)

    return PREPROCESS.case(name, inputs, dtype=spec.dtype)


def attention_bwd_preprocess_cases() -> list[Case]:
    return [
        _preprocess_case("float32 B=1 H=2, Nq=64, D=16: whole blocks", _BwdSpec(1, 2, 64, 48)),
        _preprocess_case("ragged rows: Nq=37, B=2 H=3, D=32", _BwdSpec(2, 3, 37, 50, 32)),
        _preprocess_case("one query (decode), H=4, D=64", _BwdSpec(1, 4, 1, 77, 64)),
        _preprocess_case("causal Nq=40 > Nk=24: 16 queries see no key (lse = −inf)", _BwdSpec(1, 2, 40, 24, causal=True)),
        _preprocess_case("[B, N, H, D] storage, B=2 H=2, Nq=50", _BwdSpec(2, 2, 50, 50, layout="bnhd")),
        _preprocess_case("dO in [B, N, H, D] storage, O not: Nq=29", _BwdSpec(1, 3, 29, 40, do_layout="bnhd")),
        _preprocess_case("float16 O and dO, Nq=45, D=32", _BwdSpec(1, 2, 45, 60, 32, dtype=torch.float16)),
        _preprocess_case("bfloat16 O and dO, causal Nq=33 > Nk=20", _BwdSpec(2, 1, 33, 20, dtype=torch.bfloat16, causal=True)),
    ]


def try_attention_bwd_preprocess(kernel, o: torch.Tensor, do: torch.Tensor, lse: torch.Tensor, dlse: torch.Tensor) -> Trial:
    """Exercise 7d's "try it": the kernel on copies of ``o``, ``do [B, H, Nq, D]``, ``lse`` and
    ``dlse [B, H, Nq]`` in NaN-padded buffers, δ and lse2 poisoned with NaN; shows the largest
    difference of each from the float64 formula, a picture of which query rows are right, and
    the verdict."""
    inputs = _preprocess_inputs(*(t.detach().cpu() for t in (o, do, lse, dlse)), "bhnd")

    def show(got, expected):
        lse2, want = got["lse2"].detach().double().cpu(), expected["lse2"]
        right_inf = torch.isinf(want) & (lse2 == want)  # +inf where it belongs: no difference
        pairs = [(got["delta"], expected["delta"]), (got["lse2"], expected["lse2"])]
        return [
            ("inputs:", f"O and dO {list(inputs['o'].view.shape)} {dtype_name(inputs['o'].view.dtype)}"),
            ("max |δ − formula|:", largest_difference(got["delta"], expected["delta"])),
            ("max |lse2 − formula|:", largest_difference(torch.where(right_inf, 0.0, lse2), torch.where(right_inf, 0.0, want))),
            ("picture:", _stat_picture(pairs, PREPROCESS_RTOL, "query rows: δ, then lse2")),
        ]

    return PREPROCESS.trial(kernel, inputs, title="attention_bwd_preprocess_kernel", show=show)


# ---- Exercise 7e: dk and dv of a block of keys --------------------------------------------------


def launch_attention_dkdv(kernel, q, k, v, do, lse2, delta, dk: Optional[torch.Tensor] = None, dv: Optional[torch.Tensor] = None):
    """The given launcher of exercise 7e: ``q``, ``do [B, H, Nq, D]``, ``k``, ``v [B, H, Nk, D]``
    (any strides, unit along ``D``), ``lse2`` and ``delta`` float32 ``[B, H, Nq]`` (exercise 7d's
    outputs); grid ``(cdiv(Nk, 16), B·H)``, program ``(j, b·H + h)`` owning keys ``16·j …`` of one
    head; the kernel gets the eight pointers (``dk`` and ``dv`` last), three strides of ``q``,
    ``k``, ``v``, ``do``, ``dk`` and ``dv`` (batch, head, row), ``stride_lh`` (as in 7d),
    ``H, Nq, Nk``, ``sm_scale = 1/√D``, and ``HEAD_DIM = D, BLOCK_M = BLOCK_N = 16``. Returns
    ``(dk, dv)`` (new, in k's dtype, unless given)."""
    require_kernel(kernel)
    if dk is None:
        dk = torch.empty(tuple(k.shape), dtype=k.dtype, device=k.device)
    if dv is None:
        dv = torch.empty(tuple(v.shape), dtype=v.dtype, device=v.device)
    _require_heads(q=q, k=k, v=v, do=do, dk=dk, dv=dv)
    B, H, Nq, D = q.shape
    Nk = k.shape[2]
    for name, t, n in (("do", do, Nq), ("k", k, Nk), ("v", v, Nk), ("dk", dk, Nk), ("dv", dv, Nk)):
        if tuple(t.shape) != (B, H, n, D):
            raise ValueError(f"{name} must be {[B, H, n, D]} (this exercise has one head per KV head), got {list(t.shape)}")
    stride_lh = _stat_stride(B, H, Nq, lse2=lse2, delta=delta)
    grid = (triton.cdiv(Nk, ATTENTION_BLOCK_N), B * H)
    kernel[grid](
        q, k, v, do, lse2, delta, dk, dv,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        do.stride(0), do.stride(1), do.stride(2),
        dk.stride(0), dk.stride(1), dk.stride(2),
        dv.stride(0), dv.stride(1), dv.stride(2),
        stride_lh, H, Nq, Nk,
        1.0 / math.sqrt(D),
        HEAD_DIM=D, BLOCK_M=ATTENTION_BLOCK_M, BLOCK_N=ATTENTION_BLOCK_N,
    )  # fmt: skip
    return dk, dv


def _dkdv_inputs(q, k, v, do, lse2, delta, layout: str) -> dict:
    return {
        "q": guarded_heads(q, layout, pad=KEY_PAD),
        "k": guarded_heads(k, layout, pad=KEY_PAD),
        "v": guarded_heads(v, layout, pad=KEY_PAD),
        "do": guarded_heads(do, layout, pad=KEY_PAD),
        "lse2": _stat_guard(lse2.float()),
        "delta": _stat_guard(delta.float()),
        "layout": layout,
    }


def _dkdv_run(fn, inp: dict) -> dict:
    k = inp["k"].view
    dk, dv = (guarded_heads(torch.full(tuple(k.shape), float("nan"), dtype=k.dtype), inp["layout"], pad=KEY_PAD) for _ in range(2))
    names = ("q", "k", "v", "do", "lse2", "delta")
    _, inputs_changed = run_guarded(launch_attention_dkdv, fn, tuple(inp[n] for n in names), (dk, dv))
    return {
        "dk": dk.view,
        "dv": dv.view,
        "outside": {"dk": dk.outside_written(), "dv": dv.outside_written()},
        "inputs_changed": inputs_changed,
        "guards": (dk, dv),
    }


def _dkdv_expected(inp: dict) -> dict:
    dk, dv = attention_dkdv_ref(*(inp[n].view for n in ("q", "k", "v", "do", "lse2", "delta")))
    return {"dk": dk, "dv": dv}


DKDV_HINT = (
    "in the transposed tile (keys × queries): s = k qᵀ · qk_scale, P = exp2(s − lse2[None, :]), dv += P dO, dP = v dOᵀ, "
    "dS = P ⊙ (dP − δ[None, :]), dk += dS q; after the loop dk *= sm_scale"
)


def _dkdv_candidates(inp: dict) -> list[tuple[str, tuple[torch.Tensor, torch.Tensor]]]:
    """The known wrong answers, each ``(what went wrong, (dk, dv))`` in float64."""
    q, k, v, do = (inp[n].view.double().cpu() for n in ("q", "k", "v", "do"))
    lse2, delta = (inp[n].view.double().cpu() for n in ("lse2", "delta"))
    Nk = k.shape[2]
    c = q.shape[-1] ** -0.5
    right = (lse2[..., None], delta[..., None])
    return [
        (
            "P from exp where it needs exp2: lse2 and s · qk_scale are in base-2 units (qk_scale = sm_scale · log2(e)), "
            "so P = exp2(s · qk_scale − lse2)",
            _dkdv(q, k, v, do, *right, exp2=False),
        ),
        ("dk misses the factor sm_scale: S = sm_scale · q kᵀ, so dk = sm_scale · dSᵀ q", _dkdv(q, k, v, do, *right, scale=1.0)),
        (
            "dk scaled by qk_scale: log2(e) belongs in the exponent only; dk = sm_scale · dSᵀ q",
            _dkdv(q, k, v, do, *right, scale=c * LOG2E),
        ),
        ("dS misses − δ: dS = P ⊙ (dP − δ), δ = rowsum(dO ⊙ O) − dlse", _dkdv(q, k, v, do, *right, use_delta=False)),
        ("dk from P where it needs dS: dk = sm_scale · dSᵀ q", _dkdv(q, k, v, do, *right, dk_from_p=True)),
        (
            "δ broadcast along the wrong axis: the tile is keys × queries, so δ of query i is δ[None, :], a row, not δ[:, None]",
            _dkdv(q, k, v, do, right[0], _wrong_axis(delta, Nk, 0.0)),
        ),
        (
            "lse2 broadcast along the wrong axis: the tile is keys × queries, so lse2 of query i is lse2[None, :], a row, not lse2[:, None]",
            _dkdv(q, k, v, do, _wrong_axis(lse2, Nk, INF), right[1]),
        ),
    ]


def _dkdv_hint(name: str, got: torch.Tensor, inp: dict, rtol: float, candidates) -> str:
    """The known mistake ``got`` matches, or "" (the verdict then ends with :data:`DKDV_HINT`, once)."""
    if not bool(got.detach().double().cpu().any()):
        return "all zeros: nothing was added to it in the loop (are the TODO parts still `pass`?)"
    index = 0 if name == "dk" else 1
    for text, answer in candidates:
        if matches(got, answer[index], rtol):
            return text
    return ""


def _compare_dkdv(got: dict, expected: dict, inp: dict) -> Verdict:
    rtol = TOLERANCE[inp["k"].view.dtype]
    problems, errors, candidates, unnamed = [], [], None, False
    for i, name in enumerate(("dk", "dv")):
        verdict = compare_tensors(
            {"out": got[name], "outside": got["outside"][name], "inputs_changed": got["inputs_changed"] and i == 0}, expected[name], rtol=rtol
        )
        if verdict.error is not None:
            errors.append(verdict.error)
        if verdict.passed:
            continue
        detail = verdict.detail
        if "wrong values" in detail:
            candidates = candidates if candidates is not None else _dkdv_candidates(inp)
            hint = _dkdv_hint(name, got[name], inp, rtol, candidates)
            detail += f". {hint}" if hint else ""
            unnamed = unnamed or not hint
        elif "NaN" in detail and inp["q"].view.shape[2] % ATTENTION_BLOCK_M:
            detail += (
                ". The last block of queries runs past Nq, and the rows there hold NaN in this check: load q and dO with "
                "the mask offs_m < Nq (other = 0), lse2 with other = +inf (P = 0 there)"
            )
        problems.append(f"{name}: {detail}")
    if unnamed:
        problems.append(DKDV_HINT)
    finite = [e for e in errors if not math.isnan(e)]
    error = max(finite) if finite else (float("nan") if errors else None)
    verdict = Verdict(not problems, error, "; ".join(problems))
    pairs = [(got["dk"], expected["dk"]), (got["dv"], expected["dv"])]
    return with_picture(verdict, lambda: head_rows_map(pairs, rtol=rtol, name="key rows by (batch, head): dk, then dv", width=48), *got["guards"])


DKDV = CaseTemplate(_dkdv_run, _dkdv_expected, _compare_dkdv)


def _dkdv_case(name: str, spec: _BwdSpec) -> Case:
    def inputs(gen):
        t = _backward_tensors(spec, gen)
        return _dkdv_inputs(t["q"], t["k"], t["v"], t["do"], t["lse2"], t["delta"], spec.layout)

    return DKDV.case(name, inputs, dtype=spec.dtype)


def attention_dkdv_cases() -> list[Case]:
    return [
        _dkdv_case("float32 B=1 H=2, Nq=Nk=64, D=16: whole blocks", _BwdSpec(1, 2, 64, 64)),
        _dkdv_case("ragged: Nq=37, Nk=50, B=2 H=3, D=32", _BwdSpec(2, 3, 37, 50, 32)),
        _dkdv_case("one query (decode), Nk=77, H=2", _BwdSpec(1, 2, 1, 77)),
        _dkdv_case("Nk=17: one key past a block, Nq=40", _BwdSpec(1, 2, 40, 17)),
        _dkdv_case("Nq=100 > Nk=29, D=64", _BwdSpec(1, 1, 100, 29, 64)),
        _dkdv_case("[B, N, H, D] storage, B=2 H=2, Nq=45, Nk=45", _BwdSpec(2, 2, 45, 45, layout="bnhd")),
        _dkdv_case("float16, Nq=40, Nk=70", _BwdSpec(1, 2, 40, 70, dtype=torch.float16)),
        _dkdv_case("bfloat16, Nq=33, Nk=60", _BwdSpec(1, 2, 33, 60, dtype=torch.bfloat16)),
    ]


def try_attention_dkdv(kernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor) -> Trial:
    """Exercise 7e's "try it": the forward's lse2 and δ (no gradient of lse) computed in float64
    from ``q, k, v`` and ``do``, then the kernel on copies of all six in NaN-padded buffers,
    ``dk`` and ``dv`` poisoned with NaN; shows the largest difference of each from the float64
    answer (autograd's, for a loss ``Σ O ⊙ dO``), a picture of which key rows are right, and the
    verdict."""
    q, k, v, do = (t.detach().cpu() for t in (q, k, v, do))
    o, lse = _forward64(q, k, v, False)
    delta, lse2 = attention_bwd_preprocess_ref(o.to(q.dtype), do, lse.float(), torch.zeros(lse.shape))
    inputs = _dkdv_inputs(q, k, v, do, lse2, delta, "bhnd")
    rtol = TOLERANCE[k.dtype]

    def show(got, expected):
        pairs = [(got["dk"], expected["dk"]), (got["dv"], expected["dv"])]
        return [
            ("inputs:", _shape_text(inputs["q"].view, inputs["k"].view)),
            ("max |dk − reference|:", largest_difference(got["dk"], expected["dk"])),
            ("max |dv − reference|:", largest_difference(got["dv"], expected["dv"])),
            ("picture:", head_rows_map(pairs, rtol=rtol, name="key rows: dk, then dv", width=48)),
        ]

    return DKDV.trial(kernel, inputs, title="attention_dkdv_kernel", show=show)
