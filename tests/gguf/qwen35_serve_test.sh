#!/usr/bin/env bash
# The 2026 families from GGUF files served by attnserve (server/DESIGN.md §14):
# make_hybrid_gguf.py writes random-weight files of qwen35 (Gated DeltaNet layers and
# Qwen3.5's gated attention with partial, sectioned RoPE; dense FFN), qwen35moe (the same
# with experts and a sigmoid-gated shared expert), qwen3moe (Qwen3's attention with
# experts), F32 and Q8_0, and in F32 qwen3next (value heads grouped on the key heads,
# beta and alpha in one matrix), lfm2moe (a dense first layer, then experts routed by
# sigmoid scores with a selection bias) and granitehybrid with experts (an ungated shared
# expert), and llama with experts (Mixtral's layout) in F32 and Q8_0; attnserve_server --model_dirs=FILE.gguf,... serves them and
# qwen35_serve_check.py holds its greedy continuations and logit gaps to
# hybrid_reference.py's float64 forward of the same files (itself held to llama.cpp by
# gguf_hybrid_reference_test), its session turns to one call, exported + imported and
# forked sessions to the original bit for bit, DescribeModel's state by mixer to the
# files' shapes, and files whose experts' gate and up are one tensor (moe_merged_gguf.py),
# and a qwen3next file in the legacy layout (qwen35_legacy_gguf.py: ssm_in), to the same
# weights stored apart, bit for bit. Largest logit-gap error allowed: 0.01 on F32 files (fp32 against
# float64, F16 KV cache). On Q8_0 files attnserve rounds activations to 8 bits before each
# packed product, as llama.cpp does: its error may be 1.5x that of the reference run with
# llama.cpp's roundings emulated (--rounded), margins under twice that one's rms error
# are ties, and steps routed within 5e-3 of a MoE tie are left out.
# Usage: qwen35_serve_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
test_name=qwen35_serve
work=$(mktemp -d)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/tests/e2e/lib.sh"
a_pid=""
trap 'stop "$a_pid"; rm -rf "$work"' EXIT
logs="a"
prompt="In the beginning God created the heaven and the earth."
greedy=24
f32_files=${QWEN35_F32_FILES:-"qwen35-f32 qwen3moe-f32 qwen35moe-f32 qwen3next-f32 lfm2moe-f32 granitehybrid-moe-f32 llama-moe-f32"}
# Not qwen3next-q8_0: its random weights route 14 of 32 greedy steps within 5e-3 of a MoE
# tie, and the float64 reference with llama.cpp's roundings emulated is itself 1.26 rms
# (4.5 at most) from the exact logits there, so too few steps would be compared.
quantized_files=${QWEN35_Q8_FILES:-"qwen35-q8_0 qwen3moe-q8_0 qwen35moe-q8_0 llama-moe-q8_0"}

step "GGUF files of the 2026 families with random weights"
"$py" "$here/make_hybrid_gguf.py" "$work/gguf" $f32_files $quantized_files | sed "s/^/  /" || fail "make_hybrid_gguf.py"
# The same experts with gate and up in one tensor (llama.cpp's --fuse-gate-up-exps).
merged_files="qwen35moe-f32 qwen3moe-q8_0"
"$py" "$here/moe_merged_gguf.py" "$work/gguf" $merged_files | sed "s/^/  /" || fail "moe_merged_gguf.py"
paths=""
for f in $f32_files $quantized_files; do paths+=" $work/gguf/$f.gguf"; done
for f in $merged_files; do paths+=" $work/gguf/$f-merged.gguf"; done
# Qwen3-Next's legacy layout: q, k, v and z in one ssm_in per key head.
"$py" "$here/qwen35_legacy_gguf.py" "$work/gguf" qwen3next-f32 | sed "s/^/  /" || fail "qwen35_legacy_gguf.py"
paths+=" $work/gguf/qwen3next-f32-legacy.gguf"

python_stubs "$work/stubs"
a_addr=127.0.0.1:$(free_port)
start_named a "$a_addr" "127.0.0.1:$(free_port)" --model_dirs="$(echo $paths | tr ' ' ',')"
a_pid=$started_pid

step "attnserve against the float64 reference of each file"
rc=0
PYTHONPATH="$work/stubs:$here" "$py" "$here/qwen35_serve_check.py" "$a_addr" "$prompt" "$greedy" \
  --gguf_dir="$work/gguf" --max_gap_error=0.01 $(for f in $f32_files; do echo "$f.gguf"; done) || rc=1
PYTHONPATH="$work/stubs:$here" "$py" "$here/qwen35_serve_check.py" "$a_addr" "$prompt" "$greedy" \
  --gguf_dir="$work/gguf" --rounded --route_tie=5e-3 --near_tie=0.25 --max_gap_rms=0.3 --max_gap_error=1.0 \
  $(for f in $quantized_files; do echo "$f.gguf"; done) || rc=1
PYTHONPATH="$work/stubs:$here" "$py" "$here/qwen35_serve_check.py" "$a_addr" "$prompt" "$greedy" \
  --gguf_dir="$work/gguf" $(for f in $merged_files; do echo "$f.gguf=$f-merged.gguf"; done) \
  qwen3next-f32.gguf=qwen3next-f32-legacy.gguf || rc=1
[ "$rc" -eq 0 ] || fail "attnserve and the float64 reference differ"
stop "$a_pid"
a_pid=""
step "PASS"
