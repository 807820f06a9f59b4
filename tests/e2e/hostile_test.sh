#!/usr/bin/env bash
# Hostile requests (tests/e2e/hostile_requests.py) against the real server through a real
# gRPC channel, twice: plaintext on loopback and TLS (throw-away certificates from
# Debian's openssl CLI), both with API keys for two tenants (alice max_sessions=4, bob)
# and --max_prompt_tokens=512. Every request gets its precise status and a short message;
# the server stays SERVING and its log shows no crash.
# Usage: hostile_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
test_name=hostile_test
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
trap 'stop "$server_pid"; rm -rf "$work"' EXIT

command -v openssl >/dev/null || fail "openssl not found (deploy/install.sh installs it)"
python_stubs "$work/stubs"

alice=alice-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
bob=bob-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '# two tenants\n%s alice max_sessions=4\n%s bob\n' "$alice" "$bob" >"$work/keys"
certs=$work/certs
mkdir "$certs"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$certs/ca.key" -out "$certs/ca.pem" -days 1 -subj "/CN=attnserve hostile ca" \
  >"$work/openssl.log" 2>&1 || fail "openssl CA"
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$certs/server.key" -out "$certs/server.csr" -subj "/CN=127.0.0.1" \
  >>"$work/openssl.log" 2>&1 || fail "openssl request"
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$certs/server.ext"
openssl x509 -req -in "$certs/server.csr" -CA "$certs/ca.pem" -CAkey "$certs/ca.key" \
  -CAcreateserial -out "$certs/server.pem" -days 1 -extfile "$certs/server.ext" \
  >>"$work/openssl.log" 2>&1 || fail "openssl certificate"

flags=(--api_keys_file="$work/keys" --max_prompt_tokens=512)
run_suite() {  # run_suite LABEL [PY FLAGS...]
  local label=$1
  shift
  step "hostile requests, $label"
  PYTHONPATH="$work/stubs" "$py" "$repo/tests/e2e/hostile_requests.py" "$addr" "$alice" "$bob" \
    "$@" || fail "hostile requests ($label)"
  local health=(--server="$addr")
  [ -n "${1:-}" ] && health+=(--tls_ca="$certs/ca.pem")
  [ "$("$client_bin" "${health[@]}" health)" = SERVING ] || fail "not SERVING after ($label)"
  kill -0 "$server_pid" || fail "the server died ($label)"
  stop "$server_pid"
  server_pid=""
}

addr=127.0.0.1:$(free_port)
start_server "$addr" 127.0.0.1:$(free_port) "${flags[@]}"
run_suite "plaintext"

addr=127.0.0.1:$(free_port)
step "starting $server_bin on $addr with TLS"
"$server_bin" --listen="$addr" --http_listen=127.0.0.1:0 --metrics_listen=127.0.0.1:$(free_port) "${flags[@]}" \
  --tls_cert="$certs/server.pem" --tls_key="$certs/server.key" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  "$client_bin" --server="$addr" --tls_ca="$certs/ca.pem" --connect_timeout=0.1 health \
    >/dev/null 2>&1 && break
  sleep 0.1
done
run_suite "TLS" --tls_ca="$certs/ca.pem"
echo "$test_name: PASS"
