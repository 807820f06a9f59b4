#!/usr/bin/env bash
# Tenants end to end: the real server with --api_keys_file naming two tenants, the C++
# client (--api_key and ATTNSERVE_API_KEY) and the Python client (--api_key). Calls
# without a key or with an unknown one are UNAUTHENTICATED and the key is never echoed;
# health stays open; one tenant's session is NOT_FOUND to the other, with the message an
# id that never existed gets, in every command; sessions list shows only the caller's;
# the owner survives a drain and a second server on the same dir: store, and a replica
# that loads the session from a shared Redis; a per-tenant limit is RESOURCE_EXHAUSTED
# naming it, and the tenant gauges show it; a malformed keys file stops the start naming
# its line; without a keys file the start-up line says the server is one tenant.
# Usage: tenants_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
test_name=tenants_test
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
redis_pid="" replica_pid=""
trap 'stop "$server_pid"; stop "$replica_pid"; stop "$redis_pid"; rm -rf "$work"' EXIT

alice=alice-e2e-0123456789abcdef
bob=bob-e2e-0123456789abcdef
wrong=wrong-e2e-key-never-echoed-0000
cat >"$work/keys.txt" <<EOF
# two tenants; bob may hold two sessions at once
$alice alice
$bob   bob max_sessions=2
EOF
chmod 600 "$work/keys.txt"

addr=127.0.0.1:$(free_port)
as() { local key=$1; shift; ATTNSERVE_API_KEY=$key "$client_bin" --server="$addr" "$@"; }
expect_code() {  # expect_code CODE WHAT COMMAND...: exit 1 and "attnserve: CODE:" on stderr
  local code=$1 what=$2
  shift 2
  if "$@" >"$work/out" 2>"$work/err"; then fail "$what: succeeded; expected $code"; fi
  grep -q "attnserve: $code:" "$work/err" || fail "$what: expected $code, got: $(cat "$work/err")"
  if grep -q -e "$wrong" -e "$alice" -e "$bob" "$work/err"; then
    fail "$what: the message echoes a key: $(cat "$work/err")"
  fi
}

start_server "$addr" 127.0.0.1:$(free_port) --api_keys_file="$work/keys.txt" \
  --session_store="dir:$work/store"
grep -q "2 tenants, 2 API keys from $work/keys.txt" "$work/server.log" ||
  fail "the start-up line does not describe the tenants: $(head -n 3 "$work/server.log")"

step "no key, an unknown key, another scheme: UNAUTHENTICATED; health stays open"
expect_code UNAUTHENTICATED "no key" "$client_bin" --server="$addr" sessions list
expect_code UNAUTHENTICATED "unknown key" "$client_bin" --server="$addr" --api_key="$wrong" \
  generate --max_tokens=3 "hi"
expect_code UNAUTHENTICATED "unknown key (env)" as "$wrong" models
grep -q "authorization" "$work/err" || fail "the message does not say what is missing"
[ "$("$client_bin" --server="$addr" health)" = SERVING ] || fail "health needs a key"

step "alice's session is hers: bob gets NOT_FOUND as for an id that never existed"
sid=$(as "$alice" sessions create) || fail "alice: sessions create"
as "$alice" generate --session="$sid" --max_tokens=5 "Once upon" >/dev/null 2>&1 ||
  fail "alice: generate on her session"
position=$(as "$alice" sessions get "$sid" | grep '^position:') ||
  fail "alice: sessions get $(as "$alice" sessions get "$sid" 2>&1)"
never=0123456789abcdef0123456789abcdef
expect_code NOT_FOUND "never-existing id" as "$bob" sessions get "$never"
want=$(sed "s/$never/$sid/" "$work/err")
for cmd in "sessions get $sid" "sessions close $sid" "sessions fork $sid" \
  "sessions export $sid $work/bob.snap" "generate --session=$sid --max_tokens=3 more"; do
  # shellcheck disable=SC2086  # split the command on purpose
  expect_code NOT_FOUND "bob: $cmd" as "$bob" $cmd
  [ "$(cat "$work/err")" = "$want" ] ||
    fail "bob: $cmd: '$(cat "$work/err")' differs from the never-existing id's '$want'"
done
[ ! -s "$work/bob.snap" ] || fail "bob exported alice's session"
as "$bob" sessions list >"$work/bob.list" || fail "bob: sessions list"
if grep -q "$sid" "$work/bob.list"; then fail "bob's list shows alice's session"; fi
as "$alice" sessions list | grep -q "$sid" || fail "alice's list lacks her session"
[ "$(as "$alice" sessions get "$sid" | grep '^position:')" = "$position" ] ||
  fail "alice's session moved while bob tried it"

step "the Python client: --api_key, the same refusals"
python_stubs "$work/stubs"
pyc() { PYTHONPATH="$work/stubs" "$py" "$repo/client/python/attnserve_client.py" --server="$addr" "$@"; }
expect_code NOT_FOUND "python as bob" pyc --api_key="$bob" generate --session="$sid" \
  --max_tokens=3 --prompt=" a time"
