"""The online normalizer's float64 model, its figure and its stepper (tritonforge.book.online_softmax)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from tritonforge.book import online_softmax as osm


@pytest.fixture
def plt():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    yield pyplot
    pyplot.close("all")


def two_pass_state(row: torch.Tensor) -> tuple[float, float]:
    """The textbook (max, sum(exp(x - max))) in float64: the oracle."""
    x = row.double()
    m = x.max()
    return m.item(), torch.exp(x - m).sum().item()


def awkward_rows() -> list[tuple[str, torch.Tensor, int]]:
    gen = torch.Generator().manual_seed(13)
    rows = [
        ("odd length", torch.randn(781, generator=gen) * 4, 64),  # 781 = 12 * 64 + 13
        ("one element", torch.randn(1, generator=gen), 16),
        ("one block", torch.randn(5, generator=gen), 8),
        ("block of one", torch.randn(7, generator=gen), 1),
        ("float16 row", (torch.randn(123, generator=gen) * 8).half(), 10),
    ]
    last = torch.randn(1823, generator=gen)
    last[-1] = 40.0  # the max arrives in the last, short block: every earlier term is rescaled
    rows.append(("max in the last block", last, 128))
    with_inf = torch.randn(50, generator=gen)
    with_inf[[0, 1, 2, 17, 49]] = -math.inf  # a first block starting with -inf, one at the end
    rows.append(("-inf entries", with_inf, 3))
    leading = torch.randn(20, generator=gen)
    leading[:12] = -math.inf  # whole blocks of -inf before the first finite value
    rows.append(("-inf blocks first", leading, 4))
    return rows


@pytest.mark.parametrize("name,row,block", awkward_rows(), ids=[r[0] for r in awkward_rows()])
def test_final_state_is_the_two_pass_max_and_sum(name, row, block):
    steps = osm.online_softmax_steps(row, block)
    assert len(steps) == math.ceil(row.numel() / block)
    assert [s.start for s in steps] == list(range(0, row.numel(), block)) and steps[-1].stop == row.numel()
    m, s = two_pass_state(row)
    assert steps[-1].max_after == m  # a max is exact
    assert steps[-1].sum_after == pytest.approx(s, rel=1e-13, abs=0)
    for before, after in zip(steps, steps[1:]):  # each step starts from the last one's state
        assert (after.max_before, after.sum_before) == (before.max_after, before.sum_after)
    for step in steps:
        assert step.sum_after == step.sum_before * step.rescale + step.block_sum
        assert step.values == tuple(row[step.start : step.stop].double().tolist())
        # the invariant behind the recurrence: s_k = sum over the prefix of exp(x_j - m_k)
        prefix = row[: step.stop].double()
        if step.max_after > -math.inf:
            assert step.sum_after == pytest.approx(torch.exp(prefix - step.max_after).sum().item(), rel=1e-13, abs=0)


def test_rescale_is_exactly_one_when_the_max_does_not_grow():
    row = torch.tensor([5.0, 1.0, 2.0, 4.9, -3.0, 5.0, 0.5])  # the max comes first; a tie later
    steps = osm.online_softmax_steps(row, 2)
    assert steps[0].rescale == 0.0  # from the empty state: the sum so far (0) is dropped
    assert [s.rescale for s in steps[1:]] == [1.0, 1.0, 1.0]
    assert [s.max_after for s in steps] == [5.0] * 4
    grows = osm.online_softmax_steps(torch.tensor([1.0, 3.0]), 1)[1]
    assert grows.rescale == math.exp(1.0 - 3.0) < 1.0


def test_an_all_minus_inf_row_has_the_empty_state_and_a_nan_softmax():
    row = torch.full((9,), -math.inf)
    steps = osm.online_softmax_steps(row, 4)
    for step in steps:  # no NaN anywhere: exp(-inf - (-inf)) is never formed
        assert (step.max_after, step.sum_after, step.rescale, step.block_sum) == (-math.inf, 0.0, 1.0, 0.0)
    y = osm.softmax_from_state(row, steps[-1].max_after, steps[-1].sum_after)
    assert y.isnan().all()  # 0 / 0: undefined, said as NaN, as torch does
    assert torch.softmax(row.double(), dim=0).isnan().all()


@pytest.mark.parametrize("values", [[1.0, 2.0, math.inf, 0.5], [math.inf, math.inf], [3.0, 1.0, math.nan], [math.nan, -math.inf]])
def test_inf_and_nan_entries_give_nan_as_torch_does(values, plt):
    row = torch.tensor(values, dtype=torch.float64)
    last = osm.online_softmax_steps(row, 2)[-1]
    assert math.isnan(last.sum_after)
    if any(math.isnan(v) for v in values):
        assert math.isnan(last.max_after)  # kept, as torch.max keeps it (Python's max may drop it)
    assert osm.softmax_from_state(row, last.max_after, last.sum_after).isnan().all()
    assert torch.softmax(row, dim=0).isnan().all()
    osm.online_softmax_figure(row, 2).canvas.draw()  # marks, not bars, for what is not finite


@pytest.mark.parametrize("name,row,block", awkward_rows(), ids=[r[0] for r in awkward_rows()])
def test_softmax_from_state_is_torch_softmax(name, row, block):
    last = osm.online_softmax_steps(row, block)[-1]
    y = osm.softmax_from_state(row, last.max_after, last.sum_after)
    assert y.dtype == torch.float64
    torch.testing.assert_close(y, torch.softmax(row.double(), dim=0), rtol=1e-13, atol=1e-300)


def random_states(count: int, seed: int) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    states = []
    for _ in range(count):
        # the state of a random part of a row: its max, and a sum in [1, 200] (the max's own term is 1)
        states.append((rng.uniform(-30.0, 30.0), rng.uniform(1.0, 200.0)))
    return states + [osm.EMPTY_STATE]


def test_merge_is_commutative_associative_and_has_the_empty_identity():
    states = random_states(12, seed=0)
    for a in states:
        assert osm.merge_states(*a, *osm.EMPTY_STATE) == a  # exactly, no NaN
        assert osm.merge_states(*osm.EMPTY_STATE, *a) == a
        for b in states:
            assert osm.merge_states(*a, *b) == osm.merge_states(*b, *a)  # exactly: + commutes
            for c in states:
                left = osm.merge_states(*osm.merge_states(*a, *b), *c)
                right = osm.merge_states(*a, *osm.merge_states(*b, *c))
                assert left[0] == right[0]
                assert left[1] == pytest.approx(right[1], rel=1e-14, abs=0)  # up to rounding
    assert osm.merge_states(*osm.EMPTY_STATE, *osm.EMPTY_STATE) == osm.EMPTY_STATE
    assert math.isnan(osm.merge_states(math.nan, 1.0, 2.0, 1.0)[0])  # a NaN max is not dropped


def test_merging_the_states_of_two_halves_gives_the_rows_state():
    row = torch.randn(1001, generator=torch.Generator().manual_seed(3)) * 5
    for cut in (1, 500, 1000):
        left = osm.online_softmax_steps(row[:cut], 32)[-1]
        right = osm.online_softmax_steps(row[cut:], 32)[-1]
        m, s = osm.merge_states(left.max_after, left.sum_after, right.max_after, right.sum_after)
        expected = two_pass_state(row)
        assert m == expected[0] and s == pytest.approx(expected[1], rel=1e-13, abs=0)


def test_steps_reject_what_is_not_a_row():
    with pytest.raises(ValueError, match="1-D"):
        osm.online_softmax_steps(torch.randn(2, 3), 2)
    with pytest.raises(ValueError, match="1-D"):
        osm.online_softmax_steps(torch.randn(0), 2)
    with pytest.raises(ValueError, match="block"):
        osm.online_softmax_steps(torch.randn(4), 0)


def test_figure_has_one_panel_per_step(plt):
    row = torch.randn(37, generator=torch.Generator().manual_seed(1)) * 3
    row[[2, 30]] = -math.inf
    fig = osm.online_softmax_figure(row, 8)
    assert len(fig.axes) == 5  # ceil(37 / 8)
    assert fig.get_figwidth() == pytest.approx(7.0)  # the book's column: 10 pt stays 10 pt
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert titles[0].startswith("step 1 of 5: block [0, 8)") and titles[-1].startswith("step 5 of 5: block [32, 37)")
    assert all("rescale α" in t for t in titles)
    texts = [t for ax in fig.axes for t in ax.texts] + [ax._left_title for ax in fig.axes] + [fig._suptitle]
    texts += list(fig.legends[0].get_texts()) + [label for ax in fig.axes for label in ax.get_yticklabels()]
    assert min(t.get_fontsize() for t in texts) >= osm.FONT_PT
    assert sum(t.get_text() == "−∞" for t in fig.axes[0].texts) == 2  # the -inf entries, marked
    fig.canvas.draw()  # it lays out (constrained layout, the outside legend) without error
    one = osm.online_softmax_figure(row, 8, steps=[3])
    assert len(one.axes) == 1 and one.axes[0].get_title(loc="left").startswith("step 3 of 5")
    with pytest.raises(ValueError, match="from 1 to 5"):
        osm.online_softmax_figure(row, 8, steps=[6])


def test_figure_of_an_all_minus_inf_row(plt):
    fig = osm.online_softmax_figure(torch.full((5,), -math.inf), 2)
    assert len(fig.axes) == 3
    fig.canvas.draw()


def test_stepper_slider_walks_every_step(plt):
    widgets = pytest.importorskip("ipywidgets")
    row = torch.randn(10, generator=torch.Generator().manual_seed(2))
    stepper = osm.online_softmax_stepper(row, 4)
    controls, out = stepper.children
    play, slider = controls.children
    assert isinstance(slider, widgets.IntSlider) and isinstance(play, widgets.Play) and isinstance(out, widgets.Output)
    assert (slider.min, slider.max, slider.value) == (1, 3, 1)  # one value per step
    assert slider.max - slider.min + 1 == len(osm.online_softmax_steps(row, 4))
    assert (play.min, play.max) == (slider.min, slider.max)
    slider.value = 3  # redraws the panel of step 3 (outside a kernel the Output shows nothing)
    assert not plt.get_fignums()  # each panel's figure is closed once shown: none piles up


def test_show_online_softmax_displays_the_stepper(plt, monkeypatch):
    widgets = pytest.importorskip("ipywidgets")
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *objs, **kw: shown.extend(objs))
    assert osm.show_online_softmax(torch.randn(6), 4) is None  # nothing for the cell to display again
    assert [type(obj) for obj in shown if isinstance(obj, widgets.Widget)] == [widgets.VBox]  # the stepper, once
