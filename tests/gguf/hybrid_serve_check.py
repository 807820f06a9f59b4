#!/usr/bin/python3
"""attnserve against llama.cpp on the recurrent and hybrid GGUF files (make_hybrid_gguf.py):
reads what llama_cpp_quant_check.mjs printed for them (prompt ids, greedy ids, raw top-5
logits and top-1 margins per step), asks a running attnserve_server that serves the same
files for its tokenization and greedy continuation, and compares them as quant_check.py
does (its functions, the same rules):
  - the prompt's ids equal;
  - free-running: attnserve's greedy ids equal llama.cpp's up to the first difference,
    which must be at a near-tie: a step where llama.cpp's top-1 margin or the float64
    reference's (below) is under --near_tie, or under --tie_errors x llama.cpp's own rms
    logit-gap error against the reference on that file (Q8_0 and Q4_K: its 8-bit
    activations move gaps by 0.13-0.47 rms, attnserve's by 0.13-0.29);
  - teacher-forced (Generate on prompt + llama.cpp's first i ids): attnserve's top-1 is
    llama.cpp's at every step whose margin is not a near-tie, and the float64
    reference's where its margin is not;
  - accuracy: hybrid_reference.py's forward without llama.cpp's roundings
    (llama_rounding=False: float64 on the file's exact weights, the logits both engines
    approximate) gives each engine's logit-gap error (its top 5 against its top 1),
    teacher-forced and on attnserve's own free-running ids; attnserve's rms error may be
    at most --error_ratio x llama.cpp's (or 0.02);
  - sessions: two turns (the prompt, then tokens) give what one call on all the tokens
    gives, at the same position, and a turn continued by an empty-prompt turn gives
    attnserve's own greedy continuation: the recurrent and attention states carried
    across turns.
Prints one line per file and check; exits 1 on any failure, naming the file and step.

Usage: PYTHONPATH=STUBS hybrid_serve_check.py SERVER_ADDR LLAMA_CPP_JSON PROMPT N
       --gguf_dir=DIR [--near_tie=0.25] [--tie_errors=2] [--error_ratio=1.5] FILE_NAMES...
"""
import argparse
import json
import os
import sys

import grpc
from attnserve.v1 import attnserve_pb2 as pb
from attnserve.v1 import attnserve_pb2_grpc as rpc

import hybrid_reference
import quant_check


def reference_logits(path, ids):
    """(len(ids), vocab) float64 logits of the file's exact weights, one prefill."""
    model = hybrid_reference.Forward(path, llama_rounding=False)
    return model.run(ids, model.new_state())


def turn(stub, what, max_tokens, margins=None, **request):
    """One greedy turn (end of sequence ignored): (ids, final). With `margins` (a list),
    each step's top-1 minus top-2 logprob is appended to it."""
    sampling = pb.SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    if margins is not None:
        request.update(logprobs=True, top_logprobs=2)
    ids, final = [], None
    for m in stub.Generate(pb.GenerateRequest(sampling=sampling, **request), timeout=60):
        if m.HasField("token"):
            ids.append(m.token.id)
            if margins is not None:
                top = m.token.top_logprobs
                margins.append(top[0].logprob - top[1].logprob if len(top) > 1 else float("inf"))
        else:
            final = m.final
    if final is None or final.reason != pb.FINISH_REASON_LENGTH:
        raise RuntimeError(f"{what}: finished {final and pb.FinishReason.Name(final.reason)}")
    return ids, final


def check_sessions(stub, file, their, ids, near_tie):
    """A session's turns against one call (the session's states carried across turns):
    turn 1 the prompt for 10 tokens, turn 2 some of llama.cpp's greedy ids as tokens,
    equal to one call on all those tokens, at the same position, up to a near-tie of the
    one call; and turn 1 followed by an empty-prompt turn equal to attnserve's own greedy
    call (ids). -> failures.

    Near-ties: turn 1's generated tokens enter the state through decode steps, and one
    call prefills them, so their rows are the same values summed in another order (BLAS
    for the prompt, the fused step for decode; which kernels OpenBLAS runs depends on the
    CPU and OPENBLAS_CORETYPE). On packed files each activation row is then quantized to
    8 bits, which turns such a difference into a whole quantization step now and then:
    the same noise the comparison with llama.cpp allows (near_tie, this file's). A
    difference where the one call's top two are closer than that is compared no
    further."""
    model, first = file[:-len(".gguf")], 10
    second = their["greedy"][3:9]
    failures = []
    for what in ("tokens", "empty"):
        s = stub.CreateSession(pb.CreateSessionRequest(model=model), timeout=60).id
        try:
            t1, _ = turn(stub, f"{file}: turn 1", first, session_id=s, text=their["text"].encode())
            if what == "tokens":
                t2, f2 = turn(stub, f"{file}: turn 2", 16, session_id=s, tokens=pb.TokenIds(ids=second))
                every = their["prompt"] + t1 + second
                margins = []
                one, f1 = turn(stub, f"{file}: one call", 16, margins=margins, model=model,
                               tokens=pb.TokenIds(ids=every))
                differ = next((i for i, (a, b) in enumerate(zip(t2, one)) if a != b), None)
                if differ is not None and margins[differ] < near_tie:
                    print(f"hybrid_serve_check: {file}: two turns equal one call for {differ} "
                          f"tokens, then a near-tie (margin {margins[differ]:.3f} < {near_tie:.3f}): "
                          f"compared no further")
                elif t2 != one or f2.usage.session_position != f1.usage.session_position:
                    failures.append(f"{file}: two turns gave {t2} at {f2.usage.session_position}, one call "
                                    f"on the {len(every)} tokens {one} at {f1.usage.session_position}"
                                    + (f" (margin {margins[differ]:.2e} at {differ})"
                                       if differ is not None else ""))
            else:
                rest, _ = turn(stub, f"{file}: empty-prompt turn", len(ids) - first, session_id=s, text=b"")
                if t1 + rest != ids:
                    failures.append(f"{file}: {first} tokens then an empty-prompt turn gave {t1 + rest}, "
                                    f"one greedy call {ids}")
        finally:
            stub.CloseSession(pb.CloseSessionRequest(session_id=s), timeout=60)
    print(f"hybrid_serve_check: {file}: sessions: two turns = one call; {first} + {len(ids) - first} "
          f"tokens over two turns = one greedy call: {'FAIL' if failures else 'ok'}")
    return failures


