#!/usr/bin/env bash
# Trains every shipped model: the same architecture, corpus, seed and token budget
# (1200 steps x 32 sequences x 128 bytes = 4.9M bytes) for each attention module, two
# runs at a time (one LibTorch thread each, one per core). Resumable: rerun after an
# interruption and each run continues from its checkpoint.
# Usage: deploy/models/train_all.sh [BUILD_DIR]   (after deploy/build.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
corpus=$build/corpus/kjv.txt
[ -f "$corpus" ] || deploy/corpus.sh "$corpus"
train() {
  name=$(basename "$1" .json)
  "$build/server/trainer/attnserve_train" --config="$1" --corpus="$corpus" \
    --out="deploy/models/$name" --steps=1200 --batch=32 --seq_len=128 --lr=3e-3 \
    --warmup=100 --seed=1 --threads=1 --eval_every=100 --eval_batches=8 \
    --checkpoint_every=100 --print_every=100 --resume >"deploy/models/$name.train.log" 2>&1 &&
    echo "trained $name: $(tr '\n' ' ' <"deploy/models/$name/report.txt")"
}
export -f train
export build corpus
ls deploy/models/configs/*.json | xargs -P 2 -I{} bash -c 'train {}'
