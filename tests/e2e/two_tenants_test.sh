#!/usr/bin/env bash
# Two tenants, one server, on the memory store and on a real Redis: tenant B's 1,000
# chat completions and 100 conversations (each with a stored response) leave every
# stored response and conversation of tenant A usable, and B meets its quota
# (--tenant_max_responses, set small here) as 429 with a message. Prints the figures.
# The small softmax model keeps states (KV caches of a few dozen tokens) small and fast.
# Usage: two_tenants_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
test_name=two_tenants_test
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
redis_pid=""
trap 'stop "$server_pid"; stop "$redis_pid"; rm -rf "$work"' EXIT

key_a=tenant-a-e2e-0123456789abcdef
key_b=tenant-b-e2e-0123456789abcdef
printf '%s a\n%s b\n' "$key_a" "$key_b" >"$work/keys.txt"
chmod 600 "$work/keys.txt"
flags=(--api_keys_file="$work/keys.txt" --model_dirs="$repo/deploy/models/kjv-softmax"
       --tenant_max_responses=20 --prefix_cache_bytes=4MiB)

run() {  # run LABEL [SERVER FLAGS...]: one server, the two tenants, then stop it
  local label=$1
  shift
  local addr=127.0.0.1:$(free_port) http=127.0.0.1:$(free_port)
  start_server "$addr" 127.0.0.1:$(free_port) "${flags[@]}" --http_listen="$http" "$@"
  "$py" "$(dirname "$0")/two_tenants.py" "http://$http" "$key_a" "$key_b" 1000 100 \
    "$label" || fail "$label: the two-tenant run"
  stop "$server_pid"
  server_pid=""
}

step "memory store"
run memory
redis_port=$(free_port)
start_redis "$redis_port"
step "redis store"
run redis --session_store="redis://127.0.0.1:$redis_port"
step "PASS"
