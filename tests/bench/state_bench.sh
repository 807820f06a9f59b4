#!/usr/bin/env bash
# The state benchmark (tests/bench/README.md, "Session state at real sizes"): what a
# 20-turn chat stores, per turn, on two models at real shapes, with the server's DEFAULT
# flags (only the ports, the model file and --session_store are given):
#
#   qwen3    make_qwen3_gguf.py: Qwen3-0.6B's shape (28 layers, d 1024, 16 query heads on
#            8 KV heads of 128, SwiGLU 3072, tied output, Q8_0, 596M parameters) with
#            Qwen3's real 151,669-token vocabulary and chat template, random weights;
#   hybrid   make_hybrid_gguf.py --bench: granitehybrid, d 768, 12 layers, grouped-query
#            attention (12 heads on 4 KV heads of 64) at layers 3, 7 and 11, Mamba-2 on
#            the other 9, SwiGLU 1536, GPT-2's vocabulary, Q8_0, 158M parameters.
#
# Both files are written once into MODELS_DIR and kept. For each model, store (memory;
# dir:, a fresh directory; Redis, a redis-server started here on a free loopback port
# with its default configuration, flushed between runs) and API (chain: /v1/responses
# with previous_response_id; conversation: /v1/conversations), one fresh attnserve_server
# on free loopback ports runs tests/bench/state_bench.mjs: --turns turns, each a user
# message of --words English words, greedy, max_output_tokens --max_output, streamed.
# Prints per turn whether it was served (a 429, or an error event inside a 200 stream,
# is not), tokens, position, first-token time, bytes the store holds and bytes written,
# the server's RSS; then a summary against one final state's own bytes. Asserts nothing.
#
# Usage: tests/bench/state_bench.sh BUILD_DIR [--models=qwen3,hybrid]
#        [--stores=memory,dir,redis] [--apis=chain,conversation] [--turns=20] [--words=150]
#        [--max_output=150] [--models_dir=DIR (default BUILD_DIR/state_bench)]
#        [--out=FILE (the raw JSON lines, kept)] [-- SERVER FLAGS...]
set -euo pipefail
build=${1:?usage: state_bench.sh BUILD_DIR [flags]}
shift
models=qwen3,hybrid stores=memory,dir,redis apis=chain,conversation turns=20 words=150
max_output=150 models_dir=$build/state_bench out=""
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --models=*) models=${1#*=} ;;
    --stores=*) stores=${1#*=} ;;
    --apis=*) apis=${1#*=} ;;
    --turns=*) turns=${1#*=} ;;
    --words=*) words=${1#*=} ;;
    --max_output=*) max_output=${1#*=} ;;
    --models_dir=*) models_dir=${1#*=} ;;
    --out=*) out=${1#*=} ;;
    --) shift; extra=("$@"); break ;;
    *) echo "state_bench: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=$(mktemp -d /tmp/state_bench.XXXXXX)
test_name=state_bench
server_bin=$build/server/attnserve_server client_bin=$build/client/attnserve_client
source "$here/../e2e/lib.sh"   # py, free_port, stop, start_redis
source "$here/../node/node.sh"  # Node 20 or later first on PATH
redis_pid=""
cleanup() { stop "$server_pid"; stop "$redis_pid"; rm -rf "$work"; }
trap cleanup EXIT
[ -x "$server_bin" ] || { echo "state_bench: no $server_bin" >&2; exit 1; }

declare -A file
for m in $(tr ',' ' ' <<<"$models"); do
  case $m in
    qwen3)
      "$py" "$repo/tests/gguf/make_qwen3_gguf.py" "$models_dir" >&2
      file[$m]=$models_dir/qwen3-0.6b-shape-q8_0.gguf ;;
    hybrid)
      "$py" "$repo/tests/gguf/make_hybrid_gguf.py" --bench "$models_dir" granitehybrid-bench-q8_0 >&2
      file[$m]=$models_dir/granitehybrid-bench-q8_0.gguf ;;
    *) echo "state_bench: unknown model $m (qwen3, hybrid)" >&2; exit 2 ;;
  esac
done

redis_port=""
if [[ ",$stores," == *,redis,* ]]; then
  redis_port=$(free_port)
  start_redis "$redis_port" >&2
fi

echo "tests/bench/state_bench.sh $build --models=$models --stores=$stores --apis=$apis" \
  "--turns=$turns --words=$words --max_output=$max_output ${extra[*]:+-- ${extra[*]}};" \
  "$(date -u +%FT%TZ); load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores," \
  "$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo);" \
  "server built $(date -u -r "$server_bin" +%FT%TZ) from" \
  "$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null || echo '?')" \
  "(this repository at $(git -C "$repo" log -1 --format=%h))"

