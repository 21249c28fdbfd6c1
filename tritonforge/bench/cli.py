"""``python -m tritonforge.bench``: run a suite on the GPU and write its results, or show the records."""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import torch

from tritonforge.bench.results import (
    DEFAULT_RESULTS_DIR,
    SUITES,
    default_results_path,
    load_results,
    no_gpu_message,
    read_results,
    results_directory,
    rows_lost,
    write_results,
)
from tritonforge.bench.suites import run_suite

DTYPE_ALIASES = {
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
}  # fmt: skip

MATRIX_SUITES = ("rmsnorm", "rmsnorm-bwd", "profile-eager-rmsnorm", "swiglu", "swiglu-bwd", "softmax", "softmax-bwd", "all")
"""Suites whose --shapes are M×N (swiglu-front's are M×D×F)."""


def parse_dtypes(text: Optional[str]) -> Optional[list[torch.dtype]]:
    """ "fp32,bf16" -> [torch.float32, torch.bfloat16]."""
    if not text:
        return None
    try:
        return [DTYPE_ALIASES[name.strip().lower()] for name in text.split(",") if name.strip()]
    except KeyError as exc:
        raise argparse.ArgumentTypeError(f"unknown dtype {exc.args[0]!r}; use one of {sorted(DTYPE_ALIASES)}") from None


def parse_shapes(text: Optional[str]) -> Optional[list[tuple[int, ...]]]:
    """ "4096x512,1x8192" -> [(4096, 512), (1, 8192)]; "1048576" -> [(1048576,)]; "2^20" works too."""
    if not text:
        return None
    shapes = []
    for item in text.split(","):
        dims = re.split(r"[x×*]", item.strip().lower())
        try:
            shapes.append(tuple(int(d.split("^")[0]) ** int(d.split("^")[1]) if "^" in d else int(d) for d in dims))
        except (ValueError, IndexError):
            raise argparse.ArgumentTypeError(f"cannot read shape {item!r}; write e.g. 4096x512") from None
    return shapes


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tritonforge.bench",
        description="Time tritonforge kernels beside their peers; report bytes or FLOPs, GB/s or "
        "TFLOP/s and the fraction of the ceilings measured in the same run.",
    )
    parser.add_argument("suite", choices=[*SUITES, "all", "show"], help="what to measure ('show' prints recorded results)")
    parser.add_argument("target", nargs="?", help="show only: a results file or folder (default: the results folder)")
    parser.add_argument("--dtype", type=parse_dtypes, help="comma-separated: fp32,bf16,fp16 (default: fp32 and bf16)")
    parser.add_argument("--shapes", type=parse_shapes, help="comma-separated: 4096x512,1x8192 (axpy: element counts)")
    parser.add_argument("--impls", help="comma-separated subset, e.g. tritonforge,hf-eager,liger")
    parser.add_argument("--out", help="results file (default: <results-dir>/<suite>-<device>-<date>.json)")
    parser.add_argument("--results-dir", default=DEFAULT_RESULTS_DIR, help="where results are written and read")
    parser.add_argument("--quick", action="store_true", help="fewer shapes and dtypes, shorter timing")
    return parser


def show(target: Optional[str], results_dir: str) -> int:
    """Print recorded results: one file, or the newest file for each suite in a folder."""
    path = Path(target) if target else results_directory(results_dir)
    if path.is_file():
        print(read_results(path).table())
        return 0
    printed = False
    for suite in SUITES:
        try:
            results = load_results(suite, path)
        except FileNotFoundError:
            continue
        print(f"# {results.path}\n{results.table()}\n")
        printed = True
    if not printed:
        print(f"no recorded results in {path}", file=sys.stderr)
    return 0 if printed else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.suite == "show":
        return show(args.target, args.results_dir)
    if not torch.cuda.is_available():
        print(no_gpu_message(args.results_dir), file=sys.stderr)
        return 2
    if args.shapes and args.suite in MATRIX_SUITES:
        if any(len(shape) != 2 for shape in args.shapes):
            parser.error(f"suite {args.suite} needs M×N shapes, e.g. --shapes 4096x512,1x8192")
    impls = [i.strip() for i in args.impls.split(",")] if args.impls else None
    command = " ".join(["python", "-m", "tritonforge.bench", *(sys.argv[1:] if argv is None else argv)])
    results = run_suite(args.suite, dtypes=args.dtype, shapes=args.shapes, impls=impls, quick=args.quick, command=command)
    lost = [] if args.out else rows_lost(results, args.results_dir)
    target = Path(args.out) if args.out else default_results_path(results.metadata, args.results_dir)
    if lost:  # kept, but not where the chapters read: the newest record there still has these rows
        target = target.parent / "incomplete" / target.name
    path = write_results(results, target)
    results.path = str(path)
    print(results.table())
    print(f"\nwrote {path}")
    if lost:
        counts = Counter(f"{impl} {dtype}" for impl, dtype, _ in lost)
        print(f"not a full record: {len(lost)} rows timed in the newest record in {args.results_dir} are not timed here "
              f"({', '.join(f'{name}: {n}' for name, n in counts.items())}; a peer's package missing, or --impls/--dtype/"
              "--shapes). Written under incomplete/, so that the chapters keep the full record. Carry the missing package "
              "(scripts/gpu_bench.sh: WHEELS) and run again, or pass --out to write it where you say.",
              file=sys.stderr)  # fmt: skip
        return 3
    return 0
