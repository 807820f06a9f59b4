#!/usr/bin/env bash
# Three 1,000-byte samples from a model directory, the way a user gets them: the server
# on that model, the sample client's `generate` (greedy, then two seeded samples at
# temperature 0.8, top-p 0.95), prompt "In the beginning", end-of-sequence ignored.
# Writes MODEL_DIR/samples.md (the commands and the text) and prints it.
# Usage: deploy/models/samples.sh [BUILD_DIR] MODEL_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -ge 2 ]; then build=$1; shift; else build=build; fi
dir=${1:?usage: deploy/models/samples.sh [BUILD_DIR] MODEL_DIR}
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
listen=127.0.0.1:$(port)
"$build/server/attnserve_server" --listen="$listen" --http_listen=127.0.0.1:0 --metrics_listen="127.0.0.1:$(port)" \
  --model_dirs="$dir" --max_generated_tokens=4096 >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  "$build/client/attnserve_client" --server="$listen" --connect_timeout=0.1 health \
    >/dev/null 2>&1 && break
  kill -0 $server 2>/dev/null || { echo "samples.sh: the server did not start" >&2; exit 1; }
  sleep 0.1
done
out=$dir/samples.md
{
  echo "Samples from \`$(basename "$dir")\` (prompt \"In the beginning\", 1,000 tokens, written by"
  echo "deploy/models/samples.sh)."
  for flags in "--temperature=0" "--temperature=0.8 --top_p=0.95 --seed=1" \
               "--temperature=0.8 --top_p=0.95 --seed=2"; do
    echo
    echo "\`attnserve_client generate --max_tokens=1000 --ignore_eos $flags \"In the beginning\"\`"
    echo
    echo '```text'
    # shellcheck disable=SC2086
    "$build/client/attnserve_client" --server="$listen" generate --max_tokens=1000 \
      --ignore_eos $flags "In the beginning" 2>/dev/null
    echo
    echo '```'
  done
} >"$out"
cat "$out"
