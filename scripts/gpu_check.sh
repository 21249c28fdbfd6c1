#!/usr/bin/env bash
# On a CUDA machine: run the whole test suite, GPU-marked tests included, on the compiled Triton
# path, strict. Usage: bash scripts/gpu_check.sh [pytest args...]
# Writes a JUnit report and the log to ${OUT:-.}/gpu-tests.{xml,log}.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-.}"
python3 - <<'PY'
import torch, tritonforge as tfg
assert torch.cuda.is_available(), "scripts/gpu_check.sh needs a CUDA GPU"
print(tfg.environment())
PY
TRITONFORGE_STRICT=1 python3 -m pytest tests -p no:cacheprovider -o addopts="-ra --strict-markers" \
  --junitxml="$out/gpu-tests.xml" "$@" 2>&1 | tee "$out/gpu-tests.log"
exit "${PIPESTATUS[0]}"
