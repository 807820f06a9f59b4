#!/usr/bin/env bash
# Crash end to end: --persist=each_turn on a dir: store; two completed turns, then a turn
# in flight when the server is SIGKILLed (held open by its reader, held_turn.py, however
# fast the engine is). A new server process on the same store has
# the session at its position after turn 2 (the turn in flight is lost, nothing else), and
# a greedy continuation equals the uninterrupted reference's turn 3. For a fixed-state
# module, a KV cache and a Mamba-2/attention hybrid.
# Usage: session_crash_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
test_name=session_crash
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/session_lib.sh"
ref_pid="" srv_pid=""
declare -A long_pid=()
metrics_addr=127.0.0.1:$(free_port)
cleanup() {
  for p in "${long_pid[@]}"; do stop "$p"; done
  stop "$srv_pid"
  stop "$ref_pid"
  rm -rf "$work"
}
trap cleanup EXIT
logs="crash.1 crash.2"

models_dir=$(cd "$(dirname "$0")/../../deploy/models" && pwd)
# And a hybrid (make_hybrid_gguf.py's granitehybrid file: Mamba-2 conv and SSM states
# beside grouped-query KV caches).
hybrid=granitehybrid-f32
"$py" "$(dirname "$0")/../gguf/make_hybrid_gguf.py" "$work/gguf" "$hybrid" >/dev/null ||
  fail "make_hybrid_gguf.py $hybrid"
model_flags=(--model_dirs="$models_dir/kjv-taylor2,$models_dir/kjv-softmax,$work/gguf/$hybrid.gguf"
  --max_generated_tokens=50000)
models="kjv-taylor2 kjv-softmax $hybrid"
max_tokens=24
p1="In the beginning God created the heaven"
p2=" And the earth was without form"
p3=" And God said"

ref_addr=127.0.0.1:$(free_port)
start_named ref "$ref_addr" "127.0.0.1:$(free_port)" "${model_flags[@]}"
ref_pid=$started_pid
step "reference: three uninterrupted turns"
for m in $models; do
  r=$(new_session "$ref_addr" --model="$m")
  turn "$ref_addr" "$r" "ref.$m.1" "$p1"
  turn "$ref_addr" "$r" "ref.$m.2" "$p2"
  turn "$ref_addr" "$r" "ref.$m.3" "$p3"
done

store=$work/store
addr=127.0.0.1:$(free_port)
start_named crash.1 "$addr" "$metrics_addr" "${model_flags[@]}" \
  --session_store="dir:$store" --persist=each_turn
srv_pid=$started_pid

declare -A sid=()
for m in $models; do
  step "[$m] two turns, saved after each"
  sid[$m]=$(new_session "$addr" --model="$m")
  turn "$addr" "${sid[$m]}" "$m.1" "$p1"
  turn "$addr" "${sid[$m]}" "$m.2" "$p2"
  same_output "[$m] turn 2" "$m.2" "ref.$m.2"
  [ -e "$store/${sid[$m]}.snap" ] ||
    fail "[$m] no file for session ${sid[$m]} in the store after a completed turn: $(ls "$store")"
done

step "a held turn in flight on every session, then SIGKILL"
for m in $models; do
  max_tokens=50000 held_turn "$addr" "$m.long" " And it was so" --session="${sid[$m]}" --ignore_eos
  long_pid[$m]=$held_pid
done
wait_paused "$metrics_addr" "$(wc -w <<<"$models")"
kill -KILL "$srv_pid"
wait_exit "$srv_pid" 10
srv_pid=""
[ "$exit_status" -eq 137 ] || fail "the SIGKILLed server exited with $exit_status, expected 137"
for m in $models; do
  release "$m.long"
  wait_exit "${long_pid[$m]}" 30
  unset "long_pid[$m]"
  [ "$exit_status" -ne 0 ] || fail "[$m] the turn in flight at SIGKILL reported success: $(cat "$work/$m.long.err")"
  step "[$m] the client of the killed turn exited $exit_status: $(tr '\n' ' ' <"$work/$m.long.err")"
done

start_named crash.2 "$addr" "127.0.0.1:$(free_port)" "${model_flags[@]}" \
  --session_store="dir:$store" --persist=each_turn
srv_pid=$started_pid
for m in $models; do
  step "[$m] after the crash: the position after turn 2, and turn 3 as the reference"
  want=$(finish_field "$m.2" position)
  got=$(session_field "$addr" "${sid[$m]}" position)
  [ "$got" = "$want" ] || fail "[$m] session ${sid[$m]} is at position $got after the crash, expected $want (after turn 2)"
  turn "$addr" "${sid[$m]}" "$m.3" "$p3"
  same_output "[$m] turn 3 after the crash" "$m.3" "ref.$m.3"
done

step "SIGTERM: clean exit"
kill -TERM "$srv_pid"
wait_exit "$srv_pid" 20
srv_pid=""
[ "$exit_status" -eq 0 ] || fail "server exited with $exit_status after SIGTERM"
echo "$test_name: all checks passed"
