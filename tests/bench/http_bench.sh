#!/usr/bin/env bash
# The HTTP front's benchmark (tests/bench/README.md, "HTTP API"), on one real
# attnserve_server on loopback:
#
#  1. Time to first token of a streamed chat whose history is 256, 1k, 4k and 16k tokens:
#     "cold", a history nobody kept (all of it prefilled), and "kept", the same history
#     resent with one more exchange after the answer (the state the first call kept is
#     reused; only the new message is prefilled). On trained models (the resent answer
#     must be the text the model generated, and an untrained byte model's bytes are
#     mostly not UTF-8, which JSON cannot carry back): the default kjv-taylor2-decay, and
#     kjv-taylor2 beside kjv-softmax (the same shape, dim 64, 2 layers): for softmax the
#     kept state is a KV cache that grows with the history; for taylor it is the same
#     size at every length. And the same history as a conversation (/v1/conversations):
#     the TTFT of its second response, which continues from the first's stored state.
#  2. Aggregate tokens/s of 1 and 32 concurrent streams at the mid shape (dim 256, 6
#     layers, 8 heads of 32, SwiGLU 768, untrained, attnserve_init_model, taylor order 2):
#     SSE completions (tests/bench/http_bench.mjs) beside gRPC Generate (attnserve_client
#     bench), the same prompt, greedy, ignore_eos, --turns of --max_tokens each, the
#     median of --runs.
# Prints markdown tables. Asserts nothing (the machine is shared: read ratios measured
# side by side in one run).
#
# Usage: tests/bench/http_bench.sh BUILD_DIR [--sizes=256,1024,4096,16384] [--reps=3]
#        [--runs=3] [--turns=2] [--max_tokens=256]
set -euo pipefail
build=${1:?usage: http_bench.sh BUILD_DIR}
shift
sizes=256,1024,4096,16384 reps=3 runs=3 turns=2 max_tokens=256
for arg in "$@"; do
  case $arg in
    --sizes=*) sizes=${arg#*=} ;;
    --reps=*) reps=${arg#*=} ;;
    --runs=*) runs=${arg#*=} ;;
    --turns=*) turns=${arg#*=} ;;
    --max_tokens=*) max_tokens=${arg#*=} ;;
    *) echo "http_bench: unknown argument $arg" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/http_bench.XXXXXX)
test_name=http_bench
# py, free_port, stop, start_server (server_pid, $work/server.log) from the e2e tests.
server_bin=$build/server/attnserve_server client_bin=$build/client/attnserve_client
source "$here/../e2e/lib.sh"
source "$here/../node/node.sh"  # Node 20 or later first on PATH
cleanup() { stop "$server_pid"; rm -rf "$work"; }
trap cleanup EXIT

"$build/server/tools/attnserve_init_model" --out="$work/mid-taylor" --name=mid-taylor \
  --attention=taylor --order=2 --dim=256 --layers=6 --heads=8 --mlp_hidden=768 --seed=1 >/dev/null
models=$here/../../deploy/models
ttft_models="kjv-taylor2-decay kjv-taylor2 kjv-softmax"
largest=$(tr ',' '\n' <<<"$sizes" | sort -n | tail -n 1)
addr=127.0.0.1:$(free_port) http=127.0.0.1:$(free_port)
# A 16k history is over the default --max_prompt_tokens when nothing is kept.
start_server "$addr" "127.0.0.1:$(free_port)" --http_listen="$http" \
  --model_dirs="$work/mid-taylor,$models/kjv-taylor2-decay,$models/kjv-taylor2,$models/kjv-softmax" \
  --max_prompt_tokens=$((largest + 1024)) \
  --max_generated_tokens=$((max_tokens > 2048 ? max_tokens : 2048)) \
  --checkpoint_memory_bytes=2GiB --prefix_cache_bytes=2GiB --tenant_prefix_bytes=2GiB \
  --memory_budget=4GiB

