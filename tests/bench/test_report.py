"""The tables (tritonforge.bench.report)."""

from __future__ import annotations

from tritonforge import bench

from .fakes import synthetic_results


def test_table_shows_times_fractions_and_what_was_not_counted():
    text = synthetic_results().table()
    assert "recorded on NVIDIA H200, 2026-11-29 (torch 2.11.0+cu130, triton 3.6.0)" in text
    assert "| dtype | shape | tritonforge µs (frac) | hf-eager µs (frac) | liger µs (frac) | torch.compile µs (frac) |" in text
    assert "WRONG" in text and "not timed" in text
    assert "cost: bytes = (2·M·N + N)·elem" in text
    assert repr(synthetic_results()).startswith("<Results: 14 rows, recorded on NVIDIA H200")


def test_table_adds_device_times_when_rows_have_them():
    results = synthetic_results()
    assert "device µs" not in results.table()
    for row in results.where(impl="tritonforge", status="ok"):
        row["device_us"] = 12.25
    text = results.table()
    assert "device µs (CUDA-graph replay" in text and "| tritonforge |" in text
    assert "| bfloat16 | 4096×8192 | 12.2 |" in text or "| bfloat16 | 4096×8192 | 12.3 |" in text


def test_shape_label():
    assert bench.shape_label([4096, 512]) == "4096×512" and bench.shape_label([7]) == "7"


def test_a_missing_pass_count_reads_as_what_it_is_never_none():
    """A profile row whose kernels were not launched through aten ops has ``hbm_passes=None``:
    "not counted", which must not print as "None" (read as "no full pass")."""
    counted = {"kernel_count": 8, "hbm_passes": 6}
    triton_kernel = {"kernel_count": 1, "hbm_passes": None}
    assert bench.kernel_summary(counted) == "8 CUDA kernels, 6 of them over the full tensor"
    assert bench.kernel_summary(triton_kernel).startswith("1 CUDA kernel; full-tensor passes: n/a (")
    assert bench.full_tensor_passes({"kernel_count": 1}) == "not recorded"
    assert bench.kernel_summary({}) == "kernel count not recorded; full-tensor passes: not recorded"
    row = {"impl": "tritonforge", "dtype": "bfloat16", "shape": [4096, 4096], "status": "ok", "kernels": ["k"], "note": None, **triton_kernel}
    table = bench.format_suite("profile-eager-rmsnorm", [row])
    assert "None" not in table and "| 1 | n/a (" in table


def test_results_in_a_notebook_are_html_tables_one_per_dtype():
    results = synthetic_results()
    for row in results.where(impl="tritonforge", status="ok"):
        row["device_us"] = 12.25
    page = results._repr_html_()
    assert page.startswith("<p>recorded on NVIDIA H200, 2026-11-29")
    assert page.count("<table") == 4  # ceilings; rmsnorm bfloat16, float32, and the device times
    assert "µs per call (fraction of the measured copy bandwidth)" in page and "device µs (CUDA-graph replay" in page
    assert "torch.<wbr>compile" in page  # a header may break after the dot
    assert "WRONG" in page and "cost: bytes = (2·M·N + N)·elem" in page


def test_a_table_is_html_in_a_notebook_and_aligned_text_when_printed():
    table = bench.Table(["dtype", "ours µs"], [["bfloat16", 12.25], ["float32", None]], title="t", notes=["n <b>"])
    assert str(table).splitlines() == ["t", "dtype     ours µs", "bfloat16    12.25", "float32", "n <b>"]
    page = table._repr_html_()
    assert page.startswith("<p>t</p>") and "<p>n &lt;b&gt;</p>" in page
    assert 'text-align:right; white-space:nowrap; padding:0.15em 0.4em">12.25</td>' in page
    assert "<td" in page and page.count("<tr>") == 3


def test_fractions_name_the_ceiling_they_are_of():
    """A table's fractions are of the copy bandwidth, the matmul rate, or each row's own (the MLP
    front: copy at decode, matmul at prefill): the legend says which."""
    from tritonforge.bench.report import fraction_of

    assert fraction_of([{"ceiling": "copy"}, {"ceiling": None}]) == "the measured copy bandwidth"
    assert fraction_of([{"ceiling": "matmul"}]) == "the measured matmul rate"
    assert "each row's ceiling" in fraction_of([{"ceiling": "copy"}, {"ceiling": "matmul"}])


def test_rows_not_counted_for_the_same_reason_are_said_once():
    """Twelve rows refused with the same error (Liger at every row longer than its block limit)
    make one sentence naming the rows, not twelve lines; a reason of its own keeps its own."""
    from tritonforge.bench.report import not_counted

    def refused(dtype, shape, note, status="error"):
        return {"impl": "liger", "dtype": dtype, "shape": shape, "status": status, "note": note}

    rows = [refused(d, [m, n], f"RuntimeError: n = {n} exceeds the block size 65536")
            for d in ("float32", "bfloat16") for m, n in ((64, 131072), (1, 262144))]  # fmt: skip
    rows.append(refused("float32", [8, 4096], "max_rel_err 0.03 > tolerance 0.016", status="wrong"))
    rows.append({"impl": "tritonforge", "dtype": "float32", "shape": [8, 4096], "status": "ok", "note": None})
    sentences = not_counted(rows)
    assert sentences == [
        "liger at 4 rows (float32 and bfloat16; 64×131072, 1×262144): error, e.g. RuntimeError: n = 131072 exceeds the block size 65536",
        "liger float32 8×4096: wrong: max_rel_err 0.03 > tolerance 0.016",
    ]
