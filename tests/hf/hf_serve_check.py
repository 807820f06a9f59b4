#!/usr/bin/python3
"""The checks of hf_serve_test.sh, through a real gRPC channel to attnserve_server serving
make_reference.py's directories and hybrid_reference.py's (byte tokenizer; recurrent
state bytes from config.json) (tests/README.md, "tests/hf"). Each command prints what it checked
and exits 1 with the first difference.

  serve  ADDR OUT NAME...   for each directory NAME: the model is listed with its
                            tokenizer, KV heads and state bytes; Tokenize's ids
                            are python3-sentencepiece's; a greedy Generate of 40 tokens is
                            PyTorch's continuation (ids and bytes); a session of two turns
                            (text, then tokens) continues exactly as one call on all the
                            tokens, and a session continued with an empty prompt gives
                            PyTorch's continuation
  export ADDR OUT NAME FILE a session of one turn exported to FILE (and FILE.json: what it
                            must continue with); forks of it continue exactly as it does
  import ADDR OUT NAME FILE the snapshot FILE imported (another process) continues exactly
                            as the exported session did, and as PyTorch
Needs the generated stubs on PYTHONPATH (lib.sh python_stubs) and python3-sentencepiece.
"""
import json
import math
import os
import sys

import grpc
import sentencepiece as spm
from attnserve.v1 import attnserve_pb2 as pb
from attnserve.v1 import attnserve_pb2_grpc as pb_grpc

TIMEOUT = 60
FIRST_TURN = 10  # tokens of the first turn; the rest of PyTorch's 40 come after it
SECOND_TEXT = "And God said, Let there be light"  # the second turn's tokens


