#!/usr/bin/python3
"""What a running attnserve_server reports of hybrid models' state, against the files
themselves: for each GGUF file named, hybrid_reference.py's reading of it (the layers'
kinds from head_count_kv, its recurrent states' shapes: Mamba-2's conv and SSM states,
the short convolution's taps) gives one session's bytes per layer kind, fixed for a
recurrent layer and 2 x KV heads x head size x the KV cache's element bytes (/v1/models'
kv_cache_type: 2 for the default f16) per token for an attention layer, and from those:
  - /v1/models' entry and gRPC DescribeModel: state_bytes_by_mixer (kind, layers, bytes
    at 1k and 32k tokens, kinds in the order they first appear), the totals at 1k and
    16k, kv_cache_bytes_per_token (the same shape with every layer full attention) and
    break_even_context (the first context from which a session of the hybrid holds less
    than that all-attention model's KV cache);
  - a real session: after each of two turns, GetSession's state_bytes is at least the
    fixed bytes plus the attention layers' bytes per token times the tokens its state
    holds (its position less the last sampled token, which the next turn appends; a KV
    cache's capacity grows by doubling), and the same session exported and imported is
    charged exactly that.
Prints one line per model; exits 1 naming the first figure that differs.

Usage: PYTHONPATH=STUBS hybrid_models_check.py HTTP_ADDR GRPC_ADDR GGUF_DIR NAME...
"""
import json
import os
import sys
import urllib.request

import grpc
from attnserve.v1 import attnserve_pb2 as pb
from attnserve.v1 import attnserve_pb2_grpc as rpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gguf"))
import hybrid_reference  # noqa: E402

F32 = 4


def expected(path, kv_bytes):
    """(kinds [(mixer, layers, fixed bytes, bytes per token)], all-attention bytes per token)
    of the GGUF file at path, with KV caches of kv_bytes per element (the server's
    --kv_cache_type) and fp32 recurrent states."""
    model = hybrid_reference.Forward(path)
    state = model.new_state()
    recurrent_kind = {"lfm2": "shortconv"}.get(model.arch, "mamba2")
    kinds = {}
    for il in range(model.layers):
        if model.recurrent[il]:
            kind, fixed, per_token = recurrent_kind, sum(a.size for a in state["layers"][il].values()) * F32, 0
        else:
            kind, fixed, per_token = "attention", 0, 2 * model.heads_kv[il] * model.hd * kv_bytes
        k = kinds.setdefault(kind, [kind, 0, 0, 0])
        k[1] += 1
        k[2] += fixed
        k[3] += per_token
    attention_heads = max(model.heads_kv)
    return list(kinds.values()), model.layers * 2 * attention_heads * model.hd * kv_bytes


def bytes_at(kinds, n):
    return sum(fixed + per_token * n for _, _, fixed, per_token in kinds)


def break_even(kinds, full_per_token):
    n = 1
    while bytes_at(kinds, n) >= full_per_token * n:
        n += 1
    return n


def fail(what):
    print(f"hybrid_models_check: FAIL: {what}")
    sys.exit(1)


def same(got, want, what):
    if got != want:
        fail(f"{what}: {got}, expected {want}")


def main():
    http, addr, gguf_dir, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only
    listed = {m["id"]: m for m in json.load(direct.open(f"http://{http}/v1/models", timeout=10))["data"]}
    stub = rpc.AttnServeStub(grpc.insecure_channel(addr))
    for name in names:
        m = listed.get(name) or fail(f"/v1/models lists no {name}")
        kv_bytes = {"f32": 4, "f16": 2, "bf16": 2}.get(m.get("kv_cache_type")) or \
            fail(f"{name}: /v1/models kv_cache_type {m.get('kv_cache_type')!r}")
        kinds, full = expected(os.path.join(gguf_dir, name + ".gguf"), kv_bytes)
        want = [{"mixer": k, "layers": n, "bytes_at_1k": bytes_at([(k, n, f, t)], 1024),
                 "bytes_at_32k": bytes_at([(k, n, f, t)], 32768)} for k, n, f, t in kinds]
        even = break_even(kinds, full)
        same(m["state_bytes_by_mixer"], want, f"{name}: /v1/models state_bytes_by_mixer")
        same(m["state_bytes_per_session_at_1k"], bytes_at(kinds, 1024), f"{name}: /v1/models at 1k")
        same(m["state_bytes_per_session_at_16k"], bytes_at(kinds, 16384), f"{name}: /v1/models at 16k")
        same(m["kv_cache_bytes_per_token"], full, f"{name}: /v1/models kv_cache_bytes_per_token")
        same(m["break_even_context"], even, f"{name}: /v1/models break_even_context")

        info = stub.DescribeModel(pb.DescribeModelRequest(name=name), timeout=10)
        got = [{"mixer": k.mixer, "layers": k.layers, "bytes_at_1k": k.bytes_at_1k,
                "bytes_at_32k": k.bytes_at_32k} for k in info.state_bytes_by_mixer]
        same(got, want, f"{name}: DescribeModel state_bytes_by_mixer")
        same((info.state_bytes_per_session_at_1k, info.state_bytes_per_session_at_16k, info.break_even_context),
             (bytes_at(kinds, 1024), bytes_at(kinds, 16384), even), f"{name}: DescribeModel at 1k, 16k, break-even")

        # A session's own figure after each of two turns (at least what its position
        # holds: a KV cache's capacity grows by doubling), and exactly that once exported
        # and imported.
        session = stub.CreateSession(pb.CreateSessionRequest(model=name), timeout=10).id
        try:
            for text in (b"In the beginning", b" God created the heaven and the earth."):
                sampling = pb.SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
                for _ in stub.Generate(pb.GenerateRequest(session_id=session, text=text, sampling=sampling),
                                       timeout=60):
                    pass
                s = stub.GetSession(pb.GetSessionRequest(session_id=session), timeout=10)
                # position counts the last sampled token, which the next turn appends.
                held = s.position - 1
                if s.state_bytes < bytes_at(kinds, held):
                    fail(f"{name}: a session holding {held} tokens is charged {s.state_bytes} state bytes, "
                         f"expected at least {bytes_at(kinds, held)}")
            snapshot = [c.data for c in stub.ExportSession(pb.ExportSessionRequest(session_id=session), timeout=60)]
            imported = stub.ImportSession(iter([pb.ImportSessionRequest(data=d) for d in snapshot]), timeout=60)
            same((imported.position, imported.state_bytes), (s.position, bytes_at(kinds, held)),
                 f"{name}: an imported session's position and state_bytes")
            stub.CloseSession(pb.CloseSessionRequest(session_id=imported.id), timeout=10)
        finally:
            stub.CloseSession(pb.CloseSessionRequest(session_id=session), timeout=10)
        print(f"hybrid_models_check: {name}: " +
              ", ".join(f"{n} {k} {f} bytes + {t}/token" for k, n, f, t in kinds) +
              f"; all attention {full}/token; break-even {even} tokens; /v1/models, DescribeModel, "
              f"a session at position {s.position} ({s.state_bytes} bytes) and its import "
              f"({imported.state_bytes}) agree")


if __name__ == "__main__":
    main()
