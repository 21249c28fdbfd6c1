#!/usr/bin/env bash
# On a CUDA machine: run the benchmark suites and write their results into one folder.
#
# Usage: bash scripts/gpu_bench.sh [results-dir] [suite ...]
#   results-dir  where the JSON files go (default benchmarks/results)
#   suite ...    default: ceilings axpy rmsnorm rmsnorm-bwd profile-eager-rmsnorm swiglu swiglu-bwd swiglu-front
#                softmax softmax-bwd attention attention-decode attention-bwd
#
# Each suite runs in its own process, measures the ceilings first, and writes
# <results-dir>/<suite>-<device>-<date>.json. The log goes to ${LOG:-<results-dir>/gpu-bench.log}.
# At the end it prints every table (python -m tritonforge.bench show) and exits non-zero if a
# suite failed.
#
# Environment:
#   PYTHON      the interpreter (default python3)
#   BENCH_ARGS  extra options for every suite, e.g. BENCH_ARGS="--quick"
#   TRITONFORGE_GIT_COMMIT  the full commit hash of the tree being measured, recorded instead of
#               what `git rev-parse HEAD` says (a tree copied to a GPU machine can carry an older .git)
#   WHEELS      a folder of wheels to install first into a private folder (default .whl): put
#               Liger-Kernel's pure-Python wheel there (pip download --no-deps liger-kernel) to
#               measure it; without it the Liger rows say "unavailable", and a suite whose newest
#               record has Liger rows writes to <results-dir>/incomplete/ and counts as failed.
#   TRITONFORGE_TRITON_TUTORIAL  Triton's 06-fused-attention.py, the attention suites' float16 peer
#               (default .peers/06-fused-attention.py). scripts/fetch_peers.sh downloads both.
set -uo pipefail
cd "$(dirname "$0")/.."

results_dir="${1:-benchmarks/results}"
[ "$#" -gt 0 ] && shift
suites=("$@")
[ "${#suites[@]}" -eq 0 ] && suites=(ceilings axpy rmsnorm rmsnorm-bwd profile-eager-rmsnorm swiglu swiglu-bwd swiglu-front softmax softmax-bwd attention attention-decode attention-bwd)
python="${PYTHON:-python3}"
mkdir -p "$results_dir"
log="${LOG:-$results_dir/gpu-bench.log}"
: >"$log"

wheels="${WHEELS:-.whl}"
if compgen -G "$wheels/*.whl" >/dev/null; then
  site="$(mktemp -d)"
  if "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl; then
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "warning: could not install the wheels in $wheels; their rows will be unavailable" | tee -a "$log"
  fi
fi

"$python" - <<'PY' 2>&1 | tee -a "$log"
import torch, tritonforge as tfg
assert torch.cuda.is_available(), "scripts/gpu_bench.sh needs a CUDA GPU"
print(tfg.environment())
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1

failed=()
for suite in "${suites[@]}"; do
  echo "=== $suite ($(date -u +%H:%M:%S) UTC) ===" | tee -a "$log"
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
  PYTHONUNBUFFERED=1 "$python" -m tritonforge.bench "$suite" --results-dir "$results_dir" ${BENCH_ARGS:-} 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed+=("$suite")
done

echo "=== summary: newest results in $results_dir ===" | tee -a "$log"
"$python" -m tritonforge.bench show "$results_dir" 2>&1 | tee -a "$log"
ls -l "$results_dir"/*.json 2>/dev/null | tee -a "$log"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "FAILED suites: ${failed[*]} (see $log)" | tee -a "$log"
  exit 1
fi
echo "all suites ran: ${suites[*]}" | tee -a "$log"
