#!/usr/bin/python3
"""attnserve against llama.cpp on the quantized GGUF files: reads what
llama_cpp_quant_check.mjs printed, asks a running attnserve_server that serves the same
files for its tokenization of the prompt (Tokenize) and its greedy continuation
(Generate, temperature 0, top-2 log-probabilities), and compares id for id.

Per file, after the prompt's ids:
  - free-running: attnserve's greedy ids (its most likely token at each step, end of
    sequence included) must equal llama.cpp's until the first step where they differ,
    and that step must be one where llama.cpp's top-1 margin (logit of its first minus
    its second) or the float64 reference's (below) is below --near_tie. llama.cpp rounds activations to 8 bits for quantized
    products and keeps an F16 KV cache (its logit gaps are 0.06-0.18 rms, up to 0.74,
    from the exact ones here), so where two tokens are that close either engine may pick
    the other; the contexts differ after that, so nothing later is compared.
  - teacher-forced: for every step i, attnserve continues the prompt plus llama.cpp's
    first i greedy ids by one token (Generate with token ids); where both llama.cpp's
    margin and the reference's are at least --near_tie its id must be llama.cpp's, and
    where the reference's is at least --ref_tie (0.5), the reference's. (llama.cpp's own error reaches 0.74 on
    the K-quant files: one step here had llama.cpp at 0.31 where the exact margin is
    0.06.)
  - accuracy: quant_reference.py's float64 forward on the file's exact weights gives the
    logits both engines approximate; each engine's logit-gap error (its top 5 against its
    top 1, minus the reference's gaps for the same ids) is measured over the
    teacher-forced steps (both engines) and over attnserve's own free-running steps, and
    attnserve's rms error may be at most --error_ratio times llama.cpp's.
Exits 1 on any failure, naming the file and step.

Usage: PYTHONPATH=STUBS quant_check.py SERVER_ADDR LLAMA_CPP_JSON PROMPT N --gguf_dir=DIR
       [--near_tie=0.25] [--error_ratio=1.5] [--min_compared=FRACTION] [FILE_NAMES...]
       (default: every file in the JSON)
"""
import argparse
import json
import os
import sys

import numpy as np

import grpc
from attnserve.v1 import attnserve_pb2 as pb
from attnserve.v1 import attnserve_pb2_grpc as rpc

import quant_reference


