r"""The online normalizer of softmax, step by step: a float64 model, its figure and its stepper.

Math (Milakov & Gimelshein, 2018). Softmax of a row :math:`x_1 \dots x_N` is
:math:`y_i = e^{x_i - m} / s` with :math:`m = \max_j x_j` and :math:`s = \sum_j e^{x_j - m}`. The
textbook way reads the row once for :math:`m` and once more for :math:`s`. The online normalizer
reads it once, block by block, keeping a state :math:`(m_k, s_k)` for the blocks seen so far.
Block :math:`k` with values :math:`B_k` updates it as

.. math::

    m_k = \max\big(m_{k-1}, \max B_k\big), \qquad
    s_k = s_{k-1}\, e^{m_{k-1} - m_k} + \sum_{x_j \in B_k} e^{x_j - m_k},

from the empty state :math:`(m_0, s_0) = (-\infty, 0)`. The factor
:math:`\alpha_k = e^{m_{k-1} - m_k} \le 1` is the *rescale*: it is exactly 1 when the block does
not raise the max, and below 1 when it does.

Why the rescale is exact: by induction, :math:`s_k = \sum_{j \le k} e^{x_j - m_k}` (the sum over
every element seen so far, each measured against the current max). It holds for the empty state
(an empty sum is 0). If it holds for :math:`k - 1`, then

.. math::

    s_{k-1}\, e^{m_{k-1} - m_k} = \sum_{j \le k-1} e^{x_j - m_{k-1}}\, e^{m_{k-1} - m_k}
    = \sum_{j \le k-1} e^{x_j - m_k},

and adding the block's own terms gives the claim for :math:`k`. After the last block,
:math:`(m_K, s_K)` are the max and the sum of the two-pass softmax: nothing is approximated, and
every exponent stays :math:`\le 0`, so nothing overflows.

Two states of disjoint parts of a row merge by the same rule (the split strategy of
:mod:`tritonforge.ops.softmax` merges its chunks' states this way):

.. math:: m = \max(m_1, m_2), \qquad s = s_1 e^{m_1 - m} + s_2 e^{m_2 - m}.

It is commutative and associative (up to rounding), and the empty state :math:`(-\infty, 0)` is
its identity. One case needs care: when both maxima are :math:`-\infty`,
:math:`e^{-\infty - (-\infty)}` is NaN. The model takes the factor to be 1 whenever the max does
not change (the kernels subtract 0 instead of :math:`-\infty`; either way the factor multiplies
a sum of 0). So the state of a row that is all :math:`-\infty` is :math:`(-\infty, 0)`, and its
softmax :math:`0/0` is undefined: :func:`softmax_from_state` returns NaN there, as
``torch.softmax`` does (the attention of a query that may see no key; a kernel that wants zeros
must say so). A ``+inf`` or NaN entry makes the sum NaN (and a NaN the max too), so the softmax is NaN, as in
``torch.softmax``.

This module is the chapter's picture of the algorithm, not an implementation: it computes in
float64 on the CPU, one Python step per block. :func:`online_softmax_steps` is the model,
:func:`online_softmax_figure` draws its steps, :func:`online_softmax_stepper` is the interactive
version, and :func:`show_online_softmax` is the chapter's one call for the interactive part.

The book and the notebook. The built book has no kernel and no widget JavaScript, so a widget
on a page would be an empty box (``tests/browser`` fails a page that shows one). The chapter
therefore uses two cells, the convention of every chapter with a widget::

    show_online_softmax(row, block)            # cell tagged remove-output
    fig = online_softmax_figure(row, block)    # the next cell: every step

A live notebook (Jupyter, Colab) shows the stepper (a slider and a play button; the panel of the
chosen step beneath), then the figure of every step. The static HTML drops the first cell's
output and shows the figure of every step: the same panels the stepper walks through.

matplotlib and ipywidgets are imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Optional

import torch

FIGURE_WIDTH_IN = 7.0
"""The figure's width: the book's content column is 688 px, drawn at 100 dpi."""

FONT_PT = 10
"""Every text in the figure, in points at that width (so 10 pt on the page)."""

PANEL_HEIGHT_IN = 1.9
"""The height of one step's panel: two lines of title above the bars."""

