"""Results files: one schema, written with their provenance, read back loudly.

A results file is JSON: ``{"schema": "tritonforge.bench/1", "metadata": {...}, "rows": [...]}``
(every field in ``benchmarks/README.md``). The metadata says where and when the rows were
measured (device, compute capability, torch/triton/Liger/Python versions, date, command, git
commit: ``$TRITONFORGE_GIT_COMMIT`` when the tree was copied to the GPU machine) and the ceilings
the fractions divide by.

``benchmarks/results/`` also holds the records of the tools beside the harness (compiled-kernel
readings, torch.compile's generated code, the host-overhead probe). :func:`read_record` knows
each kind; a file it cannot name, or one that lacks what its kind must have, raises a
``ValueError`` naming the file and what is wrong: nothing in the folder is skipped silently.

Outside a checkout (``pip install`` in Colab) the folder ships inside the package as
``tritonforge/recorded`` (see ``pyproject.toml``), and :func:`results_directory` finds it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import platform
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import torch

from tritonforge import _triton  # noqa: F401  (first: decides TRITON_INTERPRET before triton loads)
from tritonforge.bench import report
from tritonforge.bench.costs import Ceilings, dtype_name
from tritonforge.bench.peers import liger_version
from tritonforge.bench.timing import DEVICE_TIME_REP_MS, Timer, do_bench_flushes_l2
from tritonforge.reference import TOLERANCE

SCHEMA = "tritonforge.bench/1"
SUITES = ("ceilings", "axpy", "rmsnorm", "rmsnorm-bwd", "profile-eager-rmsnorm", "swiglu", "swiglu-bwd", "swiglu-front", "softmax", "softmax-bwd",
          "attention", "attention-decode", "attention-bwd")  # fmt: skip
AWAITING_FIRST_RECORD: tuple[str, ...] = ()
"""Suites whose kernels have not yet run on a GPU (written in a session with no device time left):
they have no committed results until a GPU run records them, and no chapter may load them. The
tests require a record for every other suite, and require these to have none (so that this list
is emptied when the first record is committed)."""
DEFAULT_RESULTS_DIR = "benchmarks/results"
REPO_ROOT = Path(__file__).resolve().parents[2]

ROW_FIELDS = (
    "suite",  # which suite produced the row
    "op",  # the operation: copy, matmul, axpy, rmsnorm, rmsnorm-fwd-bwd
    "impl",  # who computed it: tritonforge, hf-eager, F.rms_norm, torch.compile, liger, ...
    "dtype",  # "float32" | "float16" | "bfloat16"
    "shape",  # list of ints: [n], [M, N] or [M, N, K]
    "status",  # "ok" | "wrong" (output check failed, not timed) | "unavailable" | "error"
    "us",  # median time in microseconds (None unless status is "ok")
    "bytes",  # minimum bytes moved, from the formula
    "flops",  # floating-point operations, from the formula
    "formula",  # the formula(s) in words
    "gbps",  # bytes / time, in 1e9 bytes per second
    "tflops",  # flops / time, in 1e12 per second
    "ceiling",  # what the fraction divides by: "copy", "matmul" (row's dtype) or "matmul-<dtype>"
    "fraction_of_ceiling",  # gbps / copy_gbps, or tflops / matmul_tflops[dtype]
    "max_rel_err",  # max|out - ref| / max|ref| against float64
    "tolerance",  # the max_rel_err above which the row is "wrong"
    "note",  # why a row is not ok, or anything a reader must know
    "device_us",  # device time in µs from CUDA-graph replay (no host, no L2 flush); None if not measured
    "peak_bytes",  # memory one call allocates beyond its inputs, at its peak (suites that ask); None otherwise
)

OPTIONAL_ROW_FIELDS = ("device_us", "peak_bytes")
"""Fields added after results were first recorded: a file without them reads them as None."""

METADATA_KEYS = ("suite", "device", "compute_capability", "torch", "triton", "liger", "python", "date", "command", "git_commit")


def make_row(suite: str, op: str, impl: str, dtype: torch.dtype, shape: Sequence[int], **fields) -> dict:
    """A result row with every field of :data:`ROW_FIELDS` present (None where unknown)."""
    row = dict.fromkeys(ROW_FIELDS)
    row.update(suite=suite, op=op, impl=impl, dtype=dtype_name(dtype), shape=[int(s) for s in shape])
    row.update(fields)
    return row


@dataclasses.dataclass(repr=False)
class Results:
    """Rows plus the metadata that says where and when they were measured."""

    metadata: dict
    rows: list
    path: Optional[str] = None  # the file they came from (None when measured live)
    live: bool = False  # measured in this process, now

    @property
    def ceilings(self) -> Optional[Ceilings]:
        data = self.metadata.get("ceilings")
        return Ceilings.from_dict(data) if data else None

    def where(self, **conditions) -> list[dict]:
        """Rows whose fields equal the given values, e.g. ``where(dtype="bfloat16", status="ok")``."""
        return [r for r in self.rows if all(r.get(k) == v for k, v in conditions.items())]

    def provenance(self) -> str:
        """ "live on <device> ..." or "recorded on <device>, <date> ...": the line every plot shows."""
        return describe_provenance(self.metadata, live=self.live)

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "metadata": self.metadata, "rows": self.rows}

    def table(self) -> str:
        return report.format_results(self)

    def __str__(self) -> str:
        return self.table()

    def _repr_html_(self) -> str:  # a notebook cell's value: HTML tables that fit the page
        return report.format_results_html(self)

    def __repr__(self) -> str:  # short on purpose: print(results) shows the tables
        return f"<Results: {len(self.rows)} rows, {self.provenance()}>"


def describe_provenance(metadata: dict, live: bool = False) -> str:
    device = metadata.get("device", "unknown device")
    versions = f"torch {metadata.get('torch', '?')}, triton {metadata.get('triton', '?')}"
    if metadata.get("simulated"):
        return f"SIMULATED run standing in for {device}: made-up numbers, not a measurement ({versions})"
    if live:
        return f"live on {device} ({versions})"
    return f"recorded on {device}, {str(metadata.get('date', '?'))[:10]} ({versions})"


# ----------------------------------------------------------------------------------------------
# Provenance of a live run
# ----------------------------------------------------------------------------------------------


def collect_metadata(suite: str, ceilings: Ceilings, timer: Timer, *, quick: bool, command: str) -> dict:
    """Where, when and how a live run measured: device, versions, date, commit, timers, tolerances."""
    major, minor = torch.cuda.get_device_capability()
    commit, dirty = git_state()
    return {
        "suite": suite,
        "suites": list(SUITES) if suite == "all" else (["ceilings"] if suite == "ceilings" else ["ceilings", suite]),
        "device": torch.cuda.get_device_name(),
        "compute_capability": f"{major}.{minor}",
        "torch": torch.__version__,
        "triton": getattr(_triton.triton, "__version__", None),
        "liger": liger_version(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "git_commit": commit,
        "git_dirty": dirty,
        "quick": quick,
        "timer": getattr(timer, "settings", None),
        "device_timer": f"triton.testing.do_bench_cudagraph(rep={DEVICE_TIME_REP_MS} ms, return_mode='median')",
        "l2_flushed_before_each_rep": do_bench_flushes_l2(),  # read from the installed do_bench
        "error_metric": "max_rel_err = max|out - ref| / max|ref|, ref computed in float64",
        "tolerances": {dtype_name(d): t for d, t in TOLERANCE.items()},
        "ceilings": ceilings.to_dict(),
    }


GIT_COMMIT_ENV = "TRITONFORGE_GIT_COMMIT"
"""Set it to the full commit hash when the checkout's own git metadata cannot be trusted: a copy
of a working tree sent to a GPU machine may carry an older ``.git`` than the files it holds.
The results then record that commit, with ``git_dirty`` null (unknown)."""


def git_state() -> tuple[Optional[str], Optional[bool]]:
    """(commit, has uncommitted changes) of the checkout holding this file; (None, None) if unknown.

    A full hash in ``$TRITONFORGE_GIT_COMMIT`` takes precedence (see :data:`GIT_COMMIT_ENV`)."""
    declared = os.environ.get(GIT_COMMIT_ENV, "").strip().lower()
    if re.fullmatch(r"[0-9a-f]{40}", declared):
        return declared, None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None, None
    sha = commit.stdout.strip()
    if commit.returncode != 0 or not re.fullmatch(r"[0-9a-f]{40}", sha):
        return None, None
    return sha, bool(status.stdout.strip()) if status.returncode == 0 else None


def device_slug(name: str) -> str:
    """ "NVIDIA H200" -> "nvidia-h200": a file-name-safe device name."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


