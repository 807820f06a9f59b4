#!/usr/bin/env bash
# Recurrent and hybrid GGUF files served by attnserve against llama.cpp itself on the same
# files: make_hybrid_gguf.py writes random-weight files of mamba2 (pure Mamba-2, 2 SSM
# groups), granitehybrid (Mamba-2 and grouped-query attention layers, Granite's
# multipliers; without RoPE and, rope.scaling.finetuned, with it) and lfm2 (short
# convolutions and grouped-query attention with q/k norms and NEOX RoPE, tied output), F32
# and Q8_0, and granitehybrid and lfm2 in Q4_K; node-llama-cpp's prebuilt llama.cpp (one thread) continues a prompt greedily
# on each, recording its raw top-5 logits (llama_cpp_quant_check.mjs), and
# attnserve_server --model_dirs=FILE.gguf,... must give the same prompt ids and greedy
# ids up to llama.cpp's near-ties (hybrid_serve_check.py: free-running up to the first
# difference, which must be a near-tie, teacher-forced at every clear step) and logits no
# further from hybrid_reference.py's float64 forward than 1.5 x llama.cpp's. Near-ties:
# 0.05 on F32 files (llama.cpp rounds only the attention's operands to F16 there), 0.25
# on quantized ones (it rounds every activation to 8 bits before a product), or twice
# llama.cpp's own rms logit-gap error on the file where that is more.
# Usage: hybrid_serve_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
test_name=hybrid_serve
work=$(mktemp -d)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/tests/e2e/lib.sh"
source "$repo/tests/node/node.sh"  # Node 20 or later first on PATH
a_pid=""
trap 'stop "$a_pid"; rm -rf "$work"' EXIT
logs="a"
prompt="In the beginning God created the heaven and the earth."
greedy=32
f32_files="mamba2-f32 granitehybrid-f32 granitehybrid-rope-f32 lfm2-f32"
quantized_files="mamba2-q8_0 granitehybrid-q8_0 lfm2-q8_0 granitehybrid-q4_k lfm2-q4_k"

[ -d "$here/node_modules/node-llama-cpp" ] ||
  fail "$here/node_modules has no node-llama-cpp (deploy/install.sh installs it)"
step "recurrent and hybrid GGUF files with random weights"
"$py" "$here/make_hybrid_gguf.py" "$work/gguf" $f32_files $quantized_files | sed "s/^/  /" || fail "make_hybrid_gguf.py"
paths=""
for f in $f32_files $quantized_files; do paths+=" $work/gguf/$f.gguf"; done

step "llama.cpp (node-llama-cpp $(node -p "require('$here/node_modules/node-llama-cpp/package.json').version")): greedy continuations with their top-5 logits"
node "$here/llama_cpp_quant_check.mjs" "$prompt" "$greedy" $paths \
  >"$work/llama.json" 2>"$work/llama.err" || { cat "$work/llama.err"; fail "llama_cpp_quant_check.mjs"; }

python_stubs "$work/stubs"
a_addr=127.0.0.1:$(free_port)
start_named a "$a_addr" "127.0.0.1:$(free_port)" --model_dirs="$(echo $paths | tr ' ' ',')"
a_pid=$started_pid
grep "hybrid\|mamba\|lfm2" "$work/a.log" | sed "s/^/  /" || true

step "attnserve on the same files, id for id up to llama.cpp's near-ties"
rc=0
PYTHONPATH="$work/stubs" "$py" "$here/hybrid_serve_check.py" "$a_addr" "$work/llama.json" "$prompt" "$greedy" \
  --gguf_dir="$work/gguf" --near_tie=0.05 $(for f in $f32_files; do echo "$f.gguf"; done) || rc=1
PYTHONPATH="$work/stubs" "$py" "$here/hybrid_serve_check.py" "$a_addr" "$work/llama.json" "$prompt" "$greedy" \
  --gguf_dir="$work/gguf" --near_tie=0.25 $(for f in $quantized_files; do echo "$f.gguf"; done) || rc=1
[ "$rc" -eq 0 ] || fail "attnserve and llama.cpp differ"
stop "$a_pid"
a_pid=""
step "PASS"
