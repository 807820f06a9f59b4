#!/usr/bin/env bash
# --state_bf16 end to end: two real servers on the same shipped models, one with fp32
# states and one with bf16 states. DescribeModel's state bytes per session and the
# break-even context halve for the fixed-state models and stay for the KV-cache one; a
# session on each holds what DescribeModel says; a bf16 session's snapshot is exact
# (export, import into the same server, the same greedy continuation) and another
# server's snapshot is refused by fingerprint in both directions.
# Usage: state_bf16_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
test_name=state_bf16
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/session_lib.sh"
a_pid="" b_pid=""
trap 'stop "$a_pid"; stop "$b_pid"; rm -rf "$work"' EXIT
logs="fp32 bf16"

models_dir=$(cd "$(dirname "$0")/../../deploy/models" && pwd)
served="$models_dir/kjv-taylor2-decay,$models_dir/kjv-linear,$models_dir/kjv-softmax"
a_addr=127.0.0.1:$(free_port)
b_addr=127.0.0.1:$(free_port)
start_named fp32 "$a_addr" "127.0.0.1:$(free_port)" --model_dirs="$served"
a_pid=$started_pid
start_named bf16 "$b_addr" "127.0.0.1:$(free_port)" --model_dirs="$served" --state_bf16
b_pid=$started_pid
grep -q "kjv-taylor2-decay (taylor.*bf16 states" "$work/bf16.log" ||
  fail "the bf16 server's start-up line does not say 'bf16 states'"
grep -q "kjv-softmax (softmax.*bf16 states" "$work/bf16.log" &&
  fail "the softmax model is listed with bf16 states"

# describe_field ADDR MODEL FIELD: state bytes at 1k (the number in brackets) or the
# break-even context (its first number; 0 when it has none) from 'models MODEL'.
describe_field() {
  local out
  out=$(cli "$1" models "$2" 2>&1) || fail "models $2 on $1 failed: $out"
  case $3 in
    state_1k) sed -n 's/^state\/session @1k: *.*(\([0-9]*\) bytes)$/\1/p' <<<"$out" ;;
    break_even) sed -n 's/^break-even context: *\([0-9,]*\).*/\1/p' <<<"$out" | tr -d , | grep . || echo 0 ;;
    *) fail "describe_field: unknown field $3" ;;
  esac
}

for model in kjv-taylor2-decay kjv-linear kjv-softmax; do
  full=$(describe_field "$a_addr" "$model" state_1k)
  half=$(describe_field "$b_addr" "$model" state_1k)
  [ -n "$full" ] && [ "$full" -gt 0 ] || fail "$model: no state bytes in DescribeModel on the fp32 server"
  step "$model: state per session at 1k tokens, fp32 $full bytes, --state_bf16 $half bytes"
  sid_a=$(new_session "$a_addr" --model="$model")
  sid_b=$(new_session "$b_addr" --model="$model")
  turn "$a_addr" "$sid_a" "$model.a" "In the beginning"
  turn "$b_addr" "$sid_b" "$model.b" "In the beginning"
  bytes_a=$(session_field "$a_addr" "$sid_a" state_bytes)
  bytes_b=$(session_field "$b_addr" "$sid_b" state_bytes)
  if [ "$model" = kjv-softmax ]; then
    [ "$half" = "$full" ] || fail "$model (KV cache) should ignore --state_bf16: $full vs $half bytes"
    [ "$bytes_b" = "$bytes_a" ] || fail "$model sessions hold $bytes_a and $bytes_b bytes"
    continue
  fi
  [ $((2 * half)) = "$full" ] || fail "$model: --state_bf16 reports $half bytes, fp32 $full"
  [ "$bytes_a" = "$full" ] && [ "$bytes_b" = "$half" ] ||
    fail "$model: sessions hold $bytes_a (fp32) and $bytes_b (bf16) bytes; DescribeModel says $full and $half"
  be_a=$(describe_field "$a_addr" "$model" break_even)
  be_b=$(describe_field "$b_addr" "$model" break_even)
  [ "$be_b" -lt "$be_a" ] || fail "$model: break-even context $be_a (fp32), $be_b (bf16)"
  step "$model: sessions hold $bytes_a and $bytes_b bytes; break-even context $be_a and $be_b tokens"
done

step "a bf16 session exported and imported into its own server continues exactly"
model=kjv-taylor2-decay
sid=$(new_session "$b_addr" --model="$model")
turn "$b_addr" "$sid" first "And God said"
cli "$b_addr" sessions export "$sid" "$work/bf16.snap" 2>"$work/export.err" ||
  fail "export failed: $(cat "$work/export.err")"
copy=$(cli "$b_addr" sessions import "$work/bf16.snap" 2>"$work/import.err") ||
  fail "import failed: $(cat "$work/import.err")"
max_tokens=64 turn "$b_addr" "$sid" original ", Let there be"
max_tokens=64 turn "$b_addr" "$copy" imported ", Let there be"
same_output "the imported bf16 session" original imported

step "snapshots do not cross between fp32 and bf16 states (fingerprints differ)"
sid_a=$(new_session "$a_addr" --model="$model")
turn "$a_addr" "$sid_a" a_first "And God said"
cli "$a_addr" sessions export "$sid_a" "$work/fp32.snap" 2>"$work/export_a.err" ||
  fail "export on the fp32 server failed: $(cat "$work/export_a.err")"
expect_failure bf16_into_fp32 FAILED_PRECONDITION "$model" -- cli "$a_addr" sessions import "$work/bf16.snap"
expect_failure fp32_into_bf16 FAILED_PRECONDITION "$model" -- cli "$b_addr" sessions import "$work/fp32.snap"
echo "$test_name: PASS"
