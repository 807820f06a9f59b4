#!/usr/bin/env bash
# The HTTP front against the official `openai` SDK (npm, installed by deploy/install.sh
# into tests/openai/node_modules) and curl, on the real attnserve_server binary with the
# shipped default model: models, chat and completions streamed and not (the same text as
# gRPC Generate), every error class the SDK raises for the condition that should raise it,
# API keys, structured outputs (every constrained answer validated by Ajv; the SDK's
# chat.completions.parse and responses.parse with zod; Vercel's AI SDK's Output.object and
# generateObject), a busy session (held by a gRPC turn) refused with 409, a client that goes away
# freeing its session, every stream slot taken (429 + retry-after while /health and
# /v1/models answer), a flood of 200 streams against 2 slots, SSE framing byte for byte,
# the request metrics of HTTP routes, and the Responses API: stored responses continued
# with previous_response_id on either of two replicas sharing a real redis-server (equal
# to a stateless chat that resends the history), forks, streaming events, store:false,
# delete, and tenants; conversations continued, listed, paged and forked on either
# replica (against the same chat oracle), one response at a time in each; a chat client
# resending its history reuses the state an earlier turn kept (cached_tokens), on either
# replica, with the text of a full prefill and of a conversation's turns, and each replica's
# attnserve_prompt_tokens_total grows by only what was not cached.
# Tool calls (tools_check.mjs, tests/vercel/tools_check.mjs; every call's arguments
# validated by Ajv or the tool's zod schema): a loop whose answer after the results reuses
# the call's whole state on the other replica and equals a full prefill, a named function
# through runTools, streamed calls through the SDK's stream helper, Vercel's generateText
# with toolChoice "required" and a named tool; on the default model and a ChatML one.
# The same Responses, conversation and resent-chat checks again on two hybrid models served
# beside the default (make_hybrid_gguf.py --chat: granitehybrid, Mamba-2 and attention
# layers; lfm2, short convolutions and attention; byte vocabularies so a resent answer
# encodes back to its ids), and what /v1/models, DescribeModel and a session report of
# their state by layer kind (hybrid_models_check.py).
# Usage: sdk_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
test_name=openai_sdk
work=$(mktemp -d)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/tests/e2e/lib.sh"
source "$repo/tests/node/node.sh"  # Node 20 or later first on PATH
a_pid="" b_pid="" c_pid="" r1_pid="" r2_pid="" redis_pid="" held_pid="" held_pids=""
trap 'stop "$a_pid"; stop "$b_pid"; stop "$c_pid"; stop "$r1_pid"; stop "$r2_pid"; stop "$redis_pid"; for p in $held_pids; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
logs="a b c r1 r2"

[ -d "$here/node_modules/openai" ] ||
  fail "$here/node_modules/openai is missing: deploy/install.sh installs it (npm ci)"
[ -d "$repo/tests/vercel/node_modules/ai" ] ||
  fail "$repo/tests/vercel/node_modules/ai is missing: deploy/install.sh installs it (npm ci)"
command -v curl >/dev/null || fail "curl is missing: deploy/install.sh installs it"
sdk() { node "$here/sdk_check.mjs" "$@" || fail "sdk_check $1"; }

step "hybrid models (make_hybrid_gguf.py --chat)"
hybrids="granitehybrid-chat-f32 lfm2-chat-f32"
"$py" "$repo/tests/gguf/make_hybrid_gguf.py" --chat "$work/gguf" $hybrids | sed "s/^/  /" ||
  fail "make_hybrid_gguf.py --chat"
# The default model first (the one `model` names below), the hybrids beside it.
models=--model_dirs=$repo/deploy/models/kjv-taylor2-decay
for h in $hybrids; do models+=",$work/gguf/$h.gguf"; done