: >"$work/rows.jsonl"
for m in $(tr ',' ' ' <<<"$models"); do
  for s in $(tr ',' ' ' <<<"$stores"); do
    for a in $(tr ',' ' ' <<<"$apis"); do
      store_flag=() store=memory
      case $s in
        memory) ;;
        dir) rm -rf "$work/store"; mkdir -p "$work/store"; store=dir:$work/store
             store_flag=(--session_store="$store") ;;
        redis) redis-cli -p "$redis_port" flushall >/dev/null; store=redis://127.0.0.1:$redis_port
               store_flag=(--session_store="$store") ;;
        *) echo "state_bench: unknown store $s (memory, dir, redis)" >&2; exit 2 ;;
      esac
      http=127.0.0.1:$(free_port) metrics=127.0.0.1:$(free_port)
      step "$m, $s, $a: attnserve_server ${store_flag[*]} ${extra[*]}" >&2
      "$server_bin" --listen="127.0.0.1:$(free_port)" --http_listen="$http" --metrics_listen="$metrics" \
        --model_dirs="${file[$m]}" "${store_flag[@]}" "${extra[@]}" >"$work/server.log" 2>&1 &
      server_pid=$!
      for _ in $(seq 1 600); do
        curl -sf "http://$http/health" >/dev/null 2>&1 && break
        kill -0 "$server_pid" 2>/dev/null || { tail -n 20 "$work/server.log" >&2; fail "server exited"; }
        sleep 0.2
      done
      curl -sf "http://$http/health" >/dev/null || fail "server not healthy after 120 s"
      model=$(curl -sf "http://$http/v1/models" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
      node "$here/state_bench.mjs" --base="http://$http" --model="$model" --api="$a" --pid="$server_pid" \
        --metrics="http://$metrics" --store="$store" --turns="$turns" --words="$words" \
        --max_output="$max_output" |
        "$py" -c 'import json,sys; tag={"bench_model": sys.argv[1], "bench_store": sys.argv[2]}
for line in sys.stdin: print(json.dumps({**json.loads(line), **tag}))' "$m" "$s" >>"$work/rows.jsonl"
      grep -m 3 -i "kv\|bytes per token\|budget" "$work/server.log" | sed "s/^/  server log: /" >&2 || true
      stop "$server_pid"
      server_pid=""
    done
  done
done
[ -n "$out" ] && cp "$work/rows.jsonl" "$out"
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)"
"$py" - "$work/rows.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
MiB = 1 << 20
LABEL = {"qwen3": "Qwen3-0.6B shape (Q8_0, random weights)",
         "hybrid": "granitehybrid 158M (d 768, 3 of 12 layers attention, Q8_0, random weights)"}

def fmt(n):
    return "n/a" if n is None else f"{n:,.0f}"

def state_model(model):
    """Bytes of one session's state at position n, from /v1/models' state_bytes_by_mixer
    (each mixer kind linear in tokens between 1k and 32k): (bytes per token, fixed)."""
    per_token = fixed = 0.0
    for k in model["state_bytes_by_mixer"]:
        slope = (k["bytes_at_32k"] - k["bytes_at_1k"]) / (32768 - 1024)
        per_token += slope
        fixed += k["bytes_at_1k"] - slope * 1024
    return per_token, fixed

groups = {}
for r in rows:
    groups.setdefault((r["bench_model"], r["bench_store"], r.get("api")), []).append(r)
models = {}
for (m, s, a), g in groups.items():
    for r in g:
        if "model" in r:
            models[m] = r["model"]
