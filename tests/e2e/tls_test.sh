#!/usr/bin/env bash
# TLS end to end, with throw-away certificates made here by Debian's openssl CLI (a CA, a
# server certificate for 127.0.0.1, localhost and attnserve.test, a client certificate,
# and a client certificate from another CA):
# - the server refuses to listen on 0.0.0.0 with neither TLS nor --insecure (exit 2, a
#   message naming the flags), starts with --insecure, and starts on 0.0.0.0 with TLS;
# - certificate files that are missing, not PEM or not a pair stop it at start-up with
#   the file's name;
# - over TLS the C++ and the Python client stream the same bytes; --tls_server_name and
#   the environment mirrors work; a plaintext client, a client without the CA and a
#   client expecting another name fail cleanly (exit 3, "cannot reach" / "no connection");
# - the HTTP API on the same certificate is HTTPS only (curl: models and a streamed chat;
#   plain HTTP and an unknown CA refused), and takes mutual TLS the same way;
# - with --tls_client_ca (mutual TLS) a client without a certificate, or with one from
#   another CA, is refused; with the CA's client certificate both clients generate.
# Usage: tls_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
test_name=tls_test
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
trap 'stop "$server_pid"; rm -rf "$work"' EXIT

command -v openssl >/dev/null || fail "openssl not found (deploy/install.sh installs it)"

# --- certificates ---------------------------------------------------------------------------
certs=$work/certs
mkdir "$certs"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
# make_ca NAME: NAME.pem and NAME.key, self-signed (CA:TRUE from openssl.cnf's v3_ca).
make_ca() {
  openssl req -x509 "${ec[@]}" -keyout "$certs/$1.key" -out "$certs/$1.pem" -days 1 \
    -subj "/CN=attnserve $1" >>"$work/openssl.log" 2>&1 || logs=openssl fail "openssl: CA $1"
}
# make_cert NAME CA EXTENSIONS: NAME.pem and NAME.key signed by CA.
make_cert() {
  openssl req "${ec[@]}" -keyout "$certs/$1.key" -out "$certs/$1.csr" -subj "/CN=$1" \
    >>"$work/openssl.log" 2>&1 || logs=openssl fail "openssl: request $1"
  printf '%b' "$3" >"$certs/$1.ext"
  openssl x509 -req -in "$certs/$1.csr" -CA "$certs/$2.pem" -CAkey "$certs/$2.key" \
    -CAcreateserial -out "$certs/$1.pem" -days 1 -extfile "$certs/$1.ext" \
    >>"$work/openssl.log" 2>&1 || logs=openssl fail "openssl: certificate $1"
}
step "throw-away certificates (openssl $(openssl version | cut -d' ' -f2))"
make_ca ca
make_ca other-ca
make_cert server ca \
  'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:attnserve.test\nextendedKeyUsage=serverAuth\n'
make_cert client ca 'extendedKeyUsage=clientAuth\n'
make_cert rogue other-ca 'extendedKeyUsage=clientAuth\n'
echo "not a certificate" >"$certs/garbage.pem"
tls=(--tls_cert="$certs/server.pem" --tls_key="$certs/server.key")

step "generating Python stubs from proto/"
python_stubs "$work/stubs"

# start_tls NAME ADDR "CLIENT FLAGS" [SERVER FLAGS...]: starts the server (server_pid, log
# $work/NAME.log) and waits up to 15 s until the client with CLIENT FLAGS sees SERVING.
start_tls() {
  local name=$1 addr=$2 client_flags=$3
  shift 3
  step "starting the server ($name) on $addr $*"
  http_port=$(free_port)
  "$server_bin" --listen="$addr" --http_listen="127.0.0.1:$http_port" \
    --metrics_listen="127.0.0.1:$(free_port)" "$@" >"$work/$name.log" 2>&1 &
  server_pid=$!
  logs=$name
  for _ in $(seq 1 150); do
    # shellcheck disable=SC2086
    [ "$("$client_bin" --server="${addr/0.0.0.0/127.0.0.1}" $client_flags --connect_timeout=0.1 \
      health 2>/dev/null)" = SERVING ] && return 0
    kill -0 "$server_pid" 2>/dev/null || fail "server $name exited during start-up"
    sleep 0.1
  done
  fail "server $name is not SERVING after 15 s"
}

