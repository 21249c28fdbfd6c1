#!/usr/bin/env bash
# On a CUDA machine: run every kernel of the package under NVIDIA's compute-sanitizer and report.
#
# Usage: bash scripts/sanitize.sh OUTDIR [tool ...]
#   OUTDIR   where the logs go (created): sanitize-<tool>.log for each tool, sanitize-native.log (the
#            workload without a sanitizer), sanitize-probe.log, sanitize-summary.txt
#   tool ... compute-sanitizer tools, run one after another (default: memcheck racecheck; synccheck
#            and initcheck work too)
#
# The workload is scripts/sanitize_workload.py: every public op, forward and backward where it has a
# backward kernel, once per execution strategy of its plan, at sizes chosen for an H200; strict
# routing (a fallback to the PyTorch reference raises); each result checked against the reference.
# A tool's log interleaves the workload's "start <case>" / "ok <case>" lines with the sanitizer's
# reports, so a report sits under the case that caused it.
#
# Steps: install the sanitizer wheel(s) into a private folder; pick a compute-sanitizer that really
# launches a process (a 4-element CUDA program run under it must print and get an ERROR SUMMARY);
# run the workload once without a sanitizer (compiles every kernel into Triton's cache, so the
# sanitized runs spend their time checking, and gives the results a sanitizer cannot disturb); then
# each tool. At the end: each log's ERROR SUMMARY and the workload's own summary; exit 0 only if
# every tool ran to the end with "0 errors" and every case passed; 1 otherwise; 3 if no usable
# compute-sanitizer was found.
#
# The sanitizer wheel: nvidia-cuda-sanitizer-api 13.0.x and 13.1.x ship bin/compute-sanitizer
# without the TreeLauncherSubreaper helper it executes to start the target program, so the target
# never runs ("Target application terminated before first instrumented API call"; seen with 13.0.85
# under strace: execve(".../bin/TreeLauncherSubreaper") = ENOENT). 13.4.92 ships the whole
# compute-sanitizer folder (helpers and docs). With a complete wheel in SAN_WHEELS it is tried
# first; an incomplete one next to it is also tried with the complete one's helpers copied beside
# it (an older tool may suit an older driver better); the first that passes the probe runs.
#
# Environment:
#   PYTHON             the interpreter (default python3)
#   SAN_WHEELS         folder of nvidia_cuda_sanitizer_api*.whl (default .whl/san)
#   COMPUTE_SANITIZER  a compute-sanitizer binary to use instead of the wheels
#   SAN_BUDGET         seconds for the whole script (default 570; 0: no limit). Each step gets a share
#                      of what is left when it starts (timeout), so a slow tool cannot starve the next
#                      and the summary is printed before a 600 s limit ends the command
#   SAN_WARMUP         1 (default): the native run first; 0: skip it
#   SAN_ARGS           options for the workload, e.g. "--only softmax,rms_norm" (its --list names them)
#   SAN_FLAGS          extra compute-sanitizer options for every tool
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "$#" -lt 1 ]; then
  echo "usage: bash scripts/sanitize.sh OUTDIR [tool ...]   (default tools: memcheck racecheck)" >&2
  exit 2
fi
outdir="$1"
shift
tools=("$@")
[ "${#tools[@]}" -eq 0 ] && tools=(memcheck racecheck)
python="${PYTHON:-python3}"
wheels="${SAN_WHEELS:-.whl/san}"
budget="${SAN_BUDGET:-570}"
started=$(date +%s)
mkdir -p "$outdir"
summary="$outdir/sanitize-summary.txt"
: >"$summary"

say() { echo "$*" | tee -a "$summary"; }

# Seconds a step may take: percent $1 of what is left of the budget, at least $2 (0 = no limit).
share() {
  local percent=$1 floor=$2
  if [ "$budget" -eq 0 ]; then echo 0; return; fi
  local left=$((started + budget - $(date +%s)))
  local s=$((left * percent / 100))
  [ "$s" -lt "$floor" ] && s=$floor
  echo "$s"
}

say "=== sanitize: $(date -u '+%Y-%m-%d %H:%M:%S') UTC, tools: ${tools[*]}, budget ${budget}s ==="
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$summary"
"$python" -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "gpu", torch.cuda.is_available())' 2>&1 | tee -a "$summary"

# ---- the compute-sanitizer: from the wheels, checked by a probe -------------------------------

probe_log="$outdir/sanitize-probe.log"
: >"$probe_log"
probe_py='import torch; x = torch.ones(4, device="cuda"); assert float((x + 1).sum()) == 8.0; torch.cuda.synchronize(); print("probe ok")'

