#!/usr/bin/env bash
# The Redis session store going away and coming back, with a real redis-server:
# sessions in memory keep working (with --persist=none, and with --persist=each_turn,
# whose failed save is logged); loading a session that is not in memory answers
# UNAVAILABLE naming the store (not NOT_FOUND), as does admitting a session that needs a
# spill; closing while the store is down never resurrects stale state; when redis-server
# restarts on the same port the servers recover without a restart.
# Usage: session_store_down_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
test_name=session_store_down
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/session_lib.sh"
ref_pid="" long_pid="" s0_pid="" s1_pid="" s2_pid="" redis_pid=""
trap 'stop "$long_pid"; stop "$s0_pid"; stop "$s1_pid"; stop "$s2_pid"; stop "$ref_pid"; stop "$redis_pid"; rm -rf "$work"' EXIT
logs="none each_turn redis"

max_tokens=16
p=("" "In the beginning" " And God said" " Let there be light" " And it was so")
ref_addr=127.0.0.1:$(free_port)
start_named ref "$ref_addr" "127.0.0.1:$(free_port)" --max_generated_tokens=12000
ref_pid=$started_pid
# The turn Redis stops under: held open by its reader (held_turn.py) until Redis is down,
# so it finishes, and its save fails, with Redis down however fast the engine is.
long_tokens=12000
r=$(new_session "$ref_addr")
for t in 1 2 3 4; do turn "$ref_addr" "$r" "ref.$t" "${p[t]}"; done
r=$(new_session "$ref_addr")
turn "$ref_addr" "$r" ref.long.1 "${p[1]}"
turn "$ref_addr" "$r" ref.long "${p[2]}" --max_tokens=$long_tokens --ignore_eos
turn "$ref_addr" "$r" ref.long.3 "${p[3]}"
turn "$ref_addr" "$r" ref.long.4 "${p[4]}"

# Redis keeps its data across the restart below (append-only file, fsync always).
redis_port=$(free_port)
redis_flags=(--appendonly yes --appendfsync always)
start_redis "$redis_port" "${redis_flags[@]}"
store=redis://127.0.0.1:$redis_port

step "a session saved by a drained server (so it is in Redis only)"
s0_addr=127.0.0.1:$(free_port)
start_named drained "$s0_addr" "127.0.0.1:$(free_port)" --session_store="$store"
s0_pid=$started_pid
away=$(new_session "$s0_addr")
turn "$s0_addr" "$away" away.1 "${p[1]}"
kill -TERM "$s0_pid"
wait_exit "$s0_pid" 20
s0_pid=""
[ "$exit_status" -eq 0 ] || logs=drained fail "drained server exited with $exit_status"

s1_addr=127.0.0.1:$(free_port)
start_named none "$s1_addr" "127.0.0.1:$(free_port)" --session_store="$store"
s1_pid=$started_pid
s2_addr=127.0.0.1:$(free_port)
s2_metrics=$(free_port)
start_named each_turn "$s2_addr" "127.0.0.1:$s2_metrics" --session_store="$store" --persist=each_turn \
  --max_generated_tokens=$long_tokens
s2_pid=$started_pid

step "sessions in memory, one turn each (Redis up)"
a=$(new_session "$s1_addr")  # persist=none
c=$(new_session "$s1_addr")  # persist=none, closed while Redis is down
b=$(new_session "$s2_addr")  # persist=each_turn, a turn in flight when Redis stops
d=$(new_session "$s2_addr")  # persist=each_turn, saved and idle when Redis stops
turn "$s1_addr" "$a" a.1 "${p[1]}"
turn "$s1_addr" "$c" c.1 "${p[1]}"
turn "$s1_addr" "$c" c.2 "${p[2]}"
turn "$s2_addr" "$b" b.1 "${p[1]}"
turn "$s2_addr" "$d" d.1 "${p[1]}"
for s in b d; do
  [ "$(redis-cli -p "$redis_port" exists "attnserve:session:${!s}")" = 1 ] ||
    fail "--persist=each_turn: no attnserve:session:${!s} in Redis after a completed turn"
done

step "a held turn on the each_turn server; redis-server stops while it is in flight"
max_tokens=$long_tokens held_turn "$s2_addr" b.2 "${p[2]}" --session="$b" --ignore_eos
long_pid=$held_pid
wait_paused "127.0.0.1:$s2_metrics" 1
stop "$redis_pid"
redis_pid=""
redis-cli -p "$redis_port" ping >/dev/null 2>&1 && fail "redis still answers after being stopped"
release b.2
wait_exit "$long_pid" 60
long_pid=""
[ "$exit_status" -eq 0 ] || fail "the turn running when Redis stopped failed (exit $exit_status): $(cat "$work/b.2.err")"
same_output "each_turn: the turn running when Redis stopped" b.2 ref.long
grep "$b" "$work/each_turn.log" | grep -q "not saved.*redis://127.0.0.1:$redis_port" ||
  logs=each_turn fail "the each_turn server did not log that it could not save $b after its turn, naming redis"
errors=$(metric "$s2_metrics" attnserve_store_errors_total)
[ "$errors" -ge 1 ] || fail "attnserve_store_errors_total is $errors after a failed save"

