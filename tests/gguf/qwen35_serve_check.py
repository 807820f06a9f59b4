#!/usr/bin/python3
"""attnserve on the 2026 families' GGUF files (make_hybrid_gguf.py: qwen35, qwen35moe,
qwen3moe, F32 and Q8_0, random weights) against hybrid_reference.py's float64 forward of
the same files (which gguf_hybrid_reference_test ties to llama.cpp). For each file, with
a running attnserve_server that serves it:
  - accuracy: attnserve's greedy continuation of the prompt with its top-5 logprobs; the
    float64 forward (llama_rounding=False: the file's exact weights, no activation
    rounding) on the prompt and those ids; each step's logit gaps (top-k against top-1)
    against the reference's, whose largest must be under --max_gap_error (F32 files: fp32
    against float64; Q8_0: attnserve rounds each activation row to 8 bits per block of 32
    before a packed product, as llama.cpp does);
  - greedy: attnserve's top-1 is the reference's at every step of its own continuation
    where the reference's top-1 margin is at least --near_tie (teacher-forced on
    attnserve's ids), and its free-running ids equal the reference's own greedy ids up to
    the first difference, which must come at such a near-tie;
  - sessions: two turns (the prompt, then tokens) equal one call on all the tokens; a
    session exported after a turn and imported, and a fork of it, each continued by an
    empty-prompt turn, give the original's continuation id for id and logprob for
    logprob (bit for bit); the original continued likewise gives the one-call greedy ids;
  - DescribeModel's state_bytes_by_mixer: the recurrent kind ("gated_deltanet") has the
    file's recurrent layers and their fixed state (conv (2 n_k d_k + n_v d_v, K - 1) and S
    (n_v, d_v, d_k), fp32) at 1k and 32k tokens alike.
Prints one line per file and check; exits 1 on any failure, naming the file and step.

  - FILE=TWIN names two files of the same weights stored otherwise (moe_merged_gguf.py:
    gate and up experts in one tensor): their greedy steps and top-5 logprobs must be
    equal.

Usage: PYTHONPATH=STUBS qwen35_serve_check.py SERVER_ADDR PROMPT N --gguf_dir=DIR
       [--near_tie=0.05] [--max_gap_error=0.01] [--rounded] FILE_NAMES (or FILE=TWIN)...
"""
import argparse
import os
import sys

import grpc
import numpy as np
from attnserve.v1 import attnserve_pb2 as pb
from attnserve.v1 import attnserve_pb2_grpc as rpc

import hybrid_reference
import quant_check


def greedy_turn(stub, max_tokens, **request):
    """One greedy turn with top-5 logprobs: ([(id, [(id, logprob)...])...], final)."""
    sampling = pb.SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    out, final = [], None
    for m in stub.Generate(pb.GenerateRequest(sampling=sampling, logprobs=True, top_logprobs=5,
                                              **request), timeout=120):
        if m.HasField("token"):
            out.append((m.token.id, [(t.id, t.logprob) for t in m.token.top_logprobs]))
        else:
            final = m.final
    if final is None or final.reason != pb.FINISH_REASON_LENGTH:
        raise RuntimeError(f"a turn finished {final and pb.FinishReason.Name(final.reason)}")
    return out, final


def reference_greedy(model, prompt, n):
    """The float64 forward's own greedy ids and the top-1 margin before each."""
    state = model.new_state()
    logits = model.run(prompt, state)[-1]
    ids, margins = [], []
    for _ in range(n):
        order = np.argsort(-logits)
        ids.append(int(order[0]))
        margins.append(float(logits[order[0]] - logits[order[1]]))
        logits = model.run([ids[-1]], state)[-1]
    return ids, margins