# expect_start_error EXIT_STATUS MESSAGE [SERVER FLAGS...]: the server must exit with
# EXIT_STATUS within 30 s, its stderr containing MESSAGE (a fixed string).
expect_start_error() {
  local want=$1 message=$2
  shift 2
  "$server_bin" --http_listen=127.0.0.1:0 --metrics_listen="127.0.0.1:$(free_port)" "$@" >"$work/refused.log" 2>&1 &
  local pid=$!
  logs=refused wait_exit "$pid" 30
  [ "$exit_status" -eq "$want" ] ||
    logs=refused fail "$*: exit $exit_status, expected $want"
  grep -qF -- "$message" "$work/refused.log" ||
    logs=refused fail "$*: no \"$message\" in the error"
  echo "  exit $exit_status: $(head -c 300 "$work/refused.log")"
}

# expect_unreachable WHAT [CLIENT FLAGS...]: `health` must fail with exit 3 and a
# "cannot reach" line.
expect_unreachable() {
  local what=$1 rc=0
  shift
  "$client_bin" --connect_timeout=2 "$@" health >"$work/out" 2>"$work/err" || rc=$?
  [ "$rc" -eq 3 ] || fail "$what: exit $rc, expected 3: $(cat "$work/out" "$work/err")"
  grep -q "^cannot reach attnserve at " "$work/err" || fail "$what: $(cat "$work/err")"
  echo "  $what: exit 3: $(grep '^cannot reach' "$work/err")"
}

pyc() { PYTHONPATH="$work/stubs" "$py" "$repo/client/python/attnserve_client.py" "$@"; }

# --- where the server may listen in the clear -----------------------------------------------
step "0.0.0.0 with neither TLS nor API keys: refused, saying why and what to pass"
port=$(free_port)
expect_start_error 2 "refusing to listen on 0.0.0.0:$port" --listen=0.0.0.0:$port
for flag in --tls_cert=FILE --tls_key=FILE --insecure --listen=127.0.0.1:PORT; do
  grep -qF -- "$flag" "$work/refused.log" || fail "the refusal does not mention $flag"
done
expect_start_error 2 "refusing to listen on [::]:$port" --listen="[::]:$port"

step "certificate files that cannot be used stop the start-up, naming the file"
expect_start_error 1 "cannot read --tls_cert file $certs/missing.pem" \
  --listen=127.0.0.1:$port --tls_cert="$certs/missing.pem" --tls_key="$certs/server.key"
expect_start_error 1 "--tls_cert file $certs/garbage.pem holds no PEM certificate" \
  --listen=127.0.0.1:$port --tls_cert="$certs/garbage.pem" --tls_key="$certs/server.key"
expect_start_error 1 "--tls_key file $certs/client.key is not the private key of --tls_cert file" \
  --listen=127.0.0.1:$port --tls_cert="$certs/server.pem" --tls_key="$certs/client.key"
expect_start_error 1 "cannot read --tls_client_ca file $certs/missing-ca.pem" \
  --listen=127.0.0.1:$port "${tls[@]}" --tls_client_ca="$certs/missing-ca.pem"
expect_start_error 2 "TLS needs both" --listen=127.0.0.1:$port --tls_cert="$certs/server.pem"

start_tls insecure 0.0.0.0:$port "" --insecure
grep -q "plaintext (--insecure)" "$work/insecure.log" || fail "start-up line: $(cat "$work/insecure.log")"
stop "$server_pid"
server_pid=""

# --- TLS ---------------------------------------------------------------------------------------
port=$(free_port)
addr=127.0.0.1:$port
start_tls tls "0.0.0.0:$port" "--tls_ca=$certs/ca.pem" "${tls[@]}" --http_request_timeout=3s
grep -q "; TLS;" "$work/tls.log" || fail "start-up line: $(cat "$work/tls.log")"

step "TLS: the C++ and the Python client stream the same bytes"
prompt="In the beginning"
"$client_bin" --server="$addr" --tls_ca="$certs/ca.pem" generate --max_tokens=30 "$prompt" \
  >"$work/cxx.out" 2>"$work/cxx.err" || fail "C++ generate over TLS: $(cat "$work/cxx.err")"
pyc --server="$addr" --tls_ca="$certs/ca.pem" generate --max_tokens=30 --prompt="$prompt" \
  >"$work/py.out" 2>"$work/py.err" || fail "Python generate over TLS: $(cat "$work/py.err")"
