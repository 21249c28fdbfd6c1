r"""Plots for benchmark results: one helper for every chapter's bar chart, one for the roofline.

Every figure says where its numbers come from: "live on <device> (torch X, triton Y)" when the
chapter just measured them, or "recorded on <device>, <date> (torch X, triton Y)" when it read a
file from ``benchmarks/results/``. A reader never has to guess whether the bars are theirs.

The roofline: an op that does F FLOPs while moving B bytes has arithmetic intensity I = F / B.
With copy bandwidth W and peak rate P it can reach at most

.. math:: \min(P,\; W \cdot I)

FLOP/s. Left of the ridge I = P / W the op is memory-bound, and the honest score is the
fraction of W it reaches; right of it, the fraction of P.

matplotlib is imported inside the functions, so importing this module costs nothing and
works where matplotlib is absent; with no display it draws with the Agg backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Optional

from tritonforge.bench.costs import Ceilings
from tritonforge.bench.report import shape_label
from tritonforge.bench.results import Results
from tritonforge.bench.suites import SAME_SIZE_COPY

METRIC_LABELS = {
    "fraction_of_ceiling": "fraction of the measured ceiling",
    "us": "time per call (µs, median)",
    "gbps": "effective bandwidth (GB/s)",
    "tflops": "TFLOP/s",
    "max_rel_err": "max relative error vs float64",
}

IMPL_COLORS = {  # the same implementation keeps its colour in every chapter
    "tritonforge": "#d62728",
    "hf-eager": "#7f7f7f",
    "eager": "#7f7f7f",
    "F.rms_norm": "#1f77b4",
    "torch.compile": "#2ca02c",
    "liger": "#ff7f0e",
}

BASELINE_STYLE = {SAME_SIZE_COPY: {"color": "white", "edgecolor": "black", "hatch": "///", "linewidth": 0.6}}
"""Bars that are a measured ceiling rather than an implementation: outlined and hatched, not filled."""

FIGURE_WIDTH_IN = 7.0
"""A figure's width: the book's content column is 688 px, and a notebook draws at 100 dpi, so a
7 in figure is shown at about its own size and its fonts at their point size."""

MIN_FONT_PT = 10
"""The smallest text in a figure (legend, labels), in points at the width above."""

POINT_MARKERS = "osD^vP*X"
"""Roofline point markers, one per legend group in order (points that coincide stay tellable)."""


def as_results(results) -> Results:
    """Accept a :class:`~tritonforge.bench.results.Results` or a ``{"metadata", "rows"}`` dict."""
    if isinstance(results, Results):
        return results
    if isinstance(results, Mapping) and "rows" in results:
        return Results(metadata=dict(results.get("metadata", {})), rows=list(results["rows"]), live=bool(results.get("live")))
    raise TypeError(f"expected tritonforge.bench.Results or a dict with 'rows', got {type(results).__name__}")


def x_label(row: dict, x: str) -> str:
    value = row.get(x)
    return shape_label(value) if x == "shape" else str(value)


def plot_bench(
    results,
    x: str = "shape",
    metric: str = "fraction_of_ceiling",
    *,
    op: Optional[str] = None,
    suite: Optional[str] = None,
    dtype: Optional[str] = None,
    impls: Optional[Sequence[str]] = None,
    title: Optional[str] = None,
    log_y: Optional[bool] = None,
):
    """Grouped bars: one group per ``x`` value, one bar per implementation, one panel per dtype.

    Args:
        results: :class:`~tritonforge.bench.results.Results` (from ``load_results`` or a live run) or a
            dict with ``metadata`` and ``rows``.
        x: the row field along the x axis (``"shape"`` by default).
        metric: the row field plotted: ``fraction_of_ceiling`` (default), ``us``, ``gbps``,
            ``tflops`` or ``max_rel_err``.
        op, suite, dtype: keep only rows with these values (``dtype`` as in "bfloat16").
        impls: implementations to show, in this order (default: all, in the file's order).
        title: the figure's first line (default: suite and metric); the second line always
            says "live on ..." or "recorded on ...".
        log_y: log scale on y (default: only for ``us``).

    Returns:
        The matplotlib ``Figure``. Rows that are not ``"ok"`` (wrong, unavailable, error) are
        not drawn: a missing bar means there is no valid measurement.
    """
    import matplotlib.pyplot as plt

    results = as_results(results)
    rows = [
        r
        for r in results.rows
        if r.get("status") == "ok"
        and r.get(metric) is not None
        and (op is None or r.get("op") == op)
        and (suite is None or r.get("suite") == suite)
        and (dtype is None or r.get("dtype") == dtype)
        and (impls is None or r.get("impl") in impls)
    ]
    if not rows:
        raise ValueError(f"no 'ok' rows with a {metric!r} value match op={op!r} suite={suite!r} dtype={dtype!r}")
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    shown_impls = list(impls) if impls else list(dict.fromkeys(r["impl"] for r in rows))
    # One panel per dtype, stacked: the figure is as wide as the book's content column (7 in at
    # 100 dpi, about the column's 688 px), so its 10 pt text stays 10 pt on the page.
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(FIGURE_WIDTH_IN, 3.6 * len(dtypes) + 1.2), squeeze=False,
                             sharey=True, layout="constrained")  # fmt: skip
    axes = axes.T
    for ax, panel_dtype in zip(axes[0], dtypes):
        draw_grouped_bars(ax, [r for r in rows if r["dtype"] == panel_dtype], x, metric, shown_impls)
        ax.set_title(panel_dtype)
        ax.set_xlabel(x)
        if log_y if log_y is not None else metric == "us":
            ax.set_yscale("log")
        if metric == "fraction_of_ceiling":
            ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    for ax in axes[0]:
        ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    # Below the last panel, two columns: inside a panel it would cover bars.
    axes[0][-1].legend(title="implementation", fontsize=MIN_FONT_PT, title_fontsize=MIN_FONT_PT, ncol=2,
                       loc="upper center", bbox_to_anchor=(0.5, -0.42))  # fmt: skip
    suites = ", ".join(dict.fromkeys(r["suite"] for r in rows))
    fig.suptitle(f"{title or suites + ': ' + METRIC_LABELS.get(metric, metric)}\n{results.provenance()}", fontsize=MIN_FONT_PT)
    return fig


def draw_grouped_bars(ax, rows: list, x: str, metric: str, impls: Sequence[str]) -> None:
    groups = list(dict.fromkeys(x_label(r, x) for r in rows))
    value = {(x_label(r, x), r["impl"]): r[metric] for r in rows}
    present = [i for i in impls if any((g, i) in value for g in groups)]
    width = 0.8 / max(len(present), 1)
    for k, impl in enumerate(present):
        positions = [g + (k - (len(present) - 1) / 2) * width for g in range(len(groups))]
        heights = [value.get((group, impl), 0.0) for group in groups]
        style = BASELINE_STYLE.get(impl, {"color": IMPL_COLORS.get(impl)})
        ax.bar(positions, heights, width, label=impl, **style)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=30, ha="right")


def as_ceilings(ceilings) -> Ceilings:
    if isinstance(ceilings, Ceilings):
        return ceilings
    if isinstance(ceilings, Results):
        if ceilings.ceilings is None:
            raise ValueError("these results carry no ceilings in their metadata")
        return ceilings.ceilings
    return Ceilings.from_dict(ceilings)


def roofline_points(rows: Iterable[dict], label=None) -> list[dict]:
    """Turn result rows with bytes, flops and us into roofline points.

    Each point: ``{"label", "group", "intensity" (FLOP/byte), "tflops"}``. ``label(row)`` names a
    point (default: "impl dtype shape"); ``group`` is the implementation (one legend entry each).
    """
    label = label or (lambda r: f"{r['impl']} {r['dtype']} {shape_label(r['shape'])}")
    points = []
    for r in rows:
        if r.get("status") == "ok" and r.get("bytes") and r.get("flops") and r.get("us"):
            tflops = r["flops"] / (r["us"] * 1e-6) / 1e12
            points.append({"label": label(r), "group": r.get("impl"), "intensity": r["flops"] / r["bytes"], "tflops": tflops})
    return points


def roofline(
    ax,
    ceilings,
    points: Iterable[Mapping] = (),
    *,
    dtypes: Optional[Sequence[str]] = None,
    annotate: Optional[bool] = None,
):
    """Draw the measured roofline on ``ax`` (log-log) and place ``points`` under it.

    Args:
        ax: a matplotlib Axes.
        ceilings: :class:`~tritonforge.bench.costs.Ceilings`, its dict form, or Results carrying them.
        points: dicts with ``intensity`` (FLOP/byte) and ``tflops``, and optionally ``label`` and
            ``group``; result rows with bytes/flops/us are converted with :func:`roofline_points`.
        dtypes: which matmul roofs to draw (default: every one measured).
        annotate: write each point's label beside it. Default: only when points share legend
            groups and there are at most 8 of them (a point that is its own group is already
            named in the legend, and labels of neighbouring points would overlap).
            Each group (a point's ``group``, else its ``label``) gets one legend entry and its own
            marker.

    Returns:
        ``ax``, with the x axis "arithmetic intensity (FLOP/byte)" and y axis "TFLOP/s".
    """
    import numpy as np

    ceilings = as_ceilings(ceilings)
    converted = []
    for p in points:
        converted += [p] if "intensity" in p else roofline_points([p])
    points = converted
    peaks = {d: t for d, t in ceilings.matmul_tflops.items() if t and (dtypes is None or d in dtypes)}
    bandwidth_tb = ceilings.copy_gbps / 1e3  # TB/s == TFLOP/s per FLOP/byte
    ridges = [peak / bandwidth_tb for peak in peaks.values()] or [1.0]
    intensities = [p["intensity"] for p in points] + ridges
    grid = np.logspace(np.log10(min(intensities) / 4), np.log10(max(intensities) * 8), 200)
    ax.plot(grid, bandwidth_tb * grid, color="black", linewidth=1, linestyle=":", label=f"copy bandwidth {bandwidth_tb:.2f} TB/s")
    for dtype, peak in sorted(peaks.items(), key=lambda item: -item[1]):
        ax.plot(grid, np.minimum(peak, bandwidth_tb * grid), linewidth=2, label=f"{dtype} matmul {peak:.0f} TFLOP/s")
    groups = [str(p.get("group") or p.get("label") or "") for p in points]
    if annotate is None:
        annotate = len(points) <= 8 and len(set(groups)) < len(points)
    markers: dict[str, str] = {}
    for p, group in zip(points, groups):
        first = group not in markers
        marker = markers.setdefault(group, POINT_MARKERS[len(markers) % len(POINT_MARKERS)])
        ax.scatter([p["intensity"]], [p["tflops"]], zorder=3, color=IMPL_COLORS.get(group), marker=marker,
                   label=group if first else None)  # fmt: skip
        if annotate and p.get("label"):
            position = (p["intensity"], p["tflops"])
            ax.annotate(p["label"], position, textcoords="offset points", xytext=(4, -10), fontsize=MIN_FONT_PT)
    ax.set_xscale("log")
    ax.set_yscale("log")
    lowest = min([p["tflops"] for p in points] + [bandwidth_tb * grid[0]])
    ax.set_ylim(bottom=lowest / 3, top=max(list(peaks.values()) + [p["tflops"] for p in points] + [1.0]) * 3)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=MIN_FONT_PT, loc="lower right")
    return ax
