"""Tables: what ``python -m tritonforge.bench`` prints and ``Results.table()`` returns (markdown)."""

from __future__ import annotations

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
        lines.append("frac = fraction of the measured copy bandwidth")
        timed_on_device = [i for i in impls if any(r["impl"] == i and r.get("device_us") is not None for r in rows)]
        if timed_on_device:
            lines += ["", "device µs (CUDA-graph replay: no host time, no L2 flush between calls)",
                      "| dtype | shape | " + " | ".join(timed_on_device) + " |", "|---|---|" + "---|" * len(timed_on_device)]  # fmt: skip
            for dtype, shape in keys:
                cells = [by_key.get((dtype, shape, i), {}).get("device_us") for i in timed_on_device]
                text = " | ".join("" if us is None else f"{us:.1f}" for us in cells)
                lines.append(f"| {dtype} | {shape_label(shape)} | {text} |")
    notes = [f"  {r['impl']} {r['dtype']} {shape_label(r['shape'])}: {r['status']}: {r['note']}"
             for r in rows if r["status"] != "ok" and r["note"]]  # fmt: skip
    seen = dict.fromkeys(notes)
    return "\n".join(lines + (["not counted:"] + list(seen) if seen else []))


def format_results(results) -> str:
    """Every suite of a :class:`~tritonforge.bench.results.Results`, under its provenance and ceilings."""
    header = [results.provenance()]
    ceilings = results.ceilings
    if ceilings:
        matmul = ", ".join(f"{d} {t:.0f}" for d, t in ceilings.matmul_tflops.items())
        header.append(f"ceilings: copy {ceilings.copy_gbps:.0f} GB/s; matmul TFLOP/s: {matmul}")
    suites = list(dict.fromkeys(r["suite"] for r in results.rows))
    return "\n\n".join(["\n".join(header)] + [format_suite(s, [r for r in results.rows if r["suite"] == s]) for s in suites])
