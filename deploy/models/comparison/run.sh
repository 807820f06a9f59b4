#!/usr/bin/env bash
# The short size/module comparison behind the new default model (deploy/models/README.md,
# "Choosing the size and the module"): each config in deploy/models/comparison/configs/ named on the command
# line is trained for the same token budget (100 steps x 16 x 512 bytes = 819,200 bytes,
# lr 3e-3, 20 warm-up steps, seed 1), two runs at a time with one LibTorch thread each
# (one per core). Validation (4 x 16 windows of 512 bytes) every 20 steps; every progress
# line is stamped with the wall-clock seconds since the run started, and the validation
# points land in deploy/models/comparison/results.csv
# (config,step,bytes_seen,wall_s,val_loss,val_bpb). The trained weights stay in
# BUILD_DIR/comparison/ (not shipped).
# Usage: deploy/models/comparison/run.sh BUILD_DIR CONFIG_NAME...
#   e.g. deploy/models/comparison/run.sh build cmp-taylor2-128x4 cmp-taylor2-192x4
set -euo pipefail
cd "$(dirname "$0")/../../.."
build=${1:?usage: run.sh BUILD_DIR CONFIG_NAME...}
shift
here=deploy/models/comparison
corpus=$build/corpus/kjv.txt
[ -f "$corpus" ] || deploy/corpus.sh "$corpus"
steps=100 batch=16 seq_len=512
one() {
  name=$1
  out=$build/comparison/$name
  rm -rf "$out"
  start=$(date +%s.%N)
  "$build/server/trainer/attnserve_train" --config="$here/configs/$name.json" \
    --corpus="$corpus" --out="$out" --steps=$steps --batch=$batch --seq_len=$seq_len \
    --lr=3e-3 --warmup=20 --seed=1 --threads=1 --eval_every=20 --eval_batches=4 \
    --checkpoint_every=1000 --print_every=10 2>&1 |
    while IFS= read -r line; do
      printf '%8.1f %s\n' "$(echo "$(date +%s.%N) - $start" | bc)" "$line"
    done >"$here/$name.log"
}
export -f one
export build corpus here steps batch seq_len
printf '%s\n' "$@" | xargs -P 2 -I{} bash -c 'one {}'
# CSV of the validation points of every log in this folder.
{
  echo "config,step,bytes_seen,wall_s,val_loss,val_bpb"
  for log in "$here"/*.log; do
    awk -v name="$(basename "$log" .log)" -v b=$((batch * seq_len)) '
      / val / { split($3, s, "/"); v = $0; sub(/.* val /, "", v); split(v, w, " ");
                bpb = w[2]; gsub(/[(]/, "", bpb);
                printf "%s,%d,%d,%.1f,%s,%s\n", name, s[1], s[1] * b, $1, w[1], bpb }' "$log"
  done
} >"$here/results.csv"
echo "wrote $here/results.csv"
