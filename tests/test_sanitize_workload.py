"""The compute-sanitizer tooling keeps working: ``scripts/sanitize_workload.py`` runs every case at toy
size on the CPU interpreter (``TRITONFORGE_SMOKE=1``) and passes, and ``scripts/sanitize.sh`` parses.

The real run is ``bash scripts/sanitize.sh OUTDIR`` on a CUDA GPU (memcheck and racecheck over the
workload at GPU sizes); here only the workload's code paths and checks are exercised.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = REPO / "scripts" / "sanitize_workload.py"
SANITIZE_SH = REPO / "scripts" / "sanitize.sh"

TIMEOUT_S = 300
"""Far above what the toy run takes (about 15 s on two CPU cores); only a hung interpreter reaches it."""


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITONFORGE_SMOKE": "1", "TRITONFORGE_STRICT": "1"}
    return subprocess.run([sys.executable, str(WORKLOAD), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def test_sanitize_sh_parses():
    result = subprocess.run(["bash", "-n", str(SANITIZE_SH)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_sanitize_sh_needs_an_outdir():
    result = subprocess.run(["bash", str(SANITIZE_SH)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "usage" in result.stderr


@pytest.mark.slow  # every case of scripts/sanitize_workload.py: the full tier's
@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU machine runs the workload itself, under scripts/sanitize.sh")
def test_every_case_runs_and_passes_at_toy_size():
    listed = _run("--list")
    assert listed.returncode == 0, listed.stderr
    names = listed.stdout.split()
    assert len(names) >= 20 and len(set(names)) == len(names), names
    result = _run()
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    ok = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("ok ")}
    assert ok == set(names), f"no 'ok' line for {sorted(set(names) - ok)}\n{output[-6000:]}"
    assert "WRONG" not in result.stdout and "FAIL" not in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU machine runs the workload itself, under scripts/sanitize.sh")
def test_only_selects_by_name_or_prefix_and_refuses_unknown_names():
    result = _run("--only", "axpy,program_map")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.split()[1] for line in result.stdout.splitlines() if line.startswith("ok ")] == ["axpy", "program_map"]
    unknown = _run("--only", "no_such_op")
    assert unknown.returncode != 0 and "unknown case" in unknown.stderr


FAKE_SANITIZER = """#!/usr/bin/env bash
# Stands in for compute-sanitizer: the probe (python -c ...) and each tool's closing lines, as 13.4 prints them.
for arg in "$@"; do [ "$arg" = "-c" ] && { echo "probe ok"; echo "========= ERROR SUMMARY: 0 errors"; exit 0; }; done
echo "summary: 1 ok, 0 wrong, 0 failed of 1 cases in 0.1s"
case "$*" in
  *"--tool racecheck"*) echo "========= RACECHECK SUMMARY: $FAKE_HAZARDS hazards displayed ($FAKE_HAZARDS errors, 0 warnings)";;
  *) echo "========= ERROR SUMMARY: $FAKE_HAZARDS errors";;
esac
[ "$FAKE_HAZARDS" = 0 ] || exit 17
"""


@pytest.mark.parametrize("hazards", [0, 1])
def test_sanitize_sh_verdict_reads_each_tools_summary(tmp_path, hazards):
    """memcheck ends with "ERROR SUMMARY", racecheck with "RACECHECK SUMMARY" only: a clean
    racecheck once read as ERRORS (H200, 2026-12-01); a hazard must still fail the run."""
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(FAKE_SANITIZER)
    fake.chmod(0o755)
    env = {**os.environ, "COMPUTE_SANITIZER": str(fake), "SAN_WARMUP": "0", "SAN_BUDGET": "0", "FAKE_HAZARDS": str(hazards),
           "PYTHON": sys.executable}  # fmt: skip
    result = subprocess.run(["bash", str(SANITIZE_SH), str(tmp_path / "out"), "memcheck", "racecheck"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    summary = (tmp_path / "out" / "sanitize-summary.txt").read_text()
    if hazards:
        assert result.returncode == 1 and "memcheck: ERRORS" in summary and "racecheck: ERRORS" in summary, summary
    else:
        assert result.returncode == 0, result.stdout + result.stderr
        assert "memcheck: clean" in summary and "racecheck: clean" in summary and "every tool clean" in summary, summary