def expected_gdn_bytes(path):
    """(recurrent layers, one layer's state bytes) from the file's metadata."""
    g = hybrid_reference.Gguf(path)
    arch = g.kv["general.architecture"]
    kv = lambda k, d=None: g.kv.get(f"{arch}.{k}", d)
    if arch not in hybrid_reference.GDN_ARCHS:
        return 0, 0
    layers = kv("block_count")
    rec = kv("attention.recurrent_layers")
    interval = kv("full_attention_interval", 4)
    recurrent = [bool(r) for r in rec] if rec is not None else [(i + 1) % interval != 0 for i in range(layers)]
    nk, nv, dk = kv("ssm.group_count"), kv("ssm.time_step_rank"), kv("ssm.state_size")
    dv = kv("ssm.inner_size") // nv
    conv = (2 * nk * dk + nv * dv) * (kv("ssm.conv_kernel") - 1)
    return sum(recurrent), 4 * (conv + nv * dv * dk)


def check_sessions(stub, model, prompt, ids):
    """Turns, export / import and fork against one call. -> failures."""
    failures, first = [], 8
    s = stub.CreateSession(pb.CreateSessionRequest(model=model), timeout=60).id
    made = [s]
    try:
        t1, _ = greedy_turn(stub, first, session_id=s, text=prompt.encode())
        snapshot = b"".join(c.data for c in stub.ExportSession(pb.ExportSessionRequest(session_id=s), timeout=120))
        imported = stub.ImportSession(iter([pb.ImportSessionRequest(data=snapshot)]), timeout=120).id
        made.append(imported)
        fork = stub.ForkSession(pb.ForkSessionRequest(session_id=s), timeout=60).id
        made.append(fork)
        rest = {}
        for what, sid in (("original", s), ("imported", imported), ("fork", fork)):
            rest[what], _ = greedy_turn(stub, len(ids) - first, session_id=sid, text=b"")
        if [i for i, _ in t1] + [i for i, _ in rest["original"]] != ids:
            failures.append(f"{model}: {first} tokens then an empty-prompt turn gave "
                            f"{[i for i, _ in t1 + rest['original']]}, one greedy call {ids}")
        for what in ("imported", "fork"):
            if rest[what] != rest["original"]:
                failures.append(f"{model}: the {what} session continued otherwise than the original: "
                                f"{rest[what][:3]}... != {rest['original'][:3]}...")
        # Two turns (the prompt, then tokens) against one call on all the tokens.
        two = stub.CreateSession(pb.CreateSessionRequest(model=model), timeout=60).id
        made.append(two)
        a, _ = greedy_turn(stub, 5, session_id=two, text=prompt.encode())
        second = ids[2:9]
        b, fb = greedy_turn(stub, 12, session_id=two, tokens=pb.TokenIds(ids=second))
        prompt_ids = [t.id for t in stub.Tokenize(pb.TokenizeRequest(model=model, text=prompt.encode())).tokens]
        every = prompt_ids + [i for i, _ in a] + second
        one, fo = greedy_turn(stub, 12, model=model, tokens=pb.TokenIds(ids=every))
        if [i for i, _ in b] != [i for i, _ in one] or fb.usage.session_position != fo.usage.session_position:
            failures.append(f"{model}: two turns gave {[i for i, _ in b]} at {fb.usage.session_position}, "
                            f"one call {[i for i, _ in one]} at {fo.usage.session_position}")
    finally:
        for sid in made:
            try:
                stub.CloseSession(pb.CloseSessionRequest(session_id=sid), timeout=60)
            except grpc.RpcError:
                pass
    print(f"qwen35_serve_check: {model}: sessions: turns = one call; exported + imported and forked "
          f"sessions continue bit for bit: {'FAIL' if failures else 'ok'}")
    return failures


