#!/usr/bin/env bash
# The README's test command (also what CI runs): installs the system packages, builds
# everything, and runs the whole test suite under CTest. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install.sh
deploy/build.sh build
cd build
ctest --output-on-failure --timeout 900
