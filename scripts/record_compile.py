#!/usr/bin/env python3
"""Record what chapter 2's kernels compile to, for readers without a GPU.

On a CUDA machine this launches every variant in ``tritonforge.book.compile_ir.compile_variants()``
(vector add with a length that is / is not a multiple of 16, and in fp16; the 2-D add on a
contiguous, a transposed and a column-sliced view) and records, for each compiled kernel:

- the IR at every stage (Triton IR, TritonGPU IR, LLVM IR, PTX), debug locations removed;
- the global load/store instructions in the PTX (``ld.global.v4.b32`` ...);
- registers and spills per thread (from the driver), shared memory in bytes, warps, stages;
- the device, compute capability, torch/triton/CUDA versions, date and git commit.

It writes one JSON file per kernel, ``compile-<kernel>-<device>-<date>.json``, into
``benchmarks/results/`` or the directory given as the first argument; chapter 2 reads the newest.

Usage (from the repository root)::

    python scripts/record_compile.py                # on a CUDA machine -> benchmarks/results/
    python scripts/record_compile.py "$OUT"         # somewhere else
    python scripts/record_compile.py DIR --offline-arch 90   # no GPU: compile for sm_90 only

With ``--offline-arch`` nothing is launched: Triton's compiler runs on the CPU, registers come
from the binary (``cuobjdump``), and the files are marked ``"offline": true`` (the chapter
prefers GPU recordings). The code lives in ``tritonforge.book.compile_ir`` (``record_main``).
"""

import os
import pathlib
import sys

if "--offline-arch" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "0"  # compile, don't interpret: before tritonforge imports triton
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tritonforge.book.compile_ir import record_main  # noqa: E402  (tritonforge first: it imports triton)

if __name__ == "__main__":
    sys.exit(record_main(sys.argv[1:]))
