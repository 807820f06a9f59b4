#!/usr/bin/python3
"""attnserve against llama.cpp on the same GGUF files: reads what llama_cpp_check.mjs
printed, asks a running attnserve_server (which serves the same files) for its
tokenization of the same texts (Tokenize) and its greedy continuation of the same prompt
(Generate, temperature 0), and compares id for id. Prints the figures; exits 1 on any
difference, naming the file, the text or the step, and both sides' top-1 margins.

Usage: PYTHONPATH=STUBS gguf_check.py SERVER_ADDR LLAMA_CPP_JSON TEXTS_JSON PROMPT N
"""
import json
import math
import sys

import grpc
from attnserve.v1 import attnserve_pb2 as pb
from attnserve.v1 import attnserve_pb2_grpc as rpc


def main():
    addr, llama_file, texts_file, prompt, n = sys.argv[1:6]
    n = int(n)
    with open(llama_file) as f:
        theirs = json.load(f)
    with open(texts_file) as f:
        texts = json.load(f)
    stub = rpc.AttnServeStub(grpc.insecure_channel(addr))
    failures, token_total, greedy_total = [], 0, 0
    for file, their in sorted(theirs.items()):
        model = file[:-len(".gguf")]
        for i, text in enumerate(texts):
            ours = [t.id for t in stub.Tokenize(pb.TokenizeRequest(model=model, text=text.encode())).tokens]
            token_total += len(ours)
            if ours != their["tokenized"][i]:
                failures.append(f"{file}: text {i} {text!r}: attnserve {ours} != llama.cpp {their['tokenized'][i]}")
        prompt_ids = [t.id for t in stub.Tokenize(pb.TokenizeRequest(model=model, text=prompt.encode())).tokens]
        if prompt_ids != their["prompt"]:
            failures.append(f"{file}: the prompt's ids differ: {prompt_ids} != {their['prompt']}")
            continue
        request = pb.GenerateRequest(model=model, text=prompt.encode(), logprobs=True, top_logprobs=2,
                                     sampling=pb.SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
        ids, margins = [], []
        for r in stub.Generate(request):
            if r.HasField("token"):
                ids.append(r.token.id)
                top = sorted((math.exp(t.logprob) for t in r.token.top_logprobs), reverse=True)
                margins.append(top[0] - (top[1] if len(top) > 1 else 0))
        greedy_total += len(ids)
        same = next((k for k, (a, b) in enumerate(zip(ids, their["greedy"])) if a != b), None)
        if len(ids) != len(their["greedy"]) and same is None:
            same = min(len(ids), len(their["greedy"]))
        if same is not None:
            failures.append(f"{file}: greedy step {same}: attnserve {ids[same:same + 5]} (top-1 margin "
                            f"{margins[same] if same < len(margins) else float('nan'):.4f}) != llama.cpp "
                            f"{their['greedy'][same:same + 5]} (margin {their['margins'][same]:.4f} if any)")
        print(f"gguf_check: {file}: {len(texts)} texts, prompt of {len(prompt_ids)} ids, "
              f"{len(ids)} greedy tokens {'equal' if same is None else 'DIFFER'}; smallest top-1 "
              f"probability margin attnserve {min(margins):.4f}, llama.cpp {min(their['margins']):.4f}")
    print(f"gguf_check: {len(theirs)} files: {token_total} tokenized ids and {greedy_total} greedy "
          f"tokens compared with llama.cpp, {len(failures)} mismatches")
    for f in failures:
        print("gguf_check: MISMATCH " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
