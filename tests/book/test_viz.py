"""The plots of benchmark results and the roofline drawing (tritonforge.book.viz)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.bench import fakes
from tests.bench.fakes import recorded_files, synthetic_results
from tritonforge import bench
from tritonforge.book import viz

matplotlib_colors = pytest.importorskip("matplotlib.colors")


@pytest.fixture
def plt():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    yield pyplot
    pyplot.close("all")


def test_plot_bench_labels_recorded_results(plt):
    fig = viz.plot_bench(synthetic_results(), op="rmsnorm")
    title = fig._suptitle.get_text()
    assert "recorded on NVIDIA H200, 2026-11-29 (torch 2.11.0+cu130, triton 3.6.0)" in title
    panels = fig.axes
    assert [ax.get_title() for ax in panels] == ["float32", "bfloat16"]
    assert panels[0].get_ylabel() == "fraction of the measured ceiling"
    assert [t.get_text() for t in panels[-1].get_legend().get_texts()] == ["tritonforge", "hf-eager", "liger"]
    assert [t.get_text() for t in panels[0].get_xticklabels()] == ["4096×512", "4096×8192"]
    assert len(panels[0].patches) == 3 * 2  # three impls x two shapes; the wrong row is not drawn


def _with_copies(results, dtypes=(torch.float32, torch.bfloat16)):
    # A same-size copy row per dtype at 4096x512, shaped like the suites' (the bytes of x), with
    # (device=True) or without a device time, as the recorded copies are.
    for dtype in dtypes:
        cost = bench.copy_cost(4096 * 512, dtype)
        row = bench.make_row("rmsnorm", "copy", bench.SAME_SIZE_COPY, dtype, [4096, 512], bytes=cost.bytes,
                             ceiling="copy", status="ok", us=15.0)  # fmt: skip
        results.rows.append(bench.add_throughput(row, results.ceilings))
    return results


def test_plot_bench_draws_the_same_size_copy_as_a_line_on_its_shape(plt):
    """Issue 32: the copies sat on x ticks of their own ("21504") between the real shapes. A
    copy is a yardstick: a line across the bars of the shape it belongs to, no bar, no tick."""
    results = _with_copies(synthetic_results())
    fig = viz.plot_bench(results, suite="rmsnorm")
    first = fig.axes[0]
    assert [t.get_text() for t in first.get_xticklabels()] == ["4096×512", "4096×8192"]
    assert len(first.patches) == 3 * 2  # the implementations' bars only
    (copy_line,) = first.lines[:1]  # one segment, over the one shape that has a copy
    xs = copy_line.get_xdata()
    assert xs[0] < 0 < xs[1] and xs[1] < 1  # across group 0 (4096x512), not beyond it
    copy = next(r for r in results.where(impl=bench.SAME_SIZE_COPY) if r["dtype"] == "float32")
    assert copy_line.get_ydata()[0] == pytest.approx(copy["fraction_of_ceiling"])
    assert "same-size copy" in [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]


def test_plot_bench_matches_a_copy_of_a_flat_shape_by_its_bytes(plt):
    """The SwiGLU suite's copies have a flat element count for a shape ([21504] for 1 x 14336):
    the copy moving a shape's bytes still lands on that shape."""
    results = synthetic_results()
    row = next(r for r in results.where(impl="tritonforge", dtype="float32") if r["shape"] == [4096, 8192])
    copy = bench.make_row("rmsnorm", "copy", bench.SAME_SIZE_COPY, torch.float32, [row["bytes"] // 8], bytes=row["bytes"],
                          ceiling="copy", status="ok", us=300.0)  # fmt: skip
    results.rows.append(bench.add_throughput(copy, results.ceilings))
    first = viz.plot_bench(results, suite="rmsnorm", dtype="float32").axes[0]
    assert [t.get_text() for t in first.get_xticklabels()] == ["4096×512", "4096×8192"]
    (line,) = first.lines[:1]
    assert line.get_xdata()[0] > 0.5  # on the second shape


def test_plot_bench_reads_device_time_when_asked(plt):
    """Issue 32: a forward + backward figure showed do_bench while the text said to read device
    time. timer="device" scales each row's fraction to its device time and leaves out a row that
    has none (the copies, the CUDA-graph rows)."""
    results = _with_copies(synthetic_results())
    for r in results.where(impl="tritonforge"):
        r["device_us"] = r["us"] / 2  # twice as fast without the host
    fig = viz.plot_bench(results, suite="rmsnorm", timer="device", dtype="float32")
    assert "device time (CUDA-graph replay)" in fig._suptitle.get_text()
    bars = fig.axes[0].patches
    want = [2 * r["fraction_of_ceiling"] for r in results.where(impl="tritonforge", dtype="float32")]
    assert [b.get_height() for b in bars] == pytest.approx(want)  # only ours has a device time
    assert not fig.axes[0].lines[:-1]  # no copy line: the copies have no device time (the last line is the 1.0 reference)
    with pytest.raises(ValueError, match=r"no 'ok' rows .*\(device\)"):
        viz.plot_bench(synthetic_results(), timer="device")


def test_every_implementation_the_book_measures_has_a_colour_of_its_own():
    """One colour per implementation across the book: every implementation in a recorded file has
    one, two different implementations never share one, and the aliases (the same implementation
    under another name in another record) take their implementation's."""
    assert len(set(viz.COLORS.values())) == len(viz.COLORS)
    assert all(viz.color_of(alias) == viz.color_of(name) for alias, name in viz.SAME_IMPLEMENTATION.items())
    files = sorted((fakes.REPO_ROOT / "benchmarks" / "results").rglob("*.json"))
    seen = set()
    for path in files:
        data = json.loads(path.read_text())
        for r in data.get("rows", []) if isinstance(data, dict) else []:
            impl = r.get("impl", r.get("variant"))  # the generate records name an implementation its variant
            if impl and r.get("suite") != "ceilings" and impl not in viz.BASELINE_STYLE:
                seen.add(impl)
    assert seen, "no recorded results found"
    missing = sorted(i for i in seen if i not in viz.IMPL_COLORS)
    assert not missing, f"implementations without a colour: {missing}"
    with pytest.raises(KeyError, match="no colour"):
        viz.color_of("someone else's kernel")


def test_plot_groups_draws_cases_in_the_books_colours(plt):
    """Chapter 9's figure: cases (not shapes) on the axis, a value missing for one implementation
    leaves its slot empty, colours from the book's table."""
    panels = [{"groups": ["eager, B = 1", "static, B = 16"], "ylabel": "tokens per second", "title": "wall clock",
               "series": {"unpatched": [185.0, 4822.3], "tfg.patch": [329.1, None], "liger": [200.6, 2824.5]}}]  # fmt: skip
    fig = viz.plot_groups(panels, title="generate", provenance="recorded on NVIDIA H200, 2026-12-04")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["eager, B = 1", "static, B = 16"]
    assert len(ax.patches) == 5
    colours = {matplotlib_colors.to_hex(p.get_facecolor()) for p in ax.patches}
    assert colours == {viz.color_of(i) for i in ("unpatched", "tfg.patch", "liger")}
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["unpatched", "tfg.patch", "liger"]


def test_plot_bench_accepts_a_plain_dict_and_rejects_no_rows(plt):
    data = synthetic_results().to_dict()
    assert viz.plot_bench(data, dtype="float32").axes
    with pytest.raises(ValueError, match="no 'ok' rows"):
        viz.plot_bench(data, op="softmax")


def test_roofline_draws_measured_roofs_and_points(plt):
    results = synthetic_results()
    fig, ax = plt.subplots()
    rows = results.where(suite="rmsnorm", status="ok", dtype="bfloat16")
    viz.roofline(ax, results, rows + [{"label": "matmul", "intensity": 2730.0, "tflops": 690.0}])
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "arithmetic intensity (FLOP/byte)" and ax.get_ylabel() == "TFLOP/s"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:3] == ["copy bandwidth 4.00 TB/s", "bfloat16 matmul 700 TFLOP/s", "float16 matmul 690 TFLOP/s"]
    assert legend[3:] == ["tritonforge", "hf-eager", "liger", "matmul"]  # one entry per implementation
    assert len(ax.collections) == len(rows) + 1
    point = viz.roofline_points(rows[:1])[0]
    assert point["intensity"] == pytest.approx(rows[0]["flops"] / rows[0]["bytes"])


RECORDED = recorded_files(bench.SCHEMA)


@pytest.mark.skipif(not RECORDED, reason="no recorded results in benchmarks/results yet")
@pytest.mark.parametrize("path", RECORDED, ids=[p.name for p in RECORDED])
def test_recorded_files_load_and_plot(plt, path):
    results = bench.read_results(path)
    assert results.provenance().startswith("recorded on ")
    timed = [r for r in results.rows if r["status"] == "ok" and r["suite"] not in ("ceilings", "profile-eager-rmsnorm")]
    for suite in dict.fromkeys(r["suite"] for r in timed):
        fig = viz.plot_bench(results, suite=suite)
        assert results.metadata["device"] in fig._suptitle.get_text()
    if results.ceilings is not None and timed:
        fig, ax = plt.subplots()
        viz.roofline(ax, results, timed)
