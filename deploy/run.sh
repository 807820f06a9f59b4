#!/usr/bin/env bash
# The README's first command: installs the packages the server and the client need to
# build, builds those two binaries, starts the server on the shipped default model
# (committed in deploy/models/kjv-taylor2-decay, nothing to train), and shows the sample
# client streaming from it. The server then keeps serving in the foreground until Ctrl-C
# (SIGINT) or SIGTERM. tests/run.sh installs and builds everything else.
# Server flags may be passed through, e.g. deploy/run.sh --listen=127.0.0.1:6000
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install.sh --server
# A first configure leaves out the test and benchmark suites, whose libraries
# `install.sh --server` does not install; a build directory configured before (by
# tests/run.sh) keeps its options.
options=()
[ -f build/CMakeCache.txt ] || options=(-DATTNSERVE_BUILD_TESTS=OFF -DATTNSERVE_BUILD_BENCHMARKS=OFF)
ATTNSERVE_BUILD_TARGETS="attnserve_server attnserve_client" deploy/build.sh build "${options[@]}"

server=build/server/attnserve_server
client=build/client/attnserve_client
listen=${ATTNSERVE_LISTEN:-127.0.0.1:50051}
http=${ATTNSERVE_HTTP_LISTEN-127.0.0.1:8000}
tls=${ATTNSERVE_TLS_CERT:-}
for arg in "$@"; do
  case $arg in
    --listen=*) listen=${arg#--listen=} ;;
    --http_listen=*) http=${arg#--http_listen=} ;;
    --tls_cert=*) tls=${arg#--tls_cert=} ;;
  esac
done

"$server" "$@" &
server_pid=$!
trap 'kill -TERM $server_pid 2>/dev/null; wait $server_pid' INT TERM
for _ in $(seq 1 100); do
  "$client" --server="$listen" --connect_timeout=0.1 health >/dev/null 2>&1 && break
  kill -0 $server_pid 2>/dev/null || { echo "run.sh: the server did not start" >&2; exit 1; }
  sleep 0.1
done

echo
echo "== $client --server=$listen models"
"$client" --server="$listen" models
echo
echo "== $client --server=$listen generate --max_tokens=120 --temperature=0.8 \"In the beginning\""
"$client" --server="$listen" generate --max_tokens=120 --temperature=0.8 "In the beginning"
echo
# The samples of deploy/models/README.md ("Samples"): 1,000 bytes, greedy.
echo "== $client --server=$listen generate --max_tokens=1000 --ignore_eos --temperature=0 \"In the beginning\""
"$client" --server="$listen" generate --max_tokens=1000 --ignore_eos --temperature=0 "In the beginning"
echo
echo "run.sh: the server keeps serving on $listen; try '$client --help'. Ctrl-C stops it."
if [ -n "$http" ]; then
  # The playground page and the OpenAI-compatible API share the HTTP port.
  host=${http%:*}
  case $host in 0.0.0.0 | "[::]" | "") host=127.0.0.1 ;; esac
  echo "run.sh: the playground page: http${tls:+s}://$host:${http##*:}/ (OpenAI-compatible API under /v1)"
fi
wait $server_pid
