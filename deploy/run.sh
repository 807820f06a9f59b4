#!/usr/bin/env bash
# The README's first command: installs the system packages, builds, and runs the main
# job on the shipped default. Until the gRPC server lands, the main job is the demo:
# a small model per attention module streaming generated text to the terminal.
# Extra arguments go to the demo (see `build/server/demo/attnserve_demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install.sh
deploy/build.sh build
exec build/server/demo/attnserve_demo "$@"
