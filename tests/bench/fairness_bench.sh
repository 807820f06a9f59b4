#!/usr/bin/env bash
# Engine fairness on loopback: the inter-token latency of one decoding session while a
# burst of long prompts arrives, with the engine's per-step prefill budget off (every
# prefilling turn runs a chunk each step, as before the budget existed) and on (the
# default), the two servers' rounds interleaved. Real attnserve_server and
# attnserve_client, started and stopped here on free ports. Prints a markdown table
# (client-side ITL of the decoding session: medians over rounds of each round's p50 /
# p99 / max); asserts nothing.
#
# Usage: tests/bench/fairness_bench.sh BUILD_DIR [--rounds=3] [--prompts=100]
#        [--prompt_bytes=2000] [--budget=256] [--model_dir=deploy/models/kjv-taylor2]
# (tests/bench/run.sh fairness [BUILD_DIR] builds the binaries first and runs this.)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
command_line="tests/bench/fairness_bench.sh $*"
build=${1:?usage: fairness_bench.sh BUILD_DIR [--flag=value ...]}
shift
rounds=3 prompts=100 prompt_bytes=2000 budget=256 model_dir=$repo/deploy/models/kjv-taylor2
decode_tokens=20000
for arg in "$@"; do
  case $arg in
    --rounds=*) rounds=${arg#*=} ;;
    --prompts=*) prompts=${arg#*=} ;;
    --prompt_bytes=*) prompt_bytes=${arg#*=} ;;
    --budget=*) budget=${arg#*=} ;;
    --model_dir=*) model_dir=${arg#*=} ;;
    *) echo "fairness_bench: unknown argument $arg (see the header of $0)" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/fairness_bench.XXXXXX)
# py, server_pid, free_port and stop (SIGTERM, then SIGKILL after 5 s) from the e2e tests.
source "$repo/tests/e2e/lib.sh"
cleanup() { stop "$server_pid"; rm -rf "$work"; }
trap cleanup EXIT
server_bin=$build/server/attnserve_server client_bin=$build/client/attnserve_client
prompt=$("$py" -c "import sys; t='And God said, Let there be light: and there was light. '; n=int(sys.argv[1]); print((t * (n // len(t) + 1))[:n])" "$prompt_bytes")

# round BUDGET: one server with --prefill_tokens_per_step=BUDGET; a decoding session of
# $decode_tokens tokens starts (several seconds of decoding), and 0.3 s later the burst of
# $prompts prompts (one token each); appends both bench JSONs to $work/results.jsonl.
round() {
  local b=$1 addr
  addr=127.0.0.1:$(free_port)
  "$server_bin" --listen="$addr" --http_listen=127.0.0.1:0 --metrics_listen=127.0.0.1:$(free_port) --model_dirs="$model_dir" \
    --prefill_tokens_per_step="$b" --max_sessions=$((prompts + 16)) \
    --max_generated_tokens="$decode_tokens" >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 200); do
    [ "$("$client_bin" --server="$addr" --connect_timeout=0.2 health 2>/dev/null)" = SERVING ] && break
    sleep 0.05
  done
  "$client_bin" --server="$addr" --timeout=300 bench --sessions=1 --turns=1 \
    --max_tokens=$decode_tokens --json >"$work/decode.json" &
  local decode_pid=$!
  sleep 0.3
  "$client_bin" --server="$addr" --timeout=300 bench --sessions="$prompts" --turns=1 \
    --max_tokens=1 --prompt="$prompt" --json >"$work/burst.json"
  wait "$decode_pid"
  echo "{\"budget\":$b,\"decode\":$(cat "$work/decode.json"),\"burst\":$(cat "$work/burst.json")}" \
    >>"$work/results.jsonl"
  kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""
}
: >"$work/results.jsonl"
load=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$rounds"); do
  if (( r % 2 )); then round 0; round "$budget"; else round "$budget"; round 0; fi
done
"$py" - "$work/results.jsonl" "$command_line" "$load" "$prompts" "$prompt_bytes" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print(f"## Inter-token latency of one decoding session while {sys.argv[4]} prompts of "
      f"{sys.argv[5]} bytes arrive\n")
print(f"`{sys.argv[2]}`; load average at the start {sys.argv[3]}. One 20,000-token greedy "
      "turn decodes (client-side ITL between its token messages); 0.3 s after it starts, the "
      "burst: `attnserve_client bench` with one session per prompt, max_tokens=1. Medians "
      "over rounds, the two settings interleaved.\n")
print("| prefill_tokens_per_step | ITL p50 ms | ITL p99 ms | ITL max ms | decode tokens/s | burst TTFT p50 ms | burst TTFT p99 ms | burst wall s |")
print("|---|---|---|---|---|---|---|---|")
for b in sorted({r["budget"] for r in runs}):
    rs = [r for r in runs if r["budget"] == b]
    med = lambda f: statistics.median(f(r) for r in rs)
    name = "0 (no bound: before)" if b == 0 else f"{b} (default)"
    print(f"| {name} | {med(lambda r: r['decode']['itl_ms']['p50']):.2f} | "
          f"{med(lambda r: r['decode']['itl_ms']['p99']):.2f} | "
          f"{med(lambda r: r['decode']['itl_ms']['max']):.1f} | "
          f"{med(lambda r: r['decode']['tokens_per_s']):.0f} | "
          f"{med(lambda r: r['burst']['ttft_ms']['p50']):.0f} | "
          f"{med(lambda r: r['burst']['ttft_ms']['p99']):.0f} | "
          f"{med(lambda r: r['burst']['wall_s']):.2f} |")
PY
