r"""Exercises 6a, 6b and 6c (chapter 6): a log-softmax over rows longer than one block; the merge of
two partial softmax states (split-KV attention's last step); and a fused softmax + cross-entropy
loss over vocabulary-length rows.

6a: :math:`\operatorname{log\_softmax}(x)_j = x_j - m - \log s` with :math:`m = \max_k x_k` and
:math:`s = \sum_k e^{x_k - m}`, one row per program, the row walked in blocks of 32 columns (online
or in two passes), every step in float32.

6b: two partial states of one row, :math:`(m_1, s_1, o_1)` and :math:`(m_2, s_2, o_2)`, where
:math:`o_j = \sum_k \operatorname{softmax}_j(x)_k v_k` is the normalized output of half :math:`j`,
merge into the state of the whole row:
:math:`m = \max(m_1, m_2)`, :math:`w_j = s_j e^{m_j - m}`, :math:`s = w_1 + w_2`,
:math:`o = (w_1 o_1 + w_2 o_2) / s`. An empty half is :math:`(-\infty, 0, 0)`; two empty halves
merge into an empty state, :math:`(-\infty, 0, 0)`.

6c: :math:`\mathrm{loss}_i = \operatorname{logsumexp}(x_i) - x_{i, t_i}` with
:math:`\operatorname{logsumexp}(x) = m + \log \sum_k e^{x_k - m}`, and 0 where
:math:`t_i` is ``ignore_index`` (−100): ``F.cross_entropy(x, t, reduction="none")``.
"""

from __future__ import annotations

import dataclasses
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
    element_map,
    format_values,
    guarded,
    kernel_device,
    largest_difference,
    matches,
    poisoned_output,
    require_kernel,
    require_unit_column_stride,
    run_guarded,
    run_one_output,
    show_first_rows,
    with_picture,
)
from tritonforge.reference import TOLERANCE

__all__ = [
    "CROSS_ENTROPY_BLOCK_N",
    "IGNORE_INDEX",
    "LOG_SOFTMAX_BLOCK_N",
    "cross_entropy_cases",
    "cross_entropy_ref",
    "launch_cross_entropy",
    "launch_log_softmax",
    "launch_merge_states",
    "log_softmax_cases",
    "log_softmax_ref",
    "merge_block_d",
    "merge_states_cases",
    "merge_states_ref",
    "softmax_state",
    "try_cross_entropy",
    "try_log_softmax",
    "try_merge_states",
]

NEG_INF = float("-inf")

# ----------------------------------------------------------------------------------------------
# Exercise 6a (chapter 6): log-softmax of rows longer than one block
# ----------------------------------------------------------------------------------------------

LOG_SOFTMAX_BLOCK_N = 32
"""The block of exercise 6a, fixed by its launcher and smaller than most rows of the check: a row
of ``N`` columns takes ``cdiv(N, 32)`` blocks, the last one ragged unless 32 divides ``N``."""

ROW_SENTINEL = 30_000.0
"""What surrounds the rows of every 6a and 6c input: larger than any value of a row (and
representable in float16), so a load that reads past a row's end takes it for the row's maximum
and the answer is wrong on every run, not when the neighbour happens to be large."""

LARGE_LOGIT = 88.0
"""Above this ``exp`` overflows float32 (``e^88.7`` is its largest value); below ``-LARGE_LOGIT``
every ``exp`` underflows to 0: an answer NaN or infinite only in rows of such values means an
``exp`` taken without subtracting the row's maximum first."""


def log_softmax_ref(x: torch.Tensor) -> torch.Tensor:
    """``log_softmax(x, dim=-1)`` in float64 (``-inf`` where ``x`` is ``-inf``)."""
    return torch.log_softmax(x.double(), dim=-1)