# prefix_check MODEL: `sdk prefix` on r1 and r2 (a: the fresh server), and each replica's
# attnserve_prompt_tokens_total of MODEL grown by what it printed it prefilled.
prefix_check() {
  local labels="model=\"$1\"" r1_before r2_before r1_now r2_now want_a want_b
  r1_before=$(metric_of "$r1_metrics" attnserve_prompt_tokens_total "$labels")
  r2_before=$(metric_of "$r2_metrics" attnserve_prompt_tokens_total "$labels")
  sdk prefix "http://$r1_http" "$1" "http://$r2_http" "http://$a_http" | tee "$work/prefix.out"
  read -r _ _ want_a _ want_b < <(grep "^prefilled A" "$work/prefix.out") || fail "prefix printed no prefilled line"
  r1_now=$(metric_of "$r1_metrics" attnserve_prompt_tokens_total "$labels")
  r2_now=$(metric_of "$r2_metrics" attnserve_prompt_tokens_total "$labels")
  [ $((r1_now - r1_before)) -eq "$want_a" ] && [ $((r2_now - r2_before)) -eq "$want_b" ] ||
    fail "$1: attnserve_prompt_tokens_total grew by $((r1_now - r1_before)) on r1 and $((r2_now - r2_before)) on r2; the calls prefilled $want_a and $want_b"
  step "$1: attnserve_prompt_tokens_total grew by $want_a on r1 and $want_b on r2: the uncached tokens only"
}

# tools_check MODEL: tool calls through the openai SDK on r1 and r2 (a: the fresh server,
# the full-prefill oracle) and through Vercel's AI SDK on r1.
tools_check() {
  node "$here/tools_check.mjs" "http://$r1_http" "$1" "http://$r2_http" "http://$a_http" ||
    fail "tools_check $1"
  node "$repo/tests/vercel/tools_check.mjs" "http://$r1_http" "$1" || fail "vercel tools_check $1"
}

# A: the default, no keys. B: API keys. C: two stream slots.
a_addr=127.0.0.1:$(free_port) a_http=127.0.0.1:$(free_port) a_metrics=127.0.0.1:$(free_port)
start_named a "$a_addr" "$a_metrics" --http_listen="$a_http" "$models"
a_pid=$started_pid
model=$("$client_bin" --server="$a_addr" models | awk 'NR == 2 { print $1 }')
[ -n "$model" ] || fail "no model listed"

step "gRPC's greedy text for the prompt (what the HTTP completion must equal)"
"$client_bin" --server="$a_addr" generate --temperature=0 --max_tokens=40 "In the beginning" \
  >"$work/grpc.txt" 2>"$work/grpc.err" || fail "gRPC generate: $(cat "$work/grpc.err")"
"$py" - "$work/grpc.txt" <<'PY' || fail "gRPC text"
import sys
p = sys.argv[1]
t = open(p, "rb").read()
# attnserve_client ends its output with a newline when the text does not end with one.
open(p, "wb").write(t[:-1] if t.endswith(b"\n") else t)
PY

step "models, completions and chat, streamed and not"
sdk basic "http://$a_http" "$model" "$work/grpc.txt"
step "errors the SDK raises"
sdk errors "http://$a_http" "$model"

step "structured outputs: Ajv validates every constrained answer; the SDK's parse helpers"
node "$here/structured_check.mjs" ajv "http://$a_http" "$model" || fail "structured_check ajv"
node "$here/structured_check.mjs" sdk "http://$a_http" "$model" || fail "structured_check sdk"
step "structured outputs through Vercel's AI SDK ($(node -p "require('$repo/tests/vercel/node_modules/ai/package.json').version"))"
node "$repo/tests/vercel/vercel_check.mjs" object "http://$a_http" "$model" || fail "vercel_check object"

step "a session busy with a gRPC turn: 409 on HTTP"
busy=$("$client_bin" --server="$a_addr" sessions create) || fail "sessions create"
max_tokens=2000 held_turn "$a_addr" busy "In the beginning" --session="$busy"
held_pids+=" $held_pid"
wait_first_token busy
sdk conflict "http://$a_http" "$busy"
release busy

step "a client that goes away mid-stream frees its session"
freed=$("$client_bin" --server="$a_addr" sessions create) || fail "sessions create"
sdk disconnect "http://$a_http" "$freed"

step "SSE framing, byte for byte (curl)"
request='{"prompt":"In the beginning","max_tokens":12,"temperature":0'
curl -sS --no-buffer -D "$work/sse.head" -o "$work/sse.body" -H 'content-type: application/json' \
  -d "$request"',"stream":true,"stream_options":{"include_usage":true}}' \
  "http://$a_http/v1/completions" || fail "curl stream"
curl -sS -o "$work/plain.body" -H 'content-type: application/json' -d "$request}" \
  "http://$a_http/v1/completions" || fail "curl"