def check_file(stub, file, their, args):
    """-> (failures, teacher-forced steps equal, steps)."""
    model = file[:-len(".gguf")]
    path = os.path.join(args.gguf_dir, file)
    try:
        prompt_ids = [t.id for t in stub.Tokenize(pb.TokenizeRequest(model=model, text=args.prompt.encode())).tokens]
        ids, tops, margins, gaps = quant_check.attnserve_greedy(stub, model, args.prompt, args.n)
    except grpc.RpcError as e:
        return [f"{file}: attnserve: {e.code().name}: {e.details()}"], 0, 0
    if prompt_ids != their["prompt"]:
        return [f"{file}: the prompt's ids differ: attnserve {prompt_ids} != llama.cpp {their['prompt']}"], 0, 0
    failures = []
    ref = reference_logits(path, their["prompt"] + their["greedy"])
    # llama.cpp's own rms logit-gap error against the exact logits: two tokens closer than
    # a few times that are a tie its roundings (and attnserve's) may break either way.
    start = len(their["prompt"]) - 1
    llama_rms, _ = quant_check.rms_max(
        [e for i, top in enumerate(their["top"]) for e in quant_check.gap_errors(top, ref[start + i])])
    near_tie = max(args.near_tie, args.tie_errors * llama_rms)
    ok, agree, line = quant_check.compare(file, their, ids, tops, margins, near_tie, ref)
    print("hybrid_serve_check: " + line)
    if not ok:
        failures.append(line)
    clear, equal, forced, worst, ours_err, theirs_err = quant_check.teacher_forced(
        stub, model, their, near_tie, ref, ref_tie=near_tie)
    (ours_rms, ours_max), (theirs_rms, theirs_max) = quant_check.rms_max(ours_err), quant_check.rms_max(theirs_err)
    print(f"hybrid_serve_check: {file}: teacher-forced: {equal} of {clear} clear steps equal (of "
          f"{len(their['greedy'])}; near-tie below {near_tie:.3f}); largest logit-gap difference between "
          f"the engines {worst:.4f}; logit-gap error against the float64 reference (rms, max): "
          f"attnserve {ours_rms:.2e}, {ours_max:.2e}, llama.cpp {theirs_rms:.2e}, {theirs_max:.2e}")
    failures += [f"{file}: {f}" for f in forced]
    ref_ours = reference_logits(path, their["prompt"] + ids)
    decode_rms, decode_max = quant_check.rms_max(
        [e for i, g in enumerate(gaps) for e in quant_check.gap_errors(g, ref_ours[start + i])])
    print(f"hybrid_serve_check: {file}: attnserve's free-running steps on its own ids, logit-gap error "
          f"against the float64 reference (rms, max): {decode_rms:.2e}, {decode_max:.2e}")
    limit = max(args.error_ratio * theirs_rms, 0.02)
    for what, err in (("teacher-forced", ours_rms), ("free-running", decode_rms)):
        if err > limit:
            failures.append(f"{file}: attnserve's {what} logit gaps are {err:.4f} (rms) from the float64 "
                            f"reference's, more than {limit:.4f} ({args.error_ratio} x llama.cpp's "
                            f"{theirs_rms:.4f}, or 0.02)")
    their["text"] = args.prompt
    failures += check_sessions(stub, file, their, ids, near_tie)
    if clear == 0:
        failures.append(f"{file}: no teacher-forced step had a clear margin: nothing was compared")
    return failures, equal, len(their["greedy"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("llama_json")
    ap.add_argument("prompt")
    ap.add_argument("n", type=int)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--gguf_dir", required=True)
    ap.add_argument("--near_tie", type=float, default=0.25,
                    help="a top-1 margin (logits) below this is a near-tie")
    ap.add_argument("--tie_errors", type=float, default=2.0,
                    help="and so is one below this many times llama.cpp's rms logit-gap error "
                         "against the float64 reference on the file")
    ap.add_argument("--error_ratio", type=float, default=1.5)
    args = ap.parse_intermixed_args()
    with open(args.llama_json) as f:
        theirs = json.load(f)
    stub = rpc.AttnServeStub(grpc.insecure_channel(args.addr))
    failures, agreed, total = [], 0, 0
    for file in args.files:
        if "error" in theirs.get(file, {"error": "not in the JSON"}):
            failures.append(f"{file}: llama.cpp could not load it: {theirs.get(file, {}).get('error')}")
            continue
        f, equal, steps = check_file(stub, file, theirs[file], args)
        failures += f
        agreed += equal
        total += steps
    print(f"hybrid_serve_check: {len(args.files)} files, {agreed} of {total} teacher-forced steps "
          f"compared equal, {len(failures)} failures")
    for f in failures:
        print("hybrid_serve_check: FAIL " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
