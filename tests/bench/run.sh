#!/usr/bin/env bash
# Builds and runs the decode benchmark; prints Google Benchmark's table (medians of 9
# repetitions, interleaved in random order so machine noise hits every case alike) and writes the JSON next to the build. Usage: tests/bench/run.sh [build-dir]
# Extra arguments after the build dir go to the benchmark (e.g. --benchmark_filter=BM_Decode).
set -euo pipefail
cd "$(dirname "$0")/../.."
# Session transfer benchmark (export/import/fork per module, TTFT on spilled sessions on
# dir: and redis://, drain time; ~3-5 min, markdown tables on stdout; needs
# /usr/bin/redis-server): tests/bench/run.sh session [build-dir] [--reps=15 ...]
# (session_bench --help lists its flags).
if [[ ${1:-} == session ]]; then
  shift
  build=build
  if [[ $# -gt 0 && ${1} != -* ]]; then build=$1; shift; fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" --target session_bench
  exec "$build/tests/bench/session_bench" "$@"
fi
# Scale-out benchmark (proxy overhead, TTFT after a migration between replicas, a rolling
# restart under load; real HAProxy, three real servers and redis-server on loopback; ~2 min,
# markdown tables on stdout; needs haproxy and redis-server): tests/bench/run.sh scale
# [build-dir] [--rounds=5 --migrate_sessions=50 ...] (flags: tests/bench/scale_bench.sh).
if [[ ${1:-} == scale ]]; then
  shift
  build=build
  if [[ $# -gt 0 && ${1} != -* ]]; then build=$1; shift; fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" --target attnserve_server attnserve_client attnserve_init_model \
    scale_bench_client
  exec tests/bench/scale_bench.sh "$build" "$@"
fi
# The HTTP API (TTFT of a resent chat history, cold against kept, taylor and softmax; SSE
# against gRPC streams at 1 and 32; a real server on loopback, node as the HTTP client;
# ~1 min): tests/bench/run.sh http [build-dir] [--sizes=256,1024,4096,16384 --reps=3
# --runs=3 ...] (flags: tests/bench/http_bench.sh).
if [[ ${1:-} == http ]]; then
  shift
  build=build
  if [[ $# -gt 0 && ${1} != -* ]]; then build=$1; shift; fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" --target attnserve_server attnserve_client attnserve_init_model
  exec tests/bench/http_bench.sh "$build" "$@"
fi
# GGUF files against llama.cpp (decode tokens/s at 1 and 8 sessions, TTFT of 512 tokens,
# peak RSS, weight bytes per step against the copy bandwidth; the 152M and 1.17B shapes in
# Q8_0 and Q4_K_M, written once into BUILD/gguf_bench (~15 min the first time); ~10 min):
# tests/bench/run.sh gguf [build-dir] [--files=... --runs=3 ...] (flags: tests/bench/gguf_bench.sh).
if [[ ${1:-} == gguf ]]; then
  shift
  build=build
  if [[ $# -gt 0 && ${1} != -* ]]; then build=$1; shift; fi
  [ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  flock /tmp/build.lock cmake --build "$build" --target attnserve_server attnserve_client
  exec tests/bench/gguf_bench.sh "$build" "$@"
fi
# Hybrid models (a 20-turn chat on a 158M granitehybrid file, Mamba-2 and grouped-query
# attention layers, random weights, Q8_0: time to first token of each turn, the whole
# history resent through chat completions and as a conversation, beside llama.cpp
# re-prefilling the history and keeping its own sequence; state bytes per session at 1k,
# 8k and 32k against every layer full attention; the file written once into
# BUILD/hybrid_bench; ~10 min): tests/bench/run.sh hybrid [build-dir] [--turns=20
# --rounds=3 ...] (flags: tests/bench/hybrid_bench.sh).
if [[ ${1:-} == hybrid ]]; then
  shift
  build=build
  if [[ $# -gt 0 && ${1} != -* ]]; then build=$1; shift; fi
  [ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  flock /tmp/build.lock cmake --build "$build" --target attnserve_server attnserve_client
  exec tests/bench/hybrid_bench.sh "$build" "$@"
fi
# Engine fairness (ITL of a decoding session while 100 long prompts arrive, prefill
# budget off vs on; real server and client on loopback; ~1 min): tests/bench/run.sh
# fairness [build-dir] [--rounds=3 --prompts=100 ...] (flags: tests/bench/fairness_bench.sh).
if [[ ${1:-} == fairness ]]; then
  shift
  build=build
  if [[ $# -gt 0 && ${1} != -* ]]; then build=$1; shift; fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" --target attnserve_server attnserve_client
  exec tests/bench/fairness_bench.sh "$build" "$@"
fi
# Roofline (decode and prefill per step against the measured bandwidth and sgemm peak, three
# shapes x taylor2/softmax/linear, each decode row also through the LibTorch step, then end
# to end at the mid shape, fused and LibTorch step; ~3-5 min, markdown on stdout):
# tests/bench/run.sh roofline [build-dir] [roofline_bench flags, e.g. --shapes=mid
# --modules=taylor2 --workloads=decode]. Pauses the processes named exactly attnserve_train
# (SIGSTOP by pid) while it measures and resumes them on any exit.
if [[ ${1:-} == roofline ]]; then
  shift
  build=build
  if [[ $# -gt 0 && ${1} != -* ]]; then build=$1; shift; fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" --target roofline_bench attnserve_server attnserve_client \
    attnserve_init_model
  paused=$(pgrep -x attnserve_train | tr '\n' ' ' || true)
  resume() { if [ -n "$paused" ]; then kill -CONT $paused 2>/dev/null || true; fi; }
  trap resume EXIT
  trap 'resume; exit 130' INT TERM
  if [ -n "$paused" ]; then kill -STOP $paused; echo "paused attnserve_train: $paused"; fi
  sleep 2  # let the load settle a little after pausing
  echo "tests/bench/run.sh roofline $build $*; $(date -u +%FT%TZ); load average $(cut -d' ' -f1-3 /proc/loadavg); ATTNSERVE_REFERENCE_STEP=${ATTNSERVE_REFERENCE_STEP:-unset}"
  echo
  "$build/tests/bench/roofline_bench" --json="$build/roofline.json" --with_reference "$@"
  tests/bench/roofline_e2e.sh "$build" "$build/roofline.json" --with_reference
  echo
  echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi
build=${1:-build}
shift || true
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target decode_bench
"$build/tests/bench/decode_bench" --benchmark_out="$build/decode_bench.json" \
  --benchmark_out_format=json --benchmark_enable_random_interleaving=true "$@"