"$py" - "$work/sse.head" "$work/sse.body" "$work/plain.body" <<'PY' || fail "SSE framing"
import json, re, sys
head = open(sys.argv[1], "rb").read().decode("latin-1")
body = open(sys.argv[2], "rb").read()
plain = json.load(open(sys.argv[3]))
def check(cond, what):
    if not cond:
        sys.exit(f"SSE framing: {what}\n--- head\n{head}\n--- body\n{body!r}")
check(head.startswith("HTTP/1.1 200"), "status")
check(re.search(r"(?im)^content-type: text/event-stream", head), "content-type")
check(re.search(r"(?im)^cache-control: no-cache", head), "cache-control")
# Every event is `data: <one line>\n\n`; comments (`: ping`) are allowed between them.
events = body.split(b"\n\n")
check(events[-1] == b"", "the body does not end with a blank line")
events = [e for e in events[:-1] if not e.startswith(b":")]
check(all(e.startswith(b"data: ") and b"\n" not in e for e in events), "an event that is not one data line")
check(events[-1] == b"data: [DONE]", "the last event is not [DONE]")
chunks = [json.loads(e[6:]) for e in events[:-1]]
usage = chunks[-1]
check(usage["choices"] == [] and usage["usage"]["completion_tokens"] == 12, "the usage chunk")
text = "".join(c["choices"][0]["text"] for c in chunks[:-1])
check(text == plain["choices"][0]["text"], f"streamed {text!r} != {plain['choices'][0]['text']!r}")
check(chunks[-2]["choices"][0]["finish_reason"] == "length", "finish_reason")
check(all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2]), "an early finish_reason")
check(usage["usage"] == plain["usage"], f"usage {usage['usage']} != {plain['usage']}")
print(f"SSE framing: {len(chunks) - 1} content events, a usage event, [DONE]; text equals the unstreamed: {text!r}")
PY

step "request metrics of the HTTP routes"
ok=$(metric_of "$a_metrics" attnserve_requests_total '(?=.*method="POST /v1/chat/completions")(?=.*code="200")')
bad=$(metric_of "$a_metrics" attnserve_requests_total '(?=.*method="POST /v1/chat/completions")(?=.*code="400")')
[ "$ok" -gt 0 ] && [ "$bad" -gt 0 ] ||
  fail "attnserve_requests_total for POST /v1/chat/completions: $ok with 200, $bad with 400"
step "metrics: POST /v1/chat/completions $ok x 200, $bad x 400"

step "API keys"
key=$(openssl rand -base64 24) key2=$(openssl rand -base64 24)
printf '%s sdk-tenant\n%s other-tenant\n' "$key" "$key2" >"$work/keys.txt"
b_addr=127.0.0.1:$(free_port) b_http=127.0.0.1:$(free_port)
start_named b "$b_addr" "127.0.0.1:$(free_port)" --http_listen="$b_http" --api_keys_file="$work/keys.txt"
b_pid=$started_pid
sdk auth "http://$b_http" "$key"
step "stored responses belong to their tenant"
sdk responses_tenants "http://$b_http" "$model" "$key" "$key2"
stop "$b_pid"; b_pid=""

step "every stream slot taken: 429 with retry-after; /health and /v1/models answer"
c_addr=127.0.0.1:$(free_port) c_http=127.0.0.1:$(free_port) c_metrics=127.0.0.1:$(free_port)
start_named c "$c_addr" "$c_metrics" --http_listen="$c_http" --http_max_streams=2
c_pid=$started_pid
holders=""
for i in 1 2; do
  "$py" "$here/held_http.py" "$work/slots.release" "$c_http" 2000 >"$work/held$i.out" 2>"$work/held$i.err" &
  holders+=" $!"
done
held_pids+="$holders"
wait_paused "$c_metrics" 2
sdk ratelimit "http://$c_http"
touch "$work/slots.release"
for p in $holders; do wait "$p" || fail "a held stream: $(cat "$work"/held*.err)"; done
for i in 1 2; do
  grep -q "status=200 .* done=yes" "$work/held$i.out" || fail "held stream $i: $(cat "$work/held$i.out")"
done

step "a flood of 200 streams against 2 slots"
sdk flood "http://$c_http" 200
limited=$(metric_of "$c_metrics" attnserve_requests_total '(?=.*method="POST /v1/chat/completions")(?=.*code="429")')
[ "$limited" -gt 0 ] || fail "no 429 counted in attnserve_requests_total"

