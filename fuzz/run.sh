#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) and runs each for a bounded time over its
# seed corpus in fuzz/corpus/. What a run discovers goes to a scratch copy, so the repository's
# corpus only changes when someone copies an interesting input in on purpose.
#
#   fuzz/run.sh                      # every target, 60 s each (what CI runs)
#   FUZZ_SECONDS=3600 fuzz/run.sh request config   # longer, chosen targets
#   FUZZ_JOBS=2 ...                  # libFuzzer workers per target (default 1)
#   FUZZ_PARALLEL=1 ...              # targets at once (default: cores / FUZZ_JOBS)
#
# A crash leaves its input as crash-* in the scratch directory printed at the end, and the
# script exits 1; reproduce with `build-fuzz/fuzz/fuzz_TARGET crash-file`.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-60}"
jobs="${FUZZ_JOBS:-1}"
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(request response config retry_after jwt request_target timeouts h2_server task_json)

scripts/install-deps --fuzz
build="${FUZZ_BUILD_DIR:-build-fuzz}"
# Through scripts/build, so the fuzz build shares its ccache settings (hits across clones).
BUILD_DIR="$build" scripts/build -DREBOUND_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ \
  -DSANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo

scratch="$(mktemp -d "${TMPDIR:-/tmp}/rebound-fuzz.XXXXXX")"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
parallel=()
[[ "$jobs" -gt 1 ]] && parallel=(-jobs="$jobs" -workers="$jobs")
# One target per core at a time (FUZZ_PARALLEL; with FUZZ_JOBS workers each, cores / jobs):
# the same fuzzing time for each target, in half the wall time on CI's two cores.
cores=$(nproc)
at_once="${FUZZ_PARALLEL:-$(( cores / jobs > 0 ? cores / jobs : 1 ))}"
fuzz_one() {
  local t=$1
  # -timeout: one input taking over 10 s is a hang; -rss_limit_mb: a bounded-memory claim.
  "$build/fuzz/fuzz_$t" "$scratch/$t/corpus" "fuzz/corpus/$t" \
    -max_total_time="$seconds" "${parallel[@]}" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$scratch/$t/artifacts/" \
    >"$scratch/$t/log" 2>&1 || touch "$scratch/$t/failed"
}
echo "== ${#targets[@]} targets, ${seconds}s each, $at_once at a time"
running=0
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t/corpus" "$scratch/$t/artifacts"
  fuzz_one "$t" &
  running=$((running + 1))
  if ((running >= at_once)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait
failed=()
for t in "${targets[@]}"; do
  echo "== fuzz_$t"
  if [[ -e $scratch/$t/failed ]]; then
    failed+=("$t")
    tail -60 "$scratch/$t/log"
  fi
  grep -E "^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)" "$scratch/$t/log" | tr '\n' ' ' || true
  echo
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzzing found a defect in: ${failed[*]} (inputs under $scratch/*/artifacts)"
  exit 1
fi
rm -rf "$scratch"
echo "fuzzing: no crash, leak, hang or sanitizer report in ${#targets[@]} targets x ${seconds}s"
