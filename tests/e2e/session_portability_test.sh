#!/usr/bin/env bash
# Portable sessions end to end, for every attention module and a hybrid model (Mamba-2
# and attention layers, GGUF): a session exported from server A and imported into server
# B (another process) continues byte-identically, greedy and sampled; forks diverge and
# leave the original exactly as an uninterrupted reference; damaged, foreign-model and
# future-version snapshots are refused with their status and leave B's sessions as they
# were.
# Usage: session_portability_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
test_name=session_portability
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/session_lib.sh"
a_pid="" b_pid="" busy_pid=""
trap 'stop "$busy_pid"; stop "$a_pid"; stop "$b_pid"; rm -rf "$work"' EXIT
logs="a b"

models_dir=$(cd "$(dirname "$0")/../../deploy/models" && pwd)
# module:model, one shipped model per attention module.
pairs="softmax:kjv-softmax softmax_norm:kjv-softmax-norm taylor:kjv-taylor2 taylor_norm:kjv-taylor-norm4 linear:kjv-linear"
served=""
for p in $pairs; do served+="${served:+,}$models_dir/${p#*:}"; done
# And a hybrid (make_hybrid_gguf.py's granitehybrid file: Mamba-2 layers beside
# grouped-query attention layers, random weights): its sessions hold a conv and an SSM
# state per Mamba-2 layer and a KV cache per attention layer.
hybrid=granitehybrid-f32
"$py" "$(dirname "$0")/../gguf/make_hybrid_gguf.py" "$work/gguf" "$hybrid" >/dev/null ||
  fail "make_hybrid_gguf.py $hybrid"
served+=",$work/gguf/$hybrid.gguf"
# A also serves kjv-taylor4 (which B does not) and kjv-softmax-qknorm, served as taylor
# order 2 through a variant (B serves it too).
a_addr=127.0.0.1:$(free_port)
b_addr=127.0.0.1:$(free_port)
start_named a "$a_addr" "127.0.0.1:$(free_port)" \
  --model_dirs="$served,$models_dir/kjv-taylor4,$models_dir/kjv-softmax-qknorm" \
  --max_generated_tokens=50000
a_pid=$started_pid
start_named b "$b_addr" "127.0.0.1:$(free_port)" --model_dirs="$served,$models_dir/kjv-softmax-qknorm"
b_pid=$started_pid

cli "$a_addr" models >"$work/models" || fail "models on A failed"
for p in $pairs; do
  grep -Eq "^${p#*:} +${p%%:*} " "$work/models" ||
    fail "model ${p#*:} is not served as ${p%%:*}: $(cat "$work/models")"
done

max_tokens=24
sampled=(--temperature=1 --seed=4242)

