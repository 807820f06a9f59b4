#!/usr/bin/env bash
# The sanitizer and fuzzing stages of CI (issue 11), run by tests/run.sh after the main
# suite. Each stage builds only the targets it runs, prints what it runs and how long it
# took, and fails on any finding:
#
#   asan  build-fuzz  clang-14 -O2 ASan + UBSan (+ libFuzzer coverage)   scheduler_test, service_test
#   fuzz  build-fuzz  the same build                                      admission_fuzz, snapshot_fuzz, safetensors_fuzz,
#                                                                         gguf_fuzz, request_fuzz, schema_fuzz (20 s each)
#   tsan  build-tsan  clang-14 -O1 -fsanitize=thread                      scheduler_test, session_test
#
# Both builds use clang: it compiles our LibTorch-heavy files under a sanitizer in about
# 40% of GCC's CPU time (GCC 12 against clang-14, -fsanitize=thread -O1, each with its
# precompiled <ATen/ATen.h>: 71 s against 29 s for the header and four of our files).
#
# The asan and fuzz stages share one instrumented build: the libraries the fuzz targets
# link (service, session, model, grammar, http_format) are the ones scheduler_test and
# service_test exercise, so they are compiled under ASan + UBSan once, by clang, instead
# of once more by GCC in a directory of their own. The tests link the same objects
# without libFuzzer (its coverage hooks resolve to the ASan runtime's no-op defaults).
#
# service_test is not run under TSan: it drives the service through Debian's gRPC, which
# is not instrumented and synchronises its threads with atomics TSan cannot see, so
# every call reports races inside gRPC's own objects (611 reports in one run, every one
# with gRPC frames; none without). Its store and scheduler underneath are covered by
# session_test and scheduler_test under TSan; service_test runs under ASan + UBSan.
#
# Environment (local runs): ATTNSERVE_SKIP_ASAN=1, ATTNSERVE_SKIP_FUZZ=1,
# ATTNSERVE_SKIP_TSAN=1 skip a stage; ATTNSERVE_FUZZ_SECONDS (default 20: CI time; run
# longer locally) is each fuzz target's run time; ATTNSERVE_BUILD_JOBS (default 2) as
# deploy/build.sh. When ATTNSERVE_STAGE_TIMES names a file (tests/run.sh sets it), each
# step appends "NAME SECONDS ok|FAILED" to it, the failing step included.
#
# LibTorch, gRPC, protobuf and the rest of the system libraries are not instrumented. The
# suppression files here name each report from inside them that is accepted, and why;
# nothing in our own code is suppressed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
supp=$root/tests/sanitizers
jobs=${ATTNSERVE_BUILD_JOBS:-2}
build_type=RelWithDebInfo  # as deploy/build.sh's default build
# tsan compiles at -O1, the level its documentation suggests: it costs about 40% less
# compile time than -O2 (GCC, asan, http_front.cc: 22-24 s of CPU against 36-44 s), and
# its tests run a few seconds either way; -O0 saves nothing (GCC: 35 s against 29 s for
# the precompiled header, the same for a source file). The shared asan/fuzz build keeps
# -O2, where the fuzz targets' inputs per second matter.
o1_flags=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG")
asan_targets=(scheduler_test service_test)
fuzz_targets=(admission_fuzz snapshot_fuzz safetensors_fuzz gguf_fuzz request_fuzz schema_fuzz)
tsan_targets=(scheduler_test session_test)

symbolizer=$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer || true)
export ASAN_SYMBOLIZER_PATH=$symbolizer TSAN_SYMBOLIZER_PATH=$symbolizer
common="print_stacktrace=1:halt_on_error=1:abort_on_error=0:exitcode=66"
asan="detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
export ASAN_OPTIONS="${asan}:check_initialization_order=1:${common}"
export UBSAN_OPTIONS="${common}:suppressions=${supp}/ubsan.supp"
export LSAN_OPTIONS="suppressions=${supp}/lsan.supp:print_suppressions=0"
# TSan reports every race before failing (exit code 66 at exit).
export TSAN_OPTIONS="suppressions=${supp}/tsan.supp:halt_on_error=0:exitcode=66:\
second_deadlock_stack=1:history_size=4"

