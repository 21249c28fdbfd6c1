"""Tables: what ``python -m tritonforge.bench`` prints and ``Results.table()`` returns (markdown),
and :class:`Table`, the HTML table a notebook shows instead of a wide block of text.

A printed table is monospace text that cannot wrap: in the book's content column (about 85
characters) a wider one hides its right-hand columns behind a scroll bar. A :class:`Table` (and a
:class:`~tritonforge.bench.results.Results` shown as a cell's value) is an HTML table whose
headers wrap, so it fits the column; printed, it is still plain text.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence


def shape_label(shape: Sequence[int]) -> str:
    """[4096, 512] -> "4096×512"."""
    return "×".join(str(s) for s in shape)


PASSES_NOT_COUNTED = "n/a (no kernel launched through an aten op: the profile counts full-tensor passes of aten kernels only)"
"""What a profile row says when ``hbm_passes`` is ``None``: a Triton kernel (or anything launched
outside an aten op) cannot be tied to its input shapes by the profiler, so no pass was counted;
that is not the same as "no pass"."""


def full_tensor_passes(row: dict) -> str:
    """A profile row's ``hbm_passes`` in words: the count; ``n/a (why)`` when the method could not
    count any; ``not recorded`` when the row has no such field. Never "None"."""
    if "hbm_passes" not in row:
        return "not recorded"
    return PASSES_NOT_COUNTED if row["hbm_passes"] is None else str(row["hbm_passes"])


def kernel_summary(row: dict) -> str:
    """One line for a profile row: "8 CUDA kernels, 6 of them over the full tensor", or what is
    missing, said as such (a chapter prints this under the profiler's kernel list)."""
    count = row.get("kernel_count")
    kernels = "kernel count not recorded" if count is None else f"{count} CUDA kernel{'' if count == 1 else 's'}"
    if row.get("hbm_passes") is not None:
        return f"{kernels}, {row['hbm_passes']} of them over the full tensor"
    return f"{kernels}; full-tensor passes: {full_tensor_passes(row)}"


def cell(row: dict) -> str:
    """One table cell: "µs (fraction)" for a timed row, else its status."""
    if row["status"] != "ok":
        return {"wrong": "WRONG", "unavailable": "n/a", "error": "error"}.get(row["status"], str(row["status"]))
    fraction = row["fraction_of_ceiling"]
    return f"{row['us']:.1f} ({fraction:.2f})" if fraction is not None else f"{row['us']:.1f}"


def format_suite(suite: str, rows: list[dict]) -> str:
    """A markdown table for one suite: one line per (dtype, shape), one column per impl."""
    lines = [f"## {suite}"]
    if suite == "ceilings":
        lines += ["| op | dtype | shape | µs | rate |", "|---|---|---|---|---|"]
        for r in rows:
            rate = f"{r['gbps']:.0f} GB/s" if r["gbps"] else (f"{r['tflops']:.1f} TFLOP/s" if r["tflops"] else r["status"])
            us = f"{r['us']:.1f}" if r["us"] is not None else "-"
            lines.append(f"| {r['op']} | {r['dtype']} | {shape_label(r['shape'])} | {us} | {rate} |")
    elif suite == "profile-eager-rmsnorm":
        lines += ["| impl | dtype | shape | CUDA kernels | full-tensor passes | kernel names |", "|---|---|---|---|---|---|"]
        for r in rows:
            names = ", ".join(k[:60] for k in r.get("kernels") or []) or (r["note"] or "")
            lines.append(f"| {r['impl']} | {r['dtype']} | {shape_label(r['shape'])} | {r.get('kernel_count', 'not recorded')} "
                         f"| {full_tensor_passes(r)} | {names} |")  # fmt: skip
    else:
        impls = list(dict.fromkeys(r["impl"] for r in rows))
        keys = list(dict.fromkeys((r["dtype"], tuple(r["shape"])) for r in rows))
        by_key = {(r["dtype"], tuple(r["shape"]), r["impl"]): r for r in rows}
        lines.append("| dtype | shape | " + " | ".join(f"{i} µs (frac)" for i in impls) + " |")
        lines.append("|---|---|" + "---|" * len(impls))
        for dtype, shape in keys:
            cells = [cell(by_key[(dtype, shape, i)]) if (dtype, shape, i) in by_key else "" for i in impls]
            lines.append(f"| {dtype} | {shape_label(shape)} | " + " | ".join(cells) + " |")
        lines += [f"cost: {f}" for f in dict.fromkeys(r["formula"] for r in rows if r["formula"])]
        lines.append(f"frac = fraction of {fraction_of(rows)}")
        timed_on_device = [i for i in impls if any(r["impl"] == i and r.get("device_us") is not None for r in rows)]
        if timed_on_device:
            lines += ["", "device µs (CUDA-graph replay: no host time, no L2 flush between calls)",
                      "| dtype | shape | " + " | ".join(timed_on_device) + " |", "|---|---|" + "---|" * len(timed_on_device)]  # fmt: skip
            for dtype, shape in keys:
                cells = [by_key.get((dtype, shape, i), {}).get("device_us") for i in timed_on_device]
                text = " | ".join("" if us is None else f"{us:.1f}" for us in cells)
                lines.append(f"| {dtype} | {shape_label(shape)} | {text} |")
    seen = ["  " + note for note in not_counted(rows)]
    return "\n".join(lines + (["not counted:"] + seen if seen else []))


def not_counted(rows: list[dict]) -> list[str]:
    """One sentence per implementation and reason for the rows that were not timed: rows whose
    notes differ only in their numbers (the same error at every long row) are said once, with
    the shapes they cover and the first row's note, instead of once a row."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["status"] != "ok" and r["note"]:
            groups.setdefault((r["impl"], r["status"], re.sub(r"\d[\d.,]*", "#", r["note"])), []).append(r)
    sentences = []
    for (impl, status, _), group in groups.items():
        first = group[0]
        if len(group) == 1:
            sentences.append(f"{impl} {first['dtype']} {shape_label(first['shape'])}: {status}: {first['note']}")
            continue
        dtypes = " and ".join(dict.fromkeys(r["dtype"] for r in group))
        shapes = ", ".join(dict.fromkeys(shape_label(r["shape"]) for r in group))
        same = all(r["note"] == first["note"] for r in group)
        sentences.append(f"{impl} at {len(group)} rows ({dtypes}; {shapes}): {status}" + (": " if same else ", e.g. ") + first["note"])
    return sentences


def format_results(results) -> str:
    """Every suite of a :class:`~tritonforge.bench.results.Results`, under its provenance and ceilings."""
    header = [results.provenance()]
    ceilings = results.ceilings
    if ceilings:
        matmul = ", ".join(f"{d} {t:.0f}" for d, t in ceilings.matmul_tflops.items())
        header.append(f"ceilings: copy {ceilings.copy_gbps:.0f} GB/s; matmul TFLOP/s: {matmul}")
    suites = list(dict.fromkeys(r["suite"] for r in results.rows))
    return "\n\n".join(["\n".join(header)] + [format_suite(s, [r for r in results.rows if r["suite"] == s]) for s in suites])


class Table:
    """A small table shown as HTML in a notebook (headers wrap to fit the page) and as aligned text
    by ``print``.

    Args:
        header: the column names.
        rows: one sequence of cells per row (any values; ``str()`` is shown).
        title: a line above the table (optional).
        notes: lines below it (optional).
        left: how many leading columns are text, aligned left (default 1); the rest align right.
    """

    def __init__(self, header: Sequence[str], rows: Sequence[Sequence], *, title: str = "",
                 notes: Sequence[str] = (), left: int = 1):  # fmt: skip
        self.header = [str(h) for h in header]
        self.rows = [["" if c is None else str(c) for c in row] for row in rows]
        self.title, self.notes, self.left = title, list(notes), left

    def __str__(self) -> str:
        rows = [[c.replace("\n", " ") for c in row] for row in self.rows]  # a cell's lines, on one line
        widths = [max([len(h)] + [len(r[k]) for r in rows if k < len(r)]) for k, h in enumerate(self.header)]

        def line(cells):
            return "  ".join(c.ljust(w) if k < self.left else c.rjust(w) for k, (c, w) in enumerate(zip(cells, widths))).rstrip()

        return "\n".join(([self.title] if self.title else []) + [line(self.header)] + [line(r) for r in rows] + self.notes)

    def __repr__(self) -> str:
        return str(self)

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        return html_table(self.header, self.rows, title=self.title, notes=self.notes, left=self.left)


def html_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, title: str = "",
               notes: Sequence[str] = (), left: int = 1) -> str:  # fmt: skip
    """An HTML table; a cell's ``\\n`` becomes a line break. Headers may also break after ``.``,
    ``_`` and ``-`` (``torch.compile``), text cells inside a word of more than 24 characters;
    short cells (numbers) never break. A column after the first ``left`` ones aligns right when
    all its cells are short (at most 16 characters), else left."""
    right = [k >= left and all(len(str(row[k])) <= 16 for row in rows if k < len(row)) for k in range(len(header))]

    def cell(tag: str, text: str, k: int) -> str:
        lines = [html.escape(part) for part in str(text).split("\n")]
        if tag == "th":
            lines = [re.sub(r"([._-])", r"\1<wbr>", line) for line in lines]
            style = "white-space:normal"
        else:
            long_word = any(len(word) > 24 for word in str(text).split())
            style = "overflow-wrap:anywhere" if long_word else "white-space:nowrap" if len(str(text)) <= 16 else "white-space:normal"
        align = "right" if k < len(right) and right[k] else "left"
        return f'<{tag} style="text-align:{align}; {style}; padding:0.15em 0.4em">{"<br>".join(lines)}</{tag}>'

    parts = [f"<p>{html.escape(title)}</p>"] if title else []
    parts.append('<table class="tritonforge-table" style="font-size:0.85em; max-width:100%">')
    parts.append("<thead><tr>" + "".join(cell("th", h, k) for k, h in enumerate(header)) + "</tr></thead><tbody>")
    parts += ["<tr>" + "".join(cell("td", c, k) for k, c in enumerate(row)) + "</tr>" for row in rows]
    parts.append("</tbody></table>")
    parts += [f"<p>{html.escape(n)}</p>" for n in notes]
    return "\n".join(parts)


def fraction_of(rows: list[dict]) -> str:
    """What the rows' fractions are of: each row names its ceiling (``"copy"`` for memory-bound
    ops, ``"matmul"`` for attention prefill and the MLP front at prefill)."""
    ceilings = {r.get("ceiling") for r in rows if r.get("ceiling")}
    if ceilings == {"matmul"}:
        return "the measured matmul rate"
    if ceilings <= {"copy"}:
        return "the measured copy bandwidth"
    return "each row's ceiling: the copy bandwidth, or the matmul rate where compute bounds the shape"


def _suite_tables(suite: str, rows: list[dict]) -> list[Table]:
    """One suite as :class:`Table` objects (the HTML form of :func:`format_suite`)."""
    if suite == "ceilings":
        body = [[r["op"], r["dtype"], shape_label(r["shape"]), "-" if r["us"] is None else f"{r['us']:.1f}",
                 f"{r['gbps']:.0f} GB/s" if r["gbps"] else (f"{r['tflops']:.1f} TFLOP/s" if r["tflops"] else r["status"])]
                for r in rows]  # fmt: skip
        return [Table(["op", "dtype", "shape", "µs", "rate"], body, title=suite, left=3)]
    if suite == "profile-eager-rmsnorm":
        body = [[r["impl"], r["dtype"], shape_label(r["shape"]), r.get("kernel_count", "not recorded"), full_tensor_passes(r),
                 "\n".join(k[:60] for k in r.get("kernels") or []) or (r["note"] or "")] for r in rows]  # fmt: skip
        return [Table(["impl", "dtype", "shape", "CUDA kernels", "full-tensor passes", "kernel names"], body, title=suite, left=3)]
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    keys = list(dict.fromkeys((r["dtype"], tuple(r["shape"])) for r in rows))
    by_key = {(r["dtype"], tuple(r["shape"]), r["impl"]): r for r in rows}
    tables = []
    for dtype in dict.fromkeys(d for d, _ in keys):
        body = [[shape_label(shape)] + [cell(by_key[(d, shape, i)]).replace(" (", "\n(") if (d, shape, i) in by_key else ""
                                        for i in impls] for d, shape in keys if d == dtype]  # fmt: skip
        tables.append(Table(["shape"] + impls, body, title=f"{suite}, {dtype}: µs per call (fraction of {fraction_of(rows)})"))
    notes = [f"cost: {f}" for f in dict.fromkeys(r["formula"] for r in rows if r["formula"])]
    timed_on_device = [i for i in impls if any(r["impl"] == i and r.get("device_us") is not None for r in rows)]
    if timed_on_device:
        body = [[dtype, shape_label(shape)] + ["" if by_key.get((dtype, shape, i), {}).get("device_us") is None
                                               else f"{by_key[(dtype, shape, i)]['device_us']:.1f}" for i in timed_on_device]
                for dtype, shape in keys]  # fmt: skip
        tables.append(Table(["dtype", "shape"] + timed_on_device, body, left=2,
                            title="device µs (CUDA-graph replay: no host time, no L2 flush between calls)"))  # fmt: skip
    notes += [f"not counted: {note}" for note in not_counted(rows)]
    tables[-1].notes = list(dict.fromkeys(notes))
    return tables


def format_results_html(results) -> str:
    """:func:`format_results` as HTML tables that wrap to fit a page (what a notebook shows for a
    :class:`~tritonforge.bench.results.Results` that is a cell's value)."""
    header = [results.provenance()]
    ceilings = results.ceilings
    if ceilings:
        matmul = ", ".join(f"{d} {t:.0f}" for d, t in ceilings.matmul_tflops.items())
        header.append(f"ceilings: copy {ceilings.copy_gbps:.0f} GB/s; matmul TFLOP/s: {matmul}")
    parts = ["<p>" + "<br>".join(html.escape(h) for h in header) + "</p>"]
    for suite in dict.fromkeys(r["suite"] for r in results.rows):
        parts += [t._repr_html_() for t in _suite_tables(suite, [r for r in results.rows if r["suite"] == suite])]
    return "\n".join(parts)
