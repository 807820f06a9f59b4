#!/usr/bin/env bash
# End-to-end test: the real server binary on free loopback ports, the sample client's
# generate, chat (scripted) and bench, reflection, a real /metrics scrape whose token
# counter must equal what the client received, then SIGTERM and a clean exit.
# Usage: e2e_test.sh SERVER_BINARY CLIENT_BINARY REFLECTION_LIST_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2 reflection_bin=$3
test_name=e2e
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
trap 'stop "$server_pid"; rm -rf "$work"' EXIT

metrics_port=$(free_port)
addr=127.0.0.1:$(free_port)
client() { "$client_bin" --server="$addr" "$@"; }
start_server "$addr" 127.0.0.1:$metrics_port --shutdown_grace=5s

received=0  # generated tokens the client reports having received
usage_tokens() { sed -n 's/.*generated_tokens=\([0-9]*\).*/\1/p' "$1" | awk '{s+=$1} END {print s+0}'; }

step "generate"
client generate --max_tokens=40 --temperature=0.8 --seed=7 "In the beginning" \
  >"$work/gen.out" 2>"$work/gen.err" || fail "generate failed: $(cat "$work/gen.err")"
n=$(usage_tokens "$work/gen.err")
[ "$n" -ge 1 ] && [ "$n" -le 40 ] || fail "generate reported $n tokens, expected 1..40"
[ "$(wc -c <"$work/gen.out")" -ge 1 ] || fail "generate printed nothing"
received=$((received + n))

step "generate is reproducible with a seed"
client generate --max_tokens=40 --temperature=0.8 --seed=7 "In the beginning" \
  >"$work/gen2.out" 2>"$work/gen2.err"
cmp -s "$work/gen.out" "$work/gen2.out" || fail "same seed, different text"
received=$((received + $(usage_tokens "$work/gen2.err")))

step "chat (scripted, 3 turns on one session)"
printf 'first line\nsecond line\nthird line\n' |
  client chat --max_tokens=12 --stats >"$work/chat.out" 2>"$work/chat.err" ||
  fail "chat failed: $(cat "$work/chat.err")"
turns=$(grep -c 'finish=' "$work/chat.err" || true)
[ "$turns" -eq 3 ] || fail "chat ran $turns turns, expected 3: $(cat "$work/chat.err")"
received=$((received + $(usage_tokens "$work/chat.err")))

step "bench (4 sessions x 2 turns)"
client bench --sessions=4 --turns=2 --max_tokens=16 --json >"$work/bench.json" ||
  fail "bench failed"
bench_tokens=$("$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["errors"]==0, d; print(d["generated_tokens"])' "$work/bench.json")
[ "$bench_tokens" -ge 8 ] && [ "$bench_tokens" -le 128 ] ||
  fail "bench generated $bench_tokens tokens, expected 8..128"
received=$((received + bench_tokens))

step "errors reach the client with their status"
if client generate --temperature=-1 "x" 2>"$work/bad.err"; then fail "negative temperature accepted"; fi
grep -q INVALID_ARGUMENT "$work/bad.err" || fail "no INVALID_ARGUMENT: $(cat "$work/bad.err")"

step "sessions and models"
sid=$(client sessions create)
[ ${#sid} -eq 32 ] || fail "session id '$sid' is not 128-bit hex"
client sessions get "$sid" >/dev/null || fail "sessions get"
client sessions close "$sid" >/dev/null || fail "sessions close"
if client sessions get "$sid" 2>/dev/null; then fail "closed session still there"; fi
client models | grep -q kjv-taylor2-decay || fail "models does not list the default model kjv-taylor2-decay"
client models kjv-taylor2-decay | grep -q 'tokenizer: *bytes, 259 tokens, BOS 256, EOS 257' ||
  fail "models does not describe the byte tokenizer: $(client models kjv-taylor2-decay)"
client tokenize "Hi" >"$work/tokenize.out" || fail "tokenize failed"
[ "$(cat "$work/tokenize.out")" = "$(printf 'ID   TEXT\n72   "H"\n105  "i"\n2 tokens (model kjv-taylor2-decay)')" ] ||
  fail "tokenize printed: $(cat "$work/tokenize.out")"

step "reflection lists the services"
"$reflection_bin" "$addr" >"$work/services"
grep -qx attnserve.v1.AttnServe "$work/services" || fail "reflection: $(cat "$work/services")"
grep -qx grpc.health.v1.Health "$work/services" || fail "reflection: $(cat "$work/services")"

step "metrics: generated-token counter equals what the client received ($received)"
scraped=$("$py" - "$metrics_port" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
total = 0.0
for line in text.splitlines():
    if line.startswith("attnserve_generated_tokens_total{"):
        total += float(line.rsplit(" ", 1)[1])
print(int(total))
PY
)
[ "$scraped" -eq "$received" ] || fail "metrics say $scraped generated tokens, the client received $received"

step "SIGTERM: clean exit"
kill -TERM "$server_pid"
rc=0
wait "$server_pid" || rc=$?
server_pid=""
[ "$rc" -eq 0 ] || fail "server exited with $rc after SIGTERM"
grep -q "stopped" "$work/server.log" || fail "server did not report stopping"
echo "e2e: all checks passed"
