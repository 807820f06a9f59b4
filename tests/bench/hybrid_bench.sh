#!/usr/bin/env bash
# The hybrid benchmark (tests/bench/README.md, "Hybrid models"), on a granitehybrid file at
# a realistic shape (make_hybrid_gguf.py --bench: d 768, 12 layers, grouped-query attention
# at layers 3, 7 and 11, Mamba-2 on the other 9, SwiGLU 1536, 158M parameters, GPT-2's
# 50,257-token vocabulary, random weights, Q8_0; written once into BUILD/hybrid_bench):
#
#  1. Time to first token of each turn of a --turns-turn chat (user messages of 40-60
#     tokens, answers of --answer greedy tokens, max_tokens fixed so every turn is alike),
#     sent to one attnserve_server on loopback (--threads=1) the way a stateless client
#     sends it (the whole history every turn, /v1/chat/completions, streamed) and as a
#     conversation (/v1/conversations, /v1/responses with `conversation`), beside
#     llama.cpp (node-llama-cpp's prebuilt CPU build, one thread) prefilling the same
#     whole history on a cleared sequence every turn, and llama.cpp keeping its sequence
#     and evaluating only the new tokens (an upper bound for it; labelled so).
#     tests/bench/hybrid_bench.mjs drives all four from one node process, interleaved
#     turn by turn (the order rotates each turn); --rounds chats, each with its own first
#     message (no round reuses another's states); the medians over rounds per turn.
#  2. State bytes per session at 1k, 8k and 32k tokens from /v1/models
#     (state_bytes_by_mixer: the Mamba-2 layers' fixed state, the attention layers' fp32
#     KV caches; kv_cache_bytes_per_token: the same shape with every layer full
#     attention), and llama.cpp's F16 KV cache beside them for reference.
#  3. The issue's targets next to the figures: turn 20's first token within 1.2x of turn
#     2's in attnserve; at least 10x faster than llama.cpp's turn 20 when it re-prefills.
# Prints markdown tables. Asserts nothing (the machine is shared: read the ratios, which
# are measured side by side).
#
# Usage: tests/bench/hybrid_bench.sh BUILD_DIR [--turns=20] [--rounds=3] [--answer=32]
#        [--engines=chat,conversation,llama_fresh,llama_reuse]
set -euo pipefail
build=${1:?usage: hybrid_bench.sh BUILD_DIR}
shift
turns=20 rounds=3 answer=32 engines=chat,conversation,llama_fresh,llama_reuse
for arg in "$@"; do
  case $arg in
    --turns=*) turns=${arg#*=} ;;
    --rounds=*) rounds=${arg#*=} ;;
    --answer=*) answer=${arg#*=} ;;
    --engines=*) engines=${arg#*=} ;;
    *) echo "hybrid_bench: unknown argument $arg" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/hybrid_bench.XXXXXX)
test_name=hybrid_bench
# py, free_port, stop, start_server (server_pid, $work/server.log) from the e2e tests.
server_bin=$build/server/attnserve_server client_bin=$build/client/attnserve_client
source "$here/../e2e/lib.sh"
source "$here/../node/node.sh"  # Node 20 or later first on PATH
cleanup() { stop "$server_pid"; rm -rf "$work"; }
trap cleanup EXIT
[ -d "$here/../gguf/node_modules/node-llama-cpp" ] ||
  { echo "hybrid_bench: tests/gguf/node_modules has no node-llama-cpp (deploy/install.sh installs it)" >&2; exit 1; }

name=granitehybrid-bench-q8_0
"$py" "$here/../gguf/make_hybrid_gguf.py" --bench "$build/hybrid_bench" "$name" >&2
file=$build/hybrid_bench/$name.gguf