# ----------------------------------------------------------------------------------------------
# Writing and reading
# ----------------------------------------------------------------------------------------------


def default_results_path(metadata: dict, directory: str = DEFAULT_RESULTS_DIR) -> Path:
    """``<directory>/<suite>-<device-slug>-<YYYY-MM-DD>.json``."""
    day = str(metadata["date"])[:10]
    return Path(directory) / f"{metadata['suite']}-{device_slug(metadata['device'])}-{day}.json"


def json_safe(value):
    """JSON has no inf or NaN: write them as null (a row's note says why it is not ok)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_results(results: Results, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(json_safe(results.to_dict()), indent=1, allow_nan=False, default=str) + "\n")
    return path


def validate_results(data: dict) -> None:
    """Raise ``ValueError`` unless ``data`` has the results schema (see benchmarks/README.md)."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"not a tritonforge results file (expected schema {SCHEMA!r})")
    if not isinstance(data.get("metadata"), dict):
        raise ValueError("no metadata object")
    missing = [k for k in METADATA_KEYS if k not in data["metadata"]]
    if missing:
        raise ValueError(f"metadata lacks {missing}")
    if not isinstance(data.get("rows"), list):
        raise ValueError("no rows list")
    for i, row in enumerate(data["rows"]):
        if not isinstance(row, dict):
            raise ValueError(f"row {i} is not an object")
        absent = [k for k in ROW_FIELDS if k not in row and k not in OPTIONAL_ROW_FIELDS]
        if absent:
            raise ValueError(f"row {i} lacks {absent}")


