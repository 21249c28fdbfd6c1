r"""Plots for benchmark results: one helper for every chapter's benchmark figure, one for the roofline.

:func:`plot_groups` draws every benchmark figure in the book: shapes (or cases) on the x axis,
one bar per implementation in a colour that implementation keeps in every chapter
(:data:`COLORS`), yardsticks such as a same-size copy as lines across their group, never as bars
of their own. :func:`plot_bench` feeds it a results file, with the timer the text reads (``do_bench``
or device time). Every figure says where its numbers come from: "live on <device> (torch X,
triton Y)" when the chapter just measured them, or "recorded on <device>, <date> (torch X,
triton Y)" when it read a file from ``benchmarks/results/``.

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
TIMERS = {
    "do_bench": "triton.testing.do_bench, host included",
    "device": "device time (CUDA-graph replay)",
}

COLORS = {  # one colour per implementation, in every chapter and every figure
    "tritonforge": "#d62728",
    "tritonforge (compiled, CUDA graphs)": "#ff9896",
    "hf-eager": "#7f7f7f",
    "torch.compile": "#2ca02c",
    "torch.compile (CUDA graphs)": "#98df8a",
    "liger": "#ff7f0e",
    "F.rms_norm": "#1f77b4",
    "sdpa-flash": "#17becf",
    "sdpa-cudnn": "#9467bd",
    "naive (eager)": "#8c564b",
    "triton-tutorial": "#393b79",
    "tritonforge, 2 GPUs": "#e377c2",  # chapter 10: the tensor-parallel step
    "2 GPUs, collectives removed": "#f7b6d2",
    "collectives alone": "#bcbd22",
}
"""The implementations the book measures, each with a colour no other one has."""

SAME_IMPLEMENTATION = {
    "eager": "hf-eager",  # PyTorch eager, the Hugging Face formula
    "sdpa": "hf-eager",  # chapter 9's eager model (the Hugging Face default, SDPA attention)
    "unpatched": "hf-eager",  # a transformers model as it ships
    "tfg.patch": "tritonforge",  # ours, patched into a transformers model
    "tritonforge, 1 GPU": "tritonforge",  # chapter 10's one-GPU step: ours, unsplit
}
"""Names records give the same implementation: drawn in its colour."""

IMPL_COLORS = {**COLORS, **{alias: COLORS[name] for alias, name in SAME_IMPLEMENTATION.items()}}

BASELINE_STYLE = {SAME_SIZE_COPY: {"color": "black", "linestyle": "--", "linewidth": 1.4, "label": "same-size copy"}}
"""Rows that are a yardstick rather than an implementation: drawn as a line across their shape's
bars (never as bars, never on an x tick of their own)."""

FIGURE_WIDTH_IN = 7.0
"""A figure's width: the book's content column is 688 px, and a notebook draws at 100 dpi, so a
7 in figure is shown at about its own size and its fonts at their point size."""

MIN_FONT_PT = 10
"""The smallest text in a figure (legend, labels), in points at the width above."""

POINT_MARKERS = "osD^vP*X"
"""Roofline point markers, one per legend group in order (points that coincide stay tellable)."""


def color_of(impl: str) -> str:
    """The book's colour for ``impl``; ``KeyError`` for an implementation that has none yet
    (add it to :data:`COLORS`, in a colour no other implementation has)."""
    try:
        return IMPL_COLORS[impl]
    except KeyError:
        raise KeyError(f"no colour for implementation {impl!r}: add it to tritonforge.book.viz.COLORS") from None


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


def metric_value(row: dict, metric: str, timer: str = "do_bench") -> Optional[float]:
    """``row[metric]`` as ``timer`` measured it, or None. The rows' rates and fractions come
    from ``us`` (``do_bench``); under ``timer="device"`` they are scaled to the row's device time,
    and a row without one (a CUDA-graph row, a copy) has no value."""
    value = row.get(metric)
    if timer == "do_bench" or value is None or metric == "max_rel_err":
        return value
    if timer != "device":
        raise ValueError(f"timer must be one of {sorted(TIMERS)}, got {timer!r}")
    device_us, us = row.get("device_us"), row.get("us")
    if not device_us or not us:
        return None
    return device_us if metric == "us" else value * us / device_us


def plot_bench(
    results,
    x: str = "shape",
    metric: str = "fraction_of_ceiling",
    *,
    timer: str = "do_bench",
    op: Optional[str] = None,
    suite: Optional[str] = None,
    dtype: Optional[str] = None,
    impls: Optional[Sequence[str]] = None,
    title: Optional[str] = None,
    log_y: Optional[bool] = None,
):
    """Grouped bars of a results file: one group per ``x`` value (a shape), one bar per
    implementation in its book-wide colour, one panel per dtype; each shape's same-size copy, where
    the run timed one, is a line across its group.

    Args:
        results: :class:`~tritonforge.bench.results.Results` (from ``load_results`` or a live run) or a
            dict with ``metadata`` and ``rows``.
        x: the row field along the x axis (``"shape"`` by default).
        metric: the row field plotted: ``fraction_of_ceiling`` (default), ``us``, ``gbps``,
            ``tflops`` or ``max_rel_err``.
        timer: ``"do_bench"`` (the rows' ``us``, host included) or ``"device"`` (their
            ``device_us``: CUDA-graph replay, no host); a row without that time is not drawn.
        op, suite, dtype: keep only rows with these values (``dtype`` as in "bfloat16").
        impls: implementations to show, in this order (default: all, in the file's order).
        title: the figure's first line (default: suite and metric); the second says which timer,
            the third "live on ..." or "recorded on ...".
        log_y: log scale on y (default: only for ``us``).

    Returns:
        The matplotlib ``Figure``. Rows that are not ``"ok"`` (wrong, unavailable, error) are
        not drawn: a missing bar means there is no valid measurement.
    """
    results = as_results(results)

    def kept(r):
        return (r.get("status") == "ok" and r.get("suite") != "ceilings" and metric_value(r, metric, timer) is not None
                and (op is None or r.get("op") == op) and (suite is None or r.get("suite") == suite)
                and (dtype is None or r.get("dtype") == dtype))  # fmt: skip

    rows = [r for r in results.rows if kept(r) and r["impl"] not in BASELINE_STYLE and (impls is None or r["impl"] in impls)]
    if not rows:
        raise ValueError(f"no 'ok' rows with a {metric!r} value ({timer}) match op={op!r} suite={suite!r} dtype={dtype!r}")
    baselines = [r for r in results.rows if kept(r) and r["impl"] in BASELINE_STYLE]
    shown = list(impls) if impls else list(dict.fromkeys(r["impl"] for r in rows))
    panels = []
    for panel_dtype in dict.fromkeys(r["dtype"] for r in rows):
        panel = [r for r in rows if r["dtype"] == panel_dtype]
        groups = list(dict.fromkeys(x_label(r, x) for r in panel))
        value = {(x_label(r, x), r["impl"]): metric_value(r, metric, timer) for r in panel}
        series = {impl: [value.get((g, impl)) for g in groups] for impl in shown if any((g, impl) in value for g in groups)}
        lines = {}
        for name in BASELINE_STYLE:
            matched = [_baseline_for(panel, baselines, name, g, x) for g in groups]
            if any(b is not None for b in matched):
                lines[name] = [None if b is None else metric_value(b, metric, timer) for b in matched]
        panels.append({"title": panel_dtype, "groups": groups, "series": series, "baselines": lines,
                       "ylabel": METRIC_LABELS.get(metric, metric), "xlabel": x,
                       "log_y": log_y if log_y is not None else metric == "us",
                       "reference": 1.0 if metric == "fraction_of_ceiling" else None})  # fmt: skip
    suites = ", ".join(dict.fromkeys(r["suite"] for r in rows))
    heading = f"{title or suites + ': ' + METRIC_LABELS.get(metric, metric)}\n{TIMERS[timer]}"
    return plot_groups(panels, title=heading, provenance=results.provenance())


def _baseline_for(panel: list[dict], baselines: list[dict], name: str, group: str, x: str) -> Optional[dict]:
    """The baseline row ``name`` that belongs to ``group``: same dtype, and the same shape or the
    same bytes as the group's rows (a copy of a flat element count moves a shape's bytes)."""
    members = [r for r in panel if x_label(r, x) == group]
    for b in baselines:
        if b["impl"] != name:
            continue
        for r in members:
            if b["dtype"] == r["dtype"] and (b.get("shape") == r.get("shape") or (b.get("bytes") and b.get("bytes") == r.get("bytes"))):
                return b
    return None


def plot_groups(panels: Sequence[Mapping], *, title: str, provenance: str):
    """The book's benchmark figure: stacked panels of grouped bars, as wide as the content column.

    Each panel is a mapping with ``groups`` (the x tick labels: shapes, or cases), ``series``
    (``{implementation: [value or None per group]}``, drawn as bars in the implementation's book-wide
    colour), and optionally ``baselines`` (``{name: [value or None per group]}``, drawn as lines
    across each group), ``title``, ``ylabel``, ``xlabel``, ``log_y`` and ``reference`` (a dashed
    horizontal line, e.g. 1 for a fraction of a ceiling). One legend, below the last panel;
    ``title`` and ``provenance`` head the figure. Returns the ``Figure``.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 1, figsize=(FIGURE_WIDTH_IN, 3.6 * len(panels) + 1.4), squeeze=False,
                             layout="constrained")  # fmt: skip
    handles: dict[str, object] = {}
    for ax, panel in zip(axes[:, 0], panels):
        handles.update(draw_groups(ax, panel["groups"], panel["series"], baselines=panel.get("baselines")))
        ax.set_title(panel.get("title", ""))
        ax.set_ylabel(panel.get("ylabel", ""))
        ax.set_xlabel(panel.get("xlabel", ""))
        if panel.get("log_y"):
            ax.set_yscale("log")
        if panel.get("reference") is not None:
            ax.axhline(panel["reference"], color="black", linewidth=0.8, linestyle=":")
    # Below the last panel, two columns: inside a panel it would cover bars.
    axes[-1, 0].legend(list(handles.values()), list(handles), fontsize=MIN_FONT_PT, ncol=2, loc="upper center",
                       bbox_to_anchor=(0.5, -0.42))  # fmt: skip
    fig.suptitle(f"{title}\n{provenance}", fontsize=MIN_FONT_PT)
    return fig


