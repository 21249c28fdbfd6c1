"""The benchmark harness on a CPU: formulas, the results schema, the no-GPU exit, the plots.

No timing is asserted anywhere (timings never go in tests): the suites run here with a fake
timer, so what is checked is the bookkeeping around the clock: each row is checked against
float64 before it is timed, wrong rows are not timed, and the fractions follow the formulas.
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tritonforge as tfg
from tritonforge import bench

REPO_ROOT = Path(__file__).resolve().parent.parent
needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA GPU")

# From the anchor run on one H200 (2026-11-29): copy ceiling and one Liger RMSNorm row.
ANCHOR_COPY_GBPS = 4150.207870840478
ANCHOR_LIGER_FP32_4096x8192 = {"us": 68.44799965620041, "fraction": 0.9450663052653672}


class FakeTimer:
    """Stands in for do_bench: runs fn once, records the call, returns a fixed time."""

    def __init__(self, us: float = 10.0):
        self.us = us
        self.calls = 0

    def __call__(self, fn, grad_to_none=None):
        fn()
        self.calls += 1
        return self.us


def synthetic_results(date: str = "2026-11-29T12:00:00+00:00", live: bool = False) -> bench.Results:
    ceilings = bench.Ceilings(copy_gbps=4000.0, matmul_tflops={"bfloat16": 700.0, "float16": 690.0})
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for m, n in ((4096, 512), (4096, 8192)):
            cost = bench.rmsnorm_forward_cost(m, n, dtype)
            for impl, us in (("tritonforge", 20.0), ("hf-eager", 90.0), ("liger", 25.0)):
                row = bench.make_row("rmsnorm", "rmsnorm", impl, dtype, [m, n], bytes=cost.bytes, flops=cost.flops,
                                     formula=cost.formula, ceiling=cost.ceiling, status="ok", us=us * n / 512,
                                     max_rel_err=1e-6, tolerance=1e-4)  # fmt: skip
                rows.append(bench.add_throughput(row, ceilings))
    rows.append(bench.make_row("rmsnorm", "rmsnorm", "torch.compile", torch.float32, [4096, 512], status="wrong",
                               note="max_rel_err 0.5 > tolerance 0.0001: not timed"))  # fmt: skip
    rows.append(bench.make_row("ceilings", "copy", "torch.Tensor.copy_", torch.float32, [2**29], status="ok", us=1000.0,
                               bytes=2**32, formula="bytes = 2·n·elem"))  # fmt: skip
    metadata = {
        "suite": "rmsnorm", "suites": ["ceilings", "rmsnorm"], "device": "NVIDIA H200", "compute_capability": "9.0",
        "torch": "2.11.0+cu130", "triton": "3.6.0", "liger": "0.6.4", "python": "3.12.3", "date": date,
        "command": "python3 -m tritonforge.bench rmsnorm", "git_commit": "0" * 40, "ceilings": ceilings.to_dict(),
    }  # fmt: skip
    return bench.Results(metadata=metadata, rows=rows, live=live)


# ----------------------------------------------------------------------------------------------
# Formulas
# ----------------------------------------------------------------------------------------------


def test_ceiling_formulas():
    assert bench.copy_bytes(1000, 4) == 8000  # read 4000 bytes + write 4000 bytes
    assert bench.matmul_flops(8192, 8192, 8192) == 2 * 8192**3
    assert bench.matmul_flops(2, 3, 5) == 60


def test_axpy_moves_three_tensors():
    assert bench.axpy_bytes(1000, 2) == 6000
    cost = bench.axpy_cost(1000, torch.float32)
    assert (cost.bytes, cost.flops, cost.ceiling) == (12000, 2000, "copy")
    assert "3·n·elem" in cost.formula


def test_rmsnorm_formulas():
    assert bench.rmsnorm_forward_bytes(4096, 512, 2) == (2 * 4096 * 512 + 512) * 2
    assert bench.rmsnorm_forward_backward_bytes(4096, 512, 4) == (5 * 4096 * 512 + 3 * 512) * 4
    forward = bench.rmsnorm_forward_cost(64, 8192, torch.bfloat16)
    both = bench.rmsnorm_forward_backward_cost(64, 8192, torch.bfloat16)
    assert forward.bytes == (2 * 64 * 8192 + 8192) * 2 and forward.flops == 4 * 64 * 8192
    assert both.bytes == (5 * 64 * 8192 + 3 * 8192) * 2 and both.flops == 13 * 64 * 8192
    assert "write dx" in both.formula and "read dy" in both.formula


def test_rmsnorm_formula_reproduces_the_anchor_fraction():
    """Same bytes convention as the peers' anchor table: its fraction comes back exactly."""
    cost = bench.rmsnorm_forward_cost(4096, 8192, torch.float32)
    row = bench.make_row("rmsnorm", "rmsnorm", "liger", torch.float32, [4096, 8192], bytes=cost.bytes,
                         flops=cost.flops, ceiling="copy", us=ANCHOR_LIGER_FP32_4096x8192["us"])  # fmt: skip
    bench.add_throughput(row, bench.Ceilings(ANCHOR_COPY_GBPS, {}))
    assert row["fraction_of_ceiling"] == pytest.approx(ANCHOR_LIGER_FP32_4096x8192["fraction"], rel=1e-9)