def check_file(stub, file, args):
    model = file[:-len(".gguf")]
    path = os.path.join(args.gguf_dir, file)
    failures = []
    try:
        prompt_ids = [t.id for t in stub.Tokenize(pb.TokenizeRequest(model=model, text=args.prompt.encode())).tokens]
        steps, _ = greedy_turn(stub, args.n, model=model, text=args.prompt.encode())
    except grpc.RpcError as e:
        return [f"{file}: attnserve: {e.code().name}: {e.details()}"]
    ids = [i for i, _ in steps]
    ref_model = hybrid_reference.Forward(path, llama_rounding=False)
    ref = ref_model.run(prompt_ids + ids, ref_model.new_state())
    start = len(prompt_ids) - 1
    # A step whose token is routed within --route_tie of a tie (in any MoE layer) may go
    # either way under rounding, by whole logits: it is not compared.
    routed = ref_model.route_margin[start:start + len(ids)] >= args.route_tie
    # With --rounded: llama.cpp's roundings emulated (hybrid_reference's llama_rounding) on
    # the same tokens, as a second engine's distance from the exact logits.
    rounded = None
    if args.rounded:
        r_model = hybrid_reference.Forward(path, llama_rounding=True)
        rounded = r_model.run(prompt_ids + ids, r_model.new_state())
    rounded_errors = []
    for i in range(len(ids) if rounded is not None else 0):
        if routed[i]:
            r_row = rounded[start + i]
            r_top = np.argsort(-r_row)[:5]
            rounded_errors += quant_check.gap_errors([(j, r_row[j]) for j in r_top], ref[start + i])
    r_rms, r_worst = quant_check.rms_max(rounded_errors)
    # Two tokens closer than twice those roundings' rms error are a tie either engine's
    # roundings may break (hybrid_serve_check's rule, with llama.cpp emulated).
    near_tie = max(args.near_tie, args.tie_errors * r_rms)
    errors, forced_clear, forced_equal = [], 0, 0
    for i, (tid, top) in enumerate(steps):
        if not routed[i]:
            continue
        row = ref[start + i]
        errors += quant_check.gap_errors(top, row)
        order = np.argsort(-row)
        if row[order[0]] - row[order[1]] < near_tie:
            continue
        forced_clear += 1
        if top[0][0] == order[0]:
            forced_equal += 1
        elif rounded is not None and np.argmax(rounded[start + i]) != order[0]:
            forced_equal += 1  # llama.cpp's roundings move this top-1 too: a rounding tie
        else:
            failures.append(f"{file}: step {i}: attnserve's top-1 {top[0][0]}, the reference's {order[0]} "
                            f"(margin {row[order[0]] - row[order[1]]:.4f})")
    rms, worst = quant_check.rms_max(errors)
    ref_ids, ref_margins = reference_greedy(hybrid_reference.Forward(path, llama_rounding=False),
                                            prompt_ids, args.n)
    agree = next((i for i, (a, b) in enumerate(zip(ids, ref_ids)) if a != b), len(ids))
    if agree < len(ids) and ref_margins[agree] >= near_tie and routed[:agree + 1].all():
        failures.append(f"{file}: greedy ids differ at step {agree} (attnserve {ids[agree]}, reference "
                        f"{ref_ids[agree]}) where the reference's margin is {ref_margins[agree]:.4f}")
    print(f"qwen35_serve_check: {file}: greedy {agree} of {len(ids)} ids equal to the float64 "
          f"reference's{'' if agree == len(ids) else f' (then a near-tie, margin {ref_margins[agree]:.4f})'}; "
          f"teacher-forced top-1 {forced_equal} of {forced_clear} clear steps (margin {near_tie:.3f})"
          f"{'' if routed.all() else f' ({int((~routed).sum())} steps routed within {args.route_tie} of a tie left out)'}"
          f"; logit-gap error (rms, max) {rms:.2e}, {worst:.2e} against the "
          f"exact float64 reference"
          + (f" (llama.cpp's roundings emulated: {r_rms:.2e}, {r_worst:.2e})" if args.rounded else ""))
    # Quantized files: no further from the exact logits than error_ratio x the emulated
    # llama.cpp roundings, or the limits given.
    rms_limit = max(args.max_gap_rms, args.error_ratio * r_rms)
    max_limit = max(args.max_gap_error, args.error_ratio * r_worst)
    if worst > max_limit or rms > rms_limit:
        failures.append(f"{file}: logit-gap error (rms, max) {rms:.4f}, {worst:.4f} over "
                        f"{rms_limit:.4f}, {max_limit:.4f}")
    # At least a quarter of the steps compared (qwen35moe-q8_0: its emulated llama.cpp
    # roundings are 0.63 rms from the exact logits, so margins under 1.25 are ties).
    if forced_clear < args.n // 4:
        failures.append(f"{file}: {forced_clear} steps of {args.n} compared (clear margins, clear "
                        f"routings): too few")
    failures += check_sessions(stub, model, args.prompt, ids)
    layers, per_layer = expected_gdn_bytes(path)
    info = stub.DescribeModel(pb.DescribeModelRequest(name=model), timeout=60)
    kinds = {m.mixer: m for m in info.state_bytes_by_mixer}
    if layers:
        g = kinds.get("gated_deltanet")
        if g is None or g.layers != layers or g.bytes_at_1k != layers * per_layer or g.bytes_at_32k != g.bytes_at_1k:
            failures.append(f"{file}: state_bytes_by_mixer {list(info.state_bytes_by_mixer)}: want gated_deltanet "
                            f"x {layers} of {per_layer} bytes at any context")
    elif "gated_deltanet" in kinds:
        failures.append(f"{file}: a model without Gated DeltaNet layers reports some")
    print(f"qwen35_serve_check: {file}: state by mixer: "
          + ", ".join(f"{m.mixer} x {m.layers}: {m.bytes_at_1k} B at 1k, {m.bytes_at_32k} B at 32k"
                      for m in info.state_bytes_by_mixer))
    return failures


