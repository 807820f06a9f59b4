#!/usr/bin/env bash
# attnserve against llama.cpp on the same quantized GGUF files (prints figures, asserts
# nothing): make_quant_gguf.py's benchmark files (random weights, GPT-2's vocabulary;
# 152M: dim 768, 12 layers, 12 heads on 4 KV heads, ff 2048; 1.17B: TinyLlama's shape,
# dim 2048, 22 layers, 32 on 4, ff 5632; Q8_0 and the Q4_K_M mix), kept in MODELS_DIR
# once written. For each file, one attnserve_server serving it (driven through gRPC by
# gguf_bench.py) and node-llama-cpp's prebuilt llama.cpp (tests/gguf/llama_cpp_bench.mjs,
# one thread), taking turns run by run:
#   - decode tokens/s at 1 and 8 concurrent sessions: 64 greedy tokens after a 12-token
#     prompt, counted as sessions x 63 tokens over the time from the first session's
#     first token to the last session's last;
#   - time to first token of a 512-token prompt;
#   - peak resident memory of each process (VmHWM; llama.cpp's includes node's ~50 MB);
#   - a roofline line: the file's weight bytes a decode step reads (every tensor but the
#     embedding, which a step reads one row of) over the 1-session step time, against
#     this machine's copy bandwidth (numpy, 1 GiB, bytes read + written, median of 5).
# Medians of --runs runs (3), the engines interleaved. A file attnserve refuses is
# reported with its message; the taylor question (can a GGUF be served as taylor?) is
# asked of the server and its answer printed.
# Usage: tests/bench/gguf_bench.sh BUILD_DIR [--files=bench-152m-q8_0,...] [--runs=3]
#        [--tokens=64] [--sessions=1,8] [--models_dir=DIR (default BUILD_DIR/gguf_bench)]
set -euo pipefail
build=$1
shift
files=bench-152m-q8_0,bench-152m-q4_k_m,bench-1.17b-q8_0,bench-1.17b-q4_k_m
runs=3 tokens=64 sessions=1,8 models_dir=$build/gguf_bench
for arg in "$@"; do
  case $arg in
    --files=*) files=${arg#*=} ;;
    --runs=*) runs=${arg#*=} ;;
    --tokens=*) tokens=${arg#*=} ;;
    --sessions=*) sessions=${arg#*=} ;;
    --models_dir=*) models_dir=${arg#*=} ;;
    *) echo "gguf_bench.sh: unknown flag $arg" >&2; exit 2 ;;
  esac
done
repo=$(cd "$(dirname "$0")/../.." && pwd)
server_bin=$build/server/attnserve_server client_bin=$build/client/attnserve_client
test_name=gguf_bench
work=$(mktemp -d)
source "$repo/tests/e2e/lib.sh"
source "$repo/tests/node/node.sh"
a_pid=""
trap 'stop "$a_pid"; rm -rf "$work"' EXIT

echo "tests/bench/gguf_bench.sh $build --files=$files --runs=$runs --tokens=$tokens --sessions=$sessions;" \
  "$(date -u +%FT%TZ); load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores;" \
  "server built $(date -u -r "$server_bin" +%FT%TZ) at $(git -C "$repo" log -1 --format=%h)" \
  "($(git -C "$repo" status --porcelain -- server | wc -l) files under server/ differ from it)"
step "GGUF files in $models_dir (written once: minutes for the 1.17B ones)"
"$py" "$repo/tests/gguf/make_quant_gguf.py" "$models_dir" $(echo "$files" | tr ',' ' ') >&2 ||
  fail "make_quant_gguf.py"
step "copy bandwidth (numpy, 1 GiB)"
"$py" - >"$work/bandwidth.json" <<'PY'
import json, time
import numpy as np
src = np.ones(1 << 28, np.float32)
dst = np.empty_like(src)
rates = []
for _ in range(5):
    t = time.perf_counter()
    np.copyto(dst, src)
    rates.append(2 * src.nbytes / (time.perf_counter() - t) / 1e9)
print(json.dumps({"copy_gbs": sorted(rates)[2], "all": rates}))
PY
prompt=$("$py" -c "import random; r = random.Random(12); print(','.join(str(r.randrange(50000)) for _ in range(12)))")
long=$("$py" -c "import random; r = random.Random(512); print(','.join(str(r.randrange(50000)) for _ in range(512)))")
python_stubs "$work/stubs"

taylor_asked=""
for name in $(echo "$files" | tr ',' ' '); do
  file=$models_dir/$name.gguf
  a_addr=127.0.0.1:$(free_port)
  served=1
  step "$name: attnserve_server"
  "$server_bin" --listen="$a_addr" --http_listen= --metrics_listen=127.0.0.1:0 \
    --model_dirs="$file" >"$work/$name.log" 2>&1 &
  a_pid=$!
  until "$client_bin" --server="$a_addr" --connect_timeout=0.2 health >/dev/null 2>&1; do
    if ! kill -0 "$a_pid" 2>/dev/null; then
      served=0
      tail -n 1 "$work/$name.log" >"$work/$name.refused"
      echo "  attnserve refused it: $(cat "$work/$name.refused")" >&2
      a_pid=""
      break
    fi
    sleep 0.2
  done
  if [ "$served" = 1 ] && [ -z "$taylor_asked" ]; then
    "$client_bin" --server="$a_addr" sessions create --model="$name" --attention=taylor \
      >/dev/null 2>"$work/taylor.txt" || true
    taylor_asked=1
  fi
  for run in $(seq 1 "$runs"); do
    if [ "$served" = 1 ]; then
      step "$name: attnserve, run $run"
      PYTHONPATH="$work/stubs" "$py" "$repo/tests/bench/gguf_bench.py" "$a_addr" "$name" --pid="$a_pid" \
        --tokens="$tokens" --sessions="$sessions" --prompt="$prompt" --long="$long" \
        >"$work/$name.attnserve.$run.json" || fail "gguf_bench.py on $name"
    fi
    step "$name: llama.cpp, run $run"
    node "$repo/tests/gguf/llama_cpp_bench.mjs" "$file" 1 "$tokens" "$sessions" "$prompt" "$long" \
      >"$work/$name.llama.$run.json" 2>"$work/$name.llama.err" ||
      { cat "$work/$name.llama.err" >&2; fail "llama_cpp_bench.mjs on $name"; }
  done
  stop "$a_pid"
  a_pid=""
done
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo
PYTHONPATH="$repo/tests/gguf" "$py" "$repo/tests/bench/gguf_bench_report.py" "$work" "$models_dir" "$files" \
  "$sessions" "$tokens"
