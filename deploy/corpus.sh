#!/usr/bin/env bash
# Writes the training corpus: the King James Bible (public domain) as printed by the
# `bible` program from Debian's bible-kjv package (deploy/install.sh installs it),
# 4.4 MB of plain text with a verse reference at the start of each line.
# Usage: deploy/corpus.sh OUT_FILE
set -euo pipefail
out=${1:?usage: deploy/corpus.sh OUT_FILE}
if ! command -v bible >/dev/null; then
  echo "corpus.sh: the 'bible' program is missing; run deploy/install.sh" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
bible -f "Gen1:1-Rev22:21" >"$out.tmp"
mv "$out.tmp" "$out"