HOST_OVERHEAD_SCHEMA = "tritonforge.host-overhead/1"
INDUCTOR_CODE_SCHEMA = "tritonforge.inductor-code/1"

RECORD_KINDS = {
    SCHEMA: "benchmark suites (python -m tritonforge.bench)",
    HOST_OVERHEAD_SCHEMA: "host and device time per call (benchmarks/host_overhead.py)",
    INDUCTOR_CODE_SCHEMA: "the kernels torch.compile generated (benchmarks/experiments/rmsnorm/inductor_rmsnorm.py)",
    "compile": "compiled-kernel readings (scripts/record_compile.py; read by tritonforge.basics)",
}
"""Every kind of file ``benchmarks/results/`` may hold, by the name :func:`record_kind` gives it."""


def record_kind(data) -> str:
    """The kind of a parsed JSON file from the results folder: its ``schema``, or for files
    that carry none, what their keys say (compiled-kernel readings have ``metadata.kind ==
    "compile"``; the host-overhead probe recorded before it wrote a schema has rows of
    ``host_us``). Raises ``ValueError`` for anything else."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, found {type(data).__name__}")
    if "schema" in data:
        if data["schema"] not in RECORD_KINDS:
            raise ValueError(f"unknown schema {data['schema']!r} (known: {sorted(k for k in RECORD_KINDS if '/' in k)})")
        return data["schema"]
    metadata = data.get("metadata")
    if isinstance(metadata, dict) and metadata.get("kind") == "compile":
        return "compile"
    rows = data.get("rows")
    if isinstance(rows, list) and rows and all(isinstance(r, dict) and ("host_us" in r or "error" in r) for r in rows):
        return HOST_OVERHEAD_SCHEMA
    raise ValueError(f"not a file this repository writes: no 'schema' key, and keys {sorted(data)[:8]} match no known kind")


RECORD_REQUIRED_KEYS = {
    HOST_OVERHEAD_SCHEMA: ("rows",),
    INDUCTOR_CODE_SCHEMA: ("device", "torch", "triton", "date", "kernels"),
    "compile": ("metadata", "variants"),
}
HOST_OVERHEAD_ROW_KEYS = ("impl", "dtype", "shape")


def validate_record(kind: str, data: dict) -> None:
    """Raise ``ValueError`` unless ``data`` has what a file of ``kind`` must have."""
    if kind == SCHEMA:
        validate_results(data)
        return
    missing = [k for k in RECORD_REQUIRED_KEYS[kind] if k not in data]
    if missing:
        raise ValueError(f"a {kind} record lacks {missing}")
    if kind == HOST_OVERHEAD_SCHEMA:
        for i, row in enumerate(data["rows"]):
            absent = [k for k in HOST_OVERHEAD_ROW_KEYS if k not in row]
            if absent:
                raise ValueError(f"host-overhead row {i} lacks {absent}")
    if kind == "compile" and not isinstance(data["variants"], list):
        raise ValueError("a compile record's variants is not a list")


def read_record(path) -> tuple[str, dict]:
    """(kind, data) of one JSON file of the results folder, checked against its kind.

    Raises ``ValueError`` naming the file when it is not JSON, of no known kind (see
    :data:`RECORD_KINDS`), or lacks what its kind must have.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        kind = record_kind(data)
        validate_record(kind, data)
    except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"{path}: {exc}") from exc
    return kind, data


def read_results(path) -> Results:
    """One benchmark results file (schema :data:`SCHEMA`); ``ValueError`` naming the file otherwise."""
    kind, data = read_record(path)
    if kind != SCHEMA:
        raise ValueError(f"{path}: a {kind!r} record ({RECORD_KINDS[kind]}), not benchmark results ({SCHEMA!r})")
    return results_from(data, path)