echo "http_bench: time to first token (sizes $sizes, $reps reps each)" >&2
for model in $ttft_models; do
  node "$here/http_bench.mjs" ttft "http://$http" "$model" "$sizes" "$reps" >"$work/ttft_$model.jsonl"
done
echo "http_bench: SSE and gRPC streams ($runs runs)" >&2
for run in $(seq 1 "$runs"); do
  for streams in 1 32; do
    node "$here/http_bench.mjs" sse "http://$http" mid-taylor "$streams" "$turns" "$max_tokens" \
      >"$work/sse_${streams}_$run.json"
    "$client_bin" --server="$addr" --timeout=600 bench --model=mid-taylor --sessions="$streams" \
      --turns="$turns" --max_tokens="$max_tokens" --prompt="Once upon a time" --json \
      >"$work/grpc_${streams}_$run.json"
  done
done

"$py" - "$work" "$runs" "$turns" "$max_tokens" $ttft_models <<'PY'
import json, sys
work, runs, turns, max_tokens = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ttft_models = sys.argv[5:]
print("\n### Time to first token of a resent chat history (byte tokenizer; streamed chat "
      "completion, client-side, median of the reps; 16 tokens generated per call)\n")
print("| model | history tokens | cold: prompt tokens | cold TTFT ms | kept: prompt tokens (cached) | kept TTFT ms | cold / kept | conversation: cached | conversation TTFT ms |")
print("|---|---|---|---|---|---|---|---|---|")
for model in ttft_models:
    for line in open(f"{work}/ttft_{model}.jsonl"):
        r = json.loads(line)
        print(f"| {model} | {r['size']} | {r['cold_prompt_tokens']} | {r['cold_ttft_ms']:.1f} | "
              f"{r['warm_prompt_tokens']} ({r['warm_cached_tokens']}) | {r['warm_ttft_ms']:.1f} | "
              f"{r['cold_ttft_ms'] / r['warm_ttft_ms']:.1f}x | {r['conversation_cached_tokens']} | "
              f"{r['conversation_ttft_ms']:.1f} |")
for model in ttft_models:
    by = {r["size"]: r for r in map(json.loads, open(f"{work}/ttft_{model}.jsonl"))}
    if len(by) >= 2:
        ratios = ", ".join(f"{size}: {by[size]['warm_ttft_ms'] / by[min(by)]['warm_ttft_ms']:.2f}x"
                           for size in sorted(by)[1:])
        print(f"\n{model}: kept TTFT against the {min(by)}-token history's: {ratios}")

print(f"\n### SSE against gRPC streams (mid shape, taylor order 2, {turns} turns of {max_tokens} tokens "
      f"per stream, greedy; client and server share the 2 cores; the median of {runs} runs by tokens/s)\n")
print("| streams | gRPC tokens/s | SSE tokens/s | SSE / gRPC | gRPC runs | SSE runs | errors |")
print("|---|---|---|---|---|---|---|")
for streams in (1, 32):
    sse = sorted((json.load(open(f"{work}/sse_{streams}_{i}.json")) for i in range(1, runs + 1)),
                 key=lambda x: x["tokens_per_s"])
    grpc = sorted((json.load(open(f"{work}/grpc_{streams}_{i}.json")) for i in range(1, runs + 1)),
                  key=lambda x: x["tokens_per_s"])
    s, g = sse[len(sse) // 2]["tokens_per_s"], grpc[len(grpc) // 2]["tokens_per_s"]
    errors = sum(x["errors"] for x in sse) + sum(x.get("errors", 0) for x in grpc)
    print(f"| {streams} | {g:.0f} | {s:.0f} | {s / g:.2f} | "
          f"{', '.join(str(round(x['tokens_per_s'])) for x in grpc)} | "
          f"{', '.join(str(round(x['tokens_per_s'])) for x in sse)} | {errors} |")
PY
