"""``python -m tritonforge.bench``: arguments, the no-GPU exit, and ``show`` (tritonforge.bench.cli)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tritonforge import bench
from tritonforge.bench.results import AWAITING_FIRST_RECORD

from .fakes import REPO_ROOT, synthetic_results

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA GPU")


def test_parse_shapes_and_dtypes():
    assert bench.parse_shapes("4096x512,1×8192") == [(4096, 512), (1, 8192)]
    assert bench.parse_shapes("2^20,1048576") == [(2**20,), (2**20,)]
    assert bench.parse_dtypes("fp32, bf16,fp16") == [torch.float32, torch.bfloat16, torch.float16]
    with pytest.raises(Exception, match="dtype"):
        bench.parse_dtypes("int8")
    with pytest.raises(Exception, match="shape"):
        bench.parse_shapes("4096 by 512")


def test_help_lists_every_suite():
    done = subprocess.run([sys.executable, "-m", "tritonforge.bench", "--help"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for suite in (*bench.SUITES, "all", "show"):
        assert suite in done.stdout


@needs_no_gpu
def test_cli_without_gpu_exits_with_a_message():
    done = subprocess.run(
        [sys.executable, "-m", "tritonforge.bench", "ceilings"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    assert done.returncode == 2
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


def test_cli_show_prints_the_committed_results():
    done = subprocess.run([sys.executable, "-m", "tritonforge.bench", "show", "benchmarks/results"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for suite in bench.SUITES:
        assert (f"## {suite}" in done.stdout) != (suite in AWAITING_FIRST_RECORD), suite


def _run_cli_with(monkeypatch, tmp_path, measured: bench.Results, *extra: str) -> int:
    """``main`` as on a GPU machine, with the suite's run replaced by ``measured``."""
    from tritonforge.bench import cli

    monkeypatch.setattr(cli.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cli, "run_suite", lambda *args, **kwargs: measured)
    return cli.main(["rmsnorm", "--results-dir", str(tmp_path), *extra])


def test_a_run_that_lost_a_peer_does_not_replace_the_record(monkeypatch, tmp_path, capsys):
    """Liger's wheel not carried: the new run has no Liger rows, so it goes to incomplete/ and the
    chapters' source (the newest record in the folder) keeps them; exit status 3 says so."""
    full = tmp_path / "rmsnorm-nvidia-h200-2026-11-29.json"
    bench.write_results(synthetic_results(), full)
    partial = synthetic_results(date="2026-12-05T12:00:00+00:00")
    for row in partial.where(impl="liger"):
        row.update(status="unavailable", us=None, note="liger-kernel not importable")
    assert {impl for impl, _, _ in bench.rows_lost(partial, tmp_path)} == {"liger"}
    assert len(bench.rows_lost(partial, tmp_path)) == len(partial.where(impl="liger"))
    assert _run_cli_with(monkeypatch, tmp_path, partial) == 3
    assert "liger float32: 2" in capsys.readouterr().err
    assert (tmp_path / "incomplete" / "rmsnorm-nvidia-h200-2026-12-05.json").is_file()
    assert not (tmp_path / "rmsnorm-nvidia-h200-2026-12-05.json").exists()
    assert bench.load_results("rmsnorm", tmp_path).path == str(full)


def test_a_full_run_becomes_the_newest_record(monkeypatch, tmp_path):
    bench.write_results(synthetic_results(), tmp_path / "rmsnorm-nvidia-h200-2026-11-29.json")
    newer = synthetic_results(date="2026-12-05T12:00:00+00:00")
    assert bench.rows_lost(newer, tmp_path) == []
    assert _run_cli_with(monkeypatch, tmp_path, newer) == 0
    assert bench.load_results("rmsnorm", tmp_path).path == str(tmp_path / "rmsnorm-nvidia-h200-2026-12-05.json")
    other = synthetic_results(date="2026-12-06T12:00:00+00:00")
    other.metadata["device"] = "NVIDIA H100 80GB HBM3"
    other.rows = [row for row in other.rows if row["impl"] != "liger"]
    assert bench.rows_lost(other, tmp_path) == []  # another device's record is not this one's to keep
    everything = synthetic_results(date="2026-12-07T12:00:00+00:00")  # `all`: the metadata names no one suite
    everything.metadata["suite"] = "all"
    everything.rows = [row for row in everything.rows if row["impl"] != "liger"]
    assert {impl for impl, _, _ in bench.rows_lost(everything, tmp_path)} == {"liger"}
    narrowed = synthetic_results(date="2026-12-07T12:00:00+00:00")
    narrowed.rows = [row for row in narrowed.rows if row["dtype"] != "bfloat16"]  # as --dtype fp32 would
    assert {dtype for _, dtype, _ in bench.rows_lost(narrowed, tmp_path)} == {"bfloat16"}
