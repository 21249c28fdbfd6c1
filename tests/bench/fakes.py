"""Stand-ins for the GPU in the harness's tests: a timer that does not time, and a results file
shaped like one recorded on the H200 (made-up numbers)."""

from __future__ import annotations

from pathlib import Path

import torch

from tritonforge import bench

REPO_ROOT = Path(__file__).resolve().parents[2]


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


def recorded_files(schema: str | None = None) -> list[Path]:
    """Every JSON file in benchmarks/results (only those of ``schema`` when given)."""
    import json

    files = sorted((REPO_ROOT / "benchmarks" / "results").glob("*.json"))
    if schema is None:
        return files
    return [path for path in files if json.loads(path.read_text()).get("schema") == schema]
