#!/usr/bin/env bash
# Plots validation loss against training step for every model of the 140K ablation
# (deploy/models/configs/*.json, their train_log.csv) into deploy/models/ablation.png.
# Needs gnuplot (gnuplot-nox, installed by deploy/install.sh).
set -euo pipefail
cd "$(dirname "$0")"
plots=()
for config in configs/*.json; do  # the 140K ablation only (not the long-window default)
  name=$(basename "$config" .json)
  log=$name/train_log.csv
  [ -f "$log" ] || continue
  plots+=("'$log' using 1:3 with linespoints title '${name#kjv-}'")
done
IFS=,
gnuplot <<GP
set terminal pngcairo size 900,560 font ",11"
set output "ablation.png"
set datafile separator ","
set key top right
set grid
set xlabel "training step (32 x 128 bytes each)"
set ylabel "validation loss (nats per byte)"
set title "KJV bytes, dim 64, 2 layers, 4 heads of 16: same data, seed and budget"
set yrange [1.0:2.6]
plot ${plots[*]}
GP
echo "wrote $(pwd)/ablation.png"