def draw_groups(ax, groups: Sequence[str], series: Mapping[str, Sequence], *, baselines: Optional[Mapping] = None) -> dict:
    """Grouped bars on ``ax``: one group per label in ``groups``, one bar per implementation of
    ``series`` in its colour (a None value leaves its slot empty), and each baseline as a short
    line across its group. Returns ``{legend label: artist}``."""
    width = 0.8 / max(len(series), 1)
    handles = {}
    for k, (impl, values) in enumerate(series.items()):
        positions = [g + (k - (len(series) - 1) / 2) * width for g in range(len(groups))]
        drawn = [(p, v) for p, v in zip(positions, values) if v is not None]
        bars = ax.bar([p for p, _ in drawn], [v for _, v in drawn], width, color=color_of(impl), label=impl)
        handles[impl] = bars
    for name, values in (baselines or {}).items():
        style = dict(BASELINE_STYLE.get(name, {"color": "black", "linestyle": "--", "linewidth": 1.4}))
        label = style.pop("label", name)
        for g, v in enumerate(values):
            if v is not None:
                (line,) = ax.plot([g - 0.45, g + 0.45], [v, v], **style)
                handles[label] = line
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=30 if max(map(len, groups), default=0) > 9 else 0,
                       ha="right" if max(map(len, groups), default=0) > 9 else "center")  # fmt: skip
    return handles


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