[ -s "$work/cxx.out" ] || fail "the C++ client printed nothing"
cmp "$work/cxx.out" "$work/py.out" || fail "streamed bytes differ (C++ vs Python)"
grep -q "finish=length.*generated_tokens=30" "$work/py.err" || fail "Python finish: $(cat "$work/py.err")"
echo "  $(wc -c <"$work/cxx.out") bytes each: $(tr '\n' ' ' <"$work/cxx.out" | head -c 60)..."

step "TLS: --tls_server_name, the host name in the certificate, the environment mirrors"
[ "$("$client_bin" --server="$addr" --tls_ca="$certs/ca.pem" --tls_server_name=attnserve.test \
  health)" = SERVING ] || fail "C++ --tls_server_name=attnserve.test"
pyc --server="$addr" --tls_ca="$certs/ca.pem" --tls_server_name=attnserve.test \
  generate --max_tokens=3 --prompt=x >/dev/null 2>"$work/py.err" ||
  fail "Python --tls_server_name=attnserve.test: $(cat "$work/py.err")"
[ "$("$client_bin" --server="localhost:$port" --tls_ca="$certs/ca.pem" health)" = SERVING ] ||
  fail "C++ client at localhost:$port"
[ "$(ATTNSERVE_TLS_CA="$certs/ca.pem" ATTNSERVE_TLS_SERVER_NAME=attnserve.test \
  "$client_bin" --server="$addr" health)" = SERVING ] || fail "C++ client with ATTNSERVE_TLS_CA"
ATTNSERVE_TLS_CA="$certs/ca.pem" pyc --server="$addr" generate --max_tokens=3 --prompt=x \
  >/dev/null 2>"$work/py.err" || fail "Python client with ATTNSERVE_TLS_CA: $(cat "$work/py.err")"

step "TLS: clients that must not get through fail cleanly"
expect_unreachable "plaintext C++ client" --server="$addr"
grep -qF "a TLS server? pass --tls" "$work/err" || fail "no hint at --tls: $(cat "$work/err")"
expect_unreachable "C++ client without the CA (system roots)" --server="$addr" --tls
grep -qi "certificate verify failed" "$work/err" || fail "not a verification failure: $(cat "$work/err")"
expect_unreachable "C++ client expecting another name" --server="$addr" --tls_ca="$certs/ca.pem" \
  --tls_server_name=other.test
rc=0
"$client_bin" --server="$addr" --tls_ca="$certs/missing.pem" health >/dev/null 2>"$work/err" || rc=$?
[ "$rc" -eq 1 ] && grep -qF "cannot read --tls_ca file $certs/missing.pem" "$work/err" ||
  fail "C++ client, missing --tls_ca file: exit $rc, $(cat "$work/err")"
for args in "" "--tls" "--tls_ca=$certs/ca.pem --tls_server_name=other.test"; do
  rc=0
  # shellcheck disable=SC2086
  pyc --server="$addr" --connect_timeout=2 $args generate --prompt=x >/dev/null \
    2>"$work/py.err" || rc=$?
  [ "$rc" -eq 3 ] && grep -q "no connection" "$work/py.err" ||
    fail "Python client ${args:-(plaintext)}: exit $rc, $(cat "$work/py.err")"
  echo "  Python client ${args:-(plaintext)}: exit 3"
done
rc=0
pyc --server="$addr" --tls_ca="$certs/missing.pem" generate --prompt=x >/dev/null 2>"$work/py.err" ||
  rc=$?
[ "$rc" -eq 1 ] && grep -qF "cannot read --tls_ca file $certs/missing.pem" "$work/py.err" ||
  fail "Python client, missing --tls_ca file: exit $rc, $(cat "$work/py.err")"
[ "$("$client_bin" --server="$addr" --tls_ca="$certs/ca.pem" health)" = SERVING ] ||
  fail "the TLS server is no longer SERVING"

step "TLS: the HTTP API is HTTPS only, on the same certificate (curl)"
https=https://127.0.0.1:$http_port
curl -sf --cacert "$certs/ca.pem" "$https/v1/models" >"$work/models.json" ||
  fail "GET /v1/models over HTTPS: curl exit $?"
grep -q '"object":"list"' "$work/models.json" || fail "models over HTTPS: $(cat "$work/models.json")"
curl -sfN --cacert "$certs/ca.pem" "$https/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"messages":[{"role":"user","content":"In the beginning"}],"max_tokens":5,"stream":true}' \
  >"$work/chat.sse" || fail "a streamed chat over HTTPS: curl exit $?"