expect_code UNAUTHENTICATED "python without a key" pyc generate --max_tokens=3 --prompt=hi
ATTNSERVE_API_KEY=$alice pyc generate --session="$sid" --max_tokens=3 --prompt=" a time" \
  >/dev/null 2>"$work/err" || fail "python as alice (env): $(cat "$work/err")"

step "the owner survives a drain and a second server on the same store"
stop "$server_pid"
addr=127.0.0.1:$(free_port)
start_server "$addr" 127.0.0.1:$(free_port) --api_keys_file="$work/keys.txt" \
  --session_store="dir:$work/store"
expect_code NOT_FOUND "bob after the restart" as "$bob" sessions get "$sid"
as "$alice" sessions get "$sid" >/dev/null 2>"$work/err" ||
  fail "alice after the restart: $(cat "$work/err")"

step "two replicas sharing Redis: a session made on one keeps its owner on the other"
stop "$server_pid"
redis_port=$(free_port)
start_redis "$redis_port"
shared=(--api_keys_file="$work/keys.txt" --session_store="redis://127.0.0.1:$redis_port"
  --persist=each_turn)
a_addr=127.0.0.1:$(free_port) b_addr=127.0.0.1:$(free_port)
start_named a "$a_addr" 127.0.0.1:$(free_port) "${shared[@]}"
server_pid=$started_pid
start_named b "$b_addr" 127.0.0.1:$(free_port) "${shared[@]}"
replica_pid=$started_pid
on() { local at=$1 key=$2; shift 2; ATTNSERVE_API_KEY=$key "$client_bin" --server="$at" "$@"; }
rid=$(on "$a_addr" "$alice" sessions create) || fail "alice: sessions create on A"
on "$a_addr" "$alice" generate --session="$rid" --max_tokens=4 "In the" >/dev/null 2>&1 ||
  fail "alice: a turn on A"
addr=$b_addr
expect_code NOT_FOUND "bob on B" as "$bob" sessions get "$rid"
[ "$(cat "$work/err")" = "$(sed "s/$sid/$rid/" <<<"$want")" ] ||
  fail "bob on B: '$(cat "$work/err")' differs from the never-existing id's"
on "$b_addr" "$alice" generate --session="$rid" --max_tokens=4 " beginning" >/dev/null \
  2>"$work/err" || fail "alice on B (loaded from Redis): $(cat "$work/err")"
stop "$replica_pid"
stop "$server_pid"
replica_pid="" server_pid=""
stop "$redis_pid"
redis_pid=""

step "bob's limit of two sessions (a memory store: with a durable one his idle sessions"
step "would be spilled to make room): RESOURCE_EXHAUSTED naming it; alice unaffected"
stop "$server_pid"
metrics=127.0.0.1:$(free_port)
start_server "$addr" "$metrics" --api_keys_file="$work/keys.txt"
as "$bob" sessions create >/dev/null || fail "bob: first session"
as "$bob" sessions create >/dev/null || fail "bob: second session"
expect_code RESOURCE_EXHAUSTED "bob's third session" as "$bob" sessions create
grep -q "max_sessions: tenant 'bob'" "$work/err" || fail "the message does not name the limit: $(cat "$work/err")"
as "$alice" sessions create >/dev/null || fail "alice is limited by bob's limit"
step "the tenant gauges say so (housekeeping updates them every 0.5 s)"
"$py" - "$metrics" <<'PY' || fail "attnserve_tenant_sessions does not show bob 2, alice 1"
import sys, time, urllib.request
want = ('attnserve_tenant_sessions{tenant="bob"} 2', 'attnserve_tenant_sessions{tenant="alice"} 1')
for _ in range(300):  # waits for the gauges, 30 s at most
    text = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=10).read().decode()
    if all(w in text.splitlines() for w in want):
        sys.exit(0)
    time.sleep(0.1)
sys.exit(1)
PY

step "a malformed keys file stops the start, naming its line and not its keys"
stop "$server_pid"
printf '%s alice\n%s bob max_sessions=lots\n' "$alice" "$bob" >"$work/bad.txt"
if "$server_bin" --listen=127.0.0.1:$(free_port) --http_listen=127.0.0.1:0 --metrics_listen=127.0.0.1:$(free_port) \
  --api_keys_file="$work/bad.txt" >"$work/bad.log" 2>&1; then
  fail "the server started with a malformed keys file"
fi
grep -q "$work/bad.txt:2: 'max_sessions=lots'" "$work/bad.log" ||
  fail "the error does not name the line: $(cat "$work/bad.log")"
if grep -q -e "$alice" -e "$bob" "$work/bad.log"; then fail "the error echoes a key"; fi

step "without --api_keys_file: one tenant, and the start-up line says so"
start_server "$addr" 127.0.0.1:$(free_port)
grep -q "one tenant, no API keys" "$work/server.log" ||
  fail "the start-up line does not say one tenant: $(head -n 3 "$work/server.log")"
"$client_bin" --server="$addr" sessions list >/dev/null || fail "sessions list without keys"
step "PASS"
