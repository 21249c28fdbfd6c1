"""The plots of benchmark results and the roofline drawing (tritonforge.book.viz)."""

from __future__ import annotations

import pytest
import torch

from tests.bench.fakes import recorded_files, synthetic_results
from tritonforge import bench
from tritonforge.book import viz


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


def test_plot_bench_draws_the_same_size_copy_as_an_outline(plt):
    results = synthetic_results()
    ceilings = results.ceilings
    for dtype in (torch.float32, torch.bfloat16):
        cost = bench.copy_cost(4096 * 512, dtype)
        row = bench.make_row("rmsnorm", "copy", bench.SAME_SIZE_COPY, dtype, [4096, 512], bytes=cost.bytes,
                             ceiling="copy", status="ok", us=15.0)  # fmt: skip
        results.rows.append(bench.add_throughput(row, ceilings))
    fig = viz.plot_bench(results, suite="rmsnorm")
    bars = {patch.get_hatch() for patch in fig.axes[0].patches}
    assert "///" in bars and None in bars  # the baseline hatched, the implementations filled
    assert bench.SAME_SIZE_COPY in [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]


def test_plot_bench_says_live(plt):
    fig = viz.plot_bench(synthetic_results(live=True), metric="us", dtype="bfloat16", title="RMSNorm forward")
    assert fig._suptitle.get_text().startswith("RMSNorm forward\nlive on NVIDIA H200 (torch 2.11.0+cu130")
    assert fig.axes[0].get_yscale() == "log" and "µs" in fig.axes[0].get_ylabel()


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
