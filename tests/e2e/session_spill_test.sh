#!/usr/bin/env bash
# Spill end to end, on a dir: store. A memory budget that holds about 3 sessions, 10
# sessions used round-robin for 3 rounds: idle sessions are spilled to make room and
# loaded back, and every turn is byte-identical to an unconstrained memory-only server's.
# Then --spill_after=1s: an idle session leaves memory on its own (sessions list,
# attnserve_sessions_spilled_total) and its next turn still continues correctly.
# Usage: session_spill_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
test_name=session_spill
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/session_lib.sh"
ref_pid="" srv_pid=""
trap 'stop "$srv_pid"; stop "$ref_pid"; rm -rf "$work"' EXIT

n=10 rounds=3 max_tokens=20
verses=("In the beginning" "And God said" "The LORD is my shepherd" "Blessed are the meek"
  "And it came to pass" "Then answered Jesus" "Hear, O Israel" "For God so loved"
  "Vanity of vanities" "Let there be light")
prompt() { if [ "$2" -eq 1 ]; then echo "${verses[$(($1 - 1))]}"; else echo " and in round $2,"; fi; }

ref_addr=127.0.0.1:$(free_port)
start_named ref "$ref_addr" "127.0.0.1:$(free_port)"  # the default model, kjv-taylor2-decay
ref_pid=$started_pid

step "reference: $n sessions x $rounds rounds on an unconstrained memory-only server"
ref=()
for i in $(seq 1 $n); do ref[i]=$(new_session "$ref_addr"); done
for r in $(seq 1 $rounds); do
  for i in $(seq 1 $n); do turn "$ref_addr" "${ref[i]}" "ref.$i.$r" "$(prompt "$i" "$r")"; done
done
bytes=$(session_field "$ref_addr" "${ref[1]}" state_bytes)
[ -n "$bytes" ] && [ "$bytes" -gt 0 ] || fail "no state bytes from sessions get: '$bytes'"
budget=$((3 * bytes + bytes / 2))
step "a session holds $bytes bytes of state; budget $budget bytes (3 sessions)"

addr=127.0.0.1:$(free_port)
metrics_port=$(free_port)
logs=spill
start_named spill "$addr" "127.0.0.1:$metrics_port" --memory_budget="$budget" --session_store="dir:$work/store"
srv_pid=$started_pid

step "the same turns under the budget: idle sessions spill and come back"
ids=()
for r in $(seq 1 $rounds); do
  for i in $(seq 1 $n); do
    if [ "$r" -eq 1 ]; then ids[i]=$(new_session "$addr"); fi
    turn "$addr" "${ids[i]}" "spill.$i.$r" "$(prompt "$i" "$r")"
    same_output "round $r, session $i, under a 3-session budget" "spill.$i.$r" "ref.$i.$r"
    in_memory=$(listed_sessions "$addr")
    [ "$in_memory" -le 3 ] || fail "round $r session $i: $in_memory sessions in memory, the budget holds 3"
  done
done
spilled=$(metric "$metrics_port" attnserve_sessions_spilled_total)
step "attnserve_sessions_spilled_total = $spilled"
[ "$spilled" -ge $((n * rounds - 3)) ] ||
  fail "attnserve_sessions_spilled_total is $spilled, expected at least $((n * rounds - 3))"
for i in $(seq 1 $n); do
  [ "$(session_field "$addr" "${ids[i]}" position)" = "$(finish_field "ref.$i.$rounds" position)" ] ||
    fail "session $i is at position $(session_field "$addr" "${ids[i]}" position), expected $(finish_field "ref.$i.$rounds" position)"
done
stop "$srv_pid"
srv_pid=""

step "--spill_after=1s: an idle session leaves memory and comes back"
metrics_port=$(free_port)
logs=idle
start_named idle "$addr" "127.0.0.1:$metrics_port" --session_store="dir:$work/store2" --spill_after=1s
srv_pid=$started_pid
sid=$(new_session "$addr")
turn "$addr" "$sid" idle.1 "$(prompt 1 1)"
same_output "turn 1 before the spill" idle.1 ref.1.1
[ "$(metric "$metrics_port" attnserve_sessions_spilled_total)" -eq 0 ] || fail "spilled before being idle"
t0=$SECONDS
for _ in $(seq 1 300); do
  cli "$addr" sessions list | grep -q "$sid" || break
  sleep 0.1
done
cli "$addr" sessions list | grep -q "$sid" && fail "session $sid still in memory 30 s after its turn"
step "left memory after about $((SECONDS - t0)) s idle"
spilled=$(metric "$metrics_port" attnserve_sessions_spilled_total)
[ "$spilled" -eq 1 ] || fail "attnserve_sessions_spilled_total is $spilled, expected 1"
[ -e "$work/store2/$sid.snap" ] || fail "no file for the spilled session in the store: $(ls "$work/store2")"
turn "$addr" "$sid" idle.2 "$(prompt 1 2)"
same_output "the turn after an idle spill" idle.2 ref.1.2
cli "$addr" sessions list | grep -q "$sid" || fail "the session is not in memory after its turn"

kill -TERM "$srv_pid"
wait_exit "$srv_pid" 20
srv_pid=""
[ "$exit_status" -eq 0 ] || fail "server exited with $exit_status after SIGTERM"
echo "$test_name: all checks passed"
