#!/usr/bin/env bash
# The Python modules checked in under client/python/attnserve/v1 are what Debian's protoc
# and grpc_python_plugin generate from proto/ now: after an edit of a .proto file, run
# client/python/generate_stubs.sh and commit its output.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$repo/client/python/generate_stubs.sh" "$work"
if ! diff -r -x __init__.py -x __pycache__ "$work/attnserve/v1" \
  "$repo/client/python/attnserve/v1" >"$work/diff"; then
  head -n 40 "$work/diff" >&2
  echo "python_stubs_test: FAIL: client/python/attnserve/v1 differs from proto/;" \
    "run client/python/generate_stubs.sh" >&2
  exit 1
fi
echo "python_stubs_test: client/python/attnserve/v1 matches proto/" \
  "($(ls "$work/attnserve/v1" | wc -l) files)"