def test_throughput_against_a_matmul_ceiling():
    row = bench.make_row("x", "mm", "ours", torch.bfloat16, [8192] * 3, flops=2 * 8192**3, ceiling="matmul-bfloat16", us=2000.0)
    bench.add_throughput(row, bench.Ceilings(4000.0, {"bfloat16": 700.0}))
    assert row["tflops"] == pytest.approx(2 * 8192**3 / 2e-3 / 1e12)
    assert row["fraction_of_ceiling"] == pytest.approx(row["tflops"] / 700.0)
    assert row["gbps"] is None
    bare = bench.make_row("x", "mm", "ours", torch.bfloat16, [8192] * 3, flops=2 * 8192**3, ceiling="matmul", us=2000.0)
    bench.add_throughput(bare, bench.Ceilings(4000.0, {"bfloat16": 700.0}))
    assert bare["fraction_of_ceiling"] == pytest.approx(row["fraction_of_ceiling"])  # "matmul": the row's dtype


def test_relative_error_is_normwise_and_catches_nan():
    ref = torch.tensor([1.0, -4.0, 0.0], dtype=torch.float64)
    assert bench.relative_error(torch.tensor([1.0, -4.0, 1e-3]), ref) == pytest.approx(1e-3 / 4)
    assert bench.relative_error(torch.tensor([float("nan"), -4.0, 0.0]), ref) == math.inf
    assert bench.relative_error(torch.zeros(2), ref) == math.inf  # wrong shape


def test_parse_shapes_and_dtypes():
    assert bench.parse_shapes("4096x512,1×8192") == [(4096, 512), (1, 8192)]
    assert bench.parse_shapes("2^20,1048576") == [(2**20,), (2**20,)]
    assert bench.parse_dtypes("fp32, bf16,fp16") == [torch.float32, torch.bfloat16, torch.float16]
    with pytest.raises(Exception, match="dtype"):
        bench.parse_dtypes("int8")
    with pytest.raises(Exception, match="shape"):
        bench.parse_shapes("4096 by 512")


def test_device_slug_and_default_path():
    assert bench.device_slug("NVIDIA H200") == "nvidia-h200"
    assert bench.device_slug("Tesla T4") == "tesla-t4"
    path = bench.default_results_path({"suite": "rmsnorm", "device": "NVIDIA H200", "date": "2026-11-29T10:00:00+00:00"})
    assert path == Path("benchmarks/results/rmsnorm-nvidia-h200-2026-11-29.json")


# ----------------------------------------------------------------------------------------------
# Measuring: checked before timed
# ----------------------------------------------------------------------------------------------