def attnserve_greedy(stub, model, prompt, n):
    request = pb.GenerateRequest(model=model, text=prompt.encode(), logprobs=True, top_logprobs=5,
                                 sampling=pb.SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
    ids, tops, margins, gaps = [], [], [], []
    for r in stub.Generate(request):
        if r.HasField("token"):
            ids.append(r.token.id)
            top = r.token.top_logprobs  # by logprob descending, end-of-sequence included
            tops.append(top[0].id)
            margins.append(top[0].logprob - top[1].logprob if len(top) > 1 else float("inf"))
            gaps.append([(t.id, t.logprob) for t in top])
    return ids, tops, margins, gaps


def gap_errors(gaps, ref_row):
    """[(l_j - l_top) - (ref_j - ref_top)] over an engine's top tokens gaps [(id, logit or
    logprob)...], most likely first."""
    (top, top_value), rest = gaps[0], gaps[1:]
    return [(v - top_value) - (ref_row[j] - ref_row[top]) for j, v in rest]


def rms_max(errors):
    e = np.abs(np.asarray(errors, np.float64))
    return (float(np.sqrt(np.mean(e * e))), float(e.max())) if e.size else (0.0, 0.0)


def teacher_forced(stub, model, their, near_tie, ref, ref_tie=0.5):
    """-> (clear steps, equal among them, failures, largest logit-gap difference between
    the engines, attnserve's and llama.cpp's logit-gap errors against the reference logits
    ref (positions of prompt + greedy))."""
    clear = equal = 0
    failures, worst, ours_err, theirs_err = [], 0.0, [], []
    start = len(their["prompt"]) - 1
    for i, want in enumerate(their["greedy"]):
        ids = their["prompt"] + their["greedy"][:i]
        request = pb.GenerateRequest(model=model, tokens=pb.TokenIds(ids=ids), logprobs=True, top_logprobs=5,
                                     sampling=pb.SamplingParams(temperature=0, max_tokens=1, ignore_eos=True))
        token = next(r.token for r in stub.Generate(request) if r.HasField("token"))
        ours = {t.id: t.logprob for t in token.top_logprobs}
        top1 = token.top_logprobs[0].id  # end-of-sequence included (ignore_eos skips it)
        top = their["top"][i]
        for tid, logit in top[1:]:
            if tid in ours and top[0][0] in ours:
                worst = max(worst, abs((ours[tid] - ours[top[0][0]]) - (logit - top[0][1])))
        row = ref[start + i]
        ours_err += gap_errors([(t.id, t.logprob) for t in token.top_logprobs], row)
        theirs_err += gap_errors(top, row)
        ref_order = np.argsort(-row)
        if row[ref_order[0]] - row[ref_order[1]] >= ref_tie and top1 != ref_order[0]:
            failures.append(f"teacher-forced step {i}: attnserve {top1}, the float64 reference {ref_order[0]} "
                            f"(margin {row[ref_order[0]] - row[ref_order[1]]:.4f})")
        if their["margins"][i] < near_tie or ref_margin(row) < near_tie:
            continue  # a near-tie for llama.cpp or for the exact computation
        clear += 1
        if top1 == want:
            equal += 1
        else:
            failures.append(f"teacher-forced step {i}: attnserve {top1}, llama.cpp {want} (margin "
                            f"{their['margins'][i]:.4f}, its top 5 {top}; attnserve's top 5 "
                            f"{sorted(ours.items(), key=lambda kv: -kv[1])})")
    return clear, equal, failures, worst, ours_err, theirs_err


def ref_margin(row):
    top = np.sort(row)[-2:]
    return float(top[1] - top[0])


def compare(file, theirs, ours, our_tops, our_margins, near_tie, ref):
    """-> (ok, agreeing prefix, line). Each step compares attnserve's most likely token
    (our_tops) with llama.cpp's greedy one; ignore_eos makes attnserve continue with another
    token where that is end-of-sequence, which llama.cpp does not, so the comparison ends
    after such a step."""
    their_ids, their_margins = theirs["greedy"], theirs["margins"]
    n = min(len(ours), len(their_ids))
    k = next((i for i in range(n) if our_tops[i] != their_ids[i]), None)
    eos = next((i for i in range(n) if ours[i] != our_tops[i]), None)
    if eos is not None and (k is None or eos < k):
        n, k = eos + 1, None
    agree = n if k is None else k
    gap = max((abs(our_margins[i] - their_margins[i]) for i in range(agree)), default=0.0)
    line = (f"{file}: {agree}/{len(their_ids)} greedy ids equal; largest margin difference over "
            f"them {gap:.4f}; smallest llama.cpp margin over them "
            f"{min(their_margins[:agree], default=float('nan')):.4f}")
    if len(ours) != len(their_ids):
        return False, agree, line + f"; attnserve gave {len(ours)} tokens, llama.cpp {len(their_ids)}"
    if k is None:
        return True, agree, line + (f"; step {eos} is end-of-sequence, compared no further"
                                    if eos is not None else "")
    exact = ref_margin(ref[len(theirs["prompt"]) - 1 + k])
    line += (f"; step {k}: attnserve {our_tops[k]} (margin {our_margins[k]:.4f}), llama.cpp {their_ids[k]} "
             f"(margin {their_margins[k]:.4f}, its top 5 {theirs['top'][k]}), the reference's margin {exact:.4f}")
    if min(their_margins[k], exact) < near_tie:
        return True, agree, line + ": a near-tie, compared no further"
    return False, agree, line + f": neither llama.cpp's nor the reference's margin is below {near_tie}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("llama_json")
    ap.add_argument("prompt")
    ap.add_argument("n", type=int)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--near_tie", type=float, default=0.25)
    # attnserve's own logit-gap error against the float64 reference reaches 0.40 on these
    # files (max over the teacher-forced steps; 0.29 with the default f16 KV cache, 0.39
    # with --kv_cache_type=f32: the weights' rounding dominates), so a reference margin
    # under that may flip whichever engine computes it; the rms error is held by
    # --error_ratio instead.
    ap.add_argument("--ref_tie", type=float, default=0.5,
                    help="where the reference's margin is at least this, attnserve's id must be its")
    ap.add_argument("--gguf_dir", required=True, help="where the files are (for the float64 reference)")
    ap.add_argument("--error_ratio", type=float, default=1.5,
                    help="attnserve's rms logit-gap error against the reference may be this many times llama.cpp's")
    ap.add_argument("--min_compared", type=float, default=0.5,
                    help="fail unless the teacher-forced steps compared equal are this share of all steps")
    args = ap.parse_intermixed_args()
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
            ids, tops, margins, gaps = attnserve_greedy(stub, model, args.prompt, args.n)
        except grpc.RpcError as e:
            failures.append(f"{file}: attnserve: {e.code().name}: {e.details()}")
            print(f"quant_check: {file}: attnserve: {e.code().name}: {e.details()}")
            continue
        if prompt_ids != their["prompt"]:
            failures.append(f"{file}: the prompt's ids differ: attnserve {prompt_ids} != llama.cpp {their['prompt']}")
            continue
        ref = quant_reference.forward(os.path.join(args.gguf_dir, file), their["prompt"] + their["greedy"])
        ok, agree, line = compare(file, their, ids, tops, margins, args.near_tie, ref)
        print("quant_check: " + line)
        if not ok:
            failures.append(line)
        clear, equal, forced_failures, worst, ours_err, theirs_err = teacher_forced(
            stub, model, their, args.near_tie, ref, args.ref_tie)
        (ours_rms, ours_max), (theirs_rms, theirs_max) = rms_max(ours_err), rms_max(theirs_err)
        print(f"quant_check: {file}: teacher-forced: {equal} of {clear} clear steps equal (of "
              f"{len(their['greedy'])}); largest logit-gap difference between the engines {worst:.4f}; "
              f"logit-gap error against the float64 reference (rms, max): attnserve {ours_rms:.4f}, "
              f"{ours_max:.4f}, llama.cpp {theirs_rms:.4f}, {theirs_max:.4f}")
        failures += [f"{file}: {f}" for f in forced_failures]
        # attnserve's own continuation (its decode steps) against the reference on the same ids.
        ref_ours = quant_reference.forward(os.path.join(args.gguf_dir, file), their["prompt"] + ids)
        start = len(their["prompt"]) - 1
        decode_rms, decode_max = rms_max([e for i, g in enumerate(gaps) for e in gap_errors(g, ref_ours[start + i])])
        print(f"quant_check: {file}: attnserve's free-running steps on its own ids, logit-gap error "
              f"against the float64 reference (rms, max): {decode_rms:.4f}, {decode_max:.4f}")
        limit = max(args.error_ratio * theirs_rms, 0.02)
        for what, err in (("teacher-forced", ours_rms), ("free-running", decode_rms)):
            if err > limit:
                failures.append(f"{file}: attnserve's {what} logit gaps are {err:.4f} (rms) from the float64 "
                                f"reference's, more than {args.error_ratio} x llama.cpp's {theirs_rms:.4f}")
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
