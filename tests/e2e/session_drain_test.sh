#!/usr/bin/env bash
# Drain end to end, on a dir: store and on a real Redis: 16 sessions mid-conversation (on a
# fixed-state model, a KV cache and a Mamba-2/attention hybrid) on a server that gets
# SIGTERM; it exits 0 in time, saving them; a new server process on the same store
# continues every one byte-identically to an uninterrupted reference (a memory-only
# server running the same turns). A turn still running at SIGTERM (held open
# by its reader, held_turn.py, until the server reports its drain) ends with
# finish=shutdown at a position the session resumes from; while a turn runs out the grace,
# health is NOT_SERVING and new sessions and turns are UNAVAILABLE.
# Usage: session_drain_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
test_name=session_drain
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/session_lib.sh"
ref_pid="" srv_pid="" redis_pid="" long_pid=""
trap 'stop "$long_pid"; stop "$srv_pid"; stop "$ref_pid"; stop "$redis_pid"; rm -rf "$work"' EXIT

models_dir=$(cd "$(dirname "$0")/../../deploy/models" && pwd)
# A fixed-state module, a KV cache and a hybrid (make_hybrid_gguf.py's granitehybrid file:
# Mamba-2 conv and SSM states beside grouped-query KV caches), in turn over the sessions.
hybrid=granitehybrid-f32
"$py" "$(dirname "$0")/../gguf/make_hybrid_gguf.py" "$work/gguf" "$hybrid" >/dev/null ||
  fail "make_hybrid_gguf.py $hybrid"
model_flags=(--model_dirs="$models_dir/kjv-taylor2,$models_dir/kjv-softmax,$work/gguf/$hybrid.gguf"
  --max_generated_tokens=50000)
model_of() {
  case $(($1 % 3)) in
    0) echo kjv-taylor2 ;;
    1) echo kjv-softmax ;;
    2) echo "$hybrid" ;;
  esac
}
n=16
max_tokens=20
verses=("In the beginning" "And God said" "The LORD is my shepherd" "Blessed are the meek"
  "And it came to pass" "Then answered Jesus" "Hear, O Israel" "For God so loved")
prompt() {  # prompt SESSION TURN
  case $2 in
    1) echo "${verses[$(($1 % 8))]}, $1" ;;
    2) echo " and the ${1}th day" ;;
    3) echo " Amen. And" ;;
  esac
}
# The held turn: its reader reads nothing after the first token until the drain has
# stopped it, so it runs out any grace however fast the engine is (it pauses once the
# buffers between engine and reader are full, far below its max_tokens). On the softmax
# model: a KV cache saved mid-turn.
long_prompt1="Now these are the generations"
long_prompt2=" And they went forth"
long_tokens=50000
# The client retries UNAVAILABLE (client/retry.h) within its deadline: a 1 s deadline
# keeps each expected refusal to about a second.
quick=--timeout=1

ref_addr=127.0.0.1:$(free_port)
start_named ref "$ref_addr" "127.0.0.1:$(free_port)" "${model_flags[@]}"
ref_pid=$started_pid

step "reference: 3 uninterrupted turns on each of $n sessions (memory-only server)"
for i in $(seq 1 $n); do
  r=$(new_session "$ref_addr" --model="$(model_of "$i")")
  for t in 1 2 3; do turn "$ref_addr" "$r" "ref$i.$t" "$(prompt "$i" "$t")"; done
done

