#!/usr/bin/env bash
# The README's test command (also what CI runs): installs the system packages, builds
# everything, runs the whole test suite under CTest, then the sanitizer and fuzzing
# stages (tests/sanitizers/run.sh; ATTNSERVE_SKIP_{ASAN,FUZZ,TSAN}=1 skip them locally).
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install.sh
# Explicitly on: deploy/run.sh may have configured build/ without them.
deploy/build.sh build -DATTNSERVE_BUILD_TESTS=ON -DATTNSERVE_BUILD_BENCHMARKS=ON
(cd build && ctest --output-on-failure --timeout 900)
tests/sanitizers/run.sh
