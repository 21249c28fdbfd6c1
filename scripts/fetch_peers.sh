#!/usr/bin/env bash
# On a machine with internet: download the peers that a GPU machine without internet needs in
# order to measure them (carry .whl/ and .peers/ to it; scripts/gpu_bench.sh picks both up).
#
# Usage: bash scripts/fetch_peers.sh [triton-ref]
#   .whl/                          Liger-Kernel's pure-Python wheel (LIGER, default liger-kernel==0.8.5)
#   .peers/06-fused-attention.py   Triton's fused-attention tutorial at triton-ref, a tag or commit
#                                  of github.com/triton-lang/triton (default v3.6.0: pick the Triton
#                                  the GPU machine runs, since the tutorial follows its language)
#
# Neither is a dependency or part of this repository (both folders are ignored by git): they are
# peers, measured as their authors ship them. tritonforge.bench checks every row against float64,
# so a tutorial version with a bug (some index the TMA forward's rows as off_z + off_h * N_CTX,
# wrong for a batch above 1) shows as WRONG and is not timed.
set -euo pipefail
cd "$(dirname "$0")/.."
ref="${1:-v3.6.0}"
python="${PYTHON:-python3}"
mkdir -p .whl .peers
"$python" -m pip download --no-deps -q -d .whl "${LIGER:-liger-kernel==0.8.5}"
url="https://raw.githubusercontent.com/triton-lang/triton/$ref/python/tutorials/06-fused-attention.py"
curl -fsSL "$url" -o .peers/06-fused-attention.py
echo "fetched: $(ls .whl/*.whl) and .peers/06-fused-attention.py ($ref)"
