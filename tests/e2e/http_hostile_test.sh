#!/usr/bin/env bash
# Hostile HTTP clients (tests/e2e/http_hostile.py) against the real server's
# OpenAI-compatible front: bodies nested 100,000 deep, 60,000 empty messages, fields the
# server would ignore, and slow clients from one and from 80 loopback addresses. Every
# request gets its precise status, /health keeps answering, and the server stays up.
# Usage: http_hostile_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
test_name=http_hostile_test
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
trap 'stop "$server_pid"; rm -rf "$work"' EXIT

request_timeout=4
http_port=$(free_port)
start_server 127.0.0.1:$(free_port) 127.0.0.1:$(free_port) \
  --http_listen=127.0.0.1:$http_port --http_request_timeout=${request_timeout}s
step "hostile HTTP clients on port $http_port"
"$py" "$repo/tests/e2e/http_hostile.py" "$http_port" "$request_timeout" || fail "hostile HTTP clients"
kill -0 "$server_pid" || fail "the server died"

step "PASS"