tail -n 2 "$work/chat.sse" | grep -qx 'data: \[DONE\]' || fail "the HTTPS stream: $(cat "$work/chat.sse")"
rc=0
curl -s --max-time 10 "http://127.0.0.1:$http_port/health" >/dev/null 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "plain HTTP was answered on the HTTPS port"
rc=0
curl -s --max-time 10 "$https/health" >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 60 ] || fail "HTTPS without the CA: curl exit $rc (60: the certificate not verified)"
echo "  /v1/models and a streamed chat over HTTPS; plain HTTP (curl exit != 0) and an unknown CA (60) refused"
step "TLS: 80 connections that never finish their handshake, from one and from 80 addresses"
"$py" "$repo/tests/e2e/http_hostile.py" "$http_port" 3 slow --tls_ca="$certs/ca.pem" ||
  fail "slow clients on the HTTPS port"
stop "$server_pid"
server_pid=""

# --- mutual TLS --------------------------------------------------------------------------------
port=$(free_port)
addr=127.0.0.1:$port
mine=(--tls_ca="$certs/ca.pem" --tls_cert="$certs/client.pem" --tls_key="$certs/client.key")
start_tls mtls "$addr" "${mine[*]}" "${tls[@]}" --tls_client_ca="$certs/ca.pem"
grep -q "mutual TLS" "$work/mtls.log" || fail "start-up line: $(cat "$work/mtls.log")"

step "mutual TLS: no client certificate, or one from another CA, is refused"
expect_unreachable "C++ client without a certificate" --server="$addr" --tls_ca="$certs/ca.pem"
expect_unreachable "C++ client with another CA's certificate" --server="$addr" \
  --tls_ca="$certs/ca.pem" --tls_cert="$certs/rogue.pem" --tls_key="$certs/rogue.key"
for args in "--tls_ca=$certs/ca.pem" \
  "--tls_ca=$certs/ca.pem --tls_cert=$certs/rogue.pem --tls_key=$certs/rogue.key"; do
  rc=0
  # shellcheck disable=SC2086
  pyc --server="$addr" --connect_timeout=2 $args generate --prompt=x >/dev/null \
    2>"$work/py.err" || rc=$?
  [ "$rc" -ne 0 ] || fail "Python client $args got through mutual TLS"
  grep -q "no connection\|UNAVAILABLE" "$work/py.err" || fail "Python client $args: $(cat "$work/py.err")"
  echo "  Python client $args: exit $rc"
done

step "mutual TLS: with the CA's client certificate both clients generate the same bytes"
"$client_bin" --server="$addr" "${mine[@]}" generate --max_tokens=20 "$prompt" \
  >"$work/cxx.out" 2>"$work/cxx.err" || fail "C++ generate over mTLS: $(cat "$work/cxx.err")"
pyc --server="$addr" "${mine[@]}" generate --max_tokens=20 --prompt="$prompt" \
  >"$work/py.out" 2>"$work/py.err" || fail "Python generate over mTLS: $(cat "$work/py.err")"
[ -s "$work/cxx.out" ] && cmp "$work/cxx.out" "$work/py.out" ||
  fail "mTLS: streamed bytes differ or are empty"
[ "$(ATTNSERVE_TLS_CA="$certs/ca.pem" ATTNSERVE_TLS_CLIENT_CERT="$certs/client.pem" \
  ATTNSERVE_TLS_CLIENT_KEY="$certs/client.key" "$client_bin" --server="$addr" health)" = SERVING ] ||
  fail "C++ client with the client certificate from ATTNSERVE_TLS_CLIENT_CERT/KEY"

step "mutual TLS on HTTP: the CA's client certificate gets through, none or another's does not"
https=https://127.0.0.1:$http_port
curl -sf --cacert "$certs/ca.pem" --cert "$certs/client.pem" --key "$certs/client.key" \
  "$https/health" >/dev/null || fail "HTTPS with the client certificate: curl exit $?"
for who in none rogue; do
  rc=0
  if [ "$who" = none ]; then
    curl -s --max-time 10 --cacert "$certs/ca.pem" "$https/health" >/dev/null 2>&1 || rc=$?
  else
    curl -s --max-time 10 --cacert "$certs/ca.pem" --cert "$certs/rogue.pem" --key "$certs/rogue.key" \
      "$https/health" >/dev/null 2>&1 || rc=$?
  fi
  [ "$rc" -ne 0 ] || fail "HTTPS with client certificate '$who' got through mutual TLS"
  echo "  HTTPS, client certificate $who: curl exit $rc"
done
echo "tls_test: all checks passed"
