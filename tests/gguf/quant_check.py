#!/usr/bin/python3
"""attnserve against llama.cpp on the quantized GGUF files: reads what
llama_cpp_quant_check.mjs printed, asks a running attnserve_server that serves the same
files for its tokenization of the prompt (Tokenize) and its greedy continuation
(Generate, temperature 0, top-2 log-probabilities), and compares id for id.

Two comparisons per file, after the prompt's ids:
  - free-running: attnserve's greedy ids must equal llama.cpp's until the first step where
    they differ, and that step must be one where llama.cpp's top-1 margin (logit of its
    first minus its second) is below --near_tie. llama.cpp rounds activations to 8 bits
    for quantized products and keeps its KV cache in F16 (logits about 1% apart from an
    fp32 computation here), so where two tokens are that close either engine may pick the
    other; the contexts differ after that, so nothing later is compared.
  - teacher-forced: for every step i, attnserve continues the prompt plus llama.cpp's
    first i greedy ids by one token (Generate with token ids); where llama.cpp's margin
    is at least --near_tie the ids must be equal. This compares every clear step, not
    only those before the first near-tie. The largest difference between the two
    engines' logit gaps (each of llama.cpp's top 5 against its top 1, as both report
    them) is printed: how far apart their logits are.
Exits 1 on any failure, naming the file and step.

Usage: PYTHONPATH=STUBS quant_check.py SERVER_ADDR LLAMA_CPP_JSON PROMPT N [--near_tie=0.25]
       [--min_compared=FRACTION] [FILE_NAMES...]  (default: every file in the JSON)
"""
import argparse
import json
import sys

import grpc
from attnserve.v1 import attnserve_pb2 as pb
from attnserve.v1 import attnserve_pb2_grpc as rpc


def attnserve_greedy(stub, model, prompt, n):
    request = pb.GenerateRequest(model=model, text=prompt.encode(), logprobs=True, top_logprobs=2,
                                 sampling=pb.SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
    ids, margins = [], []
    for r in stub.Generate(request):
        if r.HasField("token"):
            ids.append(r.token.id)
            top = sorted((t.logprob for t in r.token.top_logprobs), reverse=True)
            margins.append(top[0] - top[1] if len(top) > 1 else float("inf"))
    return ids, margins


def teacher_forced(stub, model, their, near_tie):
    """-> (clear steps, equal among them, failures, largest logit-gap difference)."""
    clear = equal = 0
    failures, worst = [], 0.0
    for i, want in enumerate(their["greedy"]):
        ids = their["prompt"] + their["greedy"][:i]
        request = pb.GenerateRequest(model=model, tokens=pb.TokenIds(ids=ids), logprobs=True, top_logprobs=5,
                                     sampling=pb.SamplingParams(temperature=0, max_tokens=1, ignore_eos=True))
        token = next(r.token for r in stub.Generate(request) if r.HasField("token"))
        ours = {t.id: t.logprob for t in token.top_logprobs}
        top = their["top"][i]
        for tid, logit in top[1:]:
            if tid in ours and top[0][0] in ours:
                worst = max(worst, abs((ours[tid] - ours[top[0][0]]) - (logit - top[0][1])))
        if their["margins"][i] < near_tie:
            continue
        clear += 1
        if token.id == want:
            equal += 1
        else:
            failures.append(f"teacher-forced step {i}: attnserve {token.id}, llama.cpp {want} (margin "
                            f"{their['margins'][i]:.4f}, its top 5 {top}; attnserve's top 5 "
                            f"{sorted(ours.items(), key=lambda kv: -kv[1])})")
    return clear, equal, failures, worst


def compare(file, theirs, ours, our_margins, near_tie):
    """-> (ok, agreeing prefix, line)."""
    their_ids, their_margins = theirs["greedy"], theirs["margins"]
    n = min(len(ours), len(their_ids))
    k = next((i for i in range(n) if ours[i] != their_ids[i]), None)
    agree = n if k is None else k
    gap = max((abs(our_margins[i] - their_margins[i]) for i in range(agree)), default=0.0)
    line = (f"{file}: {agree}/{len(their_ids)} greedy ids equal; largest margin difference over "
            f"them {gap:.4f}; smallest llama.cpp margin over them "
            f"{min(their_margins[:agree], default=float('nan')):.4f}")
    if len(ours) != len(their_ids):
        return False, agree, line + f"; attnserve gave {len(ours)} tokens, llama.cpp {len(their_ids)}"
    if k is None:
        return True, agree, line
    line += (f"; step {k}: attnserve {ours[k]} (margin {our_margins[k]:.4f}), llama.cpp {their_ids[k]} "
             f"(margin {their_margins[k]:.4f}, its top 5 {theirs['top'][k]})")
    if their_margins[k] < near_tie:
        return True, agree, line + ": a near-tie, compared no further"
    return False, agree, line + f": llama.cpp's margin is not below {near_tie}, so this is a real difference"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("llama_json")
    ap.add_argument("prompt")
    ap.add_argument("n", type=int)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--near_tie", type=float, default=0.25)
    ap.add_argument("--min_compared", type=float, default=0.5,
                    help="fail unless the teacher-forced steps compared equal are this share of all steps")
    args = ap.parse_args()
    with open(args.llama_json) as f:
        theirs = json.load(f)
    files = args.files or sorted(theirs)
    stub = rpc.AttnServeStub(grpc.insecure_channel(args.addr))
    failures, agreed, total = [], 0, 0
    for file in files:
        their = theirs[file]
        if "error" in their:
            failures.append(f"{file}: llama.cpp could not load it: {their['error']}")
            continue
        model = file[:-len(".gguf")]
        try:
            prompt_ids = [t.id for t in stub.Tokenize(pb.TokenizeRequest(model=model, text=args.prompt.encode())).tokens]
            ids, margins = attnserve_greedy(stub, model, args.prompt, args.n)
        except grpc.RpcError as e:
            failures.append(f"{file}: attnserve: {e.code().name}: {e.details()}")
            print(f"quant_check: {file}: attnserve: {e.code().name}: {e.details()}")
            continue
        if prompt_ids != their["prompt"]:
            failures.append(f"{file}: the prompt's ids differ: attnserve {prompt_ids} != llama.cpp {their['prompt']}")
            continue
        ok, agree, line = compare(file, their, ids, margins, args.near_tie)
        print("quant_check: " + line)
        if not ok:
            failures.append(line)
        clear, equal, forced_failures, worst = teacher_forced(stub, model, their, args.near_tie)
        print(f"quant_check: {file}: teacher-forced: {equal} of {clear} clear steps equal (of "
              f"{len(their['greedy'])}); largest logit-gap difference between the engines {worst:.4f}")
        failures += [f"{file}: {f}" for f in forced_failures]
        agreed += equal
        total += len(their["greedy"])
    share = agreed / total if total else 0.0
    print(f"quant_check: {len(files)} files, {agreed} of {total} teacher-forced steps compared equal "
          f"({share:.0%}), {len(failures)} failures")
    if share < args.min_compared:
        failures.append(f"only {share:.0%} of the greedy steps were compared equal (near-ties are not "
                        f"compared): fewer than {args.min_compared:.0%}")
    for f in failures:
        print("quant_check: FAIL " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