def test_a_wrong_output_is_marked_and_not_timed():
    timer = FakeTimer()
    reference = torch.ones(8, dtype=torch.float64)
    row = bench.make_row("t", "op", "planted-wrong", torch.float32, [8], bytes=64, ceiling="copy")
    bench.measure(row, run=lambda: None, check=bench.checked(lambda: torch.full((8,), 1.5), reference),
                  timer=timer, ceilings=bench.Ceilings(1000.0, {}))  # fmt: skip
    assert row["status"] == "wrong" and row["us"] is None and row["fraction_of_ceiling"] is None
    assert row["max_rel_err"] == pytest.approx(0.5)
    assert timer.calls == 0


def test_an_exception_is_an_error_row():
    def broken():
        raise RuntimeError("kernel failed to compile")

    row = bench.make_row("t", "op", "broken", torch.float32, [8])
    bench.measure(row, run=broken, check=broken, timer=FakeTimer(), ceilings=None)
    assert row["status"] == "error" and "kernel failed to compile" in row["note"]


def test_a_correct_output_is_timed_and_scored():
    timer = FakeTimer(us=2.0)
    x = torch.randn(1000, dtype=torch.float64)
    row = bench.make_row("t", "copy", "clone", torch.float32, [1000], bytes=8000, ceiling="copy")
    check = bench.checked(lambda: x.clone(), x)
    bench.measure(row, run=lambda: x.clone(), check=check, timer=timer, ceilings=bench.Ceilings(8.0, {}))
    assert row["status"] == "ok" and row["max_rel_err"] == 0.0 and timer.calls == 1
    assert row["gbps"] == pytest.approx(4.0) and row["fraction_of_ceiling"] == pytest.approx(0.5)


def test_axpy_suite_bookkeeping(device):
    timer = FakeTimer()
    rows = bench.run_axpy(bench.Ceilings(100.0, {}), dtypes=[torch.float32], shapes=[(1000,)],
                          impls=["tritonforge", "eager"], device=device, timer=timer)  # fmt: skip
    assert [r["impl"] for r in rows] == ["tritonforge", "eager"]
    for row in rows:
        assert row["status"] == "ok", row["note"]
        assert row["bytes"] == 3 * 1000 * 4 and row["max_rel_err"] < 1e-6
        assert row["fraction_of_ceiling"] == pytest.approx(12000 / 10e-6 / 1e9 / 100.0)
    assert timer.calls == 2


def test_rmsnorm_suites_on_cpu_check_every_peer():
    ceilings = bench.Ceilings(100.0, {})
    for run in (bench.run_rmsnorm_forward, bench.run_rmsnorm_forward_backward):
        rows = run(ceilings, dtypes=[torch.float32], shapes=[(3, 40)], impls=["hf-eager", "F.rms_norm", "liger"],
                   device="cpu", timer=FakeTimer())  # fmt: skip
        by_impl = {r["impl"]: r for r in rows}
        for impl in ("hf-eager", "F.rms_norm"):
            assert by_impl[impl]["status"] == "ok", by_impl[impl]["note"]
            assert by_impl[impl]["max_rel_err"] < 1e-5
        if bench.liger_version() is None:
            assert by_impl["liger"]["status"] == "unavailable" and "liger" in by_impl["liger"]["note"]


def test_rmsnorm_row_checks_our_kernel(device):
    rows = bench.run_rmsnorm_forward(bench.Ceilings(100.0, {}), dtypes=[torch.float32], shapes=[(2, 64)],
                                     impls=["tritonforge"], device=device, timer=FakeTimer())  # fmt: skip
    # Our kernel (interpreted on a CPU, compiled on a GPU) must pass the float64 check.
    assert rows[0]["status"] == "ok", rows[0]["note"]