class Mismatch(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Mismatch(what)


BYTE_TOKENIZER = "AttnServeByteTokenizer"  # hybrid_reference.py's directories


class Dir:
    """make_reference.py's (or hybrid_reference.py's) outputs for one directory."""

    def __init__(self, out, name):
        self.dir_name = name
        self.model_dir = os.path.join(out, "models", name)
        with open(os.path.join(out, "reference", name, "reference.json")) as f:
            self.ref = json.load(f)
        self.name = self.ref["model"]
        with open(os.path.join(self.model_dir, "config.json")) as f:
            # Python's json reads back the Infinity it wrote (time_step_limit).
            self.config = json.load(f)
        self.bytes = self.config.get("tokenizer_class") == BYTE_TOKENIZER
        self.prompt_ids = self.ref["ids"]  # BOS first (the byte tokenizer adds none)
        self.greedy = self.ref["greedy"]["ids"]
        if self.bytes:
            self.sp = None
            self.second = list(SECOND_TEXT.encode())
        else:
            self.sp = spm.SentencePieceProcessor(
                model_file=os.path.join(self.model_dir, "tokenizer.model"))
            self.second = self.sp.encode(SECOND_TEXT)  # no BOS: continues a session

    def piece(self, i):
        return str(i) if self.bytes else self.sp.id_to_piece(i)


def generate(stub, what, max_tokens, **request):
    """One greedy turn: (ids, bytes, final). Fails unless it ends by length or stop."""
    sampling = pb.SamplingParams(temperature=0, max_tokens=max_tokens)
    ids, text, final = [], b"", None
    for m in stub.Generate(pb.GenerateRequest(sampling=sampling, **request), timeout=TIMEOUT):
        if m.HasField("token"):
            ids.append(m.token.id)
            text += m.token.text
        else:
            final = m.final
    expect(final is not None, f"{what}: no final message")
    expect(final.reason in (pb.FINISH_REASON_LENGTH, pb.FINISH_REASON_STOP),
           f"{what}: finished {pb.FinishReason.Name(final.reason)}: {final.error}")
    return ids, text, final


def same_ids(what, got, want, d):
    expect(got == want, f"{what}: got {got}\n  want {want}\n  (pieces got "
           f"{[d.piece(i) for i in got]}; PyTorch's smallest greedy margin "
           f"{d.ref['greedy']['min_margin']})")


def hybrid_state_bytes(cfg, context, kv_bytes):
    """The same for hybrid_reference.py's families: per attention layer a KV cache; per
    Mamba-2 layer its conv state, (inner + 2 groups x state) channels x (kernel - 1), and
    its SSM state, heads x head_dim x state; per short-conv layer hidden x (L_cache - 1).
    KV elements of kv_bytes, the rest fp32."""
    t, dim = cfg["model_type"], cfg["hidden_size"]
    if t == "mamba2":
        kinds, p = ["mamba"] * cfg["num_hidden_layers"], ""
    elif t == "granitemoehybrid":
        kinds, p = cfg["layer_types"], "mamba_"
    else:
        kinds, p = ["conv" if k == "conv" else "attention" for k in cfg["layer_types"]], None
    floats = kv = 0
    for kind in kinds:
        if kind == "attention":
            d = dim // cfg["num_attention_heads"]
            kv += cfg["num_key_value_heads"] * context * 2 * d
        elif kind == "conv":
            floats += dim * (cfg["conv_L_cache"] - 1)
        else:
            inner = int(cfg[p + "expand"] * dim)
            groups = cfg[p + "n_groups"] if p else cfg["n_groups"]
            state = cfg[p + "d_state"] if p else cfg["state_size"]
            kernel = cfg[p + "d_conv"] if p else cfg["conv_kernel"]
            floats += (inner + 2 * groups * state) * (kernel - 1) + inner * state
    return floats * 4 + kv * kv_bytes


def expected_state_bytes(cfg, context, kv_bytes):
    """Bytes of one session's state after `context` tokens, from config.json alone: a KV
    cache of K and V per KV head and token; for taylor order N the fixed state per KV
    head, C(d + N, N) features x (d_v + 1) floats (numerator and normaliser). KV caches
    store kv_bytes per element (the server's --kv_cache_type), fixed states 4."""
    if cfg.get("tokenizer_class") == BYTE_TOKENIZER:
        return hybrid_state_bytes(cfg, context, kv_bytes)
    layers, hkv = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
    # Hugging Face's head_dim when the config has none (Qwen2Config): hidden / heads.
    d = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    attention = cfg.get("attention", {"module": "softmax"})  # Qwen's configs: none
    if attention["module"] == "taylor":
        return layers * hkv * math.comb(d + attention["order"], attention["order"]) * (d + 1) * 4
    return layers * hkv * context * 2 * d * kv_bytes


def check_listed(stub, dirs):
    """Every directory listed under its config.json name, with its tokenizer, KV heads
    and state sizes."""
    infos = {m.name: m for m in stub.ListModels(pb.ListModelsRequest(), timeout=TIMEOUT).models}
    for d in dirs:
        expect(d.name in infos, f"{d.name} is not listed by ListModels: {sorted(infos)}")
        m, cfg = infos[d.name], d.config
        tok = m.tokenizer
        got = (tok.kind, tok.vocab_size, tok.bos_id, tok.add_bos, list(tok.eos_ids))
        if d.bytes:
            want = ("bytes", 259, 256, False, [257])
        else:
            want = ("sentencepiece", d.sp.get_piece_size(), d.sp.bos_id(), True,
                    [d.sp.eos_id()])
        expect(got == want, f"{d.name}: tokenizer (kind, vocab, bos, add_bos, eos) {got}, "
               f"the directory's is {want}")
        kv = cfg.get("num_key_value_heads", 1)  # a pure Mamba-2 model names one head of dim
        expect(m.num_kv_heads == kv,
               f"{d.name}: num_kv_heads {m.num_kv_heads}, config.json says {kv}")
        for context, got in ((1024, m.state_bytes_per_session_at_1k),
                             (16384, m.state_bytes_per_session_at_16k)):
            kv_bytes = {"f32": 4, "f16": 2, "bf16": 2}.get(m.kv_cache_type, 4)
            want = expected_state_bytes(cfg, context, kv_bytes)
            expect(got == want, f"{d.name}: state bytes at {context} tokens {got}, "
                   f"config.json gives {want}")
    print(f"listed with their tokenizer, KV heads and state bytes: "
          f"{', '.join(d.name for d in dirs)}")


def check_tokenize(stub, d):
    """Tokenize's ids for the fixed text are python3-sentencepiece's with BOS, as a
    session's first turn of that text would append them; its tokens' bytes are the text."""
    reply = stub.Tokenize(pb.TokenizeRequest(model=d.name, text=d.ref["text"].encode()),
                          timeout=TIMEOUT)
    same_ids(f"{d.name}: Tokenize", [t.id for t in reply.tokens], d.prompt_ids, d)
    text = b"".join(t.text for t in reply.tokens)
    expect(text == d.ref["text"].encode(),
           f"{d.name}: Tokenize's token bytes {text!r} are not the text")
    print(f"{d.name}: Tokenize gives {'the bytes' if d.bytes else 'sentencepiece'}' "
          f"{len(d.prompt_ids)} ids")


def check_greedy(stub, d):
    ids, text, final = generate(stub, f"{d.name}: greedy", len(d.greedy), model=d.name,
                                text=d.ref["text"].encode())
    same_ids(f"{d.name}: greedy continuation", ids, d.greedy, d)
    want = bytes.fromhex(d.ref["greedy"]["bytes_hex"])  # the pieces' bytes in context
    expect(text == want, f"{d.name}: greedy bytes {text!r}, the tokenizer's pieces give "
           f"{want!r}")
    expect(final.usage.prompt_tokens == len(d.prompt_ids),
           f"{d.name}: prompt_tokens {final.usage.prompt_tokens}, the tokenizer gives "
           f"{len(d.prompt_ids)} ids")
    print(f"{d.name}: greedy {len(ids)} tokens = PyTorch's: "
          f"{text.decode(errors='backslashreplace')!r}")


def check_session(stub, d):
    """Turn 1 the fixed text, turn 2 tokens: the same as one call on all the tokens; and
    a session continued with an empty prompt is PyTorch's continuation."""
    s = stub.CreateSession(pb.CreateSessionRequest(model=d.name), timeout=TIMEOUT).id
    try:
        t1, _, _ = generate(stub, f"{d.name}: turn 1", FIRST_TURN, session_id=s,
                            text=d.ref["text"].encode())
        same_ids(f"{d.name}: turn 1", t1, d.greedy[:FIRST_TURN], d)
        t2, text2, f2 = generate(stub, f"{d.name}: turn 2", 20, session_id=s,
                                 tokens=pb.TokenIds(ids=d.second))
        all_tokens = d.prompt_ids + t1 + d.second
        one, text1, f1 = generate(stub, f"{d.name}: one call", 20, model=d.name,
                                  tokens=pb.TokenIds(ids=all_tokens))
        same_ids(f"{d.name}: two turns vs one call on all {len(all_tokens)} tokens", t2, one, d)
        expect(text2 == text1, f"{d.name}: two turns' bytes {text2!r}, one call's {text1!r}")
        expect(f2.usage.session_position == f1.usage.session_position,
               f"{d.name}: session at {f2.usage.session_position} after two turns, one "
               f"call at {f1.usage.session_position}")
    finally:
        stub.CloseSession(pb.CloseSessionRequest(session_id=s), timeout=TIMEOUT)
    s = stub.CreateSession(pb.CreateSessionRequest(model=d.name), timeout=TIMEOUT).id
    try:
        t1, _, _ = generate(stub, f"{d.name}: turn 1", FIRST_TURN, session_id=s,
                            text=d.ref["text"].encode())
        rest, _, _ = generate(stub, f"{d.name}: empty-prompt turn", len(d.greedy) - FIRST_TURN,
                              session_id=s, text=b"")
        same_ids(f"{d.name}: {FIRST_TURN} tokens then an empty-prompt turn", t1 + rest,
                 d.greedy, d)
    finally:
        stub.CloseSession(pb.CloseSessionRequest(session_id=s), timeout=TIMEOUT)
    print(f"{d.name}: two turns = one call ({len(all_tokens)} tokens); "
          f"{FIRST_TURN} + {len(d.greedy) - FIRST_TURN} tokens over two turns = PyTorch's")


def continuations(stub, d, session, what):
    """What a session after turn 1 continues with: (tokens turn, empty-prompt turn), each
    on a fork of `session` so that both start from the same state."""
    forks = [stub.ForkSession(pb.ForkSessionRequest(session_id=session), timeout=TIMEOUT).id
             for _ in range(2)]
    second, _, _ = generate(stub, f"{what}: tokens turn", 20, session_id=forks[0],
                            tokens=pb.TokenIds(ids=d.second))
    rest, _, _ = generate(stub, f"{what}: empty-prompt turn", len(d.greedy) - FIRST_TURN,
                          session_id=forks[1], text=b"")
    same_ids(f"{what}: the empty-prompt turn vs PyTorch", rest, d.greedy[FIRST_TURN:], d)
    for f in forks:
        stub.CloseSession(pb.CloseSessionRequest(session_id=f), timeout=TIMEOUT)
    return second, rest


def export(stub, d, path):
    s = stub.CreateSession(pb.CreateSessionRequest(model=d.name), timeout=TIMEOUT).id
    t1, _, _ = generate(stub, f"{d.name}: turn 1", FIRST_TURN, session_id=s,
                        text=d.ref["text"].encode())
    same_ids(f"{d.name}: turn 1", t1, d.greedy[:FIRST_TURN], d)
    snapshot = b"".join(c.data for c in stub.ExportSession(
        pb.ExportSessionRequest(session_id=s), timeout=TIMEOUT))
    with open(path, "wb") as f:
        f.write(snapshot)
    position = stub.GetSession(pb.GetSessionRequest(session_id=s), timeout=TIMEOUT).position
    second, rest = continuations(stub, d, s, f"{d.name}: forks on the exporter")
    # The session itself, after its forks: the same tokens turn.
    own, _, _ = generate(stub, f"{d.name}: the exported session", 20, session_id=s,
                         tokens=pb.TokenIds(ids=d.second))
    same_ids(f"{d.name}: the exported session vs its fork", own, second, d)
    stub.CloseSession(pb.CloseSessionRequest(session_id=s), timeout=TIMEOUT)
    with open(path + ".json", "w") as f:
        json.dump({"position": position, "second": second, "rest": rest}, f)
    print(f"{d.name}: exported {len(snapshot)} bytes at position {position}; forks "
          f"continue as the session does and as PyTorch")


def import_(stub, d, path):
    with open(path, "rb") as f:
        snapshot = f.read()
    with open(path + ".json") as f:
        want = json.load(f)
    s = stub.ImportSession(iter([pb.ImportSessionRequest(data=snapshot)]), timeout=TIMEOUT)
    expect(s.model == d.name, f"{d.name}: the import is of model {s.model!r}")
    expect(s.position == want["position"],
           f"{d.name}: imported at position {s.position}, exported at {want['position']}")
    second, rest = continuations(stub, d, s.id, f"{d.name}: the import")
    same_ids(f"{d.name}: the import's tokens turn vs the exporter's", second, want["second"], d)
    same_ids(f"{d.name}: the import's empty-prompt turn vs the exporter's", rest, want["rest"], d)
    stub.CloseSession(pb.CloseSessionRequest(session_id=s.id), timeout=TIMEOUT)
    print(f"{d.name}: the import (another process) continues exactly as the exported "
          f"session and as PyTorch")


def main(argv):
    command, addr, out = argv[1], argv[2], argv[3]
    stub = pb_grpc.AttnServeStub(grpc.insecure_channel(addr))
    try:
        if command == "serve":
            dirs = [Dir(out, n) for n in argv[4:]]
            check_listed(stub, dirs)
            for d in dirs:
                check_tokenize(stub, d)
                check_greedy(stub, d)
                check_session(stub, d)
        elif command == "export":
            export(stub, Dir(out, argv[4]), argv[5])
        elif command == "import":
            import_(stub, Dir(out, argv[4]), argv[5])
        else:
            raise SystemExit(f"unknown command {command!r}")
    except Mismatch as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    except AttributeError as e:  # a message or field this server's proto does not have
        print(f"FAIL: the server's proto lacks what the check uses: {e}", file=sys.stderr)
        return 1
    except grpc.RpcError as e:
        print(f"FAIL: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