step "the Responses API on two replicas sharing a redis-server"
redis_port=$(free_port)
start_redis "$redis_port"
store=redis://127.0.0.1:$redis_port
r1_addr=127.0.0.1:$(free_port) r1_http=127.0.0.1:$(free_port) r1_metrics=127.0.0.1:$(free_port)
r2_addr=127.0.0.1:$(free_port) r2_http=127.0.0.1:$(free_port) r2_metrics=127.0.0.1:$(free_port)
start_named r1 "$r1_addr" "$r1_metrics" --http_listen="$r1_http" --session_store="$store" "$models"
r1_pid=$started_pid
start_named r2 "$r2_addr" "$r2_metrics" --http_listen="$r2_http" --session_store="$store" "$models"
r2_pid=$started_pid
sdk responses "http://$r1_http" "$model" "http://$r2_http"
step "conversations on two replicas sharing a redis-server"
sdk conversations "http://$r1_http" "$model" "http://$r2_http"
step "one response at a time in a conversation, on any replica"
conv=$(curl -sf "http://$r1_http/v1/conversations" -d "{}" | node -pe 'JSON.parse(require("fs").readFileSync(0)).id')
"$py" "$here/held_http.py" "$work/conv.release" "$r1_http" 2000 "$conv" >"$work/conv_held.out" 2>"$work/conv_held.err" &
held_pid=$!; held_pids+=" $held_pid"
for _ in $(seq 1200); do grep -q holding "$work/conv_held.err" && break; sleep 0.05; done
grep -q holding "$work/conv_held.err" || fail "the held response did not start: $(cat "$work/conv_held.err")"
sdk conversation_busy "http://$r2_http" "$conv"
touch "$work/conv.release"
wait "$held_pid" || fail "the held response: $(cat "$work/conv_held.err")"
grep -q "status=200 .* done=yes" "$work/conv_held.out" || fail "the held response: $(cat "$work/conv_held.out")"
sdk conversation_busy "http://$r2_http" "$conv" 2
curl -sf -X DELETE "http://$r1_http/v1/conversations/$conv" >/dev/null || fail "delete $conv"
step "a chat client resending its history: the kept state on either replica"
prefix_check "$model"
step "tool calls: a loop across the replicas, a named function, streamed calls (openai SDK), Vercel's AI SDK"
tools_check "$model"

python_stubs "$work/stubs"
for h in $hybrids; do
  step "$h: state by layer kind and break-even in /v1/models, DescribeModel and a session"
  PYTHONPATH="$work/stubs" "$py" "$here/hybrid_models_check.py" "$r1_http" "$r1_addr" "$work/gguf" "$h" ||
    fail "hybrid_models_check $h"
  step "$h: the Responses API on two replicas sharing a redis-server"
  sdk responses "http://$r1_http" "$h" "http://$r2_http"
  step "$h: conversations on two replicas"
  sdk conversations "http://$r1_http" "$h" "http://$r2_http"
  step "$h: a chat client resending its history: the kept state on either replica"
  prefix_check "$h"
  if [ "$h" = granitehybrid-chat-f32 ]; then
    step "$h: tool calls in the ChatML (Hermes) envelope"
    tools_check "$h"
  fi
done
# Nothing but stored responses and kept chat states (and the KV pages they name) is left
# in the store: each turn's own session lives in memory only and is closed once its state
# is recorded. Deleted conversations leave only their tenant's (empty) list. Pages are
# never deleted by id: each must expire by itself.
left=$(redis-cli -p "$redis_port" --scan |
  grep -v -e ':resp_[0-9a-f_]*$' -e ':pfx_[0-9a-f]*$' -e ':convs_[0-9a-f]*$' \
    -e ':page:page_[0-9a-f]*$' -e '^$' || true)
[ -z "$left" ] || fail "keys left in redis besides stored responses, chat states, their pages and conversation lists: $left"
pages=0
for key in $(redis-cli -p "$redis_port" --scan --pattern '*:page:page_*'); do
  ttl=$(redis-cli -p "$redis_port" pttl "$key")
  [ "$ttl" -gt 0 ] || fail "page $key has no expiry (pttl $ttl)"
  pages=$((pages + 1))
done
step "the store holds $pages KV pages, each with an expiry"

stop "$a_pid"; a_pid=""
stop "$c_pid"; c_pid=""
step "PASS"
