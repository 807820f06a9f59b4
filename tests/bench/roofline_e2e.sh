#!/usr/bin/env bash
# End-to-end part of the roofline (tests/bench/run.sh roofline): the mid shape (dim 256, 6
# layers, 8 heads of 32, SwiGLU 768, untrained, attnserve_init_model) served as taylor
# order 2 by a real attnserve_server on loopback, driven by `attnserve_client bench` at 1
# and 32 sessions, --runs times each (the median run is printed: one run at 1 session is
# half a second, and the machine is shared). Prints a markdown table of aggregate
# tokens/s next to the in-process decode figure of the same shape and batch from
# roofline_bench's JSON (the median step of many), and their ratio. Asserts nothing.
#
# --with_reference also runs a second server with ATTNSERVE_REFERENCE_STEP=1 (Model::Step's
# LibTorch path) and prints its figures in the same table.
#
# Usage: tests/bench/roofline_e2e.sh BUILD_DIR ROOFLINE_JSON [--turns=2] [--max_tokens=256]
#        [--runs=3] [--with_reference]
set -euo pipefail
build=${1:?usage: roofline_e2e.sh BUILD_DIR ROOFLINE_JSON}
engine_json=${2:?usage: roofline_e2e.sh BUILD_DIR ROOFLINE_JSON}
shift 2
turns=2 max_tokens=256 runs=3 with_reference=""
for arg in "$@"; do
  case $arg in
    --with_reference) with_reference=1 ;;
    --turns=*) turns=${arg#*=} ;;
    --max_tokens=*) max_tokens=${arg#*=} ;;
    --runs=*) runs=${arg#*=} ;;
    *) echo "roofline_e2e: unknown argument $arg" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/roofline_e2e.XXXXXX)
# py, server_pid, free_port and stop (SIGTERM, then SIGKILL after 5 s) from the e2e tests.
source "$(dirname "$0")/../e2e/lib.sh"
cleanup() { stop "$server_pid"; rm -rf "$work"; }
trap cleanup EXIT
"$build/server/tools/attnserve_init_model" --out="$work/mid" --name=mid --attention=taylor \
  --order=2 --dim=256 --layers=6 --heads=8 --mlp_hidden=768 --seed=1 >/dev/null
# serve MODE: one server (MODE fused, or reference: ATTNSERVE_REFERENCE_STEP=1), bench at 1
# and 32 sessions, --runs times each, into $work/bench_MODE_SESSIONS_RUN.json, stop it.
serve() {
  local mode=$1 addr serving=""
  addr=127.0.0.1:$(free_port)
  ATTNSERVE_REFERENCE_STEP=$([ "$mode" = reference ] && echo 1 || echo 0) \
    "$build/server/attnserve_server" --listen="$addr" --http_listen=127.0.0.1:0 --metrics_listen=127.0.0.1:$(free_port) \
    --model_dirs="$work/mid" --max_generated_tokens=$(( max_tokens > 2048 ? max_tokens : 2048 )) \
    >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 400); do
    if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
    if [ "$("$build/client/attnserve_client" --server="$addr" --connect_timeout=0.2 health 2>/dev/null)" = SERVING ]; then
      serving=1; break
    fi
    sleep 0.05
  done
  if [ -z "$serving" ]; then
    echo "roofline_e2e: the server did not come up; its log:" >&2; cat "$work/server.log" >&2; exit 1
  fi
  for run in $(seq 1 "$runs"); do
    for sessions in 1 32; do
      "$build/client/attnserve_client" --server="$addr" --timeout=600 bench --sessions=$sessions \
        --turns="$turns" --max_tokens="$max_tokens" --json >"$work/bench_${mode}_${sessions}_$run.json"
    done
  done
  kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""
}
modes="fused"
if [ -n "$with_reference" ]; then modes="fused reference"; fi
for mode in $modes; do serve "$mode"; done
"$py" - "$engine_json" "$work" "$turns" "$max_tokens" "$runs" $modes <<'PY'
import json, sys
engine = json.load(open(sys.argv[1]))
work, turns, max_tokens, runs, modes = (sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]),
                                        sys.argv[6:])
print(f"\n### End to end: mid shape, taylor order 2, attnserve_server + attnserve_client bench "
      f"({turns} turns of {max_tokens} tokens per session, greedy; client and server share the 2 cores; "
      f"the median of {runs} runs by tokens/s, every run's tokens/s in the last column)\n")
print("| step | sessions | end-to-end tokens/s | in-process decode tokens/s | ratio | ITL p50 ms | errors | runs |")
print("|---|---|---|---|---|---|---|---|")
for mode in modes:
    module = "taylor2" if mode == "fused" else "taylor2 (LibTorch step)"
    for b in (1, 32):
        all_runs = sorted((json.load(open(f"{work}/bench_{mode}_{b}_{i}.json"))
                           for i in range(1, runs + 1)), key=lambda x: x["tokens_per_s"])
        r = all_runs[len(all_runs) // 2]
        row = [x for x in engine["rows"] if x["shape"] == "mid" and x["module"] == module
               and x["workload"] == f"decode B={b}"]
        inproc = row[0]["tokens_per_s"] if row else float("nan")
        name = "fused" if mode == "fused" else "LibTorch (ATTNSERVE_REFERENCE_STEP=1)"
        print(f"| {name} | {b} | {r['tokens_per_s']:.0f} | {inproc:.0f} | "
              f"{r['tokens_per_s'] / inproc:.2f} | {r['itl_ms']['p50']:.2f} | "
              f"{sum(x.get('errors', 0) for x in all_runs)} | "
              f"{', '.join(str(round(x['tokens_per_s'])) for x in all_runs)} |")
PY
