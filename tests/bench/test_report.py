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