addr=127.0.0.1:$(free_port) http=127.0.0.1:$(free_port)
start_server "$addr" "127.0.0.1:$(free_port)" --http_listen="$http" --model_dirs="$file" \
  --threads=1 --checkpoint_memory_bytes=2GiB --prefix_cache_bytes=2GiB \
  --tenant_prefix_bytes=2GiB --tenant_response_bytes=2GiB --memory_budget=4GiB >&2

started="$(date -u +%FT%TZ); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "hybrid_bench: $turns turns x $rounds rounds, $answer-token answers ($engines)" >&2
node "$here/hybrid_bench.mjs" "http://$http" "$name" "$file" "$turns" "$rounds" "$answer" 1 "$engines" \
  >"$work/turns.jsonl"
cp "$work/turns.jsonl" "$build/hybrid_bench/turns.jsonl"  # the raw rows of the last run
ended="$(date -u +%FT%TZ); load average $(cut -d' ' -f1-3 /proc/loadavg)"

"$py" - "$work/turns.jsonl" "$turns" "$rounds" "$answer" "$started" "$ended" <<'PY'
import json, statistics, sys
path, turns, rounds, answer, started, ended = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    sys.argv[4], sys.argv[5], sys.argv[6]
rows = [json.loads(line) for line in open(path)]
model = next(r["model"] for r in rows if "model" in r)
rows = [r for r in rows if "engine" in r]
engines = [e for e in ("chat", "conversation", "llama_fresh", "llama_reuse")
           if any(r["engine"] == e for r in rows)]
by = {}
for r in rows:
    by.setdefault((r["engine"], r["turn"]), []).append(r)
med = lambda e, t, k="ttft_ms": statistics.median(r[k] for r in by[(e, t)]) if (e, t) in by else None
LABEL = {"chat": "attnserve chat (whole history)", "conversation": "attnserve conversation",
         "llama_fresh": "llama.cpp re-prefill", "llama_reuse": "llama.cpp own sequence (upper bound)"}

print(f"\nStarted {started}; ended {ended}.\n")
print(f"### Time to first token per turn ({model['id']}, {model['weight_types']}; "
      f"{answer}-token greedy answers; medians of {rounds} rounds, ms; "
      "prompt tokens / cached tokens of the last round)\n")
print("| turn | history tokens | " + " | ".join(f"{LABEL[e]} ms" for e in engines) +
      " | chat cached | conversation cached | llama.cpp re-prefill / chat |")
print("|---|---|" + "---|" * len(engines) + "---|---|---|")
for t in range(1, turns + 1):
    last = {e: by[(e, t)][-1] for e in engines if (e, t) in by}
    hist = next(iter(last.values()))["prompt_tokens"]
    cells = [f"{med(e, t):.0f}" if (e, t) in by else "" for e in engines]
    cc = last.get("chat", {}).get("cached_tokens", "")
    vc = last.get("conversation", {}).get("cached_tokens", "")
    ratio = (f"{med('llama_fresh', t) / med('chat', t):.1f}x"
             if ("llama_fresh", t) in by and ("chat", t) in by else "")
    print(f"| {t} | {hist} | " + " | ".join(cells) + f" | {cc} | {vc} | {ratio} |")
misses = sum(1 for r in rows if r.get("miss"))
if "llama_reuse" in engines:
    print(f"\nllama.cpp own sequence: {misses} turns where the re-tokenized history did not extend "
          "what the sequence held (started over)")
short = [r for r in rows if "output_tokens" in r and r["output_tokens"] != int(answer)]
if short:
    print(f"\n{len(short)} attnserve answers were not {answer} tokens (end of sequence)")

print("\n### Targets (issue 31)\n")
print("| target | measured | per round |")
print("|---|---|---|")
last_turn, second = turns, 2
for e in ("chat", "conversation"):
    if (e, last_turn) in by and (e, second) in by:
        ratios = [a["ttft_ms"] / b["ttft_ms"] for a, b in zip(by[(e, last_turn)], by[(e, second)])]
        print(f"| {LABEL[e]}: turn {last_turn} TTFT within 1.2x of turn {second}'s | "
              f"{med(e, last_turn):.0f} / {med(e, second):.0f} ms = "
              f"**{med(e, last_turn) / med(e, second):.2f}x** | "
              + ", ".join(f"{x:.2f}x" for x in ratios) + " |")