# portable TAG MODEL [CREATE FLAGS...]: the whole round trip for one model.
portable() {
  local tag=$1 model=$2
  shift 2
  step "[$tag] two turns on A, export, import twice on B"
  local sid ref pos
  sid=$(new_session "$a_addr" --model="$model" "$@")
  # shellcheck disable=SC2034  # read as ${!s}
  ref=$(new_session "$a_addr" --model="$model" "$@")  # the same turns, never exported or forked
  for s in sid ref; do
    turn "$a_addr" "${!s}" "$tag.$s.1" "In the beginning God created"
    turn "$a_addr" "${!s}" "$tag.$s.2" " And the earth was"
  done
  same_output "[$tag] two sessions, same turns" "$tag.sid.2" "$tag.ref.2"
  pos=$(session_field "$a_addr" "$sid" position)
  [ "$pos" = "$(finish_field "$tag.sid.2" position)" ] ||
    fail "[$tag] sessions get says position $pos, the turn said $(finish_field "$tag.sid.2" position)"
  cli "$a_addr" sessions export "$sid" "$work/$tag.snap" 2>"$work/$tag.export.err" ||
    fail "[$tag] export failed: $(cat "$work/$tag.export.err")"
  grep -q "exported $sid to .*($(stat -c %s "$work/$tag.snap") bytes)" "$work/$tag.export.err" ||
    fail "[$tag] export summary does not match the file ($(stat -c %s "$work/$tag.snap") bytes): $(cat "$work/$tag.export.err")"
  [ "$(head -c 8 "$work/$tag.snap")" = ATTNSNAP ] || fail "[$tag] the export does not start with ATTNSNAP"
  local b1 b2
  b1=$(cli "$b_addr" sessions import "$work/$tag.snap" 2>"$work/$tag.import.err") ||
    fail "[$tag] import on B failed: $(cat "$work/$tag.import.err")"
  b2=$(cli "$b_addr" sessions import "$work/$tag.snap" 2>"$work/$tag.import2.err") ||
    fail "[$tag] second import on B failed: $(cat "$work/$tag.import2.err")"
  [ ${#b1} -eq 32 ] && [ ${#b2} -eq 32 ] && [ "$b1" != "$b2" ] && [ "$b1" != "$sid" ] ||
    fail "[$tag] imports printed ids '$b1' and '$b2' (original $sid)"
  grep -q "position $pos\$" "$work/$tag.import.err" ||
    fail "[$tag] import should report position $pos: $(cat "$work/$tag.import.err")"
  [ "$(session_field "$b_addr" "$b1" position)" = "$pos" ] || fail "[$tag] B's import is not at position $pos"

  step "[$tag] forks on A diverge"
  local f1 f2 f3
  f1=$(cli "$a_addr" sessions fork "$sid") || fail "[$tag] fork failed"
  f2=$(cli "$a_addr" sessions fork "$sid") || fail "[$tag] fork failed"
  f3=$(cli "$a_addr" sessions fork "$sid") || fail "[$tag] fork failed"
  [ "$(session_field "$a_addr" "$f1" position)" = "$pos" ] || fail "[$tag] fork is not at position $pos"
  turn "$a_addr" "$f1" "$tag.f1" " And God said, Let there be light"
  turn "$a_addr" "$f2" "$tag.f2" " Then Jesus answered and said unto them"
  if cmp -s "$work/$tag.f1.out" "$work/$tag.f2.out"; then
    fail "[$tag] two forks given different prompts generated the same '$(show "$tag.f1")'"
  fi

  step "[$tag] third turn greedy, fourth sampled: A's original = A's reference = B's import"
  for s in sid ref b1; do
    local addr=$a_addr
    [ "$s" = b1 ] && addr=$b_addr
    turn "$addr" "${!s}" "$tag.$s.3" " and the spirit of God moved"
    turn "$addr" "${!s}" "$tag.$s.4" " upon the face of the waters" "${sampled[@]}"
  done
  same_output "[$tag] greedy third turn, original after forks vs uninterrupted reference" "$tag.sid.3" "$tag.ref.3"
  same_output "[$tag] greedy third turn, A's original vs B's import" "$tag.sid.3" "$tag.b1.3"
  same_output "[$tag] sampled fourth turn, original after forks vs uninterrupted reference" "$tag.sid.4" "$tag.ref.4"
  same_output "[$tag] sampled fourth turn, A's original vs B's import" "$tag.sid.4" "$tag.b1.4"

  step "[$tag] sampled third turn: B's second import = a fork on A"
  turn "$b_addr" "$b2" "$tag.b2.3" " and the spirit of God moved" "${sampled[@]}"
  turn "$a_addr" "$f3" "$tag.f3.3" " and the spirit of God moved" "${sampled[@]}"
  same_output "[$tag] sampled third turn, B's import vs A's fork" "$tag.b2.3" "$tag.f3.3"
}

for p in $pairs; do portable "${p%%:*}" "${p#*:}"; done
portable hybrid "$hybrid"
portable variant kjv-softmax-qknorm --attention=taylor --order=2

step "bad snapshots on B: refused, nothing created"
before=$(listed_sessions "$b_addr")
good=$work/softmax.snap
size=$(stat -c %s "$good")
head -c $((size / 2)) "$good" >"$work/truncated.snap"
expect_failure truncated DATA_LOSS "truncated" -- cli "$b_addr" sessions import "$work/truncated.snap"
head -c 40 "$good" >"$work/short.snap"
expect_failure short "DATA_LOSS|INVALID_ARGUMENT" "header" -- cli "$b_addr" sessions import "$work/short.snap"
cp "$good" "$work/flipped.snap"
# One bit of one byte in the layer payload (past the ~300-byte header), CRC untouched.
"$py" - "$work/flipped.snap" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[len(data) // 2] ^= 0x10
open(path, "wb").write(bytes(data))
PY
expect_failure flipped DATA_LOSS "checksum|CRC" -- cli "$b_addr" sessions import "$work/flipped.snap"
cp "$good" "$work/v4.snap"
printf '\x04\x00\x00\x00' | dd of="$work/v4.snap" bs=1 seek=8 count=4 conv=notrunc status=none
expect_failure future_version INVALID_ARGUMENT "version 4.*versions 1 to 3" -- \
  cli "$b_addr" sessions import "$work/v4.snap"
printf 'not a snapshot at all, just some text that is long enough to be a header....................................' \
  >"$work/garbage.snap"
expect_failure garbage INVALID_ARGUMENT "ATTNSNAP" -- cli "$b_addr" sessions import "$work/garbage.snap"

step "a snapshot of a model B does not serve: FAILED_PRECONDITION naming it"
foreign=$(new_session "$a_addr" --model=kjv-taylor4)
turn "$a_addr" "$foreign" foreign.1 "In the beginning"
cli "$a_addr" sessions export "$foreign" "$work/foreign.snap" 2>/dev/null || fail "export of the kjv-taylor4 session failed"
expect_failure foreign FAILED_PRECONDITION "kjv-taylor4" -- cli "$b_addr" sessions import "$work/foreign.snap"
# ...while A, which serves it, takes it back.
cli "$a_addr" sessions import "$work/foreign.snap" >/dev/null 2>"$work/back.err" ||
  fail "A cannot import its own kjv-taylor4 export: $(cat "$work/back.err")"

after=$(listed_sessions "$b_addr")
[ "$after" -eq "$before" ] || fail "B had $before sessions before the bad imports, $after after"

step "TTLs: import --ttl_seconds and fork --ttl_seconds"
t1=$(cli "$b_addr" sessions import --ttl_seconds=123 "$work/taylor.snap" 2>/dev/null) || fail "import --ttl_seconds failed"
cli "$b_addr" sessions get "$t1" | grep -q '^ttl: *123 s' || fail "import --ttl_seconds=123: $(cli "$b_addr" sessions get "$t1")"
t2=$(cli "$b_addr" sessions fork --ttl_seconds=77 "$t1") || fail "fork --ttl_seconds failed"
cli "$b_addr" sessions get "$t2" | grep -q '^ttl: *77 s' || fail "fork --ttl_seconds=77: $(cli "$b_addr" sessions get "$t2")"
t3=$(cli "$b_addr" sessions fork "$t1") || fail "fork failed"
cli "$b_addr" sessions get "$t3" | grep -q '^ttl: *123 s' || fail "a fork should keep the original's ttl (123 s): $(cli "$b_addr" sessions get "$t3")"

step "a session with a turn in flight: export and fork are FAILED_PRECONDITION"
busy=$(new_session "$a_addr")
# Held open by its reader (held_turn.py, never released): in flight until it is killed.
max_tokens=50000 held_turn "$a_addr" busy "In the beginning" --session="$busy" --ignore_eos
busy_pid=$held_pid
for _ in $(seq 1 600); do [ -s "$work/busy.out" ] && break; sleep 0.05; done
[ -s "$work/busy.out" ] || fail "the held turn printed nothing in 30 s: $(cat "$work/busy.err")"
expect_failure export_busy FAILED_PRECONDITION "flight|busy" -- cli "$a_addr" sessions export "$busy" "$work/busy.snap"
[ ! -e "$work/busy.snap" ] || fail "a refused export left $work/busy.snap behind"
expect_failure fork_busy FAILED_PRECONDITION "flight|busy" -- cli "$a_addr" sessions fork "$busy"
kill -0 "$busy_pid" 2>/dev/null || fail "the held turn ended before the checks: $(cat "$work/busy.err")"
kill -TERM "$busy_pid"  # the client goes away: the server cancels the turn
wait_exit "$busy_pid" 10
busy_pid=""
for _ in $(seq 1 300); do
  cli "$a_addr" sessions get "$busy" | grep -q '^busy: *no' && break
  sleep 0.1
done
cli "$a_addr" sessions export "$busy" "$work/busy.snap" 2>/dev/null ||
  fail "export after the cancelled turn failed: $(cli "$a_addr" sessions get "$busy")"

step "export/fork of an unknown session: NOT_FOUND"
expect_failure export_unknown NOT_FOUND "session" -- \
  cli "$a_addr" sessions export 0123456789abcdef0123456789abcdef "$work/none.snap"
[ ! -e "$work/none.snap" ] || fail "a failed export left $work/none.snap behind"
expect_failure fork_unknown NOT_FOUND "session" -- cli "$a_addr" sessions fork 0123456789abcdef0123456789abcdef

step "SIGTERM both: clean exits"
for s in a b; do
  pid_var=${s}_pid
  kill -TERM "${!pid_var}"
  wait_exit "${!pid_var}" 20
  [ "$exit_status" -eq 0 ] || logs=$s fail "server $s exited with $exit_status after SIGTERM"
  printf -v "$pid_var" %s ""
done
echo "$test_name: all checks passed"