step "with Redis down, sessions in memory keep working"
turn "$s1_addr" "$a" a.2 "${p[2]}"
same_output "persist=none: a turn with Redis down" a.2 ref.2
turn "$s1_addr" "$a" a.3 "${p[3]}"
same_output "persist=none: another turn with Redis down" a.3 ref.3
# b's state is newer than its stored copy, so the server still holds its lease.
turn "$s2_addr" "$b" b.3 "${p[3]}"
same_output "each_turn: the next turn with Redis down" b.3 ref.long.3
# d's stored copy is current, so its lease was given up after the save: its turn runs
# without one while the store is unreachable (and is saved once Redis is back).
turn "$s2_addr" "$d" d.2 "${p[2]}"
same_output "each_turn: a turn on a saved, idle session with Redis down" d.2 ref.2
grep "$d" "$work/each_turn.log" | grep -q "not saved.*redis://127.0.0.1:$redis_port" ||
  logs=each_turn fail "the each_turn server did not log that it could not save $d, naming redis"

random_id=0123456789abcdef0123456789abcdef
# The client retries UNAVAILABLE (client/retry.h) within its deadline: a 1 s deadline
# keeps each expected refusal to about a second.
quick=--timeout=1
down="redis://127.0.0.1:$redis_port"
step "with Redis down, what needs the store answers UNAVAILABLE naming it (not NOT_FOUND)"
expect_failure get_random UNAVAILABLE "$down" -- cli "$s1_addr" $quick sessions get "$random_id"
expect_failure get_away UNAVAILABLE "$down" -- cli "$s1_addr" $quick sessions get "$away"
expect_failure turn_away UNAVAILABLE "$down" -- \
  cli "$s1_addr" $quick generate --session="$away" --max_tokens=4 "x"
expect_failure export_away UNAVAILABLE "$down" -- cli "$s1_addr" $quick sessions export "$away" "$work/away.snap"
expect_failure fork_away UNAVAILABLE "$down" -- cli "$s1_addr" $quick sessions fork "$away"
expect_failure create UNAVAILABLE "$down" -- cli "$s1_addr" $quick sessions create
step "closing a session while Redis is down"
close_rc=0
cli "$s1_addr" $quick sessions close "$c" >"$work/close.out" 2>"$work/close.err" || close_rc=$?
step "close answered (exit $close_rc): $(cat "$work/close.out" "$work/close.err")"

step "redis-server restarts on the same port: no server restart needed"
start_redis "$redis_port" "${redis_flags[@]}"
ok=""
for _ in $(seq 1 300); do
  cli "$s1_addr" sessions get "$away" >/dev/null 2>&1 && { ok=1; break; }
  sleep 0.1
done
[ -n "$ok" ] || fail "a load still fails 30 s after Redis came back: $(cli "$s1_addr" sessions get "$away" 2>&1)"
[ "$(session_field "$s1_addr" "$away" position)" = "$(finish_field away.1 position)" ] ||
  fail "the drained session loaded at position $(session_field "$s1_addr" "$away" position), expected $(finish_field away.1 position)"
turn "$s1_addr" "$away" away.2 "${p[2]}"
same_output "the drained session's turn after Redis came back" away.2 ref.2
expect_failure get_random_back NOT_FOUND "$random_id" -- cli "$s1_addr" sessions get "$random_id"
cli "$s1_addr" sessions create >/dev/null 2>"$work/create_back.err" ||
  fail "create still fails after Redis came back: $(cat "$work/create_back.err")"
turn "$s1_addr" "$a" a.4 "${p[4]}"
same_output "persist=none: the turn after Redis came back" a.4 ref.4

step "the session closed while Redis was down does not come back with stale state"
if cli "$s1_addr" sessions get "$c" >"$work/c.get" 2>&1; then
  got=$(sed -n 's/^position: *\([0-9]*\) tokens$/\1/p' "$work/c.get")
  [ "$close_rc" -ne 0 ] || fail "session $c was closed (exit 0) while Redis was down, but it is back at position $got"
  [ "$got" = "$(finish_field c.2 position)" ] ||
    fail "close of $c answered '$(cat "$work/close.err")' while Redis was down; after Redis came back the session is back at position $got, stale: it was at $(finish_field c.2 position) when closed"
else
  grep -q NOT_FOUND "$work/c.get" || fail "sessions get $c after Redis came back: $(cat "$work/c.get")"
fi

step "the each_turn server saves again"
turn "$s2_addr" "$b" b.4 "${p[4]}"
same_output "each_turn: the turn after Redis came back" b.4 ref.long.4
# The stored snapshot (SNAPSHOT.md: position i64 at offset 56, pending token i32 at 64,
# -1 for none) is the state after that turn; the client's position counts the pending
# token too.
stored=$(redis-cli -p "$redis_port" getrange "attnserve:session:$b" 56 67 | head -c 12 |
  "$py" -c 'import struct,sys; p,t=struct.unpack("<qi",sys.stdin.buffer.read()); print(p+(t!=-1))')
[ "$stored" = "$(finish_field b.4 position)" ] ||
  fail "the snapshot of $b in Redis is at position '$stored', expected $(finish_field b.4 position) (after its last turn)"
turn "$s2_addr" "$d" d.3 "${p[3]}"
same_output "each_turn: the turn after Redis came back" d.3 ref.3

for s in s1 s2; do
  pid_var=${s}_pid
  kill -TERM "${!pid_var}"
  wait_exit "${!pid_var}" 20
  [ "$exit_status" -eq 0 ] || fail "server $s exited with $exit_status after SIGTERM"
  printf -v "$pid_var" %s ""
done
echo "$test_name: all checks passed"
