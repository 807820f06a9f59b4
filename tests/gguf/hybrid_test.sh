#!/usr/bin/env bash
# Recurrent, hybrid and mixture-of-experts GGUF files against llama.cpp itself:
# make_hybrid_gguf.py writes mamba2, granitehybrid (dense and with experts), lfm2,
# lfm2moe, nemotron_h, qwen35, qwen35moe, qwen3next, qwen3moe and llama-with-experts
# (Mixtral) files with random weights (F32 and Q8_0), node-llama-cpp's prebuilt
# llama.cpp loads each, continues a prompt greedily and gives its logits after every
# position (hybrid_llama_cpp.mjs), and hybrid_reference.py's numpy forward of the same
# files must give the same logits and the same greedy tokens up to the first near-tie (of
# the tokens or of a MoE routing), and llama.cpp's saved sequence state must hold the same
# recurrent states (conv and SSM or Gated DeltaNet, in the layouts server/mixer keeps).
# That proves the files (llama.cpp reads them as the architecture they claim) and the
# reference (which server/mixer's kernels are tested against). About 30 s on 2 cores.
# Usage: hybrid_test.sh
set -euo pipefail
work=$(mktemp -d)
here=$(cd "$(dirname "$0")" && pwd)
trap 'rm -rf "$work"' EXIT
source "$here/../node/node.sh"  # Node 20 or later first on PATH
prompt="In the beginning God created the heaven and the earth."
greedy=32

[ -d "$here/node_modules/node-llama-cpp" ] || {
  echo "hybrid_test: $here/node_modules has no node-llama-cpp (deploy/install.sh installs it)" >&2
  exit 1
}
/usr/bin/python3 "$here/make_hybrid_gguf.py" "$work/gguf"
mkdir "$work/states"
STATE_DIR="$work/states" node "$here/hybrid_llama_cpp.mjs" "$prompt" "$greedy" "$work"/gguf/*.gguf \
  >"$work/llama.json" 2>"$work/llama.err" || {
  cat "$work/llama.err" >&2
  echo "hybrid_test: hybrid_llama_cpp.mjs failed" >&2
  exit 1
}
/usr/bin/python3 "$here/hybrid_reference.py" check "$work/llama.json" "$work/gguf" "$work/states"
echo "hybrid_test: PASS"
