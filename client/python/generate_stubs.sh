#!/usr/bin/env bash
# Writes the Python modules generated from proto/ (messages, type stubs, the gRPC stub)
# into DIR/attnserve/v1/, by Debian 12's protoc 3.21 and grpc_python_plugin 1.51
# (protobuf-compiler, protobuf-compiler-grpc; deploy/install.sh installs them).
#   client/python/generate_stubs.sh        the package's copies, after an edit of proto/
#   client/python/generate_stubs.sh DIR    elsewhere (tests/python/stubs_test.sh compares)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
proto=$here/../../proto
out=${1:-$here}
plugin=$(command -v grpc_python_plugin) || {
  echo "generate_stubs.sh: grpc_python_plugin not found (protobuf-compiler-grpc)" >&2
  exit 1
}
mkdir -p "$out"
protoc -I "$proto" --python_out="$out" --pyi_out="$out" \
  attnserve/v1/attnserve.proto attnserve/v1/model_config.proto
protoc -I "$proto" --grpc_python_out="$out" --plugin=protoc-gen-grpc_python="$plugin" \
  attnserve/v1/attnserve.proto