COLORS = {
    "seen": "#9e9e9e",  # blocks already folded into the state
    "block": "#d62728",  # the block of this step
    "ahead": "#e8e8e8",  # blocks not read yet
    "max": "#1f77b4",  # the running max
}


@dataclasses.dataclass(frozen=True)
class Step:
    """One block folded into the running state ``(m, s)``; every number in float64.

    ``rescale`` is ``exp(max_before - max_after)``, the factor on the sum so far (exactly 1 when
    the block does not raise the max); ``block_sum`` is the block's own ``sum(exp(x - max_after))``,
    so ``sum_after == sum_before * rescale + block_sum``.
    """

    index: int  # the block's number, from 0
    start: int  # the block is row[start:stop]
    stop: int
    values: tuple[float, ...]  # the block's values
    block_max: float
    max_before: float  # m_{k-1}
    max_after: float  # m_k = max(m_{k-1}, block_max)
    rescale: float  # exp(m_{k-1} - m_k)
    sum_before: float  # s_{k-1}
    block_sum: float  # sum over the block of exp(x - m_k)
    sum_after: float  # s_k = s_{k-1} * rescale + block_sum


EMPTY_STATE = (-math.inf, 0.0)
"""The state of no elements: the identity of :func:`merge_states`."""


def running_max(a: float, b: float) -> float:
    """``max(a, b)`` that keeps a NaN, as ``torch.max`` does (Python's ``max`` may drop it)."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def rescale_factor(m_old: float, m_new: float) -> float:
    """``exp(m_old - m_new)``, and exactly 1 when ``m_old == m_new`` (also both ``-inf``: no NaN)."""
    return 1.0 if m_old == m_new else math.exp(m_old - m_new)


def merge_states(m1: float, s1: float, m2: float, s2: float) -> tuple[float, float]:
    """The state ``(m, s)`` of two disjoint parts of a row from theirs.

    ``m = max(m1, m2)``, ``s = s1 * exp(m1 - m) + s2 * exp(m2 - m)``. Merging with the empty
    state ``(-inf, 0)`` returns the other state exactly; two empty states give the empty state.
    Accepts Python numbers or one-element tensors; returns float64 Python floats.
    """
    m1, s1, m2, s2 = float(m1), float(s1), float(m2), float(s2)
    m = running_max(m1, m2)
    return m, s1 * rescale_factor(m1, m) + s2 * rescale_factor(m2, m)


def online_softmax_steps(row: torch.Tensor, block: int) -> list[Step]:
    """Stream ``row`` block by block through the online normalizer, in float64.

    Args:
        row: a 1-D tensor with at least one element (any float dtype; upcast to float64).
        block: elements per block (the last block holds what is left: ``len(row) % block`` or
            ``block``).

    Returns:
        One :class:`Step` per block, in order. The last step's ``(max_after, sum_after)`` is the
        row's ``(max(x), sum(exp(x - max(x))))``; for an all ``-inf`` row it is ``(-inf, 0)``.
    """
    if row.dim() != 1 or row.numel() == 0:
        raise ValueError(f"row must be 1-D with at least one element, got shape {tuple(row.shape)}")
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block}")
    x = row.detach().to(device="cpu", dtype=torch.float64)
    m, s = EMPTY_STATE
    steps = []
    for index, start in enumerate(range(0, x.numel(), block)):
        values = x[start : start + block]
        block_max = values.max().item()
        m_new = running_max(m, block_max)
        # All -inf so far: every term is exp(-inf) = 0, whatever it is measured against.
        block_sum = 0.0 if m_new == -math.inf else torch.exp(values - m_new).sum().item()
        rescale = rescale_factor(m, m_new)
        s_new = s * rescale + block_sum
        steps.append(Step(index, start, start + values.numel(), tuple(values.tolist()), block_max, m, m_new, rescale, s, block_sum, s_new))
        m, s = m_new, s_new
    return steps


def softmax_from_state(row: torch.Tensor, m: float, s: float) -> torch.Tensor:
    """``exp(row - m) / s`` in float64: the second pass, given the row's final state.

    An all ``-inf`` row has the state ``(-inf, 0)`` and no softmax (``0 / 0``): the result is
    NaN everywhere, as ``torch.softmax`` gives.
    """
    x = row.detach().to(device="cpu", dtype=torch.float64)
    if s == 0.0:
        return torch.full_like(x, math.nan)
    return torch.exp(x - float(m)) / float(s)


# ----------------------------------------------------------------------------------------------
# The figure (the static book) and the stepper (a live notebook)
# ----------------------------------------------------------------------------------------------


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return {math.inf: "∞", -math.inf: "−∞"}.get(value, f"{value:.4g}".replace("-", "−"))


def _step_title(step: Step, count: int) -> str:
    # Two lines of at most ~70 characters: 10 pt text fits the 7 in width.
    grows = "raises " if step.max_after > step.max_before else "keeps " if step.max_after == step.max_before else ""
    first = (f"step {step.index + 1} of {count}: block [{step.start}, {step.stop}), block max "
             f"{_number(step.block_max)}; {grows}m: {_number(step.max_before)} → {_number(step.max_after)}")  # fmt: skip
    second = (f"rescale α = exp(m_old − m_new) = {_number(step.rescale)};  s = {_number(step.sum_before)}·α"
              f" + {_number(step.block_sum)} = {_number(step.sum_after)}")  # fmt: skip
    return f"{first}\n{second}"


def _draw_step(ax, x: torch.Tensor, step: Step, count: int, floor: float, ceiling: float) -> None:
    """One panel: the row's values as bars from 0 (this block highlighted), the running max as lines."""
    n = x.numel()
    for i, value in enumerate(x.tolist()):
        colour = COLORS["block"] if step.start <= i < step.stop else COLORS["seen"] if i < step.start else COLORS["ahead"]
        if not math.isfinite(value):  # no bar can show it: a mark on the floor, the top or 0 instead
            text_colour = {COLORS["seen"]: "0.35", COLORS["ahead"]: "0.7"}.get(colour, colour)  # bar colours, darker
            y, va = {-math.inf: (floor, "bottom"), math.inf: (ceiling, "top")}.get(value, (0.0, "center"))
            ax.text(i, y, _number(value), ha="center", va=va, fontsize=FONT_PT, color=text_colour)
        else:
            ax.bar(i, value, width=0.8, color=colour, edgecolor="0.4", linewidth=0.5)
    ax.axhline(0.0, color="0.3", linewidth=0.6)
    if math.isfinite(step.max_before) and step.max_before != step.max_after:
        ax.hlines(step.max_before, -0.5, step.start - 0.5, colors=COLORS["max"], linestyles="--", linewidth=1.5)
    if math.isfinite(step.max_after):
        ax.hlines(step.max_after, -0.5, step.stop - 0.5, colors=COLORS["max"], linewidth=2)
    ax.axvspan(step.start - 0.5, step.stop - 0.5, color=COLORS["block"], alpha=0.08, linewidth=0)
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(floor, ceiling)
    ax.set_title(_step_title(step, count), fontsize=FONT_PT, loc="left")
    ax.tick_params(labelsize=FONT_PT)
    ax.set_xticks(range(0, n, max(1, math.ceil(n / 16))))


