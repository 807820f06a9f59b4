#!/usr/bin/env bash
# GGUF files served by attnserve against llama.cpp itself on the same files: make_gguf.py
# writes llama-architecture GGUFs from the small Llamas tests/hf/make_reference.py trains
# (F32, F16, BF16 and Q8_0; a SentencePiece-style "llama" and a byte-level "gpt2"
# vocabulary; 4 query heads on 2 KV heads and plain multi-head), node-llama-cpp's
# prebuilt llama.cpp tokenizes a set of texts and continues a prompt greedily on each
# (llama_cpp_check.mjs), and attnserve_server --model_dirs=FILE.gguf,... must give the
# same ids for both (gguf_check.py, through gRPC). Structured outputs on the "llama", the
# "gpt2" and the Llama 3 vocabulary (whose file carries a Llama 3 chat template: its chats
# render as llama3), every answer validated by Ajv (tests/openai/structured_check.mjs,
# through the HTTP front). Also: a GGUF model is softmax
# attention and asking for it as taylor is refused, saying what it can be served as.
# Usage: gguf_test.sh SERVER_BINARY CLIENT_BINARY REFERENCE_OUT
set -euo pipefail
server_bin=$1 client_bin=$2 out=$3
test_name=gguf
work=$(mktemp -d)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/tests/e2e/lib.sh"
source "$repo/tests/node/node.sh"  # Node 20 or later first on PATH
a_pid=""
trap 'stop "$a_pid"; rm -rf "$work"' EXIT
logs="a"
prompt="In the beginning God created the heaven and the earth."
greedy=40

[ -d "$here/node_modules/node-llama-cpp" ] ||
  fail "$here/node_modules has no node-llama-cpp (deploy/install.sh installs it)"
step "GGUF files from the trained Llamas in $out/models"
"$py" "$here/make_gguf.py" "$out" "$work/gguf" || fail "make_gguf.py"
files=$(ls "$work"/gguf/*.gguf)

step "llama.cpp (node-llama-cpp $(node -p "require('$here/node_modules/node-llama-cpp/package.json').version")): tokenization and greedy continuations"
node "$here/llama_cpp_check.mjs" "$here/texts.json" "$prompt" "$greedy" $files \
  >"$work/llama.json" 2>"$work/llama.err" || { cat "$work/llama.err"; fail "llama_cpp_check.mjs"; }

python_stubs "$work/stubs"
a_addr=127.0.0.1:$(free_port)
a_http=127.0.0.1:$(free_port)
start_named a "$a_addr" "127.0.0.1:$(free_port)" --model_dirs="$(echo $files | tr ' ' ',')" \
  --http_listen="$a_http"
a_pid=$started_pid

step "attnserve on the same files, id for id"
PYTHONPATH="$work/stubs" "$py" "$here/gguf_check.py" "$a_addr" "$work/llama.json" \
  "$here/texts.json" "$prompt" "$greedy" || fail "attnserve and llama.cpp differ"

step "structured outputs on a SentencePiece-style and a byte-level BPE vocabulary: Ajv validates every answer"
[ -d "$repo/tests/openai/node_modules/ajv" ] ||
  fail "$repo/tests/openai/node_modules has no ajv (deploy/install.sh installs it)"
node "$repo/tests/openai/structured_check.mjs" ajv "http://$a_http" gqa-llama-f32 mha-gpt2-f32 \
  mha-llama3-f16 ||
  fail "structured_check ajv"

step "a GGUF model is softmax attention: taylor is refused, naming what it can be"
rc=0
"$client_bin" --server="$a_addr" sessions create --model=gqa-llama-f32 --attention=taylor \
  >/dev/null 2>"$work/taylor.err" || rc=$?
[ "$rc" -ne 0 ] && grep -q "can be served here as: softmax" "$work/taylor.err" ||
  fail "taylor on a GGUF model: exit $rc, $(cat "$work/taylor.err")"
echo "  $(cat "$work/taylor.err")"

step "a malformed file stops the start-up, naming the file and what is wrong"
head -c 100 "$work/gguf/gqa-llama-f32.gguf" >"$work/cut.gguf"
rc=0
"$server_bin" --listen=127.0.0.1:0 --http_listen= --metrics_listen=127.0.0.1:0 \
  --model_dirs="$work/cut.gguf" >"$work/cut.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "cut.gguf: gguf: .*cannot fit\|cut.gguf: gguf: .*cut short" "$work/cut.log" ||
  fail "a cut GGUF: exit $rc, $(cat "$work/cut.log")"
echo "  $(tail -n 1 "$work/cut.log")"
stop "$a_pid"
a_pid=""
step "PASS"