summary = []
for (m, s, a), g in groups.items():
    if a is None:
        continue
    model = next((r["model"] for r in g if "model" in r), models.get(m))
    per_token, fixed = state_model(model) if model else (None, None)
    start = next(r for r in g if r.get("start"))
    turns = [r for r in g if "turn" in r and r["turn"] > 0]
    print(f"\n### {LABEL.get(m, m)}: {'/v1/responses chain (previous_response_id)' if a == 'chain' else '/v1/conversations'}, store {s}\n")
    if model:
        print(f"Model {model['id']}: state {per_token:,.0f} bytes per token + {fixed:,.0f} fixed "
              f"(/v1/models state_bytes_by_mixer); kv_cache_bytes_per_token (every layer "
              f"attention) {model['kv_cache_bytes_per_token']:,}"
              f"{', kv_cache_type ' + model['kv_cache_type'] if 'kv_cache_type' in model else ''}.\n")
    # The memory store: a gauge of stored bytes, if the server exports one (none did at
    # e307c4e); its name is printed.
    gauges = sorted(k for k in start["metrics"] if k != "error" and not k.endswith("_total") and
                    any(w in k for w in ("checkpoint", "page", "stored", "response", "record")))
    if s == "memory" and gauges:
        print(f"Store holds (memory store): the sum of {', '.join(gauges)}.\n")
        for r in [start] + [r for r in g if "turn" in r and r["turn"] > 0]:
            r["store_bytes"] = sum(r["metrics"].get(k, 0) for k in gauges)
    print("| turn | HTTP | served | input (cached) | output | position | first token ms | turn ms | store holds | "
          "store grew | session snapshots written (metric) | 1.2 x (new tokens x bytes/token + fixed) | written / that | RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    prev_pos, prev_store = 0, start.get("store_bytes")
    prev_written = start["metrics"].get("attnserve_snapshot_bytes_written_total", 0)
    errors = []
    for r in turns:
        u = r.get("usage") or {}
        pos = u.get("total_tokens")
        written = r["metrics"].get("attnserve_snapshot_bytes_written_total", 0) - prev_written
        prev_written += written
        grew = (r["store_bytes"] - prev_store) if r.get("store_bytes") is not None and prev_store is not None else None
        target = 1.2 * ((pos - prev_pos) * per_token + fixed) if pos is not None and per_token is not None else None
        wrote = grew if grew is not None else (written or None)
        ratio = f"{wrote / target:.1f}" if wrote is not None and target else ""
        ttft = f"{r['ttft_ms']:.0f}" if r.get("ttft_ms") is not None else "-"
        cached = (u.get("input_tokens_details") or {}).get("cached_tokens")
        # Without usage (an error event ended the stream): the text deltas streamed.
        output = u.get("output_tokens", f"{r['deltas']} deltas" if r.get("deltas") else "-")
        print(f"| {r['turn']} | {r['status']} | {'yes' if r['served'] else '**no**'} | "
              f"{u.get('input_tokens', '-')} ({cached if cached is not None else '-'}) | {output} | "
              f"{pos if pos is not None else '-'} | {ttft} | {r.get('total_ms', 0):.0f} | {fmt(r.get('store_bytes'))} | {fmt(grew)} | "
              f"{fmt(written)} | {fmt(target)} | {ratio} | {r['rss']['rss'] / MiB:,.0f} |")
        if not r["served"]:
            errors.append((r["turn"], r["status"], r.get("error")))
        if pos is not None:
            prev_pos = pos
        if r.get("store_bytes") is not None:
            prev_store = r["store_bytes"]
    for t, status, e in errors:
        print(f"\nTurn {t} not served: HTTP {status}, {json.dumps(e)}")
    served = [r for r in turns if r["served"]]
    last = served[-1] if served else None
    final_pos = last["usage"]["total_tokens"] if last else 0
    one_state = final_pos * per_token + fixed if per_token is not None else None
    stored = turns[-1].get("store_bytes") if turns else None
    # What whole snapshots of every served turn add up to (each stored response holds
    # the session's whole state at its position).
    whole = sum(r["usage"]["total_tokens"] * per_token + fixed for r in served) if per_token is not None else None
    t2 = next((r for r in served if r["turn"] == 2), None)
    ttft_ratio = (f"{last['ttft_ms'] / t2['ttft_ms']:.2f}x (turn {last['turn']} / turn 2)"
                  if last and t2 and last.get("ttft_ms") and t2.get("ttft_ms") else "n/a")
    first_fail = next((r["turn"] for r in turns if not r["served"]), None)
    summary.append((m, s, a, len(served), len(turns), first_fail, final_pos, stored, one_state, whole,
                    ttft_ratio, max(r["rss"]["hwm"] for r in turns) if turns else None))

print("\n### Summary\n")
print("| model | store | API | turns served | first not served | final position | store holds after the last turn | "
      "one final state (position x bytes/token + fixed) | store / one state | whole state of every served turn, summed | "
      "first token, last served turn / turn 2 | peak RSS MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for m, s, a, n, asked, ff, pos, stored, one, whole, ttft, hwm in summary:
    ratio = f"{stored / one:.2f}" if stored is not None and one else "n/a"
    print(f"| {m} | {s} | {a} | {n} of {asked} | {ff or '-'} | {pos:,} | {fmt(stored)} | {fmt(one)} | {ratio} | "
          f"{fmt(whole)} | {ttft} | {hwm / MiB:,.0f} |")
PY