# True when $1 starts a program under memcheck: the program prints and the tool prints its summary.
probe() {
  local san="$1" out
  echo "--- probe: $san" >>"$probe_log"
  out=$(timeout -k 10 240 "$san" --tool memcheck --target-processes application-only --launch-timeout 120 "$python" -c "$probe_py" 2>&1)
  echo "$out" >>"$probe_log"
  grep -q "^probe ok" <<<"$out" && grep -q "ERROR SUMMARY" <<<"$out"
}

candidates=()
if [ -n "${COMPUTE_SANITIZER:-}" ]; then
  candidates=("$COMPUTE_SANITIZER")
else
  site_root="$(mktemp -d)"
  complete=()
  incomplete=()
  # Newest version first (sort -V on the file names).
  while IFS= read -r whl; do
    dir="$site_root/$(basename "$whl" .whl)"
    if ! "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$dir" "$whl" 2>>"$probe_log"; then
      echo "pip could not install $whl; unpacking it with zipfile" | tee -a "$summary"
      "$python" -m zipfile -e "$whl" "$dir" || continue
    fi
    # The real binary: an ELF file named compute-sanitizer (13.4's bin/compute-sanitizer is a shell
    # wrapper around ../compute-sanitizer/compute-sanitizer). Complete when its helper is beside it.
    while IFS= read -r bin; do
      head -c 4 "$bin" | grep -q "ELF" || continue
      chmod u+x "$bin" "$(dirname "$bin")"/TreeLauncher* 2>/dev/null
      if [ -e "$(dirname "$bin")/TreeLauncherSubreaper" ]; then
        complete+=("$bin")
      else
        incomplete+=("$bin")
      fi
    done < <(find "$dir" -type f -name compute-sanitizer)
  done < <(ls "$wheels"/nvidia_cuda_sanitizer_api*.whl 2>/dev/null | sort -rV)
  candidates+=(${complete[@]+"${complete[@]}"})
  for bin in ${incomplete[@]+"${incomplete[@]}"}; do
    for full in ${complete[@]+"${complete[@]}"}; do  # an older tool with a newer wheel's launcher helpers
      # One folder, as the toolkit lays it out: the binary, its libraries, the helpers.
      bindir="$(dirname "$bin")"
      hybrid="$(dirname "$bindir")/hybrid-sanitizer"
      mkdir -p "$hybrid"
      cp -a "$bindir"/. "$hybrid"/
      [ -d "$bindir/../lib" ] && cp -a "$bindir"/../lib/. "$hybrid"/
      cp -a "$(dirname "$full")"/TreeLauncherSubreaper "$(dirname "$full")"/TreeLauncherTargetLdPreloadHelper "$hybrid"/
      candidates+=("$hybrid/compute-sanitizer")
      break
    done
    candidates+=("$bin")  # as shipped: only works if its helper is found some other way
  done
fi

san=""
for c in ${candidates[@]+"${candidates[@]}"}; do
  if probe "$c"; then
    san="$c"
    break
  fi
  say "probe failed: $c cannot run a CUDA program under memcheck (see $probe_log)"
done
if [ -z "$san" ]; then
  say "no usable compute-sanitizer (candidates: ${candidates[*]:-none from $wheels}); put a complete"
  say "nvidia-cuda-sanitizer-api wheel (13.4.92 ships TreeLauncherSubreaper) in $wheels, or set COMPUTE_SANITIZER"
  exit 3
fi
say "compute-sanitizer: $san"
"$san" --version 2>&1 | tee -a "$summary"
say "probe: $(grep -a "ERROR SUMMARY" "$probe_log" | tail -1 | sed 's/^=* *//') (torch alone: CUDA init, one kernel)"

# ---- the native run ---------------------------------------------------------------------------

status=0
if [ "${SAN_WARMUP:-1}" = "1" ]; then
  limit=$(share 45 120)  # mostly Triton compiling ~150 kernels (autotuning configurations included)
  say "=== native run (no sanitizer; limit ${limit}s): compiles every kernel, checks every result ==="
  # shellcheck disable=SC2086  # SAN_ARGS is a list of options
  PYTHONUNBUFFERED=1 timeout -k 10 "$limit" "$python" scripts/sanitize_workload.py ${SAN_ARGS:-} 2>&1 | tee "$outdir/sanitize-native.log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    say "native: TIMEOUT after ${limit}s (the tools compile what is left)"
  else
    say "native: exit $rc; $(grep -a "^summary:" "$outdir/sanitize-native.log" | tail -1)"
    [ "$rc" -eq 0 ] || status=1
  fi
fi

# ---- the tools --------------------------------------------------------------------------------