seconds() { date +%s; }
times_file=${ATTNSERVE_STAGE_TIMES:-/dev/null}
# step NAME COMMAND...: prints the command and its wall time, and records it. A failing
# command ends the script (set -e); the EXIT trap then records that step as FAILED.
current_step='' step_t0=0
step() {
  current_step=$1; shift
  echo "sanitizers: [$current_step] $*"
  step_t0=$(seconds)
  "$@"
  local took=$(( $(seconds) - step_t0 ))
  echo "sanitizers: [$current_step] done in $took s"
  echo "$current_step $took ok" >>"$times_file"
  current_step=''
}
record_failure() {
  [ -n "$current_step" ] && echo "$current_step $(( $(seconds) - step_t0 )) FAILED" >>"$times_file"
  return 0
}
trap record_failure EXIT

configure() {  # configure DIR CMAKE_ARGS...
  local dir=$1; shift
  mkdir -p "$dir"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=$build_type \
    -DATTNSERVE_BUILD_BENCHMARKS=OFF "$@" >"$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; return 1; }
}

run_tests() {  # run_tests DIR TEST...: those suites under CTest
  local dir=$1; shift
  ctest --test-dir "$dir" --output-on-failure --timeout 1200 -R "^($(IFS='|'; echo "$*"))\$"
}

configure_fuzz() {  # the one ASan + UBSan build, shared by the asan and fuzz stages
  [ "${fuzz_configured:-0}" = 1 ] && return 0
  step fuzz-configure configure build-fuzz -DCMAKE_CXX_COMPILER=clang++-14 \
    -DATTNSERVE_SANITIZE=address,undefined -DATTNSERVE_FUZZ=ON -DATTNSERVE_BUILD_TESTS=ON
  fuzz_configured=1
}

stage_asan() {
  configure_fuzz
  step asan-build cmake --build build-fuzz -j "$jobs" --target "${asan_targets[@]}"
  step asan-test run_tests build-fuzz "${asan_targets[@]}"
}

stage_tsan() {
  step tsan-configure configure build-tsan -DCMAKE_CXX_COMPILER=clang++-14 \
    -DATTNSERVE_SANITIZE=thread "${o1_flags[@]}"
  step tsan-build cmake --build build-tsan -j "$jobs" --target "${tsan_targets[@]}"
  step tsan-test run_tests build-tsan "${tsan_targets[@]}"
}

fuzz_one() {  # fuzz_one TARGET: bounded run over the committed and regenerated seeds
  local target=$1 work=build-fuzz/corpus/$1 art=build-fuzz/artifacts/$1
  rm -rf "$art"
  # fuzz_seeds writes seeds for some targets only; libFuzzer stops at a missing directory.
  mkdir -p "$work" "$art" "build-fuzz/seeds/$target"
  build-fuzz/tests/fuzz/"$target" -max_total_time="${ATTNSERVE_FUZZ_SECONDS:-20}" \
    -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$art/" \
    "$work" "tests/fuzz/corpus/$target" "build-fuzz/seeds/$target" ||
    { echo "sanitizers: $target found a failing input; it is in $art/" >&2; return 1; }
}

stage_fuzz() {
  configure_fuzz
  step fuzz-build cmake --build build-fuzz -j "$jobs" --target fuzz_seeds "${fuzz_targets[@]}"
  step fuzz-seeds build-fuzz/tests/fuzz/fuzz_seeds build-fuzz/seeds
  step fuzz-admission fuzz_one admission_fuzz
  step fuzz-snapshot fuzz_one snapshot_fuzz
  step fuzz-safetensors fuzz_one safetensors_fuzz
  step fuzz-gguf fuzz_one gguf_fuzz
  step fuzz-request fuzz_one request_fuzz
  step fuzz-schema fuzz_one schema_fuzz
}

t0=$(seconds)
for stage in asan fuzz tsan; do
  skip=ATTNSERVE_SKIP_${stage^^}
  if [ "${!skip:-0}" = 1 ]; then
    echo "sanitizers: $stage skipped ($skip=1)"
  else
    "stage_$stage"
  fi
done
echo "sanitizers: all stages passed in $(( $(seconds) - t0 )) s"
