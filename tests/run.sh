#!/usr/bin/env bash
# The README's test command (also what CI runs): installs the system packages, builds
# everything, runs the whole test suite under CTest, then the sanitizer and fuzzing
# stages (tests/sanitizers/run.sh; ATTNSERVE_SKIP_{ASAN,FUZZ,TSAN}=1 skip them locally).
# Exits non-zero on any failure. At the end, passed or failed, it prints each stage's
# wall-clock seconds (the sanitizer stages step by step); a failed stage is marked.
set -euo pipefail
cd "$(dirname "$0")/.."

times=$(mktemp)
export ATTNSERVE_STAGE_TIMES=$times
run_t0=$(date +%s)
current='' stage_t0=0
stage() {  # stage NAME COMMAND...: runs it, records its time
  current=$1; shift
  stage_t0=$(date +%s)
  "$@"
  echo "$current $(( $(date +%s) - stage_t0 )) ok" >>"$times"
  current=''
}
report() {
  local rc=$?
  [ -n "$current" ] && echo "$current $(( $(date +%s) - stage_t0 )) FAILED" >>"$times"
  echo
  echo "tests/run.sh: time by stage (wall-clock seconds)"
  awk '{ printf "  %-20s %6d  %s\n", $1, $2, ($3 == "ok" ? "" : $3) }' "$times"
  printf "  %-20s %6d  %s\n" total $(( $(date +%s) - run_t0 )) \
    "$([ "$rc" = 0 ] && echo passed || echo "FAILED (exit $rc)")"
  rm -f "$times"
  exit "$rc"
}
trap report EXIT

stage install deploy/install.sh
# Explicitly on: deploy/run.sh may have configured build/ without them.
stage build deploy/build.sh build -DATTNSERVE_BUILD_TESTS=ON -DATTNSERVE_BUILD_BENCHMARKS=ON
stage ctest bash -c 'cd build && ctest --output-on-failure --timeout 900'
# Records its own steps (asan-build, asan-test, fuzz-..., tsan-...) in $times.
tests/sanitizers/run.sh
