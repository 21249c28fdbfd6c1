"""A cooperative launch for the cooperative rows: what does the guarantee cost?

The package's cooperative kernels (``tritonforge.ops.gpu``) hold a long row in several programs that
wait for each other at the row's barrier. Launched the ordinary way, one program per (row, chunk),
they rest on an assumption CUDA does not promise: that a row's programs are resident together (they
are consecutive program ids, the GPU dispatches in order, a row is at most one program an SM). A
cooperative launch (Triton's ``launch_cooperative_grid=True``) turns it into a guarantee: the driver
runs the whole grid at once or refuses the launch. The grid must then fit the GPU, so each program
loops over rows (``PERSISTENT``: program (group, chunk) takes rows group, group + groups, ...), as many
groups as the compiled kernel's registers and shared memory let stay resident
(``coop.resident_programs``, the driver's own occupancy count). An earlier experiment
(``coop_persistent.py``, without the cooperative launch) found such persistent programs 3-14%
slower than the hardware's own scheduling of short-lived programs.

Rows, per shape the package sends down the cooperative path on the H200: its same-size copy
(``torch.mul(x, 1, out=y)`` of the bytes the op moves), then the package's call three ways:
``ordinary launch`` and ``cooperative launch`` (``coop.COOPERATIVE_LAUNCH``), and ``no cooperative
rows`` (the plan the package would take without them: the softmax's online or split loops, RMSNorm's
two-pass row), each checked against float64 first; device time (CUDA-graph replay, median).
``of_same_copy`` = the copy's time / the row's.

Usage (CUDA GPU, repository root): python benchmarks/experiments/cooperative-rows/coop_launch.py OUT.json
Toy run: TRITONFORGE_SMOKE=1 ... (the interpreter plans no cooperative rows: every row then times the
same fallback; it checks that the script runs)
"""

import contextlib
import sys
from unittest import mock

import torch

import smoke  # first: imports tritonforge before triton
from smoke import toy
from tritonforge import launches
from tritonforge.ops import softmax
from tritonforge.ops.gpu import coop
from tritonforge.ops.gpu import rmsnorm as gpu_rmsnorm
from tritonforge.ops.gpu import softmax as gpu_softmax

BF, F32 = torch.bfloat16, torch.float32
CASES = toy(
    [("softmax", 4096, 131072, BF), ("softmax", 4096, 131072, F32), ("softmax", 64, 131072, BF), ("softmax", 512, 262144, F32),
     ("softmax", 16384, 32768, BF), ("softmax-bwd", 4096, 131072, BF), ("softmax-bwd", 4096, 131072, F32),
     ("softmax-bwd", 64, 131072, BF), ("rmsnorm", 4096, 65536, BF), ("rmsnorm", 4096, 65536, F32), ("rmsnorm", 2048, 131072, BF),
     ("rmsnorm", 64, 131072, BF)],
    [("softmax", 3, 96, F32), ("softmax-bwd", 2, 64, F32), ("rmsnorm", 2, 128, BF)],
)  # fmt: skip


@contextlib.contextmanager
def launch_mode(mode: str):
    """The package with ``mode``'s launch: remembered launches and plans forgotten on the way in and out."""
    patches = [mock.patch.object(coop, "COOPERATIVE_LAUNCH", mode == "cooperative launch")]
    if mode == "no cooperative rows":
        patches += [mock.patch.object(gpu_softmax, "cooperative", lambda *a, **k: None),
                    mock.patch.object(gpu_rmsnorm, "row_splits", lambda *a, **k: 0)]  # fmt: skip
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        launches.forget()
        softmax._plan_cached.cache_clear()
        try:
            yield
        finally:
            launches.forget()
            softmax._plan_cached.cache_clear()


copy = smoke.copy_ceiling()
rows = []
for op, m, n, dtype in CASES:
    case = smoke.op_case(op, m, n, dtype)
    base, group = smoke.same_size_rows(op, m, n, dtype, case, copy["gbps"])
    group = group[:1]  # the copy; the package's rows follow, one per launch
    for mode in ("ordinary launch", "cooperative launch", "no cooperative rows"):
        with launch_mode(mode):
            row = {**base, "impl": f"tritonforge, {mode}"}
            if op != "rmsnorm":
                row["plan"] = list(softmax.plan(m, n, dtype, case["ref"].device, backward=op == "softmax-bwd"))
            group.append(smoke.checked_row(row, case["package"], case["ref"], case["nbytes"], copy["gbps"]))
    rows += smoke.with_of_same_copy(group)
    smoke.save_rows(sys.argv[1], copy, rows)
print("wrote", sys.argv[1])
