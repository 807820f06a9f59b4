#!/usr/bin/env bash
# Configures and builds attnserve (library, demo, tests, benchmarks) with CMake + Ninja.
# Usage: deploy/build.sh [build-dir] [extra cmake -D options...]
# Build dir defaults to ./build. ccache is used when installed (deploy/install.sh does).
# ATTNSERVE_BUILD_TARGETS="a b": build only those targets (and what they need).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
cmake -S . -B "$build" -G Ninja "$@"
# Two jobs: a LibTorch translation unit peaks at ~1.5 GB and these machines have 2 cores.
targets=()
for t in ${ATTNSERVE_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "${ATTNSERVE_BUILD_JOBS:-2}" "${targets[@]}"