# One turn's TTFT is at the mercy of the shared machine: the same comparison on the
# median of the first three turns after the first against the last three's.
early, late = range(2, min(5, turns + 1)), range(max(turns - 2, 2), turns + 1)
for e in ("chat", "conversation"):
    if all((e, t) in by for t in list(early) + list(late)) and turns >= 6:
        a = statistics.median(r["ttft_ms"] for t in late for r in by[(e, t)])
        b = statistics.median(r["ttft_ms"] for t in early for r in by[(e, t)])
        print(f"| (steadier) {LABEL[e]}: turns {late[0]}-{late[-1]} against turns {early[0]}-{early[-1]}, "
              f"median of every round's | {a:.0f} / {b:.0f} ms = **{a / b:.2f}x** | |")
for e in ("chat", "conversation"):
    if (e, last_turn) in by and ("llama_fresh", last_turn) in by:
        ratios = [a["ttft_ms"] / b["ttft_ms"] for a, b in zip(by[("llama_fresh", last_turn)], by[(e, last_turn)])]
        print(f"| {LABEL[e]}: turn {last_turn} at least 10x faster than llama.cpp's re-prefill | "
              f"{med('llama_fresh', last_turn):.0f} / {med(e, last_turn):.0f} ms = "
              f"**{med('llama_fresh', last_turn) / med(e, last_turn):.1f}x** | "
              + ", ".join(f"{x:.1f}x" for x in ratios) + " |")
if ("llama_reuse", last_turn) in by and ("chat", last_turn) in by:
    print(f"| (no target) llama.cpp keeping its own sequence, turn {last_turn}, against attnserve chat | "
          f"{med('llama_reuse', last_turn):.0f} / {med('chat', last_turn):.0f} ms = "
          f"{med('llama_reuse', last_turn) / med('chat', last_turn):.2f}x | |")

# State bytes: each mixer kind's bytes grow linearly in tokens (fixed for Mamba-2).
mix = {m["mixer"]: m for m in model["state_bytes_by_mixer"]}
def kind_bytes(m, n):
    per_token = (m["bytes_at_32k"] - m["bytes_at_1k"]) / (32768 - 1024)
    return m["bytes_at_1k"] + per_token * (n - 1024)
MiB = 1 << 20
print("\n### State bytes per session (MiB; attnserve keeps KV caches in fp32)\n")
kinds = sorted(mix)
print("| tokens | " + " | ".join(f"{k} ({mix[k]['layers']} layers)" for k in kinds) +
      " | hybrid, attnserve (fp32) | hybrid, llama.cpp (F16 KV, F32 recurrent) | "
      "every layer full attention, fp32 | every layer full attention, llama.cpp F16 | "
      "full attention / hybrid (fp32) |")
print("|---|" + "---|" * len(kinds) + "---|---|---|---|---|")
for n in (1024, 8192, 32768):
    per = {k: kind_bytes(mix[k], n) for k in kinds}
    hybrid = sum(per.values())
    llama_hybrid = sum(v / 2 if k == "attention" else v for k, v in per.items())
    full = model["kv_cache_bytes_per_token"] * n
    print(f"| {n // 1024}k | " + " | ".join(f"{per[k] / MiB:.1f}" for k in kinds) +
          f" | {hybrid / MiB:.1f} | {llama_hybrid / MiB:.1f} | {full / MiB:.1f} | {full / 2 / MiB:.1f} | "
          f"{full / hybrid:.1f}x |")
print(f"\nbreak_even_context (/v1/models): {model['break_even_context']} tokens; "
      f"kv_cache_bytes_per_token of the all-attention shape: {model['kv_cache_bytes_per_token']}")
PY