def results_from(data: dict, path=None) -> Results:
    """:class:`Results` from a validated results file's data (optional fields filled with None)."""
    rows = [{**dict.fromkeys(OPTIONAL_ROW_FIELDS), **row} for row in data["rows"]]
    return Results(metadata=data["metadata"], rows=rows, path=None if path is None else str(path))


PACKAGED_RESULTS = Path(__file__).resolve().parents[1] / "recorded"
"""Where a wheel install (``pip install git+...`` in Colab) keeps ``benchmarks/results``:
``pyproject.toml`` ships that folder as the package data ``tritonforge/recorded``."""


def results_directory(directory=DEFAULT_RESULTS_DIR) -> Path:
    """``directory`` as given if it exists, else the same path under the repository root, else
    (for the default folder outside a checkout, e.g. in Colab) the copy shipped in the package.

    Chapters execute inside ``chapters/``, so the default relative path is resolved against the
    checkout that holds this package.
    """
    path = Path(directory)
    if path.is_dir() or path.is_absolute():
        return path
    in_checkout = REPO_ROOT / path
    if not in_checkout.is_dir() and path == Path(DEFAULT_RESULTS_DIR) and PACKAGED_RESULTS.is_dir():
        return PACKAGED_RESULTS
    return in_checkout


def load_results(suite: Optional[str] = None, directory=DEFAULT_RESULTS_DIR) -> Results:
    """The newest recorded results that contain ``suite`` (any suite when None).

    "Newest" is the latest ``metadata.date``. With a suite, only that suite's rows are kept (the
    run's ceilings stay in ``metadata["ceilings"]``). Every JSON file in the folder is read: one
    of no known kind, or malformed, raises ``ValueError`` naming it; the other tools' records are
    passed over by kind. Raises ``FileNotFoundError`` if no results file matches.
    """
    folder = results_directory(directory)
    candidates = []
    for path in sorted(folder.glob("*.json")):
        kind, data = read_record(path)
        if kind != SCHEMA:
            continue  # a known record of another tool (RECORD_KINDS), not a suite's results
        results = results_from(data, path)
        if suite is None or any(row["suite"] == suite for row in results.rows):
            candidates.append((str(results.metadata["date"]), path.stat().st_mtime, results))
    if not candidates:
        wanted = f"suite {suite!r}" if suite else "any suite"
        raise FileNotFoundError(
            f"no recorded results for {wanted} in {folder}; record them on a GPU machine with "
            f"scripts/gpu_bench.sh (or python -m tritonforge.bench {suite or 'all'})"
        )
    newest = max(candidates, key=lambda c: (c[0], c[1]))[2]
    if suite is not None:
        newest.rows = [row for row in newest.rows if row["suite"] == suite]
    return newest


def rows_lost(results: Results, directory=DEFAULT_RESULTS_DIR) -> list[tuple[str, str, tuple]]:
    """The (impl, dtype, shape) rows that the newest record of each suite in ``results`` (the run's
    own, its ceilings, or every suite of ``all``) on the same device timed ("ok") and ``results``
    does not: a peer whose package was absent (Liger's wheel not carried), or a run narrowed with
    ``--impls``, ``--dtype``, ``--shapes`` or ``--quick``. Empty when nothing is lost or nothing is
    recorded there.

    :func:`load_results` takes the newest record as the chapters' source, so a record that lost
    rows would silently drop them from every chapter that cites them; the command line writes
    such a run beside the records instead (``<directory>/incomplete/``)."""
    lost: set = set()
    for suite in sorted({row["suite"] for row in results.rows}):
        try:
            previous = load_results(suite, directory)
        except FileNotFoundError:
            continue
        if previous.metadata.get("device") != results.metadata.get("device"):
            continue

        def timed(rows: list, suite=suite) -> set:
            return {(row["impl"], row["dtype"], tuple(row["shape"])) for row in rows if row["suite"] == suite and row["status"] == "ok"}

        lost |= timed(previous.rows) - timed(results.rows)
    return sorted(lost)


def no_gpu_message(directory=DEFAULT_RESULTS_DIR) -> str:
    """What a request to measure says on a machine without a CUDA GPU, and where the records are."""
    folder = results_directory(directory)
    recorded = sorted(p.name for p in folder.glob("*.json")) if folder.is_dir() else []
    listing = ("recorded results: " + ", ".join(recorded)) if recorded else f"no recorded results in {folder} yet"
    return (
        "tritonforge.bench: benchmarks need a CUDA GPU, and torch.cuda.is_available() is False here.\n"
        "Timing through Triton's CPU interpreter would measure the interpreter, not the kernel.\n"
        f"Use the recorded GPU results in {folder} instead ({listing}):\n"
        "  python -m tritonforge.bench show          # print them\n"
        "  tritonforge.bench.load_results('rmsnorm') # load them; tritonforge.book.viz.plot_bench(...) plots them"
    )
