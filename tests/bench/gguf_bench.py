#!/usr/bin/python3
"""attnserve's side of gguf_bench.sh, through its gRPC API (Generate, token ids in, greedy):
on MODEL of a running attnserve_server, after a short warm-up,
  - decode at each session count in --sessions: that many one-turn sessions started at
    once, each fed the same prompt ids and continued greedily (ignore_eos) for --tokens
    tokens; the time of every session's first and last token;
  - time to first token: --long ids in one turn of max_tokens 1;
then the server's peak resident memory (VmHWM of --pid). Prints one JSON object on stdout
shaped as llama_cpp_bench.mjs's: {decode: {N: {first, last, tokens}}, ttft_ms, vmhwm_kb}.
Times are milliseconds from the start of each run.

Usage: PYTHONPATH=STUBS gguf_bench.py ADDR MODEL --pid=PID --tokens=64 --sessions=1,8
       --prompt=IDS --long=IDS
"""
import argparse
import json
import threading
import time

import grpc
from attnserve.v1 import attnserve_pb2 as pb
from attnserve.v1 import attnserve_pb2_grpc as rpc


def turn(stub, model, ids, n, start, out):
    request = pb.GenerateRequest(model=model, tokens=pb.TokenIds(ids=ids),
                                 sampling=pb.SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
    times = []
    for r in stub.Generate(request, timeout=3600):
        if r.HasField("token"):
            times.append((time.perf_counter() - start) * 1000)
    out.append(times)


def run(stub, model, ids, n, sessions):
    start = time.perf_counter()
    results = []
    threads = [threading.Thread(target=turn, args=(stub, model, ids, n, start, results)) for _ in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("model")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--sessions", default="1,8")
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--long", required=True)
    args = ap.parse_args()
    prompt = [int(x) for x in args.prompt.split(",")]
    long_ids = [int(x) for x in args.long.split(",")]
    stub = rpc.AttnServeStub(grpc.insecure_channel(args.addr))
    run(stub, args.model, prompt, 4, 1)  # warm-up
    decode = {}
    for n in map(int, args.sessions.split(",")):
        results = run(stub, args.model, prompt, args.tokens, n)
        decode[n] = {"first": [t[0] for t in results], "last": [t[-1] for t in results],
                     "tokens": [len(t) for t in results]}
    ttft = run(stub, args.model, long_ids, 1, 1)[0][0]
    with open(f"/proc/{args.pid}/status") as f:
        vmhwm = int(next(line.split()[1] for line in f if line.startswith("VmHWM:")))
    print(json.dumps({"decode": decode, "ttft_ms": ttft, "vmhwm_kb": vmhwm}))


if __name__ == "__main__":
    main()