def test_forward_suite_measures_a_same_size_copy_at_every_shape(device):
    """The baseline row copies x's bytes and is checked like any implementation."""
    rows = bench.run_rmsnorm_forward(bench.Ceilings(100.0, {}), dtypes=[torch.float32], shapes=[(3, 40), (2, 64)],
                                     impls=["hf-eager", bench.SAME_SIZE_COPY], device=device, timer=FakeTimer())  # fmt: skip
    copies = [r for r in rows if r["impl"] == bench.SAME_SIZE_COPY]
    assert [r["shape"] for r in copies] == [[3, 40], [2, 64]]
    for row in copies:
        assert row["op"] == "copy" and row["status"] == "ok" and row["max_rel_err"] == 0.0
        assert row["bytes"] == 2 * row["shape"][0] * row["shape"][1] * 4 and row["ceiling"] == "copy"
    named = bench.run_rmsnorm_forward(bench.Ceilings(100.0, {}), dtypes=[torch.float32], shapes=[(3, 40)],
                                      impls=["hf-eager"], device=device, timer=FakeTimer())  # fmt: skip
    assert [r["impl"] for r in named] == ["hf-eager"]  # --impls without it leaves it out


def test_device_timer_fills_device_us_and_a_failed_capture_keeps_the_row():
    x = torch.randn(100, dtype=torch.float64)
    seen = []

    def device_timer(fn, grad_to_none=None):
        seen.append(grad_to_none)
        return 1.5

    row = bench.make_row("t", "copy", "clone", torch.float32, [100], bytes=800, ceiling="copy")
    bench.measure(row, run=lambda: x.clone(), check=bench.checked(lambda: x.clone(), x), timer=FakeTimer(),
                  ceilings=None, grad_to_none=[x], device_timer=device_timer)  # fmt: skip
    assert row["status"] == "ok" and row["device_us"] == 1.5 and seen == [[x]]

    def cannot_capture(fn, grad_to_none=None):
        raise RuntimeError("operation not permitted when stream is capturing")

    row = bench.make_row("t", "copy", "clone", torch.float32, [100], bytes=800, ceiling="copy")
    bench.measure(row, run=lambda: x.clone(), check=bench.checked(lambda: x.clone(), x), timer=FakeTimer(),
                  ceilings=None, device_timer=cannot_capture)  # fmt: skip
    assert row["status"] == "ok" and row["us"] == 10.0 and row["device_us"] is None
    assert "capture failed" in row["note"] and "stream is capturing" in row["note"]


def test_summarize_kernels_counts_full_tensor_passes():
    from types import SimpleNamespace

    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    m, n = 4, 8

    def op(name, shapes, kernels):
        launched = [SimpleNamespace(name=k) for k in kernels]
        return SimpleNamespace(name=name, device_type=cpu, input_shapes=shapes, kernels=launched)

    def kernel(name):
        return SimpleNamespace(name=name, device_type=cuda, input_shapes=[], kernels=[])

    events = [
        op("aten::copy_", [[m, n], [m, n], []], ["cast"]), kernel("cast"),
        op("aten::pow", [[m, n], []], ["pow"]), kernel("pow"),
        op("aten::mean", [[m, n], [], [], []], ["reduce"]), kernel("reduce"),
        op("aten::add", [[m, 1], []], ["add"]), kernel("add"),
        op("aten::rsqrt", [[m, 1]], ["rsqrt"]), kernel("rsqrt"),
        op("aten::mul", [[m, n], [m, 1]], ["mul"]), kernel("mul"),
        op("aten::lift", [[m, n]], []),  # no kernel launched: not a pass
    ]  # fmt: skip
    summary = bench.summarize_kernels(events, m * n)
    assert summary["kernel_count"] == 6
    assert summary["kernels"] == ["cast", "pow", "reduce", "add", "rsqrt", "mul"]
    assert summary["hbm_passes"] == 4
    assert bench.summarize_kernels([kernel("triton_fused")], m * n)["hbm_passes"] is None


