#!/usr/bin/env bash
# The ablation and swap tables of deploy/models/README.md, measured with attnserve_eval on this
# machine: validation loss and bits per byte on the fixed validation windows, state bytes
# per session at 1k and 16k context, decode tokens/s (one session, after a 1,024-byte
# prompt, 256 greedy tokens, one thread). Usage: deploy/models/ablation.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
eval_bin=$build/server/trainer/attnserve_eval
corpus=$build/corpus/kjv.txt
row() { # model-dir [extra flags] -> a markdown row
  "$eval_bin" --model_dir="$1" --corpus="$corpus" "${@:2}" | /usr/bin/python3 -c '
import sys
kv = dict(p.split("=", 1) for p in sys.stdin.read().split())
name = kv["attention"] + (" N=" + kv["order"] if kv["order"] != "0" else "")
fmt = lambda b: "{:,}".format(int(b))
tok = "{:,.0f}".format(float(kv["decode_tok_s"])) if kv["decode_tok_s"] != "0" else "n/a"
print("| `%s` | %s | %.4f | %.3f | %s | %s | %s |" % (kv["model"], name, float(kv["val_loss"]),
      float(kv["val_bpb"]), fmt(kv["state_bytes_1k"]), fmt(kv["state_bytes_16k"]), tok))'
}
echo "| model | attention | val loss (nats/byte) | bits/byte | state bytes @1k | state bytes @16k | decode tokens/s |"
echo "|---|---|---|---|---|---|---|"
for name in softmax softmax-norm taylor6 taylor4 taylor2 taylor-norm4 linear; do
  row "deploy/models/kjv-$name"
done
echo
echo "Swap: the kjv-softmax-qknorm checkpoint (learned temperatures ~5.7) served as taylor:"
echo
echo "| model | attention | val loss (nats/byte) | bits/byte | state bytes @1k | state bytes @16k | decode tokens/s |"
echo "|---|---|---|---|---|---|---|"
row deploy/models/kjv-softmax-qknorm
for order in 2 4; do row deploy/models/kjv-softmax-qknorm --attention=taylor --order=$order; done
for order in 6 8; do  # decode skipped: 40 MB and 400 MB of state per session
  row deploy/models/kjv-softmax-qknorm --attention=taylor --order=$order --max_state_mib=256 \
    --decode_tokens=0
done