def launch_log_softmax(kernel, x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The given launcher of exercise 6a: one program per row, ``BLOCK_N`` fixed at
    :data:`LOG_SOFTMAX_BLOCK_N` whatever ``N`` is, so the kernel loops over the row in blocks;
    rows may be strided (unit column stride). Returns ``out`` (a new ``[M, N]`` tensor in x's
    dtype unless one is given)."""
    require_kernel(kernel)
    require_unit_column_stride("x", x)
    M, N = x.shape
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    kernel[(M,)](x, out, x.stride(0), out.stride(0), N, BLOCK_N=LOG_SOFTMAX_BLOCK_N)
    return out


LOG_SOFTMAX_MARGIN = (1, LOG_SOFTMAX_BLOCK_N + 1)


def _log_softmax_guard(x: torch.Tensor, x_layout) -> Guarded:
    """x (``(row stride, storage offset)``) in a buffer of :data:`ROW_SENTINEL`, a block wide past each row."""
    stride, offset = x_layout
    return guarded(x, (stride, 1), offset=offset, margin=LOG_SOFTMAX_MARGIN, device=kernel_device(), fill=ROW_SENTINEL)


def _log_softmax_run(fn, x: Guarded) -> dict:
    M, N = x.view.shape
    out = poisoned_output((M, N), x.view.dtype, margin=(1, LOG_SOFTMAX_BLOCK_N + 3), device=x.view.device.type)
    return run_one_output(launch_log_softmax, fn, (x,), out)


def _log_softmax_expected(x: Guarded) -> torch.Tensor:
    return log_softmax_ref(x.view).cpu()  # on the host, like every tensor the verdict builds beside it


LOG_SOFTMAX_HINT = (
    "m = the row's max, s = Σ exp(x − m) over every block (masked lanes: −inf for the max, "
    "0 for the sum), out = x − m − log(s), stored block by block"
)


LOG_SOFTMAX_MASKED_HINT = (
    "NaN in a row that starts with a block of −inf only suggests a missing −inf guard: its max is −inf after that block, "
    "and exp(−inf − (−inf)) is NaN; "
    "shift by 0 while the running max is still −inf (exp(−inf − 0) = 0 adds nothing)"
)


def _row_list(rows: torch.Tensor) -> str:
    """``rows 2, 3 and 4 of 5`` for a ``[M]`` bool mask."""
    index = [str(i) for i in rows.nonzero().flatten().tolist()]
    listed = index[0] if len(index) == 1 else ", ".join(index[:-1]) + " and " + index[-1]
    return f"row{'s' if len(index) > 1 else ''} {listed} of {rows.numel()}"


def _missing_guard(out64: torch.Tensor, expected: torch.Tensor, x: torch.Tensor) -> Optional[str]:
    """The named mistake when NaN sits in exactly the rows whose first block is all −inf (where an
    unguarded online max is still −inf after a block), and in no other row; else None."""
    bad_rows = (out64.isnan() & ~expected.isnan()).any(dim=-1)
    x64 = x.detach().double().cpu()
    blank_start = torch.isneginf(x64[:, :LOG_SOFTMAX_BLOCK_N]).all(dim=-1) & ~torch.isneginf(x64).all(dim=-1)
    if not bool(bad_rows.any()) or not torch.equal(bad_rows, blank_start):
        return None
    others = "the other rows are free of NaN" if bool((~blank_start).any()) else "every row of this case starts so"
    return (
        f"NaN in the rows whose first block of {LOG_SOFTMAX_BLOCK_N} is all −inf ({_row_list(blank_start)}), "
        f"and {others}: likely a missing −inf guard. After such a block the running max is still −inf and "
        "exp(−inf − (−inf)) is NaN; shift by 0 while the running max is still −inf (exp(−inf − 0) = 0 adds nothing)"
    )


def _online_sum_not_rescaled(x: torch.Tensor) -> torch.Tensor:
    """Known wrong answer: log-softmax with an online sum that keeps each block's terms at the
    shift of their own block, s = Σ_blocks Σ exp(x − m_block), m_block the running max after it."""
    x64 = x.detach().double().cpu()
    m = torch.full(x64.shape[:1], NEG_INF, dtype=torch.float64)
    s = torch.zeros_like(m)
    for start in range(0, x64.shape[1], LOG_SOFTMAX_BLOCK_N):
        block = x64[:, start : start + LOG_SOFTMAX_BLOCK_N]
        m = torch.maximum(m, block.amax(dim=1))
        shift = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        s = s + torch.exp(block - shift[:, None]).sum(dim=1)
    return x64 - m[:, None] - torch.log(s)[:, None]


def _rounded_lse(out64: torch.Tensor, expected: torch.Tensor, x: torch.Tensor, finite: torch.Tensor, rtol: float) -> Optional[str]:
    """The named mistake when every wrong row is off by one constant along the row, and that
    constant is what rounding ``m + log s`` to float32 costs at that row (``x − (m + log s)``:
    the sum rounded to float32's step at ``m``, then subtracted; a float32 neighbour of it is
    accepted too, for a sum that falls next to a rounding midpoint); else None."""
    x64 = x.detach().double().cpu()
    scale = max(1.0, float(expected[finite].abs().max())) if bool(finite.any()) else 1.0
    tol = rtol * scale
    diff = torch.where(finite, out64 - expected, torch.zeros_like(out64))
    if not bool(torch.isfinite(diff).all()):
        return None
    wrong = (diff.abs() > tol).any(dim=1) & finite.any(dim=1)
    if not bool(wrong.any()):
        return None
    largest = torch.where(finite, diff, torch.full_like(diff, NEG_INF)).amax(dim=1)
    smallest = torch.where(finite, diff, torch.full_like(diff, float("inf"))).amin(dim=1)
    lse = torch.logsumexp(x64, dim=1)  # m + log s, exactly
    rounded = lse.float()
    below = torch.nextafter(rounded, torch.full_like(rounded, NEG_INF))
    above = torch.nextafter(rounded, torch.full_like(rounded, float("inf")))
    offsets = torch.stack([lse - r.double() for r in (rounded, below, above)])
    explained = ((offsets - largest).abs() <= 2 * tol).any(dim=0) & ((largest - smallest) <= 2 * tol)
    if not bool(explained[wrong].all()):
        return None
    step = (above - rounded).double()
    return (
        f"large-magnitude rows lose precision: each wrong row ({_row_list(wrong)}) is off by one constant, the error of "
        f"rounding m + log(s) to float32 (whose step there is up to {float(step[wrong].max()):g}), as when out = x − (m + log(s)); "
        "compute (x − m) − log(s): x − m is exact"
    )


def _compare_infinite(got: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, Optional[str]]:
    """Where ``expected`` is ``-inf`` (x was ``-inf``): a problem unless ``got`` is ``-inf`` there
    too; returns the mask of the finite answers and the problem, if any."""
    got64, exp64 = got.detach().double().cpu(), expected.double().cpu()
    infinite = torch.isinf(exp64)
    bad = infinite & ~(got64 == exp64)
    problem = None
    if bad.any():
        problem = f"{int(bad.sum())} element(s) where x = −inf are not −inf (log-softmax of −inf is −inf; e.g. NaN from −inf − (−inf))"
    return ~infinite, problem


def _overflow_hint(got: torch.Tensor, expected: torch.Tensor, x: torch.Tensor) -> Optional[str]:
    """A sentence if every non-finite answer sits in a row of huge (or hugely negative) values."""
    got64, exp64 = got.detach().double().cpu(), expected.double().cpu()
    bad = ~torch.isfinite(got64) & torch.isfinite(exp64)
    if not bad.any():
        return None
    x64 = x.detach().double().cpu()
    finite_x = torch.where(torch.isfinite(x64), x64, torch.zeros_like(x64))
    extreme_rows = finite_x.abs().amax(dim=-1, keepdim=True) > LARGE_LOGIT
    if (bad & ~extreme_rows.expand_as(bad)).any():
        return None
    return (
        f"{int(bad.sum())} element(s) NaN or inf, all in rows with |x| > {LARGE_LOGIT:g}: exp overflowed (or underflowed to 0): "
        "subtract the row's maximum before exp, s = Σ exp(x − m), then out = x − m − log(s)"
    )


def _compare_log_softmax(got: dict, expected: torch.Tensor, x: Guarded) -> Verdict:
    rtol = TOLERANCE[x.view.dtype]
    finite, infinite_problem = _compare_infinite(got["out"], expected)
    zero = torch.zeros_like(expected)
    finite_out = torch.where(finite, got["out"].detach().double().cpu(), zero)  # −inf answers checked above
    verdict = compare_tensors({**got, "out": finite_out}, torch.where(finite, expected, zero), rtol=rtol)
    problems = [verdict.detail] if not verdict.passed else []
    if infinite_problem:
        problems.append(infinite_problem)
    if not problems:
        return verdict
    out64 = got["out"].detach().double().cpu()
    if bool(out64.isnan().all()):  # nothing written, or NaN everywhere
        detail = "; ".join(problems)
        if bool(torch.isinf(expected).any()):
            detail += f". If your kernel does store: {LOG_SOFTMAX_MASKED_HINT}"
        return Verdict(False, float("nan"), detail)
    named = _missing_guard(out64, expected, x.view)
    if named is not None:  # the symptom names the mistake: say it first, then what else was seen
        nan = int((out64.isnan() & ~expected.isnan()).sum())
        seen = [f"{nan} of {out64.numel()} elements NaN"] + [
            p for p in verdict.detail.split("; ") if not verdict.passed and "are NaN: never written" not in p
        ]
        return Verdict(False, float("nan"), f"{named} ({'; '.join(seen)})")
    else:
        hint = _log_softmax_hint(out64, expected, x.view, finite, rtol, wrong_values="wrong values" in verdict.detail)
        detail = "; ".join(problems) + (f". {hint}" if hint else "")
    verdict = Verdict(False, verdict.error, detail)
    if bool(torch.isinf(expected).any()):
        return verdict  # a picture needs finite answers to measure by
    return with_picture(verdict, lambda: element_map(got["guard"], expected, rtol=rtol, name="out"), got["guard"])


def _log_softmax_hint(
    out64: torch.Tensor, expected: torch.Tensor, x: torch.Tensor, finite: torch.Tensor, rtol: float, *, wrong_values: bool
) -> Optional[str]:
    """What the symptom suggests, most specific first: exp overflowed, NaN from a block of −inf,
    the sentinel read past a row, the softmax itself, an online sum not rescaled, ``m + log s``
    rounded; else the recipe (:data:`LOG_SOFTMAX_HINT`)."""
    hint = _overflow_hint(out64, expected, x)
    if hint is None and bool(torch.isinf(expected).any()) and bool(out64.isnan().any()):
        hint = LOG_SOFTMAX_MASKED_HINT
    if hint is not None or not wrong_values:
        return hint
    zero = torch.zeros_like(expected)
    if bool((out64[finite] < -ROW_SENTINEL / 2).any()):
        return (
            f"{ROW_SENTINEL:g} is the value the check puts around each row: a load read past the end of a row "
            "and took it for the maximum; mask every load with start + cols < N, other=−inf"
        )
    if matches(torch.where(finite, out64, zero), torch.where(finite, expected.exp(), zero), rtol):
        return "this is the softmax, exp(x − m)/s: the exercise asks for its log, x − m − log(s)"
    if matches(torch.where(finite, out64, zero), torch.where(finite, _online_sum_not_rescaled(x), zero), rtol):
        return (
            "running sum not rescaled when the max grows: the output matches an online sum whose earlier terms keep "
            "the old max's shift; when a block raises the max from m to m_new, multiply s by exp(m − m_new) before adding the block"
        )
    return _rounded_lse(out64, expected, x, finite, rtol) or LOG_SOFTMAX_HINT


LOG_SOFTMAX = CaseTemplate(_log_softmax_run, _log_softmax_expected, _compare_log_softmax)


@dataclasses.dataclass(frozen=True)
class _RowSpec:
    """An ``[M, N]`` input of 6a: where it lives and what its values are."""

    shape: tuple[int, int]
    dtype: torch.dtype = torch.float32
    layout: tuple[int, int] = (0, 0)  # (row stride, offset); 0 means N, 0
    values: str = "normal"  # "normal", "rising", "huge", "tiny", "very large", "left padded", "padded rows"


VERY_LARGE_LOGIT = 1.0e7
"""The rows of one 6a case sit near ``−10⁷``, where float32's step is 1: ``x − m`` is exact, but
``m + log(s)`` rounds by up to 0.5, thousands of times the tolerance."""

PADDED_PREFIXES = (0, 20, 32, 64, 96)
"""The −inf columns at the start of each row of one 6a case (N = 100): none; part of the first
block; exactly one block; two blocks; all but the ragged tail of 4. The last three leave a running
max at −inf after a block."""


def _log_softmax_values(spec: _RowSpec, gen: torch.Generator) -> torch.Tensor:
    M, N = spec.shape
    x = (2.0 * torch.randn(M, N, generator=gen)).clamp(-4.0, 4.0)  # bounded: every known slip is off by a margin
    if spec.values == "rising":  # the maximum grows in every block: an online sum must be rescaled each time
        x = torch.linspace(-6.0, 6.0, N)[None, :] + 0.2 * torch.rand(M, N, generator=gen)
    elif spec.values == "huge":  # exp(x) overflows float32 at every element
        x = 10_000.0 + x
    elif spec.values == "tiny":  # exp(x) underflows to 0 at every element
        x = -10_000.0 + x
    elif spec.values == "very large":  # float32's step is 1 here: m + log(s) rounds by up to 0.5, x − m is exact
        x = -VERY_LARGE_LOGIT + x
    elif spec.values == "left padded":  # the first 40 columns masked out: the first block holds only −inf
        x[:, :40] = NEG_INF
    elif spec.values == "padded rows":  # row i starts with PADDED_PREFIXES[i] columns of −inf
        for row, prefix in enumerate(PADDED_PREFIXES[:M]):
            x[row, :prefix] = NEG_INF
    return x.to(spec.dtype)


def _log_softmax_case(name: str, spec: _RowSpec) -> Case:
    N = spec.shape[1]

    def inputs(gen):
        stride, offset = spec.layout
        return _log_softmax_guard(_log_softmax_values(spec, gen), (stride or N, offset))

    return LOG_SOFTMAX.case(name, inputs, dtype=spec.dtype)


def log_softmax_cases() -> list[Case]:
    return [
        _log_softmax_case("float32 4×100: three blocks of 32 and a ragged one of 4", _RowSpec((4, 100))),
        _log_softmax_case("N < BLOCK_N: 5×20, one ragged block", _RowSpec((5, 20))),
        _log_softmax_case("N = 64: exactly two blocks", _RowSpec((3, 64))),
        _log_softmax_case("N = 1, 4×1 (every answer is 0)", _RowSpec((4, 1))),
        _log_softmax_case("rising rows 3×150: the max grows in every block", _RowSpec((3, 150), values="rising")),
        _log_softmax_case("values near +10⁴, 4×100: exp(x) overflows", _RowSpec((4, 100), values="huge")),
        _log_softmax_case("values near −10⁴, 3×77: exp(x) underflows to 0", _RowSpec((3, 77), values="tiny")),
        _log_softmax_case("values near −10⁷, 8×100: float32's step there is 1", _RowSpec((8, 100), values="very large")),
        _log_softmax_case("first 40 columns −inf (a mask), 4×100", _RowSpec((4, 100), values="left padded")),
        _log_softmax_case(
            "−inf prefixes of 0, 20, 32, 64, 96 columns, 5×100 (the last row: its ragged tail only)",
            _RowSpec((5, 100), values="padded rows"),
        ),
        _log_softmax_case("strided rows 5×77 (row stride 90, offset 3)", _RowSpec((5, 77), layout=(90, 3))),
        _log_softmax_case("float16 6×150", _RowSpec((6, 150), torch.float16)),
        _log_softmax_case("bfloat16 4×90", _RowSpec((4, 90), torch.bfloat16)),
    ]


def _blocks(out: torch.Tensor, expected: torch.Tensor, rtol: float, block: int) -> str:
    """``ok``, ``wrong`` or ``NaN`` for each block of columns (all rows together)."""
    out64, exp64 = out.detach().double().cpu(), expected.double().cpu()
    finite = torch.isfinite(exp64)
    tol = rtol * max(1.0, float(exp64[finite].abs().max())) if finite.any() else rtol
    words = []
    for start in range(0, out64.shape[1], block):
        o, e = out64[:, start : start + block], exp64[:, start : start + block]
        if bool((o.isnan() & ~e.isnan()).any()):
            words.append("NaN")
            continue
        same_inf = (o == e) & torch.isinf(e)
        diff = torch.where(same_inf, torch.zeros_like(o), (o - e).abs())
        words.append("ok" if float(diff.max()) <= tol else "wrong")
    return " ".join(words)


def try_log_softmax(kernel, x: torch.Tensor) -> Trial:
    """Exercise 6a's "try it": the kernel (``BLOCK_N = 32``) on a copy of ``x`` (same row stride)
    surrounded by :data:`ROW_SENTINEL`, ``out`` poisoned with NaN; shows the first row of yours
    and of ``torch.log_softmax`` in float64, per block of 32 columns whether it is right, and the
    verdict."""
    inputs = _log_softmax_guard(x.detach().cpu(), (x.stride(0), 0))

    def show(got, expected):
        return [
            *show_first_rows(got, expected),
            ("blocks of 32 columns:", _blocks(got["out"], expected, TOLERANCE[x.dtype], LOG_SOFTMAX_BLOCK_N)),
        ]

    title = f"log_softmax_kernel on x {list(x.shape)} {dtype_name(x.dtype)}"
    return LOG_SOFTMAX.trial(kernel, inputs, title=title, show=show)


# ----------------------------------------------------------------------------------------------
# Exercise 6b (chapter 6): merge two partial softmax states (split-KV attention's last step)
# ----------------------------------------------------------------------------------------------


def merge_states_ref(
    m1: torch.Tensor, s1: torch.Tensor, o1: torch.Tensor, m2: torch.Tensor, s2: torch.Tensor, o2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The merged state ``(m, s, o)`` of two partial ones, in float64: ``m = max(m1, m2)``,
    ``w_j = s_j·exp(m_j − m)`` (0 for an empty half, ``m_j = −inf``), ``s = w1 + w2``,
    ``o = (w1·o1 + w2·o2) / s``; two empty halves give ``(−inf, 0, 0)``."""
    m1, s1, o1, m2, s2, o2 = (t.double() for t in (m1, s1, o1, m2, s2, o2))
    m = torch.maximum(m1, m2)
    shift = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # both empty: nothing to shift by
    w1, w2 = s1 * torch.exp(m1 - shift), s2 * torch.exp(m2 - shift)
    s = w1 + w2
    o = (w1[:, None] * o1 + w2[:, None] * o2) / torch.where(s > 0, s, torch.ones_like(s))[:, None]
    return m, s, o


def softmax_state(x: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The state ``(m, s, o)`` of rows ``x [M, n]`` against values ``v [n, D]`` in float64:
    ``m = max x``, ``s = Σ exp(x − m)``, ``o = softmax(x) @ v``; ``(−inf, 0, 0)`` for ``n = 0``."""
    x, v = x.double(), v.double()
    M, D = x.shape[0], v.shape[1]
    if x.shape[1] == 0:
        return torch.full((M,), NEG_INF, dtype=torch.float64), torch.zeros(M, dtype=torch.float64), torch.zeros(M, D, dtype=torch.float64)
    m = x.amax(dim=1)
    p = torch.exp(x - m[:, None])
    s = p.sum(dim=1)
    return m, s, (p @ v) / s[:, None]


def merge_block_d(D: int) -> int:
    """Exercise 6b's ``BLOCK_D``: the power of two at least ``D`` (one block holds a whole row of ``o``)."""
    return triton.next_power_of_2(max(D, 1))


def launch_merge_states(kernel, m1, s1, o1, m2, s2, o2, m=None, s=None, o=None):
    """The given launcher of exercise 6b: one program per row, ``BLOCK_D`` the power of two at
    least ``D``; ``m1, s1, m2, s2`` and the outputs ``m, s`` are float32 ``[M]`` (contiguous),
    ``o1, o2`` and the output ``o`` are ``[M, D]`` in one dtype, each with its own row stride (unit
    column stride). Returns ``(m, s, o)`` (new tensors unless given)."""
    require_kernel(kernel)
    M, D = o1.shape
    if m is None:
        m = torch.empty(M, dtype=torch.float32, device=o1.device)
    if s is None:
        s = torch.empty(M, dtype=torch.float32, device=o1.device)
    if o is None:
        o = torch.empty((M, D), dtype=o1.dtype, device=o1.device)
    kernel[(M,)](
        m1, s1, o1, m2, s2, o2, m, s, o,
        o1.stride(0), o2.stride(0), o.stride(0),
        D,
        BLOCK_D=merge_block_d(D),
    )  # fmt: skip
    return m, s, o


MERGE_STATE_MARGIN = (8,)  # NaN past each [M] vector


def _merge_guard(states: dict, layouts: tuple[int, int]) -> dict:
    """``m1, s1, m2, s2`` (float32 ``[M]``) and ``o1, o2`` (``[M, D]`` with the given row
    strides, offsets 1 and 2) in NaN-padded buffers."""
    device = kernel_device()
    D = states["o1"].shape[1]
    margin = (1, merge_block_d(D) + 1)
    placed = {k: guarded(states[k].float(), (1,), margin=MERGE_STATE_MARGIN, device=device) for k in ("m1", "s1", "m2", "s2")}
    for i, (k, stride) in enumerate(zip(("o1", "o2"), layouts)):
        placed[k] = guarded(states[k], (stride or D, 1), offset=1 + i, margin=margin, device=device)
    return placed


def _merge_run(fn, inp: dict) -> dict:
    M, D = inp["o1"].view.shape
    device = inp["o1"].view.device.type
    m = poisoned_output((M,), torch.float32, margin=MERGE_STATE_MARGIN, device=device)
    s = poisoned_output((M,), torch.float32, margin=MERGE_STATE_MARGIN, device=device)
    o = poisoned_output((M, D), inp["o1"].view.dtype, margin=(1, merge_block_d(D) + 3), device=device)
    _, inputs_changed = run_guarded(launch_merge_states, fn, [inp[k] for k in ("m1", "s1", "o1", "m2", "s2", "o2")], (m, s, o))
    return {
        "m": m.view,
        "s": s.view,
        "o": o.view,
        "outside": {"m": m.outside_written(), "s": s.outside_written(), "o": o.outside_written()},
        "inputs_changed": inputs_changed,
        "guard": o,
    }


def _merge_expected(inp: dict) -> dict:
    m, s, o = merge_states_ref(*(inp[k].view for k in ("m1", "s1", "o1", "m2", "s2", "o2")))
    return {"m": m.cpu(), "s": s.cpu(), "o": o.cpu()}  # on the host, like every tensor the verdict builds beside it


MERGE_EMPTY_HINT = (
    "NaN only in rows where both halves are empty (m1 = m2 = −inf): exp(−inf − (−inf)) = exp(NaN), and 0/0 is NaN; "
    "an empty half contributes nothing: shift by 0 when m = −inf, and divide o by s only where s > 0"
)
MERGE_HINT = "m = max(m1, m2), w1 = s1·exp(m1 − m), w2 = s2·exp(m2 − m), s = w1 + w2, o = (w1·o1 + w2·o2)/s"


def _merge_hint(got: dict, inp: dict, expected: dict, rtol_o: float) -> str:
    rtol = 1e-4  # s: float32 from float32 inputs
    m1, s1, o1, m2, s2, o2 = (inp[k].view.double().cpu() for k in ("m1", "s1", "o1", "m2", "s2", "o2"))
    both_empty = torch.isinf(m1) & torch.isinf(m2)
    nan_rows = got["s"].detach().double().cpu().isnan() | got["o"].detach().double().cpu().isnan().any(dim=1)
    if nan_rows.any() and both_empty.any() and not (nan_rows & ~both_empty).any():
        return MERGE_EMPTY_HINT
    m = torch.maximum(m1, m2)
    s_bad = ~torch.isfinite(got["s"].detach().double().cpu()) & ~both_empty
    if s_bad.any() and bool((m[s_bad] > LARGE_LOGIT).all()):
        return (
            f"s is inf or NaN in rows whose max is above {LARGE_LOGIT:g}: exp(m_j) overflowed float32; "
            "use only differences, w_j = s_j·exp(m_j − m), which is at most s_j"
        )
    with torch.no_grad():
        unshifted = {  # a side that is not rescaled: its weight is s_j, not s_j·exp(m_j − m)
            "s": s1 * torch.exp(m1 - m) + s2,
            "alt": s1 + s2 * torch.exp(m2 - m),
        }
    live = ~both_empty
    got_s = got["s"].detach().double().cpu()
    s_right = matches(got_s[live], expected["s"][live], rtol)
    if not s_right and any(matches(got_s[live], cand[live], rtol) for cand in unshifted.values()):
        return "one side was not rescaled: each half's sum counts from its own max, so both need s_j·exp(m_j − m)"
    flipped = s1 * torch.exp(m - m1) + s2 * torch.exp(m - m2)
    if not s_right and matches(got_s[live], flipped[live], rtol):
        return "the rescale factor is upside down: exp(m_j − m) ≤ 1 shrinks the half whose max is smaller, exp(m − m_j) grows it"
    w1, w2 = s1 * torch.exp(m1 - m), s2 * torch.exp(m2 - m)
    got_o = got["o"].detach().double().cpu()
    s = w1 + w2
    if matches(got_o[live], ((w2[:, None] * o1 + w1[:, None] * o2) / s[:, None])[live], 2 * rtol_o):
        return "the weights are swapped: o1 goes with w1 = s1·exp(m1 − m), o2 with w2"
    if matches(got_o[live], (w1[:, None] * o1 + w2[:, None] * o2)[live], 2 * rtol_o):
        return "o is not divided by s: o1 and o2 are averages, and so is o = (w1·o1 + w2·o2)/s"
    return MERGE_HINT


def _compare_merge(got: dict, expected: dict, inp: dict) -> Verdict:
    rtol_o = TOLERANCE[inp["o1"].view.dtype]
    rtol_s = TOLERANCE[torch.float32]
    problems, errors, values_wrong = [], [], False
    got_m, exp_m = got["m"].detach().double().cpu(), expected["m"]
    wrong_m = ~((got_m == exp_m) | (got_m.isnan() & exp_m.isnan()))
    if bool(got_m.isnan().all()):
        problems.append(f"m: {got_m.numel()} of {got_m.numel()} are NaN: never written")
    elif wrong_m.any():
        i = int(wrong_m.nonzero()[0])
        problems.append(
            f"m: {int(wrong_m.sum())} of {wrong_m.numel()} wrong, e.g. row {i}: "
            f"got {got_m[i].item():.6g}, expected max(m1, m2) = {exp_m[i].item():.6g}"
        )
    if got["outside"]["m"]:
        problems.append(f"m: wrote {got['outside']['m']} element(s) outside it: a store needs a mask")
    for name, rtol in (("s", rtol_s), ("o", rtol_o)):
        verdict = compare_tensors(
            {"out": got[name], "outside": got["outside"][name], "inputs_changed": got["inputs_changed"] and name == "s"},
            expected[name],
            rtol=rtol,
        )
        if verdict.error is not None:
            errors.append(verdict.error)
        if not verdict.passed:
            problems.append(f"{name}: {verdict.detail}")
            values_wrong = values_wrong or "wrong values" in verdict.detail or "NaN" in verdict.detail
    if not problems:
        return Verdict(True, max(errors) if errors else None, "")
    detail = "; ".join(problems)
    nothing = all(bool(got[k].detach().double().cpu().isnan().all()) for k in ("m", "s", "o"))
    if values_wrong and not nothing:  # nothing written: "never written" says it all
        detail += ". " + _merge_hint(got, inp, expected, rtol_o)
    finite = [e for e in errors if e == e]
    return Verdict(False, max(finite) if finite else None, detail)


@dataclasses.dataclass(frozen=True)
class _MergeSpec:
    """Two halves of ``M`` rows, ``n1`` and ``n2`` columns, against values ``[n, D]``."""

    M: int
    D: int
    n: tuple[int, int] = (30, 50)
    dtype: torch.dtype = torch.float32
    level: float = 3.0  # the two halves' logits sit near +level and −level, in turn by row
    ties: bool = False  # both halves of every row share their maximum
    empty: str = ""  # "one": rows whose first or second half is empty; "both": some rows with both empty
    layouts: tuple[int, int] = (0, 0)  # row strides of o1 and o2 (0: D); o's is D + BLOCK_D + 3
    base: float = 0.0  # added to every logit (100: exp of a max overflows float32)


def _merge_states(spec: _MergeSpec, gen: torch.Generator) -> dict:
    M, D = spec.M, spec.D
    n1, n2 = spec.n
    # Logits in [−1, 1] plus ±level, alternating by row: |m1 − m2| ≥ 2·level − 2 in every row.
    sign = torch.where(torch.arange(M) % 2 == 0, 1.0, -1.0)[:, None]
    x1 = spec.base + 2 * torch.rand(M, n1, generator=gen) - 1 + spec.level * sign
    x2 = spec.base + 2 * torch.rand(M, n2, generator=gen) - 1 - spec.level * sign
    if spec.ties:  # level 0: both halves in [−1, 1], and one logit of 1.5 in each
        x1[:, 0] = x2[:, 0] = spec.base + 1.5
    # Values of the two halves in [0, 1] and [2, 3]: o1 and o2 differ by 1 or more everywhere.
    v1 = torch.rand(n1, D, generator=gen)
    v2 = 2 + torch.rand(n2, D, generator=gen)
    m1, s1, o1 = softmax_state(x1, v1)
    m2, s2, o2 = softmax_state(x2, v2)
    empty1 = torch.zeros(M, dtype=torch.bool)
    empty2 = torch.zeros(M, dtype=torch.bool)
    if spec.empty == "one":  # rows 0, 3, …: first half empty; rows 1, 4, …: second half empty
        empty1, empty2 = torch.arange(M) % 3 == 0, torch.arange(M) % 3 == 1
    elif spec.empty == "both":  # rows 1, 4, …: both empty; rows 2, 5, …: the first one
        empty1, empty2 = torch.arange(M) % 3 > 0, torch.arange(M) % 3 == 1
    for empty, (m, s, o) in ((empty1, (m1, s1, o1)), (empty2, (m2, s2, o2))):
        m[empty], s[empty], o[empty] = NEG_INF, 0.0, 0.0
    return {"m1": m1, "s1": s1, "o1": o1.to(spec.dtype), "m2": m2, "s2": s2, "o2": o2.to(spec.dtype)}


MERGE = CaseTemplate(_merge_run, _merge_expected, _compare_merge)


def _merge_case(name: str, spec: _MergeSpec) -> Case:
    return MERGE.case(name, lambda gen: _merge_guard(_merge_states(spec, gen), spec.layouts), dtype=spec.dtype)


def merge_states_cases() -> list[Case]:
    return [
        _merge_case("float32, 6 rows, D = 40: m1 > m2 and m1 < m2 in turn", _MergeSpec(6, 40)),
        _merge_case("equal maxima m1 = m2, 4 rows, D = 24", _MergeSpec(4, 24, ties=True, level=0.0)),
        _merge_case("one half empty (m = −inf, s = 0, o = 0), 6 rows, D = 40", _MergeSpec(6, 40, empty="one")),
        _merge_case("both halves empty in rows 1 and 4: (−inf, 0, 0), 6 rows, D = 17", _MergeSpec(6, 17, empty="both")),
        _merge_case("logits near 100 (exp(m) overflows), 4 rows, D = 32", _MergeSpec(4, 32, base=100.0, level=2.0)),
        _merge_case("far apart halves (|m1 − m2| ≈ 60), 4 rows, D = 8", _MergeSpec(4, 8, level=30.0)),
        _merge_case("D = 1, 5 rows", _MergeSpec(5, 1)),
        _merge_case("o1, o2 and o with three row strides, 5 rows, D = 20", _MergeSpec(5, 20, layouts=(29, 23))),
        _merge_case("float16 o, 6 rows, D = 64", _MergeSpec(6, 64, dtype=torch.float16)),
        _merge_case("bfloat16 o, 4 rows, D = 48", _MergeSpec(4, 48, dtype=torch.bfloat16)),
    ]


def try_merge_states(kernel, x: torch.Tensor, v: torch.Tensor, split: int) -> Trial:
    """Exercise 6b's "try it": the states of ``x[:, :split]`` and ``x[:, split:]`` against the rows
    of ``v`` (computed in float64, passed in float32) merged by the kernel inside NaN-padded
    buffers; shows how far the merged ``m``, ``s`` and ``o`` are from the state of the whole rows
    (``o = softmax(x) @ v``), and the verdict."""
    x64, v64 = x.detach().double().cpu(), v.detach().double().cpu()
    m1, s1, o1 = softmax_state(x64[:, :split], v64[:split])
    m2, s2, o2 = softmax_state(x64[:, split:], v64[split:])
    states = {"m1": m1, "s1": s1, "o1": o1.to(v.dtype), "m2": m2, "s2": s2, "o2": o2.to(v.dtype)}
    inputs = _merge_guard(states, (0, 0))
    whole = softmax_state(x64, v64)

    def show(got, expected):
        return [
            ("max |m − whole row's m|:", largest_difference(got["m"], whole[0])),
            ("max |s − whole row's s|:", largest_difference(got["s"], whole[1])),
            ("max |o − softmax(x) @ v|:", largest_difference(got["o"], whole[2])),
        ]

    title = f"merge_states_kernel on x {list(x.shape)} split at {split}, v {list(v.shape)}"
    return MERGE.trial(kernel, inputs, title=title, show=show)


# ----------------------------------------------------------------------------------------------
# Exercise 6c (chapter 6): fused softmax + cross-entropy loss, one row per program
# ----------------------------------------------------------------------------------------------

CROSS_ENTROPY_BLOCK_N = 128
"""The block of exercise 6c, fixed by its launcher: a vocabulary of ``N`` logits takes
``cdiv(N, 128)`` blocks, the last one ragged unless 128 divides ``N``."""

IGNORE_INDEX = -100
"""A row whose target is this gets loss 0 (PyTorch's default ``ignore_index``: padding tokens)."""

CROSS_ENTROPY_BEFORE = 2 * CROSS_ENTROPY_BLOCK_N
"""Elements of padding before the first row of the logits: a kernel that reads ``x[row, −100]``
(the target of an ignored row taken for an index) reads padding, not outside the buffer."""

TARGET_LOGIT = 4.5
"""Each row's target logit is ``TARGET_LOGIT + 0.1·row`` and every other logit lies in [−4, 4]:
a logit gathered from anywhere else (another column, another row) is off by 0.1 or more."""


def cross_entropy_ref(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """``F.cross_entropy(logits, target, reduction="none")`` in float64 (0 where ``target == ignore_index``)."""
    return torch.nn.functional.cross_entropy(logits.double(), target.long(), reduction="none", ignore_index=ignore_index)


def launch_cross_entropy(kernel, logits: torch.Tensor, target: torch.Tensor, loss: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The given launcher of exercise 6c: one program per row, ``BLOCK_N = 128`` whatever ``N``
    is, so the kernel loops over the row in blocks; ``logits [M, N]`` with any row stride (unit
    column stride), ``target [M]`` int64, ``loss [M]`` float32 whatever the logits' dtype,
    ``ignore_index = −100``. Returns ``loss`` (a new tensor unless one is given)."""
    require_kernel(kernel)
    require_unit_column_stride("logits", logits)
    M, N = logits.shape
    if loss is None:
        loss = torch.empty(M, dtype=torch.float32, device=logits.device)
    kernel[(M,)](logits, target, loss, logits.stride(0), N, IGNORE_INDEX, BLOCK_N=CROSS_ENTROPY_BLOCK_N)
    return loss


def _cross_entropy_guard(logits: torch.Tensor, target: torch.Tensor, stride: int) -> dict:
    """logits (row stride ``stride``) in a buffer of :data:`ROW_SENTINEL` with
    :data:`CROSS_ENTROPY_BEFORE` elements before the first row and a block past the last
    column; target in a buffer of zeros (an index read past it stays inside the logits)."""
    device = kernel_device()
    N = logits.shape[1]
    return {
        "logits": guarded(
            logits, (stride or N, 1), offset=CROSS_ENTROPY_BEFORE, margin=(1, CROSS_ENTROPY_BLOCK_N + 1), device=device, fill=ROW_SENTINEL
        ),
        "target": guarded(target.long(), (1,), margin=(8,), device=device, fill=0),
    }


def _cross_entropy_run(fn, inp: dict) -> dict:
    logits = inp["logits"].view
    loss = poisoned_output((logits.shape[0],), torch.float32, margin=(CROSS_ENTROPY_BLOCK_N,), device=logits.device.type)
    return run_one_output(launch_cross_entropy, fn, (inp["logits"], inp["target"]), loss)


def _cross_entropy_expected(inp: dict) -> torch.Tensor:
    return cross_entropy_ref(inp["logits"].view, inp["target"].view)


CROSS_ENTROPY_HINT = (
    "loss = m + log(Σ exp(x − m)) − x[target], over every block of the row (masked lanes: −inf for the max, 0 for "
    "the sum), x[target] read at row·row_stride + target, and 0 where target = −100"
)


def _cross_entropy_hint(got: dict, inp: dict, expected: torch.Tensor, rtol: float) -> str:
    x = inp["logits"].view.detach().double().cpu()
    t = inp["target"].view.detach().cpu()
    out = got["out"].detach().double().cpu()
    exp64 = expected.double().cpu()
    ignored = t == IGNORE_INDEX
    bad = ~(((out - exp64).abs() <= rtol * max(1.0, float(exp64.abs().max()))) & ~out.isnan())
    if ignored.any() and bad[ignored].any() and not bad[~ignored].any():
        return f"wrong only in rows whose target is ignore_index ({IGNORE_INDEX}): their loss is 0 (padding tokens do not count)"
    if bool((~torch.isfinite(out[bad])).all()) and float(x.abs().amax()) > LARGE_LOGIT:
        return (
            f"NaN or inf in rows of logits beyond ±{LARGE_LOGIT:g}: exp overflowed (or underflowed to 0): "
            "subtract the row's maximum m before exp, and add it back: logsumexp = m + log(Σ exp(x − m))"
        )
    if bool((out[bad] < -ROW_SENTINEL / 2).any()):
        return (
            f"{ROW_SENTINEL:g} is the value the check puts around each row: a load read outside the row, past its end "
            "(mask it, other=−inf) or at the wrong address for x[target] (row·row_stride + target)"
        )
    live = ~ignored
    if matches(out[live], -exp64[live], rtol):
        return "the sign is flipped: loss = logsumexp(x) − x[target], which is ≥ 0"
    m = torch.where(torch.isfinite(x), x, torch.full_like(x, NEG_INF)).amax(dim=1)
    if matches(out[live], (exp64 - m)[live], rtol):
        return "the max is missing from logsumexp: log(Σ exp(x − m)) is logsumexp(x) − m; add m back"
    return CROSS_ENTROPY_HINT


def _compare_cross_entropy(got: dict, expected: torch.Tensor, inp: dict) -> Verdict:
    rtol = TOLERANCE[torch.float32]  # the loss is float32, computed from exactly upcast logits
    verdict = compare_tensors(got, expected, rtol=rtol)
    if verdict.passed or ("wrong values" not in verdict.detail and "NaN" not in verdict.detail):
        return verdict
    if bool(got["out"].detach().double().cpu().isnan().all()):  # nothing written: "never written" says it all
        return verdict
    detail = f"{verdict.detail}. {_cross_entropy_hint(got, inp, expected, rtol)}"
    verdict = Verdict(False, verdict.error, detail)
    return with_picture(verdict, lambda: element_map(got["guard"], expected, rtol=rtol, name="loss"), got["guard"])


@dataclasses.dataclass(frozen=True)
class _LossSpec:
    """``M`` rows of ``N`` logits: where they live, what they are, which targets are ignored."""

    M: int
    N: int
    dtype: torch.dtype = torch.float32
    row_stride: int = 0  # 0: N
    base: float = 0.0  # added to every logit (±200: exp overflows or underflows)
    ignored: tuple[int, ...] = ()  # rows whose target is ignore_index


def _loss_inputs(spec: _LossSpec, gen: torch.Generator) -> dict:
    M, N = spec.M, spec.N
    x = (2.0 * torch.randn(M, N, generator=gen)).clamp(-4.0, 4.0)
    target = torch.randint(0, N, (M,), generator=gen)
    target[0] = N - 1  # the last column (the ragged block) and the first one are targets in every case
    if M > 1:
        target[1] = 0
    x[torch.arange(M), target] = TARGET_LOGIT + 0.1 * torch.arange(M, dtype=x.dtype)
    x = (x + spec.base).to(spec.dtype)
    for row in spec.ignored:
        target[row] = IGNORE_INDEX
    return _cross_entropy_guard(x, target, spec.row_stride)


CROSS_ENTROPY = CaseTemplate(_cross_entropy_run, _cross_entropy_expected, _compare_cross_entropy)


def _loss_case(name: str, spec: _LossSpec) -> Case:
    return CROSS_ENTROPY.case(name, lambda gen: _loss_inputs(spec, gen), dtype=spec.dtype)


def cross_entropy_cases() -> list[Case]:
    return [
        _loss_case("float32 8×1000: 7 blocks of 128 and a ragged one of 104", _LossSpec(8, 1000)),
        _loss_case("N < BLOCK_N: 6×50, one ragged block", _LossSpec(6, 50)),
        _loss_case("N = 512: exactly four blocks", _LossSpec(3, 512)),
        _loss_case("logits near +200, 4×300: exp(x) overflows", _LossSpec(4, 300, base=200.0)),
        _loss_case("logits near −200, 4×300: exp(x) underflows to 0", _LossSpec(4, 300, base=-200.0)),
        _loss_case(f"targets = {IGNORE_INDEX} (ignore_index) in rows 0 and 3, 6×200", _LossSpec(6, 200, ignored=(0, 3))),
        _loss_case("padded vocabulary: logits[:, :777] of 5×816", _LossSpec(5, 777, row_stride=816)),
        _loss_case("one row of a 4000-token vocabulary", _LossSpec(1, 4000)),
        _loss_case("float16 6×1000", _LossSpec(6, 1000, torch.float16)),
        _loss_case("bfloat16 4×900", _LossSpec(4, 900, torch.bfloat16)),
    ]


def try_cross_entropy(kernel, logits: torch.Tensor, target: torch.Tensor) -> Trial:
    """Exercise 6c's "try it": the kernel on a copy of ``logits`` (same row stride) surrounded by
    :data:`ROW_SENTINEL` and ``target``, ``loss`` poisoned with NaN; shows yours next to
    ``F.cross_entropy`` in float64, and the verdict."""
    inputs = _cross_entropy_guard(logits.detach().cpu(), target.detach().cpu(), logits.stride(0))

    def show(got, expected):
        return [("yours:", format_values(got["out"])), ("F.cross_entropy:", format_values(expected))]

    title = f"cross_entropy_kernel on logits {list(logits.shape)} {dtype_name(logits.dtype)}"
    return CROSS_ENTROPY.trial(kernel, inputs, title=title, show=show)
