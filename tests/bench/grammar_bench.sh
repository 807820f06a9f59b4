#!/usr/bin/env bash
# Constrained decoding's cost (issue 32's benchmark; prints figures, asserts nothing):
#   1. grammar_bench: mask µs per token, cold and warm, for a flat, a nested and a
#      recursive schema, over GPT-2's 50k vocabulary (the 152M benchmark GGUF's) and the
#      byte models' 259;
#   2. the same schemas end to end: one attnserve_server serving the 152M Q8_0 GGUF and the
#      shipped default model; /v1/completions streamed, unconstrained and with
#      response_format json_schema taking turns, each answer's decode time per token (first
#      token to last over the tokens between) and time to first token: the first request
#      of a schema (compiled, its masks cold) against later ones (cached).
# Usage: tests/bench/grammar_bench.sh BUILD_DIR [--runs=5] [--tokens=64]
set -euo pipefail
build=$1
shift
runs=5 tokens=64
for arg in "$@"; do
  case $arg in
    --runs=*) runs=${arg#*=} ;;
    --tokens=*) tokens=${arg#*=} ;;
    *) echo "grammar_bench.sh: unknown flag $arg" >&2; exit 2 ;;
  esac
done
repo=$(cd "$(dirname "$0")/../.." && pwd)
server_bin=$build/server/attnserve_server client_bin=$build/client/attnserve_client
test_name=grammar_bench
work=$(mktemp -d)
source "$repo/tests/e2e/lib.sh"
trap 'stop "$server_pid"; rm -rf "$work"' EXIT
gguf=$build/gguf_bench/bench-152m-q8_0.gguf
default_model=$repo/deploy/models/kjv-taylor2-decay

echo "tests/bench/grammar_bench.sh $build --runs=$runs --tokens=$tokens; $(date -u +%FT%TZ);" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; at $(git -C "$repo" log -1 --format=%h)"
"$py" "$repo/tests/gguf/make_quant_gguf.py" "$build/gguf_bench" bench-152m-q8_0 >&2 ||
  fail "make_quant_gguf.py"
echo
"$build/tests/bench/grammar_bench" --gguf="$gguf"
echo
"$build/tests/bench/grammar_bench" --bytes
echo

addr=127.0.0.1:$(free_port) http=127.0.0.1:$(free_port) metrics=127.0.0.1:$(free_port)
start_server "$addr" "$metrics" --http_listen="$http" \
  --model_dirs="$gguf,$default_model" --threads=1 >&2
"$py" - "$http" "$runs" "$tokens" "$repo/tests/bench/grammar_bench.cc" "$metrics" <<'PY'
import http.client, json, re, statistics, sys, time
host, runs, tokens, source, metrics = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
# The schemas grammar_bench compiles, read from its source so both parts use the same.
text = open(source).read()
schemas = {name: json.loads(re.search(r'k%s = R"\((.*?)\)";' % key, text, re.S).group(1))
           for name, key in (("flat", "Flat"), ("nested", "Nested"), ("recursive", "Recursive"))}

def request(path, body):
    c = http.client.HTTPConnection(host, timeout=600)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return c.getresponse()

def models_served():
    c = http.client.HTTPConnection(host, timeout=60)
    c.request("GET", "/v1/models")
    return [m["id"] for m in json.loads(c.getresponse().read())["data"]]

def answer(model, prompt, schema, seed):
    body = {"model": model, "prompt": prompt, "max_tokens": tokens, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 1.0, "seed": seed}
    if schema is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "bench", "schema": schema}}
    t0 = time.perf_counter()
    r = request("/v1/completions", body)
    if r.status != 200:
        raise SystemExit(f"{r.status}: {r.read()[:300]!r}")
    stamps, out, finish, generated = [], "", None, None
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        piece = chunk["choices"][0].get("text", "") if chunk.get("choices") else ""
        if chunk.get("usage"):
            generated = chunk["usage"]["completion_tokens"]
        if chunk.get("choices") and chunk["choices"][0].get("finish_reason"):
            finish = chunk["choices"][0]["finish_reason"]
        if piece:
            stamps.append(time.perf_counter())
            out += piece
    ttft = (stamps[0] - t0) * 1000 if stamps else float("nan")
    # Per token, not per chunk: a chunk may hold several tokens (bytes of one UTF-8
    # character held until it is whole). The first chunk carries at least the first token.
    n = generated if generated else len(stamps)
    per = (stamps[-1] - stamps[0]) * 1000 / (n - 1) if len(stamps) > 1 and n > 1 else float("nan")
    return ttft, per, n, out, finish

