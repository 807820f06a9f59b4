#!/usr/bin/env bash
# Loss by position along the context, out to 16k bytes (deploy/models/README.md,
# "Quality along the context"): stretches of 16,385 bytes of the KJV validation split,
# one starting every 4,096 bytes
# (49 of them, overlapping, so the short buckets average over 49 stretches rather than
# the 13 that fit side by side), are each fed continuously through each model's serving
# path (chunked prefill into one fresh session per stretch: the recurrent state for
# taylor/taylor_norm/linear, the KV cache for softmax), and the mean loss is reported
# per position bucket. About 1 minute per model, one at a time. Writes
#   deploy/models/position/table.md       the markdown table (bits per byte)
#   deploy/models/position/NAME.csv       power-of-two buckets, for the plot
#   deploy/models/position/position.png   the plot (needs gnuplot, as plot.sh)
# The default model is read from its model directory, or from its running trainer's
# checkpoint.safetensors while it has no model.safetensors yet.
# Usage: deploy/models/position_eval.sh [BUILD_DIR [MODEL_NAME...]]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
shift || true
models=("$@")
[ ${#models[@]} -gt 0 ] ||
  models=(kjv-softmax kjv-taylor2 kjv-taylor-norm4 kjv-linear kjv-taylor2-long kjv-taylor2-decay)
corpus=$build/corpus/kjv.txt
[ -f "$corpus" ] || deploy/corpus.sh "$corpus"
out=deploy/models/position
mkdir -p "$out"
table=$out/table.md
{
  echo "| model | attention | trained on (bytes) | 0-128 | 128-512 | 512-1k | 1k-4k | 4k-16k | 1k-4k vs 128-512 |"
  echo "|---|---|---|---|---|---|---|---|---|"
} >"$table.tmp"
for name in "${models[@]}"; do
  dir=deploy/models/$name
  flags=()
  note=""
  if [ ! -f "$dir/model.safetensors" ]; then
    [ -f "$dir/checkpoint.safetensors" ] || { echo "position_eval.sh: no weights for $name" >&2; exit 1; }
    flags=(--checkpoint)
    note=" (checkpoint, step $(tail -n 1 "$dir/train_log.csv" | cut -d, -f1))"
  fi
  trained=$(sed -n 's/.*--seq_len=\([0-9]*\).*/\1/p' "$dir/train_command.txt" | head -n 1)
  if [ ${#flags[@]} -gt 0 ]; then  # a run still in its curriculum's short phase says so
    short=$(sed -n 's/.*--short_seq_len=\([0-9]*\).*/\1/p' "$dir/train_command.txt" | head -n 1)
    short_steps=$(sed -n 's/.*--short_steps=\([0-9]*\).*/\1/p' "$dir/train_command.txt" | head -n 1)
    step=$(tail -n 1 "$dir/train_log.csv" | cut -d, -f1)
    if [ -n "$short" ] && [ "$step" -le "${short_steps:-0}" ]; then trained="$short so far"; fi
  fi
  line=$(nice -n 10 "$build/server/trainer/attnserve_position_eval" --model_dir="$dir" \
    --corpus="$corpus" --stride=4096 --curve_csv="$out/$name.csv" "${flags[@]}")
  echo "$line"
  /usr/bin/python3 -c '
import sys
kv = dict(p.split("=", 1) for p in sys.argv[1].split())
att = kv["attention"] + (" N=" + kv["order"] if kv["order"] != "0" else "")
cells = " | ".join("%.3f" % float(kv["bpb_" + b])
                   for b in ["0-128", "128-512", "512-1k", "1k-4k", "4k-16k"])
ratio = float(kv["bpb_1k-4k"]) / float(kv["bpb_128-512"]) - 1
print("| `%s`%s | %s | %s | %s | %+.1f%% |" % (kv["model"], sys.argv[2], att, sys.argv[3], cells,
                                          100 * ratio))
' "$line" "$note" "$trained" >>"$table.tmp"
done
mv "$table.tmp" "$table"
echo
cat "$table"
if command -v gnuplot >/dev/null; then
  plots=()
  for name in "${models[@]}"; do
    plots+=("'$out/$name.csv' using (\$1 > 0 ? sqrt(\$1 * \$2) : \$2 / 2):5 with linespoints title '$name'")
  done
  IFS=,
  gnuplot <<GP
set terminal pngcairo size 900,560 font ",11"
set output "$out/position.png"
set datafile separator ","
set key top left
set grid
set logscale x 2
set xlabel "position in the context (bytes; bucket midpoints, log scale)"
set ylabel "validation loss (bits per byte)"
set title "KJV validation text fed continuously through each model's serving path"
set arrow from 128, graph 0 to 128, graph 1 nohead dt 2
set arrow from 512, graph 0 to 512, graph 1 nohead dt 2
plot ${plots[*]}
GP
  echo "wrote $out/position.png"
fi