def check_twins(stub, pair, args):
    """FILE=TWIN: the same weights stored otherwise (moe_merged_gguf.py) serve alike, id for
    id and logprob for logprob. -> failures."""
    a, b = (f[:-len(".gguf")] for f in pair.split("="))
    ours = {}
    for model in (a, b):
        ours[model], _ = greedy_turn(stub, args.n, model=model, text=args.prompt.encode())
    same = ours[a] == ours[b]
    print(f"qwen35_serve_check: {b} serves as {a}: {args.n} greedy steps with their top-5 logprobs "
          f"{'equal' if same else 'DIFFER'}")
    return [] if same else [f"{b}: {ours[b][:2]}... != {a}'s {ours[a][:2]}..."]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("prompt")
    ap.add_argument("n", type=int)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--gguf_dir", required=True)
    ap.add_argument("--near_tie", type=float, default=0.05,
                    help="a reference top-1 margin (logits) below this is a near-tie")
    ap.add_argument("--max_gap_error", type=float, default=0.01,
                    help="largest logit-gap error against the float64 reference")
    ap.add_argument("--max_gap_rms", type=float, default=0.005,
                    help="largest rms logit-gap error against the float64 reference")
    ap.add_argument("--rounded", action="store_true",
                    help="also run the reference with llama.cpp's roundings (8-bit activations "
                         "before each product of a quantized matrix, K and V in F16): attnserve's "
                         "error may be --error_ratio x that one's, and a top-1 it moves is a tie")
    ap.add_argument("--error_ratio", type=float, default=1.5)
    ap.add_argument("--tie_errors", type=float, default=2.0,
                    help="with --rounded, a margin below this many times the emulated roundings' "
                         "rms logit-gap error is a near-tie too")
    ap.add_argument("--route_tie", type=float, default=1e-4,
                    help="a MoE routing margin (router probabilities) below this may go either way")
    args = ap.parse_intermixed_args()
    stub = rpc.AttnServeStub(grpc.insecure_channel(args.addr))
    failures = []
    for file in args.files:
        failures += check_twins(stub, file, args) if "=" in file else check_file(stub, file, args)
    print(f"qwen35_serve_check: {len(args.files)} files, {len(failures)} failures")
    for f in failures:
        print("qwen35_serve_check: FAIL " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