print("### Constrained answers end to end (medians of %d; ms; temperature 1, %d tokens at most)\n"
      % (runs, tokens))
print("| model | schema | decode ms/token free | constrained | overhead | TTFT free | "
      "TTFT first request of the schema (compile, cold masks) | TTFT later | tokens/answer | "
      "complete (stop; JSON.parse-able) |")
print("|---|---|---|---|---|---|---|---|---|---|")
first_constrained = {}
for model in models_served():
    for seed in (100, 101):  # the model's first requests (page faults, workspaces) unmeasured
        answer(model, "The record:", None, seed)
    # The first constrained request on a model builds its vocabulary's trie (once per
    # process): measured apart, on a schema of its own.
    first_constrained[model] = answer(model, "The record:", {"type": "boolean"}, 100)[0]
    for name, schema in schemas.items():
        # A new schema each model: $comment makes its text (the cache key) differ.
        schema = dict(schema, **{"$comment": model})
        first = answer(model, "The record:", schema, 1)
        free, cons, tt_free, tt_cons, chunks, valid = [], [], [], [], [], 0
        for run in range(runs):
            f = answer(model, "The record:", None, run + 2)
            c = answer(model, "The record:", schema, run + 2)
            free.append(f[1]); tt_free.append(f[0])
            cons.append(c[1]); tt_cons.append(c[0]); chunks.append(c[2])
            if c[4] == "stop":
                json.loads(c[3])  # a complete answer is JSON: the bench stops otherwise
                valid += 1
        mf, mc = statistics.median(free), statistics.median(cons)
        print(f"| {model} | {name} | {mf:.2f} | {mc:.2f} | {100 * (mc / mf - 1):+.1f}% | "
              f"{statistics.median(tt_free):.1f} | {first[0]:.1f} | {statistics.median(tt_cons):.1f} | "
              f"{statistics.median(chunks):.0f} | {valid}/{runs} |")
# The server's own account: every constrained step's mask time (attnserve_constraint_mask_seconds)
# against the time between tokens (attnserve_inter_token_latency_seconds, free and constrained
# turns together), per model, over the whole run.
c = http.client.HTTPConnection(metrics, timeout=60)
c.request("GET", "/metrics")
families = {}
for line in c.getresponse().read().decode().splitlines():
    m = re.match(r'(attnserve_(constraint_mask|inter_token_latency)_seconds_(sum|count))\{(.*?)\} (\S+)', line)
    if m:
        model = re.search(r'model="([^"]*)"', m.group(4)).group(1)
        families[(model, m.group(2), m.group(3))] = float(m.group(5))
print("\n### The server's own account (/metrics, the whole run)\n")
print("| model | masks | mean mask µs | steps | mean inter-token ms | mask / step |")
print("|---|---|---|---|---|---|")
for model in first_constrained:
    mc, ms = families.get((model, "constraint_mask", "count"), 0), families.get((model, "constraint_mask", "sum"), 0)
    ic, isum = families.get((model, "inter_token_latency", "count"), 0), families.get((model, "inter_token_latency", "sum"), 0)
    if mc and ic:
        print(f"| {model} | {mc:.0f} | {1e6 * ms / mc:.0f} | {ic:.0f} | {1e3 * isum / ic:.2f} | "
              f"{100 * (ms / mc) / (isum / ic):.2f}% |")
print("\nFirst constrained request on each model (its vocabulary's trie built, once per process), "
      "TTFT ms: " + ", ".join(f"{m} {t:.1f}" for m, t in first_constrained.items()))
PY