def online_softmax_figure(row: torch.Tensor, block: int, *, steps: Optional[Sequence[int]] = None, title: Optional[str] = None):
    """The online normalizer on ``row``, one panel per step, stacked: the static book's figure.

    Each panel shows the row's values as bars: grey for blocks already read, red for this
    step's block (on a tinted band), light for blocks not read yet (``-inf`` entries are marked
    "−∞" on the floor). The solid blue line is the running max after the step, over the elements
    read so far; a dashed one is the max before it, where the block raised it. The panel's title
    gives the numbers: the block max, the max before → after, the rescale factor
    ``α = exp(m_old − m_new)`` and the sum's update ``s = s_old·α + (the block's terms)``.

    Args:
        row: a 1-D tensor (see :func:`online_softmax_steps`).
        block: elements per block.
        steps: which steps to draw, numbered from 1 (default: all). The stepper draws one.
        title: the figure's heading (default: the row's length and the block size).

    Returns:
        The matplotlib ``Figure``, 7 in wide (the book's column), 10 pt text.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    all_steps = online_softmax_steps(row, block)
    chosen = list(range(1, len(all_steps) + 1)) if steps is None else list(steps)
    if not chosen or any(not 1 <= k <= len(all_steps) for k in chosen):
        raise ValueError(f"steps must be numbers from 1 to {len(all_steps)}, got {chosen}")
    x = row.detach().to(device="cpu", dtype=torch.float64)
    finite = x[torch.isfinite(x)]
    low = min(finite.min().item(), 0.0) if finite.numel() else -1.0
    high = max(finite.max().item(), 0.0) if finite.numel() else 1.0
    pad = 0.12 * (high - low or 1.0)
    floor, ceiling = low - pad, high + pad

    fig, axes = plt.subplots(len(chosen), 1, figsize=(FIGURE_WIDTH_IN, PANEL_HEIGHT_IN * len(chosen) + 0.9), squeeze=False,
                             sharex=True, layout="constrained")  # fmt: skip
    for ax, k in zip(axes[:, 0], chosen):
        _draw_step(ax, x, all_steps[k - 1], len(all_steps), floor, ceiling)
        ax.set_ylabel("x", fontsize=FONT_PT)
    axes[-1, 0].set_xlabel("position in the row", fontsize=FONT_PT)
    key = [
        Patch(color=COLORS["block"], label="this block"),
        Patch(color=COLORS["seen"], label="read"),
        Patch(facecolor=COLORS["ahead"], edgecolor="0.4", label="not read yet"),
        Line2D([], [], color=COLORS["max"], linewidth=2, label="running max m"),
    ]
    fig.legend(handles=key, loc="outside lower center", ncol=4, fontsize=FONT_PT, frameon=False)
    heading = title or f"Online softmax: a row of {x.numel()} in blocks of {block} ({len(all_steps)} steps)"
    fig.suptitle(heading, fontsize=FONT_PT)
    return fig


def online_softmax_stepper(row: torch.Tensor, block: int):
    """An ipywidgets stepper: a play button and a "step" slider (1 to the number of steps), and
    beneath them the panel of the chosen step (:func:`online_softmax_figure` with that one step).

    Moving the slider runs Python in the kernel, so it works in a live notebook (Jupyter,
    Colab), not in the static book. Raises ``ImportError`` when ipywidgets is not installed.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    count = len(online_softmax_steps(row, block))
    row = row.detach().to(device="cpu", dtype=torch.float64).clone()  # the stepper keeps its own copy
    slider = widgets.IntSlider(value=1, min=1, max=count, step=1, description="step", continuous_update=False)
    play = widgets.Play(value=1, min=1, max=count, step=1, interval=1500, description="play")
    widgets.jslink((play, "value"), (slider, "value"))
    out = widgets.Output()

    def draw(change=None):
        with out:
            out.clear_output(wait=True)
            fig = online_softmax_figure(row, block, steps=[slider.value])
            display(fig)
            plt.close(fig)

    slider.observe(draw, names="value")
    draw()
    return widgets.VBox([widgets.HBox([play, slider]), out])


def show_online_softmax(row: torch.Tensor, block: int) -> None:
    """The chapter's interactive cell: display the stepper, or say why there is none.

    In a live notebook with ipywidgets the reader gets :func:`online_softmax_stepper`; without
    ipywidgets, one line saying so. The cell that calls this is tagged ``remove-output`` and is
    followed by ``fig = online_softmax_figure(row, block)``, every step at once: that figure is what the
    static book shows (a widget has no kernel there), and a notebook shows it too, under the
    stepper. Returns nothing, so the widget is not displayed twice.
    """
    import importlib.util

    from IPython.display import display

    if importlib.util.find_spec("ipywidgets") is None:
        print("ipywidgets is not installed: the figure below shows every step.")
        return
    display(online_softmax_stepper(row, block))