def test_profiler_events_have_what_the_summary_reads():
    """A real torch.profiler trace (CPU only here: no kernels, so no passes can be estimated)."""
    x, weight = bench.rmsnorm_inputs(8, 16, torch.float32, "cpu")
    events = bench.profile_one_call(lambda: bench.hf_llama_rms_norm(x, weight))
    names = [e.name for e in events]
    assert "aten::pow" in names and "aten::rsqrt" in names
    assert bench.summarize_kernels(events, 8 * 16) == {
        "kernel_count": 0, "kernels": [], "hbm_passes": None, "kernels_mapped_to_aten_ops": 0,
    }  # fmt: skip


def test_installed_do_bench_flushes_l2():
    assert bench.do_bench_flushes_l2() is True


def test_metadata_has_the_schema(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    ceilings = bench.Ceilings(4150.0, {"bfloat16": 713.0})
    command = "python -m tritonforge.bench rmsnorm"
    metadata = bench.collect_metadata("rmsnorm", ceilings, bench.do_bench_timer(), quick=False, command=command)
    assert set(bench.METADATA_KEYS) <= set(metadata)
    assert metadata["compute_capability"] == "9.0" and metadata["suites"] == ["ceilings", "rmsnorm"]
    assert metadata["date"].endswith("+00:00") and "do_bench" in metadata["timer"]
    bench.validate_results(bench.Results(metadata, []).to_dict())


# ----------------------------------------------------------------------------------------------
# Results files
# ----------------------------------------------------------------------------------------------


def test_results_round_trip_and_newest_wins(tmp_path):
    older = synthetic_results(date="2026-11-28T09:00:00+00:00")
    newer = synthetic_results(date="2026-11-29T09:00:00+00:00")
    newer.rows[0]["us"] = 12.345
    bench.write_results(newer, tmp_path / "b.json")
    bench.write_results(older, tmp_path / "a.json")  # written later, but measured earlier
    (tmp_path / "notes.json").write_text(json.dumps({"not": "results"}))

    loaded = bench.load_results("rmsnorm", directory=tmp_path)
    assert loaded.path == str(tmp_path / "b.json") and not loaded.live
    assert loaded.rows[0]["us"] == 12.345
    assert {r["suite"] for r in loaded.rows} == {"rmsnorm"}  # filtered to the suite asked for
    assert loaded.ceilings == bench.Ceilings(4000.0, {"bfloat16": 700.0, "float16": 690.0})
    assert loaded.metadata["device"] == "NVIDIA H200"
    assert len(bench.load_results(None, directory=tmp_path).rows) == len(newer.rows)
    with pytest.raises(FileNotFoundError, match="axpy"):
        bench.load_results("axpy", directory=tmp_path)


def test_written_file_has_the_schema(tmp_path):
    results = synthetic_results()
    results.rows[0]["max_rel_err"] = math.inf  # JSON has no inf: written as null
    path = bench.write_results(results, tmp_path / "r.json")
    data = json.loads(path.read_text())
    bench.validate_results(data)
    assert data["schema"] == bench.SCHEMA
    assert set(bench.METADATA_KEYS) <= set(data["metadata"])
    assert all(set(bench.ROW_FIELDS) <= set(row) for row in data["rows"])
    assert data["rows"][0]["max_rel_err"] is None
    del data["rows"][1]["formula"]
    with pytest.raises(ValueError, match="formula"):
        bench.validate_results(data)


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


def test_files_recorded_before_device_us_still_read(tmp_path):
    data = synthetic_results().to_dict()
    for row in data["rows"]:
        del row["device_us"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(bench.json_safe(data)))
    rows = bench.read_results(path).rows
    assert rows and all(r["device_us"] is None for r in rows)
    del data["rows"][0]["us"]  # a required field missing is still an error
    path.write_text(json.dumps(bench.json_safe(data)))
    with pytest.raises(ValueError, match="lacks"):
        bench.read_results(path)


@needs_no_gpu
def test_cli_without_gpu_exits_with_a_message():
    done = subprocess.run(
        [sys.executable, "-m", "tritonforge.bench", "ceilings"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    assert done.returncode != 0
    assert "need a CUDA GPU" in done.stderr
    assert "recorded GPU results" in done.stderr and "benchmarks/results" in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_show_prints_recorded_results(tmp_path):
    bench.write_results(synthetic_results(), tmp_path / "rmsnorm-nvidia-h200-2026-11-29.json")
    done = subprocess.run(
        [sys.executable, "-m", "tritonforge.bench", "show", str(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "recorded on NVIDIA H200" in done.stdout and "## rmsnorm" in done.stdout


@needs_no_gpu
def test_run_suite_refuses_without_gpu():
    with pytest.raises(RuntimeError, match="need a CUDA GPU"):
        bench.run_suite("ceilings")


@needs_no_gpu
def test_chapter_asking_for_live_results_gets_the_record_without_gpu(tmp_path):
    bench.write_results(synthetic_results(), tmp_path / "r.json")
    results = bench.results_for_chapter("rmsnorm", live=True, directory=tmp_path)
    assert not results.live and results.provenance().startswith("recorded on NVIDIA H200")


# ----------------------------------------------------------------------------------------------
# Plots
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def plt():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    yield pyplot
    pyplot.close("all")


def test_plot_bench_labels_recorded_results(plt):
    from tritonforge import viz

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
    from tritonforge import viz

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
    from tritonforge import viz

    fig = viz.plot_bench(synthetic_results(live=True), metric="us", dtype="bfloat16", title="RMSNorm forward")
    assert fig._suptitle.get_text().startswith("RMSNorm forward\nlive on NVIDIA H200 (torch 2.11.0+cu130")
    assert fig.axes[0].get_yscale() == "log" and "µs" in fig.axes[0].get_ylabel()


def test_plot_bench_accepts_a_plain_dict_and_rejects_no_rows(plt):
    from tritonforge import viz

    data = synthetic_results().to_dict()
    assert viz.plot_bench(data, dtype="float32").axes
    with pytest.raises(ValueError, match="no 'ok' rows"):
        viz.plot_bench(data, op="softmax")


def test_roofline_draws_measured_roofs_and_points(plt):
    from tritonforge import viz

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


def recorded_bench_files() -> list[Path]:
    """Result files of this harness (the folder may also hold other tools' JSON, e.g. compile-*)."""
    files = []
    for path in sorted((REPO_ROOT / "benchmarks" / "results").glob("*.json")):
        try:
            if json.loads(path.read_text()).get("schema") == bench.SCHEMA:
                files.append(path)
        except (ValueError, AttributeError):
            continue
    return files


RECORDED = recorded_bench_files()


@pytest.mark.skipif(not RECORDED, reason="no recorded results in benchmarks/results yet")
@pytest.mark.parametrize("path", RECORDED, ids=[p.name for p in RECORDED])
def test_recorded_files_load_and_plot(plt, path):
    from tritonforge import viz

    results = bench.read_results(path)
    assert results.provenance().startswith("recorded on ")
    timed = [r for r in results.rows if r["status"] == "ok" and r["suite"] not in ("ceilings", "profile-eager-rmsnorm")]
    for suite in dict.fromkeys(r["suite"] for r in timed):
        fig = viz.plot_bench(results, suite=suite)
        assert results.metadata["device"] in fig._suptitle.get_text()
    if results.ceilings is not None and timed:
        fig, ax = plt.subplots()
        viz.roofline(ax, results, timed)


# ----------------------------------------------------------------------------------------------
# On a GPU (skipped elsewhere): the suites run for real; correctness only, no timing asserted
# ----------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_quick_axpy_suite_on_gpu():
    results = bench.run_suite("axpy", quick=True, dtypes=[torch.float32], shapes=[(2**20,)], impls=["tritonforge", "eager"])
    assert results.live and results.ceilings.copy_gbps > 0
    axpy_rows = results.where(suite="axpy")
    assert [r["status"] for r in axpy_rows] == ["ok", "ok"], [r["note"] for r in axpy_rows]


@pytest.mark.gpu
def test_graph_replay_times_the_captured_work():
    """The graph really replays fn: 3 warm-up calls, one check replay, then the timed replays."""
    out = torch.zeros(1 << 20, device="cuda")
    us = bench.graph_replay_us(lambda: out.add_(1.0), replays=10)
    assert torch.all(out == 3 + 1 + 10)
    assert 0 < us < 1e4


@pytest.mark.gpu
def test_graph_replay_of_a_training_step_writes_fresh_gradients():
    """With grad_to_none, the captured backward assigns gradients instead of accumulating, so the
    graph replays exactly the step's kernels; the gradients are released afterwards."""
    x = torch.randn(64, 256, device="cuda", requires_grad=True)
    weight = torch.randn(256, device="cuda", requires_grad=True)
    dy = torch.randn(64, 256, device="cuda")
    x.grad = torch.ones_like(x)  # would be accumulated into without the reset
    step = functools.partial(bench.forward_backward, tfg.rms_norm, x, weight, dy)
    us = bench.graph_replay_us(step, replays=5, grad_to_none=[x, weight])
    assert 0 < us < 1e4 and x.grad is None and weight.grad is None


@pytest.mark.gpu
def test_rmsnorm_suites_record_device_time_on_gpu():
    for run in (bench.run_rmsnorm_forward, bench.run_rmsnorm_forward_backward):
        rows = run(bench.Ceilings(100.0, {}), dtypes=[torch.float32], shapes=[(64, 1024)],
                   impls=["tritonforge", "F.rms_norm"], timer=bench.do_bench_timer(quick=True),
                   device_timer=bench.graph_replay_us)  # fmt: skip
        for row in rows:
            assert row["status"] == "ok" and 0 < row["device_us"] < 1e4, (row["impl"], row["note"])


@pytest.mark.gpu
def test_profile_maps_eager_kernels_to_aten_ops_on_gpu():
    dtype = bench.default_dtypes("cuda", quick=True)[0]
    rows = bench.run_profile_eager_rmsnorm(None, dtypes=[dtype], shapes=[(256, 512)], impls=["hf-eager"])
    row = rows[0]
    assert row["status"] == "ok", row["note"]
    assert row["kernel_count"] >= 2 and len(row["kernels"]) == row["kernel_count"]
    assert row["hbm_passes"] is not None and 1 <= row["hbm_passes"] <= row["kernel_count"]


def test_recorded_results_ship_with_the_package(tmp_path, monkeypatch):
    """Outside a checkout (Colab's pip install) the default folder resolves to the packaged copy."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    config = tomllib.loads((bench.REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"]["tritonforge.recorded"] == bench.DEFAULT_RESULTS_DIR
    assert "*.json" in config["package-data"]["tritonforge.recorded"]
    packaged = tmp_path / "site" / "tritonforge" / "recorded"
    packaged.mkdir(parents=True)
    monkeypatch.setattr(bench, "REPO_ROOT", tmp_path / "no-checkout")
    monkeypatch.setattr(bench, "PACKAGED_RESULTS", packaged)
    monkeypatch.chdir(tmp_path)
    assert bench.results_directory() == packaged
    assert bench.results_directory("elsewhere") == tmp_path / "no-checkout" / "elsewhere"


def test_git_commit_can_be_declared_for_a_copied_tree(monkeypatch):
    """A working tree copied to a GPU machine may carry stale git metadata: a declared full hash
    wins (dirty unknown); anything that is not a full hash is ignored."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setenv(bench.GIT_COMMIT_ENV, sha.upper())
    assert bench.git_state() == (sha, None)
    monkeypatch.setenv(bench.GIT_COMMIT_ENV, "HEAD")
    assert bench.git_state()[0] != "HEAD"