# drain STORE TAG GRACE
drain() {
  local store=$1 tag=$2 grace=$3
  local addr metrics_addr i t
  addr=127.0.0.1:$(free_port) metrics_addr=127.0.0.1:$(free_port)
  logs="$tag.1 $tag.2"
  start_named "$tag.1" "$addr" "$metrics_addr" "${model_flags[@]}" \
    --session_store="$store" --shutdown_grace="$grace"
  srv_pid=$started_pid
  step "[$tag] $n sessions, 2 turns each"
  local ids=()
  for i in $(seq 1 $n); do
    ids[i]=$(new_session "$addr" --model="$(model_of "$i")")
    for t in 1 2; do turn "$addr" "${ids[i]}" "$tag.$i.$t" "$(prompt "$i" "$t")"; done
    same_output "[$tag] session $i turn 2 before the drain" "$tag.$i.2" "ref$i.2"
  done

  step "[$tag] a held turn in the background, then SIGTERM (grace $grace)"
  local long
  long=$(new_session "$addr" --model=kjv-softmax)
  turn "$addr" "$long" "$tag.long.1" "$long_prompt1"
  max_tokens=$long_tokens held_turn "$addr" "$tag.long.2" "$long_prompt2" --session="$long" --ignore_eos
  long_pid=$held_pid
  wait_paused "$metrics_addr" 1
  local t0=$SECONDS drains
  drains=$(drain_reports "$tag.1")
  kill -TERM "$srv_pid"

  if [ "$grace" != 0s ]; then
    step "[$tag] during the grace: NOT_SERVING, new sessions and turns UNAVAILABLE"
    local h
    h=$(cli "$addr" health 2>&1) && fail "[$tag] health still SERVING while draining: $h"
    grep -q NOT_SERVING <<<"$h" || fail "[$tag] health while draining said: $h"
    expect_failure "$tag.create_draining" UNAVAILABLE "shutting down" -- cli "$addr" $quick sessions create
    expect_failure "$tag.turn_draining" UNAVAILABLE "shutting down" -- \
      cli "$addr" $quick generate --session="${ids[1]}" --max_tokens=5 "x"
    drain_reports "$tag.1" | grep -qx "$drains" ||
      fail "[$tag] the grace ran out before the checks above were done: raise the grace"
  fi
  wait_drain_report "$tag.1" "$drains"
  release "$tag.long.2"

  wait_exit "$srv_pid" 30
  srv_pid=""
  [ "$exit_status" -eq 0 ] || fail "[$tag] server exited with $exit_status after SIGTERM"
  step "[$tag] server exited 0 after $((SECONDS - t0)) s"
  grep -q "drain: saved $((n + 1)) sessions" "$work/$tag.1.log" ||
    fail "[$tag] the drain did not report saving $((n + 1)) sessions"

  # The client tries to continue a turn stopped by a shutdown on another replica (up to
  # its 10 s retry budget); with no other server it gives up and reports the stop.
  wait_exit "$long_pid" 20
  long_pid=""
  local long_rc=$exit_status
  step "[$tag] the long turn's client (exit $long_rc) printed: $(tr '\n' ' ' <"$work/$tag.long.2.err")"
  [ "$long_rc" -eq 1 ] || fail "[$tag] the stopped turn's client exited $long_rc, expected 1"
  [ "$(finish_field "$tag.long.2" finish)" = shutdown ] && [ "$(held_field "$tag.long.2" end)" = shutdown ] ||
    fail "[$tag] the long turn ended with '$(cat "$work/$tag.long.2.err")', expected finish=shutdown"
  local g pos_long
  g=$(finish_field "$tag.long.2" generated_tokens)
  pos_long=$(finish_field "$tag.long.2" position)
  [ "$g" -ge 1 ] && [ "$g" -lt "$long_tokens" ] || fail "[$tag] the stopped turn generated $g tokens"
  [ "$(wc -c <"$work/$tag.long.2.out")" -ge 1 ] || fail "[$tag] the stopped turn printed nothing"

  start_named "$tag.2" "$addr" "127.0.0.1:$(free_port)" "${model_flags[@]}" --session_store="$store"
  srv_pid=$started_pid
  [ "$(listed_sessions "$addr")" -eq 0 ] || fail "[$tag] the new server has sessions in memory before any use"

  step "[$tag] new server: every session continues as the reference"
  for i in $(seq 1 $n); do
    local p
    p=$(session_field "$addr" "${ids[i]}" position)
    [ "$p" = "$(finish_field "ref$i.2" position)" ] ||
      fail "[$tag] session $i is at position $p after the restart, expected $(finish_field "ref$i.2" position)"
    turn "$addr" "${ids[i]}" "$tag.$i.3" "$(prompt "$i" 3)"
    same_output "[$tag] session $i turn 3 after drain and restart" "$tag.$i.3" "ref$i.3"
  done

  step "[$tag] the stopped session resumes at position $pos_long ($g tokens into its turn)"
  p=$(session_field "$addr" "$long" position)
  [ "$p" = "$pos_long" ] || fail "[$tag] the stopped session is at position $p, its final message said $pos_long"
  turn "$addr" "$long" "$tag.long.3" " Amen. And"
  # Reference: the same turns with the stopped turn's length as max_tokens.
  local r
  r=$(new_session "$ref_addr" --model=kjv-softmax)
  turn "$ref_addr" "$r" "$tag.reflong.1" "$long_prompt1"
  turn "$ref_addr" "$r" "$tag.reflong.2" "$long_prompt2" --max_tokens="$g" --ignore_eos
  cmp -s "$work/$tag.long.2.out" "$work/$tag.reflong.2.out" ||
    fail "[$tag] the stopped turn's $g tokens differ from the reference's: '$(show "$tag.long.2" | tail -c 80)' vs '$(show "$tag.reflong.2" | tail -c 80)'"
  [ "$(finish_field "$tag.reflong.2" position)" = "$pos_long" ] ||
    fail "[$tag] the reference ends that turn at $(finish_field "$tag.reflong.2" position), the server reported $pos_long"
  turn "$ref_addr" "$r" "$tag.reflong.3" " Amen. And"
  same_output "[$tag] the stopped session's next turn" "$tag.long.3" "$tag.reflong.3"

  stop "$srv_pid"
  srv_pid=""
}

drain "dir:$work/store" dir 0s
ls "$work/store" >/dev/null || fail "no store directory"

redis_port=$(free_port)
start_redis "$redis_port"
drain "redis://127.0.0.1:$redis_port" redis 5s
keys=$(redis-cli -p "$redis_port" dbsize)
[ "$keys" -ge $((n + 1)) ] || fail "redis holds $keys keys, expected at least $((n + 1)) sessions"
stop "$redis_pid"
redis_pid=""
echo "$test_name: all checks passed"
