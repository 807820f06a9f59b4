#!/usr/bin/env bash
# --kv_cache_type end to end: two real servers on the shipped softmax model (a KV cache),
# one on the default (f16) and one with --kv_cache_type=f32. The start-up line and
# DescribeModel name the type; DescribeModel's state bytes per session and a session's
# own bytes are half at f16; the first turn of a prompt gives the same greedy text on both
# (the rounding of cached rows moves logits by far less than this model's greedy
# margins over a short reply); an f16 session exported and imported into its own server
# continues exactly; and a snapshot moves between the two types (widened exactly into
# f32, rounded into f16), then continues.
# Usage: kv_cache_type_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
test_name=kv_cache_type
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/session_lib.sh"
a_pid="" b_pid=""
trap 'stop "$a_pid"; stop "$b_pid"; rm -rf "$work"' EXIT
logs="f16 f32"

models_dir=$(cd "$(dirname "$0")/../../deploy/models" && pwd)
model=kjv-softmax
a_addr=127.0.0.1:$(free_port)
b_addr=127.0.0.1:$(free_port)
start_named f16 "$a_addr" "127.0.0.1:$(free_port)" --model_dirs="$models_dir/$model"
a_pid=$started_pid
start_named f32 "$b_addr" "127.0.0.1:$(free_port)" --model_dirs="$models_dir/$model" \
  --kv_cache_type=f32
b_pid=$started_pid
grep -q "$model (softmax.*f16 KV cache" "$work/f16.log" ||
  fail "the default server's start-up line does not say 'f16 KV cache': $(head -c 600 "$work/f16.log")"
grep -q "$model (softmax.*f32 KV cache" "$work/f32.log" ||
  fail "the --kv_cache_type=f32 server's start-up line does not say 'f32 KV cache'"

describe() { cli "$1" models "$model" 2>&1 || fail "models $model on $1 failed"; }
grep -Eq '^kv cache: +f16$' <<<"$(describe "$a_addr")" || fail "DescribeModel on the default server: $(describe "$a_addr")"
grep -Eq '^kv cache: +f32$' <<<"$(describe "$b_addr")" || fail "DescribeModel on the f32 server: $(describe "$b_addr")"
half=$(sed -n 's/^state\/session @1k: *.*(\([0-9]*\) bytes)$/\1/p' <<<"$(describe "$a_addr")")
full=$(sed -n 's/^state\/session @1k: *.*(\([0-9]*\) bytes)$/\1/p' <<<"$(describe "$b_addr")")
[ -n "$full" ] && [ $((2 * half)) = "$full" ] || fail "state per session at 1k: f16 $half bytes, f32 $full"
step "state per session at 1k tokens: f16 $half bytes, f32 $full bytes"

sid_a=$(new_session "$a_addr")
sid_b=$(new_session "$b_addr")
turn "$a_addr" "$sid_a" a1 "In the beginning"
turn "$b_addr" "$sid_b" b1 "In the beginning"
same_output "a first turn on f16 and on f32" a1 b1
bytes_a=$(session_field "$a_addr" "$sid_a" state_bytes)
bytes_b=$(session_field "$b_addr" "$sid_b" state_bytes)
[ -n "$bytes_b" ] && [ $((2 * bytes_a)) = "$bytes_b" ] || fail "sessions hold $bytes_a (f16) and $bytes_b (f32) bytes"
step "a session after one turn holds $bytes_a bytes at f16, $bytes_b at f32"

step "an f16 session exported and imported into its own server continues exactly"
cli "$a_addr" sessions export "$sid_a" "$work/f16.snap" 2>"$work/export.err" ||
  fail "export failed: $(cat "$work/export.err")"
copy=$(cli "$a_addr" sessions import "$work/f16.snap" 2>"$work/import.err") ||
  fail "import failed: $(cat "$work/import.err")"
max_tokens=48 turn "$a_addr" "$sid_a" original ", and the earth"
max_tokens=48 turn "$a_addr" "$copy" imported ", and the earth"
same_output "the imported f16 session" original imported

step "snapshots move between KV types: f16 into the f32 server, f32 into the f16 server"
cli "$b_addr" sessions export "$sid_b" "$work/f32.snap" 2>"$work/export_b.err" ||
  fail "export on the f32 server failed: $(cat "$work/export_b.err")"
[ "$(stat -c %s "$work/f32.snap")" -gt "$(stat -c %s "$work/f16.snap")" ] ||
  fail "the f32 snapshot ($(stat -c %s "$work/f32.snap") bytes) is not larger than the f16 one ($(stat -c %s "$work/f16.snap"))"
into32=$(cli "$b_addr" sessions import "$work/f16.snap" 2>"$work/into32.err") ||
  fail "importing the f16 snapshot into the f32 server failed: $(cat "$work/into32.err")"
into16=$(cli "$a_addr" sessions import "$work/f32.snap" 2>"$work/into16.err") ||
  fail "importing the f32 snapshot into the f16 server failed: $(cat "$work/into16.err")"
turn "$b_addr" "$into32" widened ", and the earth"
turn "$a_addr" "$into16" narrowed ", and the earth"
[ "$(session_field "$b_addr" "$into32" position)" = "$(session_field "$a_addr" "$into16" position)" ] ||
  fail "the moved sessions stand at different positions"

step "--kv_cache_type=q8_0 on a model whose head dims are not whole q8_0 blocks is refused at start-up"
set +e
"$server_bin" --listen=127.0.0.1:0 --http_listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --model_dirs="$models_dir/$model" --kv_cache_type=q8_0 >"$work/q8.log" 2>&1 &
q8_pid=$!
wait_exit "$q8_pid" 30
set -e
[ "$exit_status" != 0 ] || fail "a q8_0 server started on $model (head dim 16)"
grep -q "not multiples of 32: use --kv_cache_type=f16" "$work/q8.log" ||
  fail "the q8_0 refusal does not name the remedy: $(head -c 600 "$work/q8.log")"
echo "$test_name: PASS"
