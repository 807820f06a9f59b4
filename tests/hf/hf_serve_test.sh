#!/usr/bin/env bash
# Models trained elsewhere, served with no other step: attnserve_server --model_dirs on
# the directories tests/hf/make_reference.py wrote (plain PyTorch, spm_train, safetensors),
# checked through a real gRPC channel against what PyTorch and python3-sentencepiece
# recorded (hf_serve_check.py): Tokenize's ids, greedy continuations (ids and bytes),
# multi-turn sessions equal to one call, and grouped-query sessions exported from one
# server process, imported into a second and forked, continuing exactly. With
# HYBRID_OUT (tests/hf/hybrid_reference.py's output), the recurrent and hybrid layouts too:
# Mamba2, GraniteMoeHybrid (with and without RoPE) and LFM2 served against PyTorch's
# greedy ids, their state bytes from config.json, sessions, and a granitehybrid session
# (Mamba-2 conv and SSM states beside GQA KV caches) and an lfm2 one exported, imported
# into the second process and forked, continuing exactly.
# Usage: hf_serve_test.sh SERVER_BINARY CLIENT_BINARY REFERENCE_OUT [HYBRID_OUT]
set -euo pipefail
server_bin=$1 client_bin=$2 out=$3 hybrid_out=${4:-}
test_name=hf_serve
work=$(mktemp -d)
hf_dir=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$hf_dir/../.." && pwd)
source "$repo/tests/e2e/lib.sh"
a_pid="" b_pid=""
trap 'stop "$a_pid"; stop "$b_pid"; rm -rf "$work"' EXIT
logs="a b"

all="gqa_tied gqa_tied_bf16 mha mha_sharded taylor2 qwen2 qwen2_f16 qwen3"
# 4 query heads on 2 KV heads: softmax (KV cache), taylor (state), and Qwen3's KV cache of
# head_dim 32 on hidden 64
gqa="gqa_tied taylor2 qwen3"
dirs=""
for d in $all; do
  [ -f "$out/models/$d/config.json" ] ||
    fail "$out/models/$d: no config.json (make_reference.py writes it)"
  dirs+="${dirs:+,}$out/models/$d"
done
hybrids="" hybrid_exports=""
if [ -n "$hybrid_out" ]; then
  hybrids="mamba2 granitehybrid granitehybrid_rope lfm2"
  hybrid_exports="granitehybrid lfm2"
  for d in $hybrids; do
    [ -f "$hybrid_out/models/$d/config.json" ] ||
      fail "$hybrid_out/models/$d: no config.json (hybrid_reference.py writes it)"
    dirs+=",$hybrid_out/models/$d"
  done
fi
python_stubs "$work/stubs"
check() { PYTHONPATH="$work/stubs" "$py" "$hf_dir/hf_serve_check.py" "$@"; }

a_addr=127.0.0.1:$(free_port)
b_addr=127.0.0.1:$(free_port)
start_named a "$a_addr" "127.0.0.1:$(free_port)" --model_dirs="$dirs"
a_pid=$started_pid

step "Tokenize, greedy and sessions on every directory"
check serve "$a_addr" "$out" $all || fail "serve checks"
if [ -n "$hybrids" ]; then
  step "the recurrent and hybrid layouts"
  check serve "$a_addr" "$hybrid_out" $hybrids || fail "serve checks of the hybrids"
fi

step "export and fork on A"
for d in $gqa; do
  check export "$a_addr" "$out" "$d" "$work/$d.snap" || fail "export of $d"
done
for d in $hybrid_exports; do
  check export "$a_addr" "$hybrid_out" "$d" "$work/$d.snap" || fail "export of $d"
done

step "import into B, another process serving the same directories"
start_named b "$b_addr" "127.0.0.1:$(free_port)" --model_dirs="$dirs"
b_pid=$started_pid
for d in $gqa; do
  check import "$b_addr" "$out" "$d" "$work/$d.snap" || fail "import of $d"
done
for d in $hybrid_exports; do
  check import "$b_addr" "$hybrid_out" "$d" "$work/$d.snap" || fail "import of $d"
done

stop "$a_pid"
stop "$b_pid"
step "PASS"