# Options for every tool, each chosen from compute-sanitizer's documentation (CUDA 13):
common=(
  # The exit status when the program succeeded but the tool found errors (1 is the workload's own
  # "a case failed"; 17 says: the sanitizer).
  --error-exitcode 17
  # Track only the Python process. Triton's compiler runs ptxas and a C compiler as child processes;
  # they never touch CUDA, and tracking them costs time (the default, "all", follows every child).
  --target-processes application-only
  # Fail if the program never initialized CUDA (the default, said explicitly): a run that checked
  # nothing must not pass.
  --require-cuda-init yes
  # Seconds to wait for the program to connect (default 10): a cold "import torch" can take longer.
  --launch-timeout 120
  # cuGetProcAddress answering NOT_FOUND is how PyTorch and Triton probe the driver for optional
  # entry points; not an error of anything launched here.
  --ignore-getprocaddress-notfound
)

for i in "${!tools[@]}"; do
  tool="${tools[$i]}"
  log="$outdir/sanitize-$tool.log"
  flags=()
  envs=()
  case "$tool" in
    memcheck)
      # Leaks are out of scope (PyTorch, cuBLAS and Triton keep memory until exit); the default.
      flags+=(--leak-check no)
      # A padding buffer after every cudaMalloc: an overrun into a neighbouring allocation would
      # otherwise look valid. 64 KB: a whole block past the end (16K fp32 elements) still lands in it.
      flags+=(--padding 65536)
      # Failed CUDA API calls made by the program itself are reported (13.4's default, "extended",
      # adds errors from the driver's internal log, not actionable here).
      flags+=(--report-api-errors explicit)
      # Every tensor its own cudaMalloc: inside PyTorch's caching allocator a pool is one allocation
      # to the sanitizer, and an out-of-bounds access that stays in the pool goes unseen.
      envs+=(PYTORCH_NO_CUDA_MEMORY_CACHING=1)
      ;;
    racecheck)
      # Shared-memory hazards only. "analysis" (the default, said explicitly) folds the hazards of a
      # race into one report per source location; "hazard" would list every byte-level hazard.
      flags+=(--racecheck-report analysis)
      # Report WARNING and ERROR hazards (the default): INFO ones cannot change a result.
      flags+=(--racecheck-detect-level warn)
      ;;
    initcheck)
      # Judge the kernels' reads only: PyTorch's own cudaMemcpy of whole buffers is not the question.
      flags+=(--check-api-memory-access no)
      envs+=(PYTORCH_NO_CUDA_MEMORY_CACHING=1)
      ;;
  esac
  limit=$(share $(( 100 / (${#tools[@]} - i) )) 60)  # an equal share of what is left
  {
    echo "=== $tool ($(date -u +%H:%M:%S) UTC, limit ${limit}s) ==="
    echo "+ ${envs[*]:-} $san --tool $tool ${common[*]} ${flags[*]} ${SAN_FLAGS:-} $python scripts/sanitize_workload.py ${SAN_ARGS:-}"
  } | tee "$log"
  # shellcheck disable=SC2086  # SAN_FLAGS and SAN_ARGS are lists of options
  env ${envs[@]+"${envs[@]}"} PYTHONUNBUFFERED=1 timeout -k 20 "$limit" \
    "$san" --tool "$tool" "${common[@]}" ${flags[@]+"${flags[@]}"} ${SAN_FLAGS:-} "$python" scripts/sanitize_workload.py ${SAN_ARGS:-} 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  verdict="clean"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    verdict="TIMEOUT after ${limit}s (incomplete: see the last 'start' line)"
  elif ! grep -aqE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors, 0 warnings\)" "$log"; then
    verdict="ERRORS"  # (racecheck ends with its own summary line instead of memcheck's ERROR SUMMARY)
  elif [ "$rc" -ne 0 ]; then
    verdict="FAILED (exit $rc)"
  fi
  [ "$verdict" = "clean" ] || status=1
  say "$tool: $verdict; exit $rc"
  say "  sanitizer: $(grep -a "ERROR SUMMARY" "$log" | tail -1 | sed 's/^=* *//')$(grep -a "RACECHECK SUMMARY" "$log" | tail -1 | sed 's/^=* */; /')"
  say "  CUDA API errors reported: $(grep -ac "Program hit" "$log"); invalid accesses: $(grep -ac "Invalid __" "$log"); races: $(grep -acE "Race reported|hazard detected" "$log")"
  say "  workload: $(grep -a "^summary:" "$log" | tail -1)"
done

say "=== done in $(( $(date +%s) - started ))s: $([ "$status" -eq 0 ] && echo "every tool clean, every case ok" || echo "NOT clean (see above and $outdir)") ==="
exit "$status"
